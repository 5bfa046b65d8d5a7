"""V-UCB and Meta-VBO: which (x, z) to query next when the goal is the risk rho(f(x, Z)) of a black box.

A BoTorch model of f(x, z) (any GPyTorch/BoTorch ``Model`` over inputs ``[x, z]``) gives confidence bounds
``l, u = mu -/+ beta^(1/2) sigma`` at every environmental value; the risk measure of those bounds brackets the
risk of f (``iclr24.meta_vbo.risk``). Then, at iteration t:

1. V-UCB (Nguyen et al., ICML 2021): ``x+ = argmax_x rho(u(x, Z))``, and z is a lacing value of x+, the one
   with the largest posterior standard deviation.
2. Meta-VBO (Nguyen, Low, Jaillet, ICLR 2024) keeps V-UCB's guarantee but lets prior tasks choose x among the
   *no-regret query set*

       Q_t = { x : rho(u(x)) >= max_x' rho(l(x'))                            (a plausible maximiser)
                   and rho(u(x+)) - rho(l(x)) <= (1 + eta) w(x) + lambda }    (uncertain enough, next to x+)

   where ``w(x) = u(x, z_x) - l(x, z_x)`` is the width at the lacing value z_x that would be queried with x.
   When the bounds hold, ``rho(u(x+)) - rho(l(x))`` bounds the instantaneous risk regret of querying x, so
   every query from Q_t costs at most ``(1 + eta)`` times the uncertainty it removes, plus ``lambda``: summed
   over t, V-UCB's sublinear bound scaled by (1 + eta), plus ``lambda * T``. x+ is always a member (its gap
   is at most w(x+)), and so is every plausible maximiser at least as uncertain as x+ when eta >= 1
   (``rho(u(x+)) - rho(l(x)) <= w(x+) + w(x)`` for them).
3. The priority ``omega(x)`` counts the prior tasks that have a probable local maximiser of the risk at x:
   a local maximum of ``rho(mu_i(x, Z))`` (over x's nearest candidates) that is also a plausible global one,
   ``rho_i(u_i(x)) >= max_x' rho_i(l_i(x'))``, under a GP fitted to task i's own observations. Meta-VBO
   queries ``argmax_{x in Q_t} omega(x)`` (ties: the larger ``rho(u(x))``, so with no informative prior task
   it is V-UCB) and a lacing value of that x.

omega depends on each prior task only through the location of its probable maximisers, which a positive
scaling or a shift of that task's outcomes does not move (its GP is fitted to standardised outcomes): the
queries are invariant to them. A harmful prior task can only reorder the points of Q_t, which shrinks
toward the target's maximisers as the target is learnt: robustness. The paper has no public code; where
this reading of its inequalities is a choice, docs/meta_vbo.md says so.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from botorch.acquisition import AcquisitionFunction
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.models.model import Model
from botorch.models.transforms import Normalize, Standardize
from botorch.optim import optimize_acqf
from botorch.optim.closures import get_loss_closure
from botorch.utils.sampling import draw_sobol_samples
from botorch.utils.transforms import t_batch_mode_transform
from gpytorch import settings as gpytorch_settings
from gpytorch.likelihoods import GaussianLikelihood
from gpytorch.mlls import ExactMarginalLogLikelihood
from linear_operator.utils.cholesky import psd_safe_cholesky

from iclr24.core.checks import check_int, check_number, check_tensor
from iclr24.meta_vbo.risk import RISK_MEASURES, lacing_values, risk_measure

__all__ = ["MetaVBO", "PriorTask", "RiskBounds", "RiskQuery", "VUCB", "Z_SELECTIONS", "fit_risk_model",
           "local_maxima", "no_regret_set", "probable_maximizers", "risk_bounds", "select_lacing_value"]

Z_SELECTIONS = ("max_std", "max_prob")
_CHUNK = 2048  # candidates per posterior call


def _as_double(name: str, value, ndim: int | None = None, shape_doc: str = "") -> torch.Tensor:
    try:
        tensor = torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"{name} must be a tensor of real numbers {shape_doc}, got {type(value).__name__}") from None
    if tensor.dtype == torch.bool or tensor.is_complex():
        raise TypeError(f"{name} must hold real numbers, got dtype {tensor.dtype}")
    tensor = check_tensor(name, tensor, ndim=ndim, shape_doc=shape_doc)
    return tensor.to(torch.float64)


def _input_dim(model: Model) -> int | None:
    """The number of x columns a model of f over ``[x, z]`` expects (None if it does not say)."""
    inputs = getattr(model, "train_inputs", None)
    return inputs[0].shape[-1] - 1 if inputs else None


def _check_x_dim(name: str, x: torch.Tensor, model: Model) -> None:
    d = _input_dim(model)
    if d is not None and x.shape[-1] != d:
        raise ValueError(f"{name} must have {d} columns (the model is over [x, z] with {d + 1} inputs), got "
                         f"{x.shape[-1]}")


def _z_weights(z_values: torch.Tensor, z_weights) -> torch.Tensor:
    if len(z_values) == 0:
        raise ValueError("z_values must hold at least one environmental value")
    if z_weights is None:
        return torch.full_like(z_values, 1.0 / len(z_values))
    weights = _as_double("z_weights", z_weights, ndim=1, shape_doc="(n_z,)")
    if weights.shape != z_values.shape:
        raise ValueError(f"z_weights must have one entry per z value ({len(z_values)}), got {weights.shape[0]}")
    if bool((weights < 0).any()) or abs(float(weights.sum()) - 1.0) > 1e-6:
        raise ValueError(f"z_weights must be non-negative and sum to 1, got sum {float(weights.sum()):.6g} and "
                         f"minimum {float(weights.min()):.3g}")
    return weights / weights.sum()


def fit_risk_model(x: torch.Tensor, z: torch.Tensor, y: torch.Tensor, x_bounds: torch.Tensor | None = None,
                   z_range: tuple[float, float] | None = None, hyperparameters: SingleTaskGP | None = None,
                   restarts: int = 1) -> SingleTaskGP:
    """A BoTorch ``SingleTaskGP`` on inputs ``[x, z]``, fitted by ``fit_gpytorch_mll``.

    Inputs are normalised to the unit cube (by ``x_bounds`` and ``z_range`` when given, else by the data) and
    outcomes standardised, so the fit, and everything Meta-VBO derives from it, is unchanged by a positive
    scaling or a shift of ``y``.

    Parameters
    ----------
    x : Tensor of shape (n, d)
    z : Tensor of shape (n,), the environmental value of each observation
    y : Tensor of shape (n,) or (n, 1), the observed f(x, z) (noisy observations are fine: the noise is fitted)
    x_bounds : Tensor of shape (2, d), optional
        The x domain; without it the normalisation is learnt from the data.
    z_range : (low, high), optional
        The z domain, used with ``x_bounds`` (default: the observed z's range).
    hyperparameters : SingleTaskGP, optional
        A model fitted earlier by this function: its kernel, noise, mean and outcome scaling are copied and
        nothing is fitted (the V-UCB authors' synthetic experiments hold pre-trained hyperparameters fixed;
        with a handful of observations a fitted lengthscale is often far too long).
    restarts : int
        Fits to run: the first from BoTorch's initial values, the others from lengthscales 0.05, 0.1, 0.2, ...
        on the unit cube; the one with the highest marginal likelihood is kept. A narrow-featured function
        seen at a few dozen points has a second optimum that calls it all noise, where BoTorch's start can
        land.
    """
    x = _as_double("x", x, ndim=2, shape_doc="(n, d)")
    z = _as_double("z", z, ndim=1, shape_doc="(n,)")
    y = _as_double("y", y)
    if y.dim() == 2 and y.shape[1] == 1:
        y = y.squeeze(1)
    if y.dim() != 1:
        raise ValueError(f"y must have shape (n,) or (n, 1) (one output), got {tuple(y.shape)}")
    if not len(x) == len(z) == len(y):
        raise ValueError(f"x, z and y must hold the same number of observations, got {len(x)}, {len(z)} and "
                         f"{len(y)}")
    if len(y) < 2:
        raise ValueError(f"fit_risk_model needs at least 2 observations, got {len(y)}")
    bounds = None
    if x_bounds is not None:
        x_bounds = _as_double("x_bounds", x_bounds, ndim=2, shape_doc="(2, d)")
        if x_bounds.shape != (2, x.shape[1]):
            raise ValueError(f"x_bounds must have shape (2, {x.shape[1]}), got {tuple(x_bounds.shape)}")
        if bool((x_bounds[0] > x_bounds[1]).any()):
            raise ValueError(f"x_bounds must have lower <= upper in every column, got {x_bounds.tolist()}")
        low, high = (float(z.min()), float(z.max())) if z_range is None else _check_range(z_range)
        bounds = torch.cat([x_bounds, torch.tensor([[low], [high]], dtype=torch.float64)], dim=1)
        # a column that does not vary (one candidate, one z value) is scaled by 1 rather than divided by 0
        bounds[1] = torch.where(bounds[1] > bounds[0], bounds[1], bounds[0] + 1.0)
    elif z_range is not None:
        raise ValueError("z_range is used with x_bounds: give both, or neither to learn the scaling from the data")
    restarts = check_int("restarts", restarts, minimum=1)
    inputs = torch.cat([x, z.unsqueeze(1)], dim=1)
    model = SingleTaskGP(inputs, y.unsqueeze(1), input_transform=Normalize(inputs.shape[1], bounds=bounds),
                         outcome_transform=Standardize(1))
    if hyperparameters is None:
        return _fit_with_restarts(model, restarts)
    if not (isinstance(hyperparameters, SingleTaskGP) and isinstance(hyperparameters.outcome_transform, Standardize)
            and isinstance(getattr(hyperparameters, "input_transform", None), Normalize)):
        raise TypeError(f"hyperparameters must be a SingleTaskGP from fit_risk_model (normalised inputs, "
                        f"standardised outcomes), got {type(hyperparameters).__name__}")
    if hyperparameters.train_inputs[0].shape[-1] != inputs.shape[1]:
        raise ValueError(f"hyperparameters come from a model on {hyperparameters.train_inputs[0].shape[-1]} input "
                         f"columns; this data has {inputs.shape[1]} ([x, z])")
    model.load_state_dict(hyperparameters.state_dict(), strict=False)
    # the targets were standardised by this data's statistics at construction; redo it with the copied ones
    # (BoTorch 0.18's load_state_dict does this too; done here so as not to depend on it)
    model.outcome_transform.eval()
    targets, _ = model.outcome_transform(y.unsqueeze(1))
    model.set_train_data(targets=targets.squeeze(-1), strict=False)
    return model.eval()


def _check_range(z_range) -> tuple[float, float]:
    if not isinstance(z_range, (tuple, list)) or len(z_range) != 2:
        raise TypeError(f"z_range must be (low, high), got {z_range!r}")
    low, high = (check_number("z_range", v) for v in z_range)
    if low > high:
        raise ValueError(f"z_range must have low <= high, got {z_range!r}")
    return low, high


def _fit_with_restarts(model: SingleTaskGP, restarts: int) -> SingleTaskGP:
    initial = copy.deepcopy(model.state_dict())
    best, best_state = -math.inf, None
    for attempt in range(restarts):
        if attempt:
            model.load_state_dict(initial)
            model.covar_module.lengthscale = torch.full_like(model.covar_module.lengthscale,
                                                             0.05 * 2.0 ** (attempt - 1))
        mll = ExactMarginalLogLikelihood(model.likelihood, model)
        fit_gpytorch_mll(mll)
        if restarts == 1:
            return model
        model.train()
        with torch.no_grad():
            value = -float(get_loss_closure(mll)())
        if value > best:
            best, best_state = value, copy.deepcopy(model.state_dict())
    model.load_state_dict(best_state)
    return model.eval()


@dataclass(frozen=True)
class PriorTask:
    """Observations ``(x, z, y)`` of one prior task: the same x and z domains, any outcome scale."""

    x: torch.Tensor
    z: torch.Tensor
    y: torch.Tensor

    def fit(self, x_bounds: torch.Tensor | None = None, z_range: tuple[float, float] | None = None) -> SingleTaskGP:
        return fit_risk_model(self.x, self.z, self.y, x_bounds, z_range)


@dataclass
class RiskBounds:
    """Confidence bounds of f and of its risk at candidate inputs, and the lacing value of each.

    ``lower``/``upper``/``std`` have shape (n, n_z); ``rho_lower``/``rho_upper``/``width``/``z_index`` (n,).
    ``width`` is ``upper - lower`` at the chosen lacing value ``z_index``.
    """

    lower: torch.Tensor
    upper: torch.Tensor
    std: torch.Tensor
    rho_lower: torch.Tensor
    rho_upper: torch.Tensor
    lacing: torch.Tensor
    z_index: torch.Tensor
    width: torch.Tensor


def _is_plain_exact_gp(model: Model) -> bool:
    """A single-output ``SingleTaskGP`` in eval mode with a Gaussian likelihood and at most the transforms
    :func:`fit_risk_model` uses: its marginal posterior has the closed form of :func:`_exact_marginals`."""
    return (type(model) is SingleTaskGP and not model.training and model.num_outputs == 1
            and type(model.likelihood) is GaussianLikelihood and len(model.train_inputs[0].shape) == 2
            and type(getattr(model, "input_transform", None)) in (Normalize, type(None))
            and type(getattr(model, "outcome_transform", None)) in (Standardize, type(None)))


class _ExactMarginals:
    """Marginal posterior mean and variance of an exact GP (:func:`_is_plain_exact_gp`) at many points.

    With ``K = k(X, X) + noise I = L L^T`` over the (transformed) training inputs, the standardised posterior
    at x is ``m(x) + k(x, X) K^-1 (y - m(X))`` and ``k(x, x) - |L^-1 k(X, x)|^2``, then mapped back by the
    outcome transform, as ``model.posterior`` computes them (a Cholesky factor with GPyTorch's jitter rule,
    variances floored at its ``min_variance``). It only evaluates ``k(x, X)`` and ``k(x, x)``, where
    ``model.posterior`` builds the joint covariance of the training inputs and every batch of test points.
    """

    def __init__(self, model: SingleTaskGP) -> None:
        train = model.train_inputs[0]
        prior = model.forward(train)
        covariance = model.likelihood(prior, [train]).covariance_matrix
        self.model, self.train = model, train
        self.cholesky = psd_safe_cholesky(covariance)
        residual = (model.train_targets - prior.mean).unsqueeze(-1)
        self.weights = torch.cholesky_solve(residual, self.cholesky)                  # (n_train, 1)

    def __call__(self, points: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``points`` (N, d + 1) -> posterior mean and variance, each (N,)."""
        model = self.model
        points = model.transform_inputs(points)
        cross = model.covar_module(points, self.train).to_dense()                   # (N, n_train)
        mean = model.mean_module(points) + (cross @ self.weights).squeeze(-1)
        root = torch.linalg.solve_triangular(self.cholesky, cross.T, upper=False)     # (n_train, N)
        variance = model.covar_module(points, diag=True) - root.pow(2).sum(0)
        transform = getattr(model, "outcome_transform", None)
        if transform is not None:
            mean = transform.means.squeeze() + transform.stdvs.squeeze() * mean
            variance = transform.stdvs.squeeze() ** 2 * variance
        return mean, variance.clamp_min(gpytorch_settings.min_variance.value(variance.dtype))


def _posterior_grid(model: Model, x: torch.Tensor, z_values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Posterior mean and standard deviation of f at every (x, z) pair, each of shape (n, n_z).

    An exact GP (:func:`_is_plain_exact_gp`, as :func:`fit_risk_model` returns) is evaluated in closed form
    over all pairs at once (:class:`_ExactMarginals`). Any other model goes through ``model.posterior``, each
    x a batch of its n_z pairs, so the posterior covariance is (n, n_z, n_z), never (n n_z)^2.
    """
    n, n_z = len(x), len(z_values)
    pairs = torch.cat([x.unsqueeze(1).expand(n, n_z, x.shape[1]),
                       z_values.view(1, n_z, 1).expand(n, n_z, 1)], dim=-1)
    means, stds = [], []
    with torch.no_grad():
        if _is_plain_exact_gp(model):
            marginals = _ExactMarginals(model)
            for start in range(0, n, _CHUNK):
                chunk = pairs[start:start + _CHUNK]
                mean, variance = marginals(chunk.reshape(-1, chunk.shape[-1]))
                means.append(mean.view(-1, n_z))
                stds.append(variance.sqrt().view(-1, n_z))
        else:
            for start in range(0, n, _CHUNK):
                posterior = model.posterior(pairs[start:start + _CHUNK])
                means.append(posterior.mean.squeeze(-1))
                stds.append(posterior.variance.clamp_min(0.0).sqrt().squeeze(-1))
    return torch.cat(means), torch.cat(stds)


def risk_bounds(model: Model, x: torch.Tensor, z_values: torch.Tensor, z_weights: torch.Tensor | None = None,
                alpha: float = 0.1, beta: float = 9.0, measure: str = "var",
                z_selection: str = "max_std") -> RiskBounds:
    """Bounds ``l, u = mu -/+ beta^(1/2) sigma`` of f at candidates ``x`` (n, d) times ``z_values`` and of
    the risk, ``rho(l)``, ``rho(u)``, with each candidate's lacing value (``z_selection``: the largest sigma,
    as V-UCB, or the most probable z, as the authors' code defaults to)."""
    x = _as_double("x", x, ndim=2, shape_doc="(n, d)")
    if len(x) == 0:
        raise ValueError("x (the candidates) must hold at least one point")
    _check_x_dim("candidates", x, model)
    z_values = _as_double("z_values", z_values, ndim=1, shape_doc="(n_z,)")
    weights = _z_weights(z_values, z_weights)
    beta = check_number("beta", beta, minimum=0.0)
    if z_selection not in Z_SELECTIONS:
        raise ValueError(f"z_selection must be one of {Z_SELECTIONS}, got {z_selection!r}")
    mean, std = _posterior_grid(model, x, z_values)
    lower, upper = mean - math.sqrt(beta) * std, mean + math.sqrt(beta) * std
    lacing, z_index = select_lacing_value(lower, upper, std, weights, alpha, measure, z_selection)
    width = (upper - lower).gather(-1, z_index.unsqueeze(-1)).squeeze(-1)
    return RiskBounds(lower, upper, std, risk_measure(lower, alpha, weights, measure),
                      risk_measure(upper, alpha, weights, measure), lacing, z_index, width)


def select_lacing_value(lower: torch.Tensor, upper: torch.Tensor, std: torch.Tensor, weights: torch.Tensor,
                        alpha: float, measure: str = "var",
                        z_selection: str = "max_std") -> tuple[torch.Tensor, torch.Tensor]:
    """The lacing values of each row of bounds ``(..., n_z)`` and the one to query: the largest ``std``
    (``"max_std"``) or the largest weight (``"max_prob"``) among them. Returns (lacing mask, z index)."""
    if z_selection not in Z_SELECTIONS:
        raise ValueError(f"z_selection must be one of {Z_SELECTIONS}, got {z_selection!r}")
    if std.shape != lower.shape:
        raise ValueError(f"std must have the shape of lower and upper {tuple(lower.shape)}, got {tuple(std.shape)}")
    lacing = lacing_values(lower, upper, alpha, weights, measure)
    weights = torch.as_tensor(weights, dtype=std.dtype)
    score = std if z_selection == "max_std" else weights.expand_as(std)
    return lacing, score.masked_fill(~lacing, -math.inf).argmax(-1)


def probable_maximizers(bounds: RiskBounds) -> torch.Tensor:
    """Candidates that may maximise the risk: ``rho(u(x)) >= max_x' rho(l(x'))`` (bool, shape (n,))."""
    return bounds.rho_upper >= bounds.rho_lower.max()


def local_maxima(values: torch.Tensor, candidates: torch.Tensor, n_neighbours: int | None = None) -> torch.Tensor:
    """Candidates whose value is >= that of each of their ``n_neighbours`` nearest candidates and > that of
    at least one (bool, shape (n,)); on a regular grid the default 2 d neighbours are the axis neighbours.
    The strict part keeps a flat plateau (a GP far from its data) from counting as a maximum everywhere."""
    candidates = _as_double("candidates", candidates, ndim=2, shape_doc="(n, d)")
    k = min(check_int("n_neighbours", n_neighbours if n_neighbours is not None else 2 * candidates.shape[1],
                      minimum=1), len(candidates) - 1)
    if k == 0:
        return torch.ones(len(candidates), dtype=torch.bool)
    is_max = torch.empty(len(candidates), dtype=torch.bool)
    for start in range(0, len(candidates), _CHUNK):
        rows = slice(start, start + _CHUNK)
        distance = torch.cdist(candidates[rows], candidates)
        distance[torch.arange(distance.shape[0]), torch.arange(start, start + distance.shape[0])] = math.inf
        neighbours = values[distance.topk(k, largest=False).indices]          # (rows, k)
        own = values[rows].unsqueeze(1)
        is_max[rows] = (own >= neighbours).all(1) & (own > neighbours).any(1)
    return is_max


def no_regret_set(bounds: RiskBounds, eta: float = 1.0, lambda_: float = 0.0) -> torch.Tensor:
    """Meta-VBO's no-regret query set Q_t over the candidates of ``bounds`` (bool, shape (n,)).

    The plausible maximisers whose regret bound ``rho(u(x+)) - rho(l(x))`` is within ``(1 + eta)`` times the
    width they would query, plus ``lambda_``; x+ (V-UCB's choice) is always a member.
    """
    eta = check_number("eta", eta, minimum=1.0)
    lambda_ = check_number("lambda_", lambda_, minimum=0.0)
    best = bounds.rho_upper.argmax()
    gap = bounds.rho_upper[best] - bounds.rho_lower
    # far from the data the gap and the width are both the prior's: rounding must not decide membership
    slack = 1e-9 * float(bounds.width.max())
    members = probable_maximizers(bounds) & (gap <= (1 + eta) * bounds.width + lambda_ + slack)
    members[best] = True
    return members


@dataclass
class RiskQuery:
    """The next query: ``x`` (d,), the environmental value ``z`` and its index, and why it was chosen.

    ``x_index`` is the candidate row (None for a continuous optimum). ``regret_bound`` bounds the query's
    instantaneous risk regret when the confidence bounds hold: ``w(x+)`` for V-UCB, ``(1 + eta) w(x) +
    lambda`` for Meta-VBO, which also fills ``query_set`` (Q_t over the candidates), ``priority`` (omega) and
    ``vucb_index`` (x+).
    """

    x: torch.Tensor
    z: float
    z_index: int
    x_index: int | None = None
    regret_bound: float = math.nan
    query_set: torch.Tensor | None = None
    priority: torch.Tensor | None = None
    vucb_index: int | None = None
    extras: dict = field(default_factory=dict)


class VUCB(AcquisitionFunction):
    r"""V-UCB: the upper confidence bound of the risk, ``rho(mu(x, Z) + beta^(1/2) sigma(x, Z))``.

    A BoTorch acquisition function over x alone (the environmental value is not chosen by the optimiser but
    by the lacing-value rule), so ``optimize_acqf`` and ``optimize_acqf_discrete`` work on it; ``next_query``
    does both steps.

    Parameters
    ----------
    model : botorch Model
        A single-output model of f over inputs ``[x, z]`` (d + 1 columns), e.g. from :func:`fit_risk_model`.
    z_values : Tensor of shape (n_z,)
        The environmental values.
    z_weights : Tensor of shape (n_z,), optional
        P(Z = z); uniform if omitted.
    alpha : float in (0, 1]
        Risk level.
    beta : float
        Confidence parameter: bounds are ``mu -/+ sqrt(beta) sigma`` (BoTorch's UCB convention; the V-UCB
        authors' experiments use sqrt(beta) = 3).
    measure : "var" or "cvar"
    z_selection : "max_std" or "max_prob"
        Which lacing value to query.

    Example::

        acq = VUCB(fit_risk_model(x, z, y), z_values, alpha=0.1)
        query = acq.next_query(candidates=grid)            # or bounds=torch.tensor([[0.0], [1.0]])
        y_new = f(query.x, query.z)
    """

    def __init__(self, model: Model, z_values: torch.Tensor, z_weights: torch.Tensor | None = None,
                 alpha: float = 0.1, beta: float = 9.0, measure: str = "var", z_selection: str = "max_std") -> None:
        if not isinstance(model, Model):
            raise TypeError(f"model must be a botorch Model of f over [x, z], got {type(model).__name__}")
        super().__init__(model=model)
        self.z_values = _as_double("z_values", z_values, ndim=1, shape_doc="(n_z,)")
        if len(self.z_values) == 0:
            raise ValueError("z_values must hold at least one environmental value")
        self.z_weights = _z_weights(self.z_values, z_weights)
        self.alpha = check_number("alpha", alpha, minimum=0.0, exclusive=True, maximum=1.0)
        self.beta = check_number("beta", beta, minimum=0.0)
        if measure not in RISK_MEASURES:
            raise ValueError(f"measure must be one of {RISK_MEASURES}, got {measure!r}")
        if z_selection not in Z_SELECTIONS:
            raise ValueError(f"z_selection must be one of {Z_SELECTIONS}, got {z_selection!r}")
        self.measure, self.z_selection = measure, z_selection

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """``X`` of shape (b, 1, d) -> rho(u(x, Z)) of shape (b,).

        One x per t-batch (``q = 1``): V-UCB scores a single point, and a joint value of q > 1 points (which
        ``optimize_acqf(..., q=2)`` asks for) is not defined by it; query points one at a time (:meth:`next_query`,
        or ``optimize_acqf`` with ``q=1``), or score many candidates as a batch of shape (b, 1, d).
        """
        if isinstance(X, torch.Tensor) and X.dim() >= 2 and X.shape[-2] != 1:
            as_q = "" if X.dim() > 2 else f" (a 2-D X is read as one batch of q = {X.shape[-2]} points)"
            raise ValueError(f"X must be (b, q=1, d): VUCB scores one x per t-batch (q must be 1), got X of shape "
                             f"{tuple(X.shape)}, q = {X.shape[-2]}{as_q}. V-UCB has no joint value for a batch of "
                             f"q > 1 points: evaluate candidates as (b, 1, d) (e.g. candidates.unsqueeze(1)), call "
                             f"optimize_acqf with q=1, or take queries one at a time with next_query")
        return self._forward(X)

    @t_batch_mode_transform(expected_q=1)
    def _forward(self, X: torch.Tensor) -> torch.Tensor:
        x = X.squeeze(-2)
        n_z = len(self.z_values)
        pairs = torch.cat([x.unsqueeze(-2).expand(*x.shape[:-1], n_z, x.shape[-1]),
                           self.z_values.to(x).view(n_z, 1).expand(*x.shape[:-1], n_z, 1)], dim=-1)
        posterior = self.model.posterior(pairs)
        std = posterior.variance.clamp_min(1e-12).sqrt().squeeze(-1)  # floored: sqrt has no gradient at 0
        upper = posterior.mean.squeeze(-1) + math.sqrt(self.beta) * std
        return risk_measure(upper, self.alpha, self.z_weights.to(x), self.measure)

    def bounds(self, x: torch.Tensor) -> RiskBounds:
        """:func:`risk_bounds` of this acquisition's model at candidates ``x`` (n, d)."""
        return risk_bounds(self.model, x, self.z_values, self.z_weights, self.alpha, self.beta, self.measure,
                           self.z_selection)

    def next_query(self, candidates: torch.Tensor | None = None, bounds: torch.Tensor | None = None,
                   num_restarts: int = 8, raw_samples: int = 256) -> RiskQuery:
        """x+ over a finite ``candidates`` set (n, d), or over the box ``bounds`` (2, d) by ``optimize_acqf``,
        and its lacing value."""
        if (candidates is None) == (bounds is None):
            raise ValueError("give exactly one of candidates (a finite x domain) or bounds (a box)")
        if candidates is not None:
            risk = self.bounds(_as_double("candidates", candidates, ndim=2, shape_doc="(n, d)"))
            index = int(risk.rho_upper.argmax())
            x = torch.as_tensor(candidates, dtype=torch.float64)[index]
        else:
            box = _as_double("bounds", bounds, ndim=2, shape_doc="(2, d)")
            _check_x_dim("bounds", box, self.model)
            x, _ = optimize_acqf(self, box, q=1, num_restarts=check_int("num_restarts", num_restarts, minimum=1),
                                 raw_samples=check_int("raw_samples", raw_samples, minimum=1))
            x, index = x.reshape(-1).detach(), None
            risk = self.bounds(x.unsqueeze(0))
        row = 0 if index is None else index
        z_index = int(risk.z_index[row])
        return RiskQuery(x=x, z=float(self.z_values[z_index]), z_index=z_index, x_index=index,
                         regret_bound=float(risk.width[row]), vucb_index=index)


class MetaVBO:
    """Meta-VBO: V-UCB's no-regret query set, ordered by how many prior tasks favour each point.

    Parameters
    ----------
    model : botorch Model
        The target task's model of f over ``[x, z]``.
    prior_tasks : sequence of PriorTask or botorch Model
        Observations of prior tasks (fitted here with :func:`fit_risk_model`) or models already fitted to
        them; their outcome scales do not matter.
    z_values, z_weights, alpha, beta, measure, z_selection
        As :class:`VUCB`; prior tasks share the target's z distribution and risk measure.
    lambda_ : float >= 0
        Additive slack of the no-regret set, in outcome units (each query's regret bound grows by it).
    eta : float >= 1
        The regret a query may cost, in units of the width it queries, is ``1 + eta``.
    x_bounds : Tensor of shape (2, d), optional
        Normalisation box for prior tasks given as observations; by default their data's range.

    Example::

        meta = MetaVBO(fit_risk_model(x, z, y), [PriorTask(x1, z1, y1), PriorTask(x2, z2, y2)], z_values)
        query = meta.next_query(candidates=grid)
        query.x, query.z, query.query_set.sum(), query.priority.max()
    """

    def __init__(self, model: Model, prior_tasks: Sequence[PriorTask | Model], z_values: torch.Tensor,
                 z_weights: torch.Tensor | None = None, alpha: float = 0.1, beta: float = 9.0,
                 lambda_: float = 0.0, eta: float = 1.0, measure: str = "var", z_selection: str = "max_std",
                 x_bounds: torch.Tensor | None = None) -> None:
        self.vucb = VUCB(model, z_values, z_weights, alpha, beta, measure, z_selection)
        self.eta = check_number("eta", eta, minimum=1.0)
        self.lambda_ = check_number("lambda_", lambda_, minimum=0.0)
        if isinstance(prior_tasks, (PriorTask, Model)) or not isinstance(prior_tasks, Sequence):
            raise TypeError(f"prior_tasks must be a sequence of PriorTask or botorch Model, got "
                            f"{type(prior_tasks).__name__}")
        z_range = (float(self.vucb.z_values.min()), float(self.vucb.z_values.max()))
        self.prior_models: list[Model] = []
        for i, task in enumerate(prior_tasks):
            if isinstance(task, PriorTask):
                d = _input_dim(model)
                if d is not None and (torch.as_tensor(task.x).dim() != 2 or torch.as_tensor(task.x).shape[1] != d):
                    raise ValueError(f"prior_tasks[{i}].x must have shape (n, {d}) like the target's x, got "
                                     f"{tuple(torch.as_tensor(task.x).shape)}")
                self.prior_models.append(task.fit(x_bounds, z_range if x_bounds is not None else None))
            elif isinstance(task, Model):
                if _input_dim(task) not in (None, _input_dim(model)):
                    raise ValueError(f"prior_tasks[{i}] is a model over {_input_dim(task) + 1} inputs; the target's "
                                     f"is over {_input_dim(model) + 1} ([x, z])")
                self.prior_models.append(task)
            else:
                raise TypeError(f"prior_tasks[{i}] must be a PriorTask or a botorch Model, got {type(task).__name__}")

    def priority(self, candidates: torch.Tensor) -> torch.Tensor:
        """omega(x): the number of prior tasks with a probable local maximiser at each candidate (long, (n,))."""
        candidates = _as_double("candidates", candidates, ndim=2, shape_doc="(n, d)")
        omega = torch.zeros(len(candidates), dtype=torch.long)
        v = self.vucb
        for model in self.prior_models:
            bounds = risk_bounds(model, candidates, v.z_values, v.z_weights, v.alpha, v.beta, v.measure,
                                 v.z_selection)
            mean_risk = risk_measure((bounds.lower + bounds.upper) / 2, v.alpha, v.z_weights, v.measure)
            omega += (probable_maximizers(bounds) & local_maxima(mean_risk, candidates)).long()
        return omega

    def next_query(self, candidates: torch.Tensor | None = None, bounds: torch.Tensor | None = None,
                   n_candidates: int = 1024, seed: int = 0, priority: torch.Tensor | None = None) -> RiskQuery:
        """The Meta-VBO query over a finite ``candidates`` set (n, d), or over the box ``bounds`` (2, d),
        represented by ``n_candidates`` scrambled-Sobol points plus V-UCB's own continuous optimum.

        ``priority`` is omega at ``candidates`` (long, (n,)) when already computed by :meth:`priority`: it
        depends only on the prior tasks and the candidates, not on the target's observations, so a BO loop
        over a fixed candidate set computes it once.
        """
        if (candidates is None) == (bounds is None):
            raise ValueError("give exactly one of candidates (a finite x domain) or bounds (a box)")
        if priority is not None and candidates is None:
            raise ValueError("priority is omega at given candidates; with bounds the candidates are drawn here")
        if candidates is None:
            box = _as_double("bounds", bounds, ndim=2, shape_doc="(2, d)")
            check_int("seed", seed, minimum=0)
            sobol = draw_sobol_samples(box, n=check_int("n_candidates", n_candidates, minimum=1), q=1,
                                       seed=seed).squeeze(1)
            candidates = torch.cat([self.vucb.next_query(bounds=box).x.unsqueeze(0), sobol])
        candidates = _as_double("candidates", candidates, ndim=2, shape_doc="(n, d)")
        risk = self.vucb.bounds(candidates)
        members = no_regret_set(risk, self.eta, self.lambda_)
        if priority is None:
            omega = self.priority(candidates)
        else:
            omega = torch.as_tensor(priority)
            if omega.shape != (len(candidates),) or omega.dtype != torch.long:
                raise ValueError(f"priority must be omega at the candidates, long of shape ({len(candidates)},), got "
                                 f"{omega.dtype} of shape {tuple(omega.shape)}")
        # lexicographic argmax over Q_t: the priority first, then V-UCB's own criterion
        order = torch.argsort(risk.rho_upper, descending=True, stable=True)
        ranked = order[torch.argsort(omega[order], descending=True, stable=True)]
        index = int(ranked[members[ranked]][0])
        z_index = int(risk.z_index[index])
        return RiskQuery(x=candidates[index], z=float(self.vucb.z_values[z_index]), z_index=z_index,
                         x_index=index if bounds is None else None,
                         regret_bound=float((1 + self.eta) * risk.width[index] + self.lambda_),
                         query_set=members, priority=omega, vucb_index=int(risk.rho_upper.argmax()),
                         extras={"candidates": candidates} if bounds is not None else {})
