import sys

import pytest
import torch

pytest.importorskip("torch_geometric")

from iclr24.holonets import (  # noqa: E402
    FaberConv,
    FaberNet,
    characteristic_operator,
    dense_characteristic_operator,
    faber_response,
)

# 0 -> 1, 0 -> 2, 1 -> 2, 2 -> 0 (node 3 isolated)
EDGES = torch.tensor([[0, 0, 1, 2], [1, 2, 2, 0]])


def dense_T(edge_index, n, weight=None, reverse=False, e=-0.25):
    A = torch.zeros(n, n)
    A[edge_index[0], edge_index[1]] = 1.0 if weight is None else weight
    if reverse:
        A = A.T
    d_out, d_in = A.sum(1), A.sum(0)
    scale = lambda d: torch.where(d > 0, d.clamp_min(1e-12) ** e, torch.zeros_like(d))  # noqa: E731
    return scale(d_out)[:, None] * A * scale(d_in)[None, :]


@pytest.mark.parametrize("reverse", [False, True])
def test_characteristic_operator_matches_dense_formula(reverse):
    w = torch.tensor([1.0, 2.0, 0.5, 3.0])
    T = dense_characteristic_operator(EDGES, 4, w, reverse=reverse)
    torch.testing.assert_close(T, dense_T(EDGES, 4, w, reverse))
    # hand value: T[0, 1] = d_out(0)^-1/4 * A01 * d_in(1)^-1/4 = 3^-1/4 * 1 * 1^-1/4
    if not reverse:
        assert T[0, 1].item() == pytest.approx(3.0**-0.25)


def test_operator_orientation_is_message_passing():
    index, weight = characteristic_operator(EDGES, 4)
    x = torch.arange(4.0)
    out = torch.zeros(4).index_add_(0, index[1], weight * x[index[0]])
    torch.testing.assert_close(out, dense_T(EDGES, 4) @ x)


def test_k1_alpha1_layer_equals_T_x_W():
    torch.manual_seed(0)
    conv = FaberConv(3, 2, K=1, alpha=1.0, root_weight=False, bias=False)
    x = torch.randn(4, 3)
    W = conv.lins_fwd["real"][0].weight.T
    torch.testing.assert_close(conv(x, EDGES), dense_T(EDGES, 4) @ x @ W)


def test_full_layer_equals_dense_formula():
    torch.manual_seed(1)
    conv = FaberConv(3, 2, K=3, alpha=0.3)
    torch.nn.init.normal_(conv.bias["real"])
    x = torch.randn(4, 3)
    T, Tr = dense_T(EDGES, 4), dense_T(EDGES, 4, reverse=True)
    expected = x @ conv.lin_root["real"][0].weight.T + conv.bias["real"]
    for k in range(3):
        Wf, Wb = conv.lins_fwd["real"][k].weight.T, conv.lins_bwd["real"][k].weight.T
        expected = expected + 2.0**-k * (0.3 * torch.linalg.matrix_power(T, k + 1) @ x @ Wf
                                         + 0.7 * torch.linalg.matrix_power(Tr, k + 1) @ x @ Wb)
    torch.testing.assert_close(conv(x, EDGES), expected)


def test_permutation_equivariance():
    torch.manual_seed(2)
    conv = FaberConv(3, 5, K=2)
    x = torch.randn(4, 3)
    perm = torch.tensor([2, 0, 3, 1])
    inverse = torch.argsort(perm)
    out = conv(x, EDGES)
    out_perm = conv(x[perm], inverse[EDGES])
    torch.testing.assert_close(out_perm, out[perm])


def test_gradients_reach_both_branches():
    conv = FaberConv(3, 2, K=2)
    conv(torch.randn(4, 3), EDGES).square().sum().backward()
    for branch in (conv.lins_fwd, conv.lins_bwd):
        assert all(lin.weight.grad.abs().sum() > 0 for lin in branch["real"])


def test_complex_layer_with_zero_imaginary_weights_is_the_real_layer():
    torch.manual_seed(3)
    real = FaberConv(3, 2, K=3)
    cplx = FaberConv(3, 2, K=3, complex_weights=True)
    state = {k: v for k, v in real.state_dict().items()}
    for key, value in cplx.state_dict().items():
        value.copy_(state[key] if key in state else torch.zeros_like(value))
    x = torch.randn(4, 3)
    out = cplx(x, EDGES)
    assert out.is_complex()
    torch.testing.assert_close(out.real, real(x, EDGES))
    torch.testing.assert_close(out.imag, torch.zeros_like(out.imag))


