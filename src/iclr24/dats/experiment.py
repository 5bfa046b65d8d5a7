"""Reproduction of "DATS: Difficulty-Aware Task Sampler for Meta-Learning Physics-Informed Neural Networks"
(Toloubidokhti et al., ICLR 2024), on the paper's convection benchmark, in miniature.

One meta-PINN learns u_t + beta u_x = 0 (u(0, x) = sin x, periodic) for the training configurations
beta in {1, 3, 5, 7, 9} and is evaluated on those and on the unseen beta in {2, 4, 6, 8} by relative L2
error against the exact solution. Samplers, each seed paired (same initialisation, same points):
uniform (full residual budget, half of it, and half of it refreshed by RAD as DATS-rp's points are),
self-paced, DATS-w (weights the meta-gradient) and DATS-rp at half the residual budget (moves residual
points between configurations, adding them by RAD).

Every claim is judged over the replicate seeds (``ctx.replicate_seeds``), paired, by :mod:`iclr24.core.evidence`:

1. DATS-w lowers the worst-case error across configurations vs uniform: the mean paired difference (DATS-w -
   uniform) is below 0 over its whole 95% interval.
2. DATS-w reduces disparity (standard deviation of the per-configuration errors): the same test.
3. DATS-rp with half the residual budget is at least as accurate as uniform at the full budget: the mean paired
   difference of the mean error is below 0 (the paper states no tolerance for "matches").
4. DATS's probabilities tilt toward the hardest configurations: the Spearman correlation between its
   time-averaged probabilities and uniform's per-configuration error, per seed, has a mean above 0.5.
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
from scipy.stats import spearmanr  # noqa: E402

from iclr24.core import Claim, Result, RunContext, experiment  # noqa: E402
from iclr24.core.evidence import against, compare  # noqa: E402
from iclr24.dats.models import HyperPINN, ParametricPINN  # noqa: E402
from iclr24.dats.pdes import Convection  # noqa: E402
from iclr24.dats.sampler import DifficultyAwareTaskSampler, SelfPacedTaskSampler, UniformTaskSampler  # noqa: E402
from iclr24.dats.training import meta_train, relative_l2  # noqa: E402

PAPER = ("DATS: Difficulty-Aware Task Sampler for Meta-Learning Physics-Informed Neural Networks (Toloubidokhti, "
         "Ye, Missel, Jiang, Kumar, Shrestha, Wang, ICLR 2024)")
CLAIM_WORST = "DATS improves the accuracy of the meta-learned PINN on its hardest configurations"
CLAIM_DISPARITY = "DATS reduces the performance disparity across PDE configurations"
CLAIM_BUDGET = "DATS-rp needs only a fraction of the residual budget of its baselines"
CLAIM_TILT = "DATS samples the difficult configurations more"
LABELS = {"uniform": "uniform", "uniform_half": "uniform, half budget",
          "uniform_rad_half": "uniform + RAD refresh, half budget", "self_paced": "self-paced", "dats_w": "DATS-w",
          "dats_rp": "DATS-rp, half budget"}
TRAIN_BETAS = (1.0, 3.0, 5.0, 7.0, 9.0)
TEST_BETAS = (2.0, 4.0, 6.0, 8.0)

# Thresholds, fixed before the run; claims 1-3 are paired comparisons over the replicate seeds.
#: DATS-w's worst-case error below uniform's: any improvement ("improves accuracy", abstract; no effect = 0).
MARGIN_WORST = 0.0
#: DATS-w's spread of the per-configuration errors below uniform's: any reduction ("reduces disparity", abstract).
MARGIN_DISPARITY = 0.0
#: DATS-rp at half the budget against uniform at the full budget: lower mean error. The abstract's "at a fraction
#: of the residual budget" gives no tolerance for "matches", so none is granted (no effect = 0).
MARGIN_BUDGET = 0.0
#: "Samples the difficult configurations more": Spearman correlation of DATS-w's mean probabilities with uniform's
#: per-configuration error above 0.5 (stated with the first version of this reproduction, before any run).
TILT_BAR = 0.5
#: The quick preset's training steps: cut from the first version's 1500 for run time with the verdicts in view (all
#: four inconclusive at both sizes, docs/dats.md), so a run at this budget judges claims on a revised budget.
QUICK_STEPS = 1200
QUICK_STEPS_REVISION = ("quick's training cut 1500 -> 1200 steps for run time, chosen with the verdicts in view "
                        "(all four inconclusive at both); the margins are the spec's")


#: The largest learning rate ``--set lr=`` takes: Adam moves each weight by about lr a step, so past 1 a step is
#: larger than the tanh network's inputs and weights (the presets use 3e-3; 1e308 overflows Adam's update).
MAX_LR = 1.0
#: The largest residual loss weight: 1000x the presets' 1 (the paper's convection configs use 0.005); 1e300
#: overflowed the float32 loss to inf.
MAX_RESIDUAL_WEIGHT = 1e3


@dataclass(frozen=True)
class Config:
    maximum: ClassVar[dict[str, float]] = {"lr": MAX_LR, "residual_weight": MAX_RESIDUAL_WEIGHT}
    seeds: int = 3
    model: Literal["parametric", "hyper"] = "parametric"  # "hyper": the paper's HyperPINN (target 7 layers x 8)
    hidden: int = 32
    depth: int = 3
    steps: int = 1500
    lr: float = 3e-3
    warmup: int = 50
    residual_points: int = 100  # per configuration, as in the paper's convection configs
    initial_points: int = 128
    boundary_points: int = 128
    validation_points: int = 500
    residual_weight: float = 1.0
    period: int = 10
    # The step size of each adaptive sampler is chosen from its grid on the first seed, by the summed
    # validation loss (DATS's own objective; the reference solution is not used).
    etas: tuple[float, ...] = (0.005, 0.05, 0.5, 5.0)  # 0.005: the paper's convection configs
    # every training configuration's minimum probability: in [0, 1 / 5] (5 configurations: at 1/5 all are uniform)
    floor: float = 0.02
    kl: Literal["consecutive", "uniform"] = "consecutive"  # DATS's KL reference: previous p, or uniform
    # DATS's scores divided by the root of the summed losses, so an eta carries across loss scales (ours; the
    # paper's raw scores by default, with eta chosen on the validation loss above).
    normalize_scores: bool = False

    def __post_init__(self) -> None:
        if min(self.seeds, self.hidden, self.depth, self.steps, self.residual_points, self.initial_points,
               self.boundary_points, self.validation_points, self.period) < 1:
            raise ValueError("seeds, sizes, steps, point counts and period must be >= 1")
        if not self.etas or min(self.etas) < 0:
            raise ValueError(f"etas must be a non-empty grid of step sizes >= 0, got {self.etas}")
        if self.residual_points < 20:
            raise ValueError(f"residual_points must be >= 20 (half of it is DATS-rp's budget, with a minimum of "
                             f"10 per configuration), got {self.residual_points}")
        if self.model not in ("parametric", "hyper"):
            raise ValueError(f"model must be 'parametric' or 'hyper', got {self.model!r}")
        if self.kl not in ("consecutive", "uniform"):
            raise ValueError(f"kl must be 'consecutive' or 'uniform', got {self.kl!r}")
        # The samplers mix their probabilities with the uniform distribution, p = floor + (1 - n floor) p': a
        # floor above 1 / n (n = 5 training configurations) would make 1 - n floor < 0, negative probabilities.
        top = 1 / len(TRAIN_BETAS)
        if not 0 <= self.floor <= top:
            raise ValueError(f"floor must be in [0, {top:g}] (1 / the {len(TRAIN_BETAS)} training configurations: "
                             f"every configuration's minimum probability), got {self.floor:g}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr:g}")


PRESETS = {
    "smoke": Config(seeds=3, hidden=16, depth=2, steps=60, residual_points=20, initial_points=16,
                    boundary_points=16, validation_points=32, etas=(0.5, 5.0)),
    # 1200 steps, not 1500: the same four verdicts at both sizes, at 0.8x the cost (docs/dats.md, "Profile and run
    # time").
    "quick": Config(steps=QUICK_STEPS),
    # The paper's meta-PINN (HyperPINN, target 7 x 8) and more of everything: hours on a CPU.
    "paper": Config(seeds=10, model="hyper", steps=4000, initial_points=256, boundary_points=256,
                    validation_points=1000),
}


#: The samplers with a step size to choose.
ADAPTIVE = ("self_paced", "dats_w", "dats_rp")


def _sampler(name: str, cfg: Config, n: int, eta: float | None):
    if name.startswith("uniform"):
        return UniformTaskSampler(n, period=cfg.period)
    if name == "self_paced":
        return SelfPacedTaskSampler(n, eta, period=cfg.period, floor=cfg.floor)
    return DifficultyAwareTaskSampler(n, eta, period=cfg.period, kl=cfg.kl, floor=cfg.floor,
                                      normalize_scores=cfg.normalize_scores)


def _model(cfg: Config, pde: Convection):
    bounds = [pde.t_range, pde.x_range], [(min(TRAIN_BETAS), max(TRAIN_BETAS))]
    if cfg.model == "hyper":
        return HyperPINN(*bounds)
    return ParametricPINN(*bounds, hidden=cfg.hidden, depth=cfg.depth)


def train_one(name: str, cfg: Config, seed: int, eta: float | None = None, callback=None):
    """Meta-train with sampler ``name`` (step size ``eta``) on ``seed``; returns (errors on TRAIN_BETAS +
    TEST_BETAS, history)."""
    pde, n = Convection(), len(TRAIN_BETAS)
    torch.manual_seed(seed)  # the same initialisation for every sampler
    model = _model(cfg, pde)
    half = name in ("uniform_half", "uniform_rad_half", "dats_rp")
    history = meta_train(
        model, pde, TRAIN_BETAS, _sampler(name, cfg, n, eta), steps=cfg.steps, lr=cfg.lr, warmup=cfg.warmup,
        mode="points" if half else "weight", budget=n * (cfg.residual_points // 2) if half else None,
        residual_points=cfg.residual_points, initial_points=cfg.initial_points,
        boundary_points=cfg.boundary_points, validation_points=cfg.validation_points,
        residual_weight=cfg.residual_weight, refresh="rad" if name == "uniform_rad_half" else "none",
        generator=torch.Generator().manual_seed(seed), callback=callback)
    return relative_l2(model, pde, TRAIN_BETAS + TEST_BETAS), history


@experiment(
    name="dats",
    paper=PAPER,
    presets=PRESETS,
    claims=[CLAIM_WORST, CLAIM_DISPARITY, CLAIM_BUDGET, CLAIM_TILT],
    description="A meta-PINN on the convection equation over beta in {1..9}: uniform, self-paced, DATS-w and "
                "DATS-rp (half the residual budget) task samplers, paired over seeds.",
)
def reproduce(cfg: Config, ctx: RunContext) -> Result:
    names = tuple(LABELS)
    errors: dict[str, list[np.ndarray]] = {n: [] for n in names}
    histories: dict[str, list] = {n: [] for n in names}
    eta_of: dict[str, float | None] = {n: None for n in names}
    sweep_rows = []
    seeds = ctx.replicate_seeds(cfg.seeds)
    runs = cfg.seeds * len(names) + len(ADAPTIVE) * (len(cfg.etas) - 1)
    with ctx.progress("meta-training", total=runs * cfg.steps) as bar:
        for s, seed in enumerate(seeds):
            for name in names:
                candidates = cfg.etas if s == 0 and name in ADAPTIVE else (eta_of[name],)
                best = None
                for eta in candidates:
                    e, h = train_one(name, cfg, seed, eta, callback=lambda step, loss: bar.advance(loss=loss))
                    validation = sum(h.validation_losses)
                    if len(candidates) > 1:
                        sweep_rows.append({"sampler": LABELS[name], "eta": eta,
                                           "summed validation loss": round(validation, 5),
                                           "worst L2 (not used to choose)": round(float(e.max()), 4)})
                    if best is None or validation < best[0]:
                        best = (validation, eta, e, h)
                _, eta_of[name], e, h = best
                errors[name].append(e)
                histories[name].append(h)
            ctx.log(f"seed {seed}: worst-case L2 " + ", ".join(f"{n} {errors[n][-1].max():.3f}" for n in names))

    per_seed = {n: {"worst": [float(e.max()) for e in errors[n]], "mean": [float(e.mean()) for e in errors[n]],
                    "std": [float(e.std()) for e in errors[n]]} for n in names}
    n_train = len(TRAIN_BETAS)
    tilt = [float(spearmanr(h.mean_probabilities(), e[:n_train]).statistic)
            for h, e in zip(histories["dats_w"], errors["uniform"])]
    tilt = [0.0 if np.isnan(v) else v for v in tilt]  # constant probabilities: no tilt
    metrics = {"dats_tilt_spearman": statistics.mean(tilt)} | {f"{n}_eta": eta_of[n] for n in ADAPTIVE}
    at_edge = [LABELS[n] for n in ADAPTIVE if len(cfg.etas) > 1 and eta_of[n] in (min(cfg.etas), max(cfg.etas))]
    for n in names:
        stacked = np.stack(errors[n])
        metrics |= {f"{n}_worst_l2": statistics.mean(per_seed[n]["worst"]),
                    f"{n}_mean_l2": statistics.mean(per_seed[n]["mean"]),
                    f"{n}_std_l2": statistics.mean(per_seed[n]["std"]),
                    f"{n}_unseen_mean_l2": float(stacked[:, n_train:].mean())}
    betas = TRAIN_BETAS + TEST_BETAS
    rows = []
    for s, seed in enumerate(seeds):
        for n in names:
            rows.append({"seed": seed, "sampler": LABELS[n], "worst L2": round(per_seed[n]["worst"][s], 4),
                         "mean L2": round(per_seed[n]["mean"][s], 4), "std L2": round(per_seed[n]["std"][s], 4),
                         "final p": [round(v, 3) for v in histories[n][s].probabilities[-1]],
                         "final residual points": histories[n][s].residual_points[-1]})
    config_rows = [{"beta": b, "seen in training": b in TRAIN_BETAS,
                    **{LABELS[n]: round(float(np.stack(errors[n])[:, i].mean()), 4) for n in names}}
                   for i, b in enumerate(betas)]
    return Result(
        metrics=metrics,
        claims=_claims(per_seed, tilt, _provenance(cfg)),
        figures={"error_per_configuration.png": _plot_errors(errors, betas),
                 "task_probabilities.png": _plot_probabilities(histories)},
        tables={"per_seed": rows, "per_configuration": config_rows, "step_size_sweep": sweep_rows},
        notes=_notes(cfg, eta_of, at_edge),
    )


def _notes(cfg: Config, eta_of: dict, at_edge: list[str]) -> str:
    model = "HyperPINN (target 7 x 8)" if cfg.model == "hyper" else f"Parametric PINN {cfg.depth} x {cfg.hidden} tanh"
    chosen = ", ".join(f"{LABELS[n]} {eta_of[n]:g}" for n in ADAPTIVE)
    edge = f"at the edge of the grid: {', '.join(at_edge)}" if at_edge else "all inside the grid"
    return (f"{cfg.seeds} seeds, paired (same initialisation and points for every sampler). {model}; {cfg.steps} "
            f"Adam steps (lr {cfg.lr:g}, {cfg.warmup} warm-up, cosine); {cfg.residual_points} residual points per "
            f"configuration ({cfg.residual_points // 2} for the half-budget runs), {cfg.initial_points} initial and "
            f"{cfg.boundary_points} periodic-boundary points; loss L_ic + L_bc + {cfg.residual_weight:g} L_f. "
            f"Samplers update every {cfg.period} steps, probability floor {cfg.floor:g}, DATS with {cfg.kl} KL"
            f"{' and normalised scores' if cfg.normalize_scores else ''}. "
            f"Step sizes chosen on the first seed from {list(cfg.etas)} by the least summed validation loss: "
            f"{chosen} ({edge}). Errors: relative L2 on a 100 x 256 grid against sin(x - beta t), beta 1..9 "
            f"(2, 4, 6, 8 unseen). See docs/dats.md for the paper's setting.")


def _provenance(cfg: Config) -> dict[str, str]:
    """Where the claims' margins came from: the spec's pass rule or the first version of this reproduction, judged
    on a budget revised with results in view when the run trains for quick's :data:`QUICK_STEPS`."""
    if cfg.steps == QUICK_STEPS:
        return {"provenance": "revised", "revision": QUICK_STEPS_REVISION}
    return {"provenance": "spec"}


