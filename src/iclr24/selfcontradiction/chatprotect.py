"""ChatProtect: trigger, detect and mitigate self-contradictions of a language model.

Trigger (Section 3 of the paper): for each sentence of a generated text, take its (subject; predicate;
object) triples and have the generator write another sentence in the same context about (subject;
predicate; _), prompted with a system prompt and three worked examples as in the authors' code. Two
sentences about the same thing that cannot both be true are a self-contradiction: at least one of them is
a hallucination, found without any external knowledge.
Detect: the analyser explains whether the pair contradicts, then answers Yes/No ``n_votes`` times at
temperature 1; the score is the fraction of Yes. With a backend that gives next-token log-probabilities, a
single pass reads P(Yes) instead.
Mitigate: a flagged sentence is rewritten to drop the conflicting information and keep the rest (removed
when nothing is left); up to ``max_rounds`` passes over the whole text, stopping when no sentence is
flagged; in the last pass whatever is still flagged is removed (default 4: three revising passes and a
removing one, as in the authors' code).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Literal, get_args

from iclr24.core import check_int, check_number
from iclr24.core.progress import progress as progress_bar
from iclr24.llm.base import require_logprobs
from iclr24.selfcontradiction.sentences import Triple, parse_triples, rule_based_triple, split_sentences

__all__ = ["Action", "ChatProtect", "ContradictionDetector", "Detection", "DetectionMethod", "DetectorMode",
           "ProtectReport", "SentenceCheck", "TripleSource", "Trigger", "alternative_messages", "yes_probability"]

#: How a detector scores a pair: sampled Yes/No ``votes``, or P(Yes) read from the next-token ``logprob``.
DetectorMode = Literal["votes", "logprob"]
#: Where a sentence's triples come from: ``rule_based_triple`` (``rule``) or the generator, few-shot (``llm``).
TripleSource = Literal["rule", "llm"]
#: How a :class:`Detection` was scored (the word-overlap and SelfCheck ones come from ``SelfCheckDetector``).
DetectionMethod = Literal["votes", "logprob", "identical", "word-overlap", "selfcheck-votes", "selfcheck-logprob"]
#: What mitigation did with a checked sentence.
Action = Literal["kept", "revised", "unchanged", "removed"]

# The trigger prompt, in the authors' structure (``generate_statement_missing_object_free``): a system prompt,
# three worked examples as earlier turns (an answer with a prefix, a question's answer, an empty prefix), then the
# question. The wording and the examples are ours.
ALTERNATIVE_SYSTEM = ("You write answers one sentence at a time. You are given the beginning of an answer and a "
                      "(subject; predicate; object) triple whose object is missing. You reply with the next sentence "
                      "of the answer, which fills in the missing object.")

ALTERNATIVE_PROMPT = """Here is the beginning of an answer to the prompt "{prompt}":
{prefix}

Write the next sentence of this answer. It must fill in the missing object of the triple below and say as little
else as possible.
Subject: {subject}
Predicate: {predicate}
Object: _"""

NO_PREFIX = "There is no earlier text."

# (prompt, prefix, subject, predicate, the sentence the example answers with)
ALTERNATIVE_EXAMPLES = (
    ("Please tell me about Marie Curie",
     "Marie Curie was a physicist and chemist who pioneered the study of radioactivity. She was born in Warsaw in "
     "1867 and moved to Paris to study at the Sorbonne.",
     "Curie", "was awarded", "Curie was awarded the Nobel Prize in Physics in 1903."),
    ("Who is Lionel Messi?",
     "Lionel Messi is an Argentine footballer, widely regarded as one of the best players of all time.",
     "Messi", "spent most of his club career at", "He spent most of his club career at FC Barcelona."),
    ("Where was Wolfgang Amadeus Mozart born?", "",
     "Wolfgang Amadeus Mozart", "was born in the city of", "Wolfgang Amadeus Mozart was born in Salzburg."),
)


def alternative_messages(prompt: str, prefix: str, subject: str, predicate: str) -> list[dict[str, str]]:
    """The trigger's chat: the system prompt, the worked examples as earlier turns, then the question."""
    messages = [{"role": "system", "content": ALTERNATIVE_SYSTEM}]
    for example_prompt, example_prefix, example_subject, example_predicate, answer in ALTERNATIVE_EXAMPLES:
        messages += [{"role": "user", "content": ALTERNATIVE_PROMPT.format(
                          prompt=example_prompt, prefix=example_prefix or NO_PREFIX, subject=example_subject,
                          predicate=example_predicate)},
                     {"role": "assistant", "content": answer}]
    messages.append({"role": "user", "content": ALTERNATIVE_PROMPT.format(
        prompt=prompt, prefix=prefix or NO_PREFIX, subject=subject, predicate=predicate)})
    return messages


