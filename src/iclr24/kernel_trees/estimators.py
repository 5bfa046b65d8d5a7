"""Explainable (kernel) clustering estimators: IMM, Kernel IMM, Kernel ExKMC, Kernel Expand.

Fleissner, Vankadara, Ghoshdastidar. Explaining Kernel Clustering via Decision Trees.
ICLR 2024. https://arxiv.org/abs/2402.09881
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin, _fit_context
from sklearn.cluster import KMeans
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from iclr24.kernel_trees.features import build_features
from iclr24.kernel_trees.kmeans import (
    KernelKMeans,
    check_kernel_size,
    check_n_clusters,
    kernel_kmeans_cost,
    pairwise_kernel,
    resolve_gamma,
)
from iclr24.kernel_trees.tree import ThresholdTree, best_interval_split, imm_tree

__all__ = ["IMM", "KernelExKMC", "KernelExpand", "KernelIMM"]

# Leaves with at most this many points are not split further (as in the paper's code).
_MIN_LEAF_TO_SPLIT = 4


class _TreeClusterMixin:
    """What every tree estimator shares once ``tree_`` is fitted."""

    def predict(self, X):
        """Cluster of each row of ``X``, by the tree's interval tests."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        return self.tree_.predict(X)

    def export_text(self, feature_names=None, decimals: int = 3) -> str:
        """The fitted tree as indented text (interval tests on input coordinates)."""
        check_is_fitted(self)
        return self.tree_.export_text(feature_names, decimals)

    def plot_partition(self, X, y=None, ax=None, resolution: int = 300, title: str | None = None):
        """Draw the tree's partition of a 2-D input space, with ``X`` coloured by ``y`` (default: predictions)."""
        import matplotlib.pyplot as plt

        check_is_fitted(self)
        X = np.asarray(X, dtype=float)
        if X.shape[1] != 2:
            raise ValueError(f"plot_partition draws 2-D data, got X with {X.shape[1]} features")
        ax = ax or plt.subplots(figsize=(4, 4))[1]
        pad = 0.05 * (X.max(0) - X.min(0))
        g0, g1 = np.meshgrid(*(np.linspace(X[:, i].min() - pad[i], X[:, i].max() + pad[i], resolution)
                               for i in range(2)))
        grid = self.tree_.predict(np.c_[g0.ravel(), g1.ravel()]).reshape(g0.shape)
        ax.contourf(g0, g1, grid, levels=np.arange(grid.max() + 2) - 0.5, cmap="tab10", alpha=0.25,
                    vmin=0, vmax=9)
        colours = self.predict(X) if y is None else y
        ax.scatter(X[:, 0], X[:, 1], c=colours, cmap="tab10", vmin=0, vmax=9, s=8)
        ax.set_title(title or f"{type(self).__name__} ({self.tree_.n_leaves} leaves)")
        ax.set_xticks([])
        ax.set_yticks([])
        return ax


