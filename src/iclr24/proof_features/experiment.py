"""Reproduction of ProFIt's claims on scikit-learn's 8x8 digits.

Three MLPs (64-64-32-10) trained standard, with PGD, and certified (IBP); for the first
``n_proofs`` test points each net classifies correctly and CROWN proves robust at ``eps``:
the initial and sufficient proof-feature counts (the official linear search, and binary
search beside it), sufficient-set sizes when features are ordered by priority, by the
paper's Gradient baseline (Weight_ABS) or at random (the official ablation), how often the
top-k features alone preserve the proof (k = 1, 2, 5; ProFIt vs random vs Gradient), and how
much of the top proof feature's input gradient falls on spurious pixels (the 25% of pixels
with the lowest variance: the border of the digit images).

Every claim is judged over trained networks: ``networks`` replicates per training kind (3 in quick), each with
its own data split and initialisation (``ctx.replicate_seeds``), the three kinds of one replicate sharing both.
A network's proofs (the first ``n_proofs`` test images it classifies correctly and CROWN proves) are one cluster:
the within-network claims average them per network (``clusters=``), the spurious-pixel claim compares the
networks' mean shares paired by replicate. n counts networks, never images; a ``--seeds`` group pools the
networks of several runs.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

from iclr24.core import Check, Claim, Result, RunContext, experiment  # noqa: E402
from iclr24.core.evidence import against, all_of, compare, not_run  # noqa: E402
from iclr24.proof_features.profit import (  # noqa: E402
    ORDERS,
    feature_gradients,
    feature_order,
    proof_features,
    proves_with,
    sufficient_set,
    top_k_preserved,
)
from iclr24.proof_features.training import TRAINING_KINDS, make_mlp, train  # noqa: E402
from iclr24.proof_features.verify import as_affine_net, verify  # noqa: E402

PAPER = "Interpreting Robustness Proofs of Deep Neural Networks (Banerjee, Singh, Singh, ICLR 2024)"
LABELS = {"standard": "standard", "pgd": "PGD", "ibp": "certified (IBP)"}
# The paper's MNIST eps=0.02 CROWN numbers: initial -> final mean proof features (official result files).
PAPER_COUNTS = ("MNIST eps=0.02: standard 61.5 -> 1.97, PGD 52.7 -> 2.34, CROWN-IBP 31.1 -> 6.17; "
                "CIFAR-10 2/255: PGD 65.7 -> 6.2, COLT 87.4 -> 7.8, CROWN-IBP 23.1 -> 5.1")

CLAIM_SMALL = "a proof needs only a small sufficient set of its proof features"
CLAIM_ORDER = "ordering features by ProFIt's priority gives far smaller sufficient sets than the baselines' orders"
CLAIM_TOPK = "ProFIt's top features preserve more proofs than random or gradient-chosen ones"
PAPER_ORDER = "official MNIST standard net, mean sufficient set by order: priority 1.97, random 20.3, Gradient 5.25"
PAPER_TOPK = "top-5 proofs preserved, ProFIt / random / Gradient: CROWN-IBP 68/28/15%, COLT 90/10/32%, PGD 95/28/57%"
CLAIM_SPURIOUS = "proofs of standard nets lean most on spurious input features, certified nets least"

# Thresholds. Where each came from is the claim's provenance (docs/proof_features.md, "Evidence, second pass"):
# the spec's pass criteria (/work/shared/specs/proof_features.md, derived from the paper's anchors), written before
# the method first ran, except where a revision is recorded.
SMALL_RATIO = 0.25  # final <= 0.25 x initial features: the paper's loosest anchor is CROWN-IBP 31.1 -> 6.17 (0.20)
SMALL_SIZE = 3  # median sufficient set <= 3 (paper: standard 1.97, PGD 2.34 on MNIST): more than half the proofs
MEDIAN_SHARE = 0.5  # ... i.e. the share of proofs with <= SMALL_SIZE features is above one half
# Added with the paper's ordering ablation (81b56b5), in the commit that first measured it:
ORDER_RANDOM_RATIO = 0.5  # priority order <= 0.5 x random order (paper: 1.97 vs 20.3)
ORDER_MARGIN_GRADIENT = 0.0  # priority order smaller than Gradient's: any improvement (paper: 1.97 vs 5.25)
TOPK = 5  # the paper's k (81b56b5; the spec's rule was k = 2, SPEC_TOPK)
TOPK_MARGIN_RANDOM = 0.30  # ProFIt's top-k preserves >= 30 points more proofs than random (spec; paper 40-80)
TOPK_MARGIN_GRADIENT = 0.10  # ... and >= 10 points more than Gradient (81b56b5; paper's smallest gap 38 points)
SPEC_TOPK = 2  # the spec's pass rule: top-2 ProFIt >= random + 30 points (the top-k claim's first definition)
SPURIOUS_RATIO = 5.0  # standard's spurious gradient share >= 5x certified's (spec)
UNIT = "trained networks"
TRIPLES = "replicates (one net of each kind, same split and initialisation)"

ORDER_REVISION = ("added in 81b56b5 with the paper's ordering ablation, after the method's first runs; its thresholds "
                  "(priority <= 0.5 x random's set, < Gradient's) were set in the commit that first measured it")
TOPK_REVISION = ("the spec's rule was top-2 ProFIt >= random + 0.30; 81b56b5 moved to the paper's k = 5 and added "
                 "the paper's Gradient baseline (margin 0.10) after a review had measured Weight_ABS beating ProFIt at "
                 "top-1; the change made the claim harder (the first definition is shown beside it)")


@dataclass(frozen=True)
class Config:
    eps: float = 0.02
    epochs: int = 20
    n_proofs: int = 100  # per network
    networks: int = 3  # trained networks per kind: the replicates every claim is judged over
    top_k: tuple[int, ...] = (1, 2, 5)  # the paper's k is 5, the spec's 2
    hidden: tuple[int, ...] = (64, 64, 32)

    def __post_init__(self) -> None:
        if not self.eps > 0 or self.n_proofs < 1 or self.epochs < 1 or self.networks < 1:
            raise ValueError(f"eps must be > 0 and n_proofs, epochs, networks >= 1; got {self.eps}, {self.n_proofs}, "
                             f"{self.epochs}, {self.networks}")


PRESETS = {
    "smoke": Config(epochs=2, n_proofs=8),
    "quick": Config(),
    "paper": Config(epochs=60, n_proofs=300, networks=5),
}


def network_name(kind: str, seed: int) -> str:
    """A trained network's global name: its kind and the replicate seed that drew its split and initialisation
    (unique across the runs of a seed group, so pooling never merges two networks)."""
    return f"{kind}-net-seed{seed}"


@experiment(
    name="proof_features",
    paper=PAPER,
    presets=PRESETS,
    claims=[CLAIM_SMALL, CLAIM_ORDER, CLAIM_TOPK, CLAIM_SPURIOUS],
    description="ProFIt: the few proof features a robustness proof needs, and what they look at.",
)
def reproduce(cfg: Config, ctx: RunContext) -> Result:
    """Standard, PGD and IBP-trained MLPs on digits: sufficient proof features and their gradients."""
    digits = load_digits()
    X = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target)
    seeds = ctx.replicate_seeds(cfg.networks)
    nets, gradients_shown = [], {}
    with ctx.progress("training and proving", total=len(seeds) * len(TRAINING_KINDS)) as bar:
        for seed in seeds:  # one replicate: a split and an initialisation, shared by the three kinds
            gen = torch.Generator().manual_seed(seed)
            order = torch.randperm(len(y), generator=gen)
            train_idx, test_idx = order[: int(0.75 * len(y))], order[int(0.75 * len(y)):]
            variance = X[train_idx].var(0)
            spurious = variance <= variance.quantile(0.25)  # the 25% least varying pixels: the border
            for kind in TRAINING_KINDS:
                torch.manual_seed(seed)
                model = train(make_mlp(hidden=cfg.hidden), X[train_idx], y[train_idx], kind, eps=cfg.eps,
                              epochs=cfg.epochs, generator=gen)
                model.eval()
                with torch.no_grad():
                    accuracy = float((model(X[test_idx]).argmax(1) == y[test_idx]).float().mean())
                s, shown = _interpret(model, X, y, test_idx, spurious, cfg, seed)
                s.update(kind=kind, seed=seed, network=network_name(kind, seed), accuracy=accuracy)
                nets.append(s)
                gradients_shown.setdefault(kind, shown)
                ctx.log(f"{s['network']}: accuracy {accuracy:.3f}, {s['n_proofs']} proofs of {s['n_tried']} tried, "
                        f"features {s['initial_mean']:.1f} -> {s['final_mean']:.2f} (median {s['final_median']}; "
                        f"binary search {s['final_binary_mean']:.2f}, differs on {s['search_differs']}), by order "
                        + ", ".join(f"{o} {s['order_' + o]:.2f}" for o in ORDERS)
                        + f", top-{cfg.top_k[-1]} ProFIt / random / Gradient {s['topk_profit'][-1]:.2f} / "
                        f"{s['topk_random'][-1]:.2f} / {s['topk_gradient'][-1]:.2f}, spurious gradient share "
                        f"{s['spurious_share']:.3f}")
                bar.advance()

    stats = {kind: _over_networks([s for s in nets if s["kind"] == kind]) for kind in TRAINING_KINDS}
    metrics = {}
    for kind, s in stats.items():
        for key in ("accuracy", "initial_mean", "final_mean", "final_median", "final_binary_mean", "search_differs",
                    "kept_proves", "spurious_share", "n_proofs", *(f"order_{o}" for o in ORDERS)):
            metrics[f"{kind}_{key}"] = s[key]
        for k, p, r, g in zip(cfg.top_k, s["topk_profit"], s["topk_random"], s["topk_gradient"]):
            metrics.update({f"{kind}_top{k}_profit": p, f"{kind}_top{k}_random": r, f"{kind}_top{k}_gradient": g})
    for s in nets:
        metrics[f"{s['network']}_spurious_share"] = s["spurious_share"]
    rows = [{"training": LABELS[s["kind"]], "network": s["network"], "accuracy": s["accuracy"],
             "proofs": s["n_proofs"], "initial": s["initial_mean"], "final": s["final_mean"],
             "final median": s["final_median"], "final (binary search)": s["final_binary_mean"],
             "random order": s["order_random"], "Gradient order": s["order_weight_abs"],
             "<= 5 features": s["share_le5"], f"top-{cfg.top_k[-1]} ProFIt": s["topk_profit"][-1],
             "spurious share": s["spurious_share"]} for s in nets]
    figures = {"gradient_maps.png": _plot_gradients(gradients_shown),
               "top_k_preserved.png": _plot_topk(stats, cfg.top_k)}
    notes = (f"Digits 8x8 in [0,1], L-inf eps={cfg.eps} clipped to [0,1], CROWN proofs; {cfg.networks} networks per "
             f"training kind (each replicate its own split and initialisation), {cfg.epochs} epochs each; claims over "
             f"networks. Paper (CROWN): {PAPER_COUNTS}. See docs/proof_features.md.")
    proved = [s for s in nets if s["n_proofs"]]
    checks = [Check("every sufficient set re-verifies (the linear search keeps a set only if CROWN still proves it)",
                    all(s["kept_proves"] == 1.0 for s in proved),
                    ", ".join(f"{s['network']} {s['kept_proves']:.2f}" for s in proved))]
    return Result(metrics=metrics, claims=_claims(nets, cfg), figures=figures, tables={"proofs": rows}, notes=notes,
                  checks=checks)


def _interpret(model, X, y, test_idx, spurious, cfg: Config, seed: int):
    """One network's proofs: per-proof values (``per_proof``) and their summaries."""
    net = as_affine_net(model, (X.shape[1],))
    rng = torch.Generator().manual_seed(seed)
    initial, final, final_binary, kept_ok, spurious_share, shown = [], [], [], [], [], []
    by_order = {o: [] for o in ORDERS}
    hits = {name: [[] for _ in cfg.top_k] for name in ("profit", "random", "gradient")}  # per k, 0/1 per proof
    tried = 0
    for i in test_idx.tolist():
        if len(initial) >= cfg.n_proofs:
            break
        with torch.no_grad():
            if int(model(X[i:i + 1]).argmax()) != int(y[i]):
                continue
        tried += 1
        result = verify(net, X[i], cfg.eps, int(y[i]), "crown", clip=(0.0, 1.0))
        if not result.verified:
            continue
        pf = proof_features(result, net)
        kept = sufficient_set(pf)  # the official linear search, priority order
        mask = torch.zeros_like(pf.priority, dtype=torch.bool)
        mask[kept] = True
        initial.append(pf.n_initial)
        final.append(len(kept))
        final_binary.append(len(sufficient_set(pf, search="binary")))
        kept_ok.append(proves_with(pf, mask))
        for o in ORDERS:
            by_order[o].append(len(kept) if o == "priority" else len(sufficient_set(pf, order=o, generator=rng)))
        grads = feature_gradients(pf)  # (n_hidden, n_input), of the post-ReLU features
        top = grads[kept[0]].abs()
        spurious_share.append(float(top[spurious].sum() / top.sum().clamp_min(1e-12)))
        if len(shown) < 4:
            shown.append(grads[kept[0]].reshape(8, 8).numpy())
        orders = {"profit": feature_order(pf, "priority"), "random": feature_order(pf, "random", rng),
                  "gradient": feature_order(pf, "weight_abs")}
        for name, order in orders.items():
            for j, k in enumerate(cfg.top_k):
                hits[name][j].append(float(top_k_preserved(pf, order, k)))
    n = max(1, len(initial))

    def mean(values):
        return statistics.mean(values) if values else float("nan")

    stats = {
        "n_proofs": len(initial), "n_tried": tried,
        "initial_mean": mean(initial), "final_mean": mean(final), "final_binary_mean": mean(final_binary),
        "search_differs": sum(a != b for a, b in zip(final, final_binary)),
        "final_median": float(statistics.median(final)) if final else float("nan"),
        "share_le5": sum(f <= 5 for f in final) / n,
        "kept_proves": sum(kept_ok) / n,
        "spurious_share": mean(spurious_share),
        **{f"order_{o}": mean(v) for o, v in by_order.items()},
        **{f"topk_{name}": [sum(h) / n for h in v] for name, v in hits.items()},
        # the replicates' raw material: one value per proof, averaged per network by the claims
        "per_proof": {"initial": initial, "final": final, **{f"order_{o}": v for o, v in by_order.items()},
                      "spurious_share": spurious_share,
                      **{f"top{k}_{name}": v[j] for name, v in hits.items() for j, k in enumerate(cfg.top_k)}},
    }
    return stats, shown


