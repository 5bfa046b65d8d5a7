"""Cost of an LLM-driven CoELA episode: model calls, tokens and seconds, beside the rule-based planner.

Two CoELA agents with the configured model (``--llm``, default the embedded SmolLM2-135M) play the same
seeded houses as the MHP-like heuristic pair; every model call is logged (``iclr24.llm.LoggedModel``) and
counted from the log. Prompt tokens dominate: each plan sends the agent's memory, history and menu.
One torch thread.

    python benchmarks/coela.py
    python benchmarks/coela.py --episodes 2 --max-steps 80 --cot
    python benchmarks/coela.py --analyse runs/coela/<timestamp>   # a quick run's calls: prefix reuse, batching
    python benchmarks/coela.py --replay-bf16 runs/coela/<timestamp> --calls 100   # fp32 vs bf16 on its calls
    python benchmarks/coela.py --replay-batch runs/coela/<timestamp> --calls 100  # the agents' calls batched

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

``--replay-batch RUN`` replays a run's first ``--calls`` logged calls twice, step by step in turn in one process:
one at a time through ``PrefixCachedLM`` (as a run makes them), and with the two agents' calls of a step batched
(each agent's next call; messages and plans in separate batches): CPU seconds of each and the replies that differ
from the logged ones. ``--encode-apart`` batches only the decoding of the messages.
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
from iclr24.llm.hf import fork_cache

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


class _BatchedPrefixLM(PrefixCachedLM):
    """``PrefixCachedLM`` that also runs several greedy calls as one batch (``generate_many``): their prompt suffixes
    encoded in one pass, the plain ones decoded in lockstep with their prompt-lookup drafts, the constrained ones
    after it, each from its own row of the batch's cache (a benchmark of batching the two agents' calls of a step).
    Rows sit as ``[padding][kept prefix][padding][own suffix]``, then the fed tokens, each row's rejected draft
    tokens left as masked holes; positions count a row's real tokens."""

    def __init__(self, model, *, encode_apart: bool = False, **options) -> None:
        super().__init__(model, **options)
        self.encode_apart = encode_apart   # encode each prompt alone, batch only the decoding
        self.padded = [0, 0]               # prompt positions encoded: real, and with the batch's padding

    def _stack(self, caches, lengths):
        """One left-padded batch cache from one-row caches holding ``lengths`` positions, and its mask."""
        from transformers import DynamicCache

        C, batch = max(lengths), DynamicCache()
        if C:
            ref = next(c for c, n in zip(caches, lengths) if n)
            for index, layer in enumerate(ref.layers):
                shape = (len(caches), *layer.keys.shape[1:2], C, layer.keys.shape[3])
                keys, values = layer.keys.new_zeros(shape), layer.values.new_zeros(shape)
                for b, (cache, n) in enumerate(zip(caches, lengths)):
                    if n:
                        keys[b, :, C - n:] = cache.layers[index].keys[0, :, :n]
                        values[b, :, C - n:] = cache.layers[index].values[0, :, :n]
                batch.update(keys, values, index)
        return batch, torch.tensor([[0] * (C - n) + [1] * n for n in lengths])

    def generate_many(self, calls: list[tuple]) -> list:
        """One greedy completion for each ``(prompt, kwargs)`` of ``calls`` (kwargs as logged), as one batch."""
        from transformers import DynamicCache

        from iclr24.llm import with_system
        from iclr24.llm.structured import GrammarConstraint, output_format

        start = time.perf_counter()
        rows = []
        for prompt, kwargs in calls:
            ids = self._ids(with_system(prompt, None))
            fmt = output_format(kwargs.get("response_format"))
            constraint = GrammarConstraint(self.tokenizer, fmt, len(ids)) if fmt else None
            cache, common = self._prefix(ids)
            rows.append((ids, kwargs["max_tokens"], constraint, cache, common))
        B = len(rows)
        if self.encode_apart:                             # each prompt encoded alone, as one at a time
            own, last = [], []
            for ids, _, _, cache, c in rows:
                last.append(self._forward(ids[c:], cache, last_only=True)[-1])
                self._caches[tuple(ids)] = fork_cache(cache)
                own.append(cache)
            last = torch.stack(last)
            self.padded[0] += sum(len(r[0]) - r[4] for r in rows)
            self.padded[1] += sum(len(r[0]) - r[4] for r in rows)
            if any(r[2] is None for r in rows):
                batch, mask = self._stack(own, [len(r[0]) for r in rows])
        else:
            batch, mask = self._stack([r[3] for r in rows], [r[4] for r in rows])
            C, S = mask.shape[1], max(len(r[0]) - r[4] for r in rows)
            self.padded[0] += sum(len(r[0]) - r[4] for r in rows)
            self.padded[1] += B * S
            pad = self.tokenizer.eos_token_id
            input_ids = torch.tensor([[pad] * (S - len(ids) + c) + ids[c:] for ids, _, _, _, c in rows])
            mask = torch.cat([mask, torch.tensor([[0] * (S - len(ids) + c) + [1] * (len(ids) - c)
                                                  for ids, _, _, _, c in rows])], 1)
            positions = (mask.cumsum(-1) - 1).clamp_min(0)[:, C:]
            with torch.no_grad():
                last = self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True,
                                  **{self._cache_kwarg: batch}, logits_to_keep=1).logits[:, -1].float()
            own = []
            for b, (ids, *_rest) in enumerate(rows):        # each prompt's own cache, kept for later prompts
                real = mask[b].bool()
                cache = DynamicCache()
                for index, layer in enumerate(batch.layers):
                    cache.update(layer.keys[b:b + 1, :, real], layer.values[b:b + 1, :, real], index)
                self._caches[tuple(ids)] = fork_cache(cache)
                own.append(cache)
        while len(self._caches) > self.keep:
            self._caches.popitem(last=False)
        out = [None] * B
        plain = [b for b, r in enumerate(rows) if r[2] is None]
        if plain:
            out_plain = self._lockstep([rows[b][0] for b in plain], [rows[b][1] for b in plain], batch, mask,
                                       last, plain, start)
            for b, completion in zip(plain, out_plain):
                out[b] = completion
        for b, (ids, max_tokens, constraint, _, _) in enumerate(rows):
            if constraint is not None:
                out[b] = self._constrained(ids, max_tokens, constraint, own[b], last[b], start)
        return out

    @torch.no_grad()
    def _lockstep(self, prompts, limits, batch, mask, last, index, start):
        """Greedy prompt-lookup decoding of the batch rows ``index`` together (the others dropped)."""
        batch.batch_select_indices(torch.tensor(index))
        mask, last = mask[index], last[index]
        rows = list(range(len(prompts)))                  # the batch's rows, in order
        new = [[int(last[j].argmax())] for j in rows]
        length = mask.sum(-1).tolist()                    # real tokens per row so far (positions)
        while True:
            active = [j for j in rows if not (new[j][-1] in self._eos or len(new[j]) >= limits[j])]
            if not active:
                break
            if len(active) < len(rows):                   # finished rows leave the batch
                keep = [rows.index(j) for j in active]
                batch.batch_select_indices(torch.tensor(keep))
                mask = mask[keep]
                rows = active
            drafts = [lookup_draft(prompts[j] + new[j], ngram=self.ngram, min_ngram=self.min_ngram,
                                   length=min(self.draft, limits[j] - len(new[j]))) for j in rows]
            W = 1 + max(len(d) for d in drafts)
            ids = torch.tensor([[new[j][-1], *d] + [self.tokenizer.eos_token_id] * (W - 1 - len(d))
                                for j, d in zip(rows, drafts)])
            grow = torch.tensor([[1] * (1 + len(d)) + [0] * (W - 1 - len(d)) for d in drafts])
            positions = torch.tensor([[length[j] + k for k in range(W)] for j in rows])
            mask = torch.cat([mask, grow], 1)
            greedy = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                                **{self._cache_kwarg: batch}).logits.float().argmax(-1).tolist()
            for r, (j, d) in enumerate(zip(rows, drafts)):
                accepted = 0
                while accepted < len(d) and d[accepted] == greedy[r][accepted]:
                    accepted += 1
                length[j] += 1 + accepted
                mask[r, mask.shape[1] - W + 1 + accepted:] = 0   # rejected draft tokens: holes
                for t in d[:accepted]:
                    new[j].append(t)
                    if t in self._eos or len(new[j]) >= limits[j]:
                        break
                else:
                    new[j].append(greedy[r][accepted])
        return [self._completion(p, n, m, start) for p, n, m in zip(prompts, new, limits)]