class IMM(_TreeClusterMixin, ClusterMixin, BaseEstimator):
    """Iterative Mistake Minimization: a k-leaf threshold tree that explains k-means.

    The axis-aligned baseline (Dasgupta et al., ICML 2020): k-means, then a tree whose
    every cut is ``x_i > t``, chosen greedily to separate the fewest points from their
    k-means centre.

    Parameters
    ----------
    n_clusters : int, default=8
    kmeans : fitted sklearn.cluster.KMeans, default=None
        Explain this clustering; by default a KMeans (n_init=10) is fitted.
    random_state : int, RandomState instance or None, default=None

    Attributes
    ----------
    kmeans_ : KMeans
    tree_ : ThresholdTree
    labels_ : ndarray of shape (n_samples,)
        The tree's clusters of the training points.
    mistakes_ : int
    cost_ : float
        k-means cost of the tree's partition.
    price_ : float
        ``cost_`` / k-means cost (the price of explainability, >= 1 at a k-means optimum).

    Notes
    -----
    The centres are the means of the k-means clusters (equal to k-means' centres at
    convergence), so IMM is exactly Kernel IMM with a linear kernel and raw features.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0., 0.], [0., 1.], [5., 0.], [5., 1.]])
    >>> print(IMM(n_clusters=2, random_state=0).fit(X).export_text(decimals=1), end="")
    |--- x0 in (2.5, inf)
    |   |--- cluster 0
    |--- x0 not in (2.5, inf)
    |   |--- cluster 1
    """

    _parameter_constraints: dict = {
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "kmeans": [KMeans, None],
        "random_state": ["random_state"],
    }

    def __init__(self, n_clusters=8, *, kmeans=None, random_state=None):
        self.n_clusters = n_clusters
        self.kmeans = kmeans
        self.random_state = random_state

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Fit k-means (unless given) and its IMM tree on ``X``; returns self."""
        X = validate_data(self, X, dtype=[np.float64, np.float32])
        check_n_clusters(self.n_clusters, X)
        if self.kmeans is None:
            self.kmeans_ = KMeans(self.n_clusters, n_init=10, random_state=self.random_state).fit(X)
        else:
            check_is_fitted(self.kmeans)
            _check_given_clustering(self.kmeans, X, self.n_clusters, "kmeans")
            self.kmeans_ = self.kmeans
        labels = self.kmeans_.labels_
        features = build_features("raw", X, "linear", 1.0)
        self.tree_, self.mistakes_ = imm_tree(X, labels, features)
        self.labels_ = self.tree_.predict(X)
        K = X @ X.T
        self.cost_ = kernel_kmeans_cost(K, self.labels_)
        self.price_ = float(self.cost_ / kernel_kmeans_cost(K, labels))
        return self


class KernelIMM(_TreeClusterMixin, ClusterMixin, BaseEstimator):
    """Kernel IMM: a k-leaf tree explaining kernel k-means, with cuts that are intervals in input space.

    Kernel k-means clusters, IMM on surrogate features whose every feature reads one input
    coordinate; each cut ``phi_f > t`` is then an interval (or union of intervals) on one
    raw coordinate, which is what the tree reports and predicts with.

    Parameters
    ----------
    n_clusters : int, default=8
    kernel : {"rbf", "laplace", "linear"} or callable, default="rbf"
    gamma : float, default=None
        Kernel width; None means ``1 / n_features``.
    features : {"kernel_matrix", "taylor", "raw"}, default="kernel_matrix"
        ``kernel_matrix`` (rbf/laplace): ``k_1(x_i, X_{m,i})`` for every coordinate i and
        training value; ``taylor`` (rbf): the Gaussian's Taylor features up to degree 4;
        ``raw``: the coordinates (with a linear kernel this is IMM).
    kernel_kmeans : fitted KernelKMeans, default=None
        Explain this clustering; by default one is fitted (n_init=10).
    random_state : int, RandomState instance or None, default=None

    Attributes
    ----------
    kernel_kmeans_ : KernelKMeans
    tree_ : ThresholdTree
    labels_ : ndarray of shape (n_samples,)
    mistakes_ : int
        Points separated from their centre while building the IMM tree.
    features_ : SurrogateFeatures
        The surrogate map the IMM cuts were chosen on.
    cost_ : float
        Kernel k-means cost of the tree's partition (leaves with one label merged).
    price_ : float
        ``cost_`` / the kernel k-means cost: the price of explainability.

    Notes
    -----
    Memory: the n x n kernel matrix, and ``kernel_matrix`` features are ``n x (n d)``.
    Fitting refuses ``n > KERNEL_MAX_SAMPLES`` (20 000).

    Examples
    --------
    >>> from sklearn.datasets import make_circles
    >>> X, _ = make_circles(200, factor=0.4, noise=0.04, random_state=0)
    >>> tree = KernelIMM(n_clusters=2, gamma=5.0, random_state=0).fit(X)
    >>> tree.tree_.n_leaves, tree.price_ >= 1.0
    (2, True)
    """

    _parameter_constraints: dict = {
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "kernel": [StrOptions({"rbf", "laplace", "linear"}), callable],
        "gamma": [Interval(Real, 0, None, closed="neither"), None],
        "features": [StrOptions({"kernel_matrix", "taylor", "raw"})],
        "kernel_kmeans": [KernelKMeans, None],
        "random_state": ["random_state"],
    }

    def __init__(self, n_clusters=8, *, kernel="rbf", gamma=None, features="kernel_matrix", kernel_kmeans=None,
                 random_state=None):
        self.n_clusters = n_clusters
        self.kernel = kernel
        self.gamma = gamma
        self.features = features
        self.kernel_kmeans = kernel_kmeans
        self.random_state = random_state

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Cluster ``X`` with kernel k-means (unless given) and fit the tree; returns self."""
        X = validate_data(self, X, dtype=[np.float64, np.float32])
        check_n_clusters(self.n_clusters, X)
        check_kernel_size(X.shape[0])
        if self.kernel_kmeans is None:
            self.kernel_kmeans_ = KernelKMeans(self.n_clusters, kernel=self.kernel, gamma=self.gamma,
                                               random_state=self.random_state).fit(X)
        else:
            check_is_fitted(self.kernel_kmeans)
            _check_given_clustering(self.kernel_kmeans, X, self.n_clusters, "kernel_kmeans")
            _check_same_kernel(self.kernel_kmeans, self.kernel, self.gamma, X.shape[1])
            self.kernel_kmeans_ = self.kernel_kmeans
        gamma = resolve_gamma(self.gamma, X.shape[1])
        K = pairwise_kernel(X, X, self.kernel, gamma)
        labels = self.kernel_kmeans_.labels_
        features = build_features(self.features, X, self.kernel, gamma)
        self.features_ = features
        self.tree_, self.mistakes_ = imm_tree(features.transform(X), labels, features)
        self._refine(X, K, labels)
        self.labels_ = self.tree_.predict(X)
        self.cost_ = kernel_kmeans_cost(K, self.labels_)
        self.price_ = float(self.cost_ / kernel_kmeans_cost(K, labels))
        return self

    def _refine(self, X, K, labels) -> None:
        """Kernel IMM stops at k leaves; ExKMC and Expand add more."""


