"""The reproduction's claims, built from hand-made per-problem outcomes (fast: no model runs)."""

from types import SimpleNamespace

import pytest

from iclr24.core.evidence import pool
from iclr24.core.plan import plan_claim
from iclr24.llm import get_model
from iclr24.tora.data import TEMPLATES, Problem, gsm_problems, template_name
from iclr24.tora.experiment import (
    CLAIM_MARGIN,
    CLAIM_PAL,
    CLAIM_SHAPING,
    METHODS,
    PRESETS,
    RECOVERY_BAR,
    _claims,
    _coverage_check,
    _shaping_coverage,
    _stand_in,
)

ONE_STEP = [f"gsm-synthetic/{template_name(t)}" for t in TEMPLATES[1]]


def _templates(n, k=4):
    """The generator's layout: problem i from template i mod k."""
    return [f"gsm-synthetic/t{i % k}" for i in range(n)]


def _outcomes(n=24, **correct):
    """``outcomes["one_step", method]``: ``correct[method]`` = indices of the problems it solves."""
    return {("one_step", m): [float(i in correct.get(m, ())) for i in range(n)] for m in METHODS}


def _verdicts(outcomes, coverage=None, shaping=None, *, k=4, train=None, stand_in="scripted stands in"):
    n = len(outcomes["one_step", "tora"])
    templates = {"one_step": _templates(n, k), "train": train if train is not None else _templates(
        len(coverage["covered"]) if coverage else 0, k)}
    return {c.statement: c for c in _claims(outcomes, templates, shaping, coverage, "scripted", stand_in)}


def test_quick_solves_two_problems_of_every_one_step_template_each_named_by_its_template():
    """Issue #60: the claims' units are templates, so quick draws every one-step template (>= 20), twice."""
    quick = PRESETS["quick"]
    problems = gsm_problems(quick.n_one_step, seed=0, digits=quick.digits, steps=(1,))
    assert len(ONE_STEP) >= 20 and [p.source for p in problems] == ONE_STEP * 2
    assert PRESETS["smoke"].n_one_step >= 3


def test_accuracy_claims_are_paired_over_problems_and_n_counts_templates():
    """32 problems of 4 templates are 4 independent units, not 32: n counts templates."""
    claims = _verdicts(_outcomes(32, tora=range(0, 32, 2), pal=range(0, 32, 8)))
    for statement in (CLAIM_MARGIN, CLAIM_PAL):
        parts = claims[statement].evidence.parts or (claims[statement].evidence,)
        for e in parts:
            assert e.unit == "templates" and e.n == 4 and e.paired
            assert e.clusters == tuple(_templates(32)) and len(e.samples[0]) == 32   # every problem kept
    assert "scripted, 32 one-step problems from 4 templates" in claims[CLAIM_PAL].measured
    # the same outcomes, each problem its own template: n = 32, and the same lead now decides
    many = _verdicts(_outcomes(32, tora=range(0, 32, 2), pal=range(0, 32, 8)), k=32)
    assert many[CLAIM_PAL].evidence.n == 32 and many[CLAIM_PAL].verdict == "holds"


def test_template_evidence_is_fixed_so_a_seed_group_counts_each_template_once():
    """The templates are a fixed set no seed draws: every clustered evidence says so, so the planner never asks
    for more seeds, and a seed group pools each template's problems (2 a seed) into one unit: n stays 24."""
    train = [Problem(f"q{i}", str(i)) for i in range(4)]
    shaping, coverage = _shaping(train, [{"question": "q1", "origin": "teacher"}])
    runs = []
    for seed in range(2):
        outcomes = _outcomes(48, tora=range(seed, 48, 2), pal=range(0, 48, 6))
        templates = {"one_step": ONE_STEP * 2, "train": ONE_STEP[:4]}
        runs.append({c.statement: c for c in _claims(outcomes, templates, shaping, coverage, "scripted")})
    for statement, claim in runs[0].items():
        evidence = [claim.evidence, *claim.evidence.parts] + ([claim.original] if claim.original else [])
        assert all(e.fixed and e.unit == "templates" for e in evidence if e.clusters), statement
    pooled = pool([run[CLAIM_PAL].evidence for run in runs])
    assert pooled.fixed and runs[0][CLAIM_PAL].evidence.n == pooled.n == 24 and len(pooled.samples[0]) == 96
    assert pool([run[CLAIM_MARGIN].evidence for run in runs]).parts[0].n == 24
    plan = plan_claim({"statement": CLAIM_PAL, "evidence": pooled.to_dict()}, units_per_run=24, cpu_s_per_run=1.0)
    assert plan.status == "cannot decide" and "more seeds add no independent units" in plan.reason


