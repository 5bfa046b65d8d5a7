"""Cost of an LLM-driven CoELA episode: model calls, tokens and seconds, beside the rule-based planner.

Two CoELA agents with the configured model (``--llm``, default the embedded SmolLM2-135M) play the same
seeded houses as the MHP-like heuristic pair; every model call is logged (``iclr24.llm.LoggedModel``) and
counted from the log. Prompt tokens dominate: each plan sends the agent's memory, history and menu.
One torch thread.

    python benchmarks/coela.py
    python benchmarks/coela.py --episodes 2 --max-steps 80 --cot
    python benchmarks/coela.py --analyse runs/coela/<timestamp>   # a quick run's calls: prefix reuse, batching
    python benchmarks/coela.py --replay-bf16 runs/coela/<timestamp> --calls 100   # fp32 vs bf16 on its calls

``--analyse`` reads a run's ``artifacts/llm_calls.jsonl`` and needs only the tokenizer (no forward pass): how many
prompt tokens ``coela.cached_lm.PrefixCachedLM`` (8 kept caches) must encode with the prompts as logged, without
their ``(step N)`` stamps, and without the whole state block (memory and observation: a floor for any order of
the same lines); then the passes and positions prompt-lookup drafting takes for the messages, one at a time and
batched (the messages of one step decoded together, in lockstep over the run's episodes), priced with a cost
model (a pass 60 ms plus 5 ms a position: SmolLM2-135M, one thread, this machine).

``--replay-bf16 RUN`` replays a run's first ``--calls`` logged calls through two ``PrefixCachedLM`` wrappers, one
over the model in float32 and one with its parameters in bfloat16 (buffers such as the rotary frequencies stay
float32), call by call in turn in one process: CPU seconds of each, the replies that differ, and the next-token
logits of the two (after each prompt, and at every position of the passes of replies that agree).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import time
from collections import Counter, OrderedDict
from pathlib import Path

import torch

from iclr24.coela import CoELAAgent, HeuristicPlanner, TransportEnv, run_episode
from iclr24.coela.cached_lm import PrefixCachedLM, lookup_draft
from iclr24.llm import LoggedModel, get_model

PASS_MS, POSITION_MS = 60.0, 5.0  # a decoding pass over the weights, and each position it checks


def encoded_tokens(prompts: list[list[int]], keep: int = 8) -> int:
    """Prompt tokens left to encode when each prompt reuses the longest prefix it shares with the last ``keep``
    prompts (PrefixCachedLM's rule: at least one token is encoded)."""
    kept: OrderedDict[tuple[int, ...], None] = OrderedDict()
    total = 0
    for ids in prompts:
        best, common = None, 0
        for key in kept:
            limit, k = min(len(key), len(ids) - 1), 0
            while k < limit and key[k] == ids[k]:
                k += 1
            if k > common:
                best, common = key, k
        if best is not None:
            kept.move_to_end(best)
        kept[tuple(ids)] = None
        while len(kept) > keep:
            kept.popitem(last=False)
        total += len(ids) - common
    return total


def draft_cost(groups: list[list[tuple[list[int], list[int]]]], *, cap: int = 32) -> tuple[int, int, float]:
    """Passes, positions and modelled seconds of greedy prompt-lookup decoding (ngram 3, min_ngram 2, drafts of
    up to ``cap``) of known replies; the (prompt, reply) pairs of one group share each pass, padded to its longest
    draft."""
    passes = positions = 0
    for rows in groups:
        done = [reply[:1] for _, reply in rows]
        while active := [i for i, (_, reply) in enumerate(rows) if len(done[i]) < len(reply)]:
            drafts = {i: lookup_draft(rows[i][0] + done[i], ngram=3, min_ngram=2,
                                      length=min(cap, len(rows[i][1]) - len(done[i]))) for i in active}
            passes += 1
            positions += len(active) * (1 + max(len(d) for d in drafts.values()))
            for i, draft in drafts.items():
                reply, n = rows[i][1], len(done[i])
                accepted = 0
                while accepted < len(draft) and n + accepted < len(reply) and draft[accepted] == reply[n + accepted]:
                    accepted += 1
                done[i] = reply[:n + accepted + 1]
    return passes, positions, (passes * PASS_MS + positions * POSITION_MS) / 1e3


def analyse(run: Path, tokenizer) -> None:
    """Prefix reuse and message batching over a run's logged calls (see the module docstring)."""
    calls = [json.loads(line) for line in (run / "artifacts" / "llm_calls.jsonl").read_text().splitlines()]

    def ids(prompt, rewrite=lambda text: text) -> list[int]:
        messages = [dict(m, content=rewrite(m["content"])) for m in prompt]
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)["input_ids"]

    def stateless(text: str) -> str:
        return text[:text.index("Goal:")] + text[text.index("Previous plans"):]

    print(f"{len(calls)} calls, {sum(len(ids(c['prompt'])) for c in calls):,} prompt tokens; encoded with 8 kept "
          f"caches:")
    for label, rewrite in (("as logged", lambda text: text),
                           ("without the (step N) stamps", lambda text: re.sub(r" \(step \d+\)", "", text)),
                           ("without memory and observation (a floor)", stateless)):
        print(f"  {label:<42} {encoded_tokens([ids(c['prompt'], rewrite) for c in calls]):>8,}")
    by_step: dict[tuple[int, int], list] = {}
    episode, previous = 0, -1
    for c in calls:
        step = int(re.search(r"I am in the [^\n]*\(step (\d+)\)", c["prompt"][0]["content"]).group(1))
        episode, previous = episode + (step < previous), step
        if "response_format" not in c["kwargs"]:
            reply = tokenizer(c["outputs"][0]["text"])["input_ids"][:c["kwargs"]["max_tokens"]]
            by_step.setdefault((episode, step), []).append((ids(c["prompt"]), reply))
    lockstep: dict[int, list] = {}
    for (_, step), rows in by_step.items():
        lockstep.setdefault(step, []).extend(rows)
    messages = [row for rows in by_step.values() for row in rows]
    print(f"{len(messages)} messages decoded: passes, positions, modelled seconds")
    print(f"  {'one at a time':<42} {draft_cost([[m] for m in messages])}")
    print(f"  {'two agents of a step together':<42} {draft_cost(list(by_step.values()))}")
    for cap in (32, 4):
        label = f"a step of every episode together, drafts <= {cap}"
        print(f"  {label:<42} {draft_cost(list(lockstep.values()), cap=cap)}")


