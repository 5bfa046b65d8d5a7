"""Surrogate features for explainable kernel clustering.

Each feature reads one input coordinate, so a threshold cut on a feature is a set of
intervals on that coordinate: the tree is explained in input space (the paper's
"generalised threshold trees"). Three maps (Fleissner et al., Sec. 4):

- ``raw``: the coordinates themselves (plain IMM).
- ``kernel_matrix``: for product kernels (Gaussian, Laplace) ``phi_{i,m}(x) = k_1(x_i, X_{m,i})``,
  one feature per coordinate and training value; a cut ``phi > t`` is an interval around
  ``X_{m,i}``.
- ``taylor``: for the Gaussian kernel ``phi_{i,j}(x) = sqrt((2g)^j / j!) u^j exp(-g u^2)`` with
  ``u = x_i - c_i``, ``j = 0..degree``; a cut is a union of at most two intervals. The centre ``c``
  (the training mean) changes nothing in the kernel, which depends on ``x - y`` only, but keeps the
  truncated expansion accurate: around 0, data at ``x = 100`` would give features that underflow
  to 0. Summed over all degrees, ``sum_j phi_{i,j}(x) phi_{i,j}(y) = exp(-g (x_i - y_i)^2)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq
from scipy.special import gammaln

__all__ = ["SurrogateFeatures", "build_features"]

Interval = tuple[float, float]


@dataclass(frozen=True)
class SurrogateFeatures:
    """A feature map whose every feature depends on one input coordinate.

    Attributes
    ----------
    kind : {"raw", "kernel_matrix", "taylor"}
    kernel : {"rbf", "laplace"} or None
        The one-dimensional kernel of ``kernel_matrix`` features.
    gamma : float
    coordinates : ndarray of shape (n_features_out,)
        The input coordinate each feature reads.
    params : ndarray of shape (n_features_out,)
        The anchor value (``kernel_matrix``) or the degree ``j`` (``taylor``) of each feature.
    centres : ndarray of shape (n_features_out,) or None
        ``taylor``: the centre of each feature's coordinate.
    """

    kind: str
    kernel: str | None
    gamma: float
    coordinates: np.ndarray
    params: np.ndarray
    centres: np.ndarray | None = None

    @property
    def n_features_out(self) -> int:
        return len(self.coordinates)

    def transform(self, X: np.ndarray) -> np.ndarray:
        """``(n_samples, n_features_out)`` feature values."""
        return self.feature_values(np.arange(self.n_features_out), X[:, self.coordinates])

    def feature_values(self, features: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Values of ``features`` at coordinate values ``x`` (broadcast together)."""
        p = self.params[features]
        if self.kind == "raw":
            return np.asarray(x, dtype=float)
        if self.kind == "kernel_matrix":
            if self.kernel == "rbf":
                return np.exp(-self.gamma * (x - p) ** 2)
            return np.exp(-self.gamma * np.abs(x - p))
        j = p.astype(float)
        coef = np.exp(0.5 * (j * math.log(2 * self.gamma) - gammaln(j + 1)))  # sqrt((2g)^j / j!), any degree
        u = x - self.centres[features]
        return coef * u**j * np.exp(-self.gamma * u**2)

    def name(self, f: int, feature_names=None) -> str:
        coord = self.coordinates[f]
        x = feature_names[coord] if feature_names is not None else f"x{coord}"
        if self.kind == "raw":
            return x
        if self.kind == "kernel_matrix":
            return f"k({x}, {self.params[f]:.4g})"
        return f"taylor{int(self.params[f])}({x} - {self.centres[f]:.4g})"

    def superlevel(self, f: int, threshold: float) -> tuple[Interval, ...]:
        """Intervals of the coordinate where ``phi_f > threshold`` (open, sorted, disjoint)."""
        one = lambda x: float(self.feature_values(np.array([f]), np.array([x]))[0])  # noqa: E731
        return _superlevel_intervals(one, self._critical_points(f), self._limits(f), threshold)

    def _critical_points(self, f: int) -> list[float]:
        if self.kind == "raw":
            return []
        if self.kind == "kernel_matrix":
            return [float(self.params[f])]
        j = int(self.params[f])
        s = math.sqrt(j / (2 * self.gamma)) if j else 0.0
        c = float(self.centres[f])
        return [c + v for v in (sorted({0.0, -s, s}) if j != 1 else [-s, s])]

    def _limits(self, f: int) -> tuple[float, float]:
        return (-math.inf, math.inf) if self.kind == "raw" else (0.0, 0.0)


