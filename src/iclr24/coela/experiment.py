"""Reproduction of CoELA's claims in a text transport world (TDW-MAT's task without its Unity renderer).

Rule-based agents over ``episodes`` seeded houses: one agent alone, two agents without messages (the MHP
stand-in), two with messages, two random planners; then CoELA with the configured LLM (``--llm``) on the
first ``llm_episodes`` of the same houses. Steps to finish (or the budget, when unfinished) and the fraction
of targets transported, per method. A replicate is one episode: every method plays the same house (the
episode's seed), so the claims compare methods paired by episode.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from iclr24.coela.agent import CoELAAgent, HeuristicPlanner, RandomPlanner  # noqa: E402
from iclr24.coela.cached_lm import PrefixCachedLM  # noqa: E402
from iclr24.coela.env import TransportEnv  # noqa: E402
from iclr24.coela.episode import Episode, parse_failure_rate, run_episode  # noqa: E402
from iclr24.core import Check, Claim, Result, RunContext, experiment  # noqa: E402
from iclr24.core.evidence import compare, ratio  # noqa: E402
from iclr24.llm.base import stand_in_reason  # noqa: E402

PAPER = "Building Cooperative Embodied Agents Modularly with Large Language Models (Zhang et al., ICLR 2024)"
CLAIM_EI = ("two cooperating agents finish the transport task faster than one (efficiency improvement; measured "
            "with the rule-based MHP-like planner)")
CLAIM_LLM = ("CoELA driven by an LLM beats the hand-written MHP planner (holds only with a capable model such as "
             "GPT-4; the embedded 135M model is reported as measured)")
CLAIM_COMM = ("communication helps: the same planner with messages beats it without (measured with the rule-based "
              "planner and its template messages)")
CHECK_SAME_HOUSES = "paired episodes play the same house, whatever the number of agents"

# Thresholds, and where each came from (each claim's provenance; docs/coela.md, "Evidence, second pass").
UNIT = "episodes"  # a replicate: one seeded house, played by every method compared
# EI = 1 - L_pair / L_single >= 0.2: the spec's pass bar (/work/shared/specs/coela.md; the paper only says EI > 0),
# judged as the pair's steps over the single agent's, paired by house, below 1 - 0.2.
EI_MIN = 0.2
MARGIN_STEPS = 0.0  # "beats MHP", "communication helps": any reduction in steps (no effect = 0)
#: EI's 0.2 and the communication claim's 0 are the spec's pass rule and the first commit's; the LLM claim's
#: criterion was changed with results in view.
LLM_REVISION = ("criterion changed from transport rate (or equal in fewer steps) to steps to finish, with the first "
                "1-house quick result in view (the evidence migration); quick's budget then cut 40 -> 30 steps with "
                "the verdict in view (fails at both)")
TRANSPORT_MARGIN_FIRST = 0.0  # the LLM claim's first criterion: any higher transport rate
COMM_STAND_IN = "the rule-based MHP-like planner's template messages stand in for CoELA's LLM-written messages"


@dataclass(frozen=True)
class Config:
    episodes: int = 20
    rooms: int = 6
    objects: int = 6
    containers: int = 2
    max_steps: int = 200
    llm_episodes: int = 3  # houses CoELA plays with the LLM (the first of the seeded houses)
    # CoELA's and the MHP-like pair's step budget in the LLM claim. Quick: 30, above the 15-27 steps the pair needs in
    # every quick house (so the budget never stops the baseline) and 25% fewer model calls than 40; the 135M model
    # finishes no house in 40 steps either, and its first 30 steps' calls are the 40-step run's (docs/coela.md).
    llm_max_steps: int = 30
    cot: bool = False
    def __post_init__(self) -> None:
        for name in ("episodes", "rooms", "objects", "max_steps", "llm_max_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 2 <= self.rooms <= 8 or self.objects > 16 or not 0 <= self.containers <= 5:
            raise ValueError(f"rooms must be in [2, 8], objects <= 16 and containers in [0, 5], got {self.rooms}, "
                             f"{self.objects} and {self.containers}")
        if not 1 <= self.llm_episodes <= self.episodes:
            raise ValueError(f"llm_episodes must be in [1, episodes={self.episodes}] (the LLM claim needs one), "
                             f"got {self.llm_episodes}")


PRESETS = {
    # smoke: one LLM episode keeps the real model cheap (its claim is then inconclusive: n < 3)
    "smoke": Config(episodes=3, rooms=4, objects=3, max_steps=80, llm_episodes=1, llm_max_steps=4),
    "quick": Config(),
    "paper": Config(episodes=40, llm_episodes=20, llm_max_steps=200, cot=True),
}


def _env(cfg: Config, n_agents: int, max_steps: int | None = None) -> TransportEnv:
    return TransportEnv(n_agents=n_agents, n_rooms=cfg.rooms, n_objects=cfg.objects, n_containers=cfg.containers,
                        max_steps=max_steps or cfg.max_steps)


def _rule_based(cfg: Config, seeds: list[int], progress: bool = False) -> dict[str, list[Episode]]:
    methods = {"single (heuristic)": (1, False, HeuristicPlanner),
               "MHP-like pair, no messages": (2, False, HeuristicPlanner),
               "MHP-like pair, messages": (2, True, HeuristicPlanner),
               "random pair": (2, False, None)}
    out = {}
    for name, (n_agents, communicate, planner) in methods.items():
        out[name] = []
        for seed in seeds:
            env = _env(cfg, n_agents)
            agents = [CoELAAgent(planner=planner() if planner else RandomPlanner(seed * 7 + i),
                                 communicate=communicate, name=a, seed=seed)
                      for i, a in enumerate(env.possible_agents)]
            out[name].append(run_episode(env, agents, seed, progress=progress))
    return out


@experiment(
    name="coela",
    paper=PAPER,
    presets=PRESETS,
    claims=[CLAIM_EI, CLAIM_LLM, CLAIM_COMM],
    description="Modular LLM agents (perception, memory, communication, planning, execution) that cooperate on a "
                "multi-room transport task.",
)
def reproduce(cfg: Config, ctx: RunContext) -> Result:
    """Rule-based agents on every episode; CoELA with the configured LLM on the first ``llm_episodes``."""
    seeds = ctx.replicate_seeds(cfg.episodes)
    runs = _rule_based(cfg, seeds, progress=not ctx.quiet)
    for name, episodes in runs.items():
        ctx.log(f"{name}: {statistics.fmean(e.steps for e in episodes):.1f} steps, transport "
                f"{statistics.fmean(e.transport_rate for e in episodes):.2f}")
    from iclr24.llm import LoggedModel, get_model

    llm_runs, baseline_short = [], []
    # greedy replies as the model gives them, with shared prompt prefixes encoded once (see cached_lm)
    model = get_model()
    llm = LoggedModel(PrefixCachedLM.wrap(model), ctx.path("llm_calls.jsonl"))
    llm_name = llm.name
    with ctx.progress("coela llm episodes", total=cfg.llm_episodes) as bar:
        for seed in seeds[: cfg.llm_episodes]:
            env = _env(cfg, 2, cfg.llm_max_steps)
            agents = [CoELAAgent(llm, communicate=True, cot=cfg.cot, name=a, seed=seed)
                      for a in env.possible_agents]
            llm_runs.append(run_episode(env, agents, seed, progress=not ctx.quiet))
            env = _env(cfg, 2, cfg.llm_max_steps)      # the baseline under the same step budget
            baseline_short.append(run_episode(env, [CoELAAgent(planner=HeuristicPlanner(), communicate=False,
                                                               name=a, seed=seed) for a in env.possible_agents],
                                              seed, progress=not ctx.quiet))
            bar.advance()
    e = llm_runs[-1]
    ctx.log(f"CoELA ({llm_name}): {e.steps} steps, transport {e.transport_rate:.2f}, parse {dict(e.parse_counts)}")

    def mean(episodes, key):
        return statistics.fmean(getattr(e, key) for e in episodes)

    metrics = {}
    for name, episodes in [*runs.items(), ("CoELA", llm_runs), ("MHP-like, same budget", baseline_short)]:
        key = name.split(" (")[0].replace(" ", "_").replace(",", "")
        metrics[f"steps/{key}"] = mean(episodes, "steps")
        metrics[f"transport_rate/{key}"] = mean(episodes, "transport_rate")
        metrics[f"messages/{key}"] = mean(episodes, "messages")
    metrics["coela/parse_failure_rate"] = parse_failure_rate(sum((e.parse_counts for e in llm_runs), Counter()))
    metrics["coela/llm_calls_per_episode"] = mean(llm_runs, "llm_calls")
    claims = _claims(cfg, runs, llm_runs, baseline_short, llm_name, _llm_stand_in(model))
    tables = {"methods": [{"method": name, "episodes": len(eps), "steps": round(mean(eps, "steps"), 1),
                           "transport rate": round(mean(eps, "transport_rate"), 3),
                           "messages": round(mean(eps, "messages"), 1)}
                          for name, eps in [*runs.items(),
                                            (f"CoELA ({llm_name}), budget {cfg.llm_max_steps}", llm_runs),
                                            (f"MHP-like pair, budget {cfg.llm_max_steps}", baseline_short)]],
              "communication by house": [
                  {"house (seed)": seed, "steps with messages": c.steps, "steps without": p.steps,
                   "difference": c.steps - p.steps, "messages": c.messages}
                  for seed, c, p in zip(seeds, runs["MHP-like pair, messages"], runs["MHP-like pair, no messages"])],
              "CoELA by house": [
                  {"house (seed)": seed, "CoELA steps": c.steps, "CoELA transport": round(c.transport_rate, 3),
                   "MHP-like steps": b.steps, "MHP-like transport": round(b.transport_rate, 3),
                   "CoELA messages": c.messages, "plans read": ", ".join(f"{k} {v}" for k, v in
                                                                        sorted(c.parse_counts.items()))}
                  for seed, c, b in zip(seeds, llm_runs, baseline_short)],
              "transcript": [{"step": s, "agent": a, "action": act, "message": msg[:160]}
                             for s, a, act, msg in llm_runs[0].transcript[:40]]}
    notes = (f"{cfg.episodes} seeded houses ({cfg.rooms} rooms, {cfg.objects} targets, {cfg.containers} containers, "
             f"budget {cfg.max_steps} steps); CoELA with {llm_name} on {len(llm_runs)} of them (budget "
             f"{cfg.llm_max_steps} steps, CoT {'on' if cfg.cot else 'off'}). A message costs its sender a step. The "
             f"MHP-like planner is rule-based and reads distances from the house's map, which the agents (CoELA "
             f"included) do not observe: an advantage only the baseline has.")
    figures = {"steps.png": _steps_figure(runs, llm_runs, llm_name)}
    checks = [_same_houses_check(cfg, seeds)]
    return Result(metrics=metrics, claims=claims, figures=figures, tables=tables, notes=notes, checks=checks)


def _llm_stand_in(model) -> str:
    """What stands in for the paper's GPT-4 in the LLM claim, in one line; "" when the claim is about ``model``
    itself (the house rule: :func:`iclr24.llm.stand_in_reason`)."""
    return stand_in_reason(model, "the paper's GPT-4")


def _claims(cfg: Config, runs, llm_runs, baseline_short, llm_name: str, llm_stand_in: str) -> list[Claim]:
    """The three claims, each a comparison paired by episode (house). ``llm_stand_in``: what stands in for GPT-4
    in the LLM claim ("" when the model is the paper's kind, see :func:`_llm_stand_in`)."""

    def per_episode(episodes, key="steps"):
        return [getattr(e, key) for e in episodes]

    def mean(episodes, key="steps"):
        return statistics.fmean(per_episode(episodes, key))

    single, pair = runs["single (heuristic)"], runs["MHP-like pair, no messages"]
    comm = runs["MHP-like pair, messages"]
    ei = 1 - mean(pair) / mean(single)
    differences = [c.steps - p.steps for c, p in zip(comm, pair)]
    worse, better = sum(d > 0 for d in differences), sum(d < 0 for d in differences)
    failure = parse_failure_rate(sum((e.parse_counts for e in llm_runs), Counter()))

    def houses(episodes):
        return f"{len(episodes)} house{'s' * (len(episodes) != 1)}"

    return [Claim(
        CLAIM_EI, paper="TDW-MAT and C-WAH: two-agent teams finish in fewer steps than one agent (EI > 0)",
        measured=f"MHP-like pair {mean(pair):.1f} vs single {mean(single):.1f} steps, means over {houses(pair)}: "
                 f"EI {ei:.2f}",
        evidence=ratio(per_episode(pair), per_episode(single), bar=1 - EI_MIN, better="lower", unit=UNIT,
                       label="steps, MHP-like pair / single agent"),
        provenance="spec",
    ), Claim(
        CLAIM_LLM, paper="GPT-4-driven CoELA surpasses the MHP and RHP planners (TDW-MAT transport rate, C-WAH "
                         "steps); LLaMA-2 underperforms",
        measured=f"CoELA with {llm_name}: {mean(llm_runs):.1f} steps, transport "
                 f"{mean(llm_runs, 'transport_rate'):.2f} vs MHP-like pair {mean(baseline_short):.1f} steps, transport "
                 f"{mean(baseline_short, 'transport_rate'):.2f} (means over {houses(llm_runs)}, budget "
                 f"{cfg.llm_max_steps} steps, an unfinished episode counts the budget); parse failures {failure:.0%} "
                 f"of plans",
        evidence=compare(per_episode(llm_runs), per_episode(baseline_short), better="lower", margin=MARGIN_STEPS,
                         unit=UNIT, label=f"steps to finish, CoELA ({llm_name}) - MHP-like pair"),
        provenance="revised", revision=LLM_REVISION,
        original=compare(per_episode(llm_runs, "transport_rate"), per_episode(baseline_short, "transport_rate"),
                         better="higher", margin=TRANSPORT_MARGIN_FIRST, unit=UNIT,
                         label=f"transport rate, CoELA ({llm_name}) - MHP-like pair"),
        subject="stand-in" if llm_stand_in else "paper", stand_in=llm_stand_in,
    ), Claim(
        CLAIM_COMM, paper="ablation: CoELA without the communication module cooperates less efficiently",
        measured=f"MHP-like pair with messages {mean(comm):.1f} steps vs without {mean(pair):.1f}, means over "
                 f"{houses(pair)} ({mean(comm, 'messages'):.1f} messages an episode, one step each); messages "
                 f"cost steps in {worse}, save steps in {better} and change nothing in {len(pair) - worse - better} "
                 f"(table 'communication by house')",
        evidence=compare(per_episode(comm), per_episode(pair), better="lower", margin=MARGIN_STEPS, unit=UNIT,
                         label="steps, pair with messages - without"),
        provenance="spec", subject="stand-in", stand_in=COMM_STAND_IN,
    )]


def _same_houses_check(cfg: Config, seeds: list[int]) -> Check:
    """The pairing the claims rely on: a seed gives the same house to one agent and to two."""

    def house(n_agents: int, seed: int):
        env = _env(cfg, n_agents)
        env.reset(seed=seed)
        start = {env.state[a].room for a in env.possible_agents}
        return env.edges, env.goal, env.targets, env.containers, env.location, start

    same = all(house(1, seed) == house(2, seed) for seed in seeds)
    return Check(CHECK_SAME_HOUSES, passed=same,
                 detail=f"corridors, goal, targets, containers, their rooms and the start room equal for one and two "
                        f"agents in all {len(seeds)} houses")


def _steps_figure(runs, llm_runs, llm_name: str):
    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    data = {name: [e.steps for e in eps] for name, eps in runs.items()}
    data[f"CoELA ({llm_name})"] = [e.steps for e in llm_runs]
    ax.boxplot(list(data.values()), tick_labels=[n.replace(", ", "\n") for n in data], showmeans=True)
    ax.set(ylabel="steps per episode", title="steps to transport every target (or the budget)")
    ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    return fig
