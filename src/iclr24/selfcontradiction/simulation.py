"""A simulated generator and analyser over fictional entities whose ground truth is known.

SIMULATED MODELS, labelled as such wherever their numbers appear. They check ChatProtect's arithmetic
(how often a pipeline flags, how much mitigation removes and keeps), not a language model's ability.

``FictionalWorld``: entities with attributes (``founded in``, ``designed by``, ...). The generator "knows" a
fraction of the facts and states them the same way every time; the rest it samples from the attribute's
pool each time it speaks, so two samples disagree with probability ``1 - 1/pool``. The analyser reads the
two statements' values and says whether they differ, wrong on a pair with probability ``error_rate``.
Both read the pipeline's prompts as a language model would and answer in text.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass

from iclr24.core import check_int, check_number
from iclr24.llm.base import Capabilities, Completion

__all__ = ["ATTRIBUTES", "FictionalWorld", "SimulatedAnalyzer", "SimulatedGenerator", "prompt_text"]

_SYLLABLES = ("ka", "lo", "ren", "mi", "tar", "vel", "os", "dru", "an", "el", "mor", "sil", "qua", "bex", "ith")
_NAMES = ("Ansel Brisk", "Ilse Varga", "Tomas Ebberly", "Mirela Osk", "Colm Treacy", "Noor Haddad", "Ida Pellam",
          "Oren Castell", "Edda Marsh", "Hugo Lantz", "Priya Lanner", "Jasna Holt")
_CLAUSES = ("as the records show", "as local histories tell", "as is well documented", "by most accounts")
ATTRIBUTES = {
    "was founded in": tuple(str(y) for y in range(1610, 1990, 19)),
    "is located in": ("the Kestrel Highlands", "the Orris Valley", "the Alder Islands", "the Dray basin",
                      "the northern marches", "the Sable coast", "the Ferro Mountains", "the Corvin plain",
                      "the Glenmoor hills", "the Tessaly lowlands"),
    "was designed by": _NAMES[:10],
    "is known for": ("its salt mines", "its clock tower", "an annual kite festival", "its glassworks",
                     "a rare orchid", "its horse fair", "a medieval library", "its cider", "a lighthouse",
                     "its stone bridge"),
    "was named after": _NAMES[2:12],
}


@dataclass(frozen=True)
class Fact:
    entity: str
    predicate: str
    value: str
    known: bool

    def sentence(self, value: str | None = None) -> str:
        return f"{self.entity} {self.predicate} {value or self.value}."


class FictionalWorld:
    """``n_entities`` fictional places, each with every attribute of ``ATTRIBUTES``; ``known_fraction`` of
    the facts (rounded) are known to the generator, drawn at random."""

    def __init__(self, n_entities: int = 40, known_fraction: float = 0.8, seed: int = 0) -> None:
        n_entities = check_int("n_entities", n_entities, minimum=1)
        self.known_fraction = check_number("known_fraction", known_fraction, minimum=0.0, maximum=1.0)
        rng = random.Random(seed)
        names: list[str] = []
        while len(names) < n_entities:
            name = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()
            if name not in names:
                names.append(name)
        keys = [(name, p) for name in names for p in ATTRIBUTES]
        # exactly round(known_fraction * facts) known, so the configured rate is the world's rate
        known = set(rng.sample(keys, round(known_fraction * len(keys))))
        self.facts = {(name, p): Fact(name, p, rng.choice(ATTRIBUTES[p]), (name, p) in known) for name, p in keys}
        self.entities = names

    @property
    def expected_contradiction_rate(self) -> float:
        """P(two samples of a fact disagree) = (1 - known) * E[1 - 1/|pool|]."""
        unknown = sum(not f.known for f in self.facts.values()) / len(self.facts)
        miss = sum(1 - 1 / len(pool) for pool in ATTRIBUTES.values()) / len(ATTRIBUTES)
        return unknown * miss

    def parse(self, sentence: str) -> tuple[Fact, str] | None:
        """The fact a sentence states and the value it gives, or None."""
        for (entity, predicate), fact in self.facts.items():
            head = f"{entity} {predicate} "
            if sentence.strip().startswith(head):
                # the value, without an elaborating clause after a comma
                return fact, sentence.strip()[len(head):].rstrip(".").split(",")[0].strip()
        return None

    def description(self, entity: str, rng: random.Random, elaborate: float = 0.0) -> str:
        return " ".join(self.say(self.facts[(entity, p)], rng, elaborate) for p in ATTRIBUTES)

    def say(self, fact: Fact, rng: random.Random, elaborate: float = 0.0) -> str:
        """The fact as a sentence: the true value if known, else a fresh sample; with probability
        ``elaborate`` an extra clause, so two statements of the same value differ in words."""
        value = fact.value if fact.known else rng.choice(ATTRIBUTES[fact.predicate])
        sentence = fact.sentence(value)
        if rng.random() < elaborate:
            sentence = f"{sentence[:-1]}, {rng.choice(_CLAUSES)}."
        return sentence


class _Simulated:
    capabilities = Capabilities(full_logits=False, top_logprobs_k=0, chat_template=False, grammar=False)

    def tokenize(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def detokenize(self, token_ids) -> str:
        return "".join(chr(i) for i in token_ids)

    def _rng(self, prompt, seed: int | None, i: int) -> random.Random:
        digest = hashlib.sha256(f"{self.seed}|{seed}|{i}|{prompt}".encode()).digest()
        return random.Random(int.from_bytes(digest[:8], "big"))


def prompt_text(prompt) -> str:
    """A text prompt, or the contents of chat messages joined by newlines."""
    return prompt if isinstance(prompt, str) else "\n".join(m["content"] for m in prompt)


def _field(prompt: str, name: str) -> str | None:
    """The last ``name: value`` line: the question comes after any worked examples."""
    matches = re.findall(rf"^{name}: (.*)$", prompt, re.MULTILINE)
    return matches[-1].strip() if matches else None


class SimulatedGenerator(_Simulated):
    """A SIMULATED generator over a ``FictionalWorld`` (see the module docstring). Answers the description,
    alternative and revision prompts of ``ChatProtect``; anything else gets an empty reply.

    ``elaborate``: the probability that a sentence carries an extra clause (same fact, other words).
    A revision restates a known fact; for an unknown one it answers NONE, except with probability
    ``revision_error``, when it stubbornly restates a freshly sampled value.
    """

    name = "simulated-generator"

    def __init__(self, world: FictionalWorld, seed: int = 0, *, elaborate: float = 0.0,
                 revision_error: float = 0.0) -> None:
        self.world, self.seed, self.calls = world, seed, 0
        self.elaborate = check_number("elaborate", elaborate, minimum=0.0, maximum=1.0)
        self.revision_error = check_number("revision_error", revision_error, minimum=0.0, maximum=1.0)

    def generate(self, prompt, *, max_tokens: int = 256, stop=(), temperature: float = 0.0, top_p: float = 1.0,
                 seed: int | None = None, n: int = 1, system=None, logprobs: bool = False) -> list[Completion]:
        self.calls += 1
        prompt = prompt_text(prompt)
        return [Completion(self._reply(prompt, self._rng(prompt, seed, i)), "stop", 0, 0, 0.0)
                for i in range(n)]

    def _reply(self, prompt: str, rng: random.Random) -> str:
        subject, predicate = _field(prompt, "Subject"), _field(prompt, "Predicate")
        if subject and predicate:                                   # an alternative for (s; p; _)
            fact = self.world.facts.get((subject, predicate))
            return self.world.say(fact, rng, self.elaborate) if fact else ""
        sentence = _field(prompt, "Sentence")
        if sentence is not None:                                    # a revision: restate what it knows
            parsed = self.world.parse(sentence)
            if parsed is None:
                return "NONE"
            if parsed[0].known or rng.random() < self.revision_error:
                return self.world.say(parsed[0], rng)
            return "NONE"
        for entity in self.world.entities:                          # a description
            if re.search(rf"\b{re.escape(entity)}\b", prompt):
                return self.world.description(entity, rng, self.elaborate)
        return ""


class SimulatedAnalyzer(_Simulated):
    """A SIMULATED analyser: says Yes when the two statements give different values for the same fact,
    and gets a pair wrong (all its votes) with probability ``error_rate``."""

    name = "simulated-analyzer"

    def __init__(self, world: FictionalWorld, error_rate: float = 0.05, seed: int = 0) -> None:
        self.world, self.seed, self.calls = world, seed, 0
        self.error_rate = check_number("error_rate", error_rate, minimum=0.0, maximum=1.0)

    def truth(self, a: str, b: str) -> bool | None:
        """Whether ``a`` and ``b`` contradict in the world (None when they are not about one fact)."""
        pa, pb = self.world.parse(a), self.world.parse(b)
        if pa is None or pb is None or pa[0] is not pb[0]:
            return None
        return pa[1] != pb[1]

    def generate(self, prompt, *, max_tokens: int = 256, stop=(), temperature: float = 0.0, top_p: float = 1.0,
                 seed: int | None = None, n: int = 1, system=None, logprobs: bool = False) -> list[Completion]:
        self.calls += 1
        prompt = prompt_text(prompt)
        a, b = _field(prompt, "Statement 1"), _field(prompt, "Statement 2")
        truth = self.truth(a, b) if a and b else None
        if "Answer Yes or No" not in prompt:
            text = "The statements are about different things." if truth is None else \
                ("They give different values for the same fact." if truth else "They agree.")
            return [Completion(text, "stop", 0, 0, 0.0)] * n
        wrong = self._rng(f"{a}|{b}", None, 0).random() < self.error_rate     # one verdict per pair
        verdict = bool(truth) != wrong
        return [Completion("Yes" if verdict else "No", "stop", 0, 0, 0.0) for _ in range(n)]
