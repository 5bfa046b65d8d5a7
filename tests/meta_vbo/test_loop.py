"""The BO loop and the synthetic problems."""

import pytest
import torch

pytest.importorskip("botorch")

from iclr24.meta_vbo import BumpFunction, PriorTask, bump_problem, fit_risk_model, grid, optimize_risk  # noqa: E402


@pytest.fixture(scope="module")
def problem():
    return bump_problem(3, d=1, n_z=10, points_per_dim=100, n_bumps=5, bump_widths=(0.03, 0.06))


@pytest.fixture(scope="module")
def hyperparameters(problem):
    g = torch.Generator().manual_seed(0)
    x = torch.rand(60, 1, generator=g, dtype=torch.float64)
    z = problem.z_values[torch.randint(10, (60,), generator=g)]
    return fit_risk_model(x, z, problem.observe(x, z, g), torch.tensor([[0.0], [1.0]]), (0.0, 1.0))


def run(problem, method, n_iter, hyperparameters=None, seed=0, **kwargs):
    g = torch.Generator().manual_seed(seed)
    return optimize_risk(lambda x, z: problem.observe(x, z, g), problem.z_values, n_iter,
                         candidates=problem.candidates, method=method, seed=seed, risk_fn=problem.risk_of,
                         hyperparameters=hyperparameters, show_progress=False, **kwargs)


def test_vucb_finds_the_risk_maximiser_and_random_search_does_not(problem, hyperparameters):
    vucb = run(problem, "vucb", 15, hyperparameters)
    rand = run(problem, "random", 15)
    assert vucb.regret.shape == (15,) and vucb.x.shape == (17, 1) and len(vucb.queries) == 15
    assert vucb.regret[-1] <= 0.02 * problem.risk_range < rand.regret[-1]
    # the regret is the optimum minus the best risk observed so far
    assert torch.allclose(vucb.regret, problem.optimum - vucb.true_risk.cummax(0).values[2:])
    assert bool((vucb.regret[1:] <= vucb.regret[:-1]).all())


def test_every_method_starts_from_the_same_observations_and_runs_are_deterministic(problem, hyperparameters):
    a = run(problem, "vucb", 3, hyperparameters)
    b = run(problem, "meta_vbo", 3, hyperparameters, prior_tasks=[PriorTask(*problem.helpful[0])])
    assert torch.equal(a.x[:2], b.x[:2]) and torch.equal(a.z[:2], b.z[:2])
    again = run(problem, "meta_vbo", 3, hyperparameters, prior_tasks=[PriorTask(*problem.helpful[0])])
    assert torch.equal(b.x, again.x) and torch.equal(b.z, again.z)
    assert all(q.query_set[q.x_index] for q in b.queries)


def test_a_prior_task_fitted_once_gives_the_same_run_as_its_observations(problem, hyperparameters):
    task = PriorTask(*problem.helpful[0])
    fitted = task.fit(torch.tensor([[0.0], [1.0]], dtype=torch.float64), (0.0, 1.0))
    a = run(problem, "meta_vbo", 3, hyperparameters, prior_tasks=[task])
    b = run(problem, "meta_vbo", 3, hyperparameters, prior_tasks=[fitted])
    assert torch.equal(a.x, b.x) and torch.equal(a.z, b.z)
    assert all(torch.equal(p.priority, q.priority) for p, q in zip(a.queries, b.queries))


def test_helpful_prior_tasks_reach_the_maximiser_sooner(problem, hyperparameters):
    priors = [PriorTask(*task) for task in problem.helpful]
    meta = run(problem, "meta_vbo", 6, hyperparameters, prior_tasks=priors)
    vucb = run(problem, "vucb", 6, hyperparameters)
    assert meta.regret[-1] <= 0.005 * problem.risk_range < vucb.regret[-1]


