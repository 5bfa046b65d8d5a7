import math
import re

import pytest
import torch

from iclr24.llm import get_model
from iclr24.selfcontradiction import (
    ChatProtect,
    ContradictionDetector,
    FictionalWorld,
    SelfCheckDetector,
    SimulatedAnalyzer,
    SimulatedGenerator,
    Triple,
    load_pairs,
    parse_yes_no,
    precision_recall_f1,
    prompt_text,
    yes_probability,
)
from iclr24.selfcontradiction.simulation import ATTRIBUTES


def scripted(fn):
    return get_model("scripted", outputs=lambda prompt, i: fn(prompt_text(prompt), i))


def field(prompt, name):
    """The last ``name: value`` line (the question follows the worked examples)."""
    matches = re.findall(rf"^{name}: (.*)$", prompt, re.MULTILINE)
    return matches[-1] if matches else None


# ---- detection -----------------------------------------------------------------------------------------------

def test_votes_are_counted_after_an_explanation():
    replies = iter(["They differ in the year.", "Yes", "yes.", "No", "maybe", " Yes, because"])
    analyzer = scripted(lambda prompt, i: next(replies))
    detection = ContradictionDetector(analyzer, n_votes=5).detect("ctx", "It opened in 1889.", "It opened in 1901.")
    assert detection.score == pytest.approx(3 / 5)
    assert detection.votes == (True, True, False, None, True) and detection.unparsed == 1
    assert detection.explanation == "They differ in the year."
    explain, vote = analyzer.calls[0], analyzer.calls[1]
    assert "Statement 1: It opened in 1889." in prompt_text(explain["prompt"]) and explain["temperature"] == 0.0
    # the explanation is the analyser's own turn, and the conclusion is asked for in a new user turn
    assert [m["role"] for m in vote["prompt"]] == ["user", "assistant", "user"]
    assert vote["prompt"][1]["content"] == "They differ in the year."
    assert "Answer Yes or No" in vote["prompt"][2]["content"] and vote["temperature"] == 1.0


def test_vote_parsing_follows_the_authors_rule_and_identical_pairs_need_no_call():
    assert parse_yes_no("The statements contradict: Yes.") is True
    assert parse_yes_no("No.") is False and parse_yes_no("Yes and no") is None and parse_yes_no("Yesterday") is None
    analyzer = scripted(lambda prompt, i: "Yes")
    detection = ContradictionDetector(analyzer).detect("c", "It opened in 1889.", "it opened  in 1889.")
    assert detection.score == 0.0 and detection.method == "identical" and not analyzer.calls


def test_detector_without_explanation_and_bad_arguments():
    analyzer = scripted(lambda prompt, i: "No")
    detection = ContradictionDetector(analyzer, n_votes=3, explain=False).detect("", "a b", "c d")
    assert detection.score == 0.0 and len(analyzer.calls) == 3
    assert "Context: (none)" in prompt_text(analyzer.calls[0]["prompt"])
    with pytest.raises(ValueError, match="mode must be 'votes' or 'logprob'"):
        ContradictionDetector(analyzer, mode="sample")
    with pytest.raises(ValueError, match="n_votes must be >= 1"):
        ContradictionDetector(analyzer, n_votes=0)


TABLE = torch.full((256,), -20.0)
TABLE[ord("Y")], TABLE[ord("N")], TABLE[ord(" ")] = math.log(0.3), math.log(0.1), math.log(0.5)


def test_yes_probability_reads_the_next_token_distribution():
    # a character-level scripted model: 'Y' and 'N' carry the answer, the shared ' ' is ignored
    model = get_model("scripted", outputs=[], logprobs=lambda ids: TABLE)
    assert yes_probability(model, "Do they contradict? Answer:") == pytest.approx(0.75, abs=1e-6)
    detection = ContradictionDetector(model, mode="logprob", explain=False).detect("c", "a", "b")
    assert detection.method == "logprob" and detection.score == pytest.approx(0.75, abs=1e-6)


