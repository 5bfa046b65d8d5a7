import numpy as np
import pytest
import torch

from iclr24.dats import (
    Burgers,
    Convection,
    DifficultyAwareTaskSampler,
    ParametricPINN,
    PointSet,
    TaskSampler,
    UniformTaskSampler,
    meta_train,
    relative_l2,
    task_losses,
)

BETAS = [1.0, 5.0, 9.0]


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _model(seed=0):
    torch.manual_seed(seed)
    return ParametricPINN([(0.0, 1.0), Convection.x_range], [(1.0, 9.0)], hidden=16, depth=2)


class FixedSampler(TaskSampler):
    """Probabilities set by hand and never changed by updates (records what it was given)."""

    needs_gradients = True

    def __init__(self, p):
        super().__init__(len(p))
        self._p = torch.tensor(p, dtype=torch.float64)
        self.calls = []

    def _next(self, train_losses, val_losses, train_grads, val_grads):
        self.calls.append((train_losses, val_losses, train_grads, val_grads))
        return self._p


def test_task_losses_equal_each_configuration_computed_alone():
    pde, model = Convection(), _model()
    points = PointSet.sample(pde, 3, [7, 12, 5], 9, 6, torch.Generator().manual_seed(0))
    configs = torch.tensor(BETAS)[:, None]
    batched = task_losses(model, pde, configs, points, residual_weight=0.3)
    for i, beta in enumerate(BETAS):
        coords = points.residual[i].clone().requires_grad_(True)
        p = torch.full((len(coords), 1), beta)
        f = pde.residual(model(coords, p), coords, p)
        u0 = model(points.initial, torch.full((len(points.initial), 1), beta))
        lo = model(points.boundary_lo, torch.full((6, 1), beta))
        hi = model(points.boundary_hi, torch.full((6, 1), beta))
        alone = ((u0 - points.initial_values) ** 2).mean() + ((lo - hi) ** 2).mean() + 0.3 * (f**2).mean()
        assert batched[i].item() == pytest.approx(alone.item(), rel=1e-5)


def test_dirichlet_boundary_loss_penalises_nonzero_values():
    pde = Burgers()
    model = ParametricPINN([(0.0, 1.0), pde.x_range], [(0.01, 0.1)], hidden=8, depth=1)
    with torch.no_grad():
        model.net[-1].bias.fill_(0.5)
        model.net[-1].weight.zero_()
    points = PointSet.sample(pde, 1, 4, 4, 4, torch.Generator().manual_seed(0))
    loss = task_losses(model, pde, torch.tensor([[0.05]]), points, residual_weight=0.0)
    ic = ((0.5 - points.initial_values) ** 2).mean()
    assert loss.item() == pytest.approx((ic + 0.25).item(), rel=1e-6)  # u = 0.5 at both ends


def test_weight_mode_steps_on_the_probability_weighted_gradient():
    # Adam's first step is -lr * sign(gradient) (|g| >> eps), so the signs reveal the combined gradient.
    pde, model = Convection(), _model()
    before = [p.detach().clone() for p in model.parameters()]
    sampler = FixedSampler([0.9, 0.05, 0.05])
    meta_train(model, pde, BETAS, sampler, steps=1, lr=1e-4, residual_points=16, initial_points=8,
               boundary_points=8, validation_points=8, generator=torch.Generator().manual_seed(3))
    step = torch.cat([(p.detach() - b).reshape(-1) for p, b in zip(model.parameters(), before)])
    fresh = _model()
    points = PointSet.sample(pde, 3, 16, 8, 8, torch.Generator().manual_seed(3))
    losses = task_losses(fresh, pde, torch.tensor(BETAS)[:, None], points)
    grads = [torch.cat([g.reshape(-1) for g in torch.autograd.grad(losses[i], list(fresh.parameters()),
                                                                     retain_graph=True)]) for i in range(3)]
    weighted = 0.9 * grads[0] + 0.05 * grads[1] + 0.05 * grads[2]
    big = weighted.abs() > 1e-4
    assert torch.equal(torch.sign(step[big]), -torch.sign(weighted[big]))
    uniform = sum(grads) / 3
    assert not torch.equal(torch.sign(uniform[big]), torch.sign(weighted[big]))