def _claims(per_seed: dict, tilt: list[float], provenance: dict[str, str]) -> list[Claim]:
    """The four claims from the per-seed summaries (``per_seed[sampler][key]``, one value per seed) and the per-seed
    tilt correlations; ``provenance`` (:func:`_provenance`) is every claim's."""
    def mean(key, name):
        return statistics.mean(per_seed[name][key])

    def lower_in(key, a, b):  # seeds where a's value is below b's, for the measured text
        return f"{sum(x < y for x, y in zip(per_seed[a][key], per_seed[b][key]))}/{len(per_seed[a][key])}"

    def paired(key, a, b, margin, label):
        return compare(per_seed[a][key], per_seed[b][key], better="lower", margin=margin, unit="seeds",
                       label=label)

    return [
        Claim(CLAIM_WORST, "improves accuracy across PDE configurations over uniform and self-paced sampling "
              "(abstract; convection, Burgers, reaction-diffusion, Helmholtz, Navier-Stokes)",
              f"worst-case relative L2 over the 9 configurations, mean over seeds: DATS-w "
              f"{mean('worst', 'dats_w'):.3f} "
              f"vs uniform {mean('worst', 'uniform'):.3f} (self-paced {mean('worst', 'self_paced'):.3f}); DATS-w lower "
              f"in {lower_in('worst', 'dats_w', 'uniform')} seeds",
              paired("worst", "dats_w", "uniform", MARGIN_WORST, "worst-case L2, DATS-w - uniform"), **provenance),
        Claim(CLAIM_DISPARITY, "reduces performance disparity across PDE configurations (abstract)",
              f"std of the per-configuration L2, mean over seeds: DATS-w {mean('std', 'dats_w'):.3f} vs uniform "
              f"{mean('std', 'uniform'):.3f}; lower in {lower_in('std', 'dats_w', 'uniform')} seeds",
              paired("std", "dats_w", "uniform", MARGIN_DISPARITY, "std of L2 over configurations, DATS-w - uniform"),
              **provenance),
        Claim(CLAIM_BUDGET, "at only a fraction of the residual sampling budgets required by its baselines (abstract)",
              f"mean relative L2, mean over seeds: DATS-rp at half budget {mean('mean', 'dats_rp'):.3f} vs uniform at "
              f"full budget {mean('mean', 'uniform'):.3f}, lower in {lower_in('mean', 'dats_rp', 'uniform')} seeds "
              f"(at the same half budget: uniform {mean('mean', 'uniform_half'):.3f}, DATS-rp lower in "
              f"{lower_in('mean', 'dats_rp', 'uniform_half')} seeds; uniform with RAD refresh "
              f"{mean('mean', 'uniform_rad_half'):.3f}, DATS-rp lower in "
              f"{lower_in('mean', 'dats_rp', 'uniform_rad_half')} seeds)",
              paired("mean", "dats_rp", "uniform", MARGIN_BUDGET, "mean L2, DATS-rp at half budget - uniform at full"),
              **provenance),
        Claim(CLAIM_TILT, "allocates more probability (weight or residual points) to the harder configurations "
              "(the paper's analysis of the learned probabilities)",
              f"Spearman(DATS-w's mean probability, uniform's error) per training configuration: mean "
              f"{statistics.mean(tilt):+.2f} (per seed {', '.join(f'{v:+.2f}' for v in tilt)})",
              against(tilt, TILT_BAR, better="higher", unit="seeds",
                      label="Spearman(DATS-w's mean probability, uniform's error)"), **provenance),
    ]


