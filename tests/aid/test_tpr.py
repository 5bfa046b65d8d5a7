import math

import pytest
import torch
import torch.nn.functional as F

from iclr24.aid import FastWeightMemory, LinearTransformerLayer, causal_linear_attention, tpr_read, tpr_write
from iclr24.aid.tpr import memory_reads


def _e(i: int, d: int = 4) -> torch.Tensor:
    return torch.eye(d)[i].unsqueeze(0)  # (1, d)


def test_write_then_read_returns_the_stored_filler_for_orthogonal_roles():
    memory = torch.zeros(1, 4, 4, 4)
    fillers = [torch.tensor([[0.3, -0.2, 0.1, 0.0]]), torch.tensor([[0.0, 0.4, 0.0, -0.3]]),
               torch.tensor([[0.2, 0.2, -0.2, 0.2]])]
    roles = [(0, 1), (2, 3), (1, 0)]
    for (i, j), f in zip(roles, fillers):
        memory = tpr_write(memory, _e(i), _e(j), f, gate=torch.ones(1, 1))
    for (i, j), f in zip(roles, fillers):
        torch.testing.assert_close(tpr_read(memory, _e(i), _e(j).unsqueeze(1)), f)
    assert tpr_read(memory, _e(3), _e(3).unsqueeze(1)).abs().max() == 0  # nothing stored there


def test_the_delta_rule_replaces_rather_than_adds():
    memory = torch.zeros(1, 4, 4, 4)
    memory = tpr_write(memory, _e(0), _e(1), torch.tensor([[0.5, 0.0, 0.0, 0.0]]), torch.ones(1, 1))
    memory = tpr_write(memory, _e(0), _e(1), torch.tensor([[0.0, 0.5, 0.0, 0.0]]), torch.ones(1, 1))
    torch.testing.assert_close(tpr_read(memory, _e(0), _e(1).unsqueeze(1)), torch.tensor([[0.0, 0.5, 0.0, 0.0]]))


def test_the_gate_and_scale_move_the_stored_filler_part_way():
    f = torch.tensor([[0.4, 0.0, 0.0, 0.0]])
    memory = tpr_write(torch.zeros(1, 4, 4, 4), _e(0), _e(1), f, torch.full((1, 1), 0.5))
    torch.testing.assert_close(tpr_read(memory, _e(0), _e(1).unsqueeze(1)), 0.5 * f)
    memory = tpr_write(memory, _e(0), _e(1), f, torch.full((1, 1), 0.5))
    torch.testing.assert_close(tpr_read(memory, _e(0), _e(1).unsqueeze(1)), 0.75 * f)
    memory = tpr_write(torch.zeros(1, 4, 4, 4), _e(0), _e(1), f, torch.ones(1, 1), scale=0.25)
    torch.testing.assert_close(tpr_read(memory, _e(0), _e(1).unsqueeze(1)), 0.25 * f)


def test_the_memory_is_shrunk_to_norm_one_and_only_then():
    f = torch.tensor([[3.0, 4.0, 0.0, 0.0]])
    memory = tpr_write(torch.zeros(1, 4, 4, 4), _e(0), _e(1), f, torch.ones(1, 1))
    assert memory.norm().item() == pytest.approx(1.0)
    torch.testing.assert_close(tpr_read(memory, _e(0), _e(1).unsqueeze(1)), f / 5)
    small = tpr_write(torch.zeros(1, 4, 4, 4), _e(0), _e(1), f / 10, torch.ones(1, 1))
    assert small.norm().item() == pytest.approx(0.5)


def test_chained_reads_follow_the_stored_path():
    memory = torch.zeros(1, 4, 4, 4)
    memory[0] += torch.einsum("a,b,c->abc", _e(0)[0], _e(1)[0], _e(2)[0])  # (0, 1) -> 2
    memory[0] += torch.einsum("a,b,c->abc", _e(2)[0], _e(3)[0], _e(1)[0])  # (2, 3) -> 1
    keys = torch.stack([_e(1), _e(3)], dim=1)  # (1, 2, 4)
    torch.testing.assert_close(tpr_read(memory, _e(0), keys), _e(1))
    norm = torch.nn.LayerNorm(4, elementwise_affine=False)
    first = norm(_e(2))  # each read is normalised before it keys the next one
    expected = norm(torch.einsum("bsrv,bs,br->bv", memory, first, _e(3)))
    torch.testing.assert_close(tpr_read(memory, _e(0), keys, norm), expected)