def _over_networks(nets: list[dict]) -> dict:
    """One kind's summary: the mean over its networks with proofs of each network's value (counts summed)."""
    proved = [s for s in nets if s["n_proofs"]] or nets[:1]

    def mean(key):
        return statistics.mean(s[key] for s in proved)

    out = {key: mean(key) for key in ("initial_mean", "final_mean", "final_median", "final_binary_mean", "kept_proves",
                                      "spurious_share", "share_le5", *(f"order_{o}" for o in ORDERS))}
    out["accuracy"] = statistics.mean(s["accuracy"] for s in nets)  # every network's, with proofs or not
    out.update(n_proofs=sum(s["n_proofs"] for s in nets), search_differs=sum(s["search_differs"] for s in nets),
               networks=len(nets), networks_proved=sum(bool(s["n_proofs"]) for s in nets))
    for name in ("profit", "random", "gradient"):
        out[f"topk_{name}"] = [statistics.mean(v) for v in zip(*(s[f"topk_{name}"] for s in proved))]
    return out


def _claims(nets: list[dict], cfg: Config) -> list[Claim]:
    """The four claims over trained networks. ``nets`` holds one dict per network (``_interpret``'s, with its
    ``kind``, replicate ``seed`` and ``network`` name): a network's proofs are one cluster."""
    kinds = [k for k in TRAINING_KINDS if any(s["kind"] == k for s in nets)]
    k5 = TOPK if TOPK in cfg.top_k else cfg.top_k[-1]

    def proofs(kind: str, key: str) -> tuple[list[float], list[str]]:
        """Every proof's value of ``key`` over the kind's networks, with the network each belongs to."""
        own = [s for s in nets if s["kind"] == kind]
        return ([v for s in own for v in s["per_proof"][key]],
                [s["network"] for s in own for _ in s["per_proof"][key]])

    def per_kind(build) -> list:
        """``build(kind, label)``'s parts for every kind; a kind none of whose networks proved anything is not
        run."""
        parts = []
        for kind in kinds:
            if proofs(kind, "final")[0]:
                parts += build(kind, LABELS[kind])
            else:
                parts.append(not_run(f"no proofs by any {LABELS[kind]} net"))
        return parts

    def small(kind, label):
        (final, networks), (initial, _) = proofs(kind, "final"), proofs(kind, "initial")
        return [compare(final, [SMALL_RATIO * v for v in initial], better="lower", clusters=networks, unit=UNIT,
                        label=f"{label}: final - {SMALL_RATIO:g} x initial features"),
                against([float(v <= SMALL_SIZE) for v in final], MEDIAN_SHARE, clusters=networks, unit=UNIT,
                        label=f"{label}: share of proofs with <= {SMALL_SIZE} features")]

    def order(kind, label):
        (priority, networks), (random, _), (gradient, _) = (proofs(kind, f"order_{o}")
                                                            for o in ("priority", "random", "weight_abs"))
        return [compare(priority, [ORDER_RANDOM_RATIO * v for v in random], better="lower", clusters=networks,
                        unit=UNIT, label=f"{label}: priority - {ORDER_RANDOM_RATIO:g} x random order's set"),
                compare(priority, gradient, better="lower", margin=ORDER_MARGIN_GRADIENT, clusters=networks,
                        unit=UNIT, label=f"{label}: priority - Gradient order's set")]

    def topk(k, baselines):
        def build(kind, label):
            profit, networks = proofs(kind, f"top{k}_profit")
            return [compare(profit, proofs(kind, f"top{k}_{name}")[0], margin=margin, clusters=networks, unit=UNIT,
                            label=f"{label}: top-{k} preserved, ProFIt - {shown}")
                    for name, shown, margin in baselines]
        return build

    # the spurious share per network, paired across kinds by replicate (one split and initialisation)
    share = {}
    for s in nets:
        if s["n_proofs"]:
            share.setdefault(s["seed"], {})[s["kind"]] = statistics.mean(s["per_proof"]["spurious_share"])
    paired = [seed for seed, by_kind in share.items() if len(by_kind) == len(TRAINING_KINDS)]

    def shares(kind):
        return [share[seed][kind] for seed in paired]

    if paired:
        spurious = all_of(
            compare(shares("standard"), shares("pgd"), unit=TRIPLES, label="spurious share, standard - PGD"),
            compare(shares("pgd"), shares("ibp"), unit=TRIPLES, label="spurious share, PGD - certified"),
            compare(shares("standard"), [SPURIOUS_RATIO * v for v in shares("ibp")], unit=TRIPLES,
                    label=f"spurious share, standard - {SPURIOUS_RATIO:g} x certified"))
    else:
        spurious = not_run("no replicate whose three nets all proved something")

    stats = {kind: _over_networks([s for s in nets if s["kind"] == kind]) for kind in kinds}
    j5 = cfg.top_k.index(k5)
    networks = ", ".join(f"{LABELS[k]} {stats[k]['networks_proved']}" for k in kinds)
    over = (f"means over the networks with proofs ({networks}; "
            + ", ".join(f"{LABELS[k]} {stats[k]['n_proofs']}" for k in kinds) + " proofs)")
    per_network = "; ".join(f"{LABELS[k]} " + ", ".join(f"{share[seed][k]:.3f}" for seed in paired) for k in kinds)
    if SPEC_TOPK in cfg.top_k:
        topk_original = all_of(*per_kind(topk(SPEC_TOPK, [("random", "random", TOPK_MARGIN_RANDOM)])))
    else:
        topk_original = not_run(f"top-{SPEC_TOPK} (the spec's k) is not in this preset's top_k {cfg.top_k}")
    return [
        Claim(CLAIM_SMALL, paper=PAPER_COUNTS,
              measured="initial -> final: " + ", ".join(
                  f"{LABELS[k]} {stats[k]['initial_mean']:.1f} -> {stats[k]['final_mean']:.2f} "
                  f"(network median {stats[k]['final_median']:.1f})" for k in kinds) + f"; {over}",
              evidence=all_of(*per_kind(small)), provenance="spec"),
        Claim(CLAIM_ORDER, paper=PAPER_ORDER,
              measured="mean sufficient set by order (priority / random / Gradient): " + ", ".join(
                  f"{LABELS[k]} {stats[k]['order_priority']:.2f} / {stats[k]['order_random']:.2f} / "
                  f"{stats[k]['order_weight_abs']:.2f}" for k in kinds) + f"; paired within proofs, {over}",
              evidence=all_of(*per_kind(order)), provenance="revised", revision=ORDER_REVISION),
        Claim(CLAIM_TOPK, paper=PAPER_TOPK,
              measured=f"top-{k5} preserved ProFIt / random / Gradient: " + ", ".join(
                  f"{LABELS[k]} {stats[k]['topk_profit'][j5]:.2f} / {stats[k]['topk_random'][j5]:.2f} / "
                  f"{stats[k]['topk_gradient'][j5]:.2f}" for k in kinds) + f"; paired within proofs, {over}",
              evidence=all_of(*per_kind(topk(k5, [("random", "random", TOPK_MARGIN_RANDOM),
                                                  ("gradient", "Gradient", TOPK_MARGIN_GRADIENT)]))),
              provenance="revised", revision=TOPK_REVISION, original=topk_original),
        Claim(CLAIM_SPURIOUS, paper="standard proofs rely on spurious features; certified training filters most, "
                                    "PGD in between (qualitative, Sec. 6)",
              measured="share of the top proof feature's |gradient| on the 25% lowest-variance pixels, mean over a "
                       f"network's proofs, per replicate: {per_network}; paired by replicate ({len(paired)})",
              evidence=spurious, provenance="spec"),
    ]


