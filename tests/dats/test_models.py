import pytest
import torch

from iclr24.dats import HyperPINN, ParametricPINN

BOUNDS = [(0.0, 1.0), (0.0, 6.0)]


def _points(n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    coords = torch.rand(n, 2, generator=g) * torch.tensor([1.0, 6.0])
    params = torch.tensor([1.0, 5.0, 9.0])[torch.randint(0, 3, (n,), generator=g)][:, None]
    return coords, params


@pytest.mark.parametrize("cls", [ParametricPINN, HyperPINN])
def test_models_are_pointwise_so_summed_derivatives_are_per_point(cls):
    torch.manual_seed(0)
    model = cls(BOUNDS, [(1.0, 9.0)])
    coords, params = _points()
    coords.requires_grad_(True)
    u = model(coords, params)
    assert u.shape == (40,)
    summed = torch.autograd.grad(u.sum(), coords)[0]
    jac = torch.autograd.functional.jacobian(lambda c: model(c, params), coords.detach())  # (M, M, 2)
    assert torch.allclose(summed, jac.diagonal(dim1=0, dim2=1).T, atol=1e-6)
    off_diagonal = jac.abs().sum(dim=2) * (1 - torch.eye(40))
    assert off_diagonal.max().item() == 0.0


def test_hyperpinn_equals_its_target_network_built_by_hand():
    torch.manual_seed(1)
    model = HyperPINN(BOUNDS, [(1.0, 9.0)], target_hidden=5, target_layers=4, hyper_hidden=(7,))
    coords, params = _points(30, seed=2)
    out = model(coords, params)
    for beta in (1.0, 5.0, 9.0):
        layers = model.target_weights(torch.tensor([[beta]]))
        mask = params[:, 0] == beta
        h = torch.stack([coords[mask, 0] * 2 - 1, coords[mask, 1] / 3 - 1], dim=1)
        for k, (w, b) in enumerate(layers):
            h = h @ w[0].T + b[0]
            h = torch.tanh(h) if k < len(layers) - 1 else h
        assert torch.allclose(out[mask], h[:, 0], atol=1e-6)
    # the weights do depend on the configuration
    w1, w9 = model.target_weights(torch.tensor([[1.0], [9.0]]))[0][0]
    assert not torch.allclose(w1, w9)


def test_hyperpinn_gradients_flow_to_the_pde_parameters():
    torch.manual_seed(0)
    model = HyperPINN(BOUNDS, [(1.0, 9.0)])
    coords, params = _points(12)
    params.requires_grad_(True)
    grad = torch.autograd.grad(model(coords, params).sum(), params)[0]
    assert grad.shape == params.shape and grad.abs().sum() > 0


def test_hyperpinn_layer_sizes_match_the_paper_config():
    model = HyperPINN(BOUNDS, [(1.0, 9.0)])  # 7 linear layers, 8 wide
    assert model.shapes == [(8, 2)] + [(8, 8)] * 5 + [(1, 8)]
    n_generated = 8 * 2 + 8 + 5 * (64 + 8) + 8 + 1
    assert model.hyper[-1].out_features == n_generated


def test_parametric_pinn_rescales_its_inputs_to_minus_one_one():
    model = ParametricPINN(BOUNDS, [(1.0, 9.0)], hidden=4, depth=1)
    corners = model.coords_in(torch.tensor([[0.0, 0.0], [1.0, 6.0]]))
    assert torch.allclose(corners, torch.tensor([[-1.0, -1.0], [1.0, 1.0]]))
    assert torch.allclose(model.params_in(torch.tensor([[1.0], [5.0], [9.0]])), torch.tensor([[-1.0], [0.0], [1.0]]))


@pytest.mark.parametrize("call,match", [
    (lambda: ParametricPINN(BOUNDS, [(1.0, 9.0)])(torch.zeros(5, 3), torch.zeros(5, 1)), "coords must be \\(M, 2\\)"),
    (lambda: ParametricPINN(BOUNDS, [(1.0, 9.0)])(torch.zeros(5, 2), torch.zeros(4, 1)), "params \\(M, 1\\)"),
    (lambda: HyperPINN(BOUNDS, [(1.0, 9.0)])(torch.zeros(5), torch.zeros(5, 1)), "coords must have 2 dimensions"),
    (lambda: ParametricPINN(BOUNDS, [(9.0, 1.0)]), "param_bounds must be finite \\(lo, hi\\) pairs"),
    (lambda: ParametricPINN([(0.0, 1.0)], [(1.0, 9.0)]), "coord_bounds must be 2 finite"),
    (lambda: ParametricPINN(BOUNDS, [(1.0, 9.0)])(torch.zeros(5, 2).double(), torch.zeros(5, 1).double()),
     "must have the model's dtype"),
    (lambda: HyperPINN(BOUNDS, [(1.0, 9.0)])(torch.full((5, 2), float("nan")), torch.zeros(5, 1)),
     "coords must be finite"),
    (lambda: ParametricPINN(BOUNDS, [(1.0, 9.0)], hidden=0), "hidden must be >= 1"),
    (lambda: HyperPINN(BOUNDS, [(1.0, 9.0)], target_layers=1), "target_layers must be >= 2"),
])
def test_bad_input_is_named(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()
