"""Reproduction of "Explaining Kernel Clustering via Decision Trees" on small data sets.

For each data set, the authors' protocol: kernel k-means with the kernel (Gaussian or Laplace) and
width chosen by best ARI against the ground truth, and for the Gaussian kernel Taylor or kernel-matrix
features chosen by Kernel IMM's price. Then IMM (axis-aligned, on k-means), Kernel IMM, Kernel ExKMC
and Kernel Expand explain that kernel k-means clustering. Each tree is scored by its agreement with
the kernel k-means partition, its ARI against the truth, its price of explainability (tree cost /
kernel k-means cost), and the share of kernel k-means' gain over a single cluster that it loses.

Every data set is fitted once per replicate seed (``n_seeds``): circles and moons are drawn anew, and every fit
(kernel k-means restarts, IMM's k-means) is seeded with it. The independent unit is a data set: each draw of
circles or moons is one, while a bundled set (iris, wine, breast cancer, digits) is one however many seeds fit it
(its seeds' values are averaged). The claims pool the units of the data sets they are about.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from scipy.optimize import linear_sum_assignment  # noqa: E402
from sklearn.metrics import adjusted_rand_score  # noqa: E402

from iclr24.core import Check, Claim, Result, RunContext, experiment  # noqa: E402
from iclr24.core.evidence import against, all_of, compare, not_run  # noqa: E402
from iclr24.kernel_trees.data import GENERATED, SHAPE_SETS, load_dataset, load_shape_set  # noqa: E402
from iclr24.kernel_trees.estimators import IMM, KernelExKMC, KernelExpand, KernelIMM  # noqa: E402
from iclr24.kernel_trees.kmeans import KernelKMeans, kernel_kmeans_cost, pairwise_kernel  # noqa: E402

PAPER = "Explaining Kernel Clustering via Decision Trees (Fleissner, Vankadara, Ghoshdastidar, ICLR 2024)"

# Leaves allowed to the refined trees: the paper's for its data sets (Sec. 6), k+1 and k+4 for
# circles and moons (few extra leaves, as the paper's 2-D sets use), and the paper's rules for the bundled sets it
# does not use: 2k as for its k <= 3 sets (wine), k+3 as for its one larger k, Aggregation's 7 (digits' 10).
MAX_LEAVES = {"circles": 3, "moons": 6, "iris": 6, "wine": 6, "cancer": 4, "digits": 13, "pathbased": 6,
              "aggregation": 10, "flame": 4}
NONLINEAR = ("circles", "moons")
TABULAR = ("iris", "wine", "cancer", "digits")
METHODS = ("IMM", "Kernel IMM", "Kernel ExKMC", "Kernel Expand")

CLAIM_IMM = "axis-aligned IMM fails on non-linear data, Kernel IMM does clearly better"
CLAIM_RECOVER = "Kernel ExKMC and Kernel Expand recover the kernel k-means partition with a few extra leaves"
CLAIM_REGRESSION = "no loss against IMM on tabular data (scikit-learn's iris, wine, breast cancer, digits)"
CLAIM_PRICE = "the refined trees cost about as much as kernel k-means (they keep nearly all of its gain)"
CHECK_INPUT = "every cut is an interval on one input coordinate, and predicts exactly as the surrogate cut"

# Thresholds, fixed before any run. The paper reports bar plots only, so each comes from the spec
# (/work/shared/specs/kernel_trees.md) or from the claim's wording when it was first written here. What was
# revised since, with results in view, is each claim's ``revision`` (docs/kernel_trees.md, "Evidence, second pass").
UNIT = "data sets"  # an independent unit: one draw of a generated set, or one bundled set whatever the seeds
IMM_FAILS_BELOW = 0.8  # "IMM fails": its agreement with kernel k-means below 0.8 (a 2-cluster chance level is 0.5)
KERNEL_IMM_GAIN = 0.1  # "clearly better": Kernel IMM's agreement at least 0.1 above IMM's
RECOVERED_ABOVE = 0.9  # "recover the partition": agreement with kernel k-means above 0.9
ARI_TOLERANCE = 0.05  # "no loss against IMM": ExKMC's ARI vs the truth at most 0.05 below IMM's (non-inferiority)
GAIN_LOST_BELOW = 0.1  # "about as much as kernel k-means": under 10% of its cost reduction over one cluster lost
MAX_PRICE = 1.05  # the price claim's first criterion: ExKMC's price at most 1.05 (and at most Kernel IMM's)

# Why each claim's provenance is "revised" (Claim.revision): what changed with results in view.
PROTOCOL = ("the width grid's 100 replaced by 5 after kernel k-means missed the moons (#51), and the Laplace kernel "
            "added to the by-ARI choice (#17), both after results were seen")
REVISIONS = {
    CLAIM_IMM: PROTOCOL + "; thresholds kept",
    CLAIM_RECOVER: PROTOCOL + "; threshold kept",
    CLAIM_REGRESSION: ("wine and digits added to iris and breast cancer (#58): two fixed data sets are n = 2 and "
                       "decide nothing, whatever the seeds; " + PROTOCOL + "; tolerance kept"),
    CLAIM_PRICE: ("criterion 'ExKMC's price <= 1.05' replaced by the share of kernel k-means' gain lost (#17), after "
                  "every price came out in 1.00-1.04 (K_ii = 1 adds n to every cost); " + PROTOCOL),
}


@dataclass(frozen=True)
class Config:
    datasets: tuple[str, ...] = ("circles", "moons", "iris", "wine", "cancer", "digits")
    n_samples: int = 300  # generated data sets
    # bundled sets are cut to their first rows past this (only digits, 1797: kernel k-means with k = 10 on 600
    # points costs about 1.7 s a fit here, 12 fits a seed); None keeps every row
    max_bundled: int | None = 600
    kernels: tuple[Literal["rbf", "laplace"], ...] = ("rbf", "laplace")
    # kernel widths tried, as multiples of a scale width: 1 / (n_features * var(X)) for the Gaussian
    # kernel (scikit-learn's 'scale'), 1 / (n_features * std(X)) for the Laplace kernel. 5 (in place of the
    # earlier 100) is where kernel k-means finds the moons (ARI 0.95 on seed 0, against 0.45 at 3); 100 never won
    # on the four data sets (its best ARI against the truth: 0.24), and the grid keeps its size and cost.
    gamma_grid: tuple[float, ...] = (0.3, 1.0, 3.0, 5.0, 10.0, 30.0)
    n_init: int = 10
    # "auto": the authors' choice, Taylor or kernel-matrix features by Kernel IMM's price (Gaussian kernel)
    features: Literal["auto", "kernel_matrix", "taylor", "raw"] = "auto"
    shape_sets_dir: str = ""  # a folder with Pathbased.txt, Aggregation.txt, flame.txt, if you have them
    n_seeds: int = 3  # replicates: each data set drawn (generated sets) and fitted once per seed

    def __post_init__(self) -> None:
        known = set(MAX_LEAVES)
        unknown = [d for d in self.datasets if d not in known]
        if unknown:
            raise ValueError(f"unknown datasets {unknown}; expected some of {sorted(known)}")
        if not self.gamma_grid or min(self.gamma_grid) <= 0:
            raise ValueError(f"gamma_grid must hold positive multiples, got {self.gamma_grid}")
        if self.features not in ("auto", "kernel_matrix", "taylor", "raw"):
            raise ValueError(f"features must be 'auto', 'kernel_matrix', 'taylor' or 'raw', got {self.features!r}")
        if not self.kernels or not set(self.kernels) <= {"rbf", "laplace"}:
            raise ValueError(f"kernels must name some of ('rbf', 'laplace'), got {self.kernels}")
        if self.features == "taylor" and set(self.kernels) != {"rbf"}:
            raise ValueError(f"features='taylor' needs the Gaussian kernel alone: kernels=('rbf',), got {self.kernels}")
        if self.n_seeds < 1:
            raise ValueError(f"n_seeds must be >= 1, got {self.n_seeds}")
        if self.n_samples < 20:  # the generated sets need a few points per cluster and a held-out split
            raise ValueError(f"n_samples must be >= 20, got {self.n_samples}")
        if self.max_bundled is not None and self.max_bundled < 100:  # digits: 10 clusters of ~10 points at least
            raise ValueError(f"max_bundled must be None or >= 100, got {self.max_bundled}")


PRESETS = {
    "smoke": Config(datasets=("circles", "iris"), n_samples=120, gamma_grid=(1.0, 10.0), n_init=2),  # both kernels
    "quick": Config(),
    "paper": Config(datasets=("circles", "moons", "iris", "wine", "cancer", "digits", "pathbased", "aggregation",
                              "flame"), max_bundled=None, shape_sets_dir="data/shape_sets"),
}


@experiment(
    name="kernel_trees",
    paper=PAPER,
    presets=PRESETS,
    claims=[CLAIM_IMM, CLAIM_RECOVER, CLAIM_REGRESSION, CLAIM_PRICE],
    description="Decision trees whose cuts are intervals on input coordinates, explaining kernel k-means.",
)
def reproduce(cfg: Config, ctx: RunContext) -> Result:
    """IMM vs Kernel IMM / ExKMC / Expand on circles, moons and scikit-learn's bundled sets, once per seed."""
    rows, fitted, input_checks = [], {}, []
    seeds = ctx.replicate_seeds(cfg.n_seeds)
    with ctx.progress("data sets x seeds", total=len(cfg.datasets) * len(seeds)) as bar:
        for seed in seeds:
            for name in cfg.datasets:
                X, y, models, kkm, dataset_rows = _fit_dataset(name, seed, cfg)
                rows += dataset_rows
                input_checks += [_explains_in_input_space(m, X) for method, m in models.items() if method != "IMM"]
                if seed == seeds[0]:
                    fitted[name] = (X, y, kkm, models)
                ctx.log(f"{name} seed {seed}: {dataset_rows[0]['kernel']} gamma={dataset_rows[0]['gamma']:.3g} "
                        f"{dataset_rows[0]['features']} features: " + ", ".join(
                            f"{r['method']} agree={r['agreement']:.2f} ari={r['ari_truth']:.2f} "
                            f"price={r['price']:.3f}" for r in dataset_rows))
                bar.advance()

    # replicates[dataset, method][key]: one value per seed, in seed order
    replicates: dict[tuple[str, str], dict[str, list[float]]] = {}
    for r in rows:
        per_key = replicates.setdefault((r["dataset"], r["method"]), {})
        for key in ("agreement", "ari_truth", "price", "gain_lost"):
            per_key.setdefault(key, []).append(r[key])
    metrics = {f"{key}_{d}_{m.replace(' ', '_')}": float(np.mean(values)) for (d, m), per_key in replicates.items()
               for key, values in per_key.items()}
    claims = _claims(replicates, seeds)
    checks = [Check(CHECK_INPUT, passed=bool(input_checks) and all(input_checks),
                    detail=f"{sum(input_checks)} of {len(input_checks)} kernel trees: every internal node is one "
                           "interval on one coordinate (two for Taylor features), and routing the training points "
                           "by it equals routing by the surrogate feature")]
    figures = {"partitions.png": _plot_partitions(fitted)} if any(X.shape[1] == 2 for X, *_ in fitted.values()) else {}
    notes = (f"Every data set fitted with {len(seeds)} seeds (circles and moons drawn anew with each); metrics are "
             "means over the seeds, the table has every fit. A bundled data set is one replicate whatever the seeds "
             "(its seeds' values averaged); each draw of a generated one is one. Kernel (Gaussian or Laplace) and "
             "width per data set and seed chosen by kernel k-means' ARI against the truth, and Gaussian-kernel "
             "features (Taylor or kernel matrix) by Kernel IMM's price, as the authors do. Agreement is the fraction "
             "of points the tree puts in the same cluster as kernel k-means (best label matching). Gain lost: (tree "
             "cost - kernel k-means cost) / (one-cluster cost - kernel k-means cost), in the chosen kernel. The "
             "partitions figure shows the first seed. See docs/kernel_trees.md.")
    return Result(metrics=metrics, claims=claims, figures=figures, tables={"results": rows}, notes=notes,
                  checks=checks)