def test_dats_receives_per_task_training_and_validation_gradients():
    pde, model = Convection(), _model()
    sampler = FixedSampler([1 / 3] * 3)
    sampler.period = 5
    history = meta_train(model, pde, BETAS, sampler, steps=11, residual_points=16, initial_points=8,
                         boundary_points=8, validation_points=32)
    assert history.update_steps == [0, 5, 10] and len(sampler.calls) == 3
    n_params = sum(p.numel() for p in model.parameters())
    train_losses, val_losses, train_grads, val_grads = sampler.calls[0]
    assert train_grads.shape == val_grads.shape == (3, n_params)
    assert not torch.allclose(train_losses.double(), val_losses.double()) and not torch.allclose(train_grads, val_grads)
    # each row is that task's own gradient: the rows differ, and the validation rows align with the training rows
    cos = torch.nn.functional.cosine_similarity(train_grads, val_grads, dim=1)
    assert (cos > 0.5).all() and not torch.allclose(train_grads[0], train_grads[2])
    assert history.losses[0] == pytest.approx(train_losses.tolist())


def test_points_mode_moves_the_budget_and_adds_high_residual_points():
    pde, model = Convection(), _model()
    sampler = FixedSampler([0.7, 0.2, 0.1])
    sampler._p = torch.full((3,), 1 / 3, dtype=torch.float64)  # start equal; the first update sets p

    def _next(*args):
        return torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64)

    sampler._next = _next
    sampler.period = 5
    history = meta_train(model, pde, BETAS, sampler, steps=12, mode="points", budget=90, minimum_points=10,
                         initial_points=8, boundary_points=8, validation_points=16)
    assert history.residual_points[0] == [30, 30, 30]
    # allocate(90, minimum 10) with p = (.7, .2, .1): 9 < 10 pins the last task, 80 split .7:.2 = 62.2, 17.8
    assert history.residual_points[1] == [62, 18, 10] and sum(history.residual_points[-1]) == 90


def test_points_added_by_rad_have_larger_residuals_than_uniform_points():
    from iclr24.dats.training import _reallocate

    pde, model = Convection(), _model()
    g = torch.Generator().manual_seed(0)
    points = PointSet.sample(pde, 1, 10, 4, 4, g)
    table = torch.tensor([[9.0]])
    _reallocate(model, pde, table, points, [60], candidates=500, strategy="topk", generator=g)
    added = points.residual[0][10:].clone().requires_grad_(True)
    fresh = pde.sample_interior(500, g).requires_grad_(True)

    def residual(c):
        p = table.expand(len(c), -1)
        return pde.residual(model(c, p), c, p).abs().detach()

    assert residual(added).min() >= torch.quantile(residual(fresh), 0.8)
    _reallocate(model, pde, table, points, [15], candidates=500, strategy="topk", generator=g)
    assert len(points.residual[0]) == 15 and torch.equal(points.residual[0], added.detach()[-15:])


def test_relative_l2_is_zero_for_the_exact_solution_and_one_for_zero():
    pde = Convection()

    class Exact(torch.nn.Module):
        def forward(self, coords, params):
            return torch.sin(coords[:, 1] - params[:, 0] * coords[:, 0])

    class Zero(torch.nn.Module):
        def forward(self, coords, params):
            return torch.zeros(len(coords))

    assert np.abs(relative_l2(Exact(), pde, BETAS)).max() < 1e-6
    assert relative_l2(Zero(), pde, BETAS).tolist() == pytest.approx([1.0] * 3)


def test_meta_training_lowers_the_losses_and_dats_tilts_toward_the_hardest_configuration():
    pde, model = Convection(), _model(1)
    sampler = DifficultyAwareTaskSampler(3, eta=30.0, kl="uniform", floor=0.02)
    history = meta_train(model, pde, BETAS, sampler, steps=200, lr=3e-3, residual_points=32, initial_points=32,
                         boundary_points=32, validation_points=64)
    losses = np.asarray(history.losses)
    assert losses[-1].mean() < 0.8 * losses[0].mean()
    p = np.asarray(history.probabilities)
    assert p[1:, 2].mean() > p[1:, 0].mean() + 0.05  # beta = 9 over beta = 1


