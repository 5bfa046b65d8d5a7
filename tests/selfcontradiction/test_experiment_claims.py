"""The selfcontradiction reproduction's claims: replicates are independent pairs and prompts (fast)."""
from iclr24.core import get_experiment
from iclr24.llm.base import Completion
from iclr24.selfcontradiction.experiment import _claims, _detection_evidence, _sanity_checks, _simulate

DETECT = {"ChatProtect (single-pass P(Yes))": {"pairs": 4, "precision": 1.0, "recall": 1.0, "f1": 1.0,
                                               "flags": [True, True, False, False],
                                               "labels": [True, True, False, False]}}


def test_detection_is_judged_on_precision_and_recall_over_labelled_pairs():
    labels = [True] * 50 + [False] * 50
    good = [True] * 47 + [False] * 3 + [False] * 48 + [True] * 2  # P 0.96, R 0.94
    evidence = _detection_evidence(good, labels)
    assert evidence.verdict == "holds" and evidence.unit == "labelled pairs"
    assert [p.n for p in evidence.parts] == [50, 49]  # recall over the contradictory pairs, precision over flagged
    always = [True] * 100  # recall 1, precision 0.5: no skill
    assert _detection_evidence(always, labels).verdict == "fails"
    assert _detection_evidence([False] * 100, labels).verdict == "fails"  # recall 0; precision undefined


def test_a_few_pairs_decide_nothing():
    assert _detection_evidence([True, False], [True, False]).verdict == "inconclusive"


def test_the_rate_and_the_last_pass_are_sanity_checks_not_claims():
    cfg = get_experiment("selfcontradiction").config("smoke", ["entities=20"])
    sim = _simulate(cfg, seed=0)
    checks = _sanity_checks(cfg, sim)
    assert all(c.passed for c in checks) and len(checks) == 3
    assert "flagged rate" in checks[1].statement and "removes >= 89.5%" in checks[2].statement
    claims = _claims(cfg, sim, DETECT, "scripted test model")
    assert len(claims) == 2 and "scripted test model" in claims[0].measured
    assert not any("rate" in c.statement for c in claims)
    sim["measured_rate"] = sim["configured_rate"] + 0.4      # a broken trigger or analyser fails the check
    assert not _sanity_checks(cfg, sim)[1].passed


def test_mitigation_is_judged_on_informativeness_against_deleting_every_flagged_sentence():
    cfg = get_experiment("selfcontradiction").config("quick", ["entities=60"])
    sim = _simulate(cfg, seed=0)
    mitigate = _claims(cfg, sim, DETECT, "m")[1]
    informativeness, removal = mitigate.evidence.parts
    assert informativeness.kind == "compare" and informativeness.n == 60 and informativeness.paired
    assert informativeness.label.startswith("informativeness") and removal.threshold == -0.05
    assert informativeness.verdict == "holds" and sim["informativeness"] > sim["baseline_informativeness"]
    # a reviser that deletes instead of revising keeps no more than the baseline: the claim cannot hold

    class Deleter:
        name = "deleter"

        def generate(self, prompt, **kwargs):
            return [Completion("NONE", "stop", 0, 0, 0.0)]

    deleting = _simulate(cfg, seed=0, reviser=Deleter())
    assert _claims(cfg, deleting, DETECT, "m")[1].evidence.verdict != "holds"
    assert deleting["informativeness"] <= deleting["baseline_informativeness"]


def test_detection_is_also_compared_with_always_yes_and_selfcheck_on_the_same_pairs():
    labels = [True] * 50 + [False] * 50
    good = [True] * 47 + [False] * 3 + [False] * 48 + [True] * 2
    detect = {"ChatProtect (single-pass P(Yes))": {"pairs": 100, "precision": 0.96, "recall": 0.94, "f1": 0.95,
                                                   "flags": good, "labels": labels},
              "SelfCheck prompt (P(No))": {"pairs": 110, "precision": 0.5, "recall": 1.0, "f1": 0.67,
                                           "flags": [True] * 110, "labels": labels + [True] * 10}}
    cfg = get_experiment("selfcontradiction").config("smoke", [])
    sim = _simulate(cfg, seed=0)
    detection = _claims(cfg, sim, detect, "m")[0]
    parts = detection.evidence.parts
    assert [p.label for p in parts[1:]] == ["accuracy: ChatProtect - always Yes",
                                            "accuracy: ChatProtect - SelfCheck prompt"]
    assert all(p.n == 100 and p.verdict == "holds" for p in parts[1:]) and detection.evidence.verdict == "holds"
    assert "F1 95% bootstrap interval [0." in detection.measured
    detect["ChatProtect (single-pass P(Yes))"]["flags"] = [True] * 100       # no skill: ties always-Yes
    assert _claims(cfg, sim, detect, "m")[0].evidence.verdict != "holds"


def test_the_papers_detector_is_judged_once_it_has_scored_30_pairs():
    labels = [True, False] * 55
    row = {"precision": 0.5, "recall": 1.0, "f1": 0.67}
    votes = {**row, "pairs": 30, "flags": [True] * 30, "labels": labels[:30]}
    single = {**row, "pairs": 110, "flags": labels, "labels": labels}       # a perfect single-pass detector
    cfg = get_experiment("selfcontradiction").config("smoke", [])
    sim = _simulate(cfg, seed=0)
    detect = {"ChatProtect (explanation + votes)": votes, "ChatProtect (single-pass P(Yes))": single}
    judged = _claims(cfg, sim, detect, "m")[0]
    assert "explanation + votes): P" in judged.measured and judged.evidence.verdict == "fails"   # flags every pair
    assert judged.evidence.parts[0].parts[0].n == 15                          # recall over its 15 contradictions
    detect["ChatProtect (explanation + votes)"] = {**votes, "pairs": 29, "flags": votes["flags"][:29],
                                                   "labels": labels[:29]}
    fallback = _claims(cfg, sim, detect, "m")[0]      # below 30 pairs: the variant scored on the most pairs
    assert "single-pass P(Yes)): P" in fallback.measured and fallback.evidence.verdict == "holds"


def test_detection_is_not_run_when_no_chatprotect_detector_scored_a_pair():
    cfg = get_experiment("selfcontradiction").config("smoke", [])
    overlap = {"word overlap (no model)": {**DETECT["ChatProtect (single-pass P(Yes))"], "f1": 0.5}}
    detection = _claims(cfg, _simulate(cfg, seed=0), overlap, "a server without log-probabilities")[0]
    assert detection.verdict == "not run" and "no log-probabilities" in detection.evidence.reason
