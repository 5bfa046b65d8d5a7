"""V-UCB and Meta-VBO: confidence bounds that cover the risk, the lacing value, the no-regret set, the priority."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("botorch")

from iclr24.meta_vbo import (  # noqa: E402
    VUCB,
    MetaVBO,
    PriorTask,
    RiskBounds,
    fit_risk_model,
    no_regret_set,
    risk_bounds,
    risk_measure,
)

BOX = torch.tensor([[0.0], [1.0]], dtype=torch.float64)
Z = torch.linspace(0, 1, 10, dtype=torch.float64)
GRID = torch.linspace(0, 1, 101, dtype=torch.float64).unsqueeze(1)


def bump(center, risky=0.0):
    """f(x, z): a bump at ``center`` that falls by ``risky`` for large z."""
    def f(x, z):
        return torch.exp(-(x[:, 0] - center) ** 2 / 0.005) * (1 - risky * torch.sigmoid((z - 0.5) / 0.05))
    return f


def observations(f, n, seed, where=(0.0, 1.0), noise=0.01):
    g = torch.Generator().manual_seed(seed)
    x = where[0] + (where[1] - where[0]) * torch.rand(n, 1, generator=g, dtype=torch.float64)
    z = Z[torch.randint(len(Z), (n,), generator=g)]
    return x, z, f(x, z) + noise * torch.randn(n, generator=g, dtype=torch.float64)


def test_copied_hyperparameters_reproduce_the_fitted_model():
    x, z, y = observations(lambda x, z: 5 * torch.sin(8 * x[:, 0]) * z + 3, 30, 0)
    fitted = fit_risk_model(x, z, y, BOX, (0.0, 1.0))
    copied = fit_risk_model(x, z, y, BOX, (0.0, 1.0), hyperparameters=fitted)
    probe = torch.rand(7, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    a, b = fitted.posterior(probe), copied.posterior(probe)
    assert torch.allclose(a.mean, b.mean, atol=1e-10) and torch.allclose(a.variance, b.variance, atol=1e-10)
    # and on a subset of the data: the same hyperparameters, conditioned on fewer points
    few = fit_risk_model(x[:5], z[:5], y[:5], BOX, (0.0, 1.0), hyperparameters=fitted)
    assert torch.equal(few.covar_module.lengthscale, fitted.covar_module.lengthscale)
    assert few.posterior(probe).variance.sum() > a.variance.sum()
    # its targets are standardised by the copied statistics, so it still interpolates its 5 observations
    at_data = few.posterior(torch.cat([x[:5], z[:5, None]], 1)).mean.squeeze(-1)
    assert torch.allclose(at_data, y[:5], atol=0.05 * float(y.std()))


def test_risk_bounds_cover_the_risk_of_a_function_drawn_from_the_gp_prior():
    g = torch.Generator().manual_seed(3)
    xs = torch.linspace(0, 1, 40, dtype=torch.float64)
    pairs = torch.cartesian_prod(xs, Z)
    dist = ((pairs[:, None, :] - pairs[None, :, :]) / torch.tensor([0.15, 0.3], dtype=torch.float64)) ** 2
    cov = torch.exp(-0.5 * dist.sum(-1)) + 1e-8 * torch.eye(len(pairs), dtype=torch.float64)
    f_grid = (torch.linalg.cholesky(cov) @ torch.randn(len(pairs), generator=g, dtype=torch.float64)).view(40, 10)
    index = torch.randperm(len(pairs), generator=g)[:60]
    y = f_grid.reshape(-1)[index] + 0.01 * torch.randn(60, generator=g, dtype=torch.float64)
    model = fit_risk_model(pairs[index, :1], pairs[index, 1], y, BOX, (0.0, 1.0))
    for measure in ("var", "cvar"):
        bounds = risk_bounds(model, xs.unsqueeze(1), Z, alpha=0.2, beta=9.0, measure=measure)
        truth = risk_measure(f_grid, 0.2, measure=measure)
        covered = (bounds.rho_lower <= truth) & (truth <= bounds.rho_upper)
        assert covered.double().mean() >= 0.95, measure
        assert bool((bounds.rho_upper - bounds.rho_lower).max() > 0.05)  # not trivially wide or narrow


@pytest.fixture(scope="module")
def target_model():
    return fit_risk_model(*observations(bump(0.3, risky=0.9), 6, 0, where=(0.0, 0.5)), BOX, (0.0, 1.0))


def test_vucb_is_a_botorch_acquisition_over_x(target_model):
    acq = VUCB(target_model, Z, alpha=0.1)
    values = acq(GRID.unsqueeze(1))
    assert values.shape == (101,)
    assert torch.allclose(values, acq.bounds(GRID).rho_upper, atol=1e-8)
    continuous = acq.next_query(bounds=BOX)
    assert 0 <= continuous.x.item() <= 1 and continuous.x_index is None
    assert acq(continuous.x.view(1, 1, 1)).item() >= values.max().item() - 1e-3


def test_vucb_refuses_q_above_one_with_a_clear_error(target_model):
    from botorch.optim import optimize_acqf

    acq = VUCB(target_model, Z, alpha=0.1)
    message = (r"X must be \(b, q=1, d\): VUCB scores one x per t-batch \(q must be 1\), got X of shape "
               r"\(4, 2, 1\), q = 2")
    with pytest.raises(ValueError, match=message):  # BoTorch's own check raised a bare AssertionError
        acq(torch.rand(4, 2, 1, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"got X of shape \(3, 1\), q = 3 \(a 2-D X is read as one batch of q = 3"):
        acq(torch.rand(3, 1, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"q must be 1\), got X of shape \(\d+, 2, 1\), q = 2"):
        optimize_acqf(acq, BOX, q=2, num_restarts=2, raw_samples=8)
    # q = 1 still works, with or without a t-batch dimension
    one = torch.tensor([[0.3]], dtype=torch.float64)
    assert torch.allclose(acq(one), acq(one.unsqueeze(0)))


def test_vucb_queries_the_upper_bound_maximiser_and_its_lacing_value(target_model):
    acq = VUCB(target_model, Z, alpha=0.1)
    query = acq.next_query(candidates=GRID)
    bounds = acq.bounds(GRID)
    assert query.x_index == int(bounds.rho_upper.argmax())
    laces = bounds.lacing[query.x_index]
    assert laces[query.z_index]
    assert bounds.std[query.x_index, query.z_index] == bounds.std[query.x_index][laces].max()
    assert query.regret_bound == pytest.approx(6 * bounds.std[query.x_index, query.z_index].item())
    by_prob = VUCB(target_model, Z, alpha=0.1, z_selection="max_prob").next_query(candidates=GRID)
    assert bounds.lacing[by_prob.x_index, by_prob.z_index]


def test_the_queried_z_is_the_most_uncertain_lacing_value_not_the_most_uncertain_z():
    from iclr24.meta_vbo import select_lacing_value

    # only z1 laces (see test_risk); z2 and z3 are far more uncertain
    lower = torch.tensor([[0.0, 1.0, 2.0, 3.0]], dtype=torch.float64)
    upper = torch.tensor([[1.2, 1.4, 9.0, 10.0]], dtype=torch.float64)
    weights = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    lacing, z_index = select_lacing_value(lower, upper, (upper - lower) / 6, weights, 0.3)
    assert lacing.tolist() == [[False, True, False, False]] and z_index.tolist() == [1]
    # two lacing values: max_std takes the wider, max_prob the more probable
    lower = torch.tensor([[0.0, 0.0, 2.0]], dtype=torch.float64)
    upper = torch.tensor([[5.0, 3.0, 9.0]], dtype=torch.float64)
    weights = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
    std = (upper - lower) / 6
    assert select_lacing_value(lower, upper, std, weights, 0.5)[0].tolist() == [[True, True, False]]
    assert select_lacing_value(lower, upper, std, weights, 0.5)[1].tolist() == [0]
    assert select_lacing_value(lower, upper, std, weights, 0.5, z_selection="max_prob")[1].tolist() == [1]


def handmade_bounds(rho_upper, rho_lower, width):
    t = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    n = len(rho_upper)
    return RiskBounds(lower=torch.zeros(n, 1), upper=torch.zeros(n, 1), std=torch.zeros(n, 1),
                      rho_lower=t(rho_lower), rho_upper=t(rho_upper), lacing=torch.ones(n, 1, dtype=torch.bool),
                      z_index=torch.zeros(n, dtype=torch.long), width=t(width))


def test_no_regret_set_keeps_plausible_maximisers_whose_regret_is_covered_by_their_width():
    # x+ = x0 (rho(u) = 3). max rho(l) = 2 excludes x2 (rho(u) = 1) however uncertain. x3's regret bound
    # 3 - 0.5 = 2.5 exceeds (1 + eta) w = 2 unless eta or lambda relax it; x1's 1 is within 2 x 1.
    bounds = handmade_bounds([3.0, 2.5, 1.0, 2.9], [1.0, 2.0, 0.5, 0.5], [2.0, 1.0, 5.0, 1.0])
    assert no_regret_set(bounds).tolist() == [True, True, False, False]
    assert no_regret_set(bounds, eta=1.5).tolist() == [True, True, False, True]
    assert no_regret_set(bounds, lambda_=0.5).tolist() == [True, True, False, True]
    assert no_regret_set(bounds, lambda_=0.49).tolist() == [True, True, False, False]
    # V-UCB's own pick is always a member
    assert no_regret_set(handmade_bounds([3.0, 1.0], [0.0, 0.9], [0.0, 0.0])).tolist() == [True, False]


def test_without_prior_tasks_meta_vbo_is_vucb(target_model):
    vucb = VUCB(target_model, Z).next_query(candidates=GRID)
    meta = MetaVBO(target_model, [], Z).next_query(candidates=GRID)
    assert (meta.x_index, meta.z_index) == (vucb.x_index, vucb.z_index)
    assert meta.query_set[meta.x_index] and meta.vucb_index == vucb.x_index
    assert int(meta.priority.sum()) == 0


@pytest.fixture(scope="module")
def prior_at_08():
    # prior tasks whose risk maximiser is at 0.8, on another scale
    return [PriorTask(*observations(lambda x, z: 40 * bump(0.8)(x, z) - 7, 50, s)) for s in (1, 2)]


def test_the_priority_moves_an_uncertain_query_to_the_prior_tasks_maximiser(target_model, prior_at_08):
    # the target has been observed only on [0, 0.5]: [0.5, 1] is uncertain and inside Q_t
    vucb = VUCB(target_model, Z).next_query(candidates=GRID)
    meta = MetaVBO(target_model, prior_at_08, Z, x_bounds=BOX).next_query(candidates=GRID)
    assert abs(meta.x.item() - 0.8) <= 0.05 < abs(vucb.x.item() - 0.8)
    assert meta.priority[meta.x_index] == 2 and meta.priority.max() == 2
    assert meta.priority[:50].sum() == 0  # no prior task favours the region near 0.3
    one = MetaVBO(target_model, prior_at_08[:1], Z, x_bounds=BOX).next_query(candidates=GRID)
    assert one.priority.max() == 1


def test_prior_tasks_cannot_pull_a_query_out_of_the_no_regret_set(prior_at_08):
    # the target is known well everywhere: its maximiser is at 0.3 and 0.8 is clearly worse, so Q_t excludes
    # 0.8 and the prior tasks only reorder points near 0.3
    data = observations(bump(0.3), 80, 5)
    confident = fit_risk_model(*data, BOX, (0.0, 1.0))
    meta = MetaVBO(confident, prior_at_08, Z, x_bounds=BOX).next_query(candidates=GRID)
    assert not meta.query_set[75:86].any()
    assert abs(meta.x.item() - 0.3) <= 0.1 and meta.priority[meta.x_index] == 0
    bounds = VUCB(confident, Z).bounds(GRID)
    x_plus = bounds.rho_upper.argmax()
    assert bounds.rho_upper[meta.x_index] >= bounds.rho_lower.max()
    # the regret bound behind the set: rho(u(x+)) - rho(l(x)) <= 2 w(x) = query.regret_bound
    assert bounds.rho_upper[x_plus] - bounds.rho_lower[meta.x_index] <= meta.regret_bound + 1e-12
    assert meta.regret_bound == pytest.approx(2 * bounds.width[meta.x_index].item())


@settings(max_examples=5, deadline=None)
@given(st.floats(0.01, 100.0), st.floats(-1000.0, 1000.0))
def test_queries_are_invariant_to_scaling_and_shifting_prior_tasks(target_model, prior_at_08, scale, shift):
    original = MetaVBO(target_model, prior_at_08, Z, x_bounds=BOX).next_query(candidates=GRID)
    moved = [PriorTask(t.x, t.z, scale * t.y + shift) for t in prior_at_08]
    rescaled = MetaVBO(target_model, moved, Z, x_bounds=BOX).next_query(candidates=GRID)
    assert (rescaled.x_index, rescaled.z_index) == (original.x_index, original.z_index)
    assert torch.equal(rescaled.priority, original.priority)


def test_a_flipped_prior_task_is_not_the_same_task(target_model, prior_at_08):
    # invariance is to positive scaling: negating a task moves its maximisers, and the priority follows
    flipped = [PriorTask(t.x, t.z, -t.y) for t in prior_at_08]
    original = MetaVBO(target_model, prior_at_08, Z, x_bounds=BOX).priority(GRID)
    assert not torch.equal(MetaVBO(target_model, flipped, Z, x_bounds=BOX).priority(GRID), original)


def test_meta_vbo_over_a_box_draws_candidates(target_model, prior_at_08):
    query = MetaVBO(target_model, prior_at_08, Z, x_bounds=BOX).next_query(bounds=BOX, n_candidates=128)
    assert 0 <= query.x.item() <= 1 and query.x_index is None
    assert len(query.query_set) == 129 and len(query.extras["candidates"]) == 129


@pytest.mark.parametrize("call, match", [
    (lambda m: MetaVBO(m, [], Z, eta=0.5), "eta"),
    (lambda m: MetaVBO(m, [], Z, lambda_=-1.0), "lambda_"),
    (lambda m: MetaVBO(m, PriorTask(GRID, Z, Z), Z), "prior_tasks"),
    (lambda m: MetaVBO(m, ["task"], Z), r"prior_tasks\[0\]"),
    (lambda m: VUCB(m, Z, alpha=0.0), "alpha"),
    (lambda m: VUCB(m, Z, z_weights=torch.ones(3) / 3), "z_weights"),
    (lambda m: VUCB(m, Z, measure="mean"), "measure"),
    (lambda m: VUCB(m, Z, z_selection="random"), "z_selection"),
    (lambda m: VUCB(m, Z).next_query(), "exactly one"),
    (lambda m: VUCB(m, Z).next_query(candidates=GRID, bounds=BOX), "exactly one"),
    (lambda m: fit_risk_model(GRID[:1], Z[:1], Z[:1]), "at least 2"),
    (lambda m: fit_risk_model(GRID[:3], Z[:2], Z[:3]), "same number"),
    (lambda m: fit_risk_model(GRID[:3], Z[:3], Z[:3], hyperparameters="fitted"), "hyperparameters"),
    (lambda m: fit_risk_model(GRID[:3], Z[:3], Z[:3], torch.tensor([[1.0], [0.0]])), "x_bounds"),
    (lambda m: VUCB(m, Z).next_query(candidates=torch.rand(4, 3, dtype=torch.float64)), "3"),
    (lambda m: VUCB(m, Z).next_query(bounds=torch.tensor([[0.0, 0.0], [1.0, 1.0]])), "bounds"),
    (lambda m: MetaVBO(m, [PriorTask(torch.rand(5, 2), Z[:5], Z[:5])], Z), r"prior_tasks\[0\].x"),
])
def test_bad_input_is_named(target_model, call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call(target_model)


def test_lacing_width_bounds_the_risk_gap_at_every_candidate(target_model):
    for measure in ("var", "cvar"):
        bounds = risk_bounds(target_model, GRID, Z, alpha=0.3, measure=measure)
        assert bool((bounds.width >= bounds.rho_upper - bounds.rho_lower - 1e-12).all())
        assert not math.isnan(float(bounds.width.sum()))


def test_local_maxima_on_a_line_ignore_flat_plateaus():
    from iclr24.meta_vbo import local_maxima

    line = torch.linspace(0, 1, 7, dtype=torch.float64).unsqueeze(1)
    values = torch.tensor([0.0, 1.0, 0.0, 2.0, 2.0, 0.0, 0.5], dtype=torch.float64)
    # the last point's 2 nearest candidates are both inward, and one of them (2.0) is higher
    assert local_maxima(values, line).tolist() == [False, True, False, True, True, False, False]
    assert local_maxima(values, line, n_neighbours=1)[-1]  # its one nearest neighbour is lower
    assert not local_maxima(torch.zeros(7, dtype=torch.float64), line).any()
    square = torch.cartesian_prod(torch.arange(3.0), torch.arange(3.0)).double()
    peak = torch.zeros(9, dtype=torch.float64)
    peak[4] = 1.0
    assert local_maxima(peak, square).nonzero().flatten().tolist() == [4]


def test_restarts_escape_the_everything_is_noise_optimum():
    from iclr24.meta_vbo import bump_problem
    from iclr24.meta_vbo.experiment import PROBLEMS

    problem = bump_problem(9, n_z=20, **PROBLEMS["1d"])
    g = torch.Generator().manual_seed(9 + 104_729)
    x = torch.rand(50, 1, generator=g, dtype=torch.float64)
    z = problem.z_values[torch.randint(20, (50,), generator=g)]
    y = problem.observe(x, z, g)
    once = fit_risk_model(x, z, y, BOX, (0.0, 1.0))
    best = fit_risk_model(x, z, y, BOX, (0.0, 1.0), restarts=3)
    assert once.likelihood.noise.item() > 0.5 > 0.05 > best.likelihood.noise.item()
    assert best.covar_module.lengthscale[0, 0] < 0.1 < once.covar_module.lengthscale[0, 0]


@pytest.mark.parametrize("measure", ["var", "cvar"])
def test_risk_bounds_query_a_lacing_value_at_every_candidate(target_model, measure):
    bounds = risk_bounds(target_model, GRID, Z, alpha=0.1, measure=measure)
    assert bool(bounds.lacing.gather(-1, bounds.z_index[:, None]).all())
    best = bounds.std.masked_fill(~bounds.lacing, -float("inf")).max(-1).values
    assert torch.equal(bounds.std.gather(-1, bounds.z_index[:, None]).squeeze(-1), best)


def test_copied_hyperparameters_restandardise_even_if_load_state_dict_does_not(monkeypatch):
    import inspect

    from botorch.models import SingleTaskGP

    original = SingleTaskGP.load_state_dict
    if "keep_transforms" not in inspect.signature(original).parameters:
        pytest.skip("this BoTorch's load_state_dict never re-standardises")
    monkeypatch.setattr(SingleTaskGP, "load_state_dict",
                        lambda self, sd, strict=True, **kw: original(self, sd, strict=strict, keep_transforms=False))
    x, z, y = observations(lambda x, z: 5 * torch.sin(8 * x[:, 0]) * z + 3, 30, 0)
    fitted = fit_risk_model(x, z, y, BOX, (0.0, 1.0))
    few = fit_risk_model(x[:5], z[:5], y[:5], BOX, (0.0, 1.0), hyperparameters=fitted)
    at_data = few.posterior(torch.cat([x[:5], z[:5, None]], 1)).mean.squeeze(-1)
    assert torch.allclose(at_data, y[:5], atol=0.05 * float(y.std()))


@pytest.mark.parametrize("n", [2, 6, 40])
def test_closed_form_marginals_match_botorch_posterior(n):
    # the fast path of risk_bounds (an exact GP in closed form) against model.posterior, the reference path
    from unittest import mock

    import iclr24.meta_vbo.acquisition as acquisition

    x, z, y = observations(bump(0.3, risky=0.9), 40, 4)
    fitted = fit_risk_model(x, z, 7.0 * y - 2.0, BOX, (0.0, 1.0))
    model = fit_risk_model(x[:n], z[:n], 7.0 * y[:n] - 2.0, BOX, (0.0, 1.0), hyperparameters=fitted)
    assert acquisition._is_plain_exact_gp(model)
    fast = acquisition._posterior_grid(model, GRID, Z)
    with mock.patch.object(acquisition, "_is_plain_exact_gp", lambda m: False):
        reference = acquisition._posterior_grid(model, GRID, Z)
    for a, b in zip(fast, reference):
        assert a.shape == (len(GRID), len(Z))
        assert torch.allclose(a, b, rtol=1e-9, atol=1e-12)


def test_a_given_priority_is_used_as_computed(target_model, prior_at_08):
    meta = MetaVBO(target_model, prior_at_08, Z, x_bounds=BOX)
    omega = meta.priority(GRID)
    computed, given_ = meta.next_query(candidates=GRID), meta.next_query(candidates=GRID, priority=omega)
    assert torch.equal(computed.x, given_.x) and torch.equal(computed.priority, given_.priority)
    # a priority that favours another point moves the query there, within Q_t
    other = torch.zeros_like(omega)
    other[int(computed.vucb_index)] = 5
    assert meta.next_query(candidates=GRID, priority=other).x_index == computed.vucb_index
    with pytest.raises(ValueError, match="priority"):
        meta.next_query(candidates=GRID, priority=omega[:-1])
    with pytest.raises(ValueError, match="priority"):
        meta.next_query(bounds=BOX, priority=omega)
