"""The reproduction's claims, built from hand-made per-problem outcomes (fast: no model runs)."""

from types import SimpleNamespace

from iclr24.tora.data import Problem
from iclr24.tora.experiment import (
    CLAIM_MARGIN,
    CLAIM_PAL,
    CLAIM_SHAPING,
    METHODS,
    PRESETS,
    _claims,
    _coverage_check,
    _shaping_coverage,
)


def _outcomes(n=24, **correct):
    """``outcomes["one_step", method]``: ``correct[method]`` = indices of the problems it solves."""
    return {("one_step", m): [float(i in correct.get(m, ())) for i in range(n)] for m in METHODS}


def _verdicts(outcomes, coverage=None, shaping=None):
    return {c.statement: c for c in _claims(outcomes, shaping, coverage, "scripted")}


def test_accuracy_claims_are_paired_over_problems():
    claims = _verdicts(_outcomes(tora=range(20), pal=range(5)))
    for statement in (CLAIM_MARGIN, CLAIM_PAL):
        assert claims[statement].verdict == "holds"
        assert claims[statement].evidence.unit == "problems" and claims[statement].evidence.n == 24
        assert claims[statement].evidence.paired
    assert "scripted, 24 one-step problems" in claims[CLAIM_PAL].measured   # the model that ran is named


def test_the_margin_claim_pairs_tora_with_direct_and_with_cot_on_the_same_problems():
    """all_of two paired comparisons: far above direct is not enough when CoT solves the same problems."""
    claim = _verdicts(_outcomes(tora=range(20), cot=range(20)))[CLAIM_MARGIN]
    assert claim.evidence.kind == "all_of" and [part.n for part in claim.evidence.parts] == [24, 24]
    assert claim.verdict == "fails"


def test_a_tie_with_pal_is_inconclusive_and_a_small_lead_over_rationale_is_not_a_wide_margin():
    # the review's case: ToRA and PAL solve the same problems (seeds 1 and 2 of the embedded model)
    tie = _verdicts(_outcomes(tora=range(8), pal=range(8)))
    assert tie[CLAIM_PAL].verdict == "inconclusive"
    # 9 of 24 vs 0: +0.375, but 24 problems cannot place the whole interval above 30 points
    small = _verdicts(_outcomes(tora=range(9)))
    assert small[CLAIM_MARGIN].verdict == "inconclusive"
    assert _verdicts(_outcomes(tora=range(2), cot=range(2)))[CLAIM_MARGIN].verdict == "fails"


def test_shaping_not_run_is_not_a_failure():
    claim = _verdicts(_outcomes(tora=range(3)))[CLAIM_SHAPING]
    assert claim.verdict == "not run" and "shaping_questions=0" in claim.evidence.reason


def test_shaping_claim_pairs_over_training_questions():
    train = [Problem(f"q{i}", str(i)) for i in range(4)]
    records = [{"question": "q0", "origin": "policy"}, {"question": "q0", "origin": "teacher"},
               {"question": "q1", "origin": "teacher"}, {"question": "q2", "origin": "teacher"},
               {"question": "q3", "origin": "teacher"}]
    shaping = SimpleNamespace(records=records, corrected=4, tried=6)
    coverage = _shaping_coverage(train, shaping)
    assert coverage == {"covered": [1.0] * 4, "sampled": [1.0, 0.0, 0.0, 0.0]}
    claim = _verdicts(_outcomes(), coverage, shaping)[CLAIM_SHAPING]
    assert claim.evidence.unit == "questions" and claim.evidence.n == 4
    assert claim.verdict == "inconclusive"                  # 3 of 4 added: too few questions to exclude 0
    nothing_added = {"covered": [1.0, 0.0, 0.0], "sampled": [1.0, 0.0, 0.0]}
    assert _verdicts(_outcomes(), nothing_added, shaping)[CLAIM_SHAPING].verdict == "inconclusive"   # a tie
    assert _shaping_coverage(train, None) is None


def test_coverage_by_construction_is_a_check_and_quick_has_enough_problems():
    assert _coverage_check({"covered": [1.0, 1.0], "sampled": [1.0, 0.0]}).passed
    assert not _coverage_check({"covered": [0.0], "sampled": [1.0]}).passed
    assert PRESETS["quick"].n_one_step >= 20 and PRESETS["quick"].shaping_questions >= 3
    assert PRESETS["smoke"].n_one_step >= 3
