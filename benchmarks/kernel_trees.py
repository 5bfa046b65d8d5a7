"""KernelKMeans and IMM side by side with the implementations a user would pick instead.

1. Our KernelKMeans vs tslearn's KernelKMeans (the public implementation), same data, kernel and
   restarts: ratio of kernel k-means costs (< 1: ours lower) and of times, interleaved.
2. Our KernelKMeans vs brute force: on tiny data sets every partition is enumerated; how
   often we reach the global optimum, and the mean cost ratio.
3. Our IMM vs the exkmc package's IMM (same k-means, price of explainability), if exkmc imports.

    python benchmarks/kernel_trees.py
"""

from __future__ import annotations

import itertools
import statistics

import numpy as np

from iclr24.core import interleaved_times
from iclr24.kernel_trees import IMM, KernelKMeans, kernel_kmeans_cost
from iclr24.kernel_trees.data import load_dataset
from iclr24.kernel_trees.kmeans import pairwise_kernel

GAMMA = {"circles": 5.0, "moons": 10.0, "iris": 0.64, "cancer": 1.9e-6}


def versus_tslearn() -> None:
    try:
        from tslearn.clustering import KernelKMeans as TsKernelKMeans
    except ImportError:
        print("tslearn is not installed (pip install tslearn): skipping the comparison with it")
        return
    print("KernelKMeans vs tslearn.clustering.KernelKMeans (rbf, n_init=10), medians of 3 interleaved fits")
    print(f"{'data':>8} {'algorithm':>10} {'cost ours/tslearn':>18} {'time ours/tslearn':>18}")
    for name, gamma in GAMMA.items():
        X, _, k = load_dataset(name)
        K = pairwise_kernel(X, X, "rbf", gamma)
        for algorithm in ("lloyd", "hartigan"):
            ours = KernelKMeans(k, gamma=gamma, algorithm=algorithm, n_init=10, random_state=0)
            theirs = TsKernelKMeans(k, kernel="rbf", kernel_params={"gamma": gamma}, n_init=10, random_state=0)
            times = interleaved_times({"ours": lambda: ours.fit(X), "tslearn": lambda: theirs.fit(X)}, repeats=3)
            cost_ratio = kernel_kmeans_cost(K, ours.labels_) / kernel_kmeans_cost(K, theirs.labels_)
            time_ratio = statistics.median(times["ours"]) / statistics.median(times["tslearn"])
            print(f"{name:>8} {algorithm:>10} {cost_ratio:>18.4f} {time_ratio:>18.3f}")


def versus_brute_force(trials: int = 20) -> None:
    print(f"\nKernelKMeans vs brute force on tiny data ({trials} random sets each, rbf gamma=1)")
    print(f"{'n, k':>8} {'algorithm':>10} {'global optimum reached':>24} {'mean cost ratio':>16}")
    for n, k in ((12, 2), (9, 3)):
        for algorithm in ("lloyd", "hartigan"):
            hits, ratios = 0, []
            for seed in range(trials):
                X = np.random.RandomState(seed).randn(n, 2)
                K = pairwise_kernel(X, X, "rbf", 1.0)
                best = min(kernel_kmeans_cost(K, np.array((0,) + p))
                           for p in itertools.product(range(k), repeat=n - 1) if len(set((0,) + p)) == k)
                cost = KernelKMeans(k, gamma=1.0, algorithm=algorithm, n_init=10, random_state=seed).fit(X).cost_
                hits += cost <= best + 1e-9
                ratios.append(cost / best)
            print(f"{f'{n}, {k}':>8} {algorithm:>10} {f'{hits}/{trials}':>24} {statistics.mean(ratios):>16.4f}")


def versus_exkmc() -> None:
    try:
        from ExKMC.Tree import Tree
    except ImportError:
        print("\nexkmc is not importable (its 0.0.3 release does not build on Python 3.11): skipping IMM vs exkmc")
        return
    from sklearn.cluster import KMeans

    print("\nIMM vs exkmc's IMM (same k-means): price of explainability")
    for name in ("iris", "cancer"):
        X, _, k = load_dataset(name)
        km = KMeans(k, n_init=10, random_state=0).fit(X)
        ours = IMM(k, kmeans=km).fit(X).price_
        theirs = Tree(k=k)
        theirs.fit(X, km)
        print(f"{name:>8} ours {ours:.4f}  exkmc {theirs.score(X) / -km.score(X):.4f}")


if __name__ == "__main__":
    versus_tslearn()
    versus_brute_force()
    versus_exkmc()
