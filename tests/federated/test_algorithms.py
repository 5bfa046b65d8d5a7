import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from iclr24.federated import (
    ClientData,
    TwoLayerCNN,
    aggregation_weights,
    client_features,
    error_rate,
    federated_train,
    local_train,
    mix_state_dicts,
    sample_size_weights,
    signal_noise_clients,
    similarity_weights,
)


def _signal_patch(x):
    return x[:, 0]


def _linear_clients(k=3, n=12, d=5, seed=0, same=False, sizes=None):
    g = torch.Generator().manual_seed(seed)
    clients = []
    for i in range(k):
        if same and clients:
            clients.append(clients[0])
            continue
        x = torch.randn(sizes[i] if sizes else n, d, generator=g)
        y = torch.sign(x[:, i % d] + 0.1)
        clients.append(ClientData(x, y, x, y))
    return clients


class Linear(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.w = nn.Parameter(torch.linspace(-0.3, 0.3, d))

    def forward(self, x):
        return x @ self.w


# ---- aggregation matrices -----------------------------------------------------------------------------------

def test_similarity_weights_closed_form():
    phi = torch.tensor([[1.0, 0.0], [1.0, 1.0], [-1.0, 0.0]])
    a = similarity_weights(phi)
    c = 2 ** -0.5                                    # cos(phi_0, phi_1) = cos(phi_1, phi_2) in size
    expected = torch.tensor([[1, c, 0], [c, 1, 0], [0, 0, 1]], dtype=torch.float64)   # relu cuts the -1 and -c
    expected = expected / expected.sum(1, keepdim=True)
    torch.testing.assert_close(a, expected)
    # scale-free per client, rows stochastic
    torch.testing.assert_close(similarity_weights(phi * torch.tensor([[3.0], [0.5], [7.0]])), a)
    # a zero feature keeps its own model
    assert similarity_weights(torch.zeros(2, 3)).tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_client_features_are_label_weighted_input_means():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]])
    y = torch.tensor([0, 2, 2, 0])
    phi = client_features(x, y, [0, 1, 2])
    assert phi.tolist() == [2.0, 2.5, 0.0, 0.0, 2.0, 2.5]        # (x0+x3)/4, nothing, (x1+x2)/4


def test_binary_features_are_the_signal_whatever_the_label_balance():
    mu = torch.tensor([3.0, 0.0])
    all_pos = torch.ones(4)
    mixed = torch.tensor([1.0, -1.0, -1.0, -1.0])
    phi_a = client_features(all_pos[:, None] * mu, all_pos, [-1.0, 1.0])
    phi_b = client_features(mixed[:, None] * mu, mixed, [-1.0, 1.0])
    assert phi_a.tolist() == phi_b.tolist() == [3.0, 0.0]         # mean_i y_i x_i = mu
    data = signal_noise_clients(10, 8, d=50, seed=0)
    a = aggregation_weights("weighted", data.clients, feature_fn=_signal_patch)
    torch.testing.assert_close(a, torch.full((10, 10), 0.1, dtype=torch.float64))   # homogeneous: uniform


def test_weighted_features_use_the_union_of_classes_in_one_order():
    x = torch.eye(2)
    clients = [ClientData(x, torch.tensor([0, 1]), x, torch.tensor([0, 1])),
               ClientData(x, torch.tensor([1, 2]), x, torch.tensor([1, 2]))]
    # phi_0 = [e0/2, e1/2, 0], phi_1 = [0, e0/2, e1/2] over classes (0, 1, 2): cosine 0, so no mixing
    assert aggregation_weights("weighted", clients).tolist() == [[1.0, 0.0], [0.0, 1.0]]
    clients[1] = ClientData(x, torch.tensor([0, 2]), x, torch.tensor([0, 2]))
    # phi_1 = [e0/2, 0, e1/2]: shares class 0 with client 0: cosine 1/2
    torch.testing.assert_close(aggregation_weights("weighted", clients),
                               torch.tensor([[2 / 3, 1 / 3], [1 / 3, 2 / 3]], dtype=torch.float64))


