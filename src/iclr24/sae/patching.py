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
from iclr24.core.progress import progress as progress_bar
from iclr24.interp import check_positions, hook_layer

__all__ = ["KL_DIRECTIONS", "feature_patching_curve", "feature_patching_curve_sets", "feature_patching_curves",
           "interpretability_scores"]

#: ``"patched||counterfactual"`` is what the authors' code computes (and the default);
#: ``"counterfactual||patched"`` weighs the counterfactual's likely tokens instead.
KL_DIRECTIONS = ("patched||counterfactual", "counterfactual||patched")


def _kl(log_p: Tensor, log_q: Tensor) -> Tensor:
    """KL(p || q) per row."""
    return (log_p.exp() * (log_p - log_q)).sum(-1)


def feature_patching_curve(model, hook: str, decomposition, clean: Tensor, counterfactual: Tensor,
                           thresholds: np.ndarray, *, end: Tensor | None = None,
                           kl_direction: str = "patched||counterfactual", seed: int = 0, max_batch: int = 32,
                           reuse_unchanged: bool = True, progress: bool = False) -> dict:
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

    A trial re-runs only the prompts it changes: a prompt whose codes of the trial's un-patched
    features are the same in its clean and counterfactual runs at every re-run position gets the
    activation it has under the current patched set, so its KL is the current set's for that prompt
    (kept per prompt from the run that made the set current). The KL of a trial is the mean over
    prompts of those per-prompt KLs. Sparse features (an SAE's) change a few prompts each; dense ones
    (PCA) change every prompt and gain nothing. On a model re-run through ``resume_from`` (one prefix,
    every prompt in a batch) every prompt is re-run.

    Args:
        model: a hooked model from :mod:`iclr24.interp`.
        decomposition: anything with ``encode`` / ``decode`` (an SAE, PCA, ...).
        kl_direction: one of :data:`KL_DIRECTIONS`.
        max_batch: the most candidate patches one forward evaluates (1: one at a time).
        reuse_unchanged: take the KL of a prompt a trial does not change from the current patched set's run
            instead of re-running it (the same number up to floating-point order; ``False`` re-runs every prompt).
        progress: draw a bar counting the thresholds done (:mod:`iclr24.core.progress`; off by default, the
            experiment turns it on under ``iclr24 run``). It changes nothing else.

    Returns ``{"n_features": [...], "kl": [...], "edit": [...], "kl_clean": KL with nothing
    patched}``: one point per threshold (plus the start), ``edit`` being the size of the
    activation edit relative to the clean activation.
    """
    return feature_patching_curves(model, hook, {"": decomposition}, clean, counterfactual, thresholds, end=end,
                                   kl_direction=kl_direction, seed=seed, max_batch=max_batch,
                                   reuse_unchanged=reuse_unchanged, progress=progress)[""]


def feature_patching_curves(model, hook: str, decompositions: dict, clean: Tensor, counterfactual: Tensor,
                            thresholds: np.ndarray, *, end: Tensor | None = None,
                            kl_direction: str = "patched||counterfactual", seed: int = 0,
                            max_batch: int = 32, reuse_unchanged: bool = True,
                            progress: bool = False) -> dict[str, dict]:
    """:func:`feature_patching_curve` for each of ``decompositions`` (name -> decomposition) on the same prompts.

    The clean and counterfactual runs and the re-runs' cached prefix are computed once for all of them, and their
    greedy passes run in lockstep (:func:`feature_patching_curve_sets`). On a model without ``resume_ragged``,
    re-runs are made for batches of a power-of-two number of copies (a smaller batch is padded with copies of its
    first row, whose outputs are dropped), so only ``log2(max_batch) + 1`` prefixes are ever cached. Each curve is
    the one :func:`feature_patching_curve` gives for that decomposition alone.
    """
    return feature_patching_curve_sets(model, hook, decompositions, [(clean, counterfactual, end, seed)], thresholds,
                                       kl_direction=kl_direction, max_batch=max_batch,
                                       reuse_unchanged=reuse_unchanged, progress=progress)[0]


def feature_patching_curve_sets(model, hook: str, decompositions: dict, prompt_sets: list, thresholds: np.ndarray, *,
                                kl_direction: str = "patched||counterfactual", max_batch: int = 32,
                                max_rows: int = 1024, reuse_unchanged: bool = True,
                                progress: bool = False) -> list[dict[str, dict]]:
    """:func:`feature_patching_curves` for several sets of prompts, each ``(clean, counterfactual, end, seed)``.

    Every greedy pass (one set's prompts and one decomposition) runs in lockstep with the others: each round,
    every unfinished pass proposes its next batch of trials, and they are evaluated together. On a model with
    ``resume_ragged`` (:class:`~iclr24.interp.HookedLM`) and a residual-stream hook, the trials of all passes run
    in one forward (up to ``max_rows`` re-run prompts; the weights are read once), and each prompt is re-run from
    its block and from its own first token that differs between its two runs (with one prefix for the whole
    batch, prompts of different templates re-ran the positions after the earliest one); a trial re-runs only the
    prompts it changes (``reuse_unchanged``, :func:`feature_patching_curve`). Elsewhere each set's trials run as
    in :func:`feature_patching_curves`. The passes share nothing but the forward, so each curve is
    the one :func:`feature_patching_curve` gives for that set and decomposition alone (up to floating-point
    order). Returns one ``{name: curve}`` per set, in order. ``progress``: a bar per pass counting its thresholds
    (:func:`feature_patching_curve`).
    """
    if kl_direction not in KL_DIRECTIONS:
        raise ValueError(f"kl_direction must be one of {KL_DIRECTIONS}, got {kl_direction!r}")
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    if not decompositions:
        raise ValueError("decompositions must name at least one decomposition")
    if not prompt_sets:
        raise ValueError("prompt_sets must hold at least one (clean, counterfactual, end, seed)")
    ragged = hook.endswith("hook_resid_pre") and hasattr(model, "resume_ragged")
    with torch.no_grad():
        sets = [_PromptSet(model, hook, *prompt_set, kl_direction=kl_direction, ragged=ragged)
                for prompt_set in prompt_sets]
        if ragged:  # every set's prompts in one re-run, each from its own first differing token
            width = max(s.clean.shape[1] for s in sets)
            tokens = torch.cat([F.pad(s.clean, (0, width - s.clean.shape[1])) for s in sets])
            rerun = model.resume_ragged(tokens, hook_layer(hook), torch.cat([s.starts for s in sets]))
            first_row = np.cumsum([0] + [len(s.clean) for s in sets]).tolist()

        def evaluate(requests: dict) -> dict:
            """The KL of every re-run prompt of every pass: ``{(set, name): (patched activations (m, W, d), the
            prompt of each (m,))}`` -> ``{(set, name): KLs (m,)}``."""
            if not ragged:
                return {key: sets[key[0]].kl_of(sets[key[0]].outputs(*request), request[1])
                        for key, request in requests.items()}
            out, chunk, rows = {}, [], 0
            for key, request in [*requests.items(), (None, None)]:  # a sentinel flushes the last chunk
                m = 0 if request is None else len(request[1])
                if chunk and (request is None or rows + m > max_rows):
                    W = max(a.shape[1] for _, (a, _) in chunk)
                    resid = torch.cat([F.pad(a, (0, 0, 0, W - a.shape[1])) for _, (a, _) in chunk])
                    index = torch.cat([first_row[k[0]] + p for k, (_, p) in chunk])
                    ends = torch.cat([sets[k[0]].end[p] for k, (_, p) in chunk])
                    logits = rerun(resid, ends, index).split([len(p) for _, (_, p) in chunk])
                    for (k, (_, p)), part in zip(chunk, logits):
                        out[k] = sets[k[0]].kl_of(part, p)
                    chunk, rows = [], 0
                if request is not None:
                    chunk.append((key, request))
                    rows += m
            return out

        passes = {(i, name): _greedy_curve(dec, s.a_c, s.a_cf, s.real, s.window, thresholds, seed=s.seed,
                                           max_batch=max_batch, reuse_unchanged=reuse_unchanged and s.any_rows,
                                           progress=progress)
                  for i, s in enumerate(sets) for name, dec in decompositions.items()}
        requests = {key: next(p) for key, p in passes.items()}
        curves = {}
        while requests:
            for key, kls in evaluate(requests).items():
                try:
                    requests[key] = passes[key].send(kls)
                except StopIteration as done:
                    curves[key] = done.value
                    del requests[key]
    return [{name: curves[i, name] for name in decompositions} for i in range(len(sets))]


class _PromptSet:
    """One set of prompts: the clean and counterfactual runs, the positions each re-run covers and how its trials
    are run when the model has no ``resume_ragged``."""

    def __init__(self, model, hook: str, clean: Tensor, counterfactual: Tensor, end: Tensor | None, seed: int, *,
                 kl_direction: str, ragged: bool) -> None:
        check_tensor("clean", clean, ndim=2, shape_doc="(n_prompts, seq)")
        if counterfactual.shape != clean.shape:
            raise ValueError(f"counterfactual must have clean's shape {tuple(clean.shape)}, got "
                             f"{tuple(counterfactual.shape)}")
        if end is None:
            if getattr(model, "tokenizer", None) is not None:  # a HookedLM pads with its own id, not 0
                raise ValueError("end is required for a model with a tokenizer: pass end=lengths - 1")
            end = (clean != 0).sum(1) - 1
        n, T = clean.shape
        end = check_positions(end, n, T)
        self.model, self.hook, self.clean, self.end, self.seed = model, hook, clean, end, seed
        self.kl_direction = kl_direction
        _, cache_c = model.run_with_cache(clean, [hook], positions=end)
        cf_logits, cache_cf = model.run_with_cache(counterfactual, [hook], positions=end)
        self.a_c, self.a_cf = cache_c[hook], cache_cf[hook]
        self.log_p_cf = F.log_softmax(cf_logits.double(), -1)
        # Positions before the first token that differs are the same in both runs: a residual-stream
        # hook re-runs only from its block and only from that position on.
        differs = clean != counterfactual
        differs_at = differs.any(0).nonzero()
        prefix = int(differs_at[0]) if len(differs_at) else 0
        if int(end.min()) < prefix:
            raise ValueError(f"end must not come before the first differing token ({prefix}), got {end.tolist()[:8]}")
        # right padding (positions after a prompt's end) never reaches its output: it is not patched
        self.real = torch.arange(T) <= end[:, None]  # (n, T)
        if ragged:  # each prompt from its own first differing token (its end where nothing differs before it)
            self.starts = torch.where((differs & self.real).any(1), (differs & self.real).int().argmax(1), end)
            width = int((end - self.starts).max()) + 1
            self.window = (self.starts[:, None] + torch.arange(width)).clamp(max=T - 1)  # (n, W)
            self.any_rows = True  # a re-run may hold any prompts
            return
        self.fast = hook.endswith("hook_resid_pre") and hasattr(model, "resume_from")
        self.any_rows = not self.fast  # resume_from re-runs every prompt, in order
        self.prefix = prefix if self.fast else 0
        self.window = torch.arange(self.prefix, T).expand(n, -1)
        self.reruns = {}  # batch size (a power of two) -> a re-run of that many copies of the prompts

    def outputs(self, acts: Tensor, prompts: Tensor) -> Tensor:
        """Logits at ``end`` for patched activations ``(m, T - prefix, d)`` of ``prompts`` ``(m,)``: ``(m, vocab)``.

        Through ``resume_from`` the rows are ``b`` whole copies of the prompts, in order (``m = b * n``)."""
        clean, end, hook = self.clean, self.end, self.hook
        if self.fast:
            n = len(clean)
            b = len(prompts) // n
            size = 1 << (b - 1).bit_length()
            if size not in self.reruns:
                self.reruns[size] = self.model.resume_from(clean.repeat(size, 1), hook_layer(hook), prefix=self.prefix)
            padded = torch.cat([acts, acts[:n].repeat(size - b, 1, 1)]) if size > b else acts
            return self.reruns[size](padded, end.repeat(size))[:b * n]
        return self.model.run_with_hooks(clean[prompts], {hook: lambda _: acts}, positions=end[prompts])

    def kl_of(self, logits: Tensor, prompts: Tensor) -> Tensor:
        """KL(patched || cf) (or the reverse) of each re-run ``(m, vocab)`` of ``prompts`` ``(m,)``: ``(m,)``."""
        log_q, log_p_cf = F.log_softmax(logits.double(), -1), self.log_p_cf[prompts]
        return _kl(log_q, log_p_cf) if self.kl_direction == "patched||counterfactual" else _kl(log_p_cf, log_q)


def _greedy_curve(decomposition, a_c: Tensor, a_cf: Tensor, real: Tensor, window: Tensor, thresholds, *,
                  seed: int, max_batch: int, reuse_unchanged: bool = False, progress: bool):
    """The greedy un-patching pass of :func:`feature_patching_curve` for one decomposition, as a generator: it
    yields the patched activations of a batch of trials at the re-run positions ``window`` ``(n, W)`` of the
    prompts each re-runs, ``((m, W, d), prompt index (m,))``, is sent their KLs ``(m,)``, and returns the curve.

    With ``reuse_unchanged`` a trial re-runs only the prompts whose codes it changes at their re-run positions;
    every other prompt's KL is the current patched set's (its activation is the one it has under that set).
    Without, every trial re-runs every prompt, trial after trial (``m = b * n``)."""
    raw_c, raw_cf = decomposition.encode(a_c), decomposition.encode(a_cf)
    raw_cf = torch.where(real[..., None], raw_cf, raw_c)  # padding keeps its clean codes
    code_dtype = raw_c.dtype  # each decomposition decodes codes in the dtype it encodes to

    def decode(codes: Tensor) -> Tensor:
        return decomposition.decode(codes.to(code_dtype)).double()

    codes_c, codes_cf = raw_c.double(), raw_cf.double()
    a_c = a_c.double()
    error_c = a_c - decode(codes_c)
    # only the window's positions are re-run; codes before them are the same in every patch
    rows = torch.arange(len(window))[:, None]
    codes_c_run, codes_cf_run, error_run = codes_c[rows, window], codes_cf[rows, window], error_c[rows, window]
    n = len(window)
    # the prompts each feature changes: those whose codes of it differ between the runs at a re-run position
    changes = (codes_c_run != codes_cf_run).any(1).T  # (F, n)

    def kl_many(masks: Tensor, per_prompt_now: Tensor | None = None):
        """The KL of each prompt under each patched set ``(b, n_features)``, ``(b, n)`` (a generator: yields the
        activations, returns the KLs). With ``per_prompt_now`` (the current patched set's KLs, ``(n,)``) a prompt
        whose codes no changed feature changes is not re-run: its KL is the current set's."""
        if per_prompt_now is None:
            run = torch.ones(len(masks), n, dtype=torch.bool)
        else:
            run = ((masks != patched)[:, :, None] & changes).any(1)  # (b, n)
        trial, prompt = run.nonzero(as_tuple=True)  # trial after trial, prompt after prompt
        kls = (per_prompt_now if per_prompt_now is not None else torch.zeros(n, dtype=torch.float64)).repeat(
            len(masks), 1)
        if len(prompt):
            codes = torch.where(masks[trial][:, None], codes_cf_run[prompt], codes_c_run[prompt])  # (m, W, F)
            kls[trial, prompt] = (yield ((decode(codes) + error_run[prompt]).float(), prompt)).double()
        return kls

    def mean(kls: Tensor) -> list[float]:  # the KL of a patched set: the mean over prompts
        return kls.mean(-1).tolist()

    def edit_size(patched: Tensor) -> float:
        return float((decode(torch.where(patched, codes_cf, codes_c)) - decode(codes_c)).norm() / a_c.norm())

    differs = (codes_c != codes_cf).flatten(0, -2).any(0)  # features that change anywhere
    patched = differs.clone()
    start = yield from kl_many(torch.stack([torch.zeros_like(patched), patched]))
    (kl_clean, kl_now), now = mean(start), start[1]  # now: each prompt's KL under the current patched set
    reuse = now if reuse_unchanged else None
    curve_n, curve_kl, curve_edit = [int(patched.sum())], [kl_now], [edit_size(patched)]
    order = torch.nonzero(differs).flatten()
    order = order[torch.randperm(len(order), generator=torch.Generator().manual_seed(seed))]
    size, guess_taken = 1, False
    known: dict[int, Tensor] = {}  # feature -> each prompt's KL with it un-patched from the current patched set
    with progress_bar(f"feature patching ({len(order)} features)", total=len(thresholds), enabled=progress) as bar:
        for t in thresholds:
            candidates = [f for f in order.tolist() if patched[f]]
            i = 0
            while i < len(candidates):
                trial = candidates[i:i + size]
                if guess_taken:  # trial j is run with trial[:j] un-patched as well
                    masks = patched.expand(len(trial), -1).clone()
                    for j, f in enumerate(trial):
                        masks[j:, f] = False
                    per_prompt = yield from kl_many(masks, reuse)
                else:  # trial j is run on the current patched set
                    todo = [f for f in trial if f not in known]  # tried at an earlier threshold, same set
                    if todo:
                        masks = patched.expand(len(todo), -1).clone()
                        masks[torch.arange(len(todo)), torch.tensor(todo)] = False
                        known.update(zip(todo, (yield from kl_many(masks, reuse))))
                    per_prompt = torch.stack([known[f] for f in trial])
                kls = mean(per_prompt)
                # the sequential decisions, up to and including the first that goes against the guess: each
                # of those trials was run on exactly the patched set the sequential pass has at that point
                for j, kl in enumerate(kls):
                    taken = kl - kl_now < t
                    if taken:
                        patched[trial[j]] = False
                        kl_now, now = kl, per_prompt[j]  # the set's per-prompt KLs: from the run that made it
                        reuse = now if reuse_unchanged else None
                        known.clear()  # a new patched set: every KL so far is stale
                    elif guess_taken:  # run on the current set (the earlier ones were all un-patched)
                        known[trial[j]] = per_prompt[j]
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
