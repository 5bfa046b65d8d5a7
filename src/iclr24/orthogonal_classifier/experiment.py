"""Reproduction of the fixed non-negative orthogonal classifier's claims on digits.

1. Zero-mean neural collapse: with the fixed non-negative orthogonal classifier (FNO) the raw class means
   of the ReLU features become nearly orthogonal (mean |cos| < 0.5, falling with training), concentrate
   in their own class's feature block, and NC1 is below the learnable classifier's.
2. Accuracy: at least the learnable classifier's minus one point.
3. Continual learning (split digits, 5 tasks of 2 classes, experience replay, masked softmax): final
   average accuracy of FNO at least the learnable classifier's, over seeds.
4. Imbalanced learning (long-tailed digits, imbalance ratios 10 and 100, FNO head): balanced accuracy of
   arc-mixup with masking >= plain mixup >= none, over seeds.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import ClassVar

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

from iclr24.core import Claim, Result, RunContext, experiment  # noqa: E402
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
HEADS = {"fno": FixedNonNegativeOrthogonalClassifier, "learnable": LearnableClassifier, "etf": SimplexETFClassifier}
LABELS = {"fno": "fixed non-negative orthogonal", "learnable": "learnable", "etf": "fixed simplex ETF"}


@dataclass(frozen=True)
class Config:
    allow_zero: ClassVar[tuple[str, ...]] = ("buffer_size",)  # 0: continual learning without replay
    hidden: tuple[int, ...] = (256, 256, 120)  # the last width is the feature dimension (12 a class)
    scale: float = 5.0  # logit scale of the fixed classifiers
    epochs: int = 300
    continual_seeds: int = 5
    continual_epochs: int = 20
    buffer_size: int = 50
    imbalance_ratios: tuple[int, ...] = (10, 100)
    imbalance_seeds: int = 3
    imbalance_epochs: int = 100
    alpha: float = 1.0

    def __post_init__(self) -> None:
        if not self.hidden or self.hidden[-1] < 10:
            raise ValueError(f"hidden must end in a feature dimension >= 10 (the classes), got {self.hidden}")
        if min(self.epochs, self.continual_seeds, self.continual_epochs, self.imbalance_seeds,
               self.imbalance_epochs) < 1 or self.epochs < 2:
            raise ValueError("epochs must be >= 2 and the other counts >= 1")


PRESETS = {
    "smoke": Config(hidden=(32, 20), epochs=4, continual_seeds=1, continual_epochs=1, imbalance_ratios=(10,),
                    imbalance_seeds=1, imbalance_epochs=2),
    "quick": Config(),
    "paper": Config(epochs=1200, continual_seeds=10, imbalance_seeds=10, imbalance_epochs=300),
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

    n_runs = len(HEADS) + 2 * cfg.continual_seeds + 3 * len(cfg.imbalance_ratios) * cfg.imbalance_seeds
    metrics, collapse, means, per_seed = {}, {}, {}, {}
    with ctx.progress("training", total=n_runs) as bar:
        for kind in HEADS:
            torch.manual_seed(ctx.seed)
            net = Net(64, cfg.hidden, head(kind, ctx.seed))
            history = {}

            def checkpoint(epoch, net=net, history=history):
                if epoch in (cfg.epochs // 2, cfg.epochs):
                    with torch.no_grad():
                        history[epoch] = raw_mean_cosine(net.encoder(Xtr), ytr)

            train_classifier(net, Xtr, ytr, epochs=cfg.epochs, generator=torch.Generator().manual_seed(ctx.seed + 1),
                             checkpoint=checkpoint)
            with torch.no_grad():
                features = net.encoder(Xtr)
            accuracy, _ = evaluate(net, Xte, yte, 10)
            collapse[kind] = {"accuracy": accuracy, "nc1": nc1(features, ytr),
                              "nc2_equinorm": nc2_equinorm(features, ytr),
                              "nc3": nc3_self_duality(features, ytr, net.head.weight.detach()),
                              "raw_cos_mid": history[cfg.epochs // 2], "raw_cos": history[cfg.epochs]}
            if kind == "fno":
                collapse[kind]["own_block_energy"] = own_block_energy(features, ytr, net.head.owner)
                collapse[kind]["nc3_zero_mean"] = nc3_self_duality(features, ytr, net.head.weight, centred=False)
            means[kind] = class_means(features, ytr)[1]
            ctx.log(f"{kind}: accuracy {accuracy:.3f}, NC1 {collapse[kind]['nc1']:.3f}, raw-mean |cos| "
                    f"{collapse[kind]['raw_cos_mid']:.3f} -> {collapse[kind]['raw_cos']:.3f}")
            bar.advance()
        metrics.update({f"{k}_{name}": v for k, c in collapse.items() for name, v in c.items()})

        tasks = [(Xtr[(ytr // 2) == t], ytr[(ytr // 2) == t]) for t in range(5)]
        continual = {kind: [] for kind in ("fno", "learnable")}
        for kind in continual:
            for seed in range(cfg.continual_seeds):
                torch.manual_seed(ctx.seed + seed)
                net = Net(64, cfg.hidden, head(kind, ctx.seed + seed))
                curve = []
                for t, trained in enumerate(continual_er(net, tasks, epochs=cfg.continual_epochs,
                                                         buffer_size=cfg.buffer_size,
                                                         generator=torch.Generator().manual_seed(ctx.seed + seed))):
                    seen = (yte // 2) <= t
                    curve.append(evaluate(trained, Xte[seen], yte[seen], 10)[0])
                continual[kind].append(curve)
                bar.advance()
        for kind, curves in continual.items():
            metrics[f"continual_{kind}_final"] = statistics.mean(c[-1] for c in curves)
            per_seed[f"continual, {kind}"] = [round(c[-1], 3) for c in curves]
        ctx.log(f"continual (final average accuracy over {cfg.continual_seeds} seeds): FNO "
                f"{metrics['continual_fno_final']:.3f}, learnable {metrics['continual_learnable_final']:.3f}")

        imbalance = {}
        for ratio in cfg.imbalance_ratios:
            counts = [max(1, round(int((ytr == 0).sum()) * ratio ** (-c / 9))) for c in range(10)]
            keep = torch.cat([torch.nonzero(ytr == c).flatten()[:n] for c, n in enumerate(counts)])
            for method in ("none", "mixup", "arc_mixup"):
                scores = []
                for seed in range(cfg.imbalance_seeds):
                    torch.manual_seed(ctx.seed + seed)
                    net = Net(64, cfg.hidden, head("fno", ctx.seed + seed))
                    train_imbalanced(net, Xtr[keep], ytr[keep], method=method, epochs=cfg.imbalance_epochs,
                                     alpha=cfg.alpha, generator=torch.Generator().manual_seed(ctx.seed + seed))
                    scores.append(evaluate(net, Xte, yte, 10)[1])
                    bar.advance()
                imbalance[ratio, method] = statistics.mean(scores)
                per_seed[f"imbalance {ratio}, {method}"] = [round(v, 3) for v in scores]
                metrics[f"imbalance_{ratio}_{method}_balanced_accuracy"] = imbalance[ratio, method]
            ctx.log(f"imbalance ratio {ratio}: balanced accuracy none {imbalance[ratio, 'none']:.3f}, mixup "
                    f"{imbalance[ratio, 'mixup']:.3f}, arc-mixup {imbalance[ratio, 'arc_mixup']:.3f}")

    rows = [{"classifier": LABELS[k], **{n: round(v, 4) for n, v in c.items()}} for k, c in collapse.items()]
    return Result(
        metrics=metrics,
        claims=_claims(collapse, metrics, imbalance, cfg),
        figures={"class_mean_cosines.png": _plot_cosines(means), "continual.png": _plot_continual(continual)},
        tables={"collapse": rows, "imbalance": [{"ratio": r, "method": m, "balanced accuracy": v}
                                                for (r, m), v in imbalance.items()],
                "per_seed": [{"run": k, "per seed": v} for k, v in per_seed.items()]},
        notes=(f"scikit-learn digits, 75/25 split; MLP 64-{'-'.join(map(str, cfg.hidden))} with ReLU features, "
               f"{D // 10} feature dimensions a class; SGD 0.05, momentum 0.9, weight decay 5e-4, cosine schedule, "
               f"{cfg.epochs} epochs; fixed classifiers at logit scale {cfg.scale:g}. The paper trains ResNets on "
               f"CIFAR, ImageNet and their long-tailed and split versions; see docs/orthogonal_classifier.md."),
    )


def _claims(collapse: dict, metrics: dict, imbalance: dict, cfg: Config) -> list[Claim]:
    fno, learnable = collapse["fno"], collapse["learnable"]
    order = {r: (imbalance[r, "arc_mixup"], imbalance[r, "mixup"], imbalance[r, "none"]) for r in cfg.imbalance_ratios}
    return [
        Claim(CLAIM_COLLAPSE, "raw class means orthogonal and aligned with the classifier's rows (Theorem 1, Fig. 2)",
              f"raw-mean |cos| {fno['raw_cos_mid']:.3f} -> {fno['raw_cos']:.3f} (learnable {learnable['raw_cos']:.3f},"
              f" ETF {collapse['etf']['raw_cos']:.3f}); own-block energy {fno['own_block_energy']:.3f}; NC1 "
              f"{fno['nc1']:.3f} vs learnable {learnable['nc1']:.3f}",
              fno["raw_cos"] < 0.5 and fno["raw_cos"] < fno["raw_cos_mid"] and fno["own_block_energy"] > 0.7
              and fno["nc1"] < learnable["nc1"],
              "raw-mean |cos| < 0.5 and lower at the end than half-way; own-block energy > 0.7; NC1 below the "
              "learnable classifier's"),
        Claim(CLAIM_ACCURACY, "fixed orthogonal classifiers match or beat learnable ones on popular benchmarks",
              f"test accuracy FNO {fno['accuracy']:.3f}, learnable {learnable['accuracy']:.3f}, ETF "
              f"{collapse['etf']['accuracy']:.3f}", fno["accuracy"] >= learnable["accuracy"] - 0.01,
              "FNO accuracy >= learnable - 0.01"),
        Claim(CLAIM_CONTINUAL, "feature dimension separation enhances softmax masking in continual learning",
              f"final average accuracy over {cfg.continual_seeds} seeds: FNO {metrics['continual_fno_final']:.3f}, "
              f"learnable {metrics['continual_learnable_final']:.3f}",
              metrics["continual_fno_final"] >= metrics["continual_learnable_final"],
              "FNO's mean final average accuracy >= the learnable classifier's (same replay, same masking)"),
        Claim(CLAIM_IMBALANCE, "arc-mixup tackles the limits of mixup on the hypersphere in imbalanced learning",
              "balanced accuracy arc-mixup / mixup / none: " + ", ".join(
                  f"ratio {r}: {a:.3f} / {m:.3f} / {n:.3f}" for r, (a, m, n) in order.items()),
              all(a >= m >= n for a, m, n in order.values()),
              "at every imbalance ratio: arc-mixup + masking >= plain mixup >= none (mean over seeds)"),
    ]


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
