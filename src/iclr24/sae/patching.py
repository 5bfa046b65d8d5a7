"""Feature patching (the paper's IOI experiment) and an offline interpretability score.

- :func:`feature_patching_curve`: the paper's greedy procedure. Decompose an activation into
  features; start with every feature patched in from the counterfactual prompt; for rising
  thresholds, un-patch features one at a time (random order) when that raises the KL between
  the patched and the counterfactual output by less than the threshold.
- :func:`interpretability_scores`: the old offline score, each feature's best AUROC against
  known input variables. Random directions pass it (issue #50): no claim uses it; the claims use
  :func:`iclr24.sae.token_simulation.token_simulation_scores`.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from iclr24.core.checks import check_tensor
from iclr24.core.progress import progress
from iclr24.interp import check_positions, hook_layer

__all__ = ["KL_DIRECTIONS", "feature_patching_curve", "feature_patching_curves", "interpretability_scores"]

#: ``"patched||counterfactual"`` is what the authors' code computes (and the default);
#: ``"counterfactual||patched"`` weighs the counterfactual's likely tokens instead.
KL_DIRECTIONS = ("patched||counterfactual", "counterfactual||patched")


def _kl(log_p: Tensor, log_q: Tensor) -> Tensor:
    """KL(p || q) per row."""
    return (log_p.exp() * (log_p - log_q)).sum(-1)


def feature_patching_curve(model, hook: str, decomposition, clean: Tensor, counterfactual: Tensor,
                           thresholds: np.ndarray, *, end: Tensor | None = None,
                           kl_direction: str = "patched||counterfactual", seed: int = 0, max_batch: int = 32) -> dict:
    """KL between the patched and the counterfactual output against the number of features patched.

    The activation at ``hook`` (every position) is split into codes and a reconstruction
    error; the clean run's error is kept; features in the patched set take their
    counterfactual codes (at every position up to ``end``: right padding never reaches the
    output, so a feature that differs only there is not counted). Outputs are compared at
    ``end`` (one position per prompt; default: the last position before padding id 0).

    The greedy pass tries features one at a time, each trial depending on the ones before it.
    Trials are run speculatively in batches: the next ``b`` candidates are evaluated in one
    forward (``b`` copies of the prompts) under a guess of how the earlier ones of the batch go:
    either all kept (each trial on the current patched set) or all un-patched (trial ``j`` with
    the ``j`` before it un-patched too). Every trial up to and including the first whose decision
    goes against the guess ran on exactly the sequential pass's patched set; those decisions are
    taken and the rest of the batch discarded. The decisions are the sequential ones; only
    floating-point order differs. The guess follows the last decision; ``b`` doubles (up to
    ``max_batch``) while the guesses hold and drops to the length of the run just seen when one
    fails. A trial already made on the same patched set (at a lower threshold, after the last
    feature taken there) is not run again: its KL is the same.

    Args:
        model: a hooked model from :mod:`iclr24.interp`.
        decomposition: anything with ``encode`` / ``decode`` (an SAE, PCA, ...).
        kl_direction: one of :data:`KL_DIRECTIONS`.
        max_batch: the most candidate patches one forward evaluates (1: one at a time).

    Returns ``{"n_features": [...], "kl": [...], "edit": [...], "kl_clean": KL with nothing
    patched}``: one point per threshold (plus the start), ``edit`` being the size of the
    activation edit relative to the clean activation.
    """
    return feature_patching_curves(model, hook, {"": decomposition}, clean, counterfactual, thresholds, end=end,
                                   kl_direction=kl_direction, seed=seed, max_batch=max_batch)[""]


def feature_patching_curves(model, hook: str, decompositions: dict, clean: Tensor, counterfactual: Tensor,
                            thresholds: np.ndarray, *, end: Tensor | None = None,
                            kl_direction: str = "patched||counterfactual", seed: int = 0,
                            max_batch: int = 32) -> dict[str, dict]:
    """:func:`feature_patching_curve` for each of ``decompositions`` (name -> decomposition) on the same prompts.

    The clean and counterfactual runs and the re-runs' cached prefix are computed once for all of them. Re-runs
    are made for batches of a power-of-two number of copies (a smaller batch is padded with copies of its first
    row, whose outputs are dropped), so only ``log2(max_batch) + 1`` prefixes are ever cached. Each curve is the
    one :func:`feature_patching_curve` gives for that decomposition alone.
    """
    if kl_direction not in KL_DIRECTIONS:
        raise ValueError(f"kl_direction must be one of {KL_DIRECTIONS}, got {kl_direction!r}")
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    if not decompositions:
        raise ValueError("decompositions must name at least one decomposition")
    check_tensor("clean", clean, ndim=2, shape_doc="(n_prompts, seq)")
    if counterfactual.shape != clean.shape:
        raise ValueError(f"counterfactual must have clean's shape {tuple(clean.shape)}, got "
                         f"{tuple(counterfactual.shape)}")
    if end is None:
        if getattr(model, "tokenizer", None) is not None:  # a HookedLM pads with its own id, not 0
            raise ValueError("end is required for a model with a tokenizer: pass end=lengths - 1")
        end = (clean != 0).sum(1) - 1
    end = check_positions(end, clean.shape[0], clean.shape[1])
    with torch.no_grad():
        _, cache_c = model.run_with_cache(clean, [hook], positions=end)
        cf_logits, cache_cf = model.run_with_cache(counterfactual, [hook], positions=end)
        log_p_cf = F.log_softmax(cf_logits.double(), -1)
        # Positions before the first token that differs are the same in both runs: a residual-stream
        # hook re-runs only from its block and only from that position on.
        differs_at = (clean != counterfactual).any(0).nonzero()
        prefix = int(differs_at[0]) if len(differs_at) else 0
        if int(end.min()) < prefix:
            raise ValueError(f"end must not come before the first differing token ({prefix}), got {end.tolist()[:8]}")
        fast = hook.endswith("hook_resid_pre") and hasattr(model, "resume_from")
        offset = prefix if fast else 0
        reruns = {}  # batch size (a power of two) -> a re-run of that many copies of the prompts

        def outputs(acts: Tensor) -> Tensor:
            """Logits at ``end`` for ``b`` patched activations ``(b, n, T - offset, d)``: ``(b, n, vocab)``."""
            b, n = acts.shape[:2]
            if fast:
                size = 1 << (b - 1).bit_length()
                if size not in reruns:
                    reruns[size] = model.resume_from(clean.repeat(size, 1), hook_layer(hook), prefix=prefix)
                padded = torch.cat([acts, acts[:1].expand(size - b, *acts.shape[1:])]) if size > b else acts
                logits = reruns[size](padded.flatten(0, 1), end.repeat(size))[:b * n]
            else:
                flat = acts.flatten(0, 1)
                logits = model.run_with_hooks(clean.repeat(b, 1), {hook: lambda _: flat}, positions=end.repeat(b))
            return logits.view(b, n, -1)

        def kl_of(logits: Tensor) -> list[float]:
            """KL(patched || cf) (or the reverse), mean over prompts, for each of ``b`` patches ``(b, n, vocab)``."""
            log_q = F.log_softmax(logits.double(), -1)
            kl = _kl(log_q, log_p_cf) if kl_direction == "patched||counterfactual" else _kl(log_p_cf, log_q)
            return kl.mean(-1).tolist()

        # right padding (positions after a prompt's end) never reaches its output: it is not patched
        real = torch.arange(clean.shape[1]) <= end[:, None]  # (n, T)
        return {name: _greedy_curve(dec, cache_c[hook], cache_cf[hook], real, offset, outputs, kl_of, thresholds,
                                    seed=seed, max_batch=max_batch)
                for name, dec in decompositions.items()}


def _greedy_curve(decomposition, a_c: Tensor, a_cf: Tensor, real: Tensor, offset: int, outputs, kl_of, thresholds, *,
                  seed: int, max_batch: int) -> dict:
    """The greedy un-patching pass of :func:`feature_patching_curve` for one decomposition."""
    raw_c, raw_cf = decomposition.encode(a_c), decomposition.encode(a_cf)
    raw_cf = torch.where(real[..., None], raw_cf, raw_c)  # padding keeps its clean codes
    code_dtype = raw_c.dtype  # each decomposition decodes codes in the dtype it encodes to

    def decode(codes: Tensor) -> Tensor:
        return decomposition.decode(codes.to(code_dtype)).double()

    codes_c, codes_cf = raw_c.double(), raw_cf.double()
    a_c = a_c.double()
    error_c = a_c - decode(codes_c)
    # only positions offset: are re-run; codes before them are the same in every patch
    codes_c_run, codes_cf_run, error_run = codes_c[:, offset:], codes_cf[:, offset:], error_c[:, offset:]

    def kl_many(masks: Tensor) -> list[float]:
        """KL for each patched set ``(b, n_features)``."""
        codes = torch.where(masks[:, None, None], codes_cf_run, codes_c_run)  # (b, n, T - offset, F)
        return kl_of(outputs((decode(codes) + error_run).float()))

    def edit_size(patched: Tensor) -> float:
        return float((decode(torch.where(patched, codes_cf, codes_c)) - decode(codes_c)).norm() / a_c.norm())

    differs = (codes_c != codes_cf).flatten(0, -2).any(0)  # features that change anywhere
    patched = differs.clone()
    kl_clean, kl_now = kl_many(torch.stack([torch.zeros_like(patched), patched]))
    curve_n, curve_kl, curve_edit = [int(patched.sum())], [kl_now], [edit_size(patched)]
    order = torch.nonzero(differs).flatten()
    order = order[torch.randperm(len(order), generator=torch.Generator().manual_seed(seed))]
    size, guess_taken = 1, False
    known: dict[int, float] = {}  # feature -> KL with it un-patched from the current patched set
    with progress(f"feature patching ({len(order)} features)", total=len(thresholds)) as bar:
        for t in thresholds:
            candidates = [f for f in order.tolist() if patched[f]]
            i = 0
            while i < len(candidates):
                trial = candidates[i:i + size]
                if guess_taken:  # trial j is run with trial[:j] un-patched as well
                    masks = patched.expand(len(trial), -1).clone()
                    for j, f in enumerate(trial):
                        masks[j:, f] = False
                    kls = kl_many(masks)
                else:  # trial j is run on the current patched set
                    todo = [f for f in trial if f not in known]  # tried at an earlier threshold, same set
                    if todo:
                        masks = patched.expand(len(todo), -1).clone()
                        masks[torch.arange(len(todo)), torch.tensor(todo)] = False
                        known.update(zip(todo, kl_many(masks)))
                    kls = [known[f] for f in trial]
                # the sequential decisions, up to and including the first that goes against the guess: each
                # of those trials was run on exactly the patched set the sequential pass has at that point
                for j, kl in enumerate(kls):
                    taken = kl - kl_now < t
                    if taken:
                        patched[trial[j]] = False
                        kl_now = kl
                        known.clear()  # a new patched set: every KL so far is stale
                    elif guess_taken:  # run on the current set (the earlier ones were all un-patched)
                        known[trial[j]] = kl
                    if taken != guess_taken:
                        break
                i += j + 1
                if taken == guess_taken:  # the whole batch went as guessed: guess bigger
                    size = min(max_batch, 2 * size)
                else:  # the guess flips to the last decision, the batch to the length of the run just seen
                    # (rounded down to a power of two: the batch sizes the re-runs are made for)
                    size, guess_taken = min(max_batch, 1 << ((j + 1).bit_length() - 1)), taken
            curve_n.append(int(patched.sum()))
            curve_kl.append(kl_now)
            curve_edit.append(edit_size(patched))
            bar.advance(features=curve_n[-1])
    return {"n_features": curve_n, "kl": curve_kl, "edit": curve_edit, "kl_clean": kl_clean}


def interpretability_scores(codes: Tensor, variables: dict[str, Tensor]) -> Tensor:
    """Each feature's best AUROC (``max(auc, 1 - auc)``) against binary input variables.

    ``codes`` is ``(n_positions, n_features)``; each variable a bool ``(n_positions,)``.
    Features that never vary are skipped (they explain nothing). AUROC is computed for all
    features at once as the Mann-Whitney statistic on ranks (ties averaged).
    """
    from scipy.stats import rankdata

    x = codes.double().numpy()
    keep = x.std(0) > 1e-9
    ranks = rankdata(x[:, keep], axis=0)  # (n_positions, n_kept)
    best = np.zeros(int(keep.sum()))
    for v in variables.values():
        y = v.numpy().astype(bool)
        n_pos, n_neg = int(y.sum()), int((~y).sum())
        if n_pos == 0 or n_neg == 0:
            continue
        auc = (ranks[y].sum(0) - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)
        best = np.maximum(best, np.maximum(auc, 1 - auc))
    return torch.tensor(best)
