"""The selfcontradiction reproduction's claims: replicates are the labelled pairs' contexts and the simulation's
prompts (fast)."""
import pytest

from iclr24.core import get_experiment
from iclr24.core.evidence import pool
from iclr24.llm import LoggedModel
from iclr24.llm.base import Completion
from iclr24.llm.scripted import ScriptedModel
from iclr24.selfcontradiction.evaluation import load_pairs
from iclr24.selfcontradiction.experiment import (
    CLAIM_DETECT,
    CLAIM_MITIGATE,
    CONTEXTS,
    _claims,
    _detection_evidence,
    _sanity_checks,
    _simulate,
    model_stand_in,
)

DETECT = {"ChatProtect (single-pass P(Yes))": {"pairs": 4, "precision": 1.0, "recall": 1.0, "f1": 1.0,
                                               "flags": [True, True, False, False],
                                               "labels": [True, True, False, False],
                                               "contexts": ["a", "b", "a", "b"]}}
EMBEDDED = "the embedded smollm2-135m-instruct (135M parameters) stands in for ChatGPT as the analyser"


def contexts(labels):
    """As in the bundled set: the k-th contradictory pair and the k-th consistent one share context k."""
    seen = {True: 0, False: 0}
    out = []
    for label in labels:
        out.append(f"context {seen[label]:03d}")
        seen[label] += 1
    return out


def claims(cfg, sim, detect, llm_name="m", stand_in=EMBEDDED):
    return _claims(cfg, sim, detect, llm_name, llm_stand_in=stand_in)


def test_detection_is_judged_on_precision_and_recall_over_labelled_pairs():
    labels = [True] * 50 + [False] * 50
    good = [True] * 47 + [False] * 3 + [False] * 48 + [True] * 2  # P 0.96, R 0.94
    evidence = _detection_evidence(good, labels, contexts(labels))
    assert evidence.verdict == "holds" and all(p.unit == CONTEXTS for p in evidence.parts)
    # recall over the contradictory pairs, precision over the flagged ones: here one of each per context
    assert [p.n for p in evidence.parts] == [50, 49]
    worse = [True] * 30 + [False] * 20 + [True] * 50  # R 0.6 (fails), P 0.375
    assert _detection_evidence(worse, labels, contexts(labels)).verdict == "fails"


def test_the_two_pairs_of_a_context_are_one_unit():
    # issue #61: a context's contradictory and consistent pair share its sentence: not two independent replicates
    pairs = load_pairs()
    assert len({p.context for p in pairs}) == len(pairs) // 2 == 55
    labels = [p.contradictory for p in pairs]
    flags = [True] * 40 + [p.contradictory for p in pairs[40:]]  # every pair of the first 20 contexts flagged
    recall, precision = _detection_evidence(flags, labels, [p.context for p in pairs]).parts
    assert recall.n == 55 and precision.n == 55                  # 75 flagged pairs, 55 contexts
    assert precision.effect == (20 * 0.5 + 35 * 1.0) / 55        # the mean over contexts of each one's precision
    assert "over 55 cluster means" in precision.test
    per_pair = _detection_evidence(flags, labels, [p.id for p in pairs]).parts[1]    # the old unit, for contrast
    assert per_pair.n == 75 and per_pair.effect == 55 / 75


def test_the_detectors_rows_name_each_pairs_context(tmp_path):
    from iclr24.core import RunContext
    from iclr24.selfcontradiction.experiment import _detection

    cfg = get_experiment("selfcontradiction").config("smoke", ["llm_pairs=6", "vote_pairs=6"])
    analyzer = ScriptedModel(lambda prompt, i: "Yes")     # no log-probabilities: the voted detector only
    rows = _detection(cfg, analyzer, RunContext(seed=0, preset="smoke", run_dir=tmp_path, quiet=True,
                                                _log=lambda line: None))
    pairs = load_pairs()
    for row in rows.values():
        assert row["contexts"] == [p.context for p in pairs[:row["pairs"]]]
    judged = claims(cfg, _simulate(cfg, seed=0), rows)[0].evidence.parts[0].parts[1]       # precision
    assert judged.n == 3 and judged.clusters == tuple(p.context for p in pairs[:6])       # 6 pairs, 3 contexts


def test_flagging_every_pair_decides_nothing_on_precision():
    # recall 1; each context's precision is exactly 0.5, so precision has no spread and, by the evidence rules,
    # decides nothing (before #61, over pairs, 50 of 100 failed the 0.75 bar)
    labels = [True] * 50 + [False] * 50
    recall, precision = _detection_evidence([True] * 100, labels, contexts(labels)).parts
    assert recall.verdict == "holds" and precision.verdict == "inconclusive" and precision.interval is None


def test_a_detector_right_on_every_pair_has_no_spread_against_always_yes():
    # by context, always-Yes is right on exactly one pair of two everywhere: a detector right on every pair beats
    # it by exactly 0.5 in every context, which (no spread) decides nothing; one wrong pair gives the spread that
    # lets the comparison hold. Recall and precision, rates of pass/fail outcomes, hold either way.
    labels = [True, False] * 55
    cfg = get_experiment("selfcontradiction").config("smoke", [])
    sim = _simulate(cfg, seed=0)
    row = {"pairs": 110, "precision": 1.0, "recall": 1.0, "f1": 1.0, "labels": labels, "contexts": contexts(labels)}
    perfect = claims(cfg, sim, {"ChatProtect (single-pass P(Yes))": {**row, "flags": labels}})[0].evidence
    (recall, precision), versus_always_yes = perfect.parts[0].parts, perfect.parts[1]
    assert recall.verdict == precision.verdict == "holds"
    assert versus_always_yes.verdict == "inconclusive" and versus_always_yes.interval is None
    one_wrong = claims(cfg, sim, {"ChatProtect (single-pass P(Yes))": {**row, "flags": labels[:-1] + [True]}})[0]
    assert one_wrong.evidence.verdict == "holds"