def replay_batch(run: Path, calls: int, llm: str | None, encode_apart: bool = False) -> None:
    """The two agents' calls of each step one at a time (as a run makes them) against batched (a batch of each
    agent's next call, messages and plans apart), on a run's first ``calls`` logged calls, step by step in turn."""
    rows = [json.loads(line) for line in (run / "artifacts" / "llm_calls.jsonl").read_text().splitlines()][:calls]
    steps: dict[tuple[int, int], dict[str, list[int]]] = {}
    episode, previous = 0, -1
    for i, row in enumerate(rows):
        text = row["prompt"][0]["content"]
        step = int(re.search(r"I am in the [^\n]*\(step (\d+)\)", text).group(1))
        episode, previous = episode + (step < previous), step
        agent = re.match(r"You are (\w+)", text).group(1)
        steps.setdefault((episode, step), {}).setdefault(agent, []).append(i)
    alone, batched = PrefixCachedLM(get_model(llm)), _BatchedPrefixLM(get_model(llm), encode_apart=encode_apart)
    cpu, texts, batches = {"alone": 0.0, "batched": 0.0}, {"alone": {}, "batched": {}}, Counter()
    for n, queues in enumerate(steps.values()):
        for key in (("alone", "batched") if n % 2 == 0 else ("batched", "alone")):
            start = time.process_time()
            if key == "alone":
                for i in sorted(i for q in queues.values() for i in q):
                    texts[key][i] = alone.generate(rows[i]["prompt"], **rows[i]["kwargs"])[0].text
            else:
                heads = [list(q) for q in queues.values()]
                while any(heads):
                    now = [q.pop(0) for q in heads if q]
                    for kind in (False, True):       # the messages, then the plans
                        group = [i for i in now if ("response_format" in rows[i]["kwargs"]) == kind]
                        if group:
                            batches[len(group)] += 1
                            for i, c in zip(group, batched.generate_many([(rows[i]["prompt"], rows[i]["kwargs"])
                                                                           for i in group])):
                                texts[key][i] = c.text
            cpu[key] += time.process_time() - start
    logged = {i: r["outputs"][0]["text"] for i, r in enumerate(rows)}
    print(f"{len(rows)} calls in {len(steps)} steps; batches by size {dict(sorted(batches.items()))}")
    print(f"prompt positions encoded: {batched.padded[0]:,} real, {batched.padded[1]:,} with padding")
    print(f"CPU one at a time {cpu['alone']:.1f} s, batched {cpu['batched']:.1f} s, "
          f"x{cpu['alone'] / cpu['batched']:.3f}")
    for kind in ("message", "plan"):
        ids = [i for i, r in enumerate(rows) if ("response_format" in r["kwargs"]) == (kind == "plan")]
        print(f"{kind}s: {len(ids)}; one at a time = logged {sum(texts['alone'][i] == logged[i] for i in ids)}, "
              f"batched = logged {sum(texts['batched'][i] == logged[i] for i in ids)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=40)
    parser.add_argument("--cot", action="store_true")
    parser.add_argument("--llm", default=None)
    parser.add_argument("--analyse", type=Path, default=None, help="a quick run's folder: analyse its logged calls")
    parser.add_argument("--replay-bf16", type=Path, default=None, help="a quick run's folder: fp32 vs bf16 replay")
    parser.add_argument("--replay-batch", type=Path, default=None,
                        help="a quick run's folder: the agents' calls one at a time vs batched")
    parser.add_argument("--encode-apart", action="store_true", help="--replay-batch: batch the decoding only")
    parser.add_argument("--calls", type=int, default=100, help="how many logged calls a replay replays")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.replay_bf16:
        replay_bf16(args.replay_bf16, args.calls, args.llm)
        return
    if args.replay_batch:
        replay_batch(args.replay_batch, args.calls, args.llm, args.encode_apart)
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
