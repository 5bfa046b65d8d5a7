import math

import numpy as np
import pytest
import torch

from iclr24.federated import (
    TwoLayerCNN,
    client_signals,
    digits_clients,
    dirichlet_partition,
    noise_memorisation,
    signal_learning,
    signal_noise_clients,
)

# ---- the paper's data model --------------------------------------------------------------------------------

@pytest.mark.parametrize("heterogeneity", ["homogeneous", "opposite", "orthogonal"])
def test_signal_patch_is_label_times_client_signal_and_noise_is_orthogonal(heterogeneity):
    data = signal_noise_clients(6, 40, n_test=30, d=300, signal_norm=2.5, noise_std=1.5,
                                heterogeneity=heterogeneity, seed=1)
    assert len(data) == 6 and data.signals.shape == (6, 300)
    for mu, client in zip(data.signals, data.clients):
        for x, y in ((client.x, client.y), (client.x_test, client.y_test)):
            assert x.shape[1:] == (2, 300)
            assert set(y.tolist()) <= {-1.0, 1.0}
            torch.testing.assert_close(x[:, 0], y[:, None] * mu)
            # the noise patch has no component along any client's signal
            assert float((x[:, 1] @ data.signals.T).abs().max()) < 1e-4
    assert torch.allclose(data.signals.norm(dim=1), torch.full((6,), 2.5))


def test_noise_patch_norm_is_sigma_sqrt_of_the_remaining_dimensions():
    data = signal_noise_clients(2, 400, n_test=1, d=500, noise_std=2.0, heterogeneity="orthogonal", seed=0)
    noise = torch.cat([c.x[:, 1] for c in data.clients])
    # two signal directions are projected out: E||xi||^2 = sigma^2 (d - 2)
    assert float((noise.norm(dim=1) ** 2).mean()) == pytest.approx(4.0 * 498, rel=0.02)


def test_client_signals_per_heterogeneity():
    homo = client_signals(5, 4, 3.0, "homogeneous")
    assert torch.equal(homo, homo[:1].expand(5, -1))
    opp = client_signals(5, 4, 3.0, "opposite")
    assert torch.equal(opp[:3], homo[:3]) and torch.equal(opp[3:], -homo[3:])
    orth = client_signals(4, 4, 3.0, "orthogonal")
    assert float(orth[0] @ orth[3]) == 0.0 and float(orth[0] @ orth[1]) == 9.0
    with pytest.raises(ValueError, match="heterogeneity must be one of"):
        client_signals(4, 4, 3.0, "mixed")
    with pytest.raises(ValueError, match="signal_norm must be > 0"):
        client_signals(4, 4, 0.0, "opposite")
    with pytest.raises(ValueError, match="n_clients must be >= 2"):
        client_signals(1, 4, 3.0, "opposite")
    with pytest.raises(ValueError, match="d must be >= 3"):
        client_signals(4, 2, 3.0, "orthogonal")


def test_signal_noise_clients_is_seeded():
    a, b = signal_noise_clients(3, 5, seed=7), signal_noise_clients(3, 5, seed=7)
    c = signal_noise_clients(3, 5, seed=8)
    assert torch.equal(a[2].x, b[2].x) and torch.equal(a[2].y_test, b[2].y_test)
    assert not torch.equal(a[2].x, c[2].x)
    with pytest.raises(ValueError, match="n_train must be >= 1"):
        signal_noise_clients(3, 0)


def test_dirichlet_partition_covers_every_index_once_and_skews_with_small_alpha():
    labels = np.repeat(np.arange(10), 100)
    for alpha in (0.05, 100.0):
        parts = dirichlet_partition(labels, 8, alpha, seed=3, min_size=5)
        joined = np.concatenate(parts)
        assert np.array_equal(np.sort(joined), np.arange(labels.size))
        assert min(p.size for p in parts) >= 5

    def top_class_share(parts):
        return np.mean([np.bincount(labels[p], minlength=10).max() / p.size for p in parts])

    assert top_class_share(dirichlet_partition(labels, 8, 0.05, seed=3)) > 0.6
    assert top_class_share(dirichlet_partition(labels, 8, 100.0, seed=3)) < 0.25
    with pytest.raises(ValueError, match="alpha must be > 0"):
        dirichlet_partition(labels, 8, 0.0)
    with pytest.raises(ValueError, match="exceeds"):
        dirichlet_partition(labels[:10], 8, 1.0, min_size=2)


