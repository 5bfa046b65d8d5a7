"""The selfcontradiction reproduction's claims: replicates are independent pairs and prompts (fast)."""
from iclr24.core import get_experiment
from iclr24.selfcontradiction.experiment import _claims, _detection_evidence, _simulate


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


def test_removing_what_was_flagged_is_a_check_and_the_claims_count_prompts():
    cfg = get_experiment("selfcontradiction").config("smoke", ["entities=20"])
    sim = _simulate(cfg, seed=0)
    assert sim["last_pass_removed"] == sim["last_pass_flagged"]  # true by construction: the last pass removes
    detect = {"ChatProtect (single-pass P(Yes))": {"pairs": 4, "precision": 1.0, "recall": 1.0, "f1": 1.0,
                                                   "flags": [True, True, False, False],
                                                   "labels": [True, True, False, False]}}
    detection, rate, mitigate = _claims(cfg, sim, detect, "scripted test model")
    assert "scripted test model" in detection.measured and rate.statement.startswith("SIMULATED")
    assert rate.evidence.parts[0].n == 20 and rate.evidence.parts[0].unit == "prompts (fictional places)"
    assert "flagged" not in mitigate.criterion  # only removal of all contradictions and facts kept are judged
    assert mitigate.evidence.parts[0].label == "share of contradictions removed"