def test_four_templates_leave_a_lead_undecided_that_ten_templates_or_independent_problems_decide():
    """ToRA solves half of the problems of every template but one, PAL none. Per problem (32 independent units)
    that is 12 wins and no loss; over the 4 templates' means (0.5, 0.5, 0.5, 0) a Student t interval on 3 degrees
    of freedom reaches below 0; over 10 such templates it does not."""
    half_but_one = [i for i in range(16) if i % 4 != 3]
    four = _verdicts(_outcomes(32, tora=half_but_one))[CLAIM_PAL]
    assert four.evidence.n == 4 and four.verdict == "inconclusive" and four.evidence.interval[0] < 0
    assert _verdicts(_outcomes(32, tora=half_but_one), k=32)[CLAIM_PAL].verdict == "holds"
    ten = _verdicts(_outcomes(40, tora=[i for i in range(20) if i % 10 != 3]), k=10)[CLAIM_PAL]
    assert ten.evidence.n == 10 and ten.verdict == "holds"


def test_paired_pass_fail_without_clusters_uses_tangos_interval():
    """Each problem its own template (smoke: 3 problems of 3 templates): 0/1 outcomes, Tango's score interval."""
    claims = _verdicts(_outcomes(24, tora=range(20), pal=range(5)), k=24)
    assert claims[CLAIM_PAL].evidence.test.startswith("Tango") and claims[CLAIM_PAL].verdict == "holds"
    assert claims[CLAIM_MARGIN].verdict == "holds"


def test_the_margin_claim_pairs_tora_with_direct_and_with_cot_on_the_same_problems():
    """all_of two paired comparisons: far above direct is not enough when CoT solves the same problems."""
    claim = _verdicts(_outcomes(24, tora=range(20), cot=range(20)), k=24)[CLAIM_MARGIN]
    assert claim.evidence.kind == "all_of" and [part.n for part in claim.evidence.parts] == [24, 24]
    assert [part.label for part in claim.evidence.parts] == ["accuracy, ToRA - direct answer",
                                                              "accuracy, ToRA - chain of thought"]
    assert claim.verdict == "fails"


def test_a_tie_with_pal_is_inconclusive_and_a_small_lead_over_rationale_is_not_a_wide_margin():
    # the review's case: ToRA and PAL solve the same problems (seeds 1 and 2 of the embedded model)
    assert _verdicts(_outcomes(tora=range(8), pal=range(8)))[CLAIM_PAL].verdict == "inconclusive"
    # 9 of 24 vs 0: +0.375, but the interval cannot lie wholly above 30 points
    assert _verdicts(_outcomes(tora=range(9)), k=24)[CLAIM_MARGIN].verdict == "inconclusive"
    assert _verdicts(_outcomes(tora=range(2), cot=range(2)), k=24)[CLAIM_MARGIN].verdict == "fails"
    # over templates: 2 of each template's 6 problems solved by ToRA and by CoT, every template the same
    assert _verdicts(_outcomes(tora=range(8), cot=range(8)))[CLAIM_MARGIN].verdict == "inconclusive"


def test_every_claim_has_its_provenance_and_the_stand_in_is_marked():
    claims = _verdicts(_outcomes(tora=range(3)))
    assert {s: c.provenance for s, c in claims.items()} == {CLAIM_MARGIN: "revised", CLAIM_PAL: "revised",
                                                           CLAIM_SHAPING: "revised"}
    assert "could not fail" in claims[CLAIM_SHAPING].revision
    # the accuracy claims' margins are the spec's; their data (24 templates, issue #60) changed with results seen
    assert all("24 one-step templates" in claims[s].revision and "margin unchanged" in claims[s].revision
               for s in (CLAIM_MARGIN, CLAIM_PAL))
    assert all(c.subject == "stand-in" and c.stand_in == "scripted stands in" for c in claims.values())
    paper = _verdicts(_outcomes(tora=range(3)), stand_in="")
    assert all(c.subject == "paper" and not c.stand_in for c in paper.values())


