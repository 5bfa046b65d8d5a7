"""Explainable kernel clustering with decision trees.

Maximilian Fleissner, Leena Chennuru Vankadara, Debarghya Ghoshdastidar.
"Explaining Kernel Clustering via Decision Trees". ICLR 2024. https://arxiv.org/abs/2402.09881

    from iclr24.kernel_trees import KernelKMeans, KernelIMM, KernelExKMC, KernelExpand, IMM
    tree = KernelExKMC(n_clusters=2, gamma=10.0, max_leaves=6).fit(X)
    print(tree.export_text())         # every cut: an interval on one input coordinate
    tree.price_                       # tree cost / kernel k-means cost
"""

from iclr24.kernel_trees.estimators import IMM, KernelExKMC, KernelExpand, KernelIMM
from iclr24.kernel_trees.features import SurrogateFeatures, build_features
from iclr24.kernel_trees.kmeans import KERNEL_MAX_SAMPLES, KernelKMeans, kernel_kmeans_cost
from iclr24.kernel_trees.tree import ThresholdTree, best_interval_split, imm_tree

__all__ = [
    "IMM",
    "KERNEL_MAX_SAMPLES",
    "KernelExKMC",
    "KernelExpand",
    "KernelIMM",
    "KernelKMeans",
    "SurrogateFeatures",
    "ThresholdTree",
    "best_interval_split",
    "build_features",
    "imm_tree",
    "kernel_kmeans_cost",
]