def test_repr():
    assert repr(FaberConv(16, 32, K=3, alpha=0.5)) == "FaberConv(16, 32, K=3, alpha=0.5)"
    assert repr(FaberConv(1, 2, complex_weights=True)) == "FaberConv(1, 2, K=3, alpha=0.5, complex_weights=True)"


@pytest.mark.parametrize("complex_weights", [False, True])
@pytest.mark.parametrize("jk", ["max", "cat", None])
def test_fabernet_shapes(complex_weights, jk):
    net = FaberNet(3, 8, 5, num_layers=2, complex_weights=complex_weights, jumping_knowledge=jk)
    out = net(torch.randn(4, 3), EDGES)
    assert out.shape == (4, 5) and out.dtype == torch.float32


def test_faber_response_known_values():
    z = torch.tensor([2.0 + 0j, 1j])
    torch.testing.assert_close(faber_response(torch.tensor([1.0, 0.0]), z), z.to(torch.complex128))
    torch.testing.assert_close(faber_response(torch.tensor([0.0, 1.0]), z), (0.5 * z**2).to(torch.complex128))


@pytest.mark.parametrize(
    "edge_index, weight, match",
    [
        (torch.tensor([[0, 4], [1, 2]]), None, r"node ids in \[0, 4\], expected \[0, 3\]"),
        (torch.tensor([0, 1, 2]), None, r"edge_index must be a \(2, num_edges\) tensor"),
        (EDGES.float(), None, "must hold integers"),
        (EDGES, torch.tensor([1.0, float("nan"), 1.0, 1.0]), "edge_weight must be finite"),
        (EDGES, torch.ones(3), "one entry per edge"),
        (EDGES, -torch.ones(4), "non-negative"),
    ],
)
def test_bad_graphs_raise_clear_errors(edge_index, weight, match):
    with pytest.raises((ValueError, TypeError), match=match):
        FaberConv(3, 2)(torch.randn(4, 3), edge_index, weight)


def test_bad_layer_arguments():
    with pytest.raises(ValueError, match="K must be >= 1, got 0"):
        FaberConv(3, 2, K=0)
    with pytest.raises(ValueError, match=r"alpha must lie in \[0, 1\], got 1.5"):
        FaberConv(3, 2, alpha=1.5)
    with pytest.raises(ValueError, match="x has 4 channels, this layer expects in_channels=3"):
        FaberConv(3, 2)(torch.randn(4, 4), EDGES)


def test_missing_pyg_names_the_extra(monkeypatch):
    import iclr24.holonets as holonets

    monkeypatch.setitem(sys.modules, "torch_geometric", None)
    with pytest.raises(ImportError, match=r"pip install 'iclr24\[graph\]'"):
        holonets.FaberConv  # noqa: B018


def test_zero_weight_edges_are_absent_edges_and_bad_weights_are_refused():
    torch.manual_seed(0)
    conv = FaberConv(3, 4, K=2)
    x, edge_index = torch.randn(5, 3), torch.tensor([[0, 1, 2], [1, 2, 3]])
    zero = torch.zeros(3, requires_grad=True)
    out = conv(x, edge_index, zero)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(zero.grad).all()
    weight, keep = torch.tensor([1.0, 0.0, 2.0]), torch.tensor([True, False, True])
    torch.testing.assert_close(conv(x, edge_index, weight), conv(x, edge_index[:, keep], weight[keep]))
    with pytest.raises(ValueError, match="edge_weight must be finite"):
        conv(x, edge_index, torch.tensor([1.0, float("inf"), 1.0]))
    with pytest.raises(ValueError, match="non-negative"):
        conv(x, edge_index, torch.tensor([1.0, -1.0, 1.0]))


# --- FaberNet against a dense reference written from the formulas -------------------------------------------

def _weight(group, k):
    """W = P + iQ (Q absent for real weights), as a (in, out) matrix."""
    P = group["real"][k].weight.T
    return torch.complex(P, group["imag"][k].weight.T) if "imag" in group else P


def dense_conv(conv, x, edge_index):
    n = x.shape[0]
    T, Tr = dense_T(edge_index, n), dense_T(edge_index, n, reverse=True)
    cast = (lambda M: M.to(torch.complex64)) if (conv.complex_weights or x.is_complex()) else (lambda M: M)
    x = cast(x)
    alpha = float(conv.alpha) if not isinstance(conv.alpha, torch.Tensor) else conv.alpha.reshape(())
    out = x @ cast(_weight(conv.lin_root, 0)) if conv.lin_root is not None else 0
    for k in range(conv.K):
        decay = 2.0**-k if conv.weight_penalty == "exp" else (1.0 if k == 0 else 1.0 / k)
        out = out + decay * (alpha * cast(torch.linalg.matrix_power(T, k + 1)) @ x @ cast(_weight(conv.lins_fwd, k))
                             + (1 - alpha) * cast(torch.linalg.matrix_power(Tr, k + 1)) @ x
                             @ cast(_weight(conv.lins_bwd, k)))
    if conv.bias is not None:
        b = conv.bias
        out = out + (torch.complex(b["real"], b["imag"]) if "imag" in b else b["real"])
    return out