TRIPLES_PROMPT = """Extract the facts of the sentence as (subject; predicate; object) triples, one per line.

Sentence: The Eiffel Tower was completed in 1889 and is 330 metres tall.
(The Eiffel Tower; was completed in; 1889)
(The Eiffel Tower; is; 330 metres tall)

Sentence: {sentence}
"""

# Detection (``explain_consistent_cot`` / ``check_consistent_cot``): a greedy explanation with no system prompt,
# then the conclusion asked for in a new turn and sampled ``n_votes`` times at temperature 1.
EXPLAIN_PROMPT = """Below is the beginning of a text, then two statements about its topic.
Context: {context}
Statement 1: {a}
Statement 2: {b}
Explain whether the two statements are contradictory. Give your explanation only."""

CONCLUDE_PROMPT = "Conclude whether the two statements are contradictory. Answer Yes or No."

# Revision (``rephrase_desc_remove_conflict``): drop what conflicts, keep the rest, add nothing. A revision that
# leaves nothing answers NONE (the authors ask for an empty string, which chat models rarely send).
REVISE_PROMPT = """Here is the beginning of a text written in answer to: {prompt}
{prefix}

This sentence came next:
Sentence: {sentence}
But it contradicts this statement:
Conflicting statement: {alternative}
Remove the conflicting information from the sentence and keep as much of the other information as you can. The
new sentence must fit after the text above and hold only information from the original sentence. Reply with the
new sentence only, or NONE if nothing is left.
Rewritten sentence:"""

_YES, _NO = re.compile(r"\byes\b", re.IGNORECASE), re.compile(r"\bno\b", re.IGNORECASE)


def as_chat(prompt) -> list[dict[str, str]]:
    """A prompt as chat messages (a string becomes one user message), so instruction-tuned models reply as
    assistants."""
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)


def parse_yes_no(text: str) -> bool | None:
    """True when the reply says Yes and not No, False for No and not Yes, None for both or neither (the
    authors' rule; a None vote counts as No)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    yes, no = bool(_YES.search(text)), bool(_NO.search(text))
    return None if yes == no else yes


def yes_probability(llm, prompt) -> float:
    """P(Yes) / (P(Yes) + P(No)) for the reply to ``prompt``, in one pass.

    Backends with the full next-token distribution are read directly (over the first token of ``Yes`` and
    `` Yes``, and likewise for No); others generate one greedy token with its log-probability, and a reply
    that is neither Yes nor No gives 0.5.
    """
    caps = getattr(llm, "capabilities", None)
    if caps is not None and caps.full_logits:
        from iclr24.llm import reply_logprobs

        logprobs = reply_logprobs(llm, as_chat(prompt))

        def first_ids(word: str) -> set[int]:
            return {ids[0] for ids in (llm.tokenize(word), llm.tokenize(" " + word)) if ids}

        # a token both answers start with (a lone space, for character-level tokenizers) decides nothing
        yes_ids, no_ids = first_ids("Yes"), first_ids("No")
        yes = sum(math.exp(float(logprobs[i])) for i in yes_ids - no_ids)
        no = sum(math.exp(float(logprobs[i])) for i in no_ids - yes_ids)
        return yes / (yes + no) if yes + no > 0 else 0.5
    reply = llm.generate(as_chat(prompt), max_tokens=3, temperature=0.0, logprobs=True)[0]
    answer = parse_yes_no(reply.text)
    if answer is None:
        return 0.5
    # the probability of the answer's own token (not of a leading space or markup token)
    p_answer = 1.0
    for token, logprob in zip(reply.tokens or (), reply.logprobs or ()):
        if parse_yes_no(token) is not None or token.strip().lower() in ("y", "ye", "n"):
            p_answer = math.exp(logprob)
            break
    return p_answer if answer else 1.0 - p_answer


@dataclass(frozen=True)
class Detection:
    """The analyser's verdict on one pair: ``score`` in [0, 1] (fraction of Yes votes, or P(Yes))."""

    score: float
    explanation: str = ""
    votes: tuple[bool | None, ...] = ()
    method: DetectionMethod = "votes"

    @property
    def unparsed(self) -> int:
        return sum(v is None for v in self.votes)