def test_the_embedded_and_scripted_models_stand_in_and_a_served_model_does_not(monkeypatch):
    assert "stands in for the paper's models" in _stand_in(get_model("scripted", outputs=[]))
    pytest.importorskip("openai")
    from iclr24.llm.openai_backend import OpenAIModel

    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    assert _stand_in(OpenAIModel("gpt-4", base_url="http://127.0.0.1:9/v1")) == ""


def test_shaping_not_run_is_not_a_failure():
    claim = _verdicts(_outcomes(tora=range(3)))[CLAIM_SHAPING]
    assert claim.verdict == "not run" and "shaping_questions=0" in claim.evidence.reason


def _shaping(train, records):
    shaping = SimpleNamespace(records=records, corrected=len(records), tried=2 * len(records))
    return shaping, _shaping_coverage(train, shaping)


def test_shaping_claim_is_the_share_of_missed_questions_that_corrections_cover():
    train = [Problem(f"q{i}", str(i)) for i in range(4)]
    records = [{"question": "q0", "origin": "policy"}, {"question": "q0", "origin": "teacher"},
               {"question": "q1", "origin": "teacher"}, {"question": "q2", "origin": "teacher"}]
    shaping, coverage = _shaping(train, records)
    assert coverage == {"covered": [1.0, 1.0, 1.0, 0.0], "sampled": [1.0, 0.0, 0.0, 0.0]}
    claim = _verdicts(_outcomes(), coverage, shaping, k=4)[CLAIM_SHAPING]
    e = claim.evidence
    assert e.kind == "against" and e.samples == ((1.0, 1.0, 0.0),) and e.threshold == RECOVERY_BAR
    assert e.unit == "templates" and e.n == 3 and claim.verdict == "inconclusive"   # 2 of 3: too few
    assert "3 without a valid sample, 2 of them covered by a correction" in claim.measured
    # the first definition, shown beside it: covered - sampled over all four questions
    assert claim.original.kind == "compare" and claim.original.n == 4 and claim.original.effect == 0.5
    assert _shaping_coverage(train, None) is None


def test_the_shaping_bar_can_fail_and_can_hold():
    """The first definition (covered - sampled > 0) never fails: covered >= sampled by construction. The share of
    missed questions recovered fails when corrections cover none of 20 (of 20 templates) and holds for 15 of 20."""
    train = [Problem(f"q{i}", str(i)) for i in range(20)]
    names = [f"t{i}" for i in range(20)]
    none, coverage = _shaping(train, [])
    claim = _verdicts(_outcomes(), coverage, none, train=names)[CLAIM_SHAPING]
    assert claim.verdict == "fails" and claim.evidence.interval[1] < RECOVERY_BAR
    assert claim.original.verdict != "fails"   # the old claim could not fail on the same questions
    most, coverage = _shaping(train, [{"question": f"q{i}", "origin": "teacher"} for i in range(15)])
    assert _verdicts(_outcomes(), coverage, most, train=names)[CLAIM_SHAPING].verdict == "holds"
    # over 4 templates (the generator's number before issue #60) the 20 questions are 4 units: none recovered of 4
    # cannot fail (an exact interval on 4 reaches 0.6)
    four = _verdicts(_outcomes(), _shaping(train, [])[1], none, train=_templates(20))[CLAIM_SHAPING]
    assert four.evidence.n == 4 and four.verdict == "inconclusive"


def test_shaping_with_every_question_sampled_is_not_run():
    train = [Problem(f"q{i}", str(i)) for i in range(3)]
    shaping, coverage = _shaping(train, [{"question": f"q{i}", "origin": "policy"} for i in range(3)])
    claim = _verdicts(_outcomes(), coverage, shaping)[CLAIM_SHAPING]
    assert claim.verdict == "not run" and "every training question had a valid sample" in claim.evidence.reason


def test_coverage_by_construction_is_a_check_and_quick_has_enough_problems():
    assert _coverage_check({"covered": [1.0, 1.0], "sampled": [1.0, 0.0]}).passed
    assert not _coverage_check({"covered": [0.0], "sampled": [1.0]}).passed
    assert PRESETS["quick"].shaping_questions >= 3
