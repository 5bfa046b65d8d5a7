"""Reproduction of LOQA (Aghajohari, Duque, Cooijmans, Courville, ICLR 2024) on the iterated prisoner's
dilemma, and on the Coin Game in the ``paper`` preset.

Per seed: a LOQA agent and the naive actor-critic (the same learner, shaping weight 0) train by self-play
against themselves and their past versions, with a tabular memory-one actor and a tabular ``Q(s, t, a)``
critic; two LOLA-DiCE agents train on the same budget of environment steps. The independent learners of every
seed train together as one batched computation (:mod:`iclr24.loqa.batched`), each with its own random streams.

Every claim is judged over seeds (one replicate per seed) by :mod:`iclr24.core.evidence`, against the bars
below, which come from the spec and were fixed before the first run; what was revised after results were seen
(which policy claim 1 judges, quick's Coin Game budget) is on the claims, with the reason.

1. Reciprocity: LOQA's final policy cooperates in self-play (mean reward > -1.2 a step) and is not exploited
   by Always-Defect (mean > -2.25 a step), and the naive learner's final self-play shows mutual defection
   (mean < -1.9). A policy that scores both bars reciprocates: it cooperates with itself and defects against
   a defector.
2. Compute: the geometric mean over seeds of LOQA's environment steps to reciprocity over LOLA-DiCE's < 1
   (a learner that never reaches it within the budget counts as the whole budget).
3. Coin Game (MLP agents; ``quick``: 3 seeds of 300 updates, all six learners batched): LOQA's own-coin
   pickup fraction in self-play > 0.8, the naive learner's < 0.6, and a greedy agent that takes every coin
   gains < 0.1 a step more than LOQA when they play. Not run when ``coin_iterations=0``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from iclr24.core import Claim, Result, RunContext, check_int, experiment  # noqa: E402
from iclr24.core.evidence import against, all_of, not_run, ratio  # noqa: E402
from iclr24.loqa.batched import train_coin_game_batch, train_ipd_batch, train_lola_dice_batch  # noqa: E402
from iclr24.loqa.lola import LOLAConfig  # noqa: E402
from iclr24.loqa.training import (  # noqa: E402
    SELF_PLAY_BAR,
    STRATEGIES,
    CoinConfig,
    FixedMemoryOne,
    GreedyCoinPolicy,
    IPDConfig,
    coin_pickups,
    score_against,
)

PAPER = "LOQA: Learning with Opponent Q-Learning Awareness (Aghajohari, Duque, Cooijmans, Courville; ICLR 2024)"
CLAIM_RECIPROCITY = ("in the IPD LOQA reaches tit-for-tat-like reciprocity that Always-Defect cannot exploit, "
                     "while naive learners defect")
CLAIM_COMPUTE = "LOQA reaches reciprocity with less compute than LOLA-DiCE"
CLAIM_COIN = "in the Coin Game LOQA agents take their own coins, naive learners do not"
# The bars, from the spec's pass criteria (fixed before the first run); rewards are per step.
# SELF_PLAY_BAR = -1.2 (iclr24.loqa.training): LOQA's final self-play above it (mutual cooperation: -1).
AD_BAR = -2.25  # LOQA's final policy against Always-Defect above it (perfect tit-for-tat: -2.1)
NAIVE_BAR = -1.9  # the naive learner's final self-play below it (mutual defection: -2)
COMPUTE_RATIO_BAR = 1.0  # LOQA's steps to reciprocity over LOLA-DiCE's below 1: any saving ("no effect" = 1)
COIN_OWN_BAR, COIN_NAIVE_OWN_BAR = 0.8, 0.6  # own-coin fraction in self-play: LOQA above 0.8, naive below 0.6
GREEDY_BAR = 0.1  # a greedy agent's gain a step over LOQA below it
#: The reciprocity claim's policy was changed with results in view (docs/loqa.md, "How the criterion changed").
RECIPROCITY_REVISION = ("judged on LOQA's final policy instead of its policy when it first reached reciprocity, after "
                        "a review of the first results found that one held nearly by construction (stricter: it then "
                        "failed), and since the evidence migration without a separate 'reaches it in every seed' "
                        "condition; the bars are the spec's")
#: The quick preset's Coin Game updates: cut from 1000 for run time with the verdict in view (fails at both sizes),
#: so a run at this budget judges the Coin Game claim on a revised budget.
QUICK_COIN_ITERATIONS = 300
QUICK_COIN_REVISION = ("quick's Coin Game cut 1000 -> 300 updates for run time, with the verdict in view (fails at "
                       "both); the bars are the spec's")
STATES = ("start", "CC", "CD", "DC", "DD")


#: The largest learning rate ``--set`` takes for ``actor_lr`` and ``critic_lr``: Adam moves each weight by about lr a
#: step, so past 1 one step outgrows the weights' scale (the presets use 2e-3 and 5e-2; 1e308 overflows Adam's update).
MAX_LR = 1.0


@dataclass(frozen=True)
class Config:
    maximum: ClassVar[dict[str, float]] = {"actor_lr": MAX_LR, "critic_lr": MAX_LR}
    seeds: int = 3
    iterations: int = 12000  # LOQA's and the naive learner's updates (batch 64, horizon 10)
    batch_size: int = 64
    actor_lr: float = 2e-3
    critic_lr: float = 5e-2
    eval_every: int = 100
    lola_batch_size: int = 128
    coin_iterations: int = 1000  # Coin Game updates per learner (0: skipped)
    coin_batch_size: int = 128
    coin_seeds: int = 3

    allow_zero = ("coin_iterations",)  # 0 skips the Coin Game

    def __post_init__(self) -> None:
        for name in ("seeds", "iterations", "batch_size", "eval_every", "lola_batch_size", "coin_batch_size",
                     "coin_seeds"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("coin_iterations", self.coin_iterations, minimum=0)
        if self.batch_size % min(8, self.batch_size):
            raise ValueError(f"batch_size must be a multiple of 8 (the games are split among 8 past agents), "
                             f"got {self.batch_size}")
        if self.coin_iterations and self.coin_batch_size % 4:
            raise ValueError(f"coin_batch_size must be a multiple of 4, got {self.coin_batch_size}")

    @property
    def env_steps(self) -> int:
        return self.iterations * self.batch_size * 10

    @property
    def lola_iterations(self) -> int:
        """LOLA-DiCE updates on the same budget of environment steps (4 batches of games per update)."""
        return max(1, self.env_steps // (4 * self.lola_batch_size * 10))


PRESETS = {
    "smoke": Config(seeds=3, iterations=60, eval_every=20, lola_batch_size=16, coin_iterations=2,
                    coin_batch_size=8, coin_seeds=3),
    # 300 Coin Game updates, not 1000: the batched Coin Game is compute-bound (~0.19 s an update for all six
    # learners), and the claim's verdict is the same at both sizes (docs/loqa.md, "Profile and run time").
    "quick": Config(coin_iterations=QUICK_COIN_ITERATIONS),
    "paper": Config(seeds=5, iterations=20000, coin_iterations=3000, coin_seeds=5),
}


@experiment(
    name="loqa",
    paper=PAPER,
    presets=PRESETS,
    claims=[CLAIM_RECIPROCITY, CLAIM_COMPUTE, CLAIM_COIN],
    description="Opponent shaping through the opponent's Q-values: reciprocity in the IPD at a fraction of LOLA's "
                "cost.",
)
def reproduce(cfg: Config, ctx: RunContext) -> Result:
    """LOQA, the naive learner and LOLA-DiCE on the IPD (and the Coin Game in ``paper``)."""
    seeds = ctx.replicate_seeds(cfg.seeds)
    S = len(seeds)
    total = 3 + (1 if cfg.coin_iterations else 0)
    with ctx.progress("loqa", total=total) as bar:
        # LOQA and the naive learner, every seed, as one batched computation (iclr24.loqa.batched)
        first: dict[int, object] = {}  # LOQA's policy when it first reached reciprocity, per seed

        def keep_first(iteration, histories, policies):
            for s in range(S):
                if s not in first and histories[s].reached(len(histories[s].iteration) - 1):
                    first[s] = policies[s]

        ipd = IPDConfig(iterations=cfg.iterations, batch_size=cfg.batch_size, actor_lr=cfg.actor_lr,
                        critic_lr=cfg.critic_lr, eval_every=cfg.eval_every, opponents_per_batch=min(8, cfg.batch_size))
        agents, histories = train_ipd_batch(ipd, seeds + seeds, shaping_weights=[1.0] * S + [0.0] * S,
                                            on_eval=keep_first, progress=not ctx.quiet)
        bar.advance(2)
        runs = {"LOQA": histories[:S], "naive": histories[S:]}
        at_reach = [first.get(s) for s in range(S)]  # None if never
        finals = [agent.policy for agent in agents[:S]]
        lola = LOLAConfig(iterations=cfg.lola_iterations, batch_size=cfg.lola_batch_size,
                          eval_every=max(1, cfg.lola_iterations // 100))
        runs["LOLA-DiCE"] = train_lola_dice_batch(lola, seeds, progress=not ctx.quiet)[1]
        bar.advance()
        for s in range(S):
            ctx.log(f"seed {s}: " + ", ".join(f"{k} reaches at {_reach(v[s])}" for k, v in runs.items()))

        coin = {"LOQA": [], "naive": []}
        if cfg.coin_iterations:
            coin_seeds = ctx.replicate_seeds(cfg.coin_seeds)
            coin_cfg = CoinConfig(iterations=cfg.coin_iterations, batch_size=cfg.coin_batch_size)
            learned = train_coin_game_batch(coin_cfg, coin_seeds + coin_seeds,
                                            shaping_weights=[1.0] * len(coin_seeds) + [0.0] * len(coin_seeds),
                                            progress=not ctx.quiet)
            for k, agent in enumerate(learned):
                seed = coin_seeds[k % len(coin_seeds)]
                row = coin_pickups(agent.policy, agent.policy, seed=seed)
                # the Coin Game's Always-Defect (greedy: every coin) as player 0 against the learner
                versus = coin_pickups(GreedyCoinPolicy(coin_cfg.grid), agent.policy, seed=seed)
                row["greedy_gain"] = versus["reward"] - versus["opponent_reward"]
                coin["LOQA" if k < len(coin_seeds) else "naive"].append(row)
            bar.advance()
            for s in range(len(coin_seeds)):
                ctx.log(f"coin game seed {s}: " + ", ".join(f"{k} own fraction {v[s]['own_fraction']:.2f}"
                                                            for k, v in coin.items()))

    always_defect = FixedMemoryOne(STRATEGIES["always_defect"])
    reach = [_scores(p, always_defect) if p is not None else None for p in at_reach]
    final = [_scores(p, always_defect) for p in finals]
    metrics = _metrics(runs, reach, final, coin, cfg)
    claims = _claims(runs, reach, final, coin, cfg)
    tables = {"runs": _rows(runs, reach)}
    try:
        from iclr24.loqa.games import axelrod_tournament

        final_rows = axelrod_tournament(finals[-1])
        if at_reach[-1] is not None:  # the same seed's policy when it first reached reciprocity, beside it
            for row, early in zip(final_rows, axelrod_tournament(at_reach[-1])):
                row["score at reciprocity"] = early["score"]
        tables["axelrod"] = final_rows
    except ImportError:
        ctx.log("axelrod is not installed: no tournament table (pip install 'iclr24[games]')")
    figures = {"memory_one.png": _plot_policies(runs), "reward.png": _plot_rewards(runs)}
    notes = (f"{cfg.seeds} seeds; LOQA and the naive learner: {cfg.iterations} updates of {cfg.batch_size} games of "
             f"10 steps ({cfg.env_steps:,} environment steps); LOLA-DiCE: {cfg.lola_iterations} updates on the same "
             "budget. The axelrod table scores the last seed's LOQA policy as a memory-one player, at the end and "
             "when it first reached reciprocity (axelrod payoffs: R=3, S=0, T=5, P=1). The paper's anchor: LOQA "
             "fully trained in 2 hours on an A100 against 8 for POLA in the Coin Game.")
    return Result(metrics=metrics, claims=claims, figures=figures, tables=tables, notes=notes)


def _reach(history) -> str:
    i = history.first_reciprocal()
    return "never" if i is None else f"{history.env_steps[i]:,} steps ({history.seconds[i]:.0f} s)"


def _scores(policy, always_defect) -> dict:
    from iclr24.loqa.training import memory_one_policy

    return {"self_play": score_against(policy, policy)[0], "vs_always_defect": score_against(policy, always_defect)[0],
            "policy": memory_one_policy(policy)}


def _metrics(runs: dict, reach: list, final: list, coin: dict, cfg: Config) -> dict:
    metrics = {}
    for name, histories in runs.items():
        for s, h in enumerate(histories):
            i = h.first_reciprocal()
            metrics[f"{name}_reached_seed{s}"] = float(i is not None)
            if i is not None:  # metrics are finite numbers: a run that never got there has no step count
                metrics[f"{name}_reach_env_steps_seed{s}"] = float(h.env_steps[i])
            metrics[f"{name}_final_self_play_seed{s}"] = h.reward[-1]
            for state in STATES:
                metrics[f"{name}_final_p_c_{state}_seed{s}"] = h.policy[-1][state]
    for s, r in enumerate(final):
        metrics[f"LOQA_final_vs_always_defect_seed{s}"] = r["vs_always_defect"]
    for s, r in enumerate(reach):
        if r is not None:
            metrics[f"LOQA_at_reach_vs_always_defect_seed{s}"] = r["vs_always_defect"]
            metrics[f"LOQA_at_reach_self_play_seed{s}"] = r["self_play"]
    for name, rows in coin.items():
        for s, row in enumerate(rows):
            metrics[f"coin_{name}_own_fraction_seed{s}"] = row["own_fraction"]
            metrics[f"coin_{name}_greedy_gain_seed{s}"] = row["greedy_gain"]
    return metrics


def _claims(runs: dict, reach: list, final: list, coin: dict, cfg: Config) -> list[Claim]:
    """The three claims, each over seeds (one replicate per seed)."""
    loqa, naive, lola = runs["LOQA"], runs["naive"], runs["LOLA-DiCE"]
    reached = [r is not None for r in reach]
    ad_reach = [r["vs_always_defect"] if r else float("nan") for r in reach]
    ad_final = [r["vs_always_defect"] for r in final]
    self_final = [r["self_play"] for r in final]
    naive_final = [h.reward[-1] for h in naive]
    measured = ("LOQA reaches reciprocity in {}/{} seeds (then vs Always-Defect {}); its final policy "
                "P(C|start, CC, CD, DC, DD) {}: self-play {}, vs Always-Defect {}; naive final self-play {}").format(
        sum(reached), len(reach), "/".join(f"{v:.2f}" for v in ad_reach),
        "; ".join("/".join(f"{r['policy'][k]:.2f}" for k in STATES) for r in final),
        "/".join(f"{v:.2f}" for v in self_final), "/".join(f"{v:.2f}" for v in ad_final),
        "/".join(f"{v:.2f}" for v in naive_final))
    reciprocity = all_of(
        against(self_final, SELF_PLAY_BAR, better="higher", label="LOQA's final self-play reward a step"),
        against(ad_final, AD_BAR, better="higher", label="LOQA's final reward a step against Always-Defect"),
        against(naive_final, NAIVE_BAR, better="lower", label="the naive learner's final self-play reward a step"))

    steps = {name: [h.env_steps[h.first_reciprocal()] if h.first_reciprocal() is not None else None for h in hs]
             for name, hs in (("LOQA", loqa), ("LOLA-DiCE", lola))}
    seconds = {name: [h.seconds[h.first_reciprocal()] if h.first_reciprocal() is not None else None for h in hs]
               for name, hs in (("LOQA", loqa), ("LOLA-DiCE", lola))}

    def show(name):
        return "/".join("never" if v is None else f"{v / 1e6:.2f}M ({t:.0f} s)" for v, t in
                        zip(steps[name], seconds[name]))

    # never reaching reciprocity counts as the whole budget: a lower bound on the steps it would need
    censored = {name: [cfg.env_steps if v is None else v for v in values] for name, values in steps.items()}
    return [
        Claim(CLAIM_RECIPROCITY,
              paper="reciprocity-based cooperation (tit-for-tat-like in the IPD) from self-play with opponent shaping",
              measured=measured, evidence=reciprocity, provenance="revised", revision=RECIPROCITY_REVISION),
        Claim(CLAIM_COMPUTE,
              paper="Coin Game fully trained in 2 h on an A100 vs 8 h for POLA (LOLA's successor)",
              measured=f"environment steps (seconds) to reciprocity: LOQA {show('LOQA')}; LOLA-DiCE "
                       f"{show('LOLA-DiCE')} (budget {cfg.env_steps / 1e6:.1f}M each; never counts as the budget)",
              evidence=ratio(censored["LOQA"], censored["LOLA-DiCE"], bar=COMPUTE_RATIO_BAR, better="lower",
                             unit="seeds", label="environment steps to reciprocity, LOQA / LOLA-DiCE"),
              provenance="spec"),
        Claim(CLAIM_COIN, paper="own-coin pickups and retaliation in self-play (Coin Game, 3x3; GRU agents, batch "
                                "8192, 15 min on an A100)",
              measured=_coin_measured(coin, cfg), evidence=_coin_evidence(coin), **_coin_provenance(cfg)),
    ]


def _coin_provenance(cfg: Config) -> dict[str, str]:
    """The Coin Game's bars are the spec's; revised when the run plays quick's :data:`QUICK_COIN_ITERATIONS`, a
    budget chosen with the verdict in view."""
    if cfg.coin_iterations == QUICK_COIN_ITERATIONS:
        return {"provenance": "revised", "revision": QUICK_COIN_REVISION}
    return {"provenance": "spec"}


def _coin_evidence(coin: dict):
    if not coin["LOQA"]:
        return not_run("coin_iterations=0: the Coin Game was not played")
    own = {k: [r["own_fraction"] for r in v] for k, v in coin.items()}
    return all_of(
        against(own["LOQA"], COIN_OWN_BAR, better="higher", label="LOQA's own-coin fraction in self-play"),
        against(own["naive"], COIN_NAIVE_OWN_BAR, better="lower", label="the naive learner's own-coin fraction"),
        against([r["greedy_gain"] for r in coin["LOQA"]], GREEDY_BAR, better="lower",
                label="a greedy agent's gain a step over LOQA"))


def _coin_measured(coin: dict, cfg: Config) -> str:
    if not coin["LOQA"]:
        return "not run (coin_iterations=0)"

    def per_seed(rows, key, spec=".2f"):
        return "/".join(format(r[key], spec) for r in rows)

    return (f"own-coin fraction in self-play: LOQA {per_seed(coin['LOQA'], 'own_fraction')}, naive "
            f"{per_seed(coin['naive'], 'own_fraction')}; reward per step LOQA {per_seed(coin['LOQA'], 'reward')}, "
            f"naive {per_seed(coin['naive'], 'reward')}; a greedy agent gains "
            f"{per_seed(coin['LOQA'], 'greedy_gain', '+.2f')} a step over LOQA ({cfg.coin_iterations} updates, "
            f"{len(coin['LOQA'])} seed{'s' if len(coin['LOQA']) > 1 else ''})")


def _rows(runs: dict, reach: list) -> list[dict]:
    rows = []
    for name, histories in runs.items():
        for s, h in enumerate(histories):
            i = h.first_reciprocal()
            row = {"learner": name, "seed": s, "reaches at (env steps)": h.env_steps[i] if i is not None else None,
                   "seconds": h.seconds[i] if i is not None else None, "final self-play": h.reward[-1]}
            row.update({f"final P(C|{k})": h.policy[-1][k] for k in STATES})
            if name == "LOQA" and reach[s] is not None:
                row["at reach: vs Always-Defect"] = reach[s]["vs_always_defect"]
            rows.append(row)
    return rows


def _plot_policies(runs: dict):
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)
    for ax, name in zip(axes, ("LOQA", "naive")):
        h = runs[name][0]
        for state in STATES:
            ax.plot(h.iteration, [p[state] for p in h.policy], label=f"P(C|{state})")
        ax.set(title=f"{name} (seed 0)", xlabel="update", ylim=(-0.02, 1.02))
    axes[0].set_ylabel("probability of cooperating")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def _plot_rewards(runs: dict):
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for name, histories in runs.items():
        for s, h in enumerate(histories):
            colour = {"LOQA": "C0", "naive": "C1", "LOLA-DiCE": "C2"}[name]
            ax.plot([v / 1e6 for v in h.env_steps], h.reward, color=colour, alpha=0.8, label=name if s == 0 else None)
    ax.axhline(SELF_PLAY_BAR, color="grey", linestyle=":", linewidth=1)
    ax.set(xlabel="environment steps (millions)", ylabel="self-play reward per step", ylim=(-2.1, -0.9))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