class ContradictionDetector:
    """The paper's detector: explanation first, then ``n_votes`` sampled Yes/No conclusions.

    ``mode="logprob"`` reads P(Yes) after the explanation in one pass instead of sampling; ``explain=False``
    skips the explanation (cheaper, usually weaker). Unparseable votes count as No.
    """

    def __init__(self, analyzer, *, n_votes: int = 10, mode: DetectorMode = "votes", explain: bool = True,
                 explanation_tokens: int = 160, seed: int = 0) -> None:
        check_choice("mode", mode, DetectorMode)
        _require_model("analyzer", analyzer)
        if mode == "logprob":
            require_logprobs(analyzer, "ContradictionDetector(mode='logprob')")
        if not isinstance(explain, bool):
            raise TypeError(f"explain must be a bool, got {explain!r}")
        self.analyzer, self.mode, self.explain, self.seed = analyzer, mode, explain, check_int("seed", seed)
        self.n_votes = check_int("n_votes", n_votes, minimum=1)
        self.explanation_tokens = check_int("explanation_tokens", explanation_tokens, minimum=1)
        self.calls = 0

    def detect(self, context: str, a: str, b: str) -> Detection:
        check_statements(context, a, b)
        if _identical(a, b):
            return Detection(0.0, "the statements are identical", (), "identical")    # no call needed
        question = _question(context, a, b)
        explanation = ""
        if self.explain:
            explanation = self.analyzer.generate([question], max_tokens=self.explanation_tokens,
                                                 temperature=0.0)[0].text
            self.calls += 1
        conclude = _conclusion(question, explanation)
        self.calls += 1
        if self.mode == "logprob":
            return Detection(yes_probability(self.analyzer, conclude), explanation, (), "logprob")
        replies = self.analyzer.generate(conclude, max_tokens=5, temperature=1.0, n=self.n_votes,
                                         seed=self.seed + self.calls)
        return self._votes(replies, explanation)

    def detect_many(self, items, progress=None) -> list[Detection]:
        """``detect`` for each ``(context, a, b)`` of ``items``, with a local model's batched decoding: the
        explanations are decoded together (greedy, so each is what it would be alone, up to float rounding),
        and on a local model (full logits) each pair's votes are one batch of identical prompts, encoded once
        (the backend caches the shared prefix); a server gets one request for ``n_votes`` answers. Without
        ``generate_batch`` (or in ``mode="logprob"``) it calls ``detect`` pair by pair.
        ``progress``: a callback after each pair."""
        items = list(items)
        if self.mode == "logprob" or not hasattr(self.analyzer, "generate_batch"):
            detections = []
            for context, a, b in items:
                detections.append(self.detect(context, a, b))
                if progress is not None:
                    progress()
            return detections
        from iclr24.llm.base import generate_batch

        for context, a, b in items:
            check_statements(context, a, b)
        questions = {i: _question(*item) for i, item in enumerate(items) if not _identical(item[1], item[2])}
        explanations = dict.fromkeys(questions, "")
        if self.explain and questions:
            replies = generate_batch(self.analyzer, [[q] for q in questions.values()],
                                     max_tokens=self.explanation_tokens, temperature=0.0)
            self.calls += len(questions)
            explanations = {i: r.text for i, r in zip(questions, replies)}
        caps = getattr(self.analyzer, "capabilities", None)
        local = bool(caps is not None and caps.full_logits)
        detections = []
        for i in range(len(items)):
            if i not in questions:
                detections.append(Detection(0.0, "the statements are identical", (), "identical"))
            else:
                self.calls += 1
                conclude = _conclusion(questions[i], explanations[i])
                if local:       # one batch whose shared prompt is encoded once
                    replies = generate_batch(self.analyzer, [conclude] * self.n_votes, max_tokens=5,
                                             temperature=1.0, seed=self.seed + self.calls)
                else:           # a server samples n answers to one request
                    replies = self.analyzer.generate(conclude, max_tokens=5, temperature=1.0, n=self.n_votes,
                                                     seed=self.seed + self.calls)
                detections.append(self._votes(replies, explanations[i]))
            if progress is not None:
                progress()
        return detections

    def _votes(self, replies, explanation: str) -> Detection:
        votes = tuple(parse_yes_no(r.text) for r in replies)
        if not votes:
            raise RuntimeError(f"the analyser returned no completions for n={self.n_votes}")
        return Detection(sum(v is True for v in votes) / len(votes), explanation, votes, "votes")