def _superlevel_intervals(fn, critical: list[float], limits: tuple[float, float], t: float) -> tuple[Interval, ...]:
    """``{x : fn(x) > t}`` as open intervals, for ``fn`` monotone between its ``critical`` points.

    ``limits`` are ``fn(-inf)`` and ``fn(+inf)``. Roots of ``fn - t`` are found on each
    monotone piece by bracketing (doubling out on the infinite ends) and Brent's method.
    """
    edges = [-math.inf, *critical, math.inf]
    roots = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        a = lo if math.isfinite(lo) else _outward(fn, hi if math.isfinite(hi) else 0.0, -1.0, limits[0], t)
        b = hi if math.isfinite(hi) else _outward(fn, lo if math.isfinite(lo) else 0.0, 1.0, limits[1], t)
        fa, fb = fn(a) - t, fn(b) - t
        if fa == 0:
            roots.append(a)
        elif fb == 0:
            roots.append(b)
        elif fa * fb < 0:
            roots.append(brentq(lambda x: fn(x) - t, a, b, xtol=1e-13, rtol=4 * np.finfo(float).eps))
    points = [-math.inf, *sorted(set(roots)), math.inf]
    intervals: list[Interval] = []
    for lo, hi in zip(points[:-1], points[1:]):
        if fn(_midpoint(lo, hi)) > t:
            if intervals and intervals[-1][1] == lo:  # a tangent root inside the set: merge
                intervals[-1] = (intervals[-1][0], hi)
            else:
                intervals.append((lo, hi))
    return tuple(intervals)


def _outward(fn, anchor: float, direction: float, limit: float, t: float) -> float:
    """A point beyond ``anchor`` where ``fn - t`` already has the sign of its limit at infinity."""
    target = np.sign(limit - t)
    step = 1.0 + abs(anchor)
    x = anchor + direction * step
    for _ in range(200):
        if target == 0 or np.sign(fn(x) - t) == target:
            break
        step *= 2
        x = anchor + direction * step
    return x


def _midpoint(lo: float, hi: float) -> float:
    if math.isinf(lo) and math.isinf(hi):
        return 0.0
    if math.isinf(lo):
        return hi - 1.0 - abs(hi)
    if math.isinf(hi):
        return lo + 1.0 + abs(lo)
    return 0.5 * (lo + hi)


def build_features(kind: str, X: np.ndarray, kernel, gamma: float, taylor_degree: int = 4) -> SurrogateFeatures:
    """The surrogate map ``kind`` for data ``X`` and the clustering's kernel."""
    X = np.asarray(X)
    if X.ndim != 2 or X.shape[0] == 0:
        raise ValueError(f"X must be a non-empty (n_samples, n_features) array, got shape {X.shape}")
    if not np.isfinite(X).all():
        raise ValueError("X must be finite, found NaN/inf entries")
    if kind != "raw" and not (isinstance(gamma, (int, float, np.floating)) and 0 < gamma < math.inf):
        raise ValueError(f"gamma must be a finite number > 0, got {gamma!r}")
    d = X.shape[1]
    if kind == "raw":
        return SurrogateFeatures("raw", None, gamma, np.arange(d), np.zeros(d))
    if kind == "kernel_matrix":
        if kernel not in ("rbf", "laplace"):
            raise ValueError(
                f"features='kernel_matrix' needs a product kernel ('rbf' or 'laplace'), got kernel={kernel!r}"
            )
        coords, anchors = [], []
        for i in range(d):
            # one feature per training point, in the data's order (the authors' n x d kernel-matrix columns): IMM
            # breaks ties in mistakes by the lowest feature, so the order decides the tree. A repeated value gives
            # an identical feature and keeps only its first occurrence, the column such a tie-break would pick.
            values, first = np.unique(X[:, i], return_index=True)
            anchors.append(values[np.argsort(first)])
            coords.append(np.full(len(values), i))
        return SurrogateFeatures("kernel_matrix", kernel, gamma, np.concatenate(coords), np.concatenate(anchors))
    if kind == "taylor":
        if kernel != "rbf":
            raise ValueError(f"features='taylor' needs the Gaussian kernel ('rbf'), got kernel={kernel!r}")
        degrees = np.arange(taylor_degree + 1)
        coordinates = np.repeat(np.arange(d), len(degrees))
        return SurrogateFeatures("taylor", "rbf", gamma, coordinates, np.tile(degrees, d).astype(float),
                                 X.mean(axis=0)[coordinates])
    raise ValueError(f"unknown features={kind!r}; expected 'kernel_matrix', 'taylor' or 'raw'")
