import pytest
import torch

from iclr24.proof_features import (
    AffineNet,
    as_affine_net,
    feature_gradients,
    make_mlp,
    proof_features,
    proves_with,
    sufficient_set,
    top_k_preserved,
    verify,
)
from iclr24.proof_features.profit import ORDERS, feature_order, weight_abs_priority


def two_neuron_net():
    """x in R^2 -> h = relu(x) (identity on the positive box) -> y = [2 h0 + 0.1 h1 - 1, 0]."""
    W1 = torch.eye(2, dtype=torch.float64)
    b1 = torch.zeros(2, dtype=torch.float64)
    W2 = torch.tensor([[2.0, 0.1], [0.0, 0.0]], dtype=torch.float64)
    return AffineNet([W1, W2], [b1, torch.tensor([-1.0, 0.0], dtype=torch.float64)])


def test_priority_and_pruning_on_a_hand_made_example():
    net = two_neuron_net()
    result = verify(net, torch.tensor([1.0, 1.0]), 0.1, 0, "crown")
    assert result.verified
    pf = proof_features(result, net)
    # P_i = |C W_L|_i * max(|l_i|, |u_i|) = [2 * 1.1, 0.1 * 1.1]
    torch.testing.assert_close(pf.priority, torch.tensor([2.2, 0.11], dtype=torch.float64))
    # margin 2 h0 + 0.1 h1 - 1 on h in [0.9, 1.1]^2: h0 alone proves it (0.8 > 0), h1 alone cannot (-0.91)
    assert sufficient_set(pf).tolist() == [0]
    assert proves_with(pf, torch.tensor([True, False])) and not proves_with(pf, torch.tensor([False, True]))


