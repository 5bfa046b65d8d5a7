"""Running agents through an episode and summarising it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from iclr24.coela.env import TransportEnv
from iclr24.core.progress import progress as progress_bar

__all__ = ["Episode", "parse_failure_rate", "run_episode"]


@dataclass
class Episode:
    """What one episode measured: steps used, the fraction of targets delivered, messages sent, LLM calls,
    which parsing rules fired, and a transcript (step, agent, action, message)."""

    steps: int
    transport_rate: float
    finished: bool
    messages: int = 0
    llm_calls: int = 0
    parse_counts: Counter = field(default_factory=Counter)
    transcript: list[tuple[int, str, str, str]] = field(default_factory=list)

    @property
    def parse_failure_rate(self) -> float:
        """Plans whose reply matched no option and were picked at random, over all LLM-parsed plans."""
        return parse_failure_rate(self.parse_counts)


def parse_failure_rate(counts: Counter) -> float:
    """``random`` over the plans the model gave (``scored`` plans are not replies and are left out; a
    ``constrained`` reply is always a menu line, so it counts and never fails)."""
    parsed = sum(v for k, v in counts.items() if k != "scored")
    return counts["random"] / parsed if parsed else 0.0


def run_episode(env: TransportEnv, agents: list, seed: int, *, progress: bool = False) -> Episode:
    """Play one episode of ``env`` (reset with ``seed``) with one agent per ``env.possible_agents``.

    ``progress=True`` draws a bar of the steps (up to ``env.max_steps``) with the targets delivered so far,
    through :mod:`iclr24.core.progress`: off by default (an LLM-driven episode takes minutes)."""
    if len(agents) != len(env.possible_agents):
        raise ValueError(f"env has {len(env.possible_agents)} agents, got {len(agents)} agent objects")
    if len({id(a) for a in agents}) != len(agents):
        raise ValueError("agents must be distinct objects: one agent cannot play two roles")
    observations, _ = env.reset(seed=seed)
    for name, agent in zip(env.possible_agents, agents):
        agent.name = name                                  # the env's name for it, in prompts and dialogue
        agent.reset(env)
    by_name = dict(zip(env.possible_agents, agents))
    transcript, messages, finished = [], 0, False
    with progress_bar(f"episode (seed {seed})", total=env.max_steps, enabled=progress) as bar:
        while env.agents:
            actions = {name: by_name[name].act(observations[name]) for name in env.agents}
            step = env.steps
            observations, _, terminations, _, infos = env.step(actions)
            for name, action in actions.items():
                text = action.get("text", "") if action["type"] == "message" else ""
                messages += action["type"] == "message"
                transcript.append((step, name, infos[name]["action"], text))
            finished = all(terminations.values())
            bar.advance(env.steps - step, delivered=f"{len(env.delivered)}/{len(env.targets)}")
    counts = sum((a.parse_counts for a in agents), Counter())
    return Episode(env.steps, len(env.delivered) / len(env.targets), finished, messages,
                   sum(a.llm_calls for a in agents), counts, transcript)