def test_meta_train_is_deterministic():
    pde = Convection()
    runs = []
    for _ in range(2):
        model = _model(2)
        meta_train(model, pde, BETAS, UniformTaskSampler(3), steps=5, residual_points=8, initial_points=8,
                   boundary_points=8, validation_points=8, generator=torch.Generator().manual_seed(4))
        runs.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
    assert torch.equal(runs[0], runs[1])


@pytest.mark.parametrize("kwargs,match", [
    ({"mode": "both"}, "mode must be 'weight'"),
    ({"steps": 0}, "steps must be >= 1"),
    ({"budget": 100}, "budget applies to mode='points' only"),
    ({"mode": "points", "budget": 20}, "must be >= minimum_points x configurations = 30"),
    ({"initial_points": 0}, "initial_points must be >= 1"),
    ({"warmup": 1.5}, "warmup must be an int"),
    ({"rad_strategy": "greedy"}, "rad_strategy must be"),
    ({"lr": 0.0}, "lr must be > 0"),
])
def test_bad_arguments_are_named(kwargs, match):
    args = {"steps": 1, **kwargs}
    with pytest.raises((ValueError, TypeError), match=match):
        meta_train(_model(), Convection(), BETAS, UniformTaskSampler(3), **args)


def test_sampler_size_must_match_the_configurations():
    with pytest.raises(ValueError, match="sampler has 2 tasks but 3 configurations"):
        meta_train(_model(), Convection(), BETAS, UniformTaskSampler(2), steps=1)
    with pytest.raises(ValueError, match="convection takes 1 parameter"):
        meta_train(_model(), Convection(), [(1.0, 2.0)], UniformTaskSampler(1), steps=1)


def test_rad_refresh_keeps_the_older_half_and_replaces_the_rest():
    pde, model = Convection(), _model()
    sampler = UniformTaskSampler(3, period=5)
    history = meta_train(model, pde, BETAS, sampler, steps=6, residual_points=20, initial_points=8,
                         boundary_points=8, validation_points=8, refresh="rad",
                         generator=torch.Generator().manual_seed(0))
    assert history.residual_points[-1] == [20, 20, 20]
    plain = PointSet.sample(pde, 3, 20, 8, 8, torch.Generator().manual_seed(0))

    from iclr24.dats.training import _refresh

    g = torch.Generator().manual_seed(1)
    before = [r.clone() for r in plain.residual]
    _refresh(model, pde, torch.tensor(BETAS)[:, None], plain, 200, "topk", g)
    for old, new in zip(before, plain.residual):
        assert torch.equal(new[:10], old[:10]) and not torch.equal(new[10:], old[10:]) and len(new) == 20


@pytest.mark.parametrize("pde", [Convection(), Burgers()])
def test_per_task_gradients_from_own_points_equal_those_of_the_joint_loss(pde):
    # DATS's per-configuration losses and gradients, each from a graph over its own points, against the
    # gradient of each entry of the joint task_losses (what the sampler was first given)
    from iclr24.dats.training import _task_losses_and_grads

    torch.manual_seed(0)
    configs = torch.tensor([[1.0], [5.0], [9.0]]) if pde.name == "convection" else torch.tensor([[0.01], [0.05]])
    model = ParametricPINN([(0.0, 1.0), pde.x_range], [(float(configs.min()), float(configs.max()))], hidden=8,
                           depth=2).double()
    points = PointSet.sample(pde, len(configs), [7, 5, 9][:len(configs)], 6, 4, torch.Generator().manual_seed(1))
    points = PointSet([r.double() for r in points.residual], points.initial.double(), points.initial_values.double(),
                      points.boundary_lo.double(), points.boundary_hi.double())
    params = list(model.parameters())
    joint = task_losses(model, pde, configs.double(), points)
    expected = torch.stack([torch.cat([g.reshape(-1) for g in torch.autograd.grad(joint[i], params, retain_graph=True)])
                            for i in range(len(configs))])
    losses, grads = _task_losses_and_grads(model, pde, configs.double(), points, 1.0, params)
    torch.testing.assert_close(losses, joint.detach())
    torch.testing.assert_close(grads, expected)
