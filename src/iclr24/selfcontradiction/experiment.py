"""Reproduction of the self-contradiction paper's claims: detection with the configured model (``--llm``),
and the trigger / detect / mitigate arithmetic with SIMULATED models over fictional entities.

Detection: the bundled labelled pairs, scored by ChatProtect's detector (explanation, then sampled Yes/No
votes) on the first ``vote_pairs`` pairs (30 in quick: the detector judged), by its single-pass P(Yes) variant
and by the SelfCheckGPT-style baseline (prompt and unigram variants) on all of them. Pipeline: a simulated
generator describes fictional places (known facts stated the same way each time, unknown ones sampled) and a
simulated analyser with a set error rate judges the pairs; ChatProtect triggers, detects and mitigates, and
the ground truth scores it.

Replicates are independent prompts: for detection, the labelled pairs' contexts (55 hand-written contexts, each with
a contradictory and a consistent pair: the two share the context's sentence and are not independent), a fixed set
a seed group counts once (precision and recall over the pairs, and per-pair correctness against always-Yes and the
SelfCheck prompt on the same pairs, each averaged within a context first); for the pipeline, the fictional places a
seed draws (one prompt each), where mitigation's informativeness and removal are paired with a baseline that
deletes every flagged sentence. What the simulation's construction guarantees (the last pass removes what it still
flags, the flagged rate follows the configured one, most contradictions go) is a sanity check, not a claim.

The detection claim is about the configured model (``--llm``); the embedded 135M model (or a scripted one) stands
in for the paper's ChatGPT and marks it a stand-in. The mitigation claim is always a stand-in: simulated models.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from iclr24.core import Check, Claim, Result, RunContext, experiment  # noqa: E402
from iclr24.core.evidence import against, all_of, compare, not_run  # noqa: E402
from iclr24.llm.base import logprobs_available, stand_in_reason  # noqa: E402
from iclr24.selfcontradiction.chatprotect import ChatProtect, ContradictionDetector  # noqa: E402
from iclr24.selfcontradiction.evaluation import (  # noqa: E402
    SelfCheckDetector,
    load_pairs,
    precision_recall_f1,
    score_pairs,
)
from iclr24.selfcontradiction.sentences import split_sentences  # noqa: E402
from iclr24.selfcontradiction.simulation import (  # noqa: E402
    ATTRIBUTES,
    FictionalWorld,
    SimulatedAnalyzer,
    SimulatedGenerator,
)

PAPER = ("Self-contradictory Hallucinations of Large Language Models: Evaluation, Detection and Mitigation "
         "(Mündler, He, Jenko, Vechev; ICLR 2024)")
CLAIM_DETECT = ("the prompted detector finds self-contradictions with high precision and recall (a capable "
                "analyser such as ChatGPT is needed; the embedded 135M model is reported as measured)")
CLAIM_MITIGATE = ("SIMULATED: iterative mitigation keeps more of the consistent information than deleting every "
                  "flagged sentence, while removing as many contradictions")
SELFCHECK = "SelfCheck prompt (P(No))"
PROMPTS = ("Please tell me about the Eiffel Tower.", "Please tell me about the river Thames.")

# Thresholds, each with its provenance (Claim.provenance):
# Detection, "revised": the first experiment.py asked for F1 >= 0.75 of the voted detector; the evidence migration
# (F1 is not a rate over pairs) split it into precision and recall each above 0.75, and issue #49 added "more pairs
# judged right than flagging every pair and than the SelfCheck prompt" and judged the voted detector on 30 pairs,
# each after SmolLM2's results had been seen. Each made the claim stricter; it failed before and after.
DETECT_BAR = 0.75  # precision and recall each above 0.75 (paper: P 84.2, R 83.2)
BASELINE_MARGIN = 0.0  # and more pairs judged right than flagging every pair, and than the SelfCheck prompt
VOTES_JUDGED_AT = 30  # the paper's detector (explanation + votes) is the one judged once it has scored 30 pairs
# The unit of the detection evidence: a labelled pair's context (its two pairs share a sentence). Before #61 each
# pair was a unit; the margins and definitions are unchanged.
CONTEXTS = "contexts of labelled pairs"
DETECT_REVISION = ("F1 >= 0.75 -> precision and recall each > 0.75 (migration), plus more pairs right than always-Yes "
                   "and SelfCheck on the voted detector's 30 pairs (#49), each after SmolLM2's results; all stricter")
# Mitigation (the claim), "revised", paired over places against deleting every sentence flagged in the first pass.
# Informativeness: the known facts (the simulated generator's valid information) still stated truly after
# mitigation / before it; a fact consistent in the first pass only by chance is a hallucination, not information.
# That definition came after seed 0's result under the first one (facts consistent in the first pass: 0.972 vs
# 0.968, inconclusive), so the claim is also judged under the first one, beside the verdict (Claim.original).
INFORMATIVENESS_MARGIN = 0.0  # informativeness above the deleting baseline's
REMOVAL_SLACK = 0.05  # contradictions removed: no more than 5 points below the deleting baseline (non-inferior)
MITIGATE_REVISION = ("informativeness counts the facts the generator knows, not those consistent in the first pass "
                     "(#49, after seed 0 was inconclusive under the first: 0.972 vs 0.968)")
MITIGATE_STAND_IN = ("a simulated generator and analyser stand in for ChatGPT: the reviser, which knows its facts, "
                     "restates every known fact a false alarm flags, and the deleting baseline loses it")
# Sanity checks on the simulation's arithmetic (not claims: they follow from how the simulation is built):
RATE_BAND_SE = 3.0  # flagged rate within 3 binomial standard errors of what the configured rate and error imply
REMOVED_BAR = 0.895  # share of contradictions removed: the paper's 89.5% (Table 3, ChatGPT)


@dataclass(frozen=True)
class Config:
    # the simulated pipeline
    entities: int = 100
    known_fraction: float = 0.8
    analyzer_error: float = 0.05
    elaborate: float = 0.5        # sentences with an extra clause: same fact, other words
    revision_error: float = 0.1   # revisions that restate a hallucinated value instead of dropping it
    n_votes: int = 10
    threshold: float = 0.5
    max_rounds: int = 4           # the authors': three revising passes and a removing one
    # the configured model (--llm)
    llm_pairs: int = 110          # pairs scored by the single-pass detectors
    vote_pairs: int = 30          # pairs scored by the explanation + votes detector (~3 s a pair, embedded)
    llm_votes: int = 5
    explanation_tokens: int = 80
    plumbing_prompts: int = 1     # real-model protect() runs, end to end
    plumbing_tokens: int = 60     # length of the text protect() checks
    allow_zero = ("vote_pairs", "plumbing_prompts")

    def __post_init__(self) -> None:
        if self.entities < 1 or self.n_votes < 1 or self.max_rounds < 1 or self.llm_votes < 1:
            raise ValueError("entities, n_votes, max_rounds and llm_votes must be >= 1")
        for name in ("known_fraction", "analyzer_error", "elaborate", "revision_error", "threshold"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if min(self.llm_pairs, self.vote_pairs, self.plumbing_prompts) < 0:
            raise ValueError("llm_pairs, vote_pairs and plumbing_prompts must be >= 0")
        if self.llm_pairs < 1:
            raise ValueError(f"the detection claim needs labelled pairs: llm_pairs must be >= 1, got {self.llm_pairs}")


PRESETS = {
    "smoke": Config(entities=5, llm_pairs=4, vote_pairs=0, plumbing_prompts=0),
    # a 30-token plumbing text keeps quick within budget; its verdicts are those at 60 (docs, "Profile and run time")
    "quick": Config(plumbing_tokens=30),
    "paper": Config(entities=300, vote_pairs=110, llm_votes=10, explanation_tokens=160, plumbing_prompts=2,
                    plumbing_tokens=200),
}


def _simulate(cfg: Config, seed: int, reviser=None) -> dict:
    """ChatProtect over the simulated places, scored by the ground truth, beside the baseline that deletes every
    sentence flagged in the first pass (the authors' removing step, run at once). ``reviser`` replaces the
    simulated generator as the reviser (the tests' mutations)."""
    world = FictionalWorld(cfg.entities, cfg.known_fraction, seed=seed)
    generator = SimulatedGenerator(world, seed=seed, elaborate=cfg.elaborate, revision_error=cfg.revision_error)
    analyzer = SimulatedAnalyzer(world, cfg.analyzer_error, seed=seed)
    # the simulated analyser only judges; the generator, which knows its facts, rewrites
    protect = ChatProtect(generator, analyzer, reviser=reviser or generator, n_votes=cfg.n_votes,
                          threshold=cfg.threshold, max_rounds=cfg.max_rounds, seed=seed)
    checked = flagged = contradictory = removed = caught = caught_removed = known = kept = hits = 0
    false_alarms = false_alarms_kept = 0
    rounds = []
    # one value per place (prompt); the mitigation claim pairs ChatProtect with the deleting baseline place by place
    per_prompt = {"flagged_rate": [], "removed": [], "kept": [], "baseline_kept": [], "baseline_removed": [],
                  "consistent_kept": [], "baseline_consistent_kept": []}
    last_pass_flagged = last_pass_removed = 0
    for entity in world.entities:
        prompt = f"Please tell me about {entity}."
        report = protect.protect(prompt)
        rounds.append(report.rounds)
        # what the mitigated text still states, fact by fact
        stated: dict = {}
        for sentence in split_sentences(report.text):
            parsed = world.parse(sentence)
            if parsed is not None:
                stated.setdefault(parsed[0], set()).add(parsed[1])
        for check in report.checks:  # whatever the last pass still flags is removed: the invariant checked
            if check.flagged and check.round == cfg.max_rounds:
                last_pass_flagged += 1
                last_pass_removed += check.action == "removed"
        first = [c for c in report.checks if c.round == 1]
        deleted = {c.trigger.index for c in first if c.flagged}  # the baseline drops every flagged sentence
        counts = (checked, flagged, contradictory, removed, known, kept)
        consistent = consistent_kept = baseline_consistent_kept = baseline_kept = n_baseline_removed = 0
        for check in first:
            truth = analyzer.truth(check.trigger.sentence, check.trigger.alternative)
            fact, value = world.parse(check.trigger.sentence)
            checked += 1
            flagged += check.flagged
            hits += check.flagged == bool(truth)
            if truth:                      # a contradiction is gone when the text no longer states the fact
                contradictory += 1
                removed += fact not in stated
                n_baseline_removed += check.trigger.index in deleted
                if check.flagged:
                    caught += 1
                    caught_removed += fact not in stated
            elif truth is False:           # consistent in the first pass (by chance, for an unknown fact)
                consistent += 1
                consistent_kept += value in stated.get(fact, ())
                baseline_consistent_kept += check.trigger.index not in deleted
            if fact.known:                 # valid information: a fact the generator knows, stated truly
                known += 1
                kept += fact.value in stated.get(fact, ())
                baseline_kept += check.trigger.index not in deleted
                if check.flagged:                     # a false alarm: did the revision keep the fact?
                    false_alarms += 1
                    false_alarms_kept += fact.value in stated.get(fact, ())
        n_checked, n_flagged, n_contra, n_removed, n_known, n_kept = (
            now - before for now, before in zip((checked, flagged, contradictory, removed, known, kept), counts))
        if n_checked:
            per_prompt["flagged_rate"].append(n_flagged / n_checked)
        if n_contra:
            per_prompt["removed"].append(n_removed / n_contra)
            per_prompt["baseline_removed"].append(n_baseline_removed / n_contra)
        if n_known:
            per_prompt["kept"].append(n_kept / n_known)
            per_prompt["baseline_kept"].append(baseline_kept / n_known)
        if consistent:
            per_prompt["consistent_kept"].append(consistent_kept / consistent)
            per_prompt["baseline_consistent_kept"].append(baseline_consistent_kept / consistent)
    miss = statistics.fmean(1 - 1 / len(pool) for pool in ATTRIBUTES.values())
    mean = {k: statistics.fmean(v) if v else 0.0 for k, v in per_prompt.items()}
    return {"configured_rate": (1 - cfg.known_fraction) * miss, "measured_rate": flagged / checked,
            "true_rate": contradictory / checked, "detector_accuracy": hits / checked,
            "removed": removed / max(1, contradictory), "removed_flagged": caught_removed / max(1, caught),
            "kept": kept / max(1, known), "kept_flagged": false_alarms_kept / max(1, false_alarms),
            "informativeness": mean["kept"], "baseline_informativeness": mean["baseline_kept"],
            "baseline_removed": mean["baseline_removed"], "consistent_kept": mean["consistent_kept"],
            "baseline_consistent_kept": mean["baseline_consistent_kept"],
            "max_rounds": max(rounds),
            "mean_rounds": statistics.fmean(rounds),
            "generator_calls": generator.calls, "analyzer_calls": analyzer.calls, "sentences": checked,
            "last_pass_flagged": last_pass_flagged, "last_pass_removed": last_pass_removed, "per_prompt": per_prompt}


def _sanity_checks(cfg: Config, sim: dict) -> list[Check]:
    """What the simulation's construction guarantees: a bug, not a finding, when one fails."""
    rate, error = sim["configured_rate"], cfg.analyzer_error
    expected = rate * (1 - error) + (1 - rate) * error        # contradictions caught plus false alarms
    band = RATE_BAND_SE * math.sqrt(expected * (1 - expected) / sim["sentences"])
    return [
        Check("mitigation's last pass removes every sentence it still flags",
              sim["last_pass_removed"] == sim["last_pass_flagged"],
              f"{sim['last_pass_removed']} of {sim['last_pass_flagged']} removed (SIMULATED pipeline)"),
        Check("the pipeline's flagged rate matches the simulated generator's configured self-contradiction rate "
              f"and the analyser's error (within {RATE_BAND_SE:g} binomial standard errors)",
              abs(sim["measured_rate"] - expected) <= band,
              f"flagged {sim['measured_rate']:.3f} of {sim['sentences']} sentences vs {expected:.3f} +- {band:.3f} "
              f"(configured rate {rate:.3f}, ground truth {sim['true_rate']:.3f}, analyser error {error:.0%}); "
              "paper: 17.7% of ChatGPT's sentences"),
        Check(f"mitigation removes >= {REMOVED_BAR:.1%} of the simulated contradictions (paper: 89.5%)",
              sim["removed"] >= REMOVED_BAR,
              f"removed {sim['removed']:.1%} (of the flagged ones {sim['removed_flagged']:.1%}), kept "
              f"{sim['kept']:.1%} of known facts ({sim['kept_flagged']:.1%} of those falsely flagged), "
              f"{sim['mean_rounds']:.2f} passes on average (at most {sim['max_rounds']} of {cfg.max_rounds})"),
    ]


@experiment(
    name="selfcontradiction",
    paper=PAPER,
    presets=PRESETS,
    claims=[CLAIM_DETECT, CLAIM_MITIGATE],
    description="ChatProtect: trigger a model to contradict itself, detect the contradiction with a prompted "
                "analyser, and revise the text until it is consistent.",
)
def reproduce(cfg: Config, ctx: RunContext) -> Result:
    """Detection with the configured model; the pipeline's arithmetic with simulated models."""
    sim = _simulate(cfg, ctx.seed)
    ctx.log(f"SIMULATED pipeline: flagged {sim['measured_rate']:.3f} of {sim['sentences']} sentences "
            f"(configured {sim['configured_rate']:.3f}); mitigation removed {sim['removed_flagged']:.3f} of the "
            f"flagged contradictions ({sim['removed']:.3f} of all), kept {sim['kept']:.3f} of known facts, "
            f"<= {sim['max_rounds']} passes")
    metrics = {f"sim/{k}": float(v) for k, v in sim.items() if k != "per_prompt"}
    from iclr24.llm import LoggedModel, get_model

    llm = LoggedModel(get_model(), ctx.path("llm_calls.jsonl"))
    detect = _detection(cfg, llm, ctx)
    labels_all = [p.contradictory for p in load_pairs()]
    for name, row in detect.items():
        for key in ("precision", "recall", "f1", "best_f1"):
            metrics[f"detect/{name}/{key}"] = row[key]
    always = _always_yes(labels_all)
    metrics["detect/always_yes/f1"] = always[2]
    rows = [("always Yes (reference)", len(labels_all), *always, always[2])]
    rows += [(name, row["pairs"], row["precision"], row["recall"], row["f1"], row["best_f1"])
             for name, row in detect.items()]
    tables = {"detection": [{"detector": name, "pairs": n, "precision": round(p, 3), "recall": round(r, 3),
                             "F1": round(f1, 3), "F1 at the best threshold (oracle)": round(best, 3)}
                            for name, n, p, r, f1, best in rows]}
    figures = {"precision_recall.png": _pr_figure(detect)}
    if cfg.plumbing_prompts:
        tables["transcript"] = _plumbing(cfg, llm, ctx)
    figures["mitigation.png"] = _mitigation_figure(sim)
    claims = _claims(cfg, sim, detect, llm.name, llm_stand_in=model_stand_in(llm))
    checks = _sanity_checks(cfg, sim)
    notes = (f"Detection used {llm.name}. The pipeline rows are SIMULATED: a scripted generator over "
             f"{cfg.entities} fictional places ({cfg.known_fraction:.0%} of facts known, {cfg.elaborate:.0%} of "
             f"sentences reworded, {cfg.revision_error:.0%} of revisions stubborn) and a scripted analyser wrong on "
             f"{cfg.analyzer_error:.0%} of pairs; they check ChatProtect's arithmetic, not a model.")
    return Result(metrics=metrics, claims=claims, figures=figures, tables=tables, notes=notes, checks=checks)


def _detection(cfg: Config, llm, ctx: RunContext) -> dict:
    pairs = load_pairs()
    labels = [p.contradictory for p in pairs]
    detectors = {"ChatProtect (explanation + votes)": (ContradictionDetector(
                     llm, n_votes=cfg.llm_votes, explanation_tokens=cfg.explanation_tokens, seed=ctx.seed),
                     cfg.vote_pairs)}
    if logprobs_available(llm):  # the single-pass detectors read P(Yes); a server may send no log-probabilities
        detectors.update({
            "ChatProtect (single-pass P(Yes))": (ContradictionDetector(llm, mode="logprob", explain=False),
                                                 cfg.llm_pairs),
            SELFCHECK: (SelfCheckDetector(llm, mode="logprob"), cfg.llm_pairs)})
    else:
        ctx.log(f"the single-pass P(Yes) detectors are not run: {llm.name} returns no log-probabilities")
    detectors["word overlap (no model)"] = (SelfCheckDetector(), len(pairs))
    out = {}
    total = sum(min(n, len(pairs)) for _, n in detectors.values())
    with ctx.progress("detection", total=total) as bar:
        for name, (detector, n) in detectors.items():
            n = min(n, len(pairs))
            if n == 0:
                continue
            scores = score_pairs(detector, pairs[:n], progress=bar.advance)
            precision, recall, f1 = precision_recall_f1(scores, labels[:n], cfg.threshold)
            cuts = sorted({min(scores) - 1.0, *(x - 1e-9 for x in scores)})    # flag score > t: every cut point
            curve = [(t, *precision_recall_f1(scores, labels[:n], t)) for t in cuts]
            out[name] = {"pairs": n, "precision": precision, "recall": recall, "f1": f1,
                         "flags": [score > cfg.threshold for score in scores], "labels": labels[:n],
                         "contexts": [p.context for p in pairs[:n]],
                         "best_f1": max(c[3] for c in curve), "curve": curve}
            ctx.log(f"{name}: P {precision:.2f} R {recall:.2f} F1 {f1:.2f} on {n} pairs")
    return out


def _always_yes(labels) -> tuple[float, float, float]:
    """Precision, recall and F1 of flagging every pair: the no-skill reference."""
    precision = sum(labels) / len(labels)
    return precision, 1.0, 2 * precision / (precision + 1.0)


def _plumbing(cfg: Config, llm, ctx: RunContext) -> list[dict]:
    detector = ContradictionDetector(llm, n_votes=cfg.llm_votes, explanation_tokens=cfg.explanation_tokens,
                                     seed=ctx.seed)
    protect = ChatProtect(llm, detector=detector, threshold=cfg.threshold, max_rounds=cfg.max_rounds, seed=ctx.seed)
    rows = []
    for prompt in PROMPTS[:cfg.plumbing_prompts]:
        report = protect.protect(prompt, max_tokens=cfg.plumbing_tokens, progress=not ctx.quiet)
        for c in report.checks:
            rows.append({"prompt": prompt, "round": c.round, "sentence": c.trigger.sentence,
                         "alternative": c.trigger.alternative, "score": round(c.detection.score, 2),
                         "action": c.action if c.flagged else "kept"})
        ctx.log(f"protect({prompt!r}): {report.rounds} rounds, {len(report.flagged)} flagged pairs")
    return rows


def model_stand_in(llm) -> str:
    """What stands in for the paper's ChatGPT when ``llm`` is the analyser, or ``""`` when the detection claim is
    about ``llm`` itself (the house rule: :func:`iclr24.llm.stand_in_reason`)."""
    return stand_in_reason(llm, "ChatGPT as the analyser")


def _detection_evidence(flags, labels, contexts, unit: str = CONTEXTS):
    """Precision (over the flagged pairs) and recall (over the contradictory pairs), each a rate of 0/1
    outcomes over the labelled pairs, both above :data:`DETECT_BAR`. The independent unit is a pair's context
    (``contexts``: one label per pair), whose pairs share a sentence: a context's outcomes are averaged first, and
    n counts contexts (recall has one contradictory pair per bundled context, so it counts pairs). The contexts
    are a fixed set, so a seed group counts each once. With no pair flagged (or none contradictory) that rate was
    not measured: not run, never a made-up 0."""
    if not len(flags) == len(labels) == len(contexts):
        raise ValueError(f"one flag, label and context per pair: got {len(flags)}, {len(labels)} and "
                         f"{len(contexts)}")
    rates = {"recall": [(float(flag), context) for flag, label, context in zip(flags, labels, contexts) if label],
             "precision": [(float(label), context) for flag, label, context in zip(flags, labels, contexts) if flag]}
    undefined = {"recall": "no pair is contradictory", "precision": "no pair was flagged"}
    parts = []
    for name, counted in rates.items():
        if not counted:
            parts.append(not_run(f"{name} is undefined: {undefined[name]}"))
            continue
        hits, units = zip(*counted)
        parts.append(against(hits, DETECT_BAR, binary=True, clusters=units, fixed=True, unit=unit, label=name))
    return all_of(*parts)


def _versus_baselines(chosen: dict, detect: dict) -> list:
    """The judged detector against flagging every pair and against the SelfCheck prompt, on the same pairs: the
    paired difference in per-pair correctness, averaged within each context (the independent unit), above
    :data:`BASELINE_MARGIN` (Student t over the contexts; Tango's score interval where each context holds one
    pair). (F1 is not a mean over pairs, so it is reported with a bootstrap interval beside the verdict.)"""
    n, labels = chosen["pairs"], chosen["labels"]
    correct = [float(flag == label) for flag, label in zip(chosen["flags"], labels)]
    same_pairs = {"binary": True, "margin": BASELINE_MARGIN, "unit": CONTEXTS, "clusters": chosen["contexts"],
                  "fixed": True}
    parts = [compare(correct, [float(label) for label in labels], label="accuracy: ChatProtect - always Yes",
                     **same_pairs)]
    selfcheck = detect.get(SELFCHECK)
    if selfcheck is not None and selfcheck["pairs"] >= n:
        parts.append(compare(correct, [float(f == y) for f, y in zip(selfcheck["flags"][:n], labels)],
                             label="accuracy: ChatProtect - SelfCheck prompt", **same_pairs))
    return parts


def _f1_interval(flags, labels, resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """A 95% percentile bootstrap interval of F1 over the pairs."""
    flags, labels = np.asarray(flags, dtype=bool), np.asarray(labels, dtype=bool)
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(resamples):
        index = rng.integers(0, len(flags), len(flags))
        f, y = flags[index], labels[index]
        tp = int((f & y).sum())
        values.append(2 * tp / (2 * tp + int((f & ~y).sum()) + int((~f & y).sum())) if tp else 0.0)
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def _claims(cfg: Config, sim: dict, detect: dict, llm_name: str, *, llm_stand_in: str) -> list[Claim]:
    """The detection claim over the labelled pairs (about the configured model, or a stand-in for ChatGPT as
    ``llm_stand_in`` says, :func:`model_stand_in`), the SIMULATED mitigation claim over places."""
    claims = []
    detect_subject = {"subject": "stand-in", "stand_in": llm_stand_in} if llm_stand_in else {}
    labels = [p.contradictory for p in load_pairs()]
    chatprotect = [k for k in ("ChatProtect (explanation + votes)", "ChatProtect (single-pass P(Yes))") if k in detect]
    # the paper's detector (explanation + votes) once it has scored VOTES_JUDGED_AT pairs; below that (smoke, or a
    # short --set vote_pairs) the ChatProtect variant scored on the most pairs, on a tie the paper's
    votes = detect.get("ChatProtect (explanation + votes)")
    paper = ("ChatGPT analysing ChatGPT: P 84.2%, R 83.2%, F1 83.7% (Table 3, recomputed from the authors' released "
             "outputs)")
    if not chatprotect:      # vote_pairs=0 and a backend with no log-probabilities: no ChatProtect detector ran
        claims.append(Claim(CLAIM_DETECT, paper=paper, measured="not measured: no ChatProtect detector scored a pair",
                            evidence=not_run(f"vote_pairs=0 and {llm_name} returns no log-probabilities for the "
                                             f"single-pass detector"),
                            provenance="revised", revision=DETECT_REVISION, **detect_subject))
    else:
        name = "ChatProtect (explanation + votes)" if votes is not None and votes["pairs"] >= VOTES_JUDGED_AT else \
            max(chatprotect, key=lambda k: detect[k]["pairs"])
        chosen = detect[name]
        others = "; ".join(f"{k}: F1 {v['f1']:.2f} on {v['pairs']}" for k, v in detect.items() if k != name)
        low, high = _f1_interval(chosen["flags"], chosen["labels"])
        claims.append(Claim(
            CLAIM_DETECT, paper=paper,
            measured=f"{llm_name}, {name}: P {chosen['precision']:.2f}, R {chosen['recall']:.2f} (F1 "
                     f"{chosen['f1']:.2f}) over {chosen['pairs']} labelled pairs from "
                     f"{len(set(chosen['contexts']))} contexts (the independent unit) at threshold "
                     f"{cfg.threshold:g} (flagging every pair: F1 {_always_yes(labels[:chosen['pairs']])[2]:.2f}); F1 "
                     f"95% bootstrap interval [{low:.2f}, {high:.2f}]; {others}",
            evidence=all_of(_detection_evidence(chosen["flags"], chosen["labels"], chosen["contexts"]),
                            *_versus_baselines(chosen, detect)),
            provenance="revised", revision=DETECT_REVISION, **detect_subject))
    places = "prompts (fictional places)"
    per_prompt = sim["per_prompt"]
    removal = compare(per_prompt["removed"], per_prompt["baseline_removed"], margin=-REMOVAL_SLACK, unit=places,
                      label="contradictions removed: ChatProtect - delete flagged sentences")
    claims.append(Claim(
        CLAIM_MITIGATE, paper="ChatGPT: 89.5% of self-contradictions removed, informativeness (consistent facts "
                              "kept / before) 100.8% (Table 3; 3 revising passes and a removing one)",
        measured=f"SIMULATED: informativeness {sim['informativeness']:.1%} vs {sim['baseline_informativeness']:.1%} "
                 f"when every flagged sentence is deleted; contradictions removed {sim['removed']:.1%} vs "
                 f"{sim['baseline_removed']:.1%}; {sim['mean_rounds']:.2f} passes on average (at most "
                 f"{cfg.max_rounds}); facts consistent in the first pass kept: {sim['consistent_kept']:.1%} vs "
                 f"{sim['baseline_consistent_kept']:.1%}; replicates: places, paired ({len(per_prompt['kept'])} with "
                 f"a known fact, {len(per_prompt['removed'])} with a contradiction)",
        evidence=all_of(
            compare(per_prompt["kept"], per_prompt["baseline_kept"],
                    margin=INFORMATIVENESS_MARGIN, unit=places,
                    label="informativeness: ChatProtect - delete flagged sentences"),
            removal),
        provenance="revised", revision=MITIGATE_REVISION,
        original=all_of(   # the first definition: facts consistent in the first pass, kept
            compare(per_prompt["consistent_kept"], per_prompt["baseline_consistent_kept"],
                    margin=INFORMATIVENESS_MARGIN, unit=places,
                    label="facts consistent in the first pass kept: ChatProtect - delete flagged sentences"),
            removal),
        subject="stand-in", stand_in=MITIGATE_STAND_IN))
    return claims


def _pr_figure(detect: dict):
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for name, row in detect.items():
        t = [c[0] for c in row["curve"]]
        axes[0].plot(t, [c[1] for c in row["curve"]], label=name)
        axes[1].plot(t, [c[2] for c in row["curve"]], label=name)
    axes[0].set(title="precision vs threshold", xlabel="threshold")
    axes[1].set(title="recall vs threshold", xlabel="threshold")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def _mitigation_figure(sim: dict):
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    ax.bar(["before", "after mitigation"], [sim["true_rate"], sim["true_rate"] * (1 - sim["removed"])])
    ax.set(ylabel="self-contradictory sentences (fraction)", title="SIMULATED generator")
    fig.tight_layout()
    return fig
