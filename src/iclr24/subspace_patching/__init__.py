"""Subspace activation patching and its interpretability illusion.

Aleksandar Makelov, Georg Lange, Neel Nanda. "Is This the Subspace You Are Looking For? An
Interpretability Illusion for Subspace Activation Patching". ICLR 2024.
https://arxiv.org/abs/2311.17030

    from iclr24.interp import HookedLM
    from iclr24.subspace_patching import EndPatcher, train_das, rowspace_nullspace_split, fldd
    patcher = EndPatcher(lm, "blocks.21.mlp.hook_post", pairs)     # base/source prompts, END token
    das = train_das(patcher, k=1)                                   # a learned 1-d subspace
    v = das.basis[:, 0]
    v_row, v_null = rowspace_nullspace_split(v, lm.mlp_out_weight(21))
    fldd(patcher.logit_diff(lambda w, u: patch_direction(w, u, v_row)), patcher.logit_diff())
"""

from iclr24.subspace_patching.das import DistributedAlignmentSearch, EndPatcher, PatchingPairs, train_das
from iclr24.subspace_patching.name_movers import find_name_movers, query_patch_hooks, query_read_basis
from iclr24.subspace_patching.patching import (
    dormancy_statistics,
    fldd,
    interchange_accuracy,
    patch_direction,
    patch_subspace,
    rowspace_nullspace_split,
)
from iclr24.subspace_patching.toy import PlantedDormantMLP, toy_hidden, toy_output, toy_patches

__all__ = [
    "DistributedAlignmentSearch",
    "EndPatcher",
    "PatchingPairs",
    "PlantedDormantMLP",
    "dormancy_statistics",
    "find_name_movers",
    "fldd",
    "interchange_accuracy",
    "patch_direction",
    "patch_subspace",
    "query_patch_hooks",
    "query_read_basis",
    "rowspace_nullspace_split",
    "toy_hidden",
    "toy_output",
    "toy_patches",
    "train_das",
]