class _RefinedKernelTree(KernelIMM):
    _parameter_constraints: dict = {
        **KernelIMM._parameter_constraints,
        "max_leaves": [Interval(Integral, 1, None, closed="left"), None],
    }

    def __init__(self, n_clusters=8, *, kernel="rbf", gamma=None, features="kernel_matrix", kernel_kmeans=None,
                 max_leaves=None, random_state=None):
        super().__init__(n_clusters, kernel=kernel, gamma=gamma, features=features, kernel_kmeans=kernel_kmeans,
                         random_state=random_state)
        self.max_leaves = max_leaves

    def _point_costs(self, K, labels) -> np.ndarray:
        raise NotImplementedError

    def _refine(self, X, K, labels) -> None:
        max_leaves = 2 * self.n_clusters if self.max_leaves is None else self.max_leaves
        if max_leaves < self.n_clusters:
            raise ValueError(f"max_leaves={max_leaves} must be >= n_clusters={self.n_clusters}")
        w = self._point_costs(K, labels)  # (n, k): cost of assigning point i to cluster c
        tree: ThresholdTree = self.tree_
        leaf_of = tree.apply(X)
        for leaf in tree.leaves:  # every leaf takes its cheapest cluster
            tree.nodes[leaf].label = int(w[leaf_of == leaf].sum(0).argmin()) if (leaf_of == leaf).any() else \
                tree.nodes[leaf].label
        candidates = {}
        while tree.n_leaves < max_leaves:
            for leaf in tree.leaves:
                if leaf not in candidates:
                    rows = np.flatnonzero(leaf_of == leaf)
                    split = best_interval_split(X[rows], w[rows]) if len(rows) >= _MIN_LEAF_TO_SPLIT else None
                    candidates[leaf] = split
            leaf = max((lf for lf, s in candidates.items() if s is not None), key=lambda lf: candidates[lf][0],
                       default=None)
            if leaf is None or candidates[leaf][0] <= 1e-12:
                break  # no cut lowers the cost any more
            _, coordinate, interval, inside_label, outside_label = candidates.pop(leaf)
            tree.split_leaf(leaf, coordinate, [interval], inside_label, outside_label)
            leaf_of = tree.apply(X)


