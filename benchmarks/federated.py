"""Seconds per federated round: the in-process loop vs Flower's simulation engine (Ray backend).

The same federation both ways: the paper's two-layer CNN (d=1000, m=10), n=8 samples a client, E=5 local GD
steps, weighted FedAvg, no evaluation. Flower's seconds per round are the median of the rounds its server
timed (``FlowerRun.round_seconds``); its start-up (Ray, the SuperLink, the actors) is the rest of the call's
wall time. One torch thread per process; Flower gets ``--cpus`` Ray workers. A Flower simulation spreads
clients over actors, so it wins where local training is heavy and many cores serve it; these clients are tiny
and the machine has two.

    python benchmarks/federated.py
    python benchmarks/federated.py --clients 10 100 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from iclr24.federated import TwoLayerCNN, federated_train, run_flower_simulation, signal_noise_clients


def _signal_patch(x):
    return x[:, 0]


def seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="in-process repetitions (median)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rounds = args.rounds
    print(f"{'clients':>8} {'in-process s/round':>19} {'Flower s/round':>15} {'Flower start-up s':>18} {'ratio':>7}")
    for k in args.clients:
        data = signal_noise_clients(k, 8, n_test=10, d=1000, seed=0)
        model = TwoLayerCNN(1000, 10, generator=torch.Generator().manual_seed(0))
        kwargs = dict(local_steps=5, lr=0.5, aggregation="weighted", feature_fn=_signal_patch)
        ours = statistics.median(seconds(lambda: federated_train(model, data.clients, rounds=rounds, **kwargs))
                                 / rounds for _ in range(args.repeats))
        start = time.perf_counter()
        run = run_flower_simulation(model, data.clients, rounds=rounds, num_cpus=args.cpus, evaluate=False, **kwargs)
        total = time.perf_counter() - start
        per_round = statistics.median(run.round_seconds)
        start_up = total - sum(run.round_seconds)
        print(f"{k:>8} {ours:>19.4f} {per_round:>15.3f} {start_up:>18.1f} {per_round / ours:>6.1f}x")


if __name__ == "__main__":
    main()
