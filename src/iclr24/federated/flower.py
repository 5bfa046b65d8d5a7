"""Flower integration (extra ``fl``): weighted FedAvg as a Flower strategy, client apps, and a simulation run.

Built on Flower's Message API (``flwr.serverapp.strategy``, Flower >= 1.21). ``WeightedFedAvg`` is a
``FedAvg`` whose server keeps one model per client: each client reports its label-weighted input feature
``phi_k`` with its trained arrays, the server mixes ``theta_k <- sum_k' A[k, k'] theta_k'`` with
``A = similarity_weights(phi)``, and ``configure_train``/``configure_evaluate`` send each node its own
arrays. The model in the strategy's ``Result`` is the plain FedAvg average, for reference.

``run_flower_simulation`` runs the same federation as ``federated_train`` through Flower's simulation
engine (Ray backend), so the two paths can be compared on the same seeds; the in-process loop stays the
fast path for the reproduction.
"""

from __future__ import annotations

import copy
import logging
import os
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

try:
    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError("iclr24.federated's Flower integration needs Flower >= 1.21 with its simulation engine: "
                      "pip install 'iclr24[fl]'") from err

from iclr24.core import check_int, check_number
from iclr24.federated.algorithms import (
    Loss,
    client_features,
    error_rate,
    local_train,
    mix_state_dicts,
    similarity_weights,
)
from iclr24.federated.data import ClientData

__all__ = ["FlowerRun", "WeightedFedAvg", "make_client_app", "run_flower_simulation"]

CLIENT_KEY = "client"


class WeightedFedAvg(FedAvg):
    """FedAvg with one model per client, mixed by the similarity of the clients' input features.

    Clients must reply with a ``ConfigRecord`` under ``client_record_key`` holding ``"features"`` (a list
    of floats, ``phi_k``) and optionally ``"partition-id"`` (replies are ordered by it, so the mixing sums
    in the same order as the in-process loop). Other arguments are ``FedAvg``'s.
    """

    def __init__(self, *, client_record_key: str = CLIENT_KEY, **kwargs) -> None:
        super().__init__(**kwargs)
        self.client_record_key = client_record_key
        self.personal_arrays: dict[int, ArrayRecord] = {}
        self.partition_of: dict[int, int] = {}
        self.weights: Tensor | None = None
        self.node_order: list[int] = []

    def summary(self) -> None:
        super().summary()
        logging.getLogger("flwr").info("\t└──> Weighted FedAvg: per-client models mixed by feature similarity")

    def _personalise(self, messages: Iterable[Message], config: ConfigRecord) -> list[Message]:
        out = []
        for message in messages:
            node = message.metadata.dst_node_id
            if node not in self.personal_arrays:
                out.append(message)
                continue
            content = RecordDict({self.arrayrecord_key: self.personal_arrays[node], self.configrecord_key: config})
            out.append(Message(content=content, message_type=message.metadata.message_type, dst_node_id=node))
        return out

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        return self._personalise(super().configure_train(server_round, arrays, config, grid), config)

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        return self._personalise(super().configure_evaluate(server_round, arrays, config, grid), config)

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = [r for r in replies if not r.has_error()]
        for reply in replies:
            info = reply.content.config_records.get(self.client_record_key)
            if info is None or "features" not in info:
                raise ValueError(f"WeightedFedAvg needs each client to reply with a ConfigRecord "
                                 f"'{self.client_record_key}' holding 'features'; node "
                                 f"{reply.metadata.src_node_id} sent none")
            self.partition_of[reply.metadata.src_node_id] = int(info.get("partition-id", reply.metadata.src_node_id))
        replies.sort(key=lambda r: self.partition_of[r.metadata.src_node_id])
        global_arrays, metrics = super().aggregate_train(server_round, replies)
        if not replies:
            return global_arrays, metrics
        features = torch.tensor([list(r.content[self.client_record_key]["features"]) for r in replies],
                                dtype=torch.float64)
        self.weights = similarity_weights(features)
        self.node_order = [r.metadata.src_node_id for r in replies]
        states = [r.content[self.arrayrecord_key].to_torch_state_dict() for r in replies]
        for node, state in zip(self.node_order, mix_state_dicts(states, self.weights)):
            self.personal_arrays[node] = ArrayRecord(state)
        return global_arrays, metrics

    def personal_state_dicts(self) -> dict[int, dict[str, Tensor]]:
        """Each client's current model, keyed by its partition id."""
        return {self.partition_of[node]: arrays.to_torch_state_dict()
                for node, arrays in self.personal_arrays.items()}