def non_monotone_net():
    """h = relu(W1 x + b1) is always active on x in [0.9, 1.1]^3, with h0 in [1, 1.1], h1 in [0.5, 1.2],
    h2 in [0.9, 1]; margin 2 h0 - 1.5 h1 + h2 - 1. Priorities 2.2 > 1.8 > 1.0. All three prove (0.1 > 0), h0
    alone proves (1 > 0), but h0 and h1 do not (-0.8): removing features is not monotone."""
    W1 = torch.diag(torch.tensor([0.5, 3.5, 0.5], dtype=torch.float64))
    b1 = torch.tensor([0.55, -2.65, 0.45], dtype=torch.float64)
    W2 = torch.tensor([[2.0, -1.5, 1.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    return AffineNet([W1, W2], [b1, torch.tensor([-1.0, 0.0], dtype=torch.float64)])


def test_linear_search_finds_the_smallest_proving_prefix_where_binary_search_cannot():
    net = non_monotone_net()
    pf = proof_features(verify(net, torch.ones(3), 0.1, 0, "crown"), net)
    torch.testing.assert_close(pf.priority, torch.tensor([2.2, 1.8, 1.0], dtype=torch.float64))
    assert sufficient_set(pf).tolist() == [0]  # the official linear search: top-1 proves
    assert sufficient_set(pf, "binary").tolist() == [0, 1, 2]  # top-2 fails, so binary search keeps all


def test_baseline_orders_are_the_papers():
    net = non_monotone_net()
    pf = proof_features(verify(net, torch.ones(3), 0.1, 0, "crown"), net)
    # Weight_ABS ("Gradient" in the paper's plots): max_j |(C W_L)_ji| = (2, 1.5, 1), bounds ignored
    torch.testing.assert_close(weight_abs_priority(pf), torch.tensor([2.0, 1.5, 1.0], dtype=torch.float64))
    assert feature_order(pf, "weight_abs").tolist() == [0, 1, 2]
    # where the bounds disagree with the weights the two orders differ: h0 in [0.1, 0.2], h1 in [1, 2]
    net2 = AffineNet([torch.diag(torch.tensor([0.5, 5.0], dtype=torch.float64)),
                      torch.tensor([[0.5, 0.4], [0.0, 0.0]], dtype=torch.float64)],
                     [torch.tensor([-0.35, -3.5], dtype=torch.float64), torch.tensor([0.1, 0.0], dtype=torch.float64)])
    pf2 = proof_features(verify(net2, torch.ones(2), 0.1, 0, "crown"), net2)
    assert feature_order(pf2, "priority").tolist() == [1, 0] and feature_order(pf2, "weight_abs").tolist() == [0, 1]
    pf.priority[1] = 0.0  # a zero-priority feature is never drawn, by any baseline
    for seed in range(20):
        assert 1 not in feature_order(pf, "random", torch.Generator().manual_seed(seed)).tolist()
    assert 1 not in feature_order(pf, "weight_abs").tolist()
    with pytest.raises(ValueError, match="order must be one of"):
        feature_order(pf, "alphabetical")


def test_sufficient_set_by_order_is_seeded_and_never_smaller_than_the_smallest_proving_prefix():
    torch.manual_seed(0)
    model = make_mlp(6, (16, 12), 3)
    net = as_affine_net(model, (6,))
    seen = 0
    for seed in range(12):
        x = torch.rand(6, generator=torch.Generator().manual_seed(seed))
        result = verify(model, x, 0.01, int(model(x[None]).argmax()), "crown")
        if not result.verified:
            continue
        pf = proof_features(result, net)
        a = sufficient_set(pf, order="random", generator=torch.Generator().manual_seed(1))
        b = sufficient_set(pf, order="random", generator=torch.Generator().manual_seed(1))
        assert a.tolist() == b.tolist()
        for order in ORDERS:
            kept = sufficient_set(pf, order=order, generator=torch.Generator().manual_seed(2))
            mask = torch.zeros_like(pf.priority, dtype=torch.bool)
            mask[kept] = True
            assert proves_with(pf, mask)
            if len(kept) > 1:  # one feature fewer of the same order does not prove
                mask[kept[-1]] = False
                assert not proves_with(pf, mask)
        seen += 1
    assert seen >= 3


@pytest.mark.parametrize("method", ["ibp", "deepz", "crown"])
def test_binary_and_linear_search_agree_where_removal_is_monotone(method):
    torch.manual_seed(0)
    model = make_mlp(6, (16, 12), 3)
    agreed = 0
    for seed in range(10):
        x = torch.rand(6, generator=torch.Generator().manual_seed(seed))
        label = int(model(x[None]).argmax())
        result = verify(model, x, 0.01, label, method)
        if not result.verified:
            continue
        pf = proof_features(result, __import__("iclr24").proof_features.as_affine_net(model, (6,)))
        binary, linear = sufficient_set(pf, "binary"), sufficient_set(pf, "linear")
        assert binary.tolist() == linear.tolist()
        keep = torch.zeros(12, dtype=torch.bool)
        keep[binary] = True
        assert proves_with(pf, keep)
        assert top_k_preserved(pf, torch.argsort(pf.priority, descending=True), len(binary))
        agreed += 1
    assert agreed >= 3


def test_feature_gradients_are_those_of_the_relu_output_by_default():
    # z0 = x0 is unstable on [-1, 2]: CROWN bounds relu(z0) by 1 * x0 below and 2/3 (x0 + 1) above;
    # z1 = x1 - 5 is always inactive: relu(z1) = 0, no gradient
    net = AffineNet([torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64),
                     torch.tensor([[1.0, 1.0], [0.0, 0.0]], dtype=torch.float64)],
                    [torch.tensor([0.0, -5.0], dtype=torch.float64), torch.tensor([5.0, 0.0], dtype=torch.float64)])
    pf = proof_features(verify(net, torch.tensor([0.5, 0.0]), 1.5, 0, "crown"), net)
    torch.testing.assert_close(feature_gradients(pf), torch.tensor([[5 / 6, 0.0], [0.0, 0.0]], dtype=torch.float64))
    torch.testing.assert_close(feature_gradients(pf, post_relu=False),
                               torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64))


def test_feature_gradients_match_autograd_on_an_always_active_net():
    # every ReLU stays active on the region, so CROWN's bounds are exact and linear in x
    net = AffineNet([torch.eye(3, dtype=torch.float64) * 2, torch.ones(2, 3, dtype=torch.float64)],
                    [torch.full((3,), 5.0, dtype=torch.float64), torch.tensor([1.0, 0.0], dtype=torch.float64)])
    pf = proof_features(verify(net, torch.zeros(3), 0.1, 0, "crown"), net)
    torch.testing.assert_close(feature_gradients(pf), 2 * torch.eye(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="needs a proof from method='crown'"):
        feature_gradients(proof_features(verify(net, torch.zeros(3), 0.1, 0, "ibp"), net))


def test_an_unproved_property_has_no_proof_to_interpret():
    net = two_neuron_net()
    result = verify(net, torch.tensor([1.0, 1.0]), 0.1, 1)
    with pytest.raises(ValueError, match="is not proved by crown .* there is no proof to interpret"):
        proof_features(result, net)


def test_search_must_be_known():
    net = two_neuron_net()
    pf = proof_features(verify(net, torch.tensor([1.0, 1.0]), 0.1, 0), net)
    with pytest.raises(ValueError, match="search must be 'binary' or 'linear'"):
        sufficient_set(pf, "greedy")
