"""Meta-training one PINN over many PDE configurations with any task sampler, and its evaluation.

Each step evaluates every configuration's loss ``L_i = L_ic + L_bc + residual_weight * L_f`` in one
batched forward pass and steps Adam on

- ``mode="weight"`` (DATS-w): ``sum_i w_i L_i`` with ``w = sampler.weights()``; every configuration keeps
  ``residual_points`` collocation points;
- ``mode="points"`` (DATS-rp): ``mean_i L_i`` while the sampler splits a residual budget across
  configurations (``sampler.allocate``): a configuration that gains points gets the candidates with the
  largest residual (RAD), one that loses points drops its oldest.

Every ``sampler.period`` steps the sampler is updated from the training losses and, when it asks for
them (DATS), the per-configuration gradients of the training and validation losses.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from torch import nn

from iclr24.core.checks import check_int, check_number
from iclr24.dats.pdes import ParametricPDE
from iclr24.dats.residuals import select_by_residual
from iclr24.dats.sampler import TaskSampler

__all__ = ["MetaTrainingHistory", "PointSet", "meta_train", "relative_l2", "task_losses"]


@dataclass
class PointSet:
    """Residual points of every configuration, concatenated, plus shared initial and boundary points."""

    residual: list[torch.Tensor]  # per configuration, (n_i, 2)
    initial: torch.Tensor  # (n_ic, 2)
    initial_values: torch.Tensor  # (n_ic,)
    boundary_lo: torch.Tensor  # (n_bc, 2)
    boundary_hi: torch.Tensor  # (n_bc, 2)

    @classmethod
    def sample(cls, pde: ParametricPDE, n_configs: int, residual_points: int | Sequence[int], initial_points: int,
               boundary_points: int, generator: torch.Generator) -> PointSet:
        counts = [residual_points] * n_configs if isinstance(residual_points, int) else list(residual_points)
        initial, values = pde.sample_initial(initial_points, generator)
        lo, hi = pde.sample_boundary(boundary_points, generator)
        return cls([pde.sample_interior(n, generator) for n in counts], initial, values, lo, hi)

    @property
    def counts(self) -> list[int]:
        return [len(r) for r in self.residual]


def task_losses(model: nn.Module, pde: ParametricPDE, configs: torch.Tensor, points: PointSet,
                residual_weight: float = 1.0) -> torch.Tensor:
    """Each configuration's PINN loss ``L_ic + L_bc + residual_weight * L_f`` (mean squared terms): (C,).

    ``configs`` (C, n_params) holds the configurations. One forward pass for the residual points of all
    configurations, one for the initial and boundary points (shared by all configurations).
    """
    n = configs.shape[0]
    counts = torch.tensor(points.counts)
    which = torch.repeat_interleave(torch.arange(n), counts)
    coords = torch.cat(points.residual).requires_grad_(True)
    params = configs[which]
    f = pde.residual(model(coords, params), coords, params)
    loss_f = torch.zeros(n, dtype=f.dtype).index_add(0, which, f**2) / counts.clamp(min=1)

    n_ic, n_bc = len(points.initial), len(points.boundary_lo)
    data = torch.cat([points.initial, points.boundary_lo, points.boundary_hi])
    u = model(data.repeat(n, 1), configs.repeat_interleave(len(data), dim=0)).reshape(n, len(data))
    loss_ic = ((u[:, :n_ic] - points.initial_values) ** 2).mean(dim=1)
    lo, hi = u[:, n_ic:n_ic + n_bc], u[:, n_ic + n_bc:]
    if pde.boundary == "periodic":
        loss_bc = ((lo - hi) ** 2).mean(dim=1)
    else:
        loss_bc = (lo**2 + hi**2).mean(dim=1) / 2
    return loss_ic + loss_bc + residual_weight * loss_f


def _flat_grads(loss: torch.Tensor, parameters: list[nn.Parameter]) -> torch.Tensor:
    grads = torch.autograd.grad(loss, parameters, allow_unused=True)
    return torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1) for p, g in zip(parameters, grads)])


def _task_losses_and_grads(model: nn.Module, pde: ParametricPDE, configs: torch.Tensor, points: PointSet,
                           residual_weight: float, parameters: list[nn.Parameter]) -> tuple[torch.Tensor, torch.Tensor]:
    """Each configuration's loss (C,) and flat gradient (C, P): :func:`task_losses` and each entry's
    gradient, but each from a graph over its own points only (its residual points and the
    shared initial and boundary points): a configuration's loss does not depend on the others' points, so
    a backward pass through the joint graph per configuration would mostly carry zeros."""
    losses, grads = [], []
    for i in range(len(configs)):
        own = PointSet([points.residual[i]], points.initial, points.initial_values, points.boundary_lo,
                       points.boundary_hi)
        loss = task_losses(model, pde, configs[i:i + 1], own, residual_weight)[0]
        grads.append(_flat_grads(loss, parameters))
        losses.append(loss.detach())
    return torch.stack(losses), torch.stack(grads)


@dataclass
class MetaTrainingHistory:
    """What :func:`meta_train` recorded: the sampler's probabilities, residual counts and training losses at
    each update, and the final validation losses."""

    update_steps: list[int] = field(default_factory=list)
    probabilities: list[list[float]] = field(default_factory=list)
    residual_points: list[list[int]] = field(default_factory=list)
    losses: list[list[float]] = field(default_factory=list)
    #: Each configuration's loss on the validation points after the last step (what a PINN user can measure).
    validation_losses: list[float] = field(default_factory=list)

    def mean_probabilities(self, last_fraction: float = 0.5) -> np.ndarray:
        """The probabilities averaged over the last ``last_fraction`` of the updates: (C,)."""
        check_number("last_fraction", last_fraction, minimum=0.0, exclusive=True, maximum=1.0)
        p = np.asarray(self.probabilities)
        return p[int(len(p) * (1 - last_fraction)):].mean(axis=0)


def meta_train(model: nn.Module, pde: ParametricPDE, configs: Sequence, sampler: TaskSampler, *, steps: int,
               mode: Literal["weight", "points"] = "weight", residual_points: int = 100,
               budget: int | None = None, initial_points: int = 256, boundary_points: int = 256,
               validation_points: int = 1000, residual_weight: float = 1.0, lr: float = 1e-3, warmup: int = 0,
               rad_candidates: int = 2000, rad_strategy: Literal["topk", "sample"] = "topk",
               refresh: Literal["none", "rad"] = "none", minimum_points: int = 10,
               generator: torch.Generator | None = None,
               callback: Callable[[int, float], None] | None = None) -> MetaTrainingHistory:
    """Meta-train ``model`` on the configurations ``configs`` of ``pde`` for ``steps`` Adam steps.

    ``budget`` (``mode="points"`` only) is the total number of residual points shared by all configurations
    (default ``residual_points * len(configs)``). ``refresh="rad"`` is the paper's RAD residual sampler for
    the baselines: every ``sampler.period`` steps each configuration keeps the older half of its points and
    replaces the rest by RAD-selected candidates. Returns the sampler's history. The learning rate warms up
    linearly for ``warmup`` steps, then follows a cosine to zero.
    """
    steps = check_int("steps", steps, minimum=1)
    for name, value in (("residual_points", residual_points), ("initial_points", initial_points),
                        ("boundary_points", boundary_points), ("validation_points", validation_points),
                        ("rad_candidates", rad_candidates)):
        check_int(name, value, minimum=1)
    check_int("warmup", warmup, minimum=0)
    check_int("minimum_points", minimum_points, minimum=1)
    check_number("lr", lr, minimum=0.0, exclusive=True)
    if rad_strategy not in ("topk", "sample"):
        raise ValueError(f"rad_strategy must be 'topk' or 'sample', got {rad_strategy!r}")
    if not isinstance(sampler, TaskSampler):
        raise TypeError(f"sampler must be a TaskSampler, got {type(sampler).__name__}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    check_number("residual_weight", residual_weight, minimum=0.0)
    if mode not in ("weight", "points"):
        raise ValueError(f"mode must be 'weight' (DATS-w) or 'points' (DATS-rp), got {mode!r}")
    table = torch.tensor([pde.check_params(c) for c in configs], dtype=torch.float32)
    if len(table) == 0:
        raise ValueError("configs must hold at least one configuration")
    n = len(table)
    if sampler.n_tasks != n:
        raise ValueError(f"sampler has {sampler.n_tasks} tasks but {n} configurations were given")
    if refresh not in ("none", "rad"):
        raise ValueError(f"refresh must be 'none' or 'rad', got {refresh!r}")
    if budget is not None and mode != "points":
        raise ValueError("budget applies to mode='points' only")
    budget = residual_points * n if budget is None else check_int("budget", budget, minimum=0)
    if mode == "points" and budget < minimum_points * n:
        raise ValueError(f"the residual budget ({budget}: budget, or residual_points x configurations) must be >= "
                         f"minimum_points x configurations = {minimum_points * n}")
    g = generator if generator is not None else torch.Generator().manual_seed(0)

    start = sampler.allocate(budget, minimum_points).tolist() if mode == "points" else residual_points
    train = PointSet.sample(pde, n, start, initial_points, boundary_points, g)
    val = PointSet.sample(pde, n, validation_points, initial_points, boundary_points, g)
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimiser = torch.optim.Adam(parameters, lr=lr, foreach=True)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimiser, lambda s: (s + 1) / warmup if s < warmup else
                                                 0.5 * (1 + math.cos(math.pi * (s - warmup) / max(1, steps - warmup))))
    history = MetaTrainingHistory()
    for step in range(steps):
        due = sampler.due(step)
        if due and mode == "points" and step > 0:
            _reallocate(model, pde, table, train, sampler.allocate(budget, minimum_points).tolist(),
                        rad_candidates, rad_strategy, g)
        if due and refresh == "rad" and step > 0:
            _refresh(model, pde, table, train, rad_candidates, rad_strategy, g)
        losses = task_losses(model, pde, table, train, residual_weight)
        if due:
            if sampler.needs_gradients:
                train_grads = _task_losses_and_grads(model, pde, table, train, residual_weight, parameters)[1]
                val_losses, val_grads = _task_losses_and_grads(model, pde, table, val, residual_weight, parameters)
                sampler.update(losses.detach(), val_losses, train_grads, val_grads)
            else:
                sampler.update(losses.detach())
            history.update_steps.append(step)
            history.probabilities.append(sampler.probabilities.tolist())
            history.residual_points.append(train.counts)
            history.losses.append(losses.detach().tolist())
        weights = sampler.weights().float() if mode == "weight" else torch.full((n,), 1.0 / n)
        total = (weights * losses).sum()
        optimiser.zero_grad(set_to_none=True)
        total.backward()
        optimiser.step()
        schedule.step()
        if callback is not None:
            callback(step, float(total.detach()))
    history.validation_losses = task_losses(model, pde, table, val, residual_weight).detach().tolist()
    return history


def _rad_points(model, pde, config: torch.Tensor, n: int, candidates: int, strategy: str,
                generator: torch.Generator) -> torch.Tensor:
    """``n`` new residual points for one configuration, chosen by RAD from a fresh uniform pool."""
    pool = pde.sample_interior(max(candidates, n), generator).requires_grad_(True)
    params = config.expand(len(pool), -1)
    r = pde.residual(model(pool, params), pool, params).detach()
    return pool.detach()[select_by_residual(r, n, strategy=strategy, generator=generator)]


def _reallocate(model, pde, table, points: PointSet, targets: list[int], candidates: int, strategy: str,
                generator: torch.Generator) -> None:
    """Grow or trim each configuration's residual points to ``targets`` (in place)."""
    for i, target in enumerate(targets):
        have = len(points.residual[i])
        if target < have:
            points.residual[i] = points.residual[i][have - target:]  # drop the oldest
        elif target > have:
            new = _rad_points(model, pde, table[i], target - have, candidates, strategy, generator)
            points.residual[i] = torch.cat([points.residual[i], new])


