"""Reproduction of the fixed non-negative orthogonal classifier's claims on digits.

Every claim is judged over seeds (one replicate per seed: a fresh initialisation, fixed classifier and batch
order on the run's split), paired between the arms:

1. Zero-mean neural collapse, judged on the paper's own measures (Papyan et al.'s NC1-NC3 with the global mean
   set to 0, as the official ``znc_utils.py`` computes them): with the fixed non-negative orthogonal classifier
   (FNO) the raw class means of the ReLU features are orthogonal (ZNC2's mean cosine below 0.1) and still
   converging (lower at the end than half-way), the raw means match the classifier's rows (ZNC3 below 0.1), and
   the within-class variation ZNC1 is below the learnable classifier's.
2. Accuracy: at most one point below the learnable classifier's.
3. Continual learning (split digits, 5 tasks of 2 classes, experience replay, masked softmax): final
   average accuracy of FNO above the learnable classifier's.
4. Imbalanced learning (long-tailed digits, imbalance ratios 10 and 100, FNO head): balanced accuracy of
   arc-mixup with masking (the official ``mask`` trainer's variant) above plain mixup, and plain mixup above none,
   at every ratio. The official convex-input variant and this package's per-sample variant run beside it, and
   seeds that collapse (balanced accuracy below 0.2) are named.

The seeds' replicates all train on one data set (digits, split by the run's seed): the verdicts speak for training
runs on it. Claims 1 and 4 were revised with results in view, claim 2 is a stand-in (digits is at ceiling); each
threshold below says where it came from.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import ClassVar, Literal

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

from iclr24.core import Claim, Result, RunContext, experiment  # noqa: E402
from iclr24.core.evidence import against, all_of, compare  # noqa: E402
from iclr24.orthogonal_classifier.classifier import (  # noqa: E402
    FixedNonNegativeOrthogonalClassifier,
    LearnableClassifier,
    SimplexETFClassifier,
)
from iclr24.orthogonal_classifier.collapse import (  # noqa: E402
    class_means,
    nc1,
    nc2_equinorm,
    nc3_self_duality,
    own_block_energy,
    raw_mean_cosine,
    zero_mean_collapse,
)
from iclr24.orthogonal_classifier.training import (  # noqa: E402
    Net,
    continual_er,
    evaluate,
    train_classifier,
    train_imbalanced,
)

PAPER = ("Fixed Non-negative Orthogonal Classifier: Inducing Zero-mean Neural Collapse with Feature Dimension "
         "Separation (Kim & Kim, ICLR 2024)")
CLAIM_COLLAPSE = "the fixed non-negative orthogonal classifier induces zero-mean neural collapse"
CLAIM_ACCURACY = "a fixed classifier loses no accuracy against a learnable one"
CLAIM_CONTINUAL = "feature dimension separation helps masked-softmax continual learning"
CLAIM_IMBALANCE = "arc-mixup with masking beats plain mixup on imbalanced data"
# Thresholds, each with its provenance.
#: Collapse (provenance "revised"): zero-mean collapse makes the raw class means orthogonal (cos = 0; the paper's
#: Theorem 1 and Fig. 2). A finite run gets a tolerance: mean |cos| below 0.1, within about 6 degrees of a right
#: angle. The spec's pass rule and the first experiment.py asked for |cos| < 0.5 and falling, own-block energy > 0.7
#: and NC1 below the learnable head's; reviews tightened it with results in view (c37fa5f: |cos| < 0.1, own-block
#: energy >= 0.9; c5ab915: the paper's ZNC2 and ZNC3 below 0.1, ZNC1 below the learnable head's). The claim is also
#: judged under the first definition (Claim.original).
MAX_RAW_MEAN_COS = 0.1
#: ... and aligned with the classifier's rows: ZNC3 = ||W/||W|| - M/||M|| ||_F^2 = 2 - 2 cos(W, M) (the paper's
#: zero-mean self-duality, 0 at collapse) below 0.1, i.e. the raw means' matrix within cos 0.95 of W's.
MAX_ZNC3 = 0.1
FIRST_MAX_RAW_MEAN_COS, FIRST_MIN_OWN_BLOCK_ENERGY = 0.5, 0.7  # the spec's pass rule
COLLAPSE_REVISION = ("spec's |cos| < 0.5 and falling, own-block energy > 0.7, NC1 below learnable -> the paper's "
                     "zero-mean measures, ZNC2 cosine and ZNC3 < 0.1, ZNC1 below learnable (reviews c37fa5f, c5ab915, "
                     "with the 0.35 cosine in view: tightened, and it fails)")
#: "Loses no accuracy" (provenance "spec"): at most 1 point below the learnable classifier (the spec's pass rule).
ACCURACY_MARGIN = 0.01
#: Continual learning and arc-mixup (provenance "spec": the spec's "FNO >= learnable" and "arc-mixup + mask >= plain
#: mixup >= none"): any improvement (no effect = 0). The judged arc-mixup arm was revised (IMBALANCE_REVISION).
MARGIN_CONTINUAL = 0.0
MARGIN_IMBALANCE = 0.0
IMBALANCE_REVISION = ("judged arc-mixup changed from this package's per-sample variant to the official mask trainer's "
                      "(c5ab915, after a review found a per-sample seed collapsed at 0.100); margin 0 unchanged")
#: Digits is at ceiling for every head (97.8-98.2% in quick): "no accuracy lost" there says little about the paper's
#: CIFAR and ImageNet ResNets.
ACCURACY_STAND_IN = ("an MLP on scikit-learn digits, where every head scores about 98% (at ceiling), stands in for "
                     "ResNets on CIFAR-10/100 and ImageNet")
#: A seed "collapses" when its balanced accuracy is below 2 / C = 0.2: the net predicts about one class (chance is
#: 0.1). Collapsed seeds are named in the imbalance claim's text, not dropped from it.
COLLAPSED_BALANCED_ACCURACY = 0.2
#: The imbalance arms: name -> (train_imbalanced method, arc_variant). "arc_mixup" is the judged one.
IMBALANCE_ARMS = {"none": ("none", "mask"), "mixup": ("mixup", "mask"), "arc_mixup": ("arc_mixup", "mask"),
                  "arc_mixup_cls_cbs": ("arc_mixup", "cls_cbs"), "arc_mixup_per_sample": ("arc_mixup", "per_sample")}

HEADS = {"fno": FixedNonNegativeOrthogonalClassifier, "learnable": LearnableClassifier, "etf": SimplexETFClassifier}
LABELS = {"fno": "fixed non-negative orthogonal", "learnable": "learnable", "etf": "fixed simplex ETF"}


@dataclass(frozen=True)
class Config:
    allow_zero: ClassVar[tuple[str, ...]] = ("buffer_size",)  # 0: continual learning without replay
    allow_empty: ClassVar[tuple[str, ...]] = ("extra_arc_variants",)  # (): only the judged official variant
    hidden: tuple[int, ...] = (256, 256, 120)  # the last width is the feature dimension (12 a class)
    scale: float = 5.0  # logit scale of the fixed classifiers
    epochs: int = 300
    collapse_seeds: int = 3  # every head trained on each: the collapse and accuracy claims' replicates
    continual_seeds: int = 5
    continual_epochs: int = 20
    buffer_size: int = 50
    imbalance_ratios: tuple[int, ...] = (10, 100)
    imbalance_seeds: int = 3
    imbalance_epochs: int = 100
    alpha: float = 1.0
    #: arc-mixup variants run beside the judged official ``mask`` one (reported, not judged); () skips them
    extra_arc_variants: tuple[Literal["cls_cbs", "per_sample"], ...] = ("cls_cbs", "per_sample")

    def __post_init__(self) -> None:
        if not self.hidden or self.hidden[-1] < 10:
            raise ValueError(f"hidden must end in a feature dimension >= 10 (the classes), got {self.hidden}")
        if min(self.epochs, self.collapse_seeds, self.continual_seeds, self.continual_epochs, self.imbalance_seeds,
               self.imbalance_epochs) < 1 or self.epochs < 2:
            raise ValueError("epochs must be >= 2 and the other counts >= 1")
        unknown = [v for v in self.extra_arc_variants if v not in ("cls_cbs", "per_sample")]
        if unknown:
            raise ValueError(f"extra_arc_variants must be drawn from ('cls_cbs', 'per_sample'), got {unknown}")


PRESETS = {
    "smoke": Config(hidden=(32, 20), epochs=4, continual_seeds=3, continual_epochs=1, imbalance_ratios=(10,),
                    imbalance_seeds=3, imbalance_epochs=2),
    "quick": Config(),
    "paper": Config(epochs=1200, collapse_seeds=10, continual_seeds=10, imbalance_seeds=10, imbalance_epochs=300),
}


@experiment(
    name="orthogonal_classifier",
    paper=PAPER,
    presets=PRESETS,
    claims=[CLAIM_COLLAPSE, CLAIM_ACCURACY, CLAIM_CONTINUAL, CLAIM_IMBALANCE],
    description="A fixed non-negative orthogonal classifier on digits: zero-mean neural collapse, continual and "
                "imbalanced learning.",
)
def reproduce(cfg: Config, ctx: RunContext) -> Result:
    digits = load_digits()
    X, y = torch.tensor(digits.data / 16.0, dtype=torch.float32), torch.tensor(digits.target)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(ctx.seed))
    train_idx, test_idx = order[:int(0.75 * len(y))], order[int(0.75 * len(y)):]
    Xtr, ytr, Xte, yte = X[train_idx], y[train_idx], X[test_idx], y[test_idx]
    D = cfg.hidden[-1]

    def head(kind: str, seed: int):
        options = {} if kind == "learnable" else {"scale": cfg.scale, "generator": torch.Generator().manual_seed(seed)}
        return HEADS[kind](D, 10, **options)

    arms = ["none", "mixup", "arc_mixup"] + [f"arc_mixup_{v}" for v in cfg.extra_arc_variants]
    n_runs = (len(HEADS) * cfg.collapse_seeds + 2 * cfg.continual_seeds
              + len(arms) * len(cfg.imbalance_ratios) * cfg.imbalance_seeds)
    metrics, means, per_seed = {}, {}, {}
    collapse: dict[str, dict[str, list[float]]] = {kind: {} for kind in HEADS}  # kind -> metric -> per seed
    with ctx.progress("training", total=n_runs) as bar:
        for seed in ctx.replicate_seeds(cfg.collapse_seeds):
            for kind in HEADS:
                torch.manual_seed(seed)
                net = Net(64, cfg.hidden, head(kind, seed))
                history = {}

                def checkpoint(epoch, net=net, history=history):
                    if epoch in (cfg.epochs // 2, cfg.epochs):
                        with torch.no_grad():
                            history[epoch] = raw_mean_cosine(net.encoder(Xtr), ytr)

                train_classifier(net, Xtr, ytr, epochs=cfg.epochs, generator=torch.Generator().manual_seed(seed + 1),
                                 checkpoint=checkpoint)
                with torch.no_grad():
                    features = net.encoder(Xtr)
                accuracy, _ = evaluate(net, Xte, yte, 10)
                measured = {"accuracy": accuracy, "nc1": nc1(features, ytr),
                            "nc2_equinorm": nc2_equinorm(features, ytr),
                            "nc3": nc3_self_duality(features, ytr, net.head.weight.detach()),
                            "raw_cos_mid": history[cfg.epochs // 2], "raw_cos": history[cfg.epochs]}
                measured.update(zero_mean_collapse(features, ytr, net.head.weight.detach()))
                if kind == "fno":
                    measured["own_block_energy"] = own_block_energy(features, ytr, net.head.owner)
                for name, value in measured.items():
                    collapse[kind].setdefault(name, []).append(value)
                means.setdefault(kind, class_means(features, ytr)[1])  # the figure shows the first seed
                ctx.log(f"seed {seed}, {kind}: accuracy {accuracy:.3f}, ZNC1 {measured['znc1']:.3f}, raw-mean |cos| "
                        f"{measured['raw_cos_mid']:.3f} -> {measured['raw_cos']:.3f}, ZNC3 {measured['znc3']:.3f}")
                bar.advance()
        metrics.update({f"{k}_{name}": statistics.mean(v) for k, c in collapse.items() for name, v in c.items()})
        collapse_seeds = ctx.replicate_seeds(cfg.collapse_seeds)
        per_seed.update({f"collapse, {k}, {name}": (collapse_seeds, c[name]) for k, c in collapse.items()
                         for name in ("accuracy", "raw_cos", "znc3")})

        tasks = [(Xtr[(ytr // 2) == t], ytr[(ytr // 2) == t]) for t in range(5)]
        continual = {kind: [] for kind in ("fno", "learnable")}
        for kind in continual:
            for seed in ctx.replicate_seeds(cfg.continual_seeds):
                torch.manual_seed(seed)
                net = Net(64, cfg.hidden, head(kind, seed))
                curve = []
                for t, trained in enumerate(continual_er(net, tasks, epochs=cfg.continual_epochs,
                                                         buffer_size=cfg.buffer_size,
                                                         generator=torch.Generator().manual_seed(seed))):
                    seen = (yte // 2) <= t
                    curve.append(evaluate(trained, Xte[seen], yte[seen], 10)[0])
                continual[kind].append(curve)
                bar.advance()
        for kind, curves in continual.items():
            metrics[f"continual_{kind}_final"] = statistics.mean(c[-1] for c in curves)
            per_seed[f"continual, {kind}"] = (ctx.replicate_seeds(cfg.continual_seeds), [c[-1] for c in curves])
        ctx.log(f"continual (final average accuracy over {cfg.continual_seeds} seeds): FNO "
                f"{metrics['continual_fno_final']:.3f}, learnable {metrics['continual_learnable_final']:.3f}")

        imbalance = {}
        imbalance_seeds = ctx.replicate_seeds(cfg.imbalance_seeds)
        for ratio in cfg.imbalance_ratios:
            counts = [max(1, round(int((ytr == 0).sum()) * ratio ** (-c / 9))) for c in range(10)]
            keep = torch.cat([torch.nonzero(ytr == c).flatten()[:n] for c, n in enumerate(counts)])
            for arm in arms:
                method, arc_variant = IMBALANCE_ARMS[arm]
                scores = []
                for seed in imbalance_seeds:
                    torch.manual_seed(seed)
                    net = Net(64, cfg.hidden, head("fno", seed))
                    train_imbalanced(net, Xtr[keep], ytr[keep], method=method, arc_variant=arc_variant,
                                     epochs=cfg.imbalance_epochs, alpha=cfg.alpha,
                                     generator=torch.Generator().manual_seed(seed))
                    scores.append(evaluate(net, Xte, yte, 10)[1])
                    bar.advance()
                imbalance[ratio, arm] = scores
                per_seed[f"imbalance {ratio}, {arm}"] = (imbalance_seeds, scores)
                metrics[f"imbalance_{ratio}_{arm}_balanced_accuracy"] = statistics.mean(scores)
                metrics[f"imbalance_{ratio}_{arm}_collapsed_seeds"] = len(_collapsed(imbalance_seeds, scores))
            ctx.log(f"imbalance ratio {ratio}: balanced accuracy " + ", ".join(
                f"{m} {metrics[f'imbalance_{ratio}_{m}_balanced_accuracy']:.3f}" for m in arms))

    rows = [{"classifier": LABELS[k], **{n: round(statistics.mean(v), 4) for n, v in c.items()}}
            for k, c in collapse.items()]
    return Result(
        metrics=metrics,
        claims=_claims(collapse, {k: [c[-1] for c in curves] for k, curves in continual.items()}, imbalance,
                       imbalance_seeds),
        figures={"class_mean_cosines.png": _plot_cosines(means), "continual.png": _plot_continual(continual)},
        tables={"collapse": rows,
                "imbalance": [{"ratio": r, "method": m, "balanced accuracy": statistics.mean(v),
                               "collapsed seeds": ", ".join(f"seed {s}" for s, _ in _collapsed(imbalance_seeds, v))
                               or "none"} for (r, m), v in imbalance.items()],
                "per_seed": [{"run": k, "per seed": ", ".join(f"seed {s}: {v:.3f}" for s, v in zip(*sv))}
                             for k, sv in per_seed.items()]},
        notes=(f"scikit-learn digits, 75/25 split; MLP 64-{'-'.join(map(str, cfg.hidden))} with ReLU features, "
               f"{D // 10} feature dimensions a class; SGD 0.05, momentum 0.9, weight decay 5e-4, cosine schedule, "
               f"{cfg.epochs} epochs, {cfg.collapse_seeds} seeds a head; fixed classifiers at logit scale "
               f"{cfg.scale:g}. The paper trains ResNets on CIFAR, ImageNet and their long-tailed and split "
               f"versions; see docs/orthogonal_classifier.md."),
    )


def _collapsed(seeds: list[int], scores: list[float]) -> list[tuple[int, float]]:
    """The ``(seed, balanced accuracy)`` of the seeds below :data:`COLLAPSED_BALANCED_ACCURACY`."""
    return [(seed, score) for seed, score in zip(seeds, scores) if score < COLLAPSED_BALANCED_ACCURACY]


def _claims(collapse: dict[str, dict[str, list[float]]], continual_final: dict[str, list[float]],
            imbalance: dict[tuple[int, str], list[float]], imbalance_seeds: list[int] | None = None) -> list[Claim]:
    """The four claims from per-seed values: ``collapse[head][metric]``, ``continual_final[head]`` (final average
    accuracy) and ``imbalance[(ratio, arm)]`` (balanced accuracy, one per seed of ``imbalance_seeds``: default
    0, 1, ...)."""
    fno, learnable, etf = collapse["fno"], collapse["learnable"], collapse["etf"]
    avg = statistics.mean
    n_collapse = f"mean of {len(fno['raw_cos'])} seeds"
    ratios = sorted({r for r, _ in imbalance})
    arms = list(dict.fromkeys(m for _, m in imbalance))
    seeds = list(range(len(imbalance[ratios[0], "none"]))) if imbalance_seeds is None else imbalance_seeds
    collapsed = [f"ratio {r} {m}: " + ", ".join(f"seed {s} ({v:.3f})" for s, v in _collapsed(seeds, imbalance[r, m]))
                 for r in ratios for m in arms if _collapsed(seeds, imbalance[r, m])]
    collapse_original = all_of(
        against(fno["raw_cos"], FIRST_MAX_RAW_MEAN_COS, better="lower",
                label="FNO mean |cos| of the raw class means at the end"),
        compare(fno["raw_cos"], fno["raw_cos_mid"], better="lower", label="FNO mean |cos|, end - half-way"),
        against(fno["own_block_energy"], FIRST_MIN_OWN_BLOCK_ENERGY, label="FNO own-block energy share"),
        compare(fno["nc1"], learnable["nc1"], better="lower", label="NC1, FNO - learnable"))
    # the arm judged before c5ab915, when it ran (extra_arc_variants)
    per_sample = "arc_mixup_per_sample"
    imbalance_original = _beats_mixup(imbalance, ratios, per_sample, "per-sample arc-mixup") \
        if all((r, per_sample) in imbalance for r in ratios) else None
    return [
        Claim(CLAIM_COLLAPSE, "raw class means orthogonal and aligned with the classifier's rows: zero-mean NC1-NC3 "
              "go to 0 (Theorem 1, Fig. 2)",
              f"ZNC2 mean cosine of the raw class means {avg(fno['raw_cos_mid']):.3f} -> {avg(fno['raw_cos']):.3f} "
              f"half-way -> end (learnable {avg(learnable['raw_cos']):.3f}, ETF {avg(etf['raw_cos']):.3f}); ZNC3 "
              f"{avg(fno['znc3']):.3f} (learnable {avg(learnable['znc3']):.3f} against its own rows); ZNC1 "
              f"{avg(fno['znc1']):.3f} vs learnable {avg(learnable['znc1']):.3f}; own-block energy "
              f"{avg(fno['own_block_energy']):.3f} (partial separation, reported, not judged) ({n_collapse})",
              all_of(against(fno["raw_cos"], MAX_RAW_MEAN_COS, better="lower",
                             label="FNO ZNC2 mean cosine of the raw class means at the end"),
                     compare(fno["raw_cos"], fno["raw_cos_mid"], better="lower",
                             label="FNO ZNC2 mean cosine, end - half-way"),
                     against(fno["znc3"], MAX_ZNC3, better="lower", label="FNO ZNC3 (zero-mean self-duality)"),
                     compare(fno["znc1"], learnable["znc1"], better="lower", label="ZNC1, FNO - learnable")),
              provenance="revised", revision=COLLAPSE_REVISION, original=collapse_original),
        Claim(CLAIM_ACCURACY, "fixed orthogonal classifiers match or beat learnable ones on popular benchmarks",
              f"test accuracy FNO {avg(fno['accuracy']):.3f}, learnable {avg(learnable['accuracy']):.3f}, ETF "
              f"{avg(etf['accuracy']):.3f} ({n_collapse})",
              compare(fno["accuracy"], learnable["accuracy"], margin=-ACCURACY_MARGIN,
                      label="test accuracy, FNO - learnable"),
              provenance="spec", subject="stand-in", stand_in=ACCURACY_STAND_IN),
        Claim(CLAIM_CONTINUAL, "feature dimension separation enhances softmax masking in continual learning",
              f"final average accuracy: FNO {avg(continual_final['fno']):.3f}, learnable "
              f"{avg(continual_final['learnable']):.3f} (mean of {len(continual_final['fno'])} seeds; same replay, "
              "same masking)",
              compare(continual_final["fno"], continual_final["learnable"], margin=MARGIN_CONTINUAL,
                      label="final average accuracy, FNO - learnable"),
              provenance="spec"),
        Claim(CLAIM_IMBALANCE, "arc-mixup tackles the limits of mixup on the hypersphere in imbalanced learning",
              "balanced accuracy " + " / ".join(arms) + ": " + ", ".join(
                  f"ratio {r}: " + " / ".join(f"{avg(imbalance[r, m]):.3f}" for m in arms) for r in ratios)
              + f" (mean of {len(seeds)} seeds; judged: arc_mixup, the official mask trainer's variant); collapsed "
              f"seeds (balanced accuracy < {COLLAPSED_BALANCED_ACCURACY:g}): " + ("; ".join(collapsed) or "none"),
              _beats_mixup(imbalance, ratios, "arc_mixup", "arc-mixup"),
              provenance="revised", revision=IMBALANCE_REVISION, original=imbalance_original),
    ]


def _beats_mixup(imbalance: dict[tuple[int, str], list[float]], ratios: list[int], arm: str, name: str):
    """At every imbalance ratio, ``arm`` above plain mixup and plain mixup above none (balanced accuracy, paired
    by seed)."""
    return all_of(*[part for r in ratios for part in (
        compare(imbalance[r, arm], imbalance[r, "mixup"], margin=MARGIN_IMBALANCE,
                label=f"ratio {r}: balanced accuracy, {name} - mixup"),
        compare(imbalance[r, "mixup"], imbalance[r, "none"], margin=MARGIN_IMBALANCE,
                label=f"ratio {r}: balanced accuracy, mixup - none"))])


def _plot_cosines(means: dict):
    fig, axes = plt.subplots(1, len(means), figsize=(3.3 * len(means), 3.1))
    for ax, (kind, m) in zip(np.atleast_1d(axes), means.items()):
        unit = m / m.norm(dim=1, keepdim=True)
        image = ax.imshow((unit @ unit.T).numpy(), vmin=-1, vmax=1, cmap="RdBu_r")
        ax.set_title(LABELS[kind], fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(image, ax=list(np.atleast_1d(axes)), shrink=0.8)
    fig.suptitle("cosine between raw class means", fontsize=10)
    return fig


def _plot_continual(continual: dict):
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    for kind, curves in continual.items():
        mean = np.mean(np.array(curves), axis=0)
        ax.plot(range(1, len(mean) + 1), mean, marker="o", label=LABELS[kind])
    ax.set_xlabel("tasks seen (2 classes each)")
    ax.set_ylabel("accuracy on classes seen")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
