"""The training API every self-supervised method here shares: ``loss(batch)``, ``fit(X)``, ``transform(X)``.

A method trains in phases: each epoch runs every phase in turn, a phase being a set of parameters, an Adam
optimiser over them, and how many passes over the data it makes. One phase over everything is the usual case;
LFR alternates an encoder phase with predictor-only phases.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from iclr24.core import check_int
from iclr24.core.progress import progress as progress_bar
from iclr24.lfr.networks import as_shape


@dataclass
class Phase:
    """Parameters trained together, for ``passes`` epochs in a row; ``encoder_frozen`` runs the encoder
    in eval mode without gradients during the phase.

    A phase whose loss depends on the data partly through fixed functions of it can give ``precompute`` (the
    whole training set -> one row per input holding what the loss needs, computed once at the start of the
    phase without gradients) and ``loss`` (a batch of those rows -> loss) instead of recomputing them every
    pass.
    """

    name: str
    parameters: list[nn.Parameter]
    passes: int = 1
    encoder_frozen: bool = False
    precompute: Callable[[torch.Tensor], torch.Tensor] | None = None
    loss: Callable[[torch.Tensor], torch.Tensor] | None = None


def minibatches(n: int, batch_size: int, generator: torch.Generator | None) -> Iterator[torch.Tensor]:
    """Shuffled index batches covering ``range(n)``; a trailing batch of one row is dropped (batch-wise losses
    compare rows with each other)."""
    order = torch.randperm(n, generator=generator)
    for start in range(0, n, batch_size):
        batch = order[start:start + batch_size]
        if len(batch) > 1:
            yield batch


@contextmanager
def _only_trained(module: nn.Module, parameters: Sequence[nn.Parameter]) -> Iterator[None]:
    """Within the block, no gradient for ``module``'s parameters outside ``parameters``: a phase's optimiser steps
    its own parameters only and every step starts from ``zero_grad``, so the others' gradients were computed only
    to be discarded (LFR's encoder phase would spend a third of its heads' arithmetic on them)."""
    own = {id(p) for p in parameters}
    others = [p for p in module.parameters() if p.requires_grad and id(p) not in own]
    for p in others:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in others:
            p.requires_grad_(True)


def _fusable(parameters: Sequence[nn.Parameter]) -> bool:
    """Whether Adam's fused kernel takes these parameters (floating point, on the CPU or a CUDA device).

    The fused kernel is the same update rule as the default per-parameter loop, in one pass over memory instead
    of about eight elementwise operations each with its own temporary; its rounding can differ in the last bit.
    On LFR's series heads (1.8 M parameters) a step costs 1.5 ms instead of 8.9 ms on one thread.
    """
    return all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in parameters)


class SelfSupervised(nn.Module):
    """An ``encoder`` and a self-supervised objective. Subclasses define :meth:`loss` and, when they train
    anything but all their parameters at once, :meth:`phases`."""

    def __init__(self, encoder: nn.Module, input_shape: int | Sequence[int] | None = None) -> None:
        super().__init__()
        if not isinstance(encoder, nn.Module):
            raise TypeError(f"encoder must be a torch.nn.Module, got {type(encoder).__name__}")
        self.encoder = encoder
        self.input_shape = None if input_shape is None else as_shape(input_shape)
        self.history_: list[dict[str, float]] = []
        self._rng: torch.Generator | None = None
        self._encoder_frozen = False

    # -- what a method defines -------------------------------------------------------------------------
    def loss(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def phases(self) -> list[Phase]:
        return [Phase("all", [p for p in self.parameters() if p.requires_grad])]

    def prepare(self, X: torch.Tensor) -> None:
        """Called once at the start of :meth:`fit` with the training data (e.g. to choose projectors)."""

    # -- shared ----------------------------------------------------------------------------------------
    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """The encoder's output; without gradients while a phase has the encoder frozen."""
        if self._encoder_frozen:
            with torch.no_grad():
                return self.encoder(x)
        return self.encoder(x)

    def fit(self, X: torch.Tensor, *, epochs: int = 100, batch_size: int = 128, lr: float = 1e-3,
            weight_decay: float = 0.0, generator: torch.Generator | None = None,
            callback: Callable[[int, dict[str, float]], None] | None = None,
            progress: bool = False) -> SelfSupervised:
        """Train on the rows of ``X`` (no labels) with Adam (betas 0.9, 0.99, the official setting); returns self.

        ``generator`` drives shuffling and any sampling the objective does; ``callback(epoch, losses)`` is
        called after each epoch with the mean loss of each phase. ``progress=True`` draws a bar of the epochs
        with those losses (:mod:`iclr24.core.progress`; off by default).
        """
        self.check_input(X, minimum_rows=2)
        check_int("epochs", epochs, minimum=0)
        check_int("batch_size", batch_size, minimum=2)
        if not lr > 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        self._rng = generator
        self.train()
        self.prepare(X)
        phases = self.phases()
        optimisers = [torch.optim.Adam(p.parameters, lr=lr, betas=(0.9, 0.99), weight_decay=weight_decay,
                                       fused=_fusable(p.parameters) or None)
                      if p.parameters else None for p in phases]
        with progress_bar(f"{type(self).__name__} pretraining", total=epochs, enabled=progress) as bar:
            for epoch in range(epochs):
                losses = {}
                for phase, optimiser in zip(phases, optimisers):
                    if optimiser is None:
                        continue
                    self._encoder_frozen = phase.encoder_frozen
                    self.encoder.train(not phase.encoder_frozen)
                    total, count = 0.0, 0
                    rows, loss_of = X, self.loss
                    if phase.precompute is not None:
                        with torch.no_grad():
                            rows = phase.precompute(X)
                        loss_of = phase.loss
                    with _only_trained(self, phase.parameters):
                        for _ in range(phase.passes):
                            for batch in minibatches(len(X), batch_size, generator):
                                loss = loss_of(rows[batch])
                                self.zero_grad(set_to_none=True)
                                loss.backward()
                                optimiser.step()
                                total, count = total + loss.item(), count + 1
                    losses[phase.name] = total / max(count, 1)
                self._encoder_frozen = False
                self.encoder.train()
                self.history_.append(losses)
                if callback is not None:
                    callback(epoch, losses)
                bar.advance(**losses)
        self.eval()
        return self

    def check_input(self, X: torch.Tensor, minimum_rows: int = 1, name: str = "X") -> None:
        """A clear error unless ``X`` is a finite tensor of rows the encoder takes (shape and dtype)."""
        if not isinstance(X, torch.Tensor) or X.dim() < 2 or len(X) < minimum_rows:
            raise ValueError(f"{name} must be a tensor of shape (n_samples >= {minimum_rows}, ...), got "
                             f"{tuple(X.shape) if isinstance(X, torch.Tensor) else type(X).__name__}")
        if self.input_shape is not None and tuple(X.shape[1:]) != self.input_shape:
            raise ValueError(f"{name} rows must have shape {self.input_shape}, got {tuple(X.shape[1:])}")
        weight = next(self.encoder.parameters(), None)
        if weight is not None and X.dtype != weight.dtype:
            raise TypeError(f"{name} has dtype {X.dtype} but the encoder's weights are {weight.dtype}: convert one "
                            f"(e.g. X.float() or model.double())")
        if not torch.isfinite(X).all():
            raise ValueError(f"{name} contains NaN or infinite values")

    @torch.no_grad()
    def transform(self, X: torch.Tensor, batch_size: int = 1024) -> torch.Tensor:
        """Representations of the rows of ``X`` (encoder in eval mode, no gradients)."""
        self.check_input(X)
        was_training = self.encoder.training
        self.encoder.eval()
        try:
            return torch.cat([self.encoder(X[i:i + batch_size]) for i in range(0, len(X), batch_size)])
        finally:
            self.encoder.train(was_training)
