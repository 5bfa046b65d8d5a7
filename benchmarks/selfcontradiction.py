"""Cost and quality of the contradiction detectors: model calls and seconds per checked pair, and F1.

The same labelled pairs through each detector with the configured model (``--llm`` spec, default the
embedded SmolLM2-135M): ChatProtect's explanation + sampled votes (the paper's detector), votes without the
explanation, the single-pass P(Yes) read from next-token log-probabilities, and the SelfCheckGPT-style
prompt baseline. Seconds are medians per pair; the ratio is against the single-pass detector, measured in
the same run, interleaved pair by pair. One torch thread.

    python benchmarks/selfcontradiction.py
    python benchmarks/selfcontradiction.py --pairs 20 --votes 10 --llm openai:gpt-4o-mini
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from iclr24.llm import get_model
from iclr24.selfcontradiction import ContradictionDetector, SelfCheckDetector, load_pairs, precision_recall_f1


class CountingModel:
    """Counts generate calls and sampled completions of the wrapped model."""

    def __init__(self, model) -> None:
        self.model, self.calls, self.completions = model, 0, 0
        self.name, self.capabilities = model.name, model.capabilities

    def generate(self, prompt, **kwargs):
        self.calls += 1
        self.completions += kwargs.get("n", 1)
        return self.model.generate(prompt, **kwargs)

    def next_token_logprobs(self, token_ids):
        self.calls += 1
        return self.model.next_token_logprobs(token_ids)

    def __getattr__(self, name):
        return getattr(self.model, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--votes", type=int, default=5)
    parser.add_argument("--explanation-tokens", type=int, default=80)
    parser.add_argument("--llm", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    llm = get_model(args.llm)
    pairs = load_pairs()
    # alternate contradictory and consistent pairs so a short run is balanced
    pairs = pairs[: 2 * ((args.pairs + 1) // 2)][: args.pairs]
    detectors = {
        "explanation + votes": lambda m: ContradictionDetector(m, n_votes=args.votes,
                                                               explanation_tokens=args.explanation_tokens),
        "votes, no explanation": lambda m: ContradictionDetector(m, n_votes=args.votes, explain=False),
        "single-pass P(Yes)": lambda m: ContradictionDetector(m, mode="logprob", explain=False),
        "SelfCheck prompt P(No)": lambda m: SelfCheckDetector(m, mode="logprob"),
    }
    models = {name: CountingModel(llm) for name in detectors}
    built = {name: make(models[name]) for name, make in detectors.items()}
    seconds = {name: [] for name in detectors}
    scores = {name: [] for name in detectors}
    for i, pair in enumerate(pairs):
        names = list(detectors)
        for name in names[i % len(names):] + names[: i % len(names)]:      # rotate the order per pair
            start = time.perf_counter()
            scores[name].append(built[name].detect(pair.context, pair.a, pair.b).score)
            seconds[name].append(time.perf_counter() - start)
    labels = [p.contradictory for p in pairs]
    base = statistics.median(seconds["single-pass P(Yes)"])
    print(f"model: {llm.name}; {len(pairs)} pairs; {args.votes} votes")
    print(f"{'detector':>24} {'calls/pair':>10} {'samples/pair':>12} {'s/pair':>8} {'x single-pass':>13} {'F1@0.5':>7}")
    for name in detectors:
        f1 = precision_recall_f1(scores[name], labels, 0.5)[2]
        med = statistics.median(seconds[name])
        print(f"{name:>24} {models[name].calls / len(pairs):>10.1f} {models[name].completions / len(pairs):>12.1f} "
              f"{med:>8.3f} {med / base:>13.1f} {f1:>7.2f}")


if __name__ == "__main__":
    main()