def dense_fabernet(net, x, edge_index):
    layers = []
    for conv, slope in zip(net.convs, net.negative_slopes):
        x = dense_conv(conv, x, edge_index)
        act = lambda v: torch.where(v >= 0, v, slope * v)  # noqa: E731
        x = torch.complex(act(x.real), act(x.imag)) if x.is_complex() else act(x)
        if net.normalize == "joint":
            x = x / (x.abs() ** 2).sum(-1, keepdim=True).sqrt()
        elif net.normalize == "separate":
            x = torch.complex(x.real / x.real.norm(dim=-1, keepdim=True), x.imag / x.imag.norm(dim=-1, keepdim=True))
        layers.append(x)
    if net.jumping_knowledge == "max":
        parts = [torch.stack([z.real for z in layers]).amax(0)]
        if layers[0].is_complex():
            parts.append(torch.stack([z.imag for z in layers]).amax(0))
        x = torch.complex(*parts) if len(parts) == 2 else parts[0]
    elif net.jumping_knowledge == "cat":
        x = torch.cat(layers, dim=-1)
    if x.is_complex():
        x = torch.cat([x.real, x.imag], dim=-1)
    return x @ net.lin.weight.T + net.lin.bias


GRAPH = torch.tensor([[0, 0, 1, 2, 3, 4, 4], [1, 2, 2, 0, 4, 0, 3]])


@pytest.mark.parametrize("kwargs", [
    {},
    {"complex_weights": True},
    {"complex_weights": True, "normalize": "separate", "jumping_knowledge": "cat"},
    {"jumping_knowledge": None, "root_weight": False, "weight_penalty": "lin", "negative_slope": [0.0, 0.2]},
    {"complex_weights": True, "learn_alpha": True, "alpha": 0.3, "num_layers": 3, "negative_slope": -1.0},
])
def test_fabernet_equals_the_dense_reference(kwargs):
    torch.manual_seed(5)
    args = {"num_layers": 2, **kwargs}
    net = FaberNet(3, 6, 4, K=3, **args)
    for conv in net.convs:
        if conv.bias is not None:
            for b in conv.bias.values():
                torch.nn.init.normal_(b)
    x = torch.randn(5, 3)
    torch.testing.assert_close(net(x, GRAPH), dense_fabernet(net, x, GRAPH), rtol=1e-4, atol=1e-5)


def test_fabernet_options_change_what_they_should():
    torch.manual_seed(6)
    net = FaberNet(3, 6, 4, learn_alpha=True, alpha=0.3)
    assert sum(p.numel() == 1 for p in net.parameters()) == 1  # one alpha, shared by the layers
    net(torch.randn(5, 3), GRAPH).sum().backward()
    assert net.alpha.grad is not None and net.alpha.grad.abs().item() > 0
    assert all(conv.lin_root is None for conv in FaberNet(3, 6, 4, root_weight=False).convs)
    assert FaberConv(3, 2, weight_penalty="lin")._decay(2) == 0.5 and FaberConv(3, 2)._decay(2) == 0.25
    with pytest.raises(ValueError, match="weight_penalty must be 'exp' or 'lin'"):
        FaberConv(3, 2, weight_penalty="quadratic")
    with pytest.raises(ValueError, match="normalize must be True, False, 'joint' or 'separate'"):
        FaberNet(3, 6, 4, normalize="rows")
    with pytest.raises(ValueError, match="negative_slope must be one number or one per layer \\(2\\)"):
        FaberNet(3, 6, 4, negative_slope=[0.0, 0.1, 0.2])


def test_operators_are_cached_per_graph_and_recomputed_when_it_changes():
    torch.manual_seed(0)
    conv = FaberConv(3, 4, K=2)
    x = torch.randn(6, 3)
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5, 0], [1, 2, 3, 4, 5, 0, 3]])
    weight = torch.rand(7) + 0.5
    first = conv(x, edge_index, weight)
    assert torch.equal(conv(x, edge_index, weight), first)
    weight[0] = 5.0                                          # edited in place: no stale operator
    changed = conv(x, edge_index, weight)
    conv._operators.clear()
    assert torch.equal(conv(x, edge_index, weight), changed) and not torch.allclose(changed, first)
    with pytest.raises(ValueError, match="edge_index holds node ids"):  # a new graph is still checked
        conv(x, edge_index + 1, weight)
