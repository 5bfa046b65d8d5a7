"""MoV and MoLoRA layers and their router, against hand-written forms of the paper's equations."""

import math

import pytest
import torch
from torch import nn

from iclr24.moe_peft import (
    MoLoRALinear,
    MoVLinear,
    Router,
    keep_top_k,
    load_balancing_loss,
    routing_mutual_information,
)


def linear(i=6, o=5, dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    return nn.Linear(i, o).to(dtype)


def perturb(layer, seed=1):
    """Random experts and router, so that every term of the layer's formula matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in layer.named_parameters():
            if not name.startswith("base_layer."):
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype))
    return layer


def test_router_is_a_softmax_over_a_bias_free_linear_map_in_float32():
    router = Router(4, 3)
    assert router.weight.shape == (3, 4) and not hasattr(router, "bias") or router.bias is None
    x = torch.randn(2, 7, 4)
    p = router(x)
    assert p.shape == (2, 7, 3)
    torch.testing.assert_close(p, torch.softmax(x @ router.weight.T, dim=-1))
    half = router.to(torch.bfloat16)(x.to(torch.bfloat16))
    assert half.dtype == torch.bfloat16
    assert repr(Router(4, 3)) == "Router(in_features=4, num_experts=3)"


def test_router_initialisation_is_normal_with_std_0_02():
    torch.manual_seed(0)
    w = Router(512, 100).weight.detach()
    assert abs(float(w.std()) - 0.02) < 0.001 and abs(float(w.mean())) < 0.001


def test_keep_top_k_keeps_the_largest_and_renormalises():
    p = torch.tensor([[0.1, 0.5, 0.15, 0.25]])
    torch.testing.assert_close(keep_top_k(p, 2), torch.tensor([[0.0, 0.5 / 0.75, 0.0, 0.25 / 0.75]]))
    torch.testing.assert_close(keep_top_k(p, 1), torch.tensor([[0.0, 1.0, 0.0, 0.0]]))
    assert keep_top_k(p, 4) is p


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_keep_top_k_refuses_non_finite_probabilities(bad):
    p = torch.tensor([[0.1, 0.5, 0.15, 0.25], [0.2, 0.3, bad, 0.5]])
    message = (r"probs must be finite probabilities \(\*, num_experts\), got 1 non-finite entries, "
               rf"the first {bad} at index \(1, 2\)")
    for k in (1, 2, 4):  # k >= num_experts too: NaN is refused, not passed through
        with pytest.raises(ValueError, match=message):
            keep_top_k(p, k)
    torch.testing.assert_close(keep_top_k(p[:1], 2), torch.tensor([[0.0, 0.5 / 0.75, 0.0, 0.25 / 0.75]]))


def test_load_balancing_loss_known_values():
    uniform = torch.full((10, 4), 0.25)
    assert float(load_balancing_loss(uniform)) == pytest.approx(1.0)
    collapsed = torch.tensor([[1.0, 0.0, 0.0, 0.0]]).repeat(10, 1)
    assert float(load_balancing_loss(collapsed)) == pytest.approx(4.0)
    # two tokens: f = (1/2, 1/2, 0), P = (0.35, 0.55, 0.1): 3 * (0.175 + 0.275) = 1.35
    p = torch.tensor([[0.6, 0.3, 0.1], [0.1, 0.8, 0.1]])
    assert float(load_balancing_loss(p)) == pytest.approx(1.35)
    # with k = 2 both tokens dispatch to experts 0 and 1: f = (1, 1, 0); 3 / 2 * (0.35 + 0.55) = 1.35
    assert float(load_balancing_loss(p, k=2)) == pytest.approx(1.35)
    p.requires_grad_(True)
    load_balancing_loss(p).backward()
    torch.testing.assert_close(p.grad, torch.tensor([[0.75, 0.75, 0.0]] * 2))  # E / n * f_e


def test_mutual_information_known_values():
    same = torch.tensor([[0.2, 0.8], [0.2, 0.8]])
    assert routing_mutual_information(same) == pytest.approx(0.0, abs=1e-12)
    assert routing_mutual_information(torch.eye(4)) == pytest.approx(2.0)
    # p(e) = (0.75, 0.25): H(E) = 0.8113, H(E|T) = (0 + 1) / 2
    half = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    expected = -(0.75 * math.log2(0.75) + 0.25 * math.log2(0.25)) - 0.5
    assert routing_mutual_information(half) == pytest.approx(expected)
    with pytest.raises(ValueError, match="mean_probs must be"):
        routing_mutual_information(torch.ones(3))


@pytest.mark.parametrize("feedforward", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_mov_starts_as_the_base_layer(feedforward, dtype):
    base = linear(dtype=dtype)
    layer = MoVLinear(base, num_experts=5, feedforward=feedforward)
    x = torch.randn(3, 4, 6, dtype=dtype)
    out = layer(x)
    assert out.dtype == dtype and out.shape == (3, 4, 5)
    torch.testing.assert_close(out, base(x))


@pytest.mark.parametrize("feedforward", [False, True])
def test_mov_is_the_router_weighted_sum_of_ia3_vectors(feedforward):
    """y = W (x * s(x)) + b at a feedforward site, y = h * s(h) with h = W x + b elsewhere;
    s(a) = sum_e softmax(W_r a)_e l_e."""
    base = linear()
    layer = perturb(MoVLinear(base, num_experts=3, feedforward=feedforward))
    x = torch.randn(8, 6)
    routed = x if feedforward else base(x)
    p = torch.softmax(routed @ layer.router.weight.T, dim=-1)
    s = sum(p[:, e:e + 1] * layer.mov_scaling[e] for e in range(3))
    expected = base(x * s) if feedforward else base(x) * s
    torch.testing.assert_close(layer(x), expected)


def test_molora_is_the_router_weighted_sum_of_lora_updates():
    """y = W x + b + alpha / r * sum_e p_e B_e A_e x with p = softmax(W_r x)."""
    base = linear()
    layer = perturb(MoLoRALinear(base, num_experts=3, r=2, alpha=6.0))
    x = torch.randn(8, 6)
    p = torch.softmax(x @ layer.router.weight.T, dim=-1)
    update = sum(p[:, e:e + 1] * (x @ layer.lora_A[e].T @ layer.lora_B[e].T) for e in range(3))
    torch.testing.assert_close(layer(x), base(x) + 3.0 * update)


def test_molora_starts_exactly_as_the_base_layer():
    base = linear()
    layer = MoLoRALinear(base, num_experts=4)
    x = torch.randn(5, 6)
    assert torch.equal(layer(x), base(x))
    assert layer.lora_A.shape == (4, 4, 6) and layer.lora_B.shape == (4, 5, 4)
    assert not layer.lora_B.any() and float(layer.lora_A.detach().std()) > 0


@pytest.mark.parametrize("cls", [MoVLinear, MoLoRALinear])
def test_top_1_routing_uses_only_the_most_probable_expert(cls):
    base = linear()
    layer = perturb(cls(base, num_experts=4, top_k=1))
    soft = perturb(cls(base, num_experts=4))
    x = torch.randn(16, 6)
    routed = x if cls is MoLoRALinear else base(x)
    winner = (routed @ layer.router.weight.T).argmax(-1)
    single = []
    for i in range(len(x)):  # one expert per token: the layer with that expert alone
        e = int(winner[i])
        if cls is MoVLinear:
            single.append(base(x[i]) * layer.mov_scaling[e])
        else:
            single.append(base(x[i]) + layer.scaling * (layer.lora_B[e] @ (layer.lora_A[e] @ x[i])))
    torch.testing.assert_close(layer(x), torch.stack(single))
    assert not torch.allclose(soft(x), layer(x))


def test_the_router_learns_once_experts_differ():
    layer = MoVLinear(linear(), num_experts=3)
    layer(torch.randn(4, 6)).sum().backward()
    # identical experts at initialisation: the routing cannot change the output, so no router gradient
    assert float(layer.router.weight.grad.abs().max()) < 1e-6
    layer.zero_grad()
    perturb(layer)(torch.randn(4, 6)).sum().backward()
    assert float(layer.router.weight.grad.abs().max()) > 1e-3


def test_layers_record_routing_and_keep_probabilities_only_when_asked():
    layer = perturb(MoVLinear(linear(), num_experts=3, keep_probabilities=True))
    x = torch.randn(2, 5, 6)
    layer.train()
    layer(x)
    assert float(layer.top1_count.sum()) == 10 and float(layer.probability_sum.sum()) == pytest.approx(10.0)
    assert layer.last_probabilities.shape == (2, 5, 3) and layer.balance_loss() is not None
    layer.eval()
    layer(x)
    assert layer.last_probabilities is None and layer.balance_loss() is None
    layer.reset_statistics()
    assert float(layer.top1_count.sum()) == 0


def test_layer_errors_name_the_argument():
    with pytest.raises(TypeError, match="base_layer must be an nn.Linear, got Conv1d"):
        MoVLinear(nn.Conv1d(2, 2, 1), num_experts=2)
    with pytest.raises(ValueError, match="top_k must be <= num_experts"):
        MoVLinear(linear(), num_experts=2, top_k=3)
    with pytest.raises(ValueError, match="num_experts must be >= 1"):
        MoLoRALinear(linear(), num_experts=0)
    with pytest.raises(ValueError, match="alpha must be > 0"):
        MoLoRALinear(linear(), num_experts=2, alpha=0)


def test_reprs():
    assert "num_experts=3, scales=input, top_k=None" in repr(MoVLinear(linear(), 3, feedforward=True))
    assert "num_experts=2, r=4, alpha=16, top_k=1" in repr(MoLoRALinear(linear(), 2, top_k=1))


def test_routing_is_computed_in_float32_or_wider_outside_autocast():
    router = Router(6, 3).double()
    x = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    assert router(x).dtype == torch.float64
    assert torch.autograd.gradcheck(lambda a: MoVLinear(linear(dtype=torch.float64), 3)(a), (x,))
    router = Router(6, 3)
    x = torch.randn(4, 6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = router(x)
    assert inside.dtype == torch.float32
    torch.testing.assert_close(inside, router(x))


def test_helpers_refuse_bad_arguments():
    p = torch.softmax(torch.randn(5, 3), -1)
    with pytest.raises(ValueError, match="k must be >= 1, got 0"):
        keep_top_k(p, 0)
    with pytest.raises(ValueError, match=r"k must be in \[1, 3\] \(the number of experts\), got 4"):
        load_balancing_loss(p, 4)
    with pytest.raises(ValueError, match="one probability distribution per row"):
        routing_mutual_information(torch.tensor([[2.0, 3.0], [1.0, 0.0]]))
    with pytest.raises(ValueError, match="weights must be 2 non-negative task weights"):
        routing_mutual_information(torch.eye(2), torch.tensor([1.0, -1.0]))


def test_the_layer_exposes_the_base_weight_for_models_that_read_it():
    base = linear()
    layer = MoLoRALinear(base, 2)
    assert layer.weight is base.weight and layer.bias is base.bias


def _official_mov_attention(heads: torch.Tensor, kernel: torch.Tensor, scaling: torch.Tensor) -> torch.Tensor:
    """The official ``MoVAttention`` (for-ai/parameter-efficient-moe, src/mov.py), written out in torch.

    ``heads`` (batch, seq, H, kv) is the key or value projection split into heads; the router is one dense map
    ``kernel`` (kv, E) applied to every head's features (flax ``DenseGeneral`` on the last axis), softmax over E;
    ``scaling`` is (H, E, kv); ``einsum('...e,...ed->...d')`` broadcasts the heads.
    """
    probs = torch.softmax(torch.einsum("bshd,de->bshe", heads, kernel), dim=-1)
    return heads * torch.einsum("bshe,hed->bshd", probs, scaling)


@pytest.mark.parametrize("num_heads", [1, 2, 4])
def test_per_head_mov_equals_the_official_attention_equations(num_heads):
    base = linear(6, 8, dtype=torch.float64)
    layer = perturb(MoVLinear(base, num_experts=3, num_heads=num_heads))
    kv = 8 // num_heads
    assert layer.mov_scaling.shape == (num_heads, 3, kv) and layer.router.weight.shape == (3, kv)
    x = torch.randn(2, 5, 6, dtype=torch.float64)
    heads = base(x).unflatten(-1, (num_heads, kv))
    expected = _official_mov_attention(heads, layer.router.weight.T, layer.mov_scaling).flatten(-2)
    torch.testing.assert_close(layer(x), expected, atol=1e-14, rtol=1e-14)
    assert int(layer.top1_count.sum()) == 2 * 5 * num_heads  # one routing decision per (token, head)


def test_per_head_routing_differs_from_whole_output_routing_and_starts_as_the_base():
    base = linear(6, 8, dtype=torch.float64)
    x = torch.randn(4, 6, dtype=torch.float64)
    torch.testing.assert_close(MoVLinear(base, 3, num_heads=4)(x), base(x))  # vectors at one: the base
    per_head = perturb(MoVLinear(base, 3, num_heads=4))
    whole = MoVLinear(base, 3)
    with torch.no_grad():  # the same vectors for every head, but one routing for the whole output
        whole.mov_scaling.copy_(per_head.mov_scaling.permute(1, 0, 2).flatten(1))
    assert (per_head(x) - whole(x)).abs().max() > 1e-2
    one = perturb(MoVLinear(base, 3, num_heads=1))
    flat = MoVLinear(base, 3)
    with torch.no_grad():
        flat.mov_scaling.copy_(one.mov_scaling[0])
        flat.router.weight.copy_(one.router.weight)
    torch.testing.assert_close(one(x), flat(x), atol=1e-15, rtol=1e-15)  # one head: the whole-output mode


def test_per_head_mode_errors_name_the_argument():
    with pytest.raises(ValueError, match="num_heads must divide out_features \\(5\\) into heads, got 2"):
        MoVLinear(linear(6, 5), 3, num_heads=2)
    with pytest.raises(ValueError, match="feedforward site .* has no heads"):
        MoVLinear(linear(6, 8), 3, feedforward=True, num_heads=2)
    with pytest.raises(ValueError, match="num_heads must be >= 1"):
        MoVLinear(linear(6, 8), 3, num_heads=0)
    assert "scales=output, num_heads=2, top_k=None" in repr(MoVLinear(linear(6, 8), 3, num_heads=2))


def test_router_statistics_top1_fraction_on_a_hand_case():
    from iclr24.moe_peft import MoVConfig, get_moe_model

    net = nn.Sequential(nn.Linear(2, 2))
    with torch.no_grad():
        net[0].weight.copy_(torch.eye(2))
        net[0].bias.zero_()
    model = get_moe_model(net, MoVConfig(num_experts=3, target_modules=["0"]))
    with torch.no_grad():
        model.moe_layers()["0"].router.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]]))
    # the router sees h = x; logits (2, 0, -2), (0, 2, -2), (-2, -2, 4), (3, 0.5, -3.5): experts 0, 1, 2, 0
    x = torch.tensor([[2.0, 0.0], [0.0, 2.0], [-2.0, -2.0], [3.0, 0.5]])
    model(x)
    stats = model.router_statistics()["0"]
    assert stats.tokens == 4
    assert stats.top1_fraction.tolist() == [0.5, 0.25, 0.25]
    logits = [[2.0, 0.0, -2.0], [0.0, 2.0, -2.0], [-2.0, -2.0, 4.0], [3.0, 0.5, -3.5]]
    probs = [[math.exp(v) / sum(math.exp(w) for w in row) for v in row] for row in logits]
    expected = [sum(p[e] for p in probs) / 4 for e in range(3)]
    assert stats.mean_probability.tolist() == pytest.approx(expected, abs=1e-6)


def test_mov_config_num_heads_routes_the_key_and_value_sites_per_head(tmp_path):
    from iclr24.moe_peft import MoVConfig, get_moe_model

    def mlp():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3))

    model = get_moe_model(mlp(), MoVConfig(4, ["2", "4"], ["4"], num_heads=4))
    layers = model.moe_layers()
    assert layers["2"].num_heads == 4 and layers["2"].mov_scaling.shape == (4, 4, 4)
    assert layers["4"].num_heads is None and layers["4"].feedforward  # the FFN site has no heads
    perturb(layers["2"])
    path = model.save_adapter(tmp_path / "adapter.safetensors")
    again = get_moe_model(mlp(), MoVConfig(4, ["2", "4"], ["4"], num_heads=4)).load_adapter(path)
    x = torch.randn(3, 8)
    torch.testing.assert_close(again(x), model(x))
    with pytest.raises(ValueError, match="num_heads"):
        get_moe_model(mlp(), MoVConfig(4, ["2", "4"], ["4"])).load_adapter(path)
    with pytest.raises(ValueError, match="num_heads must be >= 1"):
        MoVConfig(4, num_heads=0)
