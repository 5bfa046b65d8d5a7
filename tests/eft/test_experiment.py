"""The EFT reproduction's claims: judged by the evidence API on what they measure, facts by construction as checks."""

import time

import pytest
import torch

from iclr24.core import run
from iclr24.eft.experiment import (
    CLAIM_DECOMPOSE,
    CLAIM_UPSCALE,
    PRESETS,
    Config,
    _claims,
    paired_decoding_times,
)
from tests.eft.test_speculative import DRAFT, TARGET


def _outcomes(n=160, eft=(1, 1, 1), base=(0, 1, 0), ft=(0, 0, 1), eft_misses=2, ft_hits=12):
    """``n`` held-out people's (accuracy, factuality, format) outcomes for each model: mostly the given ones, with
    ``eft_misses`` people EFT gets wrong (wrong city, right format) and ``ft_hits`` whose city the small
    fine-tuned model guesses, as in a real run (all-equal outcomes would leave a difference with no spread)."""
    def people(acc, fact, fmt, flipped=()):
        rows = [(acc, fact, fmt)] * n
        for i, row in flipped:
            rows[i] = row
        return {"accuracy": [r[0] for r in rows], "factuality": [r[1] for r in rows], "format": [r[2] for r in rows]}
    return {"eft": people(*eft, [(i, (0, 0, 1)) for i in range(eft_misses)]),
            "base_large": people(*base),
            "ft_small": people(*ft, [(n - 1 - i, (1, 1, 1)) for i in range(ft_hits)])}


SPEC = {"acceptance_rate": 0.6, "chi2_p": 0.5}
COSTS = {"large_pass_cost_deepened": 10.0, "large_pass_cost_trained": 2.0}


def _prompts(speedups, trained=None, passes=15, tokens=32):
    """Per-prompt rows as :func:`paired_decoding_times` returns them: speculative decoding ``speedups[i]`` times
    faster on the deepened trio (``trained[i]`` on the trained one), the large model run ``passes`` times."""
    trained = trained or [1.0] * len(speedups)
    return [{"prompt": i, "tokens": tokens, "plain large passes": tokens, "speculative large passes": passes,
             "draft passes": 2 * tokens, "same samples": True, "plain s (deepened)": 1.0,
             "speculative s (deepened)": 1.0 / s, "plain s (trained)": 0.3, "speculative s (trained)": 0.3 / t}
            for i, (s, t) in enumerate(zip(speedups, trained))]


def _speculative(rows):
    return _claims(_outcomes(), SPEC, rows, COSTS)[2]


def test_the_speculative_claim_is_judged_on_time_not_on_large_model_passes():
    faster = _speculative(_prompts([1.4, 1.5, 1.6, 1.45, 1.55]))
    assert faster.verdict == "holds" and faster.evidence.kind == "ratio" and faster.evidence.unit == "prompts"
    assert faster.evidence.n == 5 and faster.evidence.effect == pytest.approx(1.5, abs=0.01)
    # the same halved large-model work, no time saved: the pass count cannot make it hold
    same_time = _speculative(_prompts([0.95, 1.05, 1.0, 0.97, 1.03]))
    assert same_time.verdict == "inconclusive"
    assert _speculative(_prompts([0.8, 0.85, 0.9, 0.82, 0.88])).verdict == "fails"
    # the work ratio is shown, never judged: 32 tokens in 15 large passes
    assert "0.47 times a token" in same_time.measured and "2.13x fewer passes, not deciding" in same_time.measured
    assert _speculative(_prompts([1.4, 1.6])).verdict == "inconclusive"  # two prompts decide nothing


def test_the_speculative_claim_is_a_revised_stand_in_with_its_first_definition_beside_it():
    claim = _speculative(_prompts([1.4, 1.5, 1.6, 1.45, 1.55], trained=[0.9, 1.1, 1.0, 0.95, 1.05]))
    assert claim.provenance == "revised" and "first defined" in claim.revision and "0.91x-1.09x" in claim.revision
    assert claim.subject == "stand-in" and "identity blocks" in claim.stand_in and "70B" in claim.stand_in
    # the first definition (the trained trio's times) is shown and does not decide
    assert claim.original.verdict == "inconclusive" and claim.verdict == "holds"
    assert claim.original.samples == ((0.3,) * 5, tuple(0.3 / t for t in (0.9, 1.1, 1.0, 0.95, 1.05)))
    assert "10.0x the draft a pass" in claim.measured and "(2.0x a pass) 1.00x" in claim.measured


class Timed:
    """A Markov-chain LM (the next token from the last one) whose every forward pass, one next-token call or all
    positions at once as a transformer scores a draft, takes ``cost`` seconds (a sleep: no CPU taken from the
    shared machine, and the same wake-up delay for plain and speculative decoding)."""

    def __init__(self, probs, cost):
        self.logprobs, self.cost = torch.as_tensor(probs, dtype=torch.float64).log(), cost

    def next_token_logprobs(self, ids):
        time.sleep(self.cost)
        return self.logprobs[ids[-1]]

    def sequence_logprobs(self, ids, start=0):
        time.sleep(self.cost)
        return self.logprobs[list(ids[start:])]

    def detokenize(self, ids):
        return " ".join(map(str, ids))


def test_timed_decoding_holds_only_where_the_large_pass_costs_more_than_the_draft():
    target, draft = TARGET.logits.softmax(-1), 0.5 * TARGET.logits.softmax(-1) + 0.5 * DRAFT.logits.softmax(-1)
    # one target distribution, its pass costing 50x the draft's, and the same as the draft's
    targets = {"deepened": Timed(target, 0.1), "trained": Timed(target, 0.002)}
    rows = paired_decoding_times(targets, Timed(draft, 0.002), [[i % 4] for i in range(6)], k=4, tokens=10,
                                 temperature=1.0)
    assert [r["prompt"] for r in rows] == list(range(6)) and all(r["same samples"] for r in rows)
    assert all(r["plain large passes"] == r["tokens"] == 10 for r in rows)
    assert all(r["speculative large passes"] <= 5 for r in rows)  # half the large passes or fewer, in both
    claim = _claims(_outcomes(), SPEC, rows, {"large_pass_cost_deepened": 50.0, "large_pass_cost_trained": 1.0})[2]
    assert claim.verdict == "holds"
    # the draft costs as much as the large model: fewer large passes, and still slower (a wake-up delay on one
    # prompt can widen the interval to inconclusive; it can never make it hold)
    assert claim.original.verdict != "holds" and claim.original.effect < 1


def test_upscaling_and_decomposition_claims_over_held_out_people():
    claims = {c.statement: c for c in _claims(_outcomes(), SPEC, _prompts([1.5, 1.4, 1.6]), COSTS)}
    upscale, decompose = claims[CLAIM_UPSCALE], claims[CLAIM_DECOMPOSE]
    assert upscale.verdict == "holds" and decompose.verdict == "holds"
    assert [p.n for p in upscale.evidence.parts] == [160, 160, 160] and len(decompose.evidence.parts) == 4
    for claim in (upscale, decompose):
        assert claim.provenance == "spec" and claim.subject == "stand-in" and "synthetic" in claim.stand_in
        # the seed draws the world and its held-out people: not a fixed set
        assert all(p.unit == "held-out people" and not p.fixed for p in claim.evidence.parts)
    # EFT no better than the small fine-tuned model: up-scaling fails; EFT loses the facts: decomposition fails
    claims = {c.statement: c.verdict for c in _claims(_outcomes(eft=(0, 0, 1)), SPEC, _prompts([1.5, 1.4, 1.6]),
                                                      COSTS)}
    assert claims[CLAIM_UPSCALE] == "fails" and claims[CLAIM_DECOMPOSE] == "fails"


def test_an_up_scaling_part_with_no_spread_decides_nothing():
    # EFT right on every person and the large base on none: each difference EFT - 3 x base is 1, with no spread;
    # the binary parts (EFT's accuracy, the decomposition's paired rates) still decide
    claims = _claims(_outcomes(eft_misses=0), SPEC, _prompts([1.5, 1.4, 1.6]), COSTS)
    parts = claims[0].evidence.parts
    assert [p.verdict for p in parts] == ["holds", "inconclusive", "holds"] and parts[1].interval is None
    assert claims[0].verdict == "inconclusive" and claims[1].verdict == "holds"


def test_config_refuses_a_deepened_base_shallower_than_the_trained_one():
    assert PRESETS["quick"].deepened_layers > PRESETS["quick"].large_layers
    with pytest.raises(ValueError, match="deepened_layers must be >= large_layers"):
        Config(large_layers=3, deepened_layers=2)


def test_smoke_run_keeps_identities_and_the_distribution_test_as_checks(tmp_path):
    record = run("eft", preset="smoke", runs_dir=tmp_path, quiet=True)
    assert record.ok, record.result.get("traceback")
    checks = {c["statement"]: c for c in record.result["checks"]}
    assert "EFT(L, S, S) = L (toy trio)" in checks and "beta = 0 gives the large base (toy trio)" in checks
    assert any(s.startswith("speculative samples follow the exact EFT distribution") for s in checks)
    assert any(s.startswith("the deepened large base") for s in checks)
    assert all(c["passed"] for c in checks.values())
    assert all("EFT(L, S, S)" not in c["statement"] for c in record.result["claims"])
    assert all(c["provenance"] in ("spec", "revised") for c in record.result["claims"])
    rows = record.result["tables"]["speculative_prompts"]
    assert len(rows) == 3 and all(r["plain s (deepened)"] > 0 and r["speculative s (trained)"] > 0 for r in rows)
    assert record.result["timings"]["large_pass_cost_deepened"] > record.result["timings"]["large_pass_cost_trained"]