def _refresh(model, pde, table, points: PointSet, candidates: int, strategy: str,
             generator: torch.Generator) -> None:
    """Keep the older half of each configuration's points, replace the rest by RAD (in place)."""
    for i, old in enumerate(points.residual):
        keep = len(old) // 2
        new = _rad_points(model, pde, table[i], len(old) - keep, candidates, strategy, generator)
        points.residual[i] = torch.cat([old[:keep], new])


def relative_l2(model: nn.Module, pde: ParametricPDE, configs: Sequence, n_t: int = 100,
                n_x: int = 256) -> np.ndarray:
    """Relative L2 error ``||u - u_ref|| / ||u_ref||`` on the ``n_t`` x ``n_x`` grid, per configuration: (C,)."""
    t, x = pde.grid(n_t, n_x)
    tt, xx = np.meshgrid(t, x, indexing="ij")
    coords = torch.tensor(np.stack([tt.ravel(), xx.ravel()], axis=1), dtype=torch.float32)
    errors = []
    for c in configs:
        c = pde.check_params(c)
        ref = pde.reference(c, t, x).ravel()
        params = torch.tensor(c, dtype=torch.float32).expand(len(coords), -1)
        with torch.no_grad():
            pred = model(coords, params).double().numpy()
        # sums of squares rather than np.linalg.norm: its BLAS dot costs milliseconds beside torch's threads
        errors.append(float(np.sqrt(np.square(pred - ref).sum() / np.square(ref).sum())))
    return np.asarray(errors)