def test_features_of_opposite_and_orthogonal_signals_give_block_weights():
    for heterogeneity, between in (("opposite", 0.0), ("orthogonal", 0.0), ("homogeneous", None)):
        data = signal_noise_clients(4, 10, d=50, heterogeneity=heterogeneity, seed=2)
        a = aggregation_weights("weighted", data.clients, feature_fn=_signal_patch)
        torch.testing.assert_close(a.sum(1), torch.ones(4, dtype=torch.float64))
        if between is None:
            assert bool((a > 0.15).all())
        else:
            assert float(a[:2, 2:].abs().max()) == between and float(a[2:, :2].abs().max()) == between


def test_fedavg_and_local_weights():
    assert sample_size_weights([1, 3]).tolist() == [[0.25, 0.75], [0.25, 0.75]]
    clients = _linear_clients(3)
    assert torch.equal(aggregation_weights("local", clients), torch.eye(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="aggregation must be one of"):
        aggregation_weights("median", clients)
    with pytest.raises(ValueError, match="rows sum to 1"):
        aggregation_weights(torch.ones(3, 3), clients)
    with pytest.raises(ValueError, match="sizes must be a non-empty list of positive counts"):
        sample_size_weights([2, 0])


def test_mix_state_dicts_mixes_floats_and_keeps_integer_buffers():
    states = [{"w": torch.tensor([1.0, 0.0]), "n": torch.tensor(3)},
              {"w": torch.tensor([0.0, 4.0]), "n": torch.tensor(5)}]
    mixed = mix_state_dicts(states, torch.tensor([[0.5, 0.5], [0.25, 0.75]]))
    assert mixed[0]["w"].tolist() == [0.5, 2.0] and mixed[1]["w"].tolist() == [0.25, 3.0]
    assert mixed[0]["n"].item() == 3 and mixed[1]["n"].item() == 5
    assert mixed[0]["w"].dtype == torch.float32
    with pytest.raises(ValueError, match=r"weights must be a non-negative \(2, 2\) matrix"):
        mix_state_dicts(states, torch.eye(3))


# ---- local training and the federated loop ------------------------------------------------------------------

def test_local_train_is_gradient_descent_on_the_logistic_loss():
    (client,) = _linear_clients(1)
    model = Linear(5)
    w = model.w.detach().clone()
    for _ in range(3):                                 # closed-form gradient of mean softplus(-y x.w)
        margin = client.y * (client.x @ w)
        w = w - 0.2 * (-(torch.sigmoid(-margin) * client.y)[:, None] * client.x).mean(0)
    local_train(model, client.x, client.y, steps=3, lr=0.2)
    torch.testing.assert_close(model.w.detach(), w)
    with pytest.raises(ValueError, match="steps must be >= 1"):
        local_train(model, client.x, client.y, steps=0, lr=0.2)


def test_fedavg_of_identical_clients_equals_local_training():
    clients = _linear_clients(3, same=True)
    fed = federated_train(Linear(5), clients, rounds=4, local_steps=3, lr=0.3, aggregation="fedavg")
    alone = federated_train(Linear(5), clients, rounds=4, local_steps=3, lr=0.3, aggregation="local")
    for a, b in zip(fed.models, alone.models):
        torch.testing.assert_close(a.w, b.w)


@pytest.mark.parametrize("sizes", [None, (5, 12, 20, 7)])
def test_fedavg_with_one_local_step_is_centralised_gradient_descent(sizes):
    # with n_k / N weights, the average of one mean-loss step per client is the full-batch step
    clients = _linear_clients(4, sizes=sizes)
    fed = federated_train(Linear(5), clients, rounds=5, local_steps=1, lr=0.3, aggregation="fedavg")
    central = Linear(5)
    x, y = torch.cat([c.x for c in clients]), torch.cat([c.y for c in clients])
    local_train(central, x, y, steps=5, lr=0.3)
    for model in fed.models:
        torch.testing.assert_close(model.w, central.w)


def test_local_aggregation_never_communicates():
    clients = _linear_clients(3)
    run = federated_train(Linear(5), clients, rounds=3, local_steps=2, lr=0.3, aggregation="local")
    for model, client in zip(run.models, clients):
        alone = Linear(5)
        local_train(alone, client.x, client.y, steps=6, lr=0.3)
        torch.testing.assert_close(model.w, alone.w)


def test_weighted_fedavg_on_opposite_signals_is_fedavg_within_each_group():
    data = signal_noise_clients(4, 8, d=60, heterogeneity="opposite", seed=1)
    model = TwoLayerCNN(60, 3, generator=torch.Generator().manual_seed(0))
    kwargs = dict(rounds=3, local_steps=2, lr=0.5)
    weighted = federated_train(model, data.clients, aggregation="weighted", feature_fn=_signal_patch, **kwargs)
    a = weighted.weights
    for group in (slice(0, 2), slice(2, 4)):
        group_run = federated_train(model, data.clients[group], aggregation=a[group, group] / a[group, group].sum(1,
                                    keepdim=True), **kwargs)
        for ours, theirs in zip(weighted.models[group], group_run.models):
            torch.testing.assert_close(ours.weight, theirs.weight)


def test_federated_train_records_history_and_starts_every_client_from_the_model():
    clients = _linear_clients(2)
    model = Linear(5)
    before = copy.deepcopy(model.w.detach())
    seen = []
    run = federated_train(model, clients, rounds=3, local_steps=1, lr=0.1,
                          callback=lambda r, models: seen.append(r) or {"w0": float(models[0].w[0].detach())})
    assert seen == [0, 1, 2, 3] and [h["round"] for h in run.history] == [0, 1, 2, 3]
    assert run.history[0]["w0"] == pytest.approx(float(before[0]))
    assert torch.equal(model.w.detach(), before)           # the caller's model is not trained in place
    with pytest.raises(ValueError, match="clients must hold at least one client"):
        federated_train(model, [], rounds=1, local_steps=1, lr=0.1)
    with pytest.raises(ValueError, match="rounds must be >= 0"):
        federated_train(model, clients, rounds=-1, local_steps=1, lr=0.1)


def test_cross_entropy_is_used_for_class_labels():
    x = torch.randn(20, 4, generator=torch.Generator().manual_seed(0))
    y = torch.arange(20) % 3
    model = nn.Linear(4, 3)
    expected = copy.deepcopy(model)
    local_train(model, x, y, steps=1, lr=0.5)
    loss = F.cross_entropy(expected(x), y)
    loss.backward()
    torch.testing.assert_close(model.weight, expected.weight - 0.5 * expected.weight.grad)
    assert 0.0 <= error_rate(model, x, y) <= 1.0


# ---- the paper's effects at a small size (they fail when aggregation is removed or the weights are wrong) ---

def _errors(heterogeneity, seed=0):
    data = signal_noise_clients(6, 8, n_test=300, d=400, signal_norm=3.0, heterogeneity=heterogeneity, seed=seed)
    out = {}
    for method in ("local", "fedavg", "weighted"):
        model = TwoLayerCNN(400, 6, generator=torch.Generator().manual_seed(seed))
        run = federated_train(model, data.clients, rounds=25, local_steps=5, lr=0.5, aggregation=method,
                              feature_fn=_signal_patch)
        out[method] = sum(error_rate(m, c.x_test, c.y_test) for m, c in zip(run.models, data.clients)) / 6
    return out


def test_fedavg_beats_local_training_on_homogeneous_clients():
    err = _errors("homogeneous")
    assert err["fedavg"] <= err["local"] - 0.05


def test_weighted_fedavg_beats_fedavg_on_opposite_signals():
    err = _errors("opposite")
    assert err["fedavg"] > 0.4                       # one global model cannot serve y and -y
    assert err["weighted"] <= err["fedavg"] - 0.3


def test_bad_input_is_named():
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="float labels must be \\+-1"):
        ClientData(x, torch.tensor([0.0, 1.0, 1.0, 0.0]), x, torch.ones(4))
    with pytest.raises(ValueError, match="one label per sample"):
        ClientData(x, torch.ones(3), x, torch.ones(4))
    with pytest.raises(ValueError, match="must be finite"):
        ClientData(x * float("nan"), torch.ones(4), x, torch.ones(4))
    with pytest.raises(ValueError, match="one logit per sample"):
        error_rate(nn.Linear(3, 2), x, torch.ones(4))
    model = nn.Linear(3, 1)                       # (n, 1) logits are read as (n,)
    expected = float(((x @ model.weight.detach().T)[:, 0] + model.bias.detach() >= 0).float().mean())
    assert error_rate(model, x, torch.ones(4)) == pytest.approx(1 - expected)
    with pytest.raises(ValueError, match="weights must be a non-negative"):
        mix_state_dicts([{"w": torch.ones(1)}] * 2, torch.tensor([[5.0, 5.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="sizes must be"):
        sample_size_weights([float("nan"), 1])
    with pytest.raises(ValueError, match="lr must be finite"):
        federated_train(Linear(3), [ClientData(x, torch.ones(4), x, torch.ones(4))], rounds=0, local_steps=1,
                        lr=float("nan"))
    with pytest.raises(TypeError, match="callback must return a dict or None"):
        federated_train(Linear(3), [ClientData(x, torch.ones(4), x, torch.ones(4))], rounds=1, local_steps=1,
                        lr=0.1, callback=lambda r, m: 3)
    with pytest.raises(FloatingPointError, match="diverged"):
        local_train(Linear(3), x, torch.ones(4), steps=3, lr=0.1, loss=lambda out, y: out.sum() * float("nan"))


# ---- the batched (stacked-clients) loop is the per-client loop -------------------------------------------------

def _params(run):
    return [torch.cat([p.detach().flatten() for p in m.parameters()]) for m in run.models]


@pytest.mark.parametrize("aggregation", ["local", "fedavg", "weighted"])
def test_batched_loop_equals_the_per_client_loop_on_the_cnn(aggregation):
    data = signal_noise_clients(4, 8, d=60, heterogeneity="opposite", seed=1)
    model = TwoLayerCNN(60, 3, generator=torch.Generator().manual_seed(0))
    seen = {True: [], False: []}
    runs = {b: federated_train(model, data.clients, rounds=3, local_steps=2, lr=0.5, aggregation=aggregation,
                               batched=b, callback=lambda r, models, b=b: seen[b].append(
                                   [m.weight.detach().clone() for m in models]) or {"r": r})
            for b in (False, True)}
    for a, b in zip(_params(runs[False]), _params(runs[True])):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert runs[True].history == runs[False].history
    for before, after in zip(seen[False], seen[True]):     # the callback sees each round's models
        for a, b in zip(before, after):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert not torch.equal(_params(runs[True])[0], model.weight.detach().flatten())   # trained, not the init


@pytest.mark.parametrize("labels", ["binary", "classes"])
def test_batched_loop_weights_unequal_clients_by_their_own_sizes(labels):
    # padding must not enter the mean: clients of 5, 12, 20 and 7 samples, one local step, closed-form check
    g = torch.Generator().manual_seed(3)
    clients = []
    for n in (5, 12, 20, 7):
        x = torch.randn(n, 4, generator=g)
        y = torch.sign(x[:, 0] + 0.1) if labels == "binary" else torch.randint(3, (n,), generator=g)
        clients.append(ClientData(x, y, x, y))
    torch.manual_seed(0)
    model = Linear(4) if labels == "binary" else nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3))
    for aggregation in ("local", "fedavg"):
        ref = federated_train(model, clients, rounds=2, local_steps=3, lr=0.3, aggregation=aggregation)
        fast = federated_train(model, clients, rounds=2, local_steps=3, lr=0.3, aggregation=aggregation,
                               batched=True)
        for a, b in zip(_params(ref), _params(fast)):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_batched_loop_falls_back_for_a_custom_loss_and_names_divergence():
    clients = _linear_clients(3)
    squared = lambda out, y: ((out - y) ** 2).mean()    # noqa: E731
    ref = federated_train(Linear(5), clients, rounds=2, local_steps=2, lr=0.1, loss=squared)
    fast = federated_train(Linear(5), clients, rounds=2, local_steps=2, lr=0.1, loss=squared, batched=True)
    for a, b in zip(_params(ref), _params(fast)):
        assert torch.equal(a, b)
    huge = [ClientData(c.x * 1e30, c.y, c.x, c.y) for c in clients]      # the second step's logits overflow
    with pytest.raises(FloatingPointError, match="diverged"):
        federated_train(Linear(5), huge, rounds=1, local_steps=3, lr=0.1, batched=True)
