"""Distributed alignment search (DAS, Geiger et al.) and an END-token patching harness.

DAS learns an orthogonal rotation ``R``; a patch rotates the base and source activations,
takes the first ``k`` rotated coordinates from the source and the rest from the base, and
rotates back: a patch of the subspace spanned by ``R``'s first ``k`` rows, which is what is
learned here. ``R`` is trained so that the patched model gives the answer the patch
should produce (cross-entropy at the last position), the model frozen. Makelov et al. train
with Adam at lr 0.01 decayed linearly to 0.1x, 30 epochs, batch 20.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.parametrizations import orthogonal

from iclr24.core.checks import check_int, check_tensor
from iclr24.core.progress import progress as progress_bar
from iclr24.interp import hook_layer

__all__ = ["DistributedAlignmentSearch", "PatchingPairs", "EndPatcher", "train_das"]

Patch = Callable[[Tensor, Tensor], Tensor]  # (base activation, source activation) -> patched, at END


class DistributedAlignmentSearch(nn.Module):
    """A learned ``k``-dimensional subspace patch of ``dim``-dimensional activations.

    ``forward(base, source)`` returns ``base`` with its component in the subspace replaced by
    ``source``'s. DAS rotates by an orthogonal ``R``, swaps the first ``k`` coordinates and
    rotates back; that depends on ``R``'s first ``k`` rows only, so they are what is learned
    (``basis``, ``(dim, k)`` with orthonormal columns, kept so by torch's orthogonal
    parametrisation, as pyvene's low-rank rotated space does). A full ``dim x dim`` rotation
    would cost a matrix exponential of size ``dim`` per step for the same patches.
    """

    def __init__(self, dim: int, k: int = 1, *, seed: int | None = None) -> None:
        super().__init__()
        self.dim, self.k = check_int("dim", dim, minimum=1), check_int("k", k, minimum=1)
        if k > dim:
            raise ValueError(f"k must be <= dim={dim}, got {k}")
        with torch.random.fork_rng():  # a seeded start without resetting the caller's random state
            if seed is not None:
                torch.manual_seed(seed)
            self.rotation = orthogonal(nn.Linear(k, dim, bias=False))  # weight (dim, k), orthonormal columns

    @property
    def basis(self) -> Tensor:
        """The patched subspace: ``(dim, k)``, orthonormal columns."""
        return self.rotation.weight

    def forward(self, base: Tensor, source: Tensor) -> Tensor:
        if base.shape[-1] != self.dim or source.shape != base.shape:
            raise ValueError(f"base and source must be (..., {self.dim}) and alike, got {tuple(base.shape)} and "
                             f"{tuple(source.shape)}")
        B = self.basis
        # rotate, take the first k coordinates from the source, rotate back: w + (u - w) B B^T
        return base + ((source - base) @ B) @ B.T

    def extra_repr(self) -> str:
        return f"dim={self.dim}, k={self.k}"


@dataclass
class PatchingPairs:
    """Base prompts, the source prompts patched into them, and the two answers.

    ``answer``: the base's answer (IO); ``other``: the answer a successful patch produces.
    Logit difference = logit[answer] - logit[other], read at the last position (END), which
    is where patches apply.
    """

    base: Tensor  # (n, T) token ids, right-padded
    source: Tensor  # (n, T)
    lengths: Tensor  # (n,): base and source have the same lengths
    answer: Tensor  # (n,)
    other: Tensor  # (n,)

    def __len__(self) -> int:
        return len(self.lengths)

    def subset(self, rows) -> "PatchingPairs":
        return PatchingPairs(self.base[rows], self.source[rows], self.lengths[rows], self.answer[rows],
                             self.other[rows])


def _check_pairs(pairs: PatchingPairs) -> None:
    check_tensor("pairs.base", pairs.base, ndim=2, shape_doc="(n, seq)")
    n, T = pairs.base.shape
    if pairs.source.shape != (n, T):
        raise ValueError(f"pairs.source must have pairs.base's shape {(n, T)}, got {tuple(pairs.source.shape)}")
    for name in ("lengths", "answer", "other"):
        value = getattr(pairs, name)
        if not isinstance(value, Tensor) or value.shape != (n,) or value.is_floating_point():
            raise ValueError(f"pairs.{name} must be an integer tensor of shape ({n},), got "
                             f"{getattr(value, 'shape', type(value).__name__)}")
    if n and not (1 <= int(pairs.lengths.min()) and int(pairs.lengths.max()) <= T):
        raise ValueError(f"pairs.lengths must lie in [1, {T}], got {pairs.lengths.tolist()[:8]}")


def _length_batches(pairs: PatchingPairs, batch_size: int) -> list[tuple[Tensor, int]]:
    """Rows of pairs of one length, ``batch_size`` at a time: ``[(rows, length), ...]``."""
    out = []
    for length in pairs.lengths.unique().tolist():
        group = torch.nonzero(pairs.lengths == length).flatten()
        out += [(group[start:start + batch_size], length) for start in range(0, len(group), batch_size)]
    return out


def _clean_runs(model, pairs: PatchingPairs, batch_size: int, base_names: list[str], source_names: list[str]):
    """Per batch of :func:`_length_batches`: the base run's activations at ``base_names`` and the source run's at
    ``source_names`` (whole prompts), ``[(cache_base, cache_source), ...]``."""
    out = []
    with torch.no_grad():
        for rows, length in _length_batches(pairs, batch_size):
            end = torch.full((len(rows),), length - 1)
            _, cache_b = model.run_with_cache(pairs.base[rows, :length], list(dict.fromkeys(base_names)), positions=end)
            _, cache_s = model.run_with_cache(pairs.source[rows, :length], list(dict.fromkeys(source_names)),
                                              positions=end)
            out.append((cache_b, cache_s))
    return out


class EndPatcher:
    """Patches one hook at the END token of many base/source pairs, fast and differentiably.

    Pairs are grouped by length (a base and its source share one: the source is read at the
    base's END); each group's prefix (everything before END) is run once and cached
    (``resume_from``), so a patched run re-computes the END token only, from the hook's block on.
    ``logit_diff(patch)`` applies ``patch(base_act, source_act)`` (``(n, d)`` at END) and returns
    the logit difference per pair.
    """

    def __init__(self, model, hook: str, pairs: PatchingPairs, *, batch_size: int = 20,
                 _clean: list | None = None) -> None:
        _check_pairs(pairs)
        if len(pairs) == 0:
            raise ValueError("pairs is empty")
        self.model, self.hook, self.pairs = model, hook, pairs
        self.layer = hook_layer(hook)
        self.batch_size = check_int("batch_size", batch_size, minimum=1)
        resid = f"blocks.{self.layer}.hook_resid_pre"
        if _clean is None:
            _clean = _clean_runs(model, pairs, batch_size, [resid, hook], [hook])
        self.batches: list[_Batch] = []
        with torch.no_grad():
            for (rows, length), (cache_b, cache_s) in zip(_length_batches(pairs, batch_size), _clean):
                run = model.resume_from(pairs.base[rows, :length], self.layer, prefix=length - 1)
                self.batches.append(_Batch(rows, run, torch.full((len(rows),), length - 1),
                                           cache_b[resid][:, -1:], cache_b[hook][:, -1], cache_s[hook][:, -1]))

    @classmethod
    def for_hooks(cls, model, hooks, pairs: PatchingPairs, *, batch_size: int = 20) -> dict[str, "EndPatcher"]:
        """One patcher per hook over the same pairs, as ``{hook: EndPatcher(model, hook, pairs)}``, sharing the
        clean runs: each batch's base and source prompts run once for all the hooks instead of once per hook."""
        hooks = list(hooks)
        _check_pairs(pairs)
        if len(pairs) == 0:
            raise ValueError("pairs is empty")
        check_int("batch_size", batch_size, minimum=1)
        names = list(dict.fromkeys([f"blocks.{hook_layer(h)}.hook_resid_pre" for h in hooks] + hooks))
        clean = _clean_runs(model, pairs, batch_size, names, list(dict.fromkeys(hooks)))
        return {h: cls(model, h, pairs, batch_size=batch_size, _clean=clean) for h in hooks}

    @property
    def dim(self) -> int:
        """Size of the activation at the hook."""
        return self.batches[0].base_act.shape[-1]

    def _batch_logits(self, batch: "_Batch", patch: Patch | None) -> Tensor:
        if patch is None:
            return batch.run(batch.resid, batch.end)
        if self.hook.endswith("hook_resid_pre"):
            return batch.run(patch(batch.base_act, batch.source_act)[:, None], batch.end)
        patched = {self.hook: lambda x: patch(batch.base_act, batch.source_act)[:, None].to(x.dtype)}
        return batch.run(batch.resid, batch.end, patched)

    def logit_diff(self, patch: Patch | None = None) -> Tensor:
        """Logit difference per pair, ``(n,)``, with ``patch`` applied at END (``None``: clean)."""
        out = torch.empty(len(self.pairs))
        with torch.no_grad():
            for batch in self.batches:
                logits = self._batch_logits(batch, patch)
                rows = batch.rows
                out[rows] = (logits.gather(1, self.pairs.answer[rows, None])
                             - logits.gather(1, self.pairs.other[rows, None])).squeeze(1).float()
        return out

    def logit_diff_hooked(self, make: Callable) -> Tensor:
        """Logit difference per pair, ``(n,)``, with hooks built per batch: ``make(base_act, source_act)`` returns
        ``(resid, hooks)``, the residual stream entering the hook's block at END (``(B, d_model)``; ``None``: the
        clean one) and ``{hook name: fn}`` at later blocks, which see the END token only. For patches that are
        not a function of this hook's activation alone (e.g. one head's query)."""
        out = torch.empty(len(self.pairs))
        with torch.no_grad():
            for batch in self.batches:
                resid, hooks = make(batch.base_act, batch.source_act)
                resid = batch.resid if resid is None else resid[:, None].to(batch.resid.dtype)
                logits = batch.run(resid, batch.end, hooks)
                rows = batch.rows
                out[rows] = (logits.gather(1, self.pairs.answer[rows, None])
                             - logits.gather(1, self.pairs.other[rows, None])).squeeze(1).float()
        return out

    def end_activations(self) -> tuple[Tensor, Tensor]:
        """The hook's clean activations at END, ``(base, source)``, each ``(n, d)`` in the pairs' order."""
        base, source = torch.empty(len(self.pairs), self.dim), torch.empty(len(self.pairs), self.dim)
        for batch in self.batches:
            base[batch.rows], source[batch.rows] = batch.base_act.float(), batch.source_act.float()
        return base, source

    def loss(self, batch: "_Batch", patch: Patch) -> Tensor:
        """Cross-entropy of the patched END logits against ``other`` (the patch's target answer)."""
        return F.cross_entropy(self._batch_logits(batch, patch), self.pairs.other[batch.rows])


@dataclass
class _Batch:
    """Pairs of one length: a re-run from the hook's block over the END token, and activations at END."""

    rows: Tensor
    run: Callable
    end: Tensor  # (B,): END's index (absolute)
    resid: Tensor  # (B, 1, d_model): the clean residual stream entering the hook's block, at END
    base_act: Tensor  # (B, d): the hook's activation at END, base run
    source_act: Tensor  # (B, d): and source run


def train_das(patcher: EndPatcher, k: int = 1, *, epochs: int = 30, lr: float = 0.01, seed: int = 0,
              progress: bool = False) -> DistributedAlignmentSearch:
    """Fit a ``k``-dim DAS subspace at ``patcher``'s hook: Adam, lr decayed linearly per epoch
    toward 0.1x (``LinearLR`` over ``epochs``, as the authors' code: the last epoch runs at
    ``1 - 0.9 (epochs - 1) / epochs``). ``progress``: draw a bar counting the epochs (:mod:`iclr24.core.progress`;
    off by default, the experiment turns it on under ``iclr24 run``). It changes nothing else."""
    check_int("epochs", epochs, minimum=1)
    das = DistributedAlignmentSearch(patcher.dim, k, seed=seed)
    opt = torch.optim.Adam(das.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=0.1, total_iters=epochs)
    gen = torch.Generator().manual_seed(seed)
    frozen = [p for p in patcher.model.parameters() if p.requires_grad]
    for p in frozen:
        p.requires_grad_(False)
    try:
        with progress_bar(f"DAS at {patcher.hook}", total=epochs, enabled=progress) as bar:
            for _ in range(epochs):
                total = 0.0
                for i in torch.randperm(len(patcher.batches), generator=gen).tolist():
                    loss = patcher.loss(patcher.batches[i], das)
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    total += float(loss.detach())
                schedule.step()
                bar.advance(loss=total / len(patcher.batches))
    finally:
        for p in frozen:
            p.requires_grad_(True)
    return das.eval()
