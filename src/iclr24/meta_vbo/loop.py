"""The BO loop: fit, choose (x, z), observe, repeat; with the simple regret of the risk when it is known."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch
from botorch.models import SingleTaskGP
from botorch.models.model import Model

from iclr24.core.checks import check_int, check_number
from iclr24.core.progress import progress
from iclr24.meta_vbo.acquisition import (
    VUCB,
    Z_SELECTIONS,
    MetaVBO,
    PriorTask,
    RiskQuery,
    _as_double,
    _z_weights,
    fit_risk_model,
)
from iclr24.meta_vbo.risk import RISK_MEASURES

__all__ = ["METHODS", "RiskOptimization", "optimize_risk"]

METHODS = ("meta_vbo", "vucb", "random")


@dataclass
class RiskOptimization:
    """What :func:`optimize_risk` did.

    ``x`` (n, d), ``z`` (n,), ``y`` (n,): every observation, the ``n_initial`` random ones first.
    ``queries``: the :class:`RiskQuery` of each BO iteration (None for ``random``).
    ``true_risk``: rho(f(x, Z)) at each observed x, when ``risk_fn`` was given.
    ``regret``: simple regret after each iteration, ``optimum - max true_risk`` over the queries so far
    (n_iter entries), when the optimum is known.
    """

    method: str
    x: torch.Tensor
    z: torch.Tensor
    y: torch.Tensor
    queries: list[RiskQuery | None] = field(default_factory=list)
    true_risk: torch.Tensor | None = None
    regret: torch.Tensor | None = None


def _true_risk(risk_fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    risk = torch.as_tensor(risk_fn(x), dtype=torch.float64)
    if risk.shape not in ((len(x),), (len(x), 1)) or not bool(torch.isfinite(risk).all()):
        raise ValueError(f"risk_fn must return {len(x)} finite values for {len(x)} inputs, got shape "
                         f"{tuple(risk.shape)}")
    return risk.reshape(-1)


def optimize_risk(objective: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], z_values: torch.Tensor,
                  n_iter: int, *, candidates: torch.Tensor | None = None, bounds: torch.Tensor | None = None,
                  method: str = "meta_vbo", prior_tasks: Sequence[PriorTask | Model] = (),
                  z_weights: torch.Tensor | None = None, alpha: float = 0.1, beta: float = 9.0,
                  lambda_: float = 0.0, eta: float = 1.0, measure: str = "var", z_selection: str = "max_std",
                  n_initial: int = 2, seed: int = 0, risk_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
                  optimum: float | None = None, hyperparameters=None, show_progress: bool = False) -> RiskOptimization:
    """Optimise the risk ``rho(objective(x, Z))`` by V-UCB, Meta-VBO or random search.

    Parameters
    ----------
    objective : callable
        ``objective(x, z)`` with ``x`` (n, d) and ``z`` (n,) returns (possibly noisy) observations (n,).
    z_values : Tensor of shape (n_z,)
        The environmental values (the BO chooses among them; they are distributed by ``z_weights``).
    n_iter : int
        BO iterations after the ``n_initial`` random observations.
    candidates, bounds
        The x domain: a finite set (n, d), or a box (2, d) (V-UCB optimises it with ``optimize_acqf``;
        Meta-VBO and random search draw from it).
    method : "meta_vbo", "vucb" or "random"
    prior_tasks : sequence of PriorTask or botorch Model
        Used by Meta-VBO: observations, each fitted once here, or models already fitted to them (e.g. by
        ``PriorTask.fit(box, z_range)``, to share the fits between runs).
    z_weights, alpha, beta, lambda_, eta, measure, z_selection
        As :class:`MetaVBO`.
    seed : int
        Seeds the initial design, random search and Sobol candidates; the same seed gives every method the
        same initial observations.
    risk_fn : callable, optional
        The true risk at inputs (n, d) -> (n,), for the regret (synthetic problems).
    optimum : float, optional
        The best achievable risk; defaults to ``risk_fn``'s maximum over ``candidates``.
    hyperparameters : SingleTaskGP, optional
        Hold the target model's hyperparameters at those of this fitted model (see :func:`fit_risk_model`)
        instead of refitting them every iteration.
    show_progress : bool
        Draw a progress bar (iclr24.core.progress) over the iterations; off by default in a library call, as the
        project's other long calls.
    """
    if optimum is not None:
        optimum = check_number("optimum", optimum)
        if risk_fn is None:
            raise ValueError("optimum is used with risk_fn (the regret needs the true risk of each query)")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    # every setting is checked before the objective is first called, whichever method uses it
    check_number("alpha", alpha, minimum=0.0, exclusive=True, maximum=1.0)
    check_number("beta", beta, minimum=0.0)
    check_number("eta", eta, minimum=1.0)
    check_number("lambda_", lambda_, minimum=0.0)
    if measure not in RISK_MEASURES:
        raise ValueError(f"measure must be one of {RISK_MEASURES}, got {measure!r}")
    if z_selection not in Z_SELECTIONS:
        raise ValueError(f"z_selection must be one of {Z_SELECTIONS}, got {z_selection!r}")
    if hyperparameters is not None and not isinstance(hyperparameters, SingleTaskGP):
        raise TypeError(f"hyperparameters must be a SingleTaskGP from fit_risk_model, got "
                        f"{type(hyperparameters).__name__}")
    if isinstance(prior_tasks, (PriorTask, Model)) or not isinstance(prior_tasks, Sequence):
        raise TypeError(f"prior_tasks must be a sequence of PriorTask or botorch Model, got "
                        f"{type(prior_tasks).__name__}")
    n_iter = check_int("n_iter", n_iter, minimum=1)
    n_initial = check_int("n_initial", n_initial, minimum=2)
    check_int("seed", seed, minimum=0)
    if (candidates is None) == (bounds is None):
        raise ValueError("give exactly one of candidates (a finite x domain) or bounds (a box)")
    z_values = _as_double("z_values", z_values, ndim=1, shape_doc="(n_z,)")
    if candidates is not None:
        candidates = _as_double("candidates", candidates, ndim=2, shape_doc="(n, d)")
        if len(candidates) == 0:
            raise ValueError("candidates must hold at least one point")
        d = candidates.shape[1]
        box = torch.stack([candidates.min(0).values, candidates.max(0).values])
    else:
        box = _as_double("bounds", bounds, ndim=2, shape_doc="(2, d)")
        if box.shape[0] != 2 or bool((box[0] > box[1]).any()):
            raise ValueError(f"bounds must be (2, d) with lower <= upper, got {box.tolist()}")
        d = box.shape[1]
    weights = _z_weights(z_values, z_weights)
    for i, task in enumerate(prior_tasks):
        if isinstance(task, Model):
            if getattr(task, "train_inputs", None) and task.train_inputs[0].shape[-1] != d + 1:
                raise ValueError(f"prior_tasks[{i}] is a model over {task.train_inputs[0].shape[-1]} inputs; the "
                                 f"domain needs {d + 1} ([x, z])")
            continue
        if not isinstance(task, PriorTask):
            raise TypeError(f"prior_tasks[{i}] must be a PriorTask or a botorch Model, got {type(task).__name__}")
        if torch.as_tensor(task.x).dim() != 2 or torch.as_tensor(task.x).shape[1] != d:
            raise ValueError(f"prior_tasks[{i}].x must have shape (n, {d}) like the domain, got "
                             f"{tuple(torch.as_tensor(task.x).shape)}")
    generator = torch.Generator().manual_seed(seed)
    z_range = (float(z_values.min()), float(z_values.max()))

    def random_x(n: int) -> torch.Tensor:
        if candidates is not None:
            return candidates[torch.randint(len(candidates), (n,), generator=generator)]
        return box[0] + (box[1] - box[0]) * torch.rand(n, d, generator=generator, dtype=torch.float64)

    def random_z(n: int) -> torch.Tensor:
        return z_values[torch.multinomial(weights, n, replacement=True, generator=generator)]

    def observe(x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        y = torch.as_tensor(objective(x, z), dtype=torch.float64).reshape(-1)
        if y.shape != (len(x),) or not bool(torch.isfinite(y).all()):
            raise ValueError(f"objective must return {len(x)} finite values for {len(x)} inputs, got {y.tolist()}")
        return y

    x_obs = random_x(n_initial)
    z_obs = random_z(n_initial)
    y_obs = observe(x_obs, z_obs)
    prior_models = ([task.fit(box, z_range) if isinstance(task, PriorTask) else task for task in prior_tasks]
                    if method == "meta_vbo" else [])
    omega = None  # Meta-VBO's priority over fixed candidates: the prior tasks' alone, so computed once
    settings = dict(z_weights=weights, alpha=alpha, beta=beta, measure=measure, z_selection=z_selection)
    queries: list[RiskQuery | None] = []
    bar_context = progress(f"optimize_risk[{method}]", total=n_iter) if show_progress else nullcontext()
    with bar_context as bar:
        for t in range(n_iter):
            if method == "random":
                x_new, z_new, query = random_x(1)[0], random_z(1)[0], None
            else:
                model = fit_risk_model(x_obs, z_obs, y_obs, box, z_range, hyperparameters)
                where = {"candidates": candidates} if candidates is not None else {"bounds": box}
                if method == "vucb":
                    query = VUCB(model, z_values, **settings).next_query(**where)
                else:
                    meta = MetaVBO(model, prior_models, z_values, lambda_=lambda_, eta=eta, **settings)
                    if candidates is not None and omega is None:
                        omega = meta.priority(candidates)
                    query = meta.next_query(**where, seed=seed * 1_000_003 + t, priority=omega)
                x_new, z_new = query.x, torch.tensor(query.z, dtype=torch.float64)
            queries.append(query)
            x_obs = torch.cat([x_obs, x_new.view(1, d)])
            z_obs = torch.cat([z_obs, z_new.view(1)])
            y_obs = torch.cat([y_obs, observe(x_new.view(1, d), z_new.view(1))])
            if show_progress:
                bar.advance()
    result = RiskOptimization(method, x_obs, z_obs, y_obs, queries)
    if risk_fn is not None:
        result.true_risk = _true_risk(risk_fn, x_obs)
        if optimum is None and candidates is not None:
            optimum = float(_true_risk(risk_fn, candidates).max())
        if optimum is not None:
            # the best risk among all observations so far, after each BO iteration
            result.regret = optimum - result.true_risk.cummax(0).values[n_initial:]
    return result
