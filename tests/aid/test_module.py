import math

import pytest
import torch
import torch.nn.functional as F

from iclr24.aid import AID, competitive_attention, elu_plus_one
from iclr24.aid.module import shared_forward


def _reference(aid: AID, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """AID written out loop by loop from the paper's equations (eval mode: no dropout), for one sample."""
    N, D = aid.n_inputs, aid.component_dim
    s0 = (aid.initial.weight @ x.reshape(-1) + aid.initial.bias).view(aid.n_components, D)
    k = [F.elu(aid.to_k.weight @ x[i] + aid.to_k.bias) + 1 for i in range(N)]
    v = [aid.to_v.weight @ x[i] + aid.to_v.bias for i in range(N)]
    s = s0.clone()
    maps = []
    for _ in range(aid.iterations):
        q = [F.elu((aid.to_q.weight @ s[j] + aid.to_q.bias + s0[j]) / math.sqrt(D)) + 1
             for j in range(aid.n_components)]
        a = torch.zeros(N, aid.n_components, dtype=x.dtype)
        for i in range(N):
            logits = torch.stack([k[i] @ q[j] for j in range(aid.n_components)])
            a[i] = torch.exp(logits - logits.max()) / torch.exp(logits - logits.max()).sum()  # over components
        a = (a + aid.eps) / (a + aid.eps).sum(0, keepdim=True)  # then over inputs
        maps.append(a)
        new = []
        for j in range(aid.n_components):
            u = sum(a[i, j] * v[i] for i in range(N))
            u = (u - u.mean()) / torch.sqrt(u.var(unbiased=False) + aid.norm.eps) * aid.norm.weight + aid.norm.bias
            new.append(s[j] + aid.mlp(u) / D)
        s = torch.stack(new)
    out = torch.cat([s0, s], dim=-1) @ aid.output.weight.T + aid.output.bias
    return out, maps


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("iterations", [1, 3])
def test_forward_equals_the_equations_written_out(dtype, iterations):
    torch.manual_seed(0)
    aid = AID(input_dim=5, n_inputs=4, n_components=3, component_dim=6, iterations=iterations,
              mlp_hidden=7).to(dtype).eval()
    x = torch.randn(2, 4, 5, dtype=dtype)
    out, attention = aid(x, return_attention=True)
    assert out.dtype == dtype and out.shape == (2, 3, 6) and attention.shape == (2, iterations, 4, 3)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    for b in range(2):
        ref, maps = _reference(aid, x[b])
        torch.testing.assert_close(out[b], ref, atol=tol, rtol=tol)
        for t in range(iterations):
            torch.testing.assert_close(attention[b, t], maps[t], atol=tol, rtol=tol)


def test_attention_is_a_softmax_over_components_then_normalised_over_inputs():
    keys = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])  # 3 inputs
    queries = torch.tensor([[2.0, 0.0], [0.0, 1.0]])  # 2 components
    a = competitive_attention(keys, queries, eps=0.0)
    logits = keys @ queries.T
    soft = logits.softmax(dim=1)  # competition: each input splits itself among the components
    torch.testing.assert_close(a, soft / soft.sum(0, keepdim=True))
    torch.testing.assert_close(a.sum(0), torch.ones(2))
    # input 0 goes to component 0 (e^2 vs e^0), input 1 to component 1 (e^0 vs e^1)
    assert a[0, 0] > a[0, 1] and a[1, 1] > a[1, 0]


def test_a_component_that_wins_no_input_averages_them_all():
    keys = torch.tensor([[1.0], [1.0], [1.0]])
    queries = torch.tensor([[60.0], [-60.0]])  # component 1 loses every input
    a = competitive_attention(keys, queries, eps=1e-8)
    torch.testing.assert_close(a[:, 1], torch.full((3,), 1 / 3))
    assert torch.isfinite(a).all()


def test_iterations_zero_returns_the_initial_linear_decomposition_and_nothing_else():
    torch.manual_seed(0)
    plain = AID(4, 3, 2, 5, iterations=0)
    assert [n for n, _ in plain.named_parameters()] == ["initial.weight", "initial.bias"]
    x = torch.randn(7, 3, 4)
    out, attention = plain(x, return_attention=True)
    torch.testing.assert_close(out, plain.initial(x.flatten(1)).view(7, 2, 5))
    assert attention.shape == (7, 0, 3, 2)


def test_given_initial_components_replace_the_initial_map():
    torch.manual_seed(0)
    aid = AID(4, 3, 2, 5).eval()
    x, s0 = torch.randn(6, 3, 4), torch.randn(6, 2, 5)
    out = aid(x, initial=s0)
    assert not torch.allclose(out, aid(x))
    with torch.no_grad():  # the same as an initial map that outputs s0
        aid.initial.weight.zero_()
        aid.initial.bias.copy_(s0[0].flatten())
    torch.testing.assert_close(out[0], aid(x)[0])
    assert torch.equal(AID(4, 3, 2, 5, iterations=0)(x, initial=s0), s0)


def test_any_leading_batch_shape():
    torch.manual_seed(0)
    aid = AID(4, 3, 2, 5).eval()
    x = torch.randn(2, 6, 3, 4)
    torch.testing.assert_close(aid(x), aid(x.flatten(0, 1)).view(2, 6, 2, 5))