def _plot_gradients(shown: dict):
    cols = max(len(v) for v in shown.values()) or 1
    fig, axes = plt.subplots(len(shown), cols, figsize=(1.8 * cols, 1.9 * len(shown)), squeeze=False)
    for row, (kind, maps) in zip(axes, shown.items()):
        for ax in row:
            ax.axis("off")
        for ax, g in zip(row, maps):
            bound = float(np.abs(g).max()) or 1.0
            ax.imshow(g, cmap="RdBu_r", vmin=-bound, vmax=bound)
        row[0].set_title(LABELS[kind], fontsize=9, loc="left")
    fig.suptitle("Input gradient of the top proof feature, first proofs", fontsize=10)
    fig.tight_layout()
    return fig


def _plot_topk(stats: dict, top_k: tuple[int, ...]):
    fig, axes = plt.subplots(1, len(stats), figsize=(3.2 * len(stats), 3), sharey=True)
    for ax, (kind, s) in zip(np.atleast_1d(axes), stats.items()):
        for name, style in (("profit", "o-"), ("gradient", "s--"), ("random", "^:")):
            ax.plot(top_k, s[f"topk_{name}"], style, label=name)
        ax.set_title(LABELS[kind], fontsize=10)
        ax.set_xlabel("features kept (k)")
        ax.set_ylim(-0.02, 1.02)
    np.atleast_1d(axes)[0].set_ylabel("proofs preserved")
    np.atleast_1d(axes)[0].legend(fontsize=8)
    fig.tight_layout()
    return fig
