"""Our distributed alignment search (DAS) vs pyvene's RotatedSpaceIntervention: held-out FLDD and training time.

Same model (the embedded SmolLM2-135M-Instruct, offline), same IOI pairs (ABB <-> BAB position swaps, built by
``subspace_patching.experiment.position_swap_pairs``: train templates (0, 1) and the first half of the single-token
names, test templates (2, 3, 5) and the other half), same site (the residual stream entering block 23, at the END
token only), a 1-d subspace, the same recipe (Adam lr 0.01 decayed linearly to 0.1x over the epochs, batches of 20
pairs of one length, cross-entropy of the patched END logits against the answer the patch should produce), the
model frozen.

Both learned directions are scored by the same code: our ``patch_direction`` on a test ``EndPatcher``, FLDD in %
(100 = the logit difference erased, above 100 = flipped). pyvene's own intervened run on the test pairs is reported
too (it should agree with the first to rounding: a check that the direction was read with pyvene's orientation,
``rotated = x @ W``, so the patched subspace is ``W[:, 0]``). Times are plain wall times of both trainings in one run
(one thread); ours also pays for building the ``EndPatcher`` (a clean run of every pair, prefix keys and values
cached), listed apart and included in the ratio. pyvene re-runs the base and source prompts through the whole model
every step, our patcher re-runs only the END token from block 23 on.

pyvene (``pip install pyvene``) is a benchmark peer, not a dependency.

    python benchmarks/subspace_patching.py [epochs]
"""

from __future__ import annotations

import sys
import time
from importlib.metadata import version

import torch
import torch.nn.functional as F

from iclr24.interp import TEXT_NAMES, HookedLM, single_token_words
from iclr24.subspace_patching import EndPatcher, fldd, interchange_accuracy, patch_direction, train_das
from iclr24.subspace_patching.experiment import position_swap_pairs

LAYER = 23
HOOK = f"blocks.{LAYER}.hook_resid_pre"


def length_batches(pairs, batch_size: int) -> list[tuple[torch.Tensor, int]]:
    """Rows of pairs of one length, ``batch_size`` at a time, in the order ``EndPatcher`` builds its batches."""
    out = []
    for length in pairs.lengths.unique().tolist():
        group = torch.nonzero(pairs.lengths == length).flatten()
        out += [(group[i:i + batch_size], int(length)) for i in range(0, len(group), batch_size)]
    return out


def pyvene_model(pv, lm):
    """An IntervenableModel with a 1-d RotatedSpaceIntervention on the input of ``model.layers[LAYER]``."""
    config = pv.IntervenableConfig(representations=[{
        "layer": LAYER, "component": "block_input", "unit": "pos", "max_number_of_units": 1,
        "low_rank_dimension": 1, "intervention_type": pv.RotatedSpaceIntervention}])
    model = pv.IntervenableModel(config, lm.model)
    model.disable_model_gradients()
    (intervention,) = model.interventions.values()
    intervention.set_interchange_dim(1)  # RotatedSpaceIntervention swaps all embed_dim coordinates by default
    return model, intervention


def pyvene_end_logits(model, pairs, rows: torch.Tensor, length: int) -> torch.Tensor:
    """Intervened logits at END, ``(B, vocab)``: the source's END activation patched into the base's END."""
    end = [[[length - 1]] * len(rows)]
    _, out = model({"input_ids": pairs.base[rows, :length]}, [{"input_ids": pairs.source[rows, :length]}],
                   unit_locations={"sources->base": (end, end)}, use_cache=False)
    return out.logits[:, -1]


def train_pyvene(model, intervention, pairs, *, epochs: int, lr: float, batch_size: int, seed: int) -> None:
    """Our ``train_das`` recipe, with pyvene doing the patched forward passes."""
    batches = length_batches(pairs, batch_size)
    opt = torch.optim.Adam(intervention.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=0.1, total_iters=epochs)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        for i in torch.randperm(len(batches), generator=gen).tolist():
            rows, length = batches[i]
            loss = F.cross_entropy(pyvene_end_logits(model, pairs, rows, length), pairs.other[rows])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        schedule.step()