def _identical(a: str, b: str) -> bool:
    return " ".join(a.split()).lower() == " ".join(b.split()).lower()


def _question(context: str, a: str, b: str) -> dict[str, str]:
    return {"role": "user", "content": EXPLAIN_PROMPT.format(context=context.strip() or "(none)", a=a.strip(),
                                                             b=b.strip())}


def _conclusion(question: dict[str, str], explanation: str) -> list[dict[str, str]]:
    """The explanation as the analyser's own turn, then the conclusion asked for in a new one."""
    return [question, *([{"role": "assistant", "content": explanation.strip()}] if explanation.strip() else []),
            {"role": "user", "content": CONCLUDE_PROMPT}]


def check_choice(name: str, value, choices) -> None:
    """Refuse a ``value`` that is not one of the ``Literal`` type ``choices``, naming them."""
    options = get_args(choices)
    if value not in options:
        listed = " or ".join(map(repr, options)) if len(options) == 2 else f"one of {', '.join(map(repr, options))}"
        raise ValueError(f"{name} must be {listed}, got {value!r}")


def _require_model(name: str, model) -> None:
    if not callable(getattr(model, "generate", None)):
        raise TypeError(f"{name} must be a language model with generate() (iclr24.llm), got {type(model).__name__}")


def check_statements(context, a, b) -> None:
    if not isinstance(context, str):
        raise TypeError(f"context must be a str, got {type(context).__name__}")
    for name, text in (("a", a), ("b", b)):
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{name} must be a non-empty statement, got {text!r}")


@dataclass(frozen=True)
class Trigger:
    """A sentence, one of its triples, and the alternative the generator wrote for (subject; predicate; _)."""

    index: int
    sentence: str
    prefix: str
    triple: Triple
    alternative: str


@dataclass(frozen=True)
class SentenceCheck:
    """One checked pair and what mitigation did with its sentence: kept (not flagged), revised, unchanged
    (flagged, but the reviser returned the same sentence) or removed."""

    round: int
    trigger: Trigger
    detection: Detection
    flagged: bool
    action: Action = "kept"
    revision: str = ""


@dataclass
class ProtectReport:
    """The text before and after, the rounds run, and every check with its action."""

    prompt: str
    original: str
    text: str
    rounds: int = 0
    checks: list[SentenceCheck] = field(default_factory=list)

    @property
    def flagged(self) -> list[SentenceCheck]:
        return [c for c in self.checks if c.flagged]

    def contradiction_rate(self, round: int = 1) -> float:
        """Fraction of the sentences checked in ``round`` with at least one flagged pair."""
        checked = {c.trigger.index for c in self.checks if c.round == round}
        flagged = {c.trigger.index for c in self.checks if c.round == round and c.flagged}
        return len(flagged) / len(checked) if checked else 0.0