class KernelExKMC(_RefinedKernelTree):
    """Kernel ExKMC: Kernel IMM refined by interval cuts that most lower the kernel k-means cost.

    Starting from the k leaves of Kernel IMM, repeatedly split the leaf (of at least 4
    points) whose best interval cut ``lo < x_i < hi`` on one raw coordinate most lowers the
    kernel cost, until ``max_leaves``; each leaf takes the kernel k-means cluster it is
    cheapest to assign to: ``cost(S -> C) = sum_{i in S} K_ii - (2/|C|) sum_{i in S, j in C} K_ij
    + |S| mean(K_CC)``.

    Parameters are those of :class:`KernelIMM`, plus ``max_leaves`` (default ``2 * n_clusters``).

    Notes
    -----
    This is the paper's Kernel ExKMC: cuts chosen by kernel cost. The authors' released
    notebook chooses the cuts by mistakes (it calls the Expand split) and uses the kernel
    cost only to label leaves; that variant is :class:`KernelExpand` here, with leaves
    labelled by majority.

    Examples
    --------
    >>> from sklearn.datasets import make_moons
    >>> X, _ = make_moons(200, noise=0.05, random_state=0)
    >>> tree = KernelExKMC(n_clusters=2, gamma=10.0, max_leaves=6, random_state=0).fit(X)
    >>> tree.tree_.n_leaves <= 6
    True
    """

    def _point_costs(self, K, labels):
        clusters = np.arange(self.n_clusters)
        onehot = (labels[:, None] == clusters[None, :]).astype(float)
        counts = onehot.sum(0)
        mean_cross = K @ onehot / counts  # mean_{j in C} K_ij
        mean_within = np.einsum("ik,ik->k", onehot, K @ onehot) / counts**2  # mean(K_CC)
        return np.diag(K)[:, None] - 2 * mean_cross + mean_within[None, :]


class KernelExpand(_RefinedKernelTree):
    """Kernel Expand: Kernel IMM refined by interval cuts that most lower the mistakes.

    Like :class:`KernelExKMC`, but a leaf's cost is the number of its points whose kernel
    k-means cluster differs from the leaf's majority cluster.

    Parameters are those of :class:`KernelIMM`, plus ``max_leaves`` (default ``2 * n_clusters``).
    """

    def _point_costs(self, K, labels):
        return 1.0 - (labels[:, None] == np.arange(self.n_clusters)[None, :]).astype(float)


def _check_given_clustering(model, X: np.ndarray, n_clusters: int, name: str) -> None:
    if len(model.labels_) != X.shape[0]:
        raise ValueError(f"{name} was fitted on {len(model.labels_)} samples; fit it on the same X "
                         f"({X.shape[0]} samples)")
    if model.n_clusters != n_clusters:
        raise ValueError(f"{name}.n_clusters={model.n_clusters} differs from n_clusters={n_clusters}")


def _check_same_kernel(model, kernel, gamma, n_features: int) -> None:
    """The tree's features and costs use the tree's kernel: a clustering made with another would be
    explained in the wrong feature space."""
    if model.kernel != kernel:
        raise ValueError(f"kernel_kmeans was fitted with kernel={model.kernel!r}, this tree uses kernel={kernel!r}; "
                         f"give both the same kernel")
    ours, theirs = resolve_gamma(gamma, n_features), resolve_gamma(model.gamma, n_features)
    if not np.isclose(ours, theirs, rtol=1e-12, atol=0):
        raise ValueError(f"kernel_kmeans was fitted with gamma={theirs:g}, this tree uses gamma={ours:g}; give both "
                         f"the same gamma")