def main(epochs: int = 10, n_train: int = 60, n_test: int = 60, batch_size: int = 20, lr: float = 0.01,
         seed: int = 0) -> None:
    torch.set_num_threads(1)
    lm = HookedLM.from_llm()
    names = single_token_words(TEXT_NAMES, lm.tokenizer)
    half = len(names) // 2
    train = position_swap_pairs(lm, n_train, (0, 1), names[:half], seed)
    test = position_swap_pairs(lm, n_test, (2, 3, 5), names[half:], seed + 1)
    p_test = EndPatcher(lm, HOOK, test, batch_size=batch_size)
    ld_clean = p_test.logit_diff()

    def scored(v: torch.Tensor) -> tuple[float, float]:
        ld = p_test.logit_diff(lambda w, u: patch_direction(w, u, v))
        return fldd(ld, ld_clean), interchange_accuracy(ld)

    start = time.perf_counter()
    p_train = EndPatcher(lm, HOOK, train, batch_size=batch_size)
    setup_ours = time.perf_counter() - start
    start = time.perf_counter()
    das = train_das(p_train, k=1, epochs=epochs, lr=lr, seed=seed)
    train_ours = time.perf_counter() - start
    v_ours = das.basis[:, 0].detach()
    rows = {"ours (train_das)": (*scored(v_ours), None, setup_ours, train_ours)}

    print(f"SmolLM2-135M-Instruct, {HOOK} (pyvene: block_input of layer {LAYER}) at END, 1-d DAS; "
          f"{len(train)} train / {len(test)} test pairs, {epochs} epochs, batch {batch_size}, Adam lr {lr} -> 0.1x")
    try:
        import pyvene as pv
    except ImportError:
        print("pyvene is not installed (pip install pyvene): only our numbers")
        pv = None
    v_theirs = None
    if pv is not None:
        torch.manual_seed(seed)
        model, intervention = pyvene_model(pv, lm)
        start = time.perf_counter()
        train_pyvene(model, intervention, train, epochs=epochs, lr=lr, batch_size=batch_size, seed=seed)
        train_theirs = time.perf_counter() - start
        v_theirs = intervention.rotate_layer.weight[:, 0].detach()  # pyvene rotates x @ W: the subspace is W[:, 0]
        ld_own = torch.empty(len(test))
        with torch.no_grad():
            for batch_rows, length in length_batches(test, batch_size):
                logits = pyvene_end_logits(model, test, batch_rows, length)
                ld_own[batch_rows] = (logits.gather(1, test.answer[batch_rows, None])
                                      - logits.gather(1, test.other[batch_rows, None])).squeeze(1)
        rows[f"pyvene {version('pyvene')} (RotatedSpace)"] = (*scored(v_theirs), fldd(ld_own, ld_clean), 0.0,
                                                              train_theirs)

    print(f"clean test logit difference {float(ld_clean.mean()):.2f}; full END residual patch FLDD "
          f"{fldd(p_test.logit_diff(lambda w, u: u), ld_clean):.1f}%")
    print(f"{'':30s} {'test FLDD %':>12} {'interchange acc':>16} {'own-run FLDD %':>15} {'setup s':>8} "
          f"{'train s':>8} {'total s':>8}")
    for label, (score, acc, own, setup, seconds) in rows.items():
        own_text = f"{own:15.1f}" if own is not None else f"{'(same code)':>15}"
        print(f"{label:30s} {score:12.1f} {acc:16.2f} {own_text} {setup:8.1f} {seconds:8.1f} {setup + seconds:8.1f}")
    if v_theirs is not None:
        print(f"time ratio pyvene / ours: {train_theirs / train_ours:.1f}x training only, "
              f"{train_theirs / (setup_ours + train_ours):.1f}x with our setup; |cos(v_ours, v_pyvene)| = "
              f"{float(torch.dot(v_ours, v_theirs).abs() / (v_ours.norm() * v_theirs.norm())):.3f}")


if __name__ == "__main__":
    main(*map(int, sys.argv[1:2]))
