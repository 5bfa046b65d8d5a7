"""Threshold trees in input space, IMM, and the leaf refinement of ExKMC / Expand.

Every internal node tests one input coordinate against a union of open intervals:
``x[coordinate]`` inside goes to ``inside``, otherwise to ``outside``. A cut ``phi_f > t`` on
a surrogate feature is stored as such intervals, so prediction, the text export and the
plot all use the explanation itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from iclr24.kernel_trees.features import SurrogateFeatures

__all__ = ["Node", "ThresholdTree", "best_interval_split", "imm_tree"]


@dataclass
class Node:
    coordinate: int = -1
    intervals: tuple[tuple[float, float], ...] = ()
    inside: int = -1
    outside: int = -1
    label: int = -1
    feature: int = -1  # the surrogate-feature cut this node came from (IMM nodes): phi_feature > threshold
    threshold: float = float("nan")
    rule: str = ""

    @property
    def is_leaf(self) -> bool:
        return self.inside < 0


class ThresholdTree:
    """A binary tree of interval tests on single input coordinates; leaves carry cluster labels."""

    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes

    @property
    def n_leaves(self) -> int:
        return sum(node.is_leaf for node in self.nodes)

    @property
    def leaves(self) -> list[int]:
        return [i for i, node in enumerate(self.nodes) if node.is_leaf]

    def apply(self, X: np.ndarray) -> np.ndarray:
        """Index of the leaf each row of ``X`` reaches."""
        return self._route(len(X), lambda node, rows: _inside(X[rows, node.coordinate], node.intervals))

    def predict(self, X: np.ndarray) -> np.ndarray:
        labels = np.array([node.label for node in self.nodes])
        return labels[self.apply(X)]

    def apply_surrogate(self, X: np.ndarray, Phi: np.ndarray) -> np.ndarray:
        """Like :meth:`apply`, but IMM nodes test ``Phi[:, feature] > threshold`` instead of
        their intervals: equal to :meth:`apply` when the intervals are exact preimages."""

        def inside(node, rows):
            if node.feature >= 0:
                return Phi[rows, node.feature] > node.threshold
            return _inside(X[rows, node.coordinate], node.intervals)

        return self._route(len(X), inside)

    def _route(self, n_rows: int, inside) -> np.ndarray:
        """Leaf of each row, with ``inside(node, rows)`` deciding each internal node's test."""
        out = np.empty(n_rows, dtype=int)
        stack = [(0, np.arange(n_rows))]
        while stack:
            i, rows = stack.pop()
            node = self.nodes[i]
            if node.is_leaf:
                out[rows] = i
                continue
            mask = inside(node, rows)
            stack.append((node.inside, rows[mask]))
            stack.append((node.outside, rows[~mask]))
        return out

    def split_leaf(self, leaf: int, coordinate: int, intervals, inside_label: int, outside_label: int) -> None:
        """Turn ``leaf`` into a test with two new leaves."""
        node = self.nodes[leaf]
        node.coordinate, node.intervals = coordinate, tuple(intervals)
        node.inside, node.outside = len(self.nodes), len(self.nodes) + 1
        node.label = -1
        self.nodes += [Node(label=inside_label), Node(label=outside_label)]

    def export_text(self, feature_names=None, decimals: int = 3) -> str:
        """The tree as indented text, like ``sklearn.tree.export_text``."""
        lines = []

        def name(c):
            return feature_names[c] if feature_names is not None else f"x{c}"

        def visit(i, depth):
            node = self.nodes[i]
            pad = "|   " * depth + "|--- "
            if node.is_leaf:
                lines.append(f"{pad}cluster {node.label}")
                return
            where = " or ".join(_format_interval(lo, hi, decimals) for lo, hi in node.intervals) or "(empty)"
            lines.append(f"{pad}{name(node.coordinate)} in {where}")
            visit(node.inside, depth + 1)
            lines.append(f"{pad}{name(node.coordinate)} not in {where}")
            visit(node.outside, depth + 1)

        visit(0, 0)
        return "\n".join(lines) + "\n"


def _inside(x: np.ndarray, intervals) -> np.ndarray:
    mask = np.zeros(len(x), dtype=bool)
    for lo, hi in intervals:
        mask |= (x > lo) & (x < hi)
    return mask


def _format_interval(lo: float, hi: float, decimals: int) -> str:
    fmt = f"{{:.{decimals}f}}"
    lo_s = "-inf" if np.isinf(lo) else fmt.format(lo)
    hi_s = "inf" if np.isinf(hi) else fmt.format(hi)
    return f"({lo_s}, {hi_s})"


# --- IMM (Dasgupta, Frost, Moshkovitz, Rashtchian, ICML 2020) on surrogate features -------------------------


