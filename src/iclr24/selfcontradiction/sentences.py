"""Sentences and (subject; predicate; object) triples: the units ChatProtect checks.

The authors' pipeline splits with NLTK's punkt and extracts triples with CompactIE (a Python 3.6 model with
its own checkpoints). Here the splitter is a rule set that knows abbreviations, initials, decimals and closing quotes,
and triples come from the LLM (``parse_triples`` reads its ``(s; p; o)`` lines) with a rule-based fallback.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Triple", "parse_triples", "rule_based_triple", "split_sentences"]

# Words whose trailing period does not end a sentence (compared case-insensitively, without the period).
ABBREVIATIONS = frozenset({
    "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "mt", "ft", "vs", "etc", "e.g", "i.e", "cf", "al", "approx",
    "no", "vol", "fig", "inc", "ltd", "co", "corp", "gen", "col", "capt", "lt", "sgt", "rev", "hon", "jan", "feb",
    "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "u.s", "u.k", "a.m", "p.m", "ca",
})
_CANDIDATE = re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*(?=\s+|$)")
_OPENER = re.compile(r"[\"'\u201c\u2018(\[]*[A-Z0-9]")


def split_sentences(text: str) -> list[str]:
    """Split ``text`` into sentences.

    A sentence ends at ``.``, ``!`` or ``?`` (with any closing quotes or brackets) followed by whitespace and
    an upper-case letter, a digit or an opening quote, unless the period ends a known abbreviation, a single
    capital initial (``J. R. R. Tolkien``) or an ellipsis inside a sentence. Newlines separating paragraphs
    always end a sentence.

    >>> split_sentences('Dr. Kreet won in 1998. He said "It works!" Then 3.5 kg of it sold.')
    ['Dr. Kreet won in 1998.', 'He said "It works!"', 'Then 3.5 kg of it sold.']
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    sentences: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        start = 0
        for match in _CANDIDATE.finditer(paragraph):
            end = match.end()
            rest = paragraph[end:].lstrip()
            if rest and not _OPENER.match(rest):
                continue
            if match.group().startswith(".") and not match.group().startswith("...") and _abbreviated(
                    paragraph[start:match.start()]):
                continue
            sentence = " ".join(paragraph[start:end].split())
            if sentence:
                sentences.append(sentence)
            start = end
        tail = " ".join(paragraph[start:].split())
        if tail:
            sentences.append(tail)
    return sentences


def _abbreviated(before: str) -> bool:
    words = before.split()
    if not words:
        return False
    last = words[-1].lower().lstrip("(\"'")
    return last in ABBREVIATIONS or (len(last) == 1 and last.isalpha())


@dataclass(frozen=True)
class Triple:
    """A fact as (subject; predicate; object); the alternative sentence keeps ``subject`` and ``predicate``."""

    subject: str
    predicate: str
    object: str

    def __str__(self) -> str:
        return f"({self.subject}; {self.predicate}; {self.object})"


_TRIPLE = re.compile(r"\(\s*([^;()]+?)\s*;\s*([^;()]+?)\s*;\s*([^;()]*?)\s*\)")


def parse_triples(text: str) -> list[Triple]:
    """Every ``(subject; predicate; object)`` in an LLM's reply, in order, without duplicates.

    Empty subjects or predicates are skipped; an empty object is kept (a prefix to be filled).

    >>> parse_triples("1. (Velmora; was founded in; 1642)\\n2. (Velmora; was founded by; fishermen)")
    [Triple(subject='Velmora', predicate='was founded in', object='1642'), \
Triple(subject='Velmora', predicate='was founded by', object='fishermen')]
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    seen, out = set(), []
    for subject, predicate, obj in _TRIPLE.findall(text):
        triple = Triple(subject.strip(), predicate.strip(), obj.strip().rstrip("."))
        if triple.subject and triple.predicate and triple not in seen:
            seen.add(triple)
            out.append(triple)
    return out


# Verbs that open a predicate in encyclopaedic sentences; any other word ending in -ed after the subject too.
_VERBS = frozenset({
    "is", "was", "are", "were", "has", "had", "have", "holds", "held", "won", "wins", "became", "becomes", "led",
    "leads", "wrote", "writes", "lies", "lay", "stands", "stood", "flows", "spans", "seats", "opened", "consists",
    "contains", "takes", "took", "makes", "made", "began", "begins", "runs", "ran", "built", "lost", "spent",
    "received", "founded", "published", "designed", "rises", "produces", "serves", "hosts", "houses", "connects",
    "specialises", "specializes", "studies", "focuses", "sits", "comes", "came", "dates", "freezes", "sank",
})
_AUXILIARIES = frozenset({"is", "was", "are", "were", "has", "had", "have", "been", "be"})
_ADVERBS = frozenset({"not", "never", "also", "only", "still", "first", "once"})
_PARTICIPLES = frozenset({"built", "born", "known", "written", "given", "taken", "held", "made", "won", "led",
                          "found", "sold", "seen", "shown", "drawn", "run", "become", "kept", "spent", "set"})
_PREPOSITIONS = frozenset({"in", "on", "at", "by", "of", "to", "for", "from", "with", "into", "as", "about", "off",
                           "after"})


def _participle(word: str) -> bool:
    return word in _PARTICIPLES or word in _VERBS or (len(word) > 3 and word.endswith("ed") and word.isalpha())


def rule_based_triple(sentence: str) -> Triple | None:
    """A (subject; predicate; object) split of a simple declarative sentence, or None.

    The subject is everything before the first verb (from a list of common verbs, or a word ending in -ed
    after the first word); the predicate is the verb with the adverbs and participles of its verb group
    and one preposition; the object is the rest, without the final period.

    >>> rule_based_triple("The Tarnwick Bridge was built in 1910.")
    Triple(subject='The Tarnwick Bridge', predicate='was built in', object='1910')
    >>> rule_based_triple("Lanner has never been to space.")
    Triple(subject='Lanner', predicate='has never been to', object='space')
    """
    if not isinstance(sentence, str):
        raise TypeError(f"sentence must be a str, got {type(sentence).__name__}")
    words = sentence.strip().rstrip(".!?").split()
    lower = [w.lower().strip(",;:") for w in words]
    for i in range(1, len(words)):
        if not (lower[i] in _VERBS or (len(lower[i]) > 3 and lower[i].endswith("ed") and lower[i].isalpha())):
            continue
        j, auxiliary = i + 1, lower[i] in _AUXILIARIES
        while j < len(words) and (lower[j] in _ADVERBS or (auxiliary and lower[j] in _AUXILIARIES)
                                  or (auxiliary and _participle(lower[j]))):
            auxiliary = auxiliary and (lower[j] in _ADVERBS or lower[j] in _AUXILIARIES)
            j += 1
        if j < len(words) and lower[j] in _PREPOSITIONS:
            j += 1
        if j >= len(words):
            return None
        return Triple(" ".join(words[:i]).strip(","), " ".join(words[i:j]), " ".join(words[j:]))
    return None
