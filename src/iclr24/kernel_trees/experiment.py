"""Reproduction of "Explaining Kernel Clustering via Decision Trees" on small data sets.

For each data set: kernel k-means with the kernel width chosen by best ARI against the
ground truth (the paper's protocol), then IMM (axis-aligned, on k-means), Kernel IMM,
Kernel ExKMC and Kernel Expand explaining that kernel k-means clustering. Each tree is
scored by its agreement with the kernel k-means partition, its ARI against the truth, and
its price of explainability (tree cost / kernel k-means cost).
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from scipy.optimize import linear_sum_assignment  # noqa: E402
from sklearn.metrics import adjusted_rand_score  # noqa: E402

from iclr24.core import Claim, Result, RunContext, experiment  # noqa: E402
from iclr24.kernel_trees.data import SHAPE_SETS, load_dataset, load_shape_set  # noqa: E402
from iclr24.kernel_trees.estimators import IMM, KernelExKMC, KernelExpand, KernelIMM  # noqa: E402
from iclr24.kernel_trees.kmeans import KernelKMeans  # noqa: E402

PAPER = "Explaining Kernel Clustering via Decision Trees (Fleissner, Vankadara, Ghoshdastidar, ICLR 2024)"

# Leaves allowed to the refined trees: the paper's for its data sets (Sec. 6), k+1 and k+4 for
# circles and moons (few extra leaves, as the paper's 2-D sets use).
MAX_LEAVES = {"circles": 3, "moons": 6, "iris": 6, "cancer": 4, "pathbased": 6, "aggregation": 10, "flame": 4}
NONLINEAR = ("circles", "moons")
TABULAR = ("iris", "cancer")
METHODS = ("IMM", "Kernel IMM", "Kernel ExKMC", "Kernel Expand")

CLAIM_IMM = "axis-aligned IMM fails on non-linear data, Kernel IMM does clearly better"
CLAIM_RECOVER = "Kernel ExKMC and Kernel Expand recover the kernel k-means partition with a few extra leaves"
CLAIM_REGRESSION = "no loss against IMM on data k-means already suits (iris, breast cancer)"
CLAIM_PRICE = "the refined trees cost about as much as kernel k-means (price of explainability near 1)"
CLAIM_INPUT = "every cut is an interval on one input coordinate, and predicts exactly as the surrogate cut"


@dataclass(frozen=True)
class Config:
    datasets: tuple[str, ...] = ("circles", "moons", "iris", "cancer")
    n_samples: int = 300  # generated data sets
    # kernel widths tried, as multiples of scikit-learn's 'scale' width 1 / (n_features * var(X))
    gamma_grid: tuple[float, ...] = (0.3, 1.0, 3.0, 10.0, 30.0, 100.0)
    n_init: int = 10
    features: str = "kernel_matrix"
    shape_sets_dir: str = ""  # a folder with Pathbased.txt, Aggregation.txt, flame.txt, if you have them

    def __post_init__(self) -> None:
        known = set(MAX_LEAVES)
        unknown = [d for d in self.datasets if d not in known]
        if unknown:
            raise ValueError(f"unknown datasets {unknown}; expected some of {sorted(known)}")
        if not self.gamma_grid or min(self.gamma_grid) <= 0:
            raise ValueError(f"gamma_grid must hold positive multiples, got {self.gamma_grid}")
        if self.features not in ("kernel_matrix", "taylor", "raw"):
            raise ValueError(f"features must be 'kernel_matrix', 'taylor' or 'raw', got {self.features!r}")
        if self.n_samples < 20:  # the generated sets need a few points per cluster and a held-out split
            raise ValueError(f"n_samples must be >= 20, got {self.n_samples}")


PRESETS = {
    "smoke": Config(datasets=("circles", "iris"), n_samples=120, gamma_grid=(1.0, 10.0), n_init=2),
    "quick": Config(),
    "paper": Config(datasets=("circles", "moons", "iris", "cancer", "pathbased", "aggregation", "flame"),
                    shape_sets_dir="data/shape_sets"),
}


@experiment(
    name="kernel_trees",
    paper=PAPER,
    presets=PRESETS,
    claims=[CLAIM_IMM, CLAIM_RECOVER, CLAIM_REGRESSION, CLAIM_PRICE, CLAIM_INPUT],
    description="Decision trees whose cuts are intervals on input coordinates, explaining kernel k-means.",
)
def reproduce(cfg: Config, ctx: RunContext) -> Result:
    """IMM vs Kernel IMM / ExKMC / Expand on circles, moons, iris and breast cancer."""
    rows, fitted, input_checks = [], {}, []
    with ctx.progress("data sets", total=len(cfg.datasets)) as bar:
        for name in cfg.datasets:
            if name in SHAPE_SETS:
                X, y, k = load_shape_set(name, cfg.shape_sets_dir)
            else:
                X, y, k = load_dataset(name, seed=ctx.seed, n_samples=cfg.n_samples)
            kkm, gamma = _kernel_kmeans_by_ari(X, y, k, cfg, ctx.seed)
            models = {
                "IMM": IMM(k, random_state=ctx.seed).fit(X),
                "Kernel IMM": KernelIMM(k, gamma=gamma, features=cfg.features, kernel_kmeans=kkm).fit(X),
                "Kernel ExKMC": KernelExKMC(k, gamma=gamma, features=cfg.features, kernel_kmeans=kkm,
                                            max_leaves=MAX_LEAVES[name]).fit(X),
                "Kernel Expand": KernelExpand(k, gamma=gamma, features=cfg.features, kernel_kmeans=kkm,
                                              max_leaves=MAX_LEAVES[name]).fit(X),
            }
            rows.append({"dataset": name, "method": "kernel k-means", "gamma": gamma, "leaves": None,
                         "ari_truth": adjusted_rand_score(y, kkm.labels_), "agreement": 1.0, "price": 1.0})
            for method, model in models.items():
                rows.append({"dataset": name, "method": method, "gamma": gamma, "leaves": model.tree_.n_leaves,
                             "ari_truth": adjusted_rand_score(y, model.labels_),
                             "agreement": _agreement(kkm.labels_, model.labels_), "price": model.price_})
                if method != "IMM":
                    input_checks.append(_explains_in_input_space(model, X))
            fitted[name] = (X, y, kkm, models)
            ctx.log(f"{name}: gamma={gamma:.3g} " + ", ".join(
                f"{r['method']} agree={r['agreement']:.2f} ari={r['ari_truth']:.2f} price={r['price']:.3f}"
                for r in rows if r["dataset"] == name))
            bar.advance()

    table = {(r["dataset"], r["method"]): r for r in rows}
    metrics = {f"{key}_{d}_{m.replace(' ', '_')}": table[d, m][key] for (d, m) in table
               for key in ("agreement", "ari_truth", "price")}
    claims = _claims(cfg, table, input_checks)
    figures = {"partitions.png": _plot_partitions(fitted)} if any(X.shape[1] == 2 for X, *_ in fitted.values()) else {}
    notes = ("Kernel width per data set chosen by kernel k-means' ARI against the truth, as in the paper. "
             "Agreement is the fraction of points the tree puts in the same cluster as kernel k-means "
             "(best label matching). See docs/kernel_trees.md.")
    return Result(metrics=metrics, claims=claims, figures=figures, tables={"results": rows}, notes=notes)


def _kernel_kmeans_by_ari(X, y, k, cfg: Config, seed: int) -> tuple[KernelKMeans, float]:
    """The paper's protocol: the kernel width whose kernel k-means best matches the truth."""
    scale = 1.0 / (X.shape[1] * X.var())
    best = None
    for multiple in cfg.gamma_grid:
        model = KernelKMeans(k, gamma=scale * multiple, n_init=cfg.n_init, random_state=seed).fit(X)
        score = adjusted_rand_score(y, model.labels_)
        if best is None or score > best[0] + 1e-12:
            best = (score, model, scale * multiple)
    return best[1], float(best[2])