def _fit_dataset(name: str, seed: int, cfg: Config):
    """One replicate: the data set (drawn with ``seed`` if generated), kernel k-means by the authors' protocol,
    the four trees, and one table row per method (kernel k-means first)."""
    if name in SHAPE_SETS:
        X, y, k = load_shape_set(name, cfg.shape_sets_dir)
    else:
        X, y, k = load_dataset(name, seed=seed, n_samples=cfg.n_samples, max_bundled=cfg.max_bundled)
    kkm, kernel, gamma = _kernel_kmeans_by_ari(X, y, k, cfg, seed)
    kernel_imm, features = _kernel_imm_by_price(X, k, kernel, gamma, kkm, cfg.features)
    leaves = MAX_LEAVES[name]
    shared = {"kernel": kernel, "gamma": gamma, "features": features, "kernel_kmeans": kkm}
    models = {
        "IMM": IMM(k, random_state=seed).fit(X),
        "Kernel IMM": kernel_imm,
        "Kernel ExKMC": KernelExKMC(k, max_leaves=leaves, **shared).fit(X),
        "Kernel Expand": KernelExpand(k, max_leaves=leaves, **shared).fit(X),
    }
    K = pairwise_kernel(X, X, kernel, gamma)
    best, one = kernel_kmeans_cost(K, kkm.labels_), kernel_kmeans_cost(K, np.zeros(len(X), dtype=int))
    setting = {"dataset": name, "seed": seed, "kernel": kernel, "gamma": gamma, "features": features}
    rows = [{**setting, "method": "kernel k-means", "leaves": None, "ari_truth": adjusted_rand_score(y, kkm.labels_),
             "agreement": 1.0, "price": 1.0, "gain_lost": 0.0}]
    for method, model in models.items():
        cost = kernel_kmeans_cost(K, model.labels_)  # IMM's k-means tree too, in the same kernel
        rows.append({**setting, "method": method, "leaves": model.tree_.n_leaves,
                     "ari_truth": adjusted_rand_score(y, model.labels_),
                     "agreement": _agreement(kkm.labels_, model.labels_), "price": cost / best,
                     "gain_lost": (cost - best) / (one - best)})
    return X, y, models, kkm, rows


