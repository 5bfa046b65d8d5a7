import math

import numpy as np
import pytest
import torch

from iclr24.dats import Burgers, Convection, ReactionDiffusion


def _fd_residual(u, t, x, periodic):
    """Central differences in t (interior rows) and x: returns u_t, u_x, u_xx on the interior."""
    dt, dx = t[1] - t[0], x[1] - x[0]
    u_t = (u[2:] - u[:-2]) / (2 * dt)
    mid = u[1:-1]
    if periodic:
        right, left = np.roll(mid, -1, axis=1), np.roll(mid, 1, axis=1)
    else:
        right, left = mid[:, 2:], mid[:, :-2]
        u_t, mid = u_t[:, 1:-1], mid[:, 1:-1]
    return u_t, mid, (right - left) / (2 * dx), (right - 2 * mid + left) / dx**2


def test_convection_reference_is_the_closed_form_and_satisfies_the_pde():
    pde = Convection()
    t, x = pde.grid(400, 512)
    for beta in (1.0, 5.0, 9.0):
        u = pde.reference(beta, t, x)
        assert np.allclose(u[0], np.sin(x)) and np.allclose(u[:, 0], np.sin(-beta * t))
        u_t, _, u_x, _ = _fd_residual(u, t, x, periodic=True)
        residual = u_t + beta * u_x
        assert np.abs(residual).max() < 2e-3 * beta**3 + 1e-3  # second-order truncation error only
        assert np.abs(u_t).max() > 0.5 * beta  # and not trivially zero


def test_reaction_diffusion_reference_satisfies_the_pde():
    pde = ReactionDiffusion(substeps=200)
    t, x = pde.grid(201, 256)
    nu, rho = 2.0, 3.0
    u = pde.reference((nu, rho), t, x)
    assert np.allclose(u[0], np.exp(-((x - math.pi) / (math.pi / 4)) ** 2 / 2))
    u_t, mid, _, u_xx = _fd_residual(u, t, x, periodic=True)
    residual = u_t - nu * u_xx - rho * mid * (1 - mid)
    assert np.abs(residual).max() < 0.02 * np.abs(u_t).max()
    # the wrong sign of the reaction term is far from zero
    assert np.abs(u_t - nu * u_xx + rho * mid * (1 - mid)).max() > 0.5


def test_burgers_reference_satisfies_the_pde_and_the_boundary():
    pde = Burgers()
    t, x = pde.grid(401, 401)
    nu = 0.05
    u = pde.reference(nu, t, x)
    assert np.allclose(u[0], -np.sin(np.pi * x), atol=1e-12)
    assert np.abs(u[:, [0, -1]]).max() < 1e-6
    u_t, mid, u_x, u_xx = _fd_residual(u, t, x, periodic=False)
    residual = u_t + mid * u_x - nu * u_xx
    assert np.abs(residual).max() < 0.02 * np.abs(u_t).max()


def test_burgers_reference_at_small_viscosity_is_odd_bounded_and_converged():
    t, x = np.array([0.25, 0.5, 1.0]), np.linspace(-1, 1, 201)
    nu = 0.01 / math.pi
    u = Burgers().reference(nu, t, x)
    finer = Burgers(quadrature=8001).reference(nu, t, x)
    assert np.abs(u - finer).max() < 1e-5  # quadrature error at the shock; PINN errors are ~1e-2
    assert np.allclose(u, -u[:, ::-1], atol=1e-9) and np.abs(u).max() <= 1.0
    # the shock at x = 0 steepens: the slope there grows with t
    slope = (u[:, 101] - u[:, 99]) / (x[101] - x[99])
    assert slope[0] < slope[1] * 0 - 1 and slope[2] < slope[0]


def _residual_of(pde, fn, params, n=64):
    g = torch.Generator().manual_seed(0)
    coords = pde.sample_interior(n, g).requires_grad_(True)
    p = torch.tensor(params, dtype=torch.float32).expand(n, -1)
    return coords.detach(), pde.residual(fn(coords), coords, p)


def test_convection_residual_of_the_exact_solution_is_zero():
    pde = Convection()
    _, r = _residual_of(pde, lambda c: torch.sin(c[:, 1] - 7.0 * c[:, 0]), (7.0,))
    assert r.abs().max().item() < 1e-5


def test_residuals_pin_each_term_on_polynomials():
    # u = t x: u_t = x, u_x = t, u_xx = 0
    c, r = _residual_of(Burgers(), lambda c: c[:, 0] * c[:, 1], (0.3,))
    t, x = c[:, 0], c[:, 1]
    assert torch.allclose(r, x + (t * x) * t, atol=1e-5)
    # u = t + x^2: u_t = 1, u_xx = 2
    c, r = _residual_of(ReactionDiffusion(), lambda c: c[:, 0] + c[:, 1] ** 2, (0.5, 2.0))
    u = c[:, 0] + c[:, 1] ** 2
    assert torch.allclose(r, 1 - 0.5 * 2 - 2.0 * u * (1 - u), rtol=1e-5, atol=1e-4)
    # u = x^2 - 3t: u_t = -3, u_x = 2x
    c, r = _residual_of(Burgers(), lambda c: c[:, 1] ** 2 - 3 * c[:, 0], (0.1,))
    u = c[:, 1] ** 2 - 3 * c[:, 0]
    assert torch.allclose(r, -3 + u * 2 * c[:, 1] - 0.1 * 2, atol=1e-5)


def test_sampling_stays_in_the_domain():
    g = torch.Generator().manual_seed(1)
    pde = Burgers()
    pts = pde.sample_interior(1000, g)
    assert pts[:, 0].min() >= 0 and pts[:, 0].max() <= 1 and pts[:, 1].min() >= -1 and pts[:, 1].max() <= 1
    ic, values = pde.sample_initial(50, g)
    assert (ic[:, 0] == 0).all() and torch.allclose(values, -torch.sin(math.pi * ic[:, 1]))
    lo, hi = pde.sample_boundary(20, g)
    assert (lo[:, 1] == -1).all() and (hi[:, 1] == 1).all() and torch.equal(lo[:, 0], hi[:, 0])


@pytest.mark.parametrize("call,match", [
    (lambda: Convection().reference((1.0, 2.0), np.zeros(2), np.zeros(2)), "convection takes 1 parameter"),
    (lambda: ReactionDiffusion().reference(1.0, np.zeros(2), np.zeros(2)), "reaction_diffusion takes 2"),
    (lambda: Burgers().reference(0.0, np.zeros(2), np.zeros(2)), "nu must be > 0"),
    (lambda: Convection().reference(float("inf"), np.zeros(2), np.zeros(2)), "beta must be finite"),
    (lambda: Convection().grid(1, 10), "n_t must be >= 2"),
])
def test_bad_parameters_are_named(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


def test_parameters_may_be_array_or_tensor_rows_and_grids_are_checked():
    pde = ReactionDiffusion()
    t, x = np.array([0.0, 0.5]), np.linspace(0, 6, 8)
    assert np.array_equal(pde.reference(np.array([1.0, 2.0]), t, x), pde.reference(torch.tensor([1.0, 2.0]), t, x))
    with pytest.raises(ValueError, match="t must be non-decreasing and >= 0"):
        Burgers().reference(0.1, np.array([-0.5]), np.zeros(3))
    with pytest.raises(ValueError, match="t must be a finite 1-D array"):
        pde.reference((1.0, 2.0), np.array([np.nan]), x)
    with pytest.raises(ValueError, match="nu must be >= 0"):
        pde.reference((-1.0, 2.0), t, x)