def _plot_errors(errors: dict, betas: tuple[float, ...]):
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    order = np.argsort(betas)
    for n, e in errors.items():
        stacked = np.stack(e)[:, order]
        ax.errorbar(np.asarray(betas)[order], stacked.mean(0), yerr=stacked.std(0), label=LABELS[n], marker="o",
                    capsize=2, linewidth=1)
    for b in TRAIN_BETAS:
        ax.axvline(b, color="grey", linewidth=0.5, linestyle=":")
    ax.set_yscale("log")
    ax.set_xlabel("beta (dotted: training configurations)")
    ax.set_ylabel("relative L2 error")
    ax.set_title("error per configuration (mean ± std over seeds)", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _plot_probabilities(histories: dict):
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.5))
    for ax, name, key in ((axes[0], "dats_w", "probabilities"), (axes[1], "self_paced", "probabilities"),
                          (axes[2], "dats_rp", "residual_points")):
        h = histories[name][0]
        values = np.asarray(getattr(h, key))
        for i, b in enumerate(TRAIN_BETAS):
            ax.plot(h.update_steps, values[:, i], label=f"beta {b:g}")
        ax.set_xlabel("step")
        ax.set_ylabel("probability" if key == "probabilities" else "residual points")
        ax.set_title(f"{LABELS[name]} (first seed)", fontsize=10)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig
