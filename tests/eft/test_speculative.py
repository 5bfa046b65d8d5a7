"""Speculative sampling is exact: its samples follow the target's distribution, not the draft's."""

import itertools

import pytest
import torch
from scipy.stats import chisquare

from iclr24.eft import speculative_generate


class Markov:
    """A model whose next token depends on the last one: ``next_token_logprobs`` from a transition matrix."""

    def __init__(self, matrix, name, sequence=False):
        self.logits, self.name, self.calls = torch.tensor(matrix, dtype=torch.float64).log(), name, 0
        if sequence:
            self.sequence_logprobs = lambda ids, start=0: torch.stack([self.next_token_logprobs(ids[:t + 1])
                                                                       for t in range(start, len(ids))])

    def next_token_logprobs(self, ids):
        self.calls += 1
        return torch.log_softmax(self.logits[ids[-1]], -1)

    def tokenize(self, text):
        return [int(c) for c in text.split()]

    def detokenize(self, ids):
        return " ".join(map(str, ids))


TARGET = Markov([[0.1, 0.6, 0.2, 0.1], [0.5, 0.1, 0.1, 0.3], [0.25, 0.25, 0.25, 0.25], [0.7, 0.1, 0.1, 0.1]], "p")
DRAFT = Markov([[0.4, 0.1, 0.1, 0.4], [0.1, 0.6, 0.2, 0.1], [0.1, 0.1, 0.7, 0.1], [0.25, 0.25, 0.25, 0.25]], "q")


def exact(model, start, length):
    probs = model.logits.softmax(-1)
    table = {}
    for seq in itertools.product(range(4), repeat=length):
        p, last = 1.0, start
        for t in seq:
            p, last = p * float(probs[last, t]), t
        table[seq] = p
    return table


def chi_square_p(samples, table):
    keys = sorted(table)
    observed = [sum(1 for s in samples if s == k) for k in keys]
    expected = [table[k] * len(samples) for k in keys]
    return chisquare(observed, expected).pvalue


def test_samples_follow_the_target_not_the_draft():
    samples = [tuple(speculative_generate(TARGET, DRAFT, [0], k=2, max_tokens=2, seed=i).token_ids)
               for i in range(3000)]
    assert chi_square_p(samples, exact(TARGET, 0, 2)) > 0.01
    # the test has power: the draft's own samples are rejected outright
    generator = torch.Generator().manual_seed(0)
    draft_probs = DRAFT.logits.softmax(-1)
    drafted = []
    for _ in range(3000):
        a = int(torch.multinomial(draft_probs[0], 1, generator=generator))
        drafted.append((a, int(torch.multinomial(draft_probs[a], 1, generator=generator))))
    assert chi_square_p(drafted, exact(TARGET, 0, 2)) < 1e-6


def test_greedy_speculative_equals_the_targets_greedy_path():
    out = speculative_generate(TARGET, DRAFT, [2], k=3, max_tokens=7, temperature=0)
    path, last = [], 2
    for _ in range(7):
        last = int(TARGET.logits[last].argmax())
        path.append(last)
    assert out.token_ids == path and out.finish_reason == "length"


def test_a_perfect_draft_is_always_kept_and_the_target_scores_a_block_in_one_pass():
    target = Markov(TARGET.logits.exp().tolist(), "p", sequence=True)
    out = speculative_generate(target, target, [1], k=4, max_tokens=10, seed=0)
    assert out.acceptance_rate == 1.0 and len(out.token_ids) == 10
    assert out.target_calls == 2  # 5 tokens a block: 4 kept drafts and one from the target


def test_end_token_and_stop_strings():
    ends = Markov([[0.01, 0.01, 0.01, 0.97]] * 4, "ends")
    out = speculative_generate(ends, ends, [0], k=2, max_tokens=10, temperature=0, eos_id=3)
    assert out.token_ids == [] and out.finish_reason == "stop"
    out = speculative_generate(TARGET, DRAFT, "2", k=2, max_tokens=10, seed=1, stop=["3"])
    assert "3" not in out.text and out.finish_reason in ("stop", "length")


@pytest.mark.parametrize("kwargs, match", [
    ({"k": 0}, "k must be"), ({"max_tokens": 0}, "max_tokens must be"), ({"temperature": -1.0}, "temperature must be"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        speculative_generate(TARGET, DRAFT, [0], **kwargs)
    with pytest.raises(ValueError, match="at least one token"):
        speculative_generate(TARGET, DRAFT, [])