def _kernel_kmeans_by_ari(X, y, k, cfg: Config, seed: int) -> tuple[KernelKMeans, str, float]:
    """The paper's protocol: the kernel and width whose kernel k-means best matches the truth."""
    scales = {"rbf": 1.0 / (X.shape[1] * X.var()), "laplace": 1.0 / (X.shape[1] * X.std())}
    best = None
    for kernel in cfg.kernels:
        for multiple in cfg.gamma_grid:
            gamma = float(scales[kernel] * multiple)
            model = KernelKMeans(k, kernel=kernel, gamma=gamma, n_init=cfg.n_init, random_state=seed).fit(X)
            score = adjusted_rand_score(y, model.labels_)
            if best is None or score > best[0] + 1e-12:
                best = (score, model, kernel, gamma)
    return best[1], best[2], best[3]


def _kernel_imm_by_price(X, k, kernel, gamma, kkm, features: str) -> tuple[KernelIMM, str]:
    """Kernel IMM with the given features, or ("auto") the authors' choice: for the Gaussian kernel the
    cheaper of Taylor and kernel-matrix features; kernel-matrix features for the Laplace kernel."""
    options = ([features] if features != "auto" else ["kernel_matrix", "taylor"] if kernel == "rbf"
               else ["kernel_matrix"])
    fits = [KernelIMM(k, kernel=kernel, gamma=gamma, features=f, kernel_kmeans=kkm).fit(X) for f in options]
    best = min(range(len(fits)), key=lambda i: fits[i].price_)  # ties: kernel-matrix features, listed first
    return fits[best], options[best]


