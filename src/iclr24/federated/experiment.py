"""Reproduction of the paper's claims: FedAvg vs local training, and weighted FedAvg under heterogeneity.

Synthetic (the paper's data model and network): K clients with n samples ``x = [y mu_k, xi]`` in d
dimensions, the two-layer ReLU CNN with m filters a sign, E local GD steps a round, R rounds, every method
from the same initialisation. Test error is each client's model on fresh samples of that client's
distribution, averaged over clients; each claim pairs the methods over seeds (one replicate per seed: fresh
clients and initialisation). Weighted FedAvg's similarity is computed on the clients' whole inputs, the input
features a client has; the claims rest on it. Beside it, at the claims' signal norm and on the heterogeneous
settings, the same method runs with the signal patch alone as its features: an oracle that knows where the
signal is and makes the mixing matrix block-diagonal by construction (the earlier version's features), reported
as a metric, in the claim's text and as the claim judged as first defined (``Claim.original``), never deciding.
Three signal settings: homogeneous, opposite (half the clients see ``-mu``) and orthogonal groups. The
signal/noise lens tracks ``max_r <w_{j,r}, j mu>`` and ``max_r <w_{y_i,r}, xi_i>`` over rounds.

Real data (the paper's Tables 1-2 in miniature): scikit-learn's digits split over 10 clients by a Dirichlet
label skew, a one-hidden-layer MLP, local training vs FedAvg vs weighted FedAvg, each client tested on its
own label mix.
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
from torch import nn  # noqa: E402

from iclr24.core import Check, Claim, Result, RunContext, experiment  # noqa: E402
from iclr24.core.evidence import all_of, compare, ratio  # noqa: E402
from iclr24.federated.algorithms import aggregation_weights, error_rate, federated_train  # noqa: E402
from iclr24.federated.data import HETEROGENEITY, digits_clients, signal_noise_clients  # noqa: E402
from iclr24.federated.model import TwoLayerCNN, noise_memorisation, signal_learning  # noqa: E402

PAPER = ("Understanding Convergence and Generalization in Federated Learning through Feature Learning Theory "
         "(Huang, Shi, Cai, Suzuki; ICLR 2024)")
METHODS = ("local", "fedavg", "weighted")
#: Weighted FedAvg with the signal patch as its features: reported beside the claims, never judged.
ORACLE = "weighted_oracle"
LABELS = {"local": "local (Singleset)", "fedavg": "FedAvg", "weighted": "weighted FedAvg",
          ORACLE: "weighted FedAvg, oracle signal patch"}

# Thresholds, fixed before the run (errors are fractions; each claim is paired over seeds).
#: FedAvg's error below local training's by more than 0.1 ("near-zero vs a large constant"; the spec's pass rule).
MARGIN_FEDAVG_OVER_LOCAL = 0.1
#: FedAvg's final signal/noise coefficient ratio over local training's: above 2x (stated with the first version
#: of this reproduction; the theory predicts about K = 10x).
MIN_SNR_GAIN = 2.0
#: Opposite signals: weighted FedAvg's error below FedAvg's by more than 0.3 (the spec's pass rule).
MARGIN_WEIGHTED_OPPOSITE = 0.3
#: Orthogonal groups, and the digits ordering: any improvement (no effect = 0).
MARGIN_WEIGHTED_ORTHOGONAL = 0.0
MARGIN_REAL = 0.0
#: The Flower simulation must reproduce the in-process loop to float rounding.
FLOWER_TOLERANCE = 1e-6
#: The margins above are the spec's pass rules and the first version's (docs/federated.md); the weighted claim's
#: method was changed with results in view, and is also judged as first defined, with the oracle features.
WEIGHTED_REVISION = ("weighted FedAvg's similarity computed on the clients' whole inputs instead of the signal patch "
                     "(an oracle: block-diagonal mixing by construction), after a review of the first results; the "
                     "margins are unchanged")

CLAIM_FEDAVG = "with homogeneous clients FedAvg reaches near-zero test error where local training keeps a large one"
CLAIM_SNR = "FedAvg learns the signal faster relative to memorising noise than local training does"
CLAIM_WEIGHTED = "under heterogeneous signals, weighted FedAvg beats FedAvg"
CLAIM_REAL = ("on real data split non-IID (checked at Dirichlet alpha 0.5 only), weighted FedAvg <= FedAvg < local "
              "training in test error")


#: The largest local gradient-descent step ``--set lr=`` takes: 20x the presets' 0.5. Plain GD on these losses
#: diverges well before it (local_train then stops with FloatingPointError); 1e308 overflows the first step.
MAX_LR = 10.0


@dataclass(frozen=True)
class Config:
    maximum: ClassVar[dict[str, float]] = {"lr": MAX_LR}
    seeds: int = 5
    clients: int = 10
    n_train: int = 8
    n_test: int = 500
    d: int = 1000
    filters: int = 10
    signal_norms: tuple[float, ...] = (3.0, 2.0)   # the claims use the first
    noise_std: float = 1.0
    rounds: int = 60
    local_steps: int = 5
    lr: float = 0.5
    init_std: float = 0.01
    # the digits table
    # The claim uses the first (the usual benchmark setting, declared before the run); the others are reported.
    digits_alphas: tuple[float, ...] = (0.5, 0.1)
    digits_rounds: int = 40
    digits_hidden: int = 64
    # clients in a Flower-simulation run compared with the in-process loop (0: skip)
    flower_clients: int = 0
    allow_zero = ("flower_clients",)

    def __post_init__(self) -> None:
        for name in ("seeds", "clients", "n_train", "n_test", "d", "filters", "rounds", "local_steps",
                     "digits_rounds", "digits_hidden"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.clients < 2:
            raise ValueError(f"clients must be >= 2 to split signals between groups, got {self.clients}")
        if not self.signal_norms or min(self.signal_norms) <= 0:
            raise ValueError(f"signal_norms must be positive numbers, got {self.signal_norms}")
        if not self.digits_alphas or min(self.digits_alphas) <= 0:
            raise ValueError(f"digits_alphas must be positive numbers, got {self.digits_alphas}")
        if self.flower_clients < 0 or self.flower_clients == 1:
            raise ValueError(f"flower_clients must be 0 (skip) or >= 2, got {self.flower_clients}")


PRESETS = {
    "smoke": Config(seeds=1, clients=4, n_train=6, n_test=100, d=200, filters=4, signal_norms=(3.0,), rounds=4,
                    local_steps=2, digits_alphas=(0.5,), digits_rounds=2, digits_hidden=16),
    "quick": Config(flower_clients=3),
    "paper": Config(seeds=20, rounds=100, flower_clients=3),
}


def _mean_error(models, clients) -> float:
    return statistics.fmean(error_rate(m, c.x_test, c.y_test) for m, c in zip(models, clients))


def _synthetic_data(cfg: Config, signal_norm: float, heterogeneity: str, seed: int):
    return signal_noise_clients(cfg.clients, cfg.n_train, n_test=cfg.n_test, d=cfg.d, signal_norm=signal_norm,
                                noise_std=cfg.noise_std, heterogeneity=heterogeneity, seed=seed)


def _oracle_signal_patch(x: torch.Tensor) -> torch.Tensor:
    """The signal patch ``x^(1)`` alone: features that know where the signal is (``phi_k = mu_k`` exactly)."""
    return x[:, 0]


def _synthetic(cfg: Config, signal_norm: float, heterogeneity: str, method: str, seed: int,
               lens: bool = False, data=None) -> tuple[float, list[dict]]:
    """One method's mean client test error (and lens history) on one seed's clients; ``data`` reuses the clients
    another method of the same seed was given (every method sees the same data)."""
    data = data if data is not None else _synthetic_data(cfg, signal_norm, heterogeneity, seed)
    model = TwoLayerCNN(cfg.d, cfg.filters, init_std=cfg.init_std, generator=torch.Generator().manual_seed(seed))

    def measure(_, models):
        signal = statistics.fmean(float(signal_learning(m, mu).mean()) for m, mu in zip(models, data.signals))
        noise = statistics.fmean(float(noise_memorisation(m, c.x[:, 1], c.y).mean())
                                 for m, c in zip(models, data.clients))
        return {"signal": signal, "noise": noise}

    oracle = method == ORACLE
    run = federated_train(model, data.clients, rounds=cfg.rounds, local_steps=cfg.local_steps, lr=cfg.lr,
                          aggregation="weighted" if oracle else method,
                          feature_fn=_oracle_signal_patch if oracle else None,
                          callback=measure if lens else None, batched=True)
    return _mean_error(run.models, data.clients), run.history


def _synthetic_methods(cfg: Config, norm: float, heterogeneity: str) -> tuple[str, ...]:
    """The methods run at one setting: the oracle only at the claims' norm and where signals differ (with one
    signal for all, its mixing matrix is FedAvg's; a check confirms it)."""
    extra = (ORACLE,) if norm == cfg.signal_norms[0] and heterogeneity != "homogeneous" else ()
    return METHODS + extra


