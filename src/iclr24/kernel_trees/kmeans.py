"""Kernel k-means as a scikit-learn estimator, and the kernels the package uses."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin, _fit_context
from sklearn.metrics.pairwise import laplacian_kernel, linear_kernel, rbf_kernel
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

__all__ = ["KERNEL_MAX_SAMPLES", "KernelKMeans", "check_n_clusters", "kernel_kmeans_cost", "pairwise_kernel"]

#: Kernel matrices are dense n x n float64: 10 000 samples take 0.8 GB, 20 000 take 3.2 GB.
#: Fitting refuses more samples than this.
KERNEL_MAX_SAMPLES = 20_000

_KERNELS = {"rbf": rbf_kernel, "laplace": laplacian_kernel, "linear": linear_kernel}


def pairwise_kernel(X, Y, kernel, gamma):
    """The kernel matrix ``k(X_i, Y_j)``.

    ``"rbf"`` is ``exp(-gamma ||x - y||_2^2)``, ``"laplace"`` is ``exp(-gamma ||x - y||_1)``
    (both products of one-dimensional kernels, which the surrogate features need),
    ``"linear"`` is ``x . y``; a callable is called as ``kernel(X, Y)``.
    """
    if callable(kernel):
        K = np.asarray(kernel(X, Y), dtype=float)
        if K.shape != (len(X), len(Y)):
            raise ValueError(f"kernel callable must return an array of shape {(len(X), len(Y))}, got {K.shape}")
        if not np.isfinite(K).all():
            raise ValueError("kernel callable returned non-finite values")
        return K
    if kernel == "linear":
        return linear_kernel(X, Y)
    return _KERNELS[kernel](X, Y, gamma=gamma)


def resolve_gamma(gamma, n_features: int) -> float:
    """scikit-learn's convention: ``gamma=None`` means ``1 / n_features``."""
    return 1.0 / n_features if gamma is None else float(gamma)


def check_kernel_size(n_samples: int) -> None:
    if n_samples > KERNEL_MAX_SAMPLES:
        raise ValueError(
            f"kernel methods here build an n x n kernel matrix; n_samples={n_samples} exceeds "
            f"KERNEL_MAX_SAMPLES={KERNEL_MAX_SAMPLES} ({8 * n_samples**2 / 1e9:.1f} GB); subsample the data"
        )


def check_n_clusters(n_clusters: int, X: np.ndarray) -> None:
    """Refuse more clusters than samples (scikit-learn's wording)."""
    if n_clusters > X.shape[0]:
        raise ValueError(f"n_samples={X.shape[0]} should be >= n_clusters={n_clusters}.")


def kernel_kmeans_cost(K: np.ndarray, labels: np.ndarray) -> float:
    """Kernel k-means cost of a partition: ``sum_C [sum_{i in C} K_ii - (1/|C|) sum_{i,j in C} K_ij]``.

    For a linear kernel this is the k-means cost (squared distances to the cluster means).
    """
    K, labels = np.asarray(K), np.asarray(labels)
    if K.ndim != 2 or K.shape[0] != K.shape[1] or K.shape[0] == 0:
        raise ValueError(f"K must be a non-empty square (n, n) kernel matrix, got shape {K.shape}")
    if labels.shape != (K.shape[0],):
        raise ValueError(f"labels must hold one cluster label per row of K ({K.shape[0]},), got shape {labels.shape}")
    if not np.isfinite(K).all():
        raise ValueError("K must be finite, found NaN/inf entries")
    cost = float(np.trace(K))
    for c in np.unique(labels):
        members = labels == c
        cost -= K[np.ix_(members, members)].sum() / members.sum()
    return cost


def _distances_to_means(K_xc: np.ndarray, onehot: np.ndarray, within: np.ndarray) -> np.ndarray:
    """Squared feature-space distances to each cluster mean, without the ``k(x, x)`` term.

    ``K_xc`` is ``(n, m)`` kernel values against the m clustered points, ``onehot`` ``(m, k)``.
    """
    counts = onehot.sum(0)
    return -2.0 * (K_xc @ onehot) / counts + within


def _within(K: np.ndarray, onehot: np.ndarray) -> np.ndarray:
    """``(1/|C|^2) sum_{i,j in C} K_ij`` per cluster."""
    counts = onehot.sum(0)
    return np.einsum("ik,ik->k", onehot, K @ onehot) / counts**2