def replay_bf16(run: Path, calls: int, llm: str | None) -> None:
    """float32 against bfloat16 on the same logged calls, interleaved (each call in turn, alternating which goes
    first), each wrapper keeping its own prefix caches as in a run."""
    models = {"fp32": PrefixCachedLM(get_model(llm)), "bf16": PrefixCachedLM(get_model(llm))}
    for p in models["bf16"].model.parameters():
        p.data = p.data.to(torch.bfloat16)
    passes: dict[str, list[torch.Tensor]] = {}
    for key, m in models.items():
        def forward(ids, cache, last_only=False, inner=m._forward, key=key):
            logits = inner(ids, cache, last_only)
            passes[key].append(logits)
            return logits
        m._forward = forward
    rows = [json.loads(line) for line in (run / "artifacts" / "llm_calls.jsonl").read_text().splitlines()][:calls]
    cpu = dict.fromkeys(models, 0.0)
    same, total, first, positions = Counter(), Counter(), [0, 0.0], [0, 0, 0.0]
    for i, row in enumerate(rows):
        kind, text = ("plan" if "response_format" in row["kwargs"] else "message"), {}
        for key in sorted(models, reverse=i % 2 == 1):
            passes[key] = []
            start = time.process_time()
            text[key] = models[key].generate(row["prompt"], **row["kwargs"])[0].text
            cpu[key] += time.process_time() - start
        total[kind] += 1
        same[kind] += text["fp32"] == text["bf16"]
        a, b = passes["fp32"][0][-1], passes["bf16"][0][-1]           # the next token after the prompt
        first[0] += int(a.argmax() == b.argmax())
        first[1] = max(first[1], float((a - b).abs().max()))
        if text["fp32"] == text["bf16"]:                                 # the same reply: the same passes
            for a, b in zip(passes["fp32"][1:], passes["bf16"][1:]):
                positions[0] += len(a)
                positions[1] += int((a.argmax(-1) == b.argmax(-1)).sum())
                positions[2] = max(positions[2], float((a - b).abs().max()))
    print(f"{len(rows)} calls: CPU fp32 {cpu['fp32']:.1f} s, bf16 {cpu['bf16']:.1f} s, "
          f"x{cpu['fp32'] / cpu['bf16']:.2f}")
    for kind in total:
        print(f"{kind}s: {same[kind]} of {total[kind]} replies identical")
    print(f"next token after the prompt: top-1 agrees in {first[0]} of {len(rows)}, max |logit difference| "
          f"{first[1]:.2f}; positions of identical replies' passes: {positions[1]} of {positions[0]}, max "
          f"{positions[2]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=40)
    parser.add_argument("--cot", action="store_true")
    parser.add_argument("--llm", default=None)
    parser.add_argument("--analyse", type=Path, default=None, help="a quick run's folder: analyse its logged calls")
    parser.add_argument("--replay-bf16", type=Path, default=None, help="a quick run's folder: fp32 vs bf16 replay")
    parser.add_argument("--calls", type=int, default=100, help="how many logged calls --replay-bf16 replays")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.replay_bf16:
        replay_bf16(args.replay_bf16, args.calls, args.llm)
        return
    model = get_model(args.llm)
    if args.analyse:
        analyse(args.analyse, model.tokenizer)
        return
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
