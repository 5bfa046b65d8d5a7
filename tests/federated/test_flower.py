import subprocess
import sys

import pytest
import torch

from iclr24.federated import TwoLayerCNN, error_rate, federated_train, signal_noise_clients


def _signal_patch(x):
    return x[:, 0]


def test_import_without_flower_names_the_extra():
    code = ("import sys; sys.modules['flwr'] = None\n"
            "import iclr24.federated as f\n"
            "f.federated_train\n"
            "try:\n    f.WeightedFedAvg\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "pip install 'iclr24[fl]'" in out.stdout


def test_flower_simulation_matches_the_in_process_loop():
    pytest.importorskip("flwr")
    from iclr24.federated import run_flower_simulation

    data = signal_noise_clients(3, 8, n_test=200, d=120, heterogeneity="opposite", seed=4)
    model = TwoLayerCNN(120, 4, generator=torch.Generator().manual_seed(4))
    kwargs = dict(rounds=3, local_steps=2, lr=0.5, feature_fn=_signal_patch)

    ours = federated_train(model, data.clients, aggregation="weighted", **kwargs)
    flower = run_flower_simulation(model, data.clients, aggregation="weighted", num_cpus=2, **kwargs)
    # WeightedFedAvg orders the replies by partition id, so the mixing sums in the same order: bit-equal
    for a, b in zip(ours.models, flower.models):
        assert torch.equal(a.weight, b.weight)
    torch.testing.assert_close(flower.weights, ours.weights)
    assert float(flower.weights[0, 2]) == 0.0            # the client with -mu is mixed with nobody else
    assert len(flower.errors) == 3
    last = sum(error_rate(m, c.x_test, c.y_test) * 200 for m, c in zip(ours.models, data.clients)) / 600
    assert flower.errors[-1] == pytest.approx(last)

    # plain FedAvg goes through Flower's own strategy (float32 in-place sums): equal to rounding
    ours = federated_train(model, data.clients, aggregation="fedavg", **kwargs)
    flower = run_flower_simulation(model, data.clients, aggregation="fedavg", num_cpus=2, **kwargs)
    for a, b in zip(ours.models, flower.models):
        torch.testing.assert_close(a.weight, b.weight, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="aggregation must be 'weighted' or 'fedavg'"):
        run_flower_simulation(model, data.clients, aggregation="local", **kwargs)


def test_weighted_fedavg_orders_replies_by_partition_and_mixes_by_similarity():
    pytest.importorskip("flwr")
    from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
    from flwr.supercore.task_identity import TaskIdentity

    from iclr24.federated import WeightedFedAvg

    TaskIdentity.run_id = TaskIdentity.node_id = TaskIdentity.task_id = 1     # what a running ServerApp sets
    features = {0: [1.0, 0.0], 1: [1.0, 1.0], 2: [-1.0, 0.0]}                # the closed-form case of test_algorithms

    def reply(partition, node):
        content = RecordDict({"arrays": ArrayRecord({"w": torch.full((2,), float(partition))}),
                              "metrics": MetricRecord({"num-examples": 4}),
                              "client": ConfigRecord({"partition-id": partition, "features": features[partition]})})
        request = Message(content=RecordDict(), dst_node_id=node, message_type="train")
        return Message(content=content, reply_to=request)

    strategy = WeightedFedAvg()
    # arrival order 2, 0, 1 from nodes 30, 10, 20
    global_arrays, _ = strategy.aggregate_train(1, [reply(2, 30), reply(0, 10), reply(1, 20)])
    c = 2 ** -0.5
    expected = torch.tensor([[1, c, 0], [c, 1, 0], [0, 0, 1]], dtype=torch.float64)
    expected = expected / expected.sum(1, keepdim=True)
    torch.testing.assert_close(strategy.weights, expected)
    personal = strategy.personal_state_dicts()
    for k in range(3):
        torch.testing.assert_close(personal[k]["w"], torch.full((2,), float(expected[k] @ torch.arange(3.0).double())))
    assert global_arrays.to_torch_state_dict()["w"].tolist() == [1.0, 1.0]    # the FedAvg mean, for reference
    with pytest.raises(ValueError, match="needs each client to reply with a ConfigRecord 'client'"):
        bare = Message(content=RecordDict({"arrays": ArrayRecord({"w": torch.zeros(2)}),
                                           "metrics": MetricRecord({"num-examples": 4})}),
                       reply_to=Message(content=RecordDict(), dst_node_id=5, message_type="train"))
        WeightedFedAvg().aggregate_train(1, [bare])
