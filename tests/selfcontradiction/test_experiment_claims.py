"""The selfcontradiction reproduction's claims: replicates are independent pairs and prompts (fast)."""
import pytest

from iclr24.core import get_experiment
from iclr24.core.evidence import pool
from iclr24.llm import LoggedModel
from iclr24.llm.base import Completion
from iclr24.llm.scripted import ScriptedModel
from iclr24.selfcontradiction.experiment import (
    CLAIM_DETECT,
    CLAIM_MITIGATE,
    _claims,
    _detection_evidence,
    _sanity_checks,
    _simulate,
    model_stand_in,
)

DETECT = {"ChatProtect (single-pass P(Yes))": {"pairs": 4, "precision": 1.0, "recall": 1.0, "f1": 1.0,
                                               "flags": [True, True, False, False],
                                               "labels": [True, True, False, False], "ids": ["0", "1", "2", "3"]}}
EMBEDDED = "the embedded smollm2-135m-instruct (135M parameters) stands in for ChatGPT as the analyser"


def ids(n):
    return [f"{i:03d}" for i in range(n)]


def claims(cfg, sim, detect, llm_name="m", stand_in=EMBEDDED):
    return _claims(cfg, sim, detect, llm_name, llm_stand_in=stand_in)


def test_detection_is_judged_on_precision_and_recall_over_labelled_pairs():
    labels = [True] * 50 + [False] * 50
    good = [True] * 47 + [False] * 3 + [False] * 48 + [True] * 2  # P 0.96, R 0.94
    evidence = _detection_evidence(good, labels, ids(100))
    assert evidence.verdict == "holds" and all(p.unit == "labelled pairs" for p in evidence.parts)
    assert [p.n for p in evidence.parts] == [50, 49]  # recall over the contradictory pairs, precision over flagged
    always = [True] * 100  # recall 1, precision 0.5: no skill
    assert _detection_evidence(always, labels, ids(100)).verdict == "fails"


def test_a_rate_with_nothing_to_count_is_not_run_never_a_zero():
    # review #58: no flagged pair had added a made-up 0 replicate to precision
    labels = [True] * 50 + [False] * 50
    recall, precision = _detection_evidence([False] * 100, labels, ids(100)).parts
    assert recall.verdict == "fails" and recall.n == 50                       # recall 0 of 50
    assert precision.verdict == "not run" and "no pair was flagged" in precision.reason
    assert _detection_evidence([False] * 100, labels, ids(100)).verdict == "fails"  # recall alone decides
    recall, precision = _detection_evidence([True] * 4, [False] * 4, ids(4)).parts
    assert recall.verdict == "not run" and "no pair is contradictory" in recall.reason
    assert precision.samples == ((0.0, 0.0, 0.0, 0.0),)                       # only measured outcomes
    with pytest.raises(ValueError, match="one flag, label and id per pair"):
        _detection_evidence([True], [True, False], ids(2))


def test_the_labelled_pairs_are_a_fixed_set_a_seed_group_counts_once():
    labels = [True] * 50 + [False] * 50
    good = [True] * 47 + [False] * 3 + [False] * 48 + [True] * 2
    runs = [_detection_evidence(good, labels, ids(100)) for _ in range(5)]
    assert all(p.fixed and p.clusters[0] == "000" for p in runs[0].parts)
    assert [p.n for p in pool(runs).parts] == [50, 49]                       # not 250 and 245
    # a seed that flags other pairs: each pair stays one unit, named by its id
    other = _detection_evidence([True] * 48 + [False] * 2 + [False] * 48 + [True] * 2, labels, ids(100))
    assert [p.n for p in pool([runs[0], other]).parts] == [50, 50]


def test_a_few_pairs_decide_nothing():
    assert _detection_evidence([True, False], [True, False], ids(2)).verdict == "inconclusive"


def test_the_rate_and_the_last_pass_are_sanity_checks_not_claims():
    cfg = get_experiment("selfcontradiction").config("smoke", ["entities=20"])
    sim = _simulate(cfg, seed=0)
    checks = _sanity_checks(cfg, sim)
    assert all(c.passed for c in checks) and len(checks) == 3
    assert "flagged rate" in checks[1].statement and "removes >= 89.5%" in checks[2].statement
    judged = claims(cfg, sim, DETECT, "scripted test model")
    assert len(judged) == 2 and "scripted test model" in judged[0].measured
    assert not any("rate" in c.statement for c in judged)
    sim["measured_rate"] = sim["configured_rate"] + 0.4      # a broken trigger or analyser fails the check
    assert not _sanity_checks(cfg, sim)[1].passed


def test_mitigation_is_judged_on_informativeness_against_deleting_every_flagged_sentence():
    cfg = get_experiment("selfcontradiction").config("quick", ["entities=60"])
    sim = _simulate(cfg, seed=0)
    mitigate = claims(cfg, sim, DETECT)[1]
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
    assert claims(cfg, deleting, DETECT)[1].evidence.verdict != "holds"
    assert deleting["informativeness"] <= deleting["baseline_informativeness"]