def _agreement(reference: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of points with the same cluster as ``reference`` under the best label matching."""
    ref_ids, ref = np.unique(reference, return_inverse=True)
    lab_ids, lab = np.unique(labels, return_inverse=True)
    counts = np.zeros((len(ref_ids), len(lab_ids)))
    np.add.at(counts, (ref, lab), 1)
    rows, cols = linear_sum_assignment(-counts)
    return float(counts[rows, cols].sum() / len(reference))


def _explains_in_input_space(model, X) -> bool:
    """Every cut one interval on one coordinate, and routing by it equals routing by the surrogate cut."""
    tree = model.tree_
    single = all(len(node.intervals) == 1 for node in tree.nodes if not node.is_leaf)
    same = np.array_equal(tree.apply(X), tree.apply_surrogate(X, model.features_.transform(X)))
    return single and same


def _claims(cfg: Config, t: dict, input_checks: list[bool]) -> list[Claim]:
    have = set(d for d, _ in t)
    nonlinear = [d for d in NONLINEAR if d in have]
    tabular = [d for d in TABULAR if d in have]
    claims = []

    def fmt(datasets, method, key):
        return ", ".join(f"{d} {t[d, method][key]:.2f}" for d in datasets)

    claims.append(Claim(
        CLAIM_IMM,
        paper="circles ARI: kernel k-means 1.00, IMM 0.00, Kernel IMM 0.49 (spec's prototype); paper: bar plots",
        measured=(f"agreement with kernel k-means: IMM {fmt(nonlinear, 'IMM', 'agreement')}; "
                  f"Kernel IMM {fmt(nonlinear, 'Kernel IMM', 'agreement')}"),
        holds=bool(nonlinear) and all(t[d, "IMM"]["agreement"] < 0.8
                                      and t[d, "Kernel IMM"]["agreement"] >= t[d, "IMM"]["agreement"] + 0.1
                                      for d in nonlinear),
        criterion="on circles and moons: IMM's agreement < 0.8 and Kernel IMM's >= IMM's + 0.1",
    ))
    claims.append(Claim(
        CLAIM_RECOVER, paper="ExKMC/Expand cost close to kernel k-means (bar plots)",
        measured=(f"agreement: ExKMC {fmt(nonlinear, 'Kernel ExKMC', 'agreement')}; "
                  f"Expand {fmt(nonlinear, 'Kernel Expand', 'agreement')} "
                  f"(leaves {', '.join(f'{d} {MAX_LEAVES[d]}' for d in nonlinear)})"),
        holds=bool(nonlinear) and all(t[d, m]["agreement"] >= 0.9 for d in nonlinear
                                      for m in ("Kernel ExKMC", "Kernel Expand")),
        criterion="agreement with kernel k-means >= 0.9 for both, on circles and moons",
    ))
    claims.append(Claim(
        CLAIM_REGRESSION, paper="iris/cancer: kernel trees match or beat IMM (bar plots)",
        measured=(f"ARI vs truth: IMM {fmt(tabular, 'IMM', 'ari_truth')}; "
                  f"Kernel ExKMC {fmt(tabular, 'Kernel ExKMC', 'ari_truth')}"),
        holds=bool(tabular) and all(t[d, "Kernel ExKMC"]["ari_truth"] >= t[d, "IMM"]["ari_truth"] - 0.05
                                    for d in tabular),
        criterion="Kernel ExKMC's ARI against the truth >= IMM's - 0.05 on iris and cancer",
    ))
    datasets = sorted(have)
    claims.append(Claim(
        CLAIM_PRICE, paper="ExKMC/Expand close to kernel k-means cost; Kernel IMM well above (bar plots)",
        measured=(f"price ExKMC {fmt(datasets, 'Kernel ExKMC', 'price')}; "
                  f"Kernel IMM {fmt(datasets, 'Kernel IMM', 'price')}"),
        holds=all(t[d, "Kernel ExKMC"]["price"] <= min(1.05, t[d, "Kernel IMM"]["price"] + 1e-9) for d in datasets),
        criterion="ExKMC price <= 1.05 and <= Kernel IMM's on every data set (weak with a Gaussian kernel: "
                  "its constant diagonal keeps every price near 1)",
    ))
    claims.append(Claim(
        CLAIM_INPUT, paper="generalised threshold trees: cuts are intervals on raw coordinates (Sec. 4)",
        measured=f"{sum(input_checks)} of {len(input_checks)} kernel trees",
        holds=bool(input_checks) and all(input_checks),
        criterion="every internal node of every kernel tree is one interval on one coordinate, and routing all "
                  "training points by it equals routing by the surrogate feature",
    ))
    return claims


def _plot_partitions(fitted: dict):
    flat = {name: v for name, v in fitted.items() if v[0].shape[1] == 2}
    fig, axes = plt.subplots(len(flat), 1 + len(METHODS), figsize=(3 * (1 + len(METHODS)), 3 * len(flat)),
                             squeeze=False)
    for row, (name, (X, _, kkm, models)) in zip(axes, flat.items()):
        row[0].scatter(X[:, 0], X[:, 1], c=kkm.labels_, cmap="tab10", vmin=0, vmax=9, s=8)
        row[0].set_title(f"{name}: kernel k-means")
        row[0].set_xticks([])
        row[0].set_yticks([])
        for ax, (method, model) in zip(row[1:], models.items()):
            model.plot_partition(X, ax=ax, title=f"{method} ({model.tree_.n_leaves} leaves)")
    fig.tight_layout()
    return fig
