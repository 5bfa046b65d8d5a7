"""Parametric 1-D time-dependent PDEs on t in [0, 1], with reference solutions computed in-process.

Each problem is a family u_t = N_lambda[u] indexed by its parameters lambda (one configuration =
one meta-learning task). A problem gives the PINN its residual (by autograd on the network's
output), its initial and boundary conditions, and a reference solution on a grid for the
relative L2 error. No data files: convection has a closed form, reaction-diffusion is solved by
operator splitting (exact reaction step, spectral diffusion step), Burgers by the Cole-Hopf
transform with a quadrature fine enough for the viscosities used.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from iclr24.core.checks import check_int, check_number

__all__ = ["Burgers", "Convection", "ParametricPDE", "ReactionDiffusion", "derivatives"]


def derivatives(u: torch.Tensor, coords: torch.Tensor, second: bool = False):
    """(u_t, u_x) or (u_t, u_x, u_xx) of a pointwise network output ``u`` (M,) at ``coords`` (M, 2) = (t, x).

    ``coords`` must require grad; the graph is kept so the residual can be trained on.
    """
    if not isinstance(coords, torch.Tensor) or coords.dim() != 2 or coords.shape[1] != 2 or not coords.requires_grad:
        got = f"shape {tuple(coords.shape)}, requires_grad={coords.requires_grad}" \
            if isinstance(coords, torch.Tensor) else type(coords).__name__
        raise ValueError(f"coords must be an (M, 2) tensor of (t, x) that requires grad, got {got}")
    if not isinstance(u, torch.Tensor) or u.shape != coords.shape[:1]:
        got = tuple(u.shape) if isinstance(u, torch.Tensor) else type(u).__name__
        raise ValueError(f"u must be the network's output at coords, shape ({coords.shape[0]},), got {got}")
    grad = torch.autograd.grad(u.sum(), coords, create_graph=True)[0]
    u_t, u_x = grad[:, 0], grad[:, 1]
    if not second:
        return u_t, u_x
    u_xx = torch.autograd.grad(u_x.sum(), coords, create_graph=True)[0][:, 1]
    return u_t, u_x, u_xx


class ParametricPDE:
    """A family of PDEs on (t, x) in [0, 1] x [x_min, x_max], one member per parameter tuple."""

    name = "pde"
    param_names: tuple[str, ...] = ()
    x_range: tuple[float, float] = (0.0, 2 * math.pi)
    t_range: tuple[float, float] = (0.0, 1.0)
    #: "periodic": u(t, x_min) = u(t, x_max); "dirichlet": u = 0 at both ends.
    boundary = "periodic"

    def check_params(self, params: Sequence[float]) -> tuple[float, ...]:
        """``params`` (a number, or a sequence, array or tensor row) as a tuple of floats, one per
        :attr:`param_names`, or a ValueError."""
        if isinstance(params, (np.ndarray, torch.Tensor)):
            params = params.tolist()
        values = tuple(params) if isinstance(params, (tuple, list)) else (params,)
        if len(values) != len(self.param_names):
            raise ValueError(f"{self.name} takes {len(self.param_names)} parameter(s) {self.param_names}, "
                             f"got {params!r}")
        return tuple(check_number(n, v) for n, v in zip(self.param_names, values))

    def initial_condition(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def residual(self, u: torch.Tensor, coords: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
        """The PDE residual at each point; ``params`` (M, n_params) holds each point's configuration."""
        raise NotImplementedError

    def reference(self, params: Sequence[float], t: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The solution on the grid ``t`` x ``x``: shape (len(t), len(x))."""
        raise NotImplementedError

    def check_grid(self, t, x) -> tuple[np.ndarray, np.ndarray]:
        """``t`` and ``x`` as finite 1-D float arrays, ``t`` non-decreasing and >= 0, or a ValueError."""
        t = np.atleast_1d(np.asarray(t, dtype=float))
        x = np.atleast_1d(np.asarray(x, dtype=float))
        for name, v in (("t", t), ("x", x)):
            if v.ndim != 1 or not np.isfinite(v).all():
                raise ValueError(f"{name} must be a finite 1-D array, got shape {v.shape}")
        if len(t) and (t.min() < 0 or np.any(np.diff(t) < 0)):
            raise ValueError("t must be non-decreasing and >= 0")
        return t, x

    def grid(self, n_t: int = 100, n_x: int = 256) -> tuple[np.ndarray, np.ndarray]:
        """The evaluation grid of the paper's code: ``n_t`` times in [0, 1], ``n_x`` positions (periodic: the
        right end excluded)."""
        n_t, n_x = check_int("n_t", n_t, minimum=2), check_int("n_x", n_x, minimum=2)
        t = np.linspace(*self.t_range, n_t)
        lo, hi = self.x_range
        x = np.linspace(lo, hi, n_x, endpoint=self.boundary != "periodic")
        return t, x

    def sample_interior(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """``n`` collocation points (t, x), uniform in the domain: (n, 2)."""
        u = torch.rand(n, 2, generator=generator)
        lo = torch.tensor([self.t_range[0], self.x_range[0]])
        hi = torch.tensor([self.t_range[1], self.x_range[1]])
        return lo + u * (hi - lo)

    def sample_initial(self, n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` points at t = 0 and the initial values there."""
        x = self.x_range[0] + torch.rand(n, generator=generator) * (self.x_range[1] - self.x_range[0])
        return torch.stack([torch.zeros(n), x], dim=1), self.initial_condition(x)

    def sample_boundary(self, n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` boundary times as two point sets, at x_min and x_max: (n, 2) each."""
        t = self.t_range[0] + torch.rand(n, generator=generator) * (self.t_range[1] - self.t_range[0])
        return (torch.stack([t, torch.full_like(t, self.x_range[0])], dim=1),
                torch.stack([t, torch.full_like(t, self.x_range[1])], dim=1))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Convection(ParametricPDE):
    """u_t + beta u_x = 0, u(0, x) = sin x, periodic on [0, 2 pi]; exact solution u = sin(x - beta t).

    Large beta is the classic PINN failure mode (Krishnapriyan et al., 2021): the harder configurations
    DATS should learn to favour.
    """

    name = "convection"
    param_names = ("beta",)

    def initial_condition(self, x):
        return torch.sin(x)

    def residual(self, u, coords, params):
        u_t, u_x = derivatives(u, coords)
        return u_t + params[:, 0] * u_x

    def reference(self, params, t, x):
        (beta,) = self.check_params(params)
        t, x = self.check_grid(t, x)
        return np.sin(x[None, :] - beta * t[:, None])


class ReactionDiffusion(ParametricPDE):
    """u_t - nu u_xx - rho u (1 - u) = 0, u(0, x) = exp(-(x - pi)^2 / (2 (pi/4)^2)), periodic on [0, 2 pi].

    Reference: Lie splitting with ``substeps`` steps per output interval; the reaction step is solved
    exactly (logistic growth), the diffusion step exactly in Fourier space.
    """

    name = "reaction_diffusion"
    param_names = ("nu", "rho")

    def __init__(self, substeps: int = 50) -> None:
        self.substeps = check_int("substeps", substeps, minimum=1)

    def initial_condition(self, x):
        return torch.exp(-((x - math.pi) / (math.pi / 4)) ** 2 / 2)

    def residual(self, u, coords, params):
        u_t, _, u_xx = derivatives(u, coords, second=True)
        return u_t - params[:, 0] * u_xx - params[:, 1] * u * (1 - u)

    def reference(self, params, t, x):
        nu, rho = self.check_params(params)
        if nu < 0:
            raise ValueError(f"nu must be >= 0, got {nu}")
        t, x = self.check_grid(t, x)
        # Spectral on a fine periodic grid, then interpolated (periodically) onto x.
        n = 512
        grid = np.linspace(0, 2 * np.pi, n, endpoint=False)
        k = np.fft.fftfreq(n, d=1.0 / n)
        u = np.exp(-((grid - np.pi) / (np.pi / 4)) ** 2 / 2)
        out = np.empty((len(t), len(x)))
        now = 0.0
        for i, target in enumerate(t):
            span = target - now
            if span > 0:
                dt = span / self.substeps
                diffuse = np.exp(-nu * k**2 * dt)
                for _ in range(self.substeps):
                    grow = u * np.exp(rho * dt)
                    u = grow / (grow + 1 - u)
                    u = np.real(np.fft.ifft(np.fft.fft(u) * diffuse))
                now = target
            out[i] = _periodic_interp(x, grid, u)
        return out


class Burgers(ParametricPDE):
    """u_t + u u_x - nu u_xx = 0, u(0, x) = -sin(pi x), u(t, -1) = u(t, 1) = 0 on [-1, 1].

    Reference: the Cole-Hopf solution
    u = -∫ sin(pi (x - y)) f(x - y) G(y) dy / ∫ f(x - y) G(y) dy, f(z) = exp(-cos(pi z) / (2 pi nu)),
    G the heat kernel of variance 2 nu t, by the trapezoid rule on ``quadrature`` nodes (in log space, so
    small nu does not overflow). Accurate for nu >= 1e-3 at the default quadrature.
    """

    name = "burgers"
    param_names = ("nu",)
    x_range = (-1.0, 1.0)
    boundary = "dirichlet"

    def __init__(self, quadrature: int = 2001) -> None:
        self.quadrature = check_int("quadrature", quadrature, minimum=11)

    def initial_condition(self, x):
        return -torch.sin(math.pi * x)

    def residual(self, u, coords, params):
        u_t, u_x, u_xx = derivatives(u, coords, second=True)
        return u_t + u * u_x - params[:, 0] * u_xx

    def reference(self, params, t, x):
        (nu,) = self.check_params(params)
        if nu <= 0:
            raise ValueError(f"nu must be > 0, got {nu}")
        t, x = self.check_grid(t, x)
        z = np.linspace(-8.0, 8.0, self.quadrature)  # y = sqrt(4 nu t) z; the Gaussian weight exp(-z^2)
        out = np.empty((len(t), len(x)))
        for i, ti in enumerate(t):
            if ti == 0:
                out[i] = -np.sin(np.pi * x)
                continue
            shifted = x[:, None] - np.sqrt(4 * nu * ti) * z[None, :]
            log_w = -np.cos(np.pi * shifted) / (2 * np.pi * nu) - z[None, :] ** 2
            w = np.exp(log_w - log_w.max(axis=1, keepdims=True))
            out[i] = -(np.sin(np.pi * shifted) * w).sum(axis=1) / w.sum(axis=1)
        return out


def _periodic_interp(x: np.ndarray, grid: np.ndarray, values: np.ndarray) -> np.ndarray:
    period = 2 * np.pi
    return np.interp(np.mod(x, period), np.append(grid, period), np.append(values, values[0]))