class ChatProtect:
    """Trigger, detect and mitigate self-contradictions of ``generator`` (a ``LanguageModel``).

    ``analyzer`` judges the pairs (default: the generator itself, one model in both roles) and ``reviser``
    rewrites flagged sentences (default: the analyser, as in the authors' code); ``detector`` replaces the
    paper's detector (e.g. ``SelfCheckDetector``). Triples come from ``triples="rule"``
    (``rule_based_triple``, one a sentence) or ``"llm"`` (the generator, few-shot). A pair is flagged when
    its score is > ``threshold`` (strictly, as the authors flag more than half of the votes).

    Mitigation: each pass checks the whole text; every flagged triple of a sentence is revised in turn,
    each revision applied to the last, and the sentence goes when a revision leaves nothing (NONE). The
    last of ``max_rounds`` passes removes what is still flagged, and a clean pass stops early. The default,
    ``max_rounds=4``, is the authors': three revising passes and a removing one. ``drop_when_all_flagged`` removes
    a sentence with more than one triple, all flagged, without asking (their shortcut).
    """

    def __init__(self, generator, analyzer=None, *, reviser=None, n_votes: int = 10, threshold: float = 0.5,
                 detector=None, triples: TripleSource = "rule", max_rounds: int = 4,
                 drop_when_all_flagged: bool = True, alternative_temperature: float = 0.0, alternative_tokens: int = 60,
                 seed: int = 0) -> None:
        check_choice("triples", triples, TripleSource)
        _require_model("generator", generator)
        for name, model in (("analyzer", analyzer), ("reviser", reviser)):
            if model is not None:
                _require_model(name, model)
        if detector is not None and not callable(getattr(detector, "detect", None)):
            raise TypeError(f"detector must have detect(context, a, b), got {type(detector).__name__}")
        if not isinstance(drop_when_all_flagged, bool):
            raise TypeError(f"drop_when_all_flagged must be a bool, got {drop_when_all_flagged!r}")
        seed = check_int("seed", seed)
        self.generator = generator
        self.detector = detector or ContradictionDetector(analyzer or generator, n_votes=n_votes, seed=seed)
        self.reviser = reviser or analyzer or generator
        self.threshold = check_number("threshold", threshold, minimum=0.0, maximum=1.0)
        self.triple_source = triples
        self.max_rounds = check_int("max_rounds", max_rounds, minimum=1)
        self.drop_when_all_flagged = bool(drop_when_all_flagged)
        self.alternative_temperature = check_number("alternative_temperature", alternative_temperature,
                                                    minimum=0.0)
        self.alternative_tokens = check_int("alternative_tokens", alternative_tokens, minimum=1)
        self.seed = seed
        self.generator_calls = 0

    # -- trigger ---------------------------------------------------------------------------------------------
    def triples(self, sentence: str) -> list[Triple]:
        if self.triple_source == "llm":
            reply = self._generate(TRIPLES_PROMPT.format(sentence=sentence), max_tokens=120)
            found = parse_triples(reply)
            if found:
                return found
        triple = rule_based_triple(sentence)
        return [triple] if triple else []

    def alternative(self, prompt: str, prefix: str, triple: Triple) -> str:
        reply = self._generate(alternative_messages(prompt, prefix, triple.subject, triple.predicate),
                               max_tokens=self.alternative_tokens, temperature=self.alternative_temperature)
        sentences = split_sentences(reply.strip())
        return sentences[0] if sentences else ""

    def trigger(self, prompt: str, text: str, *, progress: bool = False) -> list[Trigger]:
        """Every sentence's triples and the generator's alternative for each; ``progress=True`` draws a bar of the
        sentences (:mod:`iclr24.core.progress`)."""
        sentences = split_sentences(text)
        out = []
        with progress_bar("ChatProtect: triggering alternatives", total=len(sentences), enabled=progress) as bar:
            for i, sentence in enumerate(sentences):
                prefix = " ".join(sentences[:i])
                for triple in self.triples(sentence):
                    out.append(Trigger(i, sentence, prefix, triple, self.alternative(prompt, prefix, triple)))
                bar.advance()
        return out

    # -- detect ----------------------------------------------------------------------------------------------
    def detect(self, context: str, a: str, b: str) -> Detection:
        return self.detector.detect(context, a, b)

    def check(self, prompt: str, text: str, round: int = 1, *, progress: bool = False) -> list[SentenceCheck]:
        """Trigger, then detect every (sentence, alternative) pair; ``progress=True`` draws a bar for each."""
        triggers = [t for t in self.trigger(prompt, text, progress=progress) if t.alternative]
        checks = []
        with progress_bar("ChatProtect: detecting", total=len(triggers), enabled=progress) as bar:
            for trig in triggers:
                detection = self.detect(" ".join(filter(None, (prompt, trig.prefix))), trig.sentence,
                                        trig.alternative)
                checks.append(SentenceCheck(round, trig, detection, detection.score > self.threshold))
                bar.advance(flagged=sum(c.flagged for c in checks))
        return checks

    # -- mitigate --------------------------------------------------------------------------------------------
    def mitigate(self, prompt: str, text: str, *, progress: bool = False) -> ProtectReport:
        """Check and revise ``text`` pass by pass (see the class). ``progress=True`` draws a bar of the passes and,
        within each, one of its sentences triggered, pairs detected and sentences revised
        (:mod:`iclr24.core.progress`; off by default: with a real model each pass takes minutes)."""
        for name, value in (("prompt", prompt), ("text", text)):
            if not isinstance(value, str):
                raise TypeError(f"{name} must be a str, got {type(value).__name__}")
        report = ProtectReport(prompt, text, text)
        with progress_bar("ChatProtect passes", total=self.max_rounds, enabled=progress) as passes:
            for r in range(1, self.max_rounds + 1):
                checks = self.check(prompt, report.text, round=r, progress=progress)
                report.rounds = r
                by_sentence: dict[int, list[SentenceCheck]] = {}
                for c in checks:
                    by_sentence.setdefault(c.trigger.index, []).append(c)
                if not any(c.flagged for c in checks):
                    report.checks.extend(checks)
                    passes.advance(flagged=0)
                    break
                sentences = split_sentences(report.text)
                self._revise_flagged(prompt, r, by_sentence, sentences, report, progress)
                passes.advance(flagged=sum(c.flagged for c in checks))
                report.text = " ".join(s for s in sentences if s)
                if not report.text:
                    break
        return report

    def _revise_flagged(self, prompt: str, round: int, by_sentence: dict[int, list[SentenceCheck]],
                        sentences: list[str], report: ProtectReport, progress: bool) -> None:
        """One pass's mitigation: each sentence with a flagged pair revised (or removed) in ``sentences``, and every
        check recorded in ``report`` with what was done."""
        flagged_sentences = sum(any(c.flagged for c in group) for group in by_sentence.values())
        with progress_bar("ChatProtect: revising", total=flagged_sentences, enabled=progress) as bar:
            for index, group in by_sentence.items():
                flagged = [c for c in group if c.flagged]
                if flagged:
                    remove = round == self.max_rounds or (self.drop_when_all_flagged and len(group) > 1
                                                          and len(flagged) == len(group))
                    sentence = "" if remove else group[0].trigger.sentence
                    for c in flagged:                       # one revision per conflict, each on the last
                        if not sentence:
                            break
                        sentence = self.revise(prompt, c.trigger, sentence)
                    sentences[index] = sentence
                    action = "removed" if not sentence else (
                        "unchanged" if sentence == group[0].trigger.sentence else "revised")
                    group = [SentenceCheck(c.round, c.trigger, c.detection, True, action, sentence) if c.flagged
                             else c for c in group]
                    bar.advance()
                report.checks.extend(group)

    def revise(self, prompt: str, trig: Trigger, sentence: str | None = None) -> str:
        """The reviser's rewrite of ``sentence`` (default ``trig.sentence``) without what conflicts with
        ``trig.alternative`` ("" when it answers NONE or nothing is left)."""
        text = REVISE_PROMPT.format(prompt=prompt, prefix=trig.prefix or NO_PREFIX,
                                    sentence=sentence or trig.sentence, alternative=trig.alternative)
        reply = self.reviser.generate(as_chat(text), max_tokens=self.alternative_tokens, temperature=0.0)[0].text
        sentences = split_sentences(reply.strip())
        if not sentences or sentences[0].strip(" .").upper() == "NONE":
            return ""
        return sentences[0]

    def protect(self, prompt: str, *, max_tokens: int = 200, progress: bool = False) -> ProtectReport:
        """Generate an answer to ``prompt`` and return it checked and mitigated (``progress``: as
        :meth:`mitigate`)."""
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError(f"prompt must be a non-empty str, got {prompt!r}")
        return self.mitigate(prompt, self._generate(prompt, max_tokens=max_tokens).strip(), progress=progress)

    def _generate(self, prompt, *, max_tokens: int, temperature: float = 0.0) -> str:
        self.generator_calls += 1
        return self.generator.generate(as_chat(prompt), max_tokens=max_tokens, temperature=temperature,
                                       seed=self.seed + self.generator_calls)[0].text