def test_a_box_domain_and_refitted_hyperparameters(problem):
    box = torch.tensor([[0.0], [1.0]], dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    for method in ("vucb", "meta_vbo"):
        out = optimize_risk(lambda x, z: problem.observe(x, z, g), problem.z_values, 2, bounds=box, method=method,
                            prior_tasks=[PriorTask(*problem.helpful[0])], risk_fn=problem.risk_of,
                            optimum=problem.optimum, show_progress=False)
        assert out.x.shape == (4, 1) and bool(((out.x >= 0) & (out.x <= 1)).all())
        assert out.regret.shape == (2,)


@pytest.mark.parametrize("kwargs, match", [
    (dict(method="ucb"), "method"),
    (dict(n_iter=0), "n_iter"),
    (dict(n_initial=1), "n_initial"),
    (dict(candidates=None), "exactly one"),
    (dict(method="random", z_weights=torch.ones(3)), "z_weights"),
    (dict(method="random", risk_fn=lambda x: torch.zeros(len(x) + 1), objective=lambda x, z: x[:, 0]), "risk_fn"),
    (dict(method="random", optimum=float("nan")), "optimum"),
    (dict(method="random", optimum=1.0), "risk_fn"),
    (dict(method="random", alpha=2.0), "alpha"),
    (dict(method="random", measure="VaR"), "measure"),
    (dict(method="random", eta=0.5), "eta"),
    (dict(prior_tasks=PriorTask(torch.rand(3, 1), torch.rand(3), torch.rand(3))), "prior_tasks"),
    (dict(prior_tasks=[PriorTask(torch.rand(3, 2), torch.rand(3), torch.rand(3))]), r"prior_tasks\[0\].x"),
    (dict(prior_tasks=[fit_risk_model(torch.rand(4, 2), torch.rand(4), torch.rand(4))]), r"prior_tasks\[0\]"),
    (dict(prior_tasks=["task"]), r"prior_tasks\[0\]"),
    (dict(candidates=torch.zeros(0, 1)), "at least one"),
    (dict(objective=lambda x, z: torch.full((len(x),), float("nan"))), "objective"),
    (dict(objective=lambda x, z: torch.zeros(len(x) + 1)), "objective"),
])
def test_bad_input_is_named(problem, kwargs, match):
    def never_called(x, z):
        raise AssertionError("the objective ran before the settings were checked")

    args = dict(objective=lambda x, z: problem.target(x, z), z_values=problem.z_values, n_iter=2,
                candidates=problem.candidates, method="vucb", show_progress=False)
    args.update(kwargs)
    if "objective" not in kwargs:
        args["objective"] = never_called
    with pytest.raises((ValueError, TypeError), match=match):
        optimize_risk(**args)


def test_related_tasks_are_affine_copies_and_mirrored_ones_move_the_maximiser(problem):
    x = grid(1, 50)
    z = torch.rand(50, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    f = problem.target
    assert torch.allclose(f.task(3.0, -2.0)(x, z), 3.0 * f(x, z) - 2.0)
    assert torch.allclose(f.task(mirror=True)(x, z), f(1 - x, z))
    best = problem.candidates[problem.true_risk.argmax()].item()
    assert abs(best - 0.5) >= 0.2  # min_offset, so the mirrored maximiser is >= 0.4 away
    # each prior task's observations follow its own landscape: an affine image of f, mirrored if harmful
    def correlation(a, b):
        return float(torch.corrcoef(torch.stack([a, b]))[0, 1])

    for x_obs, z_obs, y_obs in problem.helpful + problem.harmful:
        assert len(x_obs) == 40
    for x_obs, z_obs, y_obs in problem.harmful:
        assert correlation(y_obs, f(1 - x_obs, z_obs)) > 0.99 > correlation(y_obs, f(x_obs, z_obs))
    for x_obs, z_obs, y_obs in problem.helpful:
        assert correlation(y_obs, f(x_obs, z_obs)) > 0.9


def test_grid_and_bump_function_shapes():
    assert grid(2, 5).shape == (25, 2) and grid(2, 5).min() == 0 and grid(2, 5).max() == 1
    f = BumpFunction(torch.tensor([[0.5]]), torch.tensor([1.0]), torch.tensor([0.1]), torch.tensor([0.5]),
                     torch.tensor([0.5]))
    at_center = f(torch.tensor([[0.5], [0.5]]), torch.tensor([0.0, 1.0]))
    assert at_center[0] > 0.99 and at_center[1] == pytest.approx(1 - 0.5 * torch.sigmoid(torch.tensor(6.25)).item())


def test_svm_tuning_is_a_table_of_accuracies_under_nested_label_noise():
    from iclr24.meta_vbo import SVMTuning, svm_problem

    f = SVMTuning("iris", points_per_dim=3, n_z=4)
    x = f.candidates[torch.tensor([4, 4, 4, 4])]
    accuracy = f(x, f.z_values)
    assert bool(((accuracy >= 0) & (accuracy <= 1)).all()) and accuracy[0] > 0.85
    assert accuracy[-1] < accuracy[0]  # 45% of the labels replaced hurts even a good setting
    assert torch.equal(f(x[:1] + 0.01, f.z_values[:1] + 0.01), accuracy[:1])  # snapped to the grid
    problem = svm_problem(0, target="iris", priors=("wine",), points_per_dim=3, prior_observations=5)
    assert problem.true_risk.shape == (9,) and problem.risk_range > 0 and problem.harmful == []
    assert len(problem.helpful) == 1 and problem.helpful[0][0].shape == (5, 2)
    with pytest.raises(ValueError, match="dataset"):
        SVMTuning("mnist")


def test_a_domain_with_a_constant_column_still_runs(problem, hyperparameters):
    line = torch.cat([problem.candidates, torch.full((len(problem.candidates), 1), 0.3, dtype=torch.float64)], 1)
    g = torch.Generator().manual_seed(0)
    out = optimize_risk(lambda x, z: problem.observe(x[:, :1], z, g), problem.z_values, 2, candidates=line,
                        method="vucb", show_progress=False)
    assert out.x.shape == (4, 2) and bool((out.x[:, 1] == 0.3).all())


def test_problem_functions_check_their_inputs(problem):
    from iclr24.meta_vbo import SVMTuning

    with pytest.raises(ValueError, match="x must have shape"):
        problem.target(torch.rand(5, 2), torch.rand(5))
    with pytest.raises(ValueError, match="z must have shape"):
        problem.target(torch.rand(5, 1), torch.rand(3))
    with pytest.raises(ValueError, match="points_per_dim"):
        grid(1, 1)
    with pytest.raises(ValueError, match="x must have shape"):
        SVMTuning("iris", points_per_dim=3, n_z=2)(torch.rand(4, 1), torch.rand(4))