def test_detection_is_also_compared_with_always_yes_and_selfcheck_on_the_same_pairs():
    labels = [True] * 50 + [False] * 50
    good = [True] * 47 + [False] * 3 + [False] * 48 + [True] * 2
    detect = {"ChatProtect (single-pass P(Yes))": {"pairs": 100, "precision": 0.96, "recall": 0.94, "f1": 0.95,
                                                   "flags": good, "labels": labels, "ids": ids(100)},
              "SelfCheck prompt (P(No))": {"pairs": 110, "precision": 0.5, "recall": 1.0, "f1": 0.67,
                                           "flags": [True] * 110, "labels": labels + [True] * 10, "ids": ids(110)}}
    cfg = get_experiment("selfcontradiction").config("smoke", [])
    sim = _simulate(cfg, seed=0)
    detection = claims(cfg, sim, detect)[0]
    parts = detection.evidence.parts
    assert [p.label for p in parts[1:]] == ["accuracy: ChatProtect - always Yes",
                                            "accuracy: ChatProtect - SelfCheck prompt"]
    assert all(p.n == 100 and p.verdict == "holds" for p in parts[1:]) and detection.evidence.verdict == "holds"
    assert all(p.fixed and p.clusters == tuple(ids(100)) for p in parts[1:])   # the same fixed pairs, by id
    assert "F1 95% bootstrap interval [0." in detection.measured
    detect["ChatProtect (single-pass P(Yes))"]["flags"] = [True] * 100       # no skill: ties always-Yes
    assert claims(cfg, sim, detect)[0].evidence.verdict != "holds"


def test_the_papers_detector_is_judged_once_it_has_scored_30_pairs():
    labels = [True, False] * 55
    row = {"precision": 0.5, "recall": 1.0, "f1": 0.67}
    votes = {**row, "pairs": 30, "flags": [True] * 30, "labels": labels[:30], "ids": ids(30)}
    single = {**row, "pairs": 110, "flags": labels, "labels": labels, "ids": ids(110)}  # a perfect single pass
    cfg = get_experiment("selfcontradiction").config("smoke", [])
    sim = _simulate(cfg, seed=0)
    detect = {"ChatProtect (explanation + votes)": votes, "ChatProtect (single-pass P(Yes))": single}
    judged = claims(cfg, sim, detect)[0]
    assert "explanation + votes): P" in judged.measured and judged.evidence.verdict == "fails"   # flags every pair
    assert judged.evidence.parts[0].parts[0].n == 15                          # recall over its 15 contradictions
    detect["ChatProtect (explanation + votes)"] = {**votes, "pairs": 29, "flags": votes["flags"][:29],
                                                   "labels": labels[:29], "ids": ids(29)}
    fallback = claims(cfg, sim, detect)[0]      # below 30 pairs: the variant scored on the most pairs
    assert "single-pass P(Yes)): P" in fallback.measured and fallback.evidence.verdict == "holds"


def test_detection_is_not_run_when_no_chatprotect_detector_scored_a_pair():
    cfg = get_experiment("selfcontradiction").config("smoke", [])
    overlap = {"word overlap (no model)": {**DETECT["ChatProtect (single-pass P(Yes))"], "f1": 0.5}}
    detection = claims(cfg, _simulate(cfg, seed=0), overlap, "a server without log-probabilities")[0]
    assert detection.verdict == "not run" and "no log-probabilities" in detection.evidence.reason


def test_every_claim_has_its_provenance_and_the_mitigation_claim_its_first_definition():
    cfg = get_experiment("selfcontradiction").config("quick", [])
    sim = _simulate(cfg, seed=0)
    detection, mitigation = claims(cfg, sim, DETECT)
    assert detection.provenance == mitigation.provenance == "revised"
    assert "0.75" in detection.revision and "first pass" in mitigation.revision
    # the revision made the mitigation claim hold: judged also under the first definition (facts consistent in the
    # first pass kept), which on seed 0 is inconclusive (0.972 vs 0.968 in the docs), shown beside the verdict
    first, removal = mitigation.original.parts
    assert first.label.startswith("facts consistent in the first pass kept") and removal == mitigation.evidence.parts[1]
    assert first.samples == (tuple(sim["per_prompt"]["consistent_kept"]),
                             tuple(sim["per_prompt"]["baseline_consistent_kept"]))
    assert mitigation.verdict == "holds" and mitigation.original.verdict == "inconclusive"


def test_the_mitigation_claim_is_always_a_stand_in():
    # review #58: the simulated reviser restates the facts it knows and the baseline deletes them
    cfg = get_experiment("selfcontradiction").config("smoke", [])
    sim = _simulate(cfg, seed=0)
    for stand_in in (EMBEDDED, ""):
        mitigation = claims(cfg, sim, DETECT, stand_in=stand_in)[1]
        assert mitigation.statement == CLAIM_MITIGATE and mitigation.subject == "stand-in"
        assert "simulated" in mitigation.stand_in and "restates" in mitigation.stand_in


def test_the_detection_claim_is_a_stand_in_only_for_the_embedded_or_a_scripted_model():
    assert model_stand_in(ScriptedModel(["x"])) == "a scripted model stands in for ChatGPT as the analyser"

    class Served:  # what --llm openai:MODEL gives: a model the claim is about
        name, capabilities = "gpt-4o-mini", None

    assert model_stand_in(Served()) == ""
    from iclr24.llm.hf import EmbeddedModel

    embedded = EmbeddedModel.__new__(EmbeddedModel)  # its type, without loading the weights
    embedded.name, embedded.capabilities = "smollm2-135m-instruct", None
    assert model_stand_in(embedded) == EMBEDDED and model_stand_in(LoggedModel(embedded, "/dev/null")) == EMBEDDED
    cfg = get_experiment("selfcontradiction").config("smoke", [])
    sim = _simulate(cfg, seed=0)
    for stand_in, subject in ((EMBEDDED, "stand-in"), ("", "paper")):
        detection = claims(cfg, sim, DETECT, stand_in=stand_in)[0]
        assert detection.statement == CLAIM_DETECT
        assert (detection.subject, detection.stand_in) == (subject, stand_in)