def _digits(cfg: Config, alpha: float, method: str, seed: int, data=None) -> float:
    data = data if data is not None else digits_clients(cfg.clients, alpha, seed=seed)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, cfg.digits_hidden), nn.ReLU(), nn.Linear(cfg.digits_hidden, 10))
    run = federated_train(model, data.clients, rounds=cfg.digits_rounds, local_steps=cfg.local_steps, lr=cfg.lr,
                          aggregation=method, batched=True)
    return _mean_error(run.models, data.clients)


def _flower_check(cfg: Config, seed: int) -> float:
    """Largest parameter difference between the in-process loop and Flower's simulation engine."""
    from iclr24.federated.flower import run_flower_simulation

    d = min(cfg.d, 200)
    data = signal_noise_clients(cfg.flower_clients, cfg.n_train, n_test=cfg.n_test, d=d,
                                signal_norm=cfg.signal_norms[0], heterogeneity="opposite", seed=seed)
    model = TwoLayerCNN(d, cfg.filters, init_std=cfg.init_std, generator=torch.Generator().manual_seed(seed))
    kwargs = dict(rounds=3, local_steps=cfg.local_steps, lr=cfg.lr, aggregation="weighted")
    ours = federated_train(model, data.clients, **kwargs)
    flower = run_flower_simulation(model, data.clients, **kwargs, num_cpus=2)
    return max(float((a.weight - b.weight).detach().abs().max()) for a, b in zip(ours.models, flower.models))