def test_a_rate_with_nothing_to_count_is_not_run_never_a_zero():
    # review #58: no flagged pair had added a made-up 0 replicate to precision
    labels = [True] * 50 + [False] * 50
    recall, precision = _detection_evidence([False] * 100, labels, contexts(labels)).parts
    assert recall.verdict == "fails" and recall.n == 50                       # recall 0 of 50
    assert precision.verdict == "not run" and "no pair was flagged" in precision.reason
    assert _detection_evidence([False] * 100, labels, contexts(labels)).verdict == "fails"  # recall alone decides
    recall, precision = _detection_evidence([True] * 4, [False] * 4, contexts([False] * 4)).parts
    assert recall.verdict == "not run" and "no pair is contradictory" in recall.reason
    assert precision.samples == ((0.0, 0.0, 0.0, 0.0),)                       # only measured outcomes
    with pytest.raises(ValueError, match="one flag, label and context per pair"):
        _detection_evidence([True], [True, False], ["a", "a"])


def test_the_labelled_pairs_are_a_fixed_set_a_seed_group_counts_once():
    labels = [True] * 50 + [False] * 50
    good = [True] * 47 + [False] * 3 + [False] * 48 + [True] * 2
    runs = [_detection_evidence(good, labels, contexts(labels)) for _ in range(5)]
    assert all(p.fixed and p.clusters[0] == "context 000" for p in runs[0].parts)
    assert [p.n for p in pool(runs).parts] == [50, 49]                       # not 250 and 245
    # a seed that flags other pairs: each context stays one unit, named by its context
    other = _detection_evidence([True] * 48 + [False] * 2 + [False] * 48 + [True] * 2, labels, contexts(labels))
    assert [p.n for p in pool([runs[0], other]).parts] == [50, 50]


def test_a_few_pairs_decide_nothing():
    assert _detection_evidence([True, False], [True, False], contexts([True, False])).verdict == "inconclusive"


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
                                                   "flags": good, "labels": labels, "contexts": contexts(labels)},
              "SelfCheck prompt (P(No))": {"pairs": 110, "precision": 0.5, "recall": 1.0, "f1": 0.67,
                                           "flags": [True] * 110, "labels": labels + [True] * 10,
                                           "contexts": contexts(labels + [True] * 10)}}
    cfg = get_experiment("selfcontradiction").config("smoke", [])
    sim = _simulate(cfg, seed=0)
    detection = claims(cfg, sim, detect)[0]
    parts = detection.evidence.parts
    assert [p.label for p in parts[1:]] == ["accuracy: ChatProtect - always Yes",
                                            "accuracy: ChatProtect - SelfCheck prompt"]
    assert all(p.n == 50 and p.verdict == "holds" for p in parts[1:]) and detection.evidence.verdict == "holds"
    assert all(p.fixed and p.clusters == tuple(contexts(labels)) for p in parts[1:])  # the same pairs, by context
    # each context's accuracy averaged first: right on both pairs of 47 contexts, on one of one, on neither of two
    assert parts[1].effect == pytest.approx((47 * 1.0 + 0.5 + 2 * 0.0) / 50 - 0.5)
    assert "over 100 labelled pairs from 50 contexts" in detection.measured
    assert "F1 95% bootstrap interval [0." in detection.measured
    detect["ChatProtect (single-pass P(Yes))"]["flags"] = [True] * 100       # no skill: ties always-Yes
    assert claims(cfg, sim, detect)[0].evidence.verdict != "holds"


def test_the_papers_detector_is_judged_once_it_has_scored_30_pairs():
    labels = [True, False] * 55
    row = {"precision": 0.5, "recall": 1.0, "f1": 0.67}
    votes = {**row, "pairs": 30, "flags": [True] * 30, "labels": labels[:30], "contexts": contexts(labels[:30])}
    good = labels[:100] + [False, True] * 5                  # right but on the last 5 contexts' pairs, both wrong
    single = {**row, "pairs": 110, "flags": good, "labels": labels, "contexts": contexts(labels)}
    cfg = get_experiment("selfcontradiction").config("smoke", [])
    sim = _simulate(cfg, seed=0)
    detect = {"ChatProtect (explanation + votes)": votes, "ChatProtect (single-pass P(Yes))": single}
    judged = claims(cfg, sim, detect)[0]
    assert "explanation + votes): P" in judged.measured and judged.evidence.verdict != "holds"  # flags every pair
    assert judged.evidence.parts[0].parts[0].n == 15                          # recall over its 15 contradictions
    detect["ChatProtect (explanation + votes)"] = {**votes, "pairs": 29, "flags": votes["flags"][:29],
                                                   "labels": labels[:29], "contexts": contexts(labels[:29])}
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