def test_yes_probability_without_logits_uses_the_greedy_answer():
    assert yes_probability(scripted(lambda p, i: "Yes"), "q") == 1.0      # a script is certain
    assert yes_probability(scripted(lambda p, i: "No"), "q") == 0.0
    assert yes_probability(scripted(lambda p, i: "Perhaps"), "q") == 0.5
    assert parse_yes_no("  **Yes**") is True and parse_yes_no("Nope") is None


def test_threshold_is_strict_as_in_the_authors_code():
    analyzer = scripted(lambda prompt, i: "x" if "Answer Yes or No" not in prompt else ("Yes" if i % 2 else "No"))
    protect = ChatProtect(scripted(lambda p, i: "Velmora was founded in 1781."), analyzer, n_votes=2,
                          threshold=0.5)
    (check,) = protect.check("q", "Velmora was founded in 1642.")
    assert check.detection.score == 0.5 and not check.flagged       # half the votes is not a majority
    protect.threshold = 0.49
    assert protect.check("q", "Velmora was founded in 1642.")[0].flagged


# ---- trigger -------------------------------------------------------------------------------------------------

def test_trigger_asks_for_an_alternative_with_subject_and_predicate_in_context():
    generator = scripted(lambda prompt, i: f"{field(prompt, 'Subject')} {field(prompt, 'Predicate')} 1999. More.")
    protect = ChatProtect(generator, scripted(lambda p, i: "No"))
    triggers = protect.trigger("Tell me about Kalo.", "Kalo was founded in 1642. It is known for salt.")
    assert [(t.index, t.triple, t.alternative) for t in triggers] == [
        (0, Triple("Kalo", "was founded in", "1642"), "Kalo was founded in 1999."),
        (1, Triple("It", "is known for", "salt"), "It is known for 1999.")]
    first = prompt_text(generator.calls[0]["prompt"])
    assert "Kalo was founded in 1642." not in first            # the alternative is written without its sentence
    second = generator.calls[1]
    assert second["temperature"] == 0.0                                          # the authors' default
    assert "Kalo was founded in 1642." in prompt_text(second["prompt"])
    assert "Tell me about Kalo." in prompt_text(second["prompt"])


def test_llm_triples_with_rule_fallback():
    replies = {"A": "(Kalo; was founded in; 1642)\n(Kalo; lies in; the north)", "B": "I cannot."}
    which = iter(["A", "B"])
    protect = ChatProtect(scripted(lambda p, i: replies[next(which)]), triples="llm")
    assert protect.triples("Kalo was founded in 1642 in the north.") == [
        Triple("Kalo", "was founded in", "1642"), Triple("Kalo", "lies in", "the north")]
    assert protect.triples("Kalo was founded in 1642.") == [Triple("Kalo", "was founded in", "1642")]
    with pytest.raises(ValueError, match="triples must be 'rule' or 'llm'"):
        ChatProtect(scripted(lambda p, i: ""), triples="spacy")
    with pytest.raises(ValueError, match="threshold must be <= 1"):
        ChatProtect(scripted(lambda p, i: ""), threshold=1.5)
    with pytest.raises(ValueError, match="max_rounds must be >= 1"):
        ChatProtect(scripted(lambda p, i: ""), max_rounds=0)


# ---- mitigation ----------------------------------------------------------------------------------------------

def _world_protect(error_rate=0.0, max_rounds=3, known_fraction=0.5, seed=0, **kwargs):
    world = FictionalWorld(12, known_fraction=known_fraction, seed=seed)
    generator = SimulatedGenerator(world, seed=seed)
    protect = ChatProtect(generator, SimulatedAnalyzer(world, error_rate, seed=seed), reviser=generator,
                          n_votes=3, max_rounds=max_rounds, seed=seed, **kwargs)
    return world, protect


def test_mitigation_stops_as_soon_as_the_text_is_clean():
    world, protect = _world_protect(known_fraction=1.0)
    report = protect.protect(f"Please tell me about {world.entities[0]}.")
    assert report.rounds == 1 and not report.flagged and report.text == report.original