@experiment(
    name="federated",
    paper=PAPER,
    presets=PRESETS,
    claims=[CLAIM_FEDAVG, CLAIM_SNR, CLAIM_WEIGHTED, CLAIM_REAL],
    description="FedAvg raises the effective signal-to-noise ratio of feature learning; weighting the average by "
                "client similarity handles heterogeneous clients.",
)
def reproduce(cfg: Config, ctx: RunContext) -> Result:
    """Local training, FedAvg and weighted FedAvg on the paper's data model and on digits."""
    seeds = ctx.replicate_seeds(cfg.seeds)
    errors: dict[tuple[float, str, str], list[float]] = {}
    lens: dict[str, list[list[dict]]] = {"local": [], "fedavg": []}
    digits: dict[tuple[float, str], list[float]] = {}
    runs_per_seed = sum(len(_synthetic_methods(cfg, norm, het)) for norm in cfg.signal_norms for het in HETEROGENEITY)
    total = len(seeds) * (runs_per_seed + len(cfg.digits_alphas) * len(METHODS))
    with ctx.progress("federated", total=total) as bar:
        for norm in cfg.signal_norms:
            for het in HETEROGENEITY:
                methods = _synthetic_methods(cfg, norm, het)
                for seed in seeds:
                    data = _synthetic_data(cfg, norm, het, seed)  # once per seed: every method gets the same
                    for method in methods:
                        track = norm == cfg.signal_norms[0] and het == "homogeneous" and method in lens
                        err, history = _synthetic(cfg, norm, het, method, seed, lens=track, data=data)
                        errors.setdefault((norm, het, method), []).append(err)
                        if track:
                            lens[method].append(history)
                        bar.advance()
                ctx.log(f"|mu|={norm:g} {het}: " + ", ".join(
                    f"{m} {statistics.fmean(errors[(norm, het, m)]):.3f}" for m in methods))
        for alpha in cfg.digits_alphas:
            for seed in seeds:
                data = digits_clients(cfg.clients, alpha, seed=seed)
                for method in METHODS:
                    digits.setdefault((alpha, method), []).append(_digits(cfg, alpha, method, seed, data=data))
                    bar.advance()
            ctx.log(f"digits alpha={alpha:g}: " + ", ".join(
                f"{m} {statistics.fmean(digits[(alpha, m)]):.3f}" for m in METHODS))

    mean = {key: statistics.fmean(v) for key, v in errors.items()}
    digits_mean = {key: statistics.fmean(v) for key, v in digits.items()}
    metrics: dict[str, float] = {}
    for (norm, het, method), value in mean.items():
        metrics[f"error/{het}/mu{norm:g}/{method}"] = value
    for (alpha, method), value in digits_mean.items():
        metrics[f"digits_error/alpha{alpha:g}/{method}"] = value

    curves = {m: _mean_curves(runs) for m, runs in lens.items()}
    snr = {m: [run[-1]["signal"] / run[-1]["noise"] for run in runs] for m, runs in lens.items()}  # per seed
    metrics["signal_noise_ratio/local"] = statistics.fmean(snr["local"])
    metrics["signal_noise_ratio/fedavg"] = statistics.fmean(snr["fedavg"])

    claims = _claims(cfg, errors, digits, snr)
    checks = [_oracle_check(cfg, seeds[0])]
    notes = ("Synthetic rows simulate the paper's data model (no pretrained model involved). "
             f"{len(seeds)} seeds; K={cfg.clients} clients, n={cfg.n_train} samples each, d={cfg.d}, m={cfg.filters}, "
             f"E={cfg.local_steps} local GD steps, R={cfg.rounds} rounds, lr={cfg.lr:g}. Weighted FedAvg mixes client "
             "models by relu(cosine) of their label-weighted input means (our reading of 'similarity of input "
             "features', computed on the whole input; see docs/federated.md). Beside it, not judged: the same "
             "method with the signal patch alone as its features (an oracle), on the heterogeneous settings at the "
             "claims' norm.")
    if cfg.flower_clients:
        try:
            diff = _flower_check(cfg, seeds[0])
        except ImportError as err:
            ctx.log(f"Flower check skipped: {err}")
        except Exception as err:  # noqa: BLE001 - Ray failing to start (e.g. inside a Ray worker) must not
            # cost the reproduction its measured claims; the failure is logged and noted
            ctx.log(f"Flower check failed: {err!r}")
            notes += f" The Flower simulation check failed here ({type(err).__name__}); see log.txt."
        else:
            metrics["flower_vs_inprocess_max_abs_diff"] = diff
            checks.append(Check("Flower's simulation engine reproduces the in-process weighted-FedAvg loop",
                                diff <= FLOWER_TOLERANCE, f"largest parameter difference {diff:.1e} "
                                f"(tolerance {FLOWER_TOLERANCE:g}), {cfg.flower_clients} clients, 3 rounds"))
            ctx.log(f"Flower simulation ({cfg.flower_clients} clients, weighted FedAvg) vs the in-process loop: "
                    f"largest parameter difference {diff:.2e}")
            notes += (f" Flower's simulation engine (Ray) ran the same weighted-FedAvg federation with "
                      f"{cfg.flower_clients} clients: largest parameter difference {diff:.1e}.")

    tables = {
        "synthetic": [{"|mu|": norm, "signals": het, **{LABELS[m]: round(mean[(norm, het, m)], 4) for m in METHODS},
                       LABELS[ORACLE]: round(mean[(norm, het, ORACLE)], 4) if (norm, het, ORACLE) in mean else None}
                      for norm in cfg.signal_norms for het in HETEROGENEITY],
        "digits": [{"Dirichlet alpha": alpha, **{LABELS[m]: round(digits_mean[(alpha, m)], 4) for m in METHODS}}
                   for alpha in cfg.digits_alphas],
    }
    figures = {"signal_noise.png": _lens_figure(curves), "errors.png": _error_figure(cfg, mean, digits_mean)}
    return Result(metrics=metrics, claims=claims, figures=figures, tables=tables, notes=notes, checks=checks)