def _kmeans_plus_plus(K: np.ndarray, n_clusters: int, rng: np.random.RandomState) -> np.ndarray:
    """k-means++ seeding in feature space (D^2 sampling with ``d(i,j)^2 = K_ii + K_jj - 2 K_ij``)."""
    n = K.shape[0]
    diag = np.diag(K)
    centres = [rng.randint(n)]
    closest = diag + diag[centres[0]] - 2 * K[:, centres[0]]
    for _ in range(1, n_clusters):
        weights = np.clip(closest, 0, None)
        total = weights.sum()
        nxt = rng.choice(n, p=weights / total) if total > 0 else rng.randint(n)
        centres.append(nxt)
        closest = np.minimum(closest, diag + diag[nxt] - 2 * K[:, nxt])
    dist = diag[None, centres] + diag[:, None] - 2 * K[:, centres]
    labels = dist.argmin(1)
    labels[centres] = np.arange(n_clusters)  # every cluster starts non-empty
    return labels


def _lloyd(K: np.ndarray, labels: np.ndarray, n_clusters: int, max_iter: int) -> tuple[np.ndarray, float, int]:
    """Lloyd iterations on the kernel matrix from ``labels``; returns labels, cost, iterations."""
    diag = np.diag(K)
    eye = np.eye(n_clusters)
    for iteration in range(1, max_iter + 1):
        onehot = eye[labels]
        dist = _distances_to_means(K, onehot, _within(K, onehot))
        new = dist.argmin(1)
        empty = np.setdiff1d(np.arange(n_clusters), new)
        if empty.size:  # give each empty cluster the point farthest from its mean
            far = np.argsort(-(dist[np.arange(len(new)), new] + diag))
            new[far[: empty.size]] = empty
        if np.array_equal(new, labels):
            break
        labels = new
    return labels, kernel_kmeans_cost(K, labels), iteration


def _hartigan(K: np.ndarray, labels: np.ndarray, n_clusters: int, max_sweeps: int = 100) -> np.ndarray:
    """Hartigan's single-point moves from a Lloyd solution: move a point when that lowers the cost.

    Moving point i from cluster A to B changes the cost by
    ``|B| / (|B| + 1) d(i, mu_B)^2 - |A| / (|A| - 1) d(i, mu_A)^2``: unlike Lloyd's
    reassignment, this counts the move's effect on both means, so it leaves Lloyd's
    fixed points. ``S[i, c] = sum_{j in c} K_ij`` and ``W[c] = sum_{j,l in c} K_jl`` are
    updated in O(n) per move.
    """
    labels = labels.copy()
    diag = np.diag(K)
    onehot = np.eye(n_clusters)[labels]
    S = K @ onehot
    W = np.einsum("ic,ic->c", onehot, S)
    counts = onehot.sum(0)
    for _ in range(max_sweeps):
        moved = False
        for i in range(len(labels)):
            a = labels[i]
            if counts[a] <= 1:
                continue
            dist = diag[i] - 2 * S[i] / counts + W / counts**2
            added = counts / (counts + 1) * dist
            added[a] = np.inf
            b = int(added.argmin())
            if added[b] < counts[a] / (counts[a] - 1) * dist[a] - 1e-12:
                W[a] -= 2 * S[i, a] - K[i, i]
                S[:, a] -= K[:, i]
                counts[a] -= 1
                W[b] += 2 * S[i, b] + K[i, i]
                S[:, b] += K[:, i]
                counts[b] += 1
                labels[i] = b
                moved = True
        if not moved:
            break
    return labels