def test_digits_clients_split_each_client_into_disjoint_train_and_test():
    data = digits_clients(5, 0.5, test_fraction=0.25, seed=0)
    assert sum(c.num_examples + c.y_test.shape[0] for c in data) == 1797
    rows = torch.cat([torch.cat([c.x, c.x_test]) for c in data])
    assert float(rows.min()) >= 0.0 and float(rows.max()) <= 1.0
    for c in data:
        assert c.y_test.shape[0] == round(0.25 * (c.num_examples + c.y_test.shape[0]))
    # a large test fraction still leaves every client a training sample
    assert min(c.num_examples for c in digits_clients(100, 0.5, test_fraction=0.9, seed=0)) >= 1
    with pytest.raises(TypeError, match="seed must be an int"):
        digits_clients(5, 0.5, seed=None)


# ---- the two-layer CNN and its signal / noise coefficients ------------------------------------------------

def test_two_layer_cnn_matches_the_paper_formula_by_hand():
    model = TwoLayerCNN(2, 2, init_std=0.0)
    with torch.no_grad():
        model.weight[0] = torch.tensor([[1.0, 0.0], [0.0, -1.0]])    # w_{+1,1}, w_{+1,2}
        model.weight[1] = torch.tensor([[0.5, 0.5], [-2.0, 0.0]])    # w_{-1,1}, w_{-1,2}
    x = torch.tensor([[[2.0, 1.0], [-1.0, 3.0]]])                     # one sample, two patches
    # F_{+1} = (relu(2) + relu(-1) + relu(-1) + relu(-3)) / 2 = 1
    # F_{-1} = (relu(1.5) + relu(1) + relu(-4) + relu(2)) / 2 = 2.25
    assert model(x).item() == pytest.approx(1.0 - 2.25)
    model.power = 2.0
    assert model(x).item() == pytest.approx((4.0) / 2 - (2.25 + 1 + 4) / 2)


def test_two_layer_cnn_is_patch_permutation_invariant_and_checks_input():
    model = TwoLayerCNN(6, 3, generator=torch.Generator().manual_seed(0), init_std=1.0)
    x = torch.randn(4, 2, 6)
    torch.testing.assert_close(model(x), model(x.flip(1)))
    assert model(x).shape == (4,)
    assert repr(model) == "TwoLayerCNN(d=6, m=3, power=1, init_std=1)"
    with pytest.raises(ValueError, match=r"x must have 3 dimensions \(n, patches, d\)"):
        model(torch.randn(4, 6))
    with pytest.raises(ValueError, match="d=6 features per patch"):
        model(torch.randn(4, 2, 5))
    with pytest.raises(ValueError, match="m must be >= 1"):
        TwoLayerCNN(6, 0)


def test_signal_learning_and_noise_memorisation_by_hand():
    model = TwoLayerCNN(3, 2, init_std=0.0)
    with torch.no_grad():
        model.weight[0] = torch.tensor([[1.0, 0.0, 0.0], [2.0, 1.0, 0.0]])
        model.weight[1] = torch.tensor([[-3.0, 0.0, 1.0], [0.5, 0.0, 0.0]])
    mu = torch.tensor([1.0, 0.0, 0.0])
    # j=+1: max(<w,mu>) = 2; j=-1: max(-<w,mu>) = max(3, -0.5) = 3
    assert signal_learning(model, mu).tolist() == [2.0, 3.0]
    noise = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    y = torch.tensor([1.0, -1.0])
    # sample 0 (y=+1) uses the +1 filters: max(0, 1) = 1; sample 1 (y=-1): max(1, 0) = 1
    assert noise_memorisation(model, noise, y).tolist() == [1.0, 1.0]
    assert noise_memorisation(model, noise, -y).tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="one \\+-1 label per noise row"):
        noise_memorisation(model, noise, torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match="mu must have the model's d=3 entries"):
        signal_learning(model, torch.ones(4))
    with pytest.raises(TypeError, match="model must be a TwoLayerCNN"):
        signal_learning(torch.nn.Linear(3, 1), mu)


def test_init_std_and_generator():
    a = TwoLayerCNN(50, 4, init_std=0.1, generator=torch.Generator().manual_seed(3))
    b = TwoLayerCNN(50, 4, init_std=0.1, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a.weight, b.weight)
    assert float(a.weight.detach().std()) == pytest.approx(0.1, rel=0.15)
    assert math.isclose(float(TwoLayerCNN(5, 2, init_std=0.0).weight.detach().abs().sum()), 0.0)