def _oracle_check(cfg: Config, seed: int) -> Check:
    """With one signal for every client the oracle's features agree exactly, so its mixing matrix is FedAvg's and
    its run would be FedAvg's: why the oracle is not run on homogeneous clients."""
    clients = _synthetic_data(cfg, cfg.signal_norms[0], "homogeneous", seed).clients
    oracle = aggregation_weights("weighted", clients, feature_fn=_oracle_signal_patch)
    diff = float((oracle - aggregation_weights("fedavg", clients)).abs().max())
    return Check("with homogeneous signals the oracle signal patch gives FedAvg's mixing matrix", diff <= 1e-12,
                 f"largest difference {diff:.1e} ({cfg.clients} clients, seed {seed})")


def _mean_curves(runs: list[list[dict]]) -> dict[str, list[float]]:
    return {key: [statistics.fmean(run[r][key] for run in runs) for r in range(len(runs[0]))]
            for key in ("round", "signal", "noise")}


def _claims(cfg: Config, errors: dict, digits: dict, snr: dict[str, list[float]]) -> list[Claim]:
    """The four claims from per-seed values: ``errors[(norm, heterogeneity, method)]`` and
    ``digits[(alpha, method)]`` (mean client test error), ``snr[method]`` (final signal/noise ratio)."""
    norm, alpha = cfg.signal_norms[0], cfg.digits_alphas[0]
    err = {(het, m): errors[(norm, het, m)] for het in HETEROGENEITY for m in METHODS}
    real = {m: digits[(alpha, m)] for m in METHODS}
    avg = statistics.fmean
    oracle = [f"{het} {avg(errors[(norm, het, ORACLE)]):.3f}" for het in HETEROGENEITY if (norm, het, ORACLE) in errors]
    oracle_text = f"; the oracle signal-patch features, not judged: {', '.join(oracle)}" if oracle else ""
    others = [f"alpha={a:g}: weighted {avg(digits[(a, 'weighted')]):.3f}, FedAvg {avg(digits[(a, 'fedavg')]):.3f}, "
              f"local {avg(digits[(a, 'local')]):.3f}" for a in cfg.digits_alphas[1:] if (a, "local") in digits]
    others_text = f"; not judged, {'; '.join(others)}" if others else ""
    setting = f"|mu|={norm:g}, K={cfg.clients}, n={cfg.n_train}, d={cfg.d}; mean of {len(snr['fedavg'])} seeds"

    def below(a, b, by: float, label: str):
        """``a``'s test error below ``b``'s by more than ``by``, paired over seeds (``0.0 - by``: a zero margin
        stays +0, not -0)."""
        return compare(a, b, better="lower", margin=0.0 - by, label=label)

    def weighted_beats_fedavg(method: str):
        """The weighted claim judged on ``method``'s errors: weighted FedAvg, or the oracle (its first definition)."""
        return all_of(below(errors[norm, "opposite", method], err["opposite", "fedavg"], MARGIN_WEIGHTED_OPPOSITE,
                            f"opposite signals: test error, {LABELS[method]} - FedAvg"),
                      below(errors[norm, "orthogonal", method], err["orthogonal", "fedavg"],
                            MARGIN_WEIGHTED_ORTHOGONAL, f"orthogonal groups: test error, {LABELS[method]} - FedAvg"))

    measured_oracle = all((norm, het, ORACLE) in errors for het in ("opposite", "orthogonal"))
    return [
        Claim(CLAIM_FEDAVG,
              paper="main theorems: FedAvg reaches near-zero test error, local training (no communication) a "
                    "large constant one (synthetic experiments at d=1000)",
              measured=f"homogeneous: FedAvg {avg(err['homogeneous', 'fedavg']):.3f} vs local "
                       f"{avg(err['homogeneous', 'local']):.3f} ({setting})",
              evidence=below(err["homogeneous", "fedavg"], err["homogeneous", "local"], MARGIN_FEDAVG_OVER_LOCAL,
                             "homogeneous test error, FedAvg - local"),
              provenance="spec"),
        Claim(CLAIM_SNR,
              paper="signal learning max_r<w,mu> grows relative to noise memorisation max_r<w,xi> under FedAvg "
                    "(the effective SNR is raised by averaging K clients' independent noise)",
              measured=f"final signal/noise coefficient ratio: FedAvg {avg(snr['fedavg']):.3f} vs local "
                       f"{avg(snr['local']):.3f} (homogeneous, {setting})",
              evidence=ratio(snr["fedavg"], snr["local"], bar=MIN_SNR_GAIN, unit="seeds",
                             label="final signal/noise ratio, FedAvg / local"),
              provenance="spec"),
        Claim(CLAIM_WEIGHTED,
              paper="weighting the aggregation by the similarity of clients' input features handles "
                    "heterogeneous data (theory and synthetic experiments)",
              measured=f"opposite signals: weighted {avg(err['opposite', 'weighted']):.3f} vs FedAvg "
                       f"{avg(err['opposite', 'fedavg']):.3f}; orthogonal: weighted "
                       f"{avg(err['orthogonal', 'weighted']):.3f} vs FedAvg {avg(err['orthogonal', 'fedavg']):.3f} "
                       f"(similarity of the whole inputs{oracle_text}; {setting})",
              evidence=weighted_beats_fedavg("weighted"), provenance="revised", revision=WEIGHTED_REVISION,
              original=weighted_beats_fedavg(ORACLE) if measured_oracle else None),
        Claim(CLAIM_REAL,
              paper="Tables 1-2 (CIFAR-10 with a Dirichlet split, SVHN, ...): weighted FedAvg best, FedAvg above "
                    "Singleset",
              measured=f"digits, Dirichlet alpha={alpha:g}, {cfg.clients} clients: weighted "
                       f"{avg(real['weighted']):.3f}, FedAvg {avg(real['fedavg']):.3f}, local "
                       f"{avg(real['local']):.3f} (mean of {len(real['local'])} seeds; judged at alpha={alpha:g} only, "
                       f"as declared before the run{others_text})",
              evidence=all_of(
                  below(real["weighted"], real["fedavg"], MARGIN_REAL, "digits test error, weighted - FedAvg"),
                  below(real["fedavg"], real["local"], MARGIN_REAL, "digits test error, FedAvg - local")),
              provenance="spec"),
    ]