def test_mitigation_removes_contradictions_keeps_known_facts_and_never_exceeds_max_rounds():
    world, protect = _world_protect()
    analyzer = protect.detector.analyzer
    for entity in world.entities:
        report = protect.protect(f"Please tell me about {entity}.")
        assert 1 <= report.rounds <= 3
        for check in (c for c in report.checks if c.round == 1):
            fact = world.parse(check.trigger.sentence)[0]
            if analyzer.truth(check.trigger.sentence, check.trigger.alternative):
                assert check.flagged and check.action == "removed"       # unknown fact: revision says NONE
                assert check.trigger.sentence not in report.text
            if fact.known:
                assert not check.flagged and fact.sentence() in report.text


def test_last_round_removes_what_is_still_flagged_and_revision_rewrites():
    analyzer = scripted(lambda prompt, i: "Yes" if "Answer Yes or No" in prompt else "They differ.")
    revisions = []

    def generator(prompt, i):
        if field(prompt, "Sentence"):
            revisions.append(field(prompt, "Sentence"))
            return "Kalo was founded long ago."
        return "Kalo was founded in 1999."

    generator = scripted(generator)
    protect = ChatProtect(generator, analyzer, reviser=generator, n_votes=2, max_rounds=2)
    report = protect.mitigate("q", "Kalo was founded in 1642. Nothing else.")
    assert report.rounds == 2 and report.text == "Nothing else."
    first = [c for c in report.checks if c.round == 1 and c.flagged]
    assert first[0].action == "revised" and first[0].revision == "Kalo was founded long ago."
    assert [c.action for c in report.checks if c.round == 2 and c.flagged] == ["removed"]
    assert revisions == ["Kalo was founded in 1642."]                  # the last round does not ask
    assert report.contradiction_rate(1) == 1.0


def test_drop_when_all_flagged_skips_the_revision_only_for_several_triples():
    analyzer = scripted(lambda prompt, i: "Yes" if "Answer Yes or No" in prompt else "")

    def generator(prompt, i):
        if "Extract the facts" in prompt:
            return "(Kalo; was founded in; 1642)\n(Kalo; was founded by; monks)"
        if "Conflicting statement:" in prompt:
            return "Kalo is old."
        return f"Kalo {field(prompt, 'Predicate')} someone else."

    generator = scripted(generator)
    for drop, expected in ((True, ""), (False, "Kalo is old.")):
        protect = ChatProtect(generator, analyzer, reviser=generator, n_votes=1, triples="llm",
                              drop_when_all_flagged=drop, max_rounds=3)
        report = protect.mitigate("q", "Kalo was founded in 1642 by monks.")
        first = [c for c in report.checks if c.round == 1]
        assert len(first) == 2 and all(c.flagged for c in first)
        assert first[0].revision == expected
    # without the shortcut, both conflicts were revised, each on the last revision
    revised = [field(prompt_text(c["prompt"]), "Sentence") for c in generator.calls
               if "Conflicting statement:" in prompt_text(c["prompt"])]
    assert revised[:2] == ["Kalo was founded in 1642 by monks.", "Kalo is old."]


def test_simulated_pipeline_rate_matches_the_world():
    world, protect = _world_protect(known_fraction=0.6, seed=3)
    checks = []
    for entity in world.entities:
        checks += protect.check(f"About {entity}.", world.description(entity, __import__("random").Random(1)))
    flagged = sum(c.flagged for c in checks) / len(checks)
    truth = sum(bool(protect.detector.analyzer.truth(c.trigger.sentence, c.trigger.alternative))
                for c in checks) / len(checks)
    assert flagged == truth                                   # an error-free analyser flags exactly the truth
    assert abs(truth - world.expected_contradiction_rate) < 0.05


def test_simulated_analyzer_error_rate_flips_whole_pairs():
    world = FictionalWorld(30, known_fraction=1.0, seed=1)
    analyzer = SimulatedAnalyzer(world, error_rate=0.3, seed=1)
    detector = ContradictionDetector(analyzer, n_votes=4)
    other = {f: next(v for v in ATTRIBUTES[f.predicate] if v != f.value) for f in world.facts.values()}
    scores = [detector.detect("", f.sentence(), f.sentence(other[f])).score for f in world.facts.values()]
    assert set(scores) <= {0.0, 1.0}
    assert 0.6 < sum(scores) / len(scores) < 0.8                       # contradictions, 30% of them missed


