"""The claims' evidence on hand-made measurements (no model, no sandbox)."""

import pytest

from iclr24.core.evidence import against, pool
from iclr24.l2mac.experiment import (
    CLAIM_CODEBASE,
    CLAIM_HUMANEVAL,
    CLAIM_REAL,
    HUMANEVAL_MIN_PROBLEMS,
    PRESETS,
    REAL_RATE_BAR,
    Config,
    _checks,
    _claims,
    model_stand_in,
)
from iclr24.l2mac.tasks import ONE_STEP_TASKS
from iclr24.llm import LoggedModel
from iclr24.llm.scripted import ScriptedModel

EMBEDDED = "the embedded smollm2-135m-instruct (135M parameters) stands in for GPT-4"


def simulated(ours=(100.0, 100.0, 96.3), single=(14.8, 11.1, 14.8), code_tokens=(4171, 4166, 4180)):
    def measures(features, tokens):
        return {"features_pct": list(features), "code_tokens": list(tokens)}

    return {"l2mac": measures(ours, code_tokens), "single_context": measures(single, (278,) * len(single)),
            "l2mac_without_test_feedback": measures((55.6,) * len(ours), code_tokens)}


def humaneval_rows(l2mac, direct):
    return [{"problem": f"HumanEval/{i}", "L2MAC": bool(a), "direct": bool(b), "L2MAC model calls": 3}
            for i, (a, b) in enumerate(zip(l2mac, direct))]


def claims_of(real_rows=(), he_rows=(), stand_in=EMBEDDED, **sim):
    return {c.statement: c for c in _claims(simulated(**sim), PRESETS["quick"], list(real_rows), list(he_rows),
                                            llm_stand_in=stand_in)}


def verdicts(real_rows=(), he_rows=(), **sim):
    return {statement: c.verdict for statement, c in claims_of(real_rows, he_rows, **sim).items()}


def real_rows_of(*outcomes, mode="constrained"):
    """One row per one-file task (the bundled ones first, then others): (steps completed, hidden tests passed)."""
    return [{"task": ONE_STEP_TASKS[i].name if i < len(ONE_STEP_TASKS) else f"task{i}", "tool calls": mode,
             "steps completed": done,             "hidden tests passed": passed, "parse failures": 0, "model calls": 2}
            for i, (done, passed) in enumerate(outcomes)]


def test_the_codebase_claim_is_judged_over_seeds():
    assert verdicts()[CLAIM_CODEBASE] == "holds"
    assert verdicts(ours=(100.0, 85.2, 88.9))[CLAIM_CODEBASE] == "inconclusive"  # mean 91.4, interval across 90
    assert verdicts(single=(80.0, 75.0, 77.0))[CLAIM_CODEBASE] == "fails"  # not 30 points below
    assert verdicts(ours=(100.0,), single=(14.8,), code_tokens=(4171,))[CLAIM_CODEBASE] == "inconclusive"  # 1 seed


def test_the_simulated_coders_100_on_every_seed_decides_nothing():
    # review #58: 100 [100, 100] (no spread) had made the claim hold; it is what the simulated coder's construction
    # gives (a check), so the claim is inconclusive, its other parts still shown with their own verdicts
    # quick, seed 0: 100% and 4,171 code tokens on every seed; the single context 14.8 / 11.1 / 14.8
    claim = claims_of(ours=(100.0, 100.0, 100.0), code_tokens=(4171, 4171, 4171))[CLAIM_CODEBASE]
    features, gap, code = claim.evidence.parts
    assert claim.verdict == "inconclusive" and features.verdict == code.verdict == "inconclusive"
    assert features.interval is None and code.interval is None
    assert gap.verdict == "holds"


def test_the_codebase_claim_is_a_stand_in_from_the_spec():
    claim = claims_of()[CLAIM_CODEBASE]
    assert (claim.subject, claim.provenance) == ("stand-in", "spec")
    assert "simulated coder" in claim.stand_in and "reference code" in claim.stand_in
    assert not claim.evidence.parts[0].fixed  # the seeds draw the bugs: each seed is new evidence


def test_the_simulated_coders_completion_is_a_check():
    def row(seed, steps, features):
        return {"method": "L2MAC", "seed": seed, "steps completed": steps, "features %": features}

    others = [{"method": "single context", "seed": 0, "steps completed": "0/1", "features %": 14.8}]
    assert _checks([row(0, "8/8", 100.0), row(1, "8/8", 100.0)] + others)[0].passed
    assert not _checks([row(0, "8/8", 100.0), row(1, "7/8", 100.0)])[0].passed
    assert not _checks([row(0, "8/8", 96.3)])[0].passed


def test_every_claim_has_a_provenance_and_only_the_revised_one_a_revision():
    for stand_in in (EMBEDDED, ""):
        for claim in claims_of(real_rows_of(("1/1", "1/1")) * 3, humaneval_rows([1] * 20, [0] * 20),
                               stand_in=stand_in).values():
            assert claim.provenance in ("paper", "spec", "revised"), claim.statement
            assert bool(claim.revision) == (claim.provenance == "revised")
    assert claims_of()[CLAIM_REAL].provenance == "revised" and claims_of()[CLAIM_HUMANEVAL].provenance == "spec"


def test_parts_not_measured_are_not_run():
    v = verdicts()
    assert v[CLAIM_REAL] == "not run" and v[CLAIM_HUMANEVAL] == "not run"


