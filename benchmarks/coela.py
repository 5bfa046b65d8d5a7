"""Cost of an LLM-driven CoELA episode: model calls, tokens and seconds, beside the rule-based planner.

Two CoELA agents with the configured model (``--llm``, default the embedded SmolLM2-135M) play the same
seeded houses as the MHP-like heuristic pair; every model call is logged (``iclr24.llm.LoggedModel``) and
counted from the log. Prompt tokens dominate: each plan sends the agent's memory, history and menu.
One torch thread.

    python benchmarks/coela.py
    python benchmarks/coela.py --episodes 2 --max-steps 80 --cot
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from iclr24.coela import CoELAAgent, HeuristicPlanner, TransportEnv, run_episode
from iclr24.llm import LoggedModel, get_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=40)
    parser.add_argument("--cot", action="store_true")
    parser.add_argument("--llm", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = get_model(args.llm)
    rows = []
    for seed in range(args.episodes):
        env_kwargs = dict(n_agents=2, n_rooms=6, n_objects=6, n_containers=2, max_steps=args.max_steps)
        start = time.perf_counter()
        heuristic = run_episode(TransportEnv(**env_kwargs), [CoELAAgent(planner=HeuristicPlanner(), communicate=False,
                                                                         name=a) for a in ("alice", "bob")], seed)
        rule_seconds = time.perf_counter() - start
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "calls.jsonl"
            llm = LoggedModel(model, log)
            start = time.perf_counter()
            episode = run_episode(TransportEnv(**env_kwargs), [CoELAAgent(llm, cot=args.cot, name=a, seed=seed)
                                                                for a in ("alice", "bob")], seed)
            seconds = time.perf_counter() - start
            calls = [json.loads(line) for line in log.read_text().splitlines()]
        prompt = sum(o["prompt_tokens"] for c in calls for o in c["outputs"][:1])
        completion = sum(o["completion_tokens"] for c in calls for o in c["outputs"])
        rows.append((seed, episode, len(calls), prompt, completion, seconds, heuristic, rule_seconds))
    print(f"model: {model.name}; houses of 6 rooms, 6 targets; budget {args.max_steps} steps; CoT {args.cot}")
    print(f"{'seed':>4} {'steps':>5} {'moved':>5} {'calls':>5} {'prompt tok':>10} {'gen tok':>7} {'s/episode':>9} "
          f"{'s/call':>6} {'parse fails':>11} {'MHP steps':>9} {'MHP s':>6}")
    for seed, e, calls, prompt, completion, seconds, h, hs in rows:
        print(f"{seed:>4} {e.steps:>5} {e.transport_rate:>5.2f} {calls:>5} {prompt:>10} {completion:>7} "
              f"{seconds:>9.1f} {seconds / max(1, calls):>6.2f} {e.parse_failure_rate:>11.0%} {h.steps:>9} "
              f"{hs:>6.3f}")
    print(f"LLM / rule-based seconds per episode: {statistics.fmean(r[5] / r[7] for r in rows):.0f}x")


if __name__ == "__main__":
    main()