# ---- the labelled pairs and the baseline --------------------------------------------------------------------

def test_labelled_pairs():
    pairs = load_pairs()
    assert len(pairs) >= 100 and len({p.id for p in pairs}) == len(pairs)
    assert sum(p.contradictory for p in pairs) == len(pairs) // 2
    assert all(p.context and p.a and p.b and p.a != p.b for p in pairs)


def test_precision_recall_f1_known_values():
    scores, labels = [0.9, 0.6, 0.4, 0.1, 0.7], [True, False, True, False, True]
    p, r, f1 = precision_recall_f1(scores, labels, 0.5)
    assert (p, r) == (2 / 3, 2 / 3) and f1 == pytest.approx(2 / 3)
    assert precision_recall_f1([0.5, 0.5], [True, False], 0.5) == (0.0, 0.0, 0.0)    # score > threshold
    assert precision_recall_f1(scores, labels, 0.95) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="same length"):
        precision_recall_f1([0.1], [True, False], 0.5)


def test_selfcheck_baseline():
    unigram = SelfCheckDetector()
    assert unigram.detect("", "Kalo was founded in 1642.", "kalo was founded in 1642").score == 0.0
    assert unigram.detect("", "Kalo was founded.", "Totally different words here").score == 1.0
    analyzer = scripted(lambda prompt, i: "No" if i % 4 else "Yes")
    detection = SelfCheckDetector(analyzer, n_votes=4).detect("", "a", "b")
    assert detection.score == 0.75 and "Context: b\nSentence: a" in prompt_text(analyzer.calls[0]["prompt"])


def test_simulated_generator_rewording_and_stubborn_revisions():
    world = FictionalWorld(5, known_fraction=0.0, seed=2)
    fact = next(iter(world.facts.values()))
    reworded = SimulatedGenerator(world, elaborate=1.0).generate(
        f"Subject: {fact.entity}\nPredicate: {fact.predicate}")[0].text
    assert reworded.count(",") == 1 and world.parse(reworded)[0] is fact       # the clause is not the value
    assert world.parse(reworded)[1] in ATTRIBUTES[fact.predicate]
    revise = f"Sentence: {fact.sentence()}\nConflicting statement: x"
    assert SimulatedGenerator(world).generate(revise)[0].text == "NONE"
    stubborn = SimulatedGenerator(world, revision_error=1.0).generate(revise)[0].text
    assert world.parse(stubborn)[0] is fact                                    # restates a sampled value
    known = FictionalWorld(5, known_fraction=1.0, seed=2)
    fact = next(iter(known.facts.values()))
    restated = SimulatedGenerator(known).generate(f"Sentence: {fact.entity} {fact.predicate} x.\nConflicting "
                                                  "statement: y")[0].text
    assert restated == fact.sentence()
    with pytest.raises(ValueError, match="revision_error must be <= 1"):
        SimulatedGenerator(world, revision_error=2.0)


def test_every_flagged_conflict_is_revised_in_the_same_pass_and_the_prefix_reaches_the_analyser():
    analyzer = scripted(lambda prompt, i: "Yes" if "Answer Yes or No" in prompt and "1642" in prompt else "")

    def generator(prompt, i):
        if "Extract the facts" in prompt:
            return "(Kalo; was founded in; 1642)\n(Kalo; was founded by; monks)"
        if "Conflicting statement:" in prompt:
            return field(prompt, "Sentence") + " Really."
        return f"Kalo {field(prompt, 'Predicate')} someone else."

    generator = scripted(generator)
    protect = ChatProtect(generator, analyzer, reviser=generator, n_votes=1, triples="llm",
                          drop_when_all_flagged=False, max_rounds=2)
    protect.mitigate("Tell me about Kalo.", "Kalo is a town. Kalo was founded in 1642 by monks.")
    revisions = [c for c in generator.calls if "Conflicting statement:" in prompt_text(c["prompt"])]
    assert len(revisions) == 2                                  # both flagged triples, one pass
    explain = next(prompt_text(c["prompt"]) for c in analyzer.calls
                   if "Statement 1: Kalo was founded in 1642 by monks." in prompt_text(c["prompt"]))
    assert "Context: Tell me about Kalo. Kalo is a town." in explain


