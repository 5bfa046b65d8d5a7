import pytest
import torch

from iclr24.proof_features import (
    AffineNet,
    feature_gradients,
    make_mlp,
    proof_features,
    proves_with,
    sufficient_set,
    top_k_preserved,
    verify,
)


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


@pytest.mark.parametrize("method", ["ibp", "deepz", "crown"])
def test_binary_and_linear_search_agree(method):
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
