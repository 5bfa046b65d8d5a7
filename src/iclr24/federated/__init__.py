"""Federated learning through feature learning: FedAvg, weighted FedAvg, and the paper's data model.

Wei Huang, Ye Shi, Zhongyi Cai, Taiji Suzuki. "Understanding Convergence and Generalization in Federated
Learning through Feature Learning Theory". ICLR 2024. https://openreview.net/forum?id=EcetCr4trp

    from iclr24.federated import signal_noise_clients, TwoLayerCNN, federated_train
    data = signal_noise_clients(10, 8, d=1000, signal_norm=3.0, heterogeneity="opposite")
    run = federated_train(TwoLayerCNN(1000, 10), data.clients, rounds=60, local_steps=5, lr=0.5,
                          aggregation="weighted", feature_fn=lambda x: x[:, 0])   # or "fedavg", "local"

    from iclr24.federated import WeightedFedAvg, make_client_app, run_flower_simulation   # extra: fl
    # WeightedFedAvg is a flwr.serverapp.strategy.FedAvg that sends each client its own mixed model

``federated_train`` works with any torch model and any ``ClientData`` (``digits_clients`` splits
scikit-learn's digits by a Dirichlet label skew). The Flower names need ``pip install 'iclr24[fl]'`` and
are imported when first used.
"""

from iclr24.federated.algorithms import (
    AGGREGATIONS,
    FederatedRun,
    aggregation_weights,
    client_features,
    error_rate,
    federated_train,
    local_train,
    mix_state_dicts,
    sample_size_weights,
    similarity_weights,
)
from iclr24.federated.data import (
    HETEROGENEITY,
    ClientData,
    FederatedData,
    client_signals,
    digits_clients,
    dirichlet_partition,
    signal_noise_clients,
)
from iclr24.federated.model import TwoLayerCNN, noise_memorisation, signal_learning

_FLOWER = ("FlowerRun", "WeightedFedAvg", "make_client_app", "run_flower_simulation")

__all__ = ["AGGREGATIONS", "HETEROGENEITY", "ClientData", "FederatedData", "FederatedRun", "TwoLayerCNN",
           "aggregation_weights", "client_features", "client_signals", "digits_clients", "dirichlet_partition",
           "error_rate", "federated_train", "local_train", "mix_state_dicts", "noise_memorisation",
           "sample_size_weights", "signal_learning", "signal_noise_clients", "similarity_weights", *_FLOWER]


def __getattr__(name: str):
    if name in _FLOWER:
        from iclr24.federated import flower

        return getattr(flower, name)
    raise AttributeError(f"module 'iclr24.federated' has no attribute {name!r}")