def test_drop_rule_needs_every_triple_flagged_and_the_analyser_revises_by_default():
    def analyzer_fn(prompt, i):
        if "Answer Yes or No" in prompt:
            return "Yes" if "Statement 2: Kalo was founded in" in prompt else "No"   # only the first conflicts
        if "Conflicting statement:" in prompt:
            return "Kalo was founded by monks."
        return ""

    def generator_fn(prompt, i):
        if "Extract the facts" in prompt:
            return "(Kalo; was founded in; 1642)\n(Kalo; was founded by; monks)"
        return f"Kalo {field(prompt, 'Predicate')} another."

    analyzer, generator = scripted(analyzer_fn), scripted(generator_fn)
    protect = ChatProtect(generator, analyzer, n_votes=1, triples="llm", max_rounds=3)
    report = protect.mitigate("q", "Kalo was founded in 1642 by monks.")
    first = [c for c in report.checks if c.round == 1 and c.flagged]
    assert len(first) == 1 and first[0].action == "revised" and first[0].revision == "Kalo was founded by monks."
    assert any("Conflicting statement:" in prompt_text(c["prompt"]) for c in analyzer.calls)
    assert not any("Conflicting statement:" in prompt_text(c["prompt"]) for c in generator.calls)


def test_greedy_yes_probability_reads_the_answer_token():
    from iclr24.llm.base import Completion

    class Greedy:
        capabilities = get_model("scripted", outputs=[]).capabilities

        def __init__(self, text, tokens, logprobs):
            self.reply = Completion(text, "stop", 0, 0, 0.0, tokens, logprobs)

        def generate(self, prompt, **kwargs):
            return [self.reply]

    assert yes_probability(Greedy(" Yes", (" ", "Yes"), (0.0, math.log(0.8))), "q") == pytest.approx(0.8)
    assert yes_probability(Greedy("No", ("No",), (math.log(0.9),)), "q") == pytest.approx(0.1)


def test_selfcheck_scores_and_inputs():
    model = get_model("scripted", outputs=[], logprobs=lambda ids: TABLE)
    assert SelfCheckDetector(model, mode="logprob").detect("", "a", "b").score == pytest.approx(0.25, abs=1e-6)
    replies = iter(["Yes", "maybe", "No", "No"])
    detection = SelfCheckDetector(scripted(lambda p, i: next(replies)), n_votes=4).detect("", "a", "b")
    assert detection.score == 0.5 and detection.unparsed == 1        # unparsed votes count as supported
    with pytest.raises(ValueError, match="b must be a non-empty statement"):
        SelfCheckDetector().detect("", "a", " ")
    assert SelfCheckDetector().detect("", "...", "...").score == 0.0


def test_public_boundary_rejects_bad_input():
    model = scripted(lambda p, i: "No")
    with pytest.raises(TypeError, match="generator must be a language model"):
        ChatProtect(None)
    with pytest.raises(TypeError, match="detector must have detect"):
        ChatProtect(model, detector=object())
    with pytest.raises(TypeError, match="drop_when_all_flagged must be a bool"):
        ChatProtect(model, drop_when_all_flagged="no")
    with pytest.raises(TypeError, match="seed must be an int"):
        ChatProtect(model, seed="x")
    with pytest.raises(ValueError, match="prompt must be a non-empty str"):
        ChatProtect(model).protect("")
    with pytest.raises(TypeError, match="prompt must be a str"):
        ChatProtect(model).mitigate(None, "text")
    with pytest.raises(ValueError, match="a must be a non-empty statement"):
        ContradictionDetector(model).detect("c", "", "b")
    with pytest.raises(ValueError, match="threshold must be finite"):
        precision_recall_f1([0.1], [True], float("nan"))
    with pytest.raises(TypeError, match="labels must be bools"):
        precision_recall_f1([0.1], [2], 0.5)