def _agreement(reference: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of points with the same cluster as ``reference`` under the best label matching."""
    ref_ids, ref = np.unique(reference, return_inverse=True)
    lab_ids, lab = np.unique(labels, return_inverse=True)
    counts = np.zeros((len(ref_ids), len(lab_ids)))
    np.add.at(counts, (ref, lab), 1)
    rows, cols = linear_sum_assignment(-counts)
    return float(counts[rows, cols].sum() / len(reference))


def _explains_in_input_space(model, X) -> bool:
    """Every cut one interval on one coordinate (at most two for Taylor features, whose even degrees have
    two modes), and routing by it equals routing by the surrogate cut."""
    tree = model.tree_
    most = 2 if model.features_.kind == "taylor" else 1
    single = all(1 <= len(node.intervals) <= most for node in tree.nodes if not node.is_leaf)
    same = np.array_equal(tree.apply(X), tree.apply_surrogate(X, model.features_.transform(X)))
    return single and same


def _unit(dataset: str, seed: int) -> str:
    """The independent unit a fit with ``seed`` belongs to: its own draw of a generated data set, or a fixed data
    set (bundled or a shape set), the same unit whatever the seed."""
    return f"{dataset}-seed{seed}" if dataset in GENERATED else dataset


def _claims(replicates: dict, seeds: list[int]) -> list[Claim]:
    """The paper's claims from ``replicates[dataset, method][key]`` (one value per seed of ``seeds``, in order), each
    over the data sets it is about, one unit per draw of a generated set and one per fixed set (:func:`_unit`)."""
    have = list(dict.fromkeys(d for d, _ in replicates))  # the config's order
    nonlinear = [d for d in NONLINEAR if d in have]
    tabular = [d for d in TABULAR if d in have]
    n_seeds = len(seeds)

    def sample(datasets, method, key):
        """The values and what pools them: clusters naming each value's unit, fixed when no seed draws any."""
        values = [v for d in datasets for v in replicates[d, method][key]]
        return values, {"clusters": [_unit(d, s) for d in datasets for s in seeds],
                        "fixed": not any(d in GENERATED for d in datasets), "unit": UNIT}

    def versus(datasets, method, baseline, key, **kwargs):
        (a, pooling), (b, _) = sample(datasets, method, key), sample(datasets, baseline, key)
        return compare(a, b, **kwargs, **pooling)

    def level(datasets, method, key, bar, **kwargs):
        values, pooling = sample(datasets, method, key)
        return against(values, bar, **kwargs, **pooling)

    def means(datasets, method, key):
        return ", ".join(f"{d} {np.mean(replicates[d, method][key]):.2f}" for d in datasets)

    def reference(datasets):
        # these claims are judged against kernel k-means' partition, so they mean little where kernel k-means
        # itself misses the truth: its ARI is stated beside them
        return f"the reference, kernel k-means, has ARI vs truth {means(datasets, 'kernel k-means', 'ari_truth')}"

    def over(datasets):
        return f"means over {n_seeds} seed{'s' * (n_seeds != 1)} on {', '.join(datasets) or 'no data set'}"

    def evidence(datasets, build):
        # a data-set group the run did not include gives no replicates: the claim is not run
        return build() if datasets else not_run(f"no data set of this kind in datasets={tuple(have)}")

    first_tabular = [d for d in ("iris", "cancer") if d in have]  # the regression claim as first defined
    refined = ("Kernel ExKMC", "Kernel Expand")
    return [Claim(
        CLAIM_IMM,
        paper="axis-aligned k-means explanations have limited applicability where non-linear partitions are "
              "needed (abstract); the results are bar plots, with no numbers in the text",
        measured=(f"agreement with kernel k-means ({over(nonlinear)}): IMM {means(nonlinear, 'IMM', 'agreement')}; "
                  f"Kernel IMM {means(nonlinear, 'Kernel IMM', 'agreement')}; {reference(nonlinear)}"),
        evidence=evidence(nonlinear, lambda: all_of(
            level(nonlinear, "IMM", "agreement", IMM_FAILS_BELOW, better="lower",
                  label="IMM's agreement with kernel k-means"),
            versus(nonlinear, "Kernel IMM", "IMM", "agreement", margin=KERNEL_IMM_GAIN,
                   label="agreement, Kernel IMM - IMM"))),
        provenance="revised", revision=REVISIONS[CLAIM_IMM],
    ), Claim(
        CLAIM_RECOVER, paper="ExKMC/Expand cost close to kernel k-means (bar plots)",
        measured=(f"agreement with kernel k-means ({over(nonlinear)}): ExKMC "
                  f"{means(nonlinear, 'Kernel ExKMC', 'agreement')}; Expand "
                  f"{means(nonlinear, 'Kernel Expand', 'agreement')} "
                  f"(leaves {', '.join(f'{d} {MAX_LEAVES[d]}' for d in nonlinear)}); {reference(nonlinear)}"),
        evidence=evidence(nonlinear, lambda: all_of(*(
            level(nonlinear, method, "agreement", RECOVERED_ABOVE, label=f"{method}'s agreement with kernel k-means")
            for method in refined))),
        provenance="revised", revision=REVISIONS[CLAIM_RECOVER],
    ), Claim(
        CLAIM_REGRESSION, paper="iris/cancer: kernel trees match or beat IMM (bar plots)",
        measured=(f"ARI vs truth ({over(tabular)}; one unit a data set): IMM {means(tabular, 'IMM', 'ari_truth')}; "
                  f"Kernel ExKMC {means(tabular, 'Kernel ExKMC', 'ari_truth')}"),
        evidence=evidence(tabular, lambda: versus(tabular, "Kernel ExKMC", "IMM", "ari_truth", margin=-ARI_TOLERANCE,
                                                  label="ARI vs truth, Kernel ExKMC - IMM")),
        provenance="revised", revision=REVISIONS[CLAIM_REGRESSION],
        original=versus(first_tabular, "Kernel ExKMC", "IMM", "ari_truth", margin=-ARI_TOLERANCE,
                        label="as first defined, iris and breast cancer: ARI vs truth, Kernel ExKMC - IMM")
        if first_tabular else None,
    ), Claim(
        CLAIM_PRICE, paper="Kernel ExKMC and Kernel Expand close to the kernel k-means cost, Kernel IMM well "
                           "above (bar plots of the price of explainability)",
        measured=(f"share of kernel k-means' gain over one cluster lost ({over(have)}): ExKMC "
                  f"{means(have, 'Kernel ExKMC', 'gain_lost')}; Expand {means(have, 'Kernel Expand', 'gain_lost')}; "
                  f"Kernel IMM {means(have, 'Kernel IMM', 'gain_lost')} (price ExKMC "
                  f"{means(have, 'Kernel ExKMC', 'price')}; the price stays near 1 whenever K_ii is constant)"),
        evidence=evidence(have, lambda: all_of(*(
            level(have, method, "gain_lost", GAIN_LOST_BELOW, better="lower",
                  label=f"share of kernel k-means' gain {method} loses") for method in refined))),
        provenance="revised", revision=REVISIONS[CLAIM_PRICE],
        original=all_of(
            level(have, "Kernel ExKMC", "price", MAX_PRICE, better="lower", label="as first defined: ExKMC's price"),
            versus(have, "Kernel ExKMC", "Kernel IMM", "price", better="lower",
                   label="as first defined: price, Kernel ExKMC - Kernel IMM")) if have else None,
    )]


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