def imm_tree(Phi: np.ndarray, labels: np.ndarray, features: SurrogateFeatures) -> tuple[ThresholdTree, int]:
    """Iterative Mistake Minimization on features ``Phi`` with centres = cluster means of ``Phi``.

    At each node, among the points whose own centre is still at the node, choose the cut
    ``phi_f > t`` that separates the fewest points from their centre (a mistake), with
    thresholds at midpoints strictly between the node's smallest and largest centre value.
    Mistaken points leave the construction; the tree has one leaf per cluster.

    Returns the tree and the number of mistakes.
    """
    clusters = np.unique(labels)
    centres = np.stack([Phi[labels == c].mean(0) for c in clusters])  # (k, F)
    index_of = {c: i for i, c in enumerate(clusters)}
    point_centre = np.array([index_of[c] for c in labels])
    nodes = [Node()]
    mistakes_total = 0
    stack = [(0, np.arange(len(Phi)), np.arange(len(clusters)))]
    while stack:
        node_id, points, centre_ids = stack.pop()
        if len(centre_ids) == 1:
            nodes[node_id].label = int(clusters[centre_ids[0]])
            continue
        f, t, n_mistakes = _best_imm_cut(Phi[points], centres[point_centre[points]], centres[centre_ids])
        mistakes_total += n_mistakes
        point_inside = Phi[points, f] > t
        centre_inside = centres[centre_ids, f] > t
        kept = point_inside == centre_inside[np.searchsorted(centre_ids, point_centre[points])]
        node = nodes[node_id]
        node.coordinate = int(features.coordinates[f])
        node.intervals = features.superlevel(f, t)
        node.feature, node.threshold = f, t
        node.rule = f"{features.name(f)} > {t:.6g}"
        node.inside, node.outside = len(nodes), len(nodes) + 1
        nodes += [Node(), Node()]
        stack.append((node.inside, points[kept & point_inside], centre_ids[centre_inside]))
        stack.append((node.outside, points[kept & ~point_inside], centre_ids[~centre_inside]))
    return ThresholdTree(nodes), mistakes_total


def _best_imm_cut(Phi: np.ndarray, own_centres: np.ndarray, centres: np.ndarray) -> tuple[int, float, int]:
    """The (feature, threshold) with the fewest mistakes; ties go to the lowest feature, then threshold.

    A point is a mistake for threshold t when t lies between its value and its centre's
    value, so mistakes(t) counts the intervals ``[min(v, c), max(v, c))`` that contain t.
    """
    best = (np.inf, -1, 0.0)
    lo_c, hi_c = centres.min(0), centres.max(0)
    starts = np.sort(np.minimum(Phi, own_centres), axis=0)
    ends = np.sort(np.maximum(Phi, own_centres), axis=0)
    for f in np.flatnonzero(hi_c > lo_c):
        values = np.unique(np.concatenate([Phi[:, f], centres[:, f]]))
        cuts = 0.5 * (values[:-1] + values[1:])
        cuts = cuts[(cuts > lo_c[f]) & (cuts < hi_c[f])]
        if not len(cuts):
            continue
        mistakes = np.searchsorted(starts[:, f], cuts, side="right") - np.searchsorted(ends[:, f], cuts, side="right")
        j = int(np.argmin(mistakes))
        if mistakes[j] < best[0]:
            best = (int(mistakes[j]), int(f), float(cuts[j]))
    if best[1] < 0:
        raise ValueError("IMM cannot separate the remaining centres: they coincide on every feature "
                         "(duplicate clusters?)")
    return best[1], best[2], best[0]


# --- refinement: the best interval cut on one raw coordinate --------------------------------------------------


def best_interval_split(x: np.ndarray, w: np.ndarray, *, max_block: int = 1 << 22):
    """The interval cut on one coordinate of ``x`` that most lowers ``cost(S) = min_c sum_{i in S} w[i, c]``.

    Parameters
    ----------
    x : ndarray of shape (m, d)
        The leaf's points.
    w : ndarray of shape (m, k)
        Per-point cost of assigning it to each cluster: kernel cost ``K_ii - 2 mean_{j in c}
        K_ij + mean(K_cc)`` for ExKMC, ``1 - [label_i == c]`` (mistakes) for Expand.

    Returns
    -------
    (gain, coordinate, (lo, hi), inside_label, outside_label), or None if no cut exists.
        Points with ``lo < x[coordinate] < hi`` go inside. Costs use prefix sums over each
        coordinate's sorted order, so every contiguous interval is scored in O(k).
    """
    x, w = np.asarray(x), np.asarray(w)
    if x.ndim != 2 or w.ndim != 2 or x.shape[0] != w.shape[0]:
        raise ValueError(f"x must be (m, d) and w (m, k) with one m, got shapes {x.shape} and {w.shape}")
    if not (np.isfinite(x).all() and np.isfinite(w).all()):
        raise ValueError("x and w must be finite, found NaN/inf entries")
    m, k = w.shape
    total = w.sum(0)
    base = total.min()
    best = None
    for coord in range(x.shape[1]):
        order = np.argsort(x[:, coord], kind="stable")
        xs = x[order, coord]
        prefix = np.vstack([np.zeros(k), np.cumsum(w[order], axis=0)])  # (m+1, k)
        # An interval is points a..b of the sorted order; it must not split equal values.
        starts = np.flatnonzero(np.r_[True, xs[1:] > xs[:-1]])
        ends = np.flatnonzero(np.r_[xs[1:] > xs[:-1], True])
        chunk = max(1, max_block // max(1, len(ends) * k))
        for s0 in range(0, len(starts), chunk):
            a = starts[s0:s0 + chunk]
            inside = prefix[ends + 1][None, :, :] - prefix[a][:, None, :]  # (A, B, k)
            cost = inside.min(-1) + (total - inside).min(-1)
            valid = (ends[None, :] >= a[:, None]) & ~((a[:, None] == 0) & (ends[None, :] == m - 1))
            cost = np.where(valid, cost, np.inf)
            i, j = np.unravel_index(np.argmin(cost), cost.shape)
            if np.isfinite(cost[i, j]) and (best is None or base - cost[i, j] > best[0] + 1e-12):
                lo = -np.inf if a[i] == 0 else 0.5 * (xs[a[i] - 1] + xs[a[i]])
                hi = np.inf if ends[j] == m - 1 else 0.5 * (xs[ends[j]] + xs[ends[j] + 1])
                inside_sum = prefix[ends[j] + 1] - prefix[a[i]]
                best = (float(base - cost[i, j]), coord, (float(lo), float(hi)),
                        int(inside_sum.argmin()), int((total - inside_sum).argmin()))
    return best