def test_gradients_reach_every_parameter():
    torch.manual_seed(0)
    aid = AID(4, 3, 2, 5, iterations=2)
    aid(torch.randn(8, 3, 4)).square().sum().backward()
    for name, p in aid.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_dropout_touches_only_the_initial_components_in_training():
    torch.manual_seed(0)
    aid = AID(4, 3, 2, 5, dropout=0.5).double()
    x = torch.randn(64, 3, 4, dtype=torch.float64)
    seen = []
    hook = aid.output.register_forward_pre_hook(lambda module, args: seen.append(args[0].detach()))
    aid.eval()
    assert torch.equal(aid(x), aid(x))
    aid.train()
    aid(x)
    hook.remove()
    (initial_eval, refined_eval), _, (initial_train, refined_train) = (z.split(5, dim=-1) for z in seen)
    # The refined slots s_j pass the output map untouched: dropout there (or anywhere upstream) changes them.
    torch.testing.assert_close(refined_train, refined_eval, atol=0, rtol=0)
    # Each initial component entry is either dropped (0) or kept and scaled by 1 / (1 - p) = 2.
    kept = initial_train != 0
    torch.testing.assert_close(initial_train[kept], 2 * initial_eval[kept], atol=0, rtol=0)
    assert 0.3 < kept.double().mean() < 0.7
    aid.dropout.p = 0.0
    torch.testing.assert_close(aid(x), aid.eval()(x))


def test_share_with_ties_everything_but_the_initial_map():
    torch.manual_seed(0)
    write = AID(4, 3, 3, 5)
    read = AID(4, 3, 2, 5, share_with=write)
    assert read.to_q is write.to_q and read.mlp is write.mlp and read.output is write.output
    assert read.initial is not write.initial
    both = torch.nn.ModuleList([write, read])
    own = sum(p.numel() for p in write.parameters()) + read.initial.weight.numel() + read.initial.bias.numel()
    assert sum(p.numel() for p in both.parameters()) == own



@pytest.mark.parametrize("train", [False, True])
def test_shared_forward_equals_the_tied_modules_one_by_one(train):
    torch.manual_seed(0)
    write = AID(4, 3, 3, 5).double().train(train)
    read = AID(4, 3, 2, 5, share_with=write).double().train(train)
    x = torch.randn(6, 7, 3, 4, dtype=torch.float64, requires_grad=True)
    torch.manual_seed(1)  # the same dropout masks: drawn module by module, in order
    one_by_one = [m(x, return_attention=True) for m in (write, read)]
    torch.manual_seed(1)
    joint = shared_forward([write, read], x)
    for (out, attention), (out_joint, attention_joint) in zip(one_by_one, joint):
        assert attention_joint.shape == attention.shape == (6, 7, 2, 3, out.shape[-2])
        torch.testing.assert_close(out_joint, out, atol=1e-12, rtol=1e-12)
        torch.testing.assert_close(attention_joint, attention, atol=1e-12, rtol=1e-12)
    grads = [torch.autograd.grad(sum(o.sin().sum() for o, _ in outs), [x, *write.parameters(), *read.parameters()])
             for outs in (one_by_one, joint)]
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)


def test_shared_forward_needs_tied_modules():
    with pytest.raises(ValueError, match="tied by share_with"):
        shared_forward([AID(4, 3, 3, 5), AID(4, 3, 2, 5)], torch.randn(2, 3, 4))
    with pytest.raises(TypeError, match="non-empty sequence of AID"):
        shared_forward([], torch.randn(2, 3, 4))

def test_repr_names_the_sizes():
    assert "n_components=3, component_dim=5, iterations=2" in repr(AID(4, 3, 3, 5))


def test_phi_is_positive():
    x = torch.linspace(-10, 30, 101)  # elu(-30) + 1 rounds to 0 in float32
    assert (elu_plus_one(x) > 0).all() and torch.allclose(elu_plus_one(torch.tensor(2.0)), torch.tensor(3.0))


@pytest.mark.parametrize("kwargs, match", [
    (dict(input_dim=0), "input_dim must be >= 1"),
    (dict(iterations=-1), "iterations must be >= 0"),
    (dict(dropout=1.5), "dropout must be <= 1"),
    (dict(eps=0.0), "eps must be > 0"),
])
def test_bad_arguments_are_named(kwargs, match):
    args = dict(input_dim=4, n_inputs=3, n_components=2, component_dim=5) | kwargs
    with pytest.raises(ValueError, match=match):
        AID(**args)


def test_share_with_errors():
    with pytest.raises(ValueError, match="same \\(input_dim, component_dim"):
        AID(4, 3, 2, 6, share_with=AID(4, 3, 2, 5))
    with pytest.raises(ValueError, match="share_with needs iterations >= 1"):
        AID(4, 3, 2, 5, iterations=0, share_with=AID(4, 3, 2, 5))
    with pytest.raises(TypeError, match="share_with must be an AID"):
        AID(4, 3, 2, 5, share_with=torch.nn.Linear(2, 2))


def test_bad_inputs_are_named():
    aid = AID(4, 3, 2, 5)
    with pytest.raises(ValueError, match=r"x must end in \(n_inputs, input_dim\) = \(3, 4\)"):
        aid(torch.randn(2, 4, 4))
    with pytest.raises(ValueError, match="initial must have shape"):
        aid(torch.randn(2, 3, 4), initial=torch.randn(2, 3, 5))
    with pytest.raises(ValueError, match="x must be finite"):
        aid(torch.full((2, 3, 4), float("nan")))
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        aid([[1.0]])
    with pytest.raises(TypeError, match="x must have dtype in \\(float32\\), got int64"):
        aid(torch.ones(2, 3, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="initial must have dtype in \\(float32\\), got float64"):
        aid(torch.randn(2, 3, 4), initial=torch.randn(2, 2, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match="eps must be >= 0"):
        competitive_attention(torch.rand(2, 3), torch.rand(2, 3), eps=-1.0)