def test_a_revision_that_returns_the_sentence_is_reported_unchanged():
    analyzer = scripted(lambda prompt, i: "Yes" if "Answer Yes or No" in prompt else "")
    generator = scripted(lambda prompt, i: field(prompt, "Sentence") if "Conflicting statement:" in prompt
                         else "Kalo was founded in 1999.")
    report = ChatProtect(generator, analyzer, reviser=generator, n_votes=1, max_rounds=2).mitigate(
        "q", "Kalo was founded in 1642.")
    assert [c.action for c in report.checks if c.flagged] == ["unchanged", "removed"]


# ---- the authors' prompt structure and pass count -------------------------------------------------------------

def test_the_trigger_prompt_has_a_system_prompt_and_three_worked_examples():
    from iclr24.selfcontradiction.chatprotect import ALTERNATIVE_EXAMPLES, ALTERNATIVE_SYSTEM, NO_PREFIX

    generator = scripted(lambda prompt, i: "Kalo was founded in 1999.")
    ChatProtect(generator, scripted(lambda p, i: "No")).trigger("Tell me about Kalo.", "Kalo was founded in 1642.")
    messages = generator.calls[0]["prompt"]
    assert [m["role"] for m in messages] == ["system"] + ["user", "assistant"] * 3 + ["user"]
    assert messages[0]["content"] == ALTERNATIVE_SYSTEM and len(ALTERNATIVE_EXAMPLES) == 3
    for (_, _, subject, predicate, answer), question, reply in zip(ALTERNATIVE_EXAMPLES, messages[1::2],
                                                                   messages[2::2]):
        assert f"Subject: {subject}\nPredicate: {predicate}\nObject: _" in question["content"]
        assert reply["content"] == answer
    assert NO_PREFIX in messages[5]["content"]                   # one example starts with no earlier text
    assert field(messages[-1]["content"], "Subject") == "Kalo" and NO_PREFIX in messages[-1]["content"]
    assert '"Tell me about Kalo."' in messages[-1]["content"]


def test_by_default_three_revising_passes_and_a_removing_one():
    analyzer = scripted(lambda prompt, i: "Yes" if "Answer Yes or No" in prompt else "They differ.")
    revisions = []

    def generator(prompt, i):
        if "Conflicting statement:" in prompt:
            revisions.append(field(prompt, "Sentence"))
            return f"Kalo was founded in {1700 + len(revisions)}."
        return "Kalo was founded in 1999."

    generator = scripted(generator)
    protect = ChatProtect(generator, analyzer, reviser=generator, n_votes=1)
    assert protect.max_rounds == 4
    report = protect.mitigate("q", "Kalo was founded in 1642. Nothing else.")
    assert report.rounds == 4 and report.text == "Nothing else."
    assert len(revisions) == 3                                   # the fourth pass removes without asking
    assert [c.action for c in report.checks if c.flagged] == ["revised"] * 3 + ["removed"]


def test_detect_many_batches_explanations_and_each_pairs_votes_and_scores_as_detect():
    from iclr24.llm.base import Completion

    def reply(prompt):
        text = prompt_text(prompt)
        if "Answer Yes or No" not in text:
            return "They differ." if "1901" in text else "They agree."
        return "Yes" if "1901" in text else "No"

    class Batched:
        capabilities = get_model("scripted", outputs=[], logprobs=lambda ids: TABLE).capabilities   # local

        def __init__(self):
            self.batches = []

        def generate(self, prompt, n=1, **kwargs):
            return [Completion(reply(prompt), "stop", 0, 0, 0.0)] * n

        def generate_batch(self, prompts, **kwargs):
            self.batches.append((len(prompts), kwargs["temperature"]))
            return [Completion(reply(p), "stop", 0, 0, 0.0) for p in prompts]

    items = [("c", "It opened in 1889.", "It opened in 1901."), ("c", "It opened in 1889.", "it opened in 1889."),
             ("c", "It opened in 1889.", "It was opened in 1889.")]
    model = Batched()
    many = ContradictionDetector(model, n_votes=4).detect_many(items)
    assert [d.score for d in many] == [1.0, 0.0, 0.0] and many[1].method == "identical"
    assert many[0].explanation == "They differ." and many[0].votes == (True,) * 4
    assert model.batches == [(2, 0.0), (4, 1.0), (4, 1.0)]     # one batch of explanations, one of votes a pair
    single = ContradictionDetector(Batched(), n_votes=4)
    assert [single.detect(*item).score for item in items] == [d.score for d in many]
    server = Batched()
    server.capabilities = get_model("scripted", outputs=[]).capabilities              # no logits: a server
    assert [d.score for d in ContradictionDetector(server, n_votes=4).detect_many(items)] == [1.0, 0.0, 0.0]
    assert server.batches == [(2, 0.0)]                          # votes: one request for n answers a pair