@pytest.mark.parametrize("decomposition", ["aid", "mlp"])
def test_fwm_shapes_details_and_causality(decomposition):
    torch.manual_seed(0)
    fwm = FastWeightMemory(6, 9, decomposition=decomposition, hidden=8, component_dim=4, input_proj_dim=5,
                           n_reads=2, iterations=2, mlp_hidden=7).eval()
    x = torch.randn(3, 7, 6)
    logits, details = fwm(x, return_details=True)
    steps = 2 if decomposition == "aid" else 0
    assert logits.shape == (3, 7, 9)
    assert details["write"].shape == (3, 7, 3, 4) and details["read"].shape == (3, 7, 3, 4)
    assert details["write_attention"].shape == (3, 7, steps, 3, 3)
    assert details["write"].abs().max() <= 1  # tanh
    changed = x.clone()
    changed[:, 4:] = torch.randn(3, 3, 6)
    torch.testing.assert_close(fwm(changed)[:, :4], logits[:, :4])  # no step sees the future
    assert not torch.allclose(fwm(changed)[:, 4:], logits[:, 4:])


def test_the_write_gate_starts_open():
    fwm = FastWeightMemory(6, 9, hidden=8, component_dim=4)
    with torch.no_grad():
        fwm.write_gate.weight.zero_()
        fwm.write_gate.bias.zero_()
    _, details = fwm(torch.randn(2, 3, 6), return_details=True)
    torch.testing.assert_close(details["gate"], torch.full((2, 3, 1), torch.sigmoid(torch.tensor(1.0)).item()))


def test_fwm_decompositions_differ_by_aids_parameters_only():
    kwargs = dict(hidden=8, component_dim=4, input_proj_dim=5, mlp_hidden=7)
    aid = FastWeightMemory(6, 9, decomposition="aid", **kwargs)
    mlp = FastWeightMemory(6, 9, decomposition="mlp", **kwargs)
    extra = {n for n, _ in aid.named_parameters()} - {n for n, _ in mlp.named_parameters()}
    assert extra and all(n.startswith("write_decomposition.") for n in extra)  # read's are tied to write's
    count = sum(p.numel() for n, p in aid.named_parameters() if n in extra)
    assert sum(p.numel() for p in aid.parameters()) == sum(p.numel() for p in mlp.parameters()) + count


def test_fwm_reads_what_it_wrote():
    # An FWM whose read keys equal its write roles returns (a normalised) filler of the same step: the
    # memory path, not only the LSTM shortcut, carries information.
    torch.manual_seed(0)
    fwm = FastWeightMemory(6, 9, decomposition="mlp", hidden=8, component_dim=4, input_proj_dim=5).eval()
    with torch.no_grad():
        fwm.write_decomposition.initial.weight.mul_(30)  # roles of norm ~1: LayerNorm's eps negligible
        fwm.read_decomposition.initial.weight.copy_(fwm.write_decomposition.initial.weight[:8])
        fwm.read_decomposition.initial.bias.copy_(fwm.write_decomposition.initial.bias[:8])
        fwm.write_gate.bias.fill_(20.0)
    x = torch.randn(2, 5, 6)
    _, details = fwm(x, return_details=True)
    r1, r2, f = details["write"][:, 0].unbind(1)  # the first step's components
    torch.testing.assert_close(details["read"][:, 0, :2], details["write"][:, 0, :2])
    memory = tpr_write(torch.zeros(2, 4, 4, 4), r1, r2, f, torch.ones(2, 1), scale=1 / 4)
    recalled = fwm.read_norm(tpr_read(memory, r1, r2[:, None]))
    torch.testing.assert_close(recalled, fwm.read_norm(f), atol=1e-3, rtol=1e-3)  # r1 (x) r2 unbinds f
    c = fwm.features(x)[:, 0].flatten(1)
    expected = fwm.classifier(fwm.shortcut(c) + fwm.memory_out(recalled))
    torch.testing.assert_close(fwm(x)[:, 0], expected, atol=1e-5, rtol=1e-5)
    fwm.memory_out.weight.data.zero_()
    assert not torch.allclose(fwm(x)[:, 0], expected)  # the memory path mattered


def test_fwm_gradients_reach_every_parameter():
    torch.manual_seed(0)
    fwm = FastWeightMemory(6, 9, hidden=8, component_dim=4, input_proj_dim=5)
    fwm(torch.randn(2, 5, 6)).logsumexp(-1).sum().backward()
    for name, p in fwm.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_fwm_errors_name_the_argument():
    with pytest.raises(ValueError, match="decomposition must be one of \\('aid', 'mlp'\\), got 'slot'"):
        FastWeightMemory(6, 9, decomposition="slot")
    fwm = FastWeightMemory(6, 9, hidden=8, component_dim=4)
    with pytest.raises(ValueError, match="x must have input_dim = 6"):
        fwm(torch.randn(2, 5, 7))
    with pytest.raises(ValueError, match="x must have 3 dimensions"):
        fwm(torch.randn(5, 6))
    assert "decomposition='aid'" in repr(fwm)


