"""The labelled sentence pairs, a SelfCheckGPT-style baseline detector, and precision / recall / F1.

``load_pairs()``: 110 pairs written for this project: 55 fictional contexts, each with a sentence, a
contradictory alternative and a consistent one (a paraphrase, or the same fact in other words). Fictional
entities keep a model's own knowledge out of the judgement, as the paper's own test set does by pairing
sentences the model itself generated. ``load_pairs(path=...)`` reads that test set (the authors' human
annotations) from a local copy of their repository.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from iclr24.core import check_int, check_number
from iclr24.llm.base import require_logprobs
from iclr24.selfcontradiction.chatprotect import (
    Detection,
    DetectorMode,
    as_chat,
    check_choice,
    check_statements,
    parse_yes_no,
    yes_probability,
)

__all__ = ["LabelledPair", "SelfCheckDetector", "load_pairs", "precision_recall_f1", "score_pairs"]


@dataclass(frozen=True)
class LabelledPair:
    id: str
    context: str
    a: str
    b: str
    contradictory: bool


AUTHORS_GENERATORS = ("chatgpt", "gpt4", "llama-2-70b-chat", "vicuna-13b-1.1")
_FETCH = ("fetch the authors' repository (git clone https://github.com/eth-sri/ChatProtect, or the fetch tool's "
          "github:eth-sri/ChatProtect) and pass its root")


def load_pairs(path=None, *, generator: str = "chatgpt", triples: str | None = "compactie") -> list[LabelledPair]:
    """Labelled pairs: by default the 110 bundled ones (``data/pairs.jsonl``); with ``path``, the authors'
    human-annotated test set from a local copy of eth-sri/ChatProtect (nothing is downloaded).

    ``path`` is the repository's root (or its ``test/test/sentences`` folder). The pairs are the JSON files
    ``<generator>/<prompt>/m3/*.txt`` (``ExtSentence`` in their ``chatprotect/util.py``): ``orig`` and ``alt``
    are the pair, ``target`` (the prompt) and ``prefix`` the context, and ``tag`` the annotation (``strong``
    or ``weak``: contradictory; ``ok``: not); pairs from revised answers (``m2_...``) and cost files are
    skipped, as in their measurement. ``triples="compactie"`` keeps the pairs
    triggered by CompactIE triples, as their Table 3 measurement does (None keeps every pair).
    """
    if path is None:
        text = resources.files("iclr24.selfcontradiction").joinpath("data/pairs.jsonl").read_text(encoding="utf-8")
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        return [LabelledPair(r["id"], r["context"], r["a"], r["b"], r["label"] == "contradictory") for r in rows]
    if not isinstance(generator, str) or not generator:
        raise ValueError(f"generator must be a non-empty str such as {AUTHORS_GENERATORS[0]!r}, got {generator!r}")
    root = Path(path).expanduser()
    sentences = next((d for d in (root / "test" / "test" / "sentences", root) if (d / generator).is_dir()), None)
    if sentences is None:
        found = sorted(d.name for d in (root / "test" / "test" / "sentences").glob("*") if d.is_dir())
        where = (f"it has sentences for {found}, not generator={generator!r}" if found else
                 f"expected {root / 'test/test/sentences' / generator}/<prompt>/m3/*.txt")
        raise FileNotFoundError(f"no ChatProtect test set at path={str(path)!r}: {where}; {_FETCH}")
    pairs = []
    # pairs from the original answers; ``m2_...`` files come from revised ones, ``_cost...`` files are API costs
    for file in sorted((sentences / generator).glob("*/m3/[0-9]*.txt")):
        try:
            row = json.loads(file.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(f"{file} is not an annotated pair (JSON, as in their test set): {error}") from None
        if "tag" not in row:                       # a cost record
            continue
        missing = {"target", "orig", "alt", "prefix", "triple"} - row.keys()
        if missing or row["tag"] not in ("ok", "weak", "strong"):
            raise ValueError(f"{file} is not an annotated pair: missing {sorted(missing)} or tag {row['tag']!r} "
                             "is not 'ok', 'weak' or 'strong'")
        triple = row["triple"]           # [(s, p, o), origin] or [(s, p, o), origin, cost]; older files: (s, p, o)
        origin = triple[1] if isinstance(triple, list) and len(triple) in (2, 3) and isinstance(triple[0], list) \
            else None
        if triples is not None and origin != triples:
            continue
        if not row["orig"].strip() or not row["alt"].strip():
            continue                               # an empty alternative: nothing to judge
        pairs.append(LabelledPair(str(file.relative_to(sentences).with_suffix("")),
                                  " ".join(filter(None, (row["target"].strip(), row["prefix"].strip()))),
                                  row["orig"].strip(), row["alt"].strip(), row["tag"] in ("weak", "strong")))
    if not pairs:
        raise ValueError(f"no annotated pairs with triples={triples!r} under {sentences / generator}/*/m3/")
    return pairs


SELFCHECK_PROMPT = """Context: {sample}
Sentence: {sentence}
Is the sentence supported by the context above? Answer Yes or No.
Answer:"""


class SelfCheckDetector:
    """SelfCheckGPT's idea as a pair detector: the alternative is a sample, and the score is how little it
    supports the sentence.

    With an ``analyzer`` it is SelfCheckGPT's prompt variant: "is the sentence supported by the sample?",
    ``n_votes`` sampled answers (score = fraction of No) or, with ``mode="logprob"``, 1 - P(Yes). Without one
    it is a model-free reference: 1 - the word-overlap F1 of the two sentences (not SelfCheckGPT's unigram
    variant, which scores with a unigram language model).
    Same ``detect(context, a, b)`` interface as ``ContradictionDetector``.
    """

    def __init__(self, analyzer=None, *, n_votes: int = 10, mode: DetectorMode = "votes", seed: int = 0) -> None:
        check_choice("mode", mode, DetectorMode)
        if mode == "logprob" and analyzer is not None:
            require_logprobs(analyzer, "SelfCheckDetector(mode='logprob')")
        self.analyzer, self.mode, self.seed = analyzer, mode, seed
        self.n_votes = check_int("n_votes", n_votes, minimum=1)
        self.calls = 0

    def detect(self, context: str, a: str, b: str) -> Detection:
        check_statements(context, a, b)
        if self.analyzer is None:
            return Detection(1.0 - _overlap_f1(a, b), method="word-overlap")
        prompt = SELFCHECK_PROMPT.format(sample=b.strip(), sentence=a.strip())
        self.calls += 1
        if self.mode == "logprob":
            return Detection(1.0 - yes_probability(self.analyzer, prompt), method="selfcheck-logprob")
        replies = self.analyzer.generate(as_chat(prompt), max_tokens=5, temperature=1.0, n=self.n_votes,
                                         seed=self.seed + self.calls)
        votes = tuple(parse_yes_no(r.text) for r in replies)
        # a vote of No (not supported) is a vote for inconsistency; unparseable votes count as supported
        return Detection(sum(v is False for v in votes) / len(votes), "", votes, "selfcheck-votes")


def _overlap_f1(a: str, b: str) -> float:
    wa, wb = (set(w.strip(".,;:!?\"'").lower() for w in s.split()) - {""} for s in (a, b))
    if wa == wb:
        return 1.0                                   # identical words (punctuation-only statements too)
    common = len(wa & wb)
    if not common:
        return 0.0
    precision, recall = common / len(wb), common / len(wa)
    return 2 * precision * recall / (precision + recall)


def score_pairs(detector, pairs: Sequence[LabelledPair], progress=None) -> list[float]:
    """``detector.detect(context, a, b).score`` for every pair (``progress``: a callback after each); through
    ``detector.detect_many`` where it has one (batched decoding)."""
    if hasattr(detector, "detect_many"):
        return [d.score for d in detector.detect_many([(p.context, p.a, p.b) for p in pairs], progress=progress)]
    scores = []
    for pair in pairs:
        scores.append(detector.detect(pair.context, pair.a, pair.b).score)
        if progress is not None:
            progress()
    return scores


def precision_recall_f1(scores: Sequence[float], labels: Sequence[bool], threshold: float) -> tuple[float, ...]:
    """Precision, recall and F1 of flagging ``score > threshold`` as contradictory (0 where undefined)."""
    if len(scores) != len(labels):
        raise ValueError(f"scores and labels must have the same length, got {len(scores)} and {len(labels)}")
    threshold = check_number("threshold", threshold)
    if not all(isinstance(y, bool) for y in labels):
        raise TypeError("labels must be bools (True: contradictory)")
    if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in scores):
        raise ValueError("scores must be finite numbers")
    flagged = [s > threshold for s in scores]
    tp = sum(f and y for f, y in zip(flagged, labels))
    fp = sum(f and not y for f, y in zip(flagged, labels))
    fn = sum(not f and y for f, y in zip(flagged, labels))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1