def _lens_figure(curves):
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for method, style in (("local", "--"), ("fedavg", "-")):
        c = curves[method]
        axes[0].plot(c["round"], c["signal"], style, label=LABELS[method])
        axes[1].plot(c["round"], c["noise"], style, label=LABELS[method])
    axes[0].set(title="signal learning  max_r <w_{j,r}, j mu>", xlabel="round")
    axes[1].set(title="noise memorisation  max_r <w_{y_i,r}, xi_i>", xlabel="round")
    for ax in axes:
        ax.legend()
    fig.tight_layout()
    return fig


def _error_figure(cfg: Config, mean, digits_mean):
    groups = [(f"{het}\n|mu|={norm:g}", [mean[(norm, het, m)] for m in METHODS])
              for norm in cfg.signal_norms for het in HETEROGENEITY]
    groups += [(f"digits\nalpha={a:g}", [digits_mean[(a, m)] for m in METHODS]) for a in cfg.digits_alphas]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(groups)), 3.6))
    x = np.arange(len(groups))
    for i, method in enumerate(METHODS):
        ax.bar(x + (i - 1) * 0.27, [g[1][i] for g in groups], width=0.27, label=LABELS[method])
    ax.set_xticks(x, [g[0] for g in groups], fontsize=8)
    ax.set(ylabel="mean client test error")
    ax.legend()
    fig.tight_layout()
    return fig