def test_causal_linear_attention_equals_the_recurrent_fast_weight_form():
    torch.manual_seed(0)
    q, k = torch.rand(2, 3, 6, 4, dtype=torch.float64), torch.rand(2, 3, 6, 4, dtype=torch.float64)
    v = torch.randn(2, 3, 6, 5, dtype=torch.float64)
    S = torch.zeros(2, 3, 4, 5, dtype=torch.float64)
    z = torch.zeros(2, 3, 4, dtype=torch.float64)
    outs = []
    for t in range(6):
        S = S + k[:, :, t, :, None] * v[:, :, t, None, :]
        z = z + k[:, :, t]
        outs.append(torch.einsum("bhd,bhde->bhe", q[:, :, t], S) / (torch.einsum("bhd,bhd->bh", q[:, :, t], z)
                                                                     [..., None] + 1e-5))
    torch.testing.assert_close(causal_linear_attention(q, k, v), torch.stack(outs, dim=2))


@pytest.mark.parametrize("sum_norm", [False, True])
def test_linear_transformer_layer_follows_the_official_wikitext_equations(sum_norm):
    """The official sum-update AID layer (attn_type 9998), written out step by step on this layer's own weights.

    Its fast weights W_t = W_{t-1} + k_t v_t^T are read with q_t and divided by q_t . sum_{s<=t} k_s + eps; with
    ``use_sum_norm`` the feature-mapped k and q are first divided by their sums. Our layer equals the official one
    to 9e-16 (docs/aid.md); this pins the same equations without the official code.
    """
    torch.manual_seed(0)
    H, d, D, T = 2, 4, 12, 6
    layer = LinearTransformerLayer(D, H, d, decomposition="aid", sum_norm=sum_norm).double().eval()
    h = torch.randn(3, T, D, dtype=torch.float64)
    q, k, v = layer.qkv(h).view(3, T, 3, H, d).unbind(2)
    k, v = layer.aid(layer.aid_inputs(h).view(3, T, 2 * H, d), initial=torch.cat([k, v], dim=2)).split(H, dim=2)
    q, k = F.elu(q) + 1, F.elu(k) + 1
    if sum_norm:
        q, k = q / q.sum(-1, keepdim=True), k / k.sum(-1, keepdim=True)
    W = torch.zeros(3, H, d, d, dtype=torch.float64)
    z = torch.zeros(3, H, d, dtype=torch.float64)
    outs = []
    for t in range(T):
        W = W + k[:, t, :, :, None] * v[:, t, :, None, :]
        z = z + k[:, t]
        read = torch.einsum("bhd,bhde->bhe", q[:, t], W) / (torch.einsum("bhd,bhd->bh", q[:, t], z)[..., None] + 1e-5)
        outs.append(read.reshape(3, H * d) / math.sqrt(d))
    expected = layer.norm(h + layer.out(torch.stack(outs, dim=1)))
    torch.testing.assert_close(layer(h), expected, atol=1e-12, rtol=1e-12)
    other = LinearTransformerLayer(D, H, d, decomposition="aid", sum_norm=not sum_norm).double().eval()
    other.load_state_dict(layer.state_dict())
    assert (other(h) - expected).abs().max() > 1e-3  # the key normalisation reweights the past: not a no-op
    assert ("sum_norm=True" in repr(layer)) == sum_norm


def test_linear_transformer_sum_norm_must_be_a_bool():
    with pytest.raises(TypeError, match="sum_norm must be a bool, got str"):
        LinearTransformerLayer(12, 2, 4, sum_norm="yes")


@pytest.mark.parametrize("decomposition", ["aid", "mlp"])
def test_linear_transformer_layer_is_causal_and_trains(decomposition):
    torch.manual_seed(0)
    layer = LinearTransformerLayer(12, 2, 4, decomposition=decomposition).eval()
    h = torch.randn(2, 6, 12)
    out = layer(h)
    assert out.shape == (2, 6, 12)
    changed = h.clone()
    changed[:, 3:] += 1.0
    torch.testing.assert_close(layer(changed)[:, :3], out[:, :3])
    layer.train()
    layer(h).square().sum().backward()
    for name, p in layer.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_linear_transformer_aid_refines_the_layers_own_keys_and_values():
    torch.manual_seed(0)
    aid = LinearTransformerLayer(12, 2, 4, decomposition="aid").eval()
    plain = LinearTransformerLayer(12, 2, 4, decomposition="mlp").eval()
    plain.load_state_dict({k: v for k, v in aid.state_dict().items() if not k.startswith("aid")})
    h = torch.randn(2, 6, 12)
    assert not torch.allclose(aid(h), plain(h))
    aid.aid.iterations = 0  # no refinement: the plain layer exactly
    torch.testing.assert_close(aid(h), plain(h))
    with pytest.raises(ValueError, match="h must have d_model = 12"):
        plain(torch.randn(2, 6, 5))