def test_mitigation_reports_its_passes_and_their_work_only_when_asked(monkeypatch):
    from tests.progress_probe import bars

    recorder = bars(monkeypatch)

    def protect():
        analyzer = scripted(lambda prompt, i: "Yes" if "Answer Yes or No" in prompt else "They differ.")
        generator = scripted(lambda prompt, i: "Kalo was founded long ago." if field(prompt, "Sentence")
                             else "Kalo was founded in 1999.")
        return ChatProtect(generator, analyzer, reviser=generator, n_votes=2, max_rounds=2)

    quiet = protect().mitigate("q", "Kalo was founded in 1642. Nothing else.")
    assert recorder.added == []                                  # the default: no bar, even on a terminal
    loud = protect().mitigate("q", "Kalo was founded in 1642. Nothing else.", progress=True)
    one_pass = [("ChatProtect: triggering alternatives", 2),     # both sentences
                ("ChatProtect: detecting", 1),                   # "Nothing else." has no triple: one pair
                ("ChatProtect: revising", 1)]                    # the flagged sentence
    assert recorder.added == [("ChatProtect passes", 2), *one_pass, *one_pass]
    assert recorder.advanced == {"ChatProtect passes": 2, "ChatProtect: triggering alternatives": 4,
                                 "ChatProtect: detecting": 2, "ChatProtect: revising": 2}
    assert loud == quiet                                         # the bars change nothing else
    protect().protect("Tell me about Kalo.", progress=True)      # protect() passes the setting on
    assert recorder.added[len(one_pass) * 2 + 1] == ("ChatProtect passes", 2)


def test_the_option_types_name_every_value_the_code_uses():
    from typing import get_args

    from iclr24.selfcontradiction.chatprotect import Action, DetectionMethod, DetectorMode, TripleSource

    logits = get_model("scripted", outputs=lambda prompt, i: "No", logprobs=lambda ids: TABLE)
    methods = {ContradictionDetector(logits, mode=mode, n_votes=1).detect("", "a", "b").method
               for mode in get_args(DetectorMode)}
    methods |= {SelfCheckDetector(model, mode=mode, n_votes=1).detect("", "a", "b").method
                for mode in get_args(DetectorMode) for model in (logits, None)}
    methods.add(ContradictionDetector(logits).detect("", "same", "same").method)
    assert methods == set(get_args(DetectionMethod))
    for source in get_args(TripleSource):
        assert ChatProtect(logits, triples=source).triple_source == source
    analyzer = scripted(lambda prompt, i: "Yes" if "Answer Yes or No" in prompt else "They differ.")
    actions = set()
    for revision in ("Kalo was founded long ago.", "Kalo was founded in 1642."):    # revised, then unchanged
        generator = scripted(lambda prompt, i: revision if field(prompt, "Sentence") else "Kalo was founded in 1999.")
        report = ChatProtect(generator, analyzer, reviser=generator, n_votes=1, max_rounds=2).mitigate(
            "q", "Kalo was founded in 1642. Nothing else.")
        actions |= {c.action for c in report.checks}                  # and removed in the last pass
    world, protect = _world_protect()
    actions |= {c.action for c in protect.protect(f"Tell me about {world.entities[0]}.").checks}   # kept
    assert actions == set(get_args(Action))
    with pytest.raises(ValueError, match="mode must be 'votes' or 'logprob', got 'sample'"):
        SelfCheckDetector(mode="sample")