def make_client_app(model: nn.Module, clients: Sequence[ClientData], *, local_steps: int, lr: float,
                    loss: Loss | None = None, feature_fn: Callable[[Tensor], Tensor] | None = None) -> ClientApp:
    """A ``ClientApp`` for any torch model: node ``partition-id`` k trains on ``clients[k]``.

    ``train`` loads the arrays it is sent into a copy of ``model``, runs ``local_train`` (full-batch GD, as
    ``federated_train`` does) and replies with the arrays, ``num-examples`` and ``train-loss``, and its
    feature ``phi_k`` (over the classes of all clients) for ``WeightedFedAvg``. ``evaluate`` replies with
    the test error on the client's own test set.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    clients = list(clients)
    if not clients:
        raise ValueError("clients must hold at least one client")
    for i, c in enumerate(clients):
        if not isinstance(c, ClientData):
            raise TypeError(f"clients[{i}] must be a ClientData, got {type(c).__name__}")
    check_int("local_steps", local_steps, minimum=1)
    check_number("lr", lr, minimum=0.0, exclusive=True)
    classes = torch.unique(torch.cat([c.y for c in clients])).tolist()
    feature_fn = feature_fn or (lambda x: x)
    app = ClientApp()

    def client_of(context: Context) -> tuple[int, ClientData]:
        k = int(context.node_config["partition-id"])
        if not 0 <= k < len(clients):
            raise ValueError(f"partition-id {k} has no client data ({len(clients)} clients)")
        return k, clients[k]

    def load(message: Message) -> nn.Module:
        torch.set_num_threads(1)        # one Ray actor per core: two threads each oversubscribe the machine
        local = copy.deepcopy(model)
        local.load_state_dict(message.content["arrays"].to_torch_state_dict())
        return local

    @app.train()
    def train(message: Message, context: Context) -> Message:
        k, data = client_of(context)
        local = load(message)
        last_loss = local_train(local, data.x, data.y, steps=local_steps, lr=lr, loss=loss)
        phi = client_features(feature_fn(data.x), data.y, classes)
        content = RecordDict({
            "arrays": ArrayRecord(local.state_dict()),
            "metrics": MetricRecord({"num-examples": data.num_examples, "train-loss": last_loss}),
            CLIENT_KEY: ConfigRecord({"partition-id": k, "features": phi.tolist()}),
        })
        return Message(content=content, reply_to=message)

    @app.evaluate()
    def evaluate(message: Message, context: Context) -> Message:
        _, data = client_of(context)
        local = load(message)
        metrics = MetricRecord({"num-examples": int(data.y_test.shape[0]),
                                "error": error_rate(local, data.x_test, data.y_test)})
        return Message(content=RecordDict({"metrics": metrics}), reply_to=message)

    return app


@dataclass
class FlowerRun:
    """Client models by partition id after the last round, the mean client test error per round, the
    mixing matrix (weighted FedAvg) and the wall-clock seconds of each round on the server."""

    models: list[nn.Module]
    errors: list[float] = field(default_factory=list)
    weights: Tensor | None = None
    round_seconds: list[float] = field(default_factory=list)


@contextmanager
def _flower_log_level(level: int):
    logger = logging.getLogger("flwr")
    before = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(before)


def run_flower_simulation(
    model: nn.Module,
    clients: Sequence[ClientData],
    *,
    rounds: int,
    local_steps: int,
    lr: float,
    aggregation: str = "weighted",
    loss: Loss | None = None,
    feature_fn: Callable[[Tensor], Tensor] | None = None,
    num_cpus: int | None = None,
    evaluate: bool = True,
    quiet: bool = True,
) -> FlowerRun:
    """``federated_train``'s federation run through Flower's simulation engine (Ray backend).

    ``aggregation`` is ``"weighted"`` (``WeightedFedAvg``) or ``"fedavg"`` (Flower's own ``FedAvg``,
    weighted by ``num-examples``); every client trains each round, and evaluates its model on its test set
    unless ``evaluate=False``. Simulated clients run on Ray actors of one CPU each; ``num_cpus`` caps the
    Ray pool (default: every core).
    """
    from flwr.simulation import run_simulation

    clients = list(clients)
    n = check_int("len(clients)", len(clients), minimum=1)
    rounds = check_int("rounds", rounds, minimum=1)
    if aggregation not in ("weighted", "fedavg"):
        raise ValueError(f"aggregation must be 'weighted' or 'fedavg' in a Flower run, got {aggregation!r}")
    app = make_client_app(model, clients, local_steps=local_steps, lr=lr, loss=loss, feature_fn=feature_fn)
    # fail here, not inside a Ray actor, when the model does not fit the data
    error_rate(copy.deepcopy(model), clients[0].x[:1], clients[0].y[:1])
    if aggregation == "weighted":
        client_features((feature_fn or (lambda x: x))(clients[0].x), clients[0].y,
                        torch.unique(torch.cat([c.y for c in clients])).tolist())
    # every client takes part in every round, as in the in-process loop
    sampling = dict(min_train_nodes=n, min_evaluate_nodes=n if evaluate else 0, min_available_nodes=n,
                    fraction_evaluate=1.0 if evaluate else 0.0)
    level = logging.ERROR if quiet else logging.INFO
    with _flower_log_level(level):
        strategy = WeightedFedAvg(**sampling) if aggregation == "weighted" else FedAvg(**sampling)
    captured: dict = {}
    round_ends: list[float] = []       # the server's clock before round 1 and after each round
    server = ServerApp()

    def clock(server_round: int, arrays: ArrayRecord) -> None:
        round_ends.append(time.perf_counter())

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        captured["result"] = strategy.start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()),
                                            num_rounds=rounds, evaluate_fn=clock)

    backend_config = {"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                      "init_args": {"num_cpus": num_cpus or os.cpu_count() or 1, "log_to_driver": not quiet,
                                    "include_dashboard": False}}
    # quiet: Flower's per-round log and its notice that run_simulation is deprecated in favour of `flwr run`
    with _flower_log_level(level), warnings.catch_warnings():
        if quiet:
            warnings.filterwarnings("ignore", category=FutureWarning, module="ray")
        run_simulation(server_app=server, client_app=app, num_supernodes=n, backend_config=backend_config)
    if "result" not in captured:
        raise RuntimeError("Flower's simulation ended without a result; run with quiet=False to see its log")
    result = captured["result"]
    errors = [float(result.evaluate_metrics_clientapp[r]["error"]) for r in sorted(result.evaluate_metrics_clientapp)]
    if aggregation == "weighted":
        states = strategy.personal_state_dicts()
        missing = sorted(set(range(n)) - set(states))
        if missing:
            raise RuntimeError(f"Flower returned no model for partitions {missing}")
        ordered = [states[k] for k in range(n)]
    else:
        ordered = [result.arrays.to_torch_state_dict()] * n
    models = []
    for state in ordered:
        local = copy.deepcopy(model)
        local.load_state_dict(state)
        models.append(local)
    return FlowerRun(models, errors, strategy.weights if aggregation == "weighted" else None,
                     [b - a for a, b in zip(round_ends, round_ends[1:])])