@pytest.mark.parametrize("reads", [1, 3])
@pytest.mark.parametrize("big", [False, True])
def test_the_dual_memory_form_equals_the_tensor_form(reads, big):
    torch.manual_seed(0)
    B, T, D = 3, 9, 4
    write = torch.randn(B, T, 3, D, dtype=torch.float64) * (3.0 if big else 0.3)  # big: the norm bound acts
    read = torch.randn(B, T, 1 + reads, D, dtype=torch.float64, requires_grad=True)
    write.requires_grad_(True)
    gate = torch.rand(B, T, 1, dtype=torch.float64)
    norm = torch.nn.LayerNorm(D, elementwise_affine=False).double()
    tensor = memory_reads(write, read, gate, 0.25, norm, form="tensor")
    dual = memory_reads(write, read, gate, 0.25, norm, form="dual")
    torch.testing.assert_close(dual, tensor, atol=1e-10, rtol=1e-10)
    grads = [torch.autograd.grad(out.sin().sum(), (write, read)) for out in (tensor, dual)]
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=1e-9, rtol=1e-9)
    raw = [memory_reads(write, read, gate, 0.25, None, form=f) for f in ("tensor", "dual")]
    torch.testing.assert_close(raw[0], raw[1], atol=1e-10, rtol=1e-10)


def test_fwm_memory_forms_agree_and_are_checked():
    torch.manual_seed(0)
    fwm = FastWeightMemory(6, 9, hidden=8, component_dim=4).eval()
    x = torch.randn(2, 5, 6)
    dual = fwm(x)
    fwm.memory_form = "tensor"
    torch.testing.assert_close(fwm(x), dual, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="memory_form must be one of"):
        FastWeightMemory(6, 9, memory_form="sparse")
    with pytest.raises(ValueError, match="form must be one of"):
        memory_reads(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 2, 4), torch.zeros(1, 2, 1), 1.0, form="x")


def test_inputs_must_match_the_modules_dtype_and_have_steps():
    fwm = FastWeightMemory(6, 9, hidden=8, component_dim=4)
    with pytest.raises(TypeError, match="x must have dtype in \\(float32\\), got float64"):
        fwm(torch.randn(2, 3, 6, dtype=torch.float64))
    with pytest.raises(ValueError, match="at least one step"):
        fwm(torch.randn(2, 0, 6))
    with pytest.raises(TypeError, match="h must have dtype"):
        LinearTransformerLayer(12, 2, 4)(torch.ones(2, 3, 12, dtype=torch.long))
    assert fwm.double()(torch.randn(2, 3, 6, dtype=torch.float64)).dtype == torch.float64


def test_memory_reads_checks_its_shapes():
    write, read, gate = torch.zeros(4, 2, 3, 4), torch.zeros(4, 2, 2, 4), torch.zeros(4, 2, 1)
    assert memory_reads(write, read, gate, 1.0).shape == (4, 2, 4)
    assert memory_reads(write[:, :0], read[:, :0], gate[:, :0], 1.0).shape == (4, 0, 4)
    with pytest.raises(ValueError, match="gate must have 3 dimensions"):
        memory_reads(write, read, gate[..., 0], 1.0)  # (B, T) would broadcast silently when B == D
    for bad in ((write, read, gate[:, :1]), (write, read[:, :, :1], gate), (torch.zeros(4, 2, 4, 4), read, gate)):
        with pytest.raises(ValueError, match="write must be \\(B, T, 3, D\\), read"):
            memory_reads(*bad, 1.0)
    with pytest.raises(ValueError, match="q and k must be"):
        causal_linear_attention(torch.rand(1, 1, 3, 2), torch.rand(1, 1, 4, 2), torch.rand(1, 1, 4, 2))


def test_linear_transformer_aid_dropout_is_its_own_argument():
    layer = LinearTransformerLayer(8, 2, 4, dropout=0.0, aid_dropout=0.0).train()
    h = torch.randn(2, 3, 8)
    assert torch.equal(layer(h), layer(h)) and layer.aid.eps == 1e-5
    assert LinearTransformerLayer(8, 2, 4).aid.dropout.p == 0.5  # the paper's code hard-codes it