def test_the_real_model_claim_is_judged_over_tasks():
    rows = real_rows_of(*[("1/1", "1/1")] * 3)
    assert verdicts(real_rows=rows)[CLAIM_REAL] == "inconclusive"  # 3 of 3: the exact interval [0.29, 1]
    assert verdicts(real_rows=real_rows_of(*[("1/1", "1/1")] * 13))[CLAIM_REAL] == "holds"  # 13 of 13: [0.753, 1]
    # a task passing only some hidden tests does not pass
    assert verdicts(real_rows=real_rows_of(*[("1/1", "1/2")] * 13))[CLAIM_REAL] == "fails"
    assert verdicts(real_rows=real_rows_of(("1/1", "1/1"), ("1/1", "1/2"), ("0/1", "0/1")))[CLAIM_REAL] == \
        "inconclusive"
    assert verdicts(real_rows=real_rows_of(*[("0/1", "0/1")] * 3))[CLAIM_REAL] == "fails"  # 0 of 3: [0, 0.71]


def test_the_real_model_claim_can_fail_and_shows_its_first_bar():
    # review #58: a rate against bar 0 could never fail; 0 of the bundled tasks completing now fails
    assert against([0.0] * len(ONE_STEP_TASKS), REAL_RATE_BAR, binary=True, unit="tasks").verdict == "fails"
    claim = claims_of(real_rows_of(*[("0/1", "0/1")] * 3))[CLAIM_REAL]
    assert claim.verdict == "fails" and claim.evidence.parts[0].threshold == REAL_RATE_BAR
    assert claim.original.verdict == "inconclusive" and claim.original.parts[0].threshold == 0.0
    assert "0.75" in claim.revision


def test_the_bundled_tasks_are_a_fixed_set_a_seed_group_counts_once():
    # review #58: five seeds of L2MAC's 0 of 3 tasks had pooled into 0 of 15, [0, 0.22]; the tasks are the same
    claims = [claims_of(real_rows_of(*[("0/1", "0/1")] * 3))[CLAIM_REAL] for _ in range(5)]
    completed = pool([c.evidence for c in claims]).parts[0]
    assert completed.fixed and completed.n == 3 and completed.unit == "tasks"
    assert completed.interval[0] == 0.0 and round(completed.interval[1], 2) == 0.71


def test_the_real_model_claim_is_judged_on_constrained_runs_with_the_free_rate_beside():
    constrained = [{**r, "model calls": 4} for r in real_rows_of(*[("1/1", "1/1")] * 3)]
    free = [{**r, "parse failures": 3, "model calls": 4} for r in real_rows_of(*[("0/1", "0/1")] * 3, mode="free")]
    claim = claims_of(constrained + free)[CLAIM_REAL]
    assert claim.evidence.parts[0].n == 3 and claim.evidence.parts[0].samples == ((1.0, 1.0, 1.0),)
    assert "0.00 parse failures a call (free tool calls: 0.75 a call), 0.00 replies a call cut" in claim.measured


def test_the_model_claims_are_stand_ins_only_for_the_embedded_or_a_scripted_model():
    assert model_stand_in(ScriptedModel(["x"])) == "a scripted model stands in for GPT-4"

    class Served:  # what --llm openai:MODEL gives: a model the claims are about
        name, capabilities = "gpt-4o", None

    assert model_stand_in(Served()) == ""
    from iclr24.llm.hf import EmbeddedModel

    embedded = EmbeddedModel.__new__(EmbeddedModel)  # its type, without loading the weights
    embedded.name, embedded.capabilities = "smollm2-135m-instruct", None
    assert model_stand_in(embedded) == EMBEDDED and model_stand_in(LoggedModel(embedded, "/dev/null")) == EMBEDDED
    rows, he = real_rows_of(("1/1", "1/1")) * 3, humaneval_rows([1] * 20, [0] * 20)
    for stand_in, subject in ((EMBEDDED, "stand-in"), ("", "paper")):
        claims = claims_of(rows, he, stand_in=stand_in)
        assert claims[CLAIM_REAL].subject == claims[CLAIM_HUMANEVAL].subject == subject
        assert claims[CLAIM_REAL].stand_in == claims[CLAIM_HUMANEVAL].stand_in == stand_in
        assert claims[CLAIM_CODEBASE].subject == "stand-in"  # the simulated coder, whatever the model


def test_humaneval_is_paired_over_at_least_20_problems():
    # review finding: HumanEval was judged on 1 problem; now >= 20, paired, per-problem pass compared
    with pytest.raises(ValueError, match=f">= {HUMANEVAL_MIN_PROBLEMS} problems"):
        Config(humaneval=1)
    assert PRESETS["paper"].humaneval >= HUMANEVAL_MIN_PROBLEMS and PRESETS["quick"].humaneval == 0  # quick: not run
    evidence = claims_of(he_rows=humaneval_rows([1] * 15 + [0] * 5, [0] * 15 + [0] * 5))[CLAIM_HUMANEVAL].evidence
    assert (evidence.kind, evidence.unit, evidence.n, evidence.paired) == ("compare", "problems", 20, True)
    assert evidence.verdict == "holds"
    # the same problems passed by both: a tie decides nothing
    same = [1, 0] * 10
    assert verdicts(he_rows=humaneval_rows(same, same))[CLAIM_HUMANEVAL] == "inconclusive"
    # direct generation passes more of the same problems
    assert verdicts(he_rows=humaneval_rows([0] * 20, [1] * 16 + [0] * 4))[CLAIM_HUMANEVAL] == "fails"


def test_the_first_humaneval_problems_are_a_fixed_set_a_seed_group_counts_once():
    rows = humaneval_rows([1] * 15 + [0] * 5, [0] * 20)
    evidence = [claims_of(he_rows=rows)[CLAIM_HUMANEVAL].evidence for _ in range(5)]
    assert evidence[0].fixed and evidence[0].clusters[0] == "HumanEval/0"
    assert pool(evidence).n == 20