class KernelKMeans(ClusterMixin, BaseEstimator):
    """Kernel k-means: Lloyd's algorithm in the feature space of a kernel.

    Minimises ``sum_C sum_{i in C} ||phi(x_i) - mu_C||^2`` using only the kernel matrix,
    so clusters can be non-convex in input space (rings, moons). scikit-learn has no
    kernel k-means (scikit-learn issue #5373); this one follows its estimator API.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters.
    kernel : {"rbf", "laplace", "linear"} or callable, default="rbf"
        ``"rbf"``: ``exp(-gamma ||x-y||^2)``; ``"laplace"``: ``exp(-gamma ||x-y||_1)``;
        ``"linear"``: ``x . y`` (plain k-means). A callable ``kernel(X, Y)`` returns the matrix.
    gamma : float, default=None
        Kernel width for rbf/laplace; None means ``1 / n_features``.
    init : {"k-means++", "random"}, default="k-means++"
        Seeding: k-means++ in feature space, or uniformly random labels.
    algorithm : {"hartigan", "lloyd"}, default="hartigan"
        ``"lloyd"``: Lloyd iterations. ``"hartigan"``: Lloyd, then Hartigan's single-point
        moves, which escape many of Lloyd's local optima (on tiny data sets it reached the
        global optimum in 36 of 40 cases where Lloyd alone reached 17; see
        benchmarks/kernel_trees.py) at an O(n^2 k) cost per sweep.
    n_init : int, default=10
        Restarts; the lowest-cost result is kept.
    max_iter : int, default=300
        Lloyd iterations per restart.
    random_state : int, RandomState instance or None, default=None
        Seeds the restarts.

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,)
        Cluster of each training point.
    cost_ : float
        Kernel k-means cost of ``labels_`` (the inertia in feature space).
    n_iter_ : int
        Lloyd iterations of the kept restart (before any Hartigan moves).
    X_fit_ : ndarray of shape (n_samples, n_features)
        Training data, needed to predict (kernel distances to the cluster means).

    Notes
    -----
    The kernel matrix is dense: memory is ``8 n^2`` bytes (0.8 GB at n = 10 000); fitting
    refuses ``n > KERNEL_MAX_SAMPLES`` (20 000). Each Lloyd step costs ``O(n^2 k)``.

    References
    ----------
    Dhillon, Guan, Kulis. Kernel k-means, spectral clustering and normalized cuts. KDD 2004.

    Examples
    --------
    >>> from sklearn.datasets import make_circles
    >>> X, y = make_circles(200, factor=0.4, noise=0.04, random_state=0)
    >>> km = KernelKMeans(n_clusters=2, gamma=5.0, random_state=0).fit(X)
    >>> from sklearn.metrics import adjusted_rand_score
    >>> round(adjusted_rand_score(y, km.labels_), 2)
    1.0
    """

    _parameter_constraints: dict = {
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "kernel": [StrOptions({"rbf", "laplace", "linear"}), callable],
        "gamma": [Interval(Real, 0, None, closed="neither"), None],
        "init": [StrOptions({"k-means++", "random"})],
        "algorithm": [StrOptions({"hartigan", "lloyd"})],
        "n_init": [Interval(Integral, 1, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(self, n_clusters=8, *, kernel="rbf", gamma=None, init="k-means++", algorithm="hartigan", n_init=10,
                 max_iter=300, random_state=None):
        self.n_clusters = n_clusters
        self.kernel = kernel
        self.gamma = gamma
        self.init = init
        self.algorithm = algorithm
        self.n_init = n_init
        self.max_iter = max_iter
        self.random_state = random_state

    def _check_params_vs_input(self, X):
        check_n_clusters(self.n_clusters, X)
        check_kernel_size(X.shape[0])

    def _kernel(self, X, Y):
        return pairwise_kernel(X, Y, self.kernel, resolve_gamma(self.gamma, self.n_features_in_))

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Cluster ``X`` (n_samples, n_features); returns self."""
        X = validate_data(self, X, dtype=[np.float64, np.float32])
        self._check_params_vs_input(X)
        K = self._kernel(X, X)
        rng = check_random_state(self.random_state)
        best = None
        for _ in range(self.n_init):
            if self.init == "k-means++":
                start = _kmeans_plus_plus(K, self.n_clusters, rng)
            else:
                start = rng.permutation(np.arange(X.shape[0]) % self.n_clusters)
            labels, cost, n_iter = _lloyd(K, start, self.n_clusters, self.max_iter)
            if self.algorithm == "hartigan":
                labels = _hartigan(K, labels, self.n_clusters)
                cost = kernel_kmeans_cost(K, labels)
            if best is None or cost < best[1] - 1e-12:
                best = (labels, cost, n_iter)
        self.labels_, self.cost_, self.n_iter_ = best
        self.X_fit_ = X
        self._within = _within(K, np.eye(self.n_clusters)[self.labels_])
        return self

    def predict(self, X):
        """Nearest cluster mean in feature space for each row of ``X``."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        onehot = np.eye(self.n_clusters)[self.labels_]
        return _distances_to_means(self._kernel(X, self.X_fit_), onehot, self._within).argmin(1)
