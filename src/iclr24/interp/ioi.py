"""Indirect object identification (Wang et al., 2023): prompts, counterfactuals and metrics.

"When Mary and John went to the store, John gave a drink to" -> " Mary". The indirect object
(IO) is the name that appears once; the subject (S) appears twice. Two settings:

- :func:`ioi_prompts` / :func:`ioi_batch`: English prompts for a real LM (names that are one
  token, with the leading space, so a clean prompt and its counterfactual align position by
  position). Counterfactual: the second subject becomes the IO name, so the answer flips.
- :func:`ioi_dataset` / :func:`train_ioi_model`: a 55-word vocabulary and a tiny transformer
  trained in-process, for tests and fast runs.

Metrics: :func:`logit_difference` (IO logit minus S logit at the last position) and accuracy.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from iclr24.core.checks import check_int
from iclr24.interp.hooks import HookedTinyTransformer

__all__ = [
    "IOIBatch",
    "IOIData",
    "IOIPrompt",
    "NAMES",
    "TEMPLATES",
    "TEXT_NAMES",
    "TEXT_TEMPLATES",
    "ioi_accuracy",
    "ioi_batch",
    "ioi_dataset",
    "ioi_prompts",
    "logit_difference",
    "prompt_lengths",
    "single_token_words",
    "train_ioi_model",
]

# --- English prompts for a real language model ----------------------------------------------------------------

#: Templates in the style of Wang et al.'s IOI dataset ({A} and {B} introduced, {S} repeated).
TEXT_TEMPLATES = [
    "When {A} and {B} went to the {PLACE}, {S} gave a {OBJECT} to",
    "Then, {A} and {B} went to the {PLACE}. {S} gave a {OBJECT} to",
    "After {A} and {B} went to the {PLACE}, {S} gave a {OBJECT} to",
    "While {A} and {B} were working at the {PLACE}, {S} gave a {OBJECT} to",
    "When {A} and {B} got a {OBJECT} at the {PLACE}, {S} decided to give it to",
    "Then, {A} and {B} had a lot of fun at the {PLACE}. {S} gave a {OBJECT} to",
    "Friends {A} and {B} found a {OBJECT} at the {PLACE}. {S} gave it to",
    "After the lunch, {A} and {B} went to the {PLACE}. {S} gave a {OBJECT} to",
]
TEXT_NAMES = ["Mary", "John", "Alice", "Bob", "Tom", "James", "Paul", "Mark", "Sam", "Dan", "Jack", "Sarah",
              "Michael", "David", "Daniel", "Laura", "Anna", "Lisa", "Kate", "Emma", "Lucy", "Rose", "Peter", "Kevin"]
PLACES = ["store", "garden", "restaurant", "school", "hospital", "office", "station", "park"]
OBJECTS = ["ring", "bone", "drink", "book", "computer", "necklace", "snack", "basketball"]


@dataclass(frozen=True)
class IOIPrompt:
    """One IOI prompt. ``io``/``s`` are names; the answer is ``" " + io``.

    ``counterfactual`` repeats the IO instead of S ("..., Mary gave a drink to"), so its answer is S.
    ``order`` is ``"ABB"`` when the IO comes first, ``"BAB"`` when the subject does.
    """

    text: str
    counterfactual: str
    io: str
    s: str
    template: int
    order: str
    place: str = ""
    object: str = ""

    def swap_positions(self) -> "IOIPrompt":
        """The same prompt with the first two names swapped (ABB <-> BAB): the same IO and S,
        the IO in the other position. Makelov et al. patch from one into the other."""
        a, b = (self.s, self.io) if self.order == "ABB" else (self.io, self.s)
        fill = {"A": a, "B": b, "PLACE": self.place, "OBJECT": self.object}
        template = TEXT_TEMPLATES[self.template]
        return IOIPrompt(template.format(S=self.s, **fill), template.format(S=self.io, **fill), self.io, self.s,
                         self.template, "BAB" if self.order == "ABB" else "ABB", self.place, self.object)


def single_token_words(words: Sequence[str], tokenizer) -> list[str]:
    """The ``words`` that ``tokenizer`` encodes as one token after a space (as they appear mid-sentence)."""
    return [w for w in words if len(tokenizer(" " + w, add_special_tokens=False)["input_ids"]) == 1]


def ioi_prompts(n: int, *, seed: int = 0, templates: Sequence[int] | None = None, names: Sequence[str] | None = None,
                tokenizer=None, fixed_length: bool = False) -> list[IOIPrompt]:
    """``n`` random IOI prompts from ``TEXT_TEMPLATES[templates]`` and ``names``.

    With a ``tokenizer``, only names that are a single token after a space are used (so a
    prompt and its counterfactual have the same length; too few left is an error), and with
    ``fixed_length`` also only single-token places and objects, so that all prompts of one
    template have the same length.
    """
    check_int("n", n, minimum=1)
    templates = list(range(len(TEXT_TEMPLATES))) if templates is None else list(templates)
    bad = [t for t in templates if not (isinstance(t, int) and 0 <= t < len(TEXT_TEMPLATES))]
    if bad or not templates:
        raise ValueError(f"templates must be indices in [0, {len(TEXT_TEMPLATES)}), got {templates}")
    names = list(TEXT_NAMES if names is None else names)
    places, objects = PLACES, OBJECTS
    if tokenizer is not None:
        names = single_token_words(names, tokenizer)
        if fixed_length:
            places, objects = single_token_words(PLACES, tokenizer), single_token_words(OBJECTS, tokenizer)
            if not places or not objects:
                raise ValueError("fixed_length needs single-token places and objects; this tokenizer has none")
    elif fixed_length:
        raise ValueError("fixed_length needs the tokenizer that decides what one token is")
    if len(names) < 2:
        raise ValueError(f"ioi_prompts needs at least 2 names (single tokens for this tokenizer), got {names}")
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        t = rng.choice(templates)
        io, s = rng.sample(names, 2)
        a, b, order = (io, s, "ABB") if rng.random() < 0.5 else (s, io, "BAB")
        fill = {"A": a, "B": b, "PLACE": rng.choice(places), "OBJECT": rng.choice(objects)}
        out.append(IOIPrompt(TEXT_TEMPLATES[t].format(S=s, **fill), TEXT_TEMPLATES[t].format(S=io, **fill), io, s, t,
                             order, fill["PLACE"], fill["OBJECT"]))
    return out


@dataclass
class IOIBatch:
    """IOI prompts as token ids for one model: right-padded, aligned with their counterfactuals."""

    tokens: Tensor  # (n, T)
    counterfactual: Tensor  # (n, T): equal to tokens except at the second subject
    lengths: Tensor  # (n,): the last real position is lengths - 1 (END)
    io: Tensor  # (n,): token id of " " + IO
    s: Tensor  # (n,): token id of " " + S

    @property
    def end(self) -> Tensor:
        return self.lengths - 1

    def __len__(self) -> int:
        return len(self.lengths)

    def subset(self, rows) -> "IOIBatch":
        return IOIBatch(self.tokens[rows], self.counterfactual[rows], self.lengths[rows], self.io[rows], self.s[rows])


def ioi_batch(lm, prompts: Sequence[IOIPrompt]) -> IOIBatch:
    """Tokenise ``prompts`` with ``lm.to_tokens`` (a :class:`~iclr24.interp.HookedLM`)."""
    tokens, lengths = lm.to_tokens([p.text for p in prompts])
    cf, cf_lengths = lm.to_tokens([p.counterfactual for p in prompts])
    if not torch.equal(lengths, cf_lengths):
        raise ValueError("a prompt and its counterfactual tokenise to different lengths; use single-token names "
                         "(ioi_prompts(..., tokenizer=lm.tokenizer))")
    ids = [lm.tokenizer(" " + p.io, add_special_tokens=False)["input_ids"] for p in prompts]
    s_ids = [lm.tokenizer(" " + p.s, add_special_tokens=False)["input_ids"] for p in prompts]
    if any(len(i) != 1 for i in ids + s_ids):
        raise ValueError("every name must be a single token after a space for this tokenizer")
    return IOIBatch(tokens, cf, lengths, torch.tensor([i[0] for i in ids]), torch.tensor([i[0] for i in s_ids]))


def logit_difference(logits: Tensor, io: Tensor, s: Tensor) -> Tensor:
    """``logit[IO] - logit[S]`` per prompt, from last-position logits ``(n, vocab)``."""
    rows = torch.arange(len(logits))
    return logits[rows, io] - logits[rows, s]


# --- the tiny word-level setting --------------------------------------------------------------------------------

NAMES = ["Mary", "John", "Alice", "Bob", "Tom", "Anna", "James", "Lisa", "Paul", "Kate", "Mark", "Emma", "Sam",
         "Lucy", "Dan", "Rose", "Jack", "Nina", "Carl", "Ella", "Ivan", "Zoe", "Hugo", "Iris"]
TEMPLATES = [
    "When {A} and {B} went to the store , {S} gave a drink to",
    "After {A} and {B} met at the park , {S} handed a book to",
    "Then {A} and {B} had a long talk , and {S} passed a note to",
    "While {A} and {B} were at school , {S} showed a photo to",
    "Once {A} and {B} sat in the house , {S} sent a letter to",  # held out
]


@dataclass
class IOIData:
    """Token ids of word-level prompts, counterfactuals and answers, with the variables scores use."""

    vocab: list[str]
    clean: Tensor  # (n, T)
    counterfactual: Tensor  # (n, T): the second subject is the other name
    answer: Tensor  # (n,): the indirect object of the clean prompt
    cf_answer: Tensor  # (n,)
    template: Tensor  # (n,)
    s2_position: Tensor  # (n,)

    def subset(self, rows: Tensor) -> "IOIData":
        """The prompts selected by ``rows`` (a bool mask or indices)."""
        return IOIData(self.vocab, self.clean[rows], self.counterfactual[rows], self.answer[rows], self.cf_answer[rows],
                       self.template[rows], self.s2_position[rows])


def ioi_dataset(templates: list[int] | None = None, names: list[str] = NAMES) -> IOIData:
    """Every (template, A, B, subject) combination of the word-level templates, with counterfactuals."""
    words = sorted({w for t in TEMPLATES for w in t.split() if not w.startswith("{")})
    vocab = ["<pad>", *names, *words]
    index = {w: i for i, w in enumerate(vocab)}
    rows = {k: [] for k in ("clean", "cf", "ans", "cf_ans", "tpl", "s2")}
    for t in templates if templates is not None else range(len(TEMPLATES)):
        for a, b in itertools.permutations(names, 2):
            for subject, io in ((a, b), (b, a)):
                rows["clean"].append([index[w] for w in TEMPLATES[t].format(A=a, B=b, S=subject).split()])
                rows["cf"].append([index[w] for w in TEMPLATES[t].format(A=a, B=b, S=io).split()])
                rows["ans"].append(index[io])
                rows["cf_ans"].append(index[subject])
                rows["tpl"].append(t)
                rows["s2"].append(TEMPLATES[t].split().index("{S}"))
    width = max(len(r) for r in rows["clean"])
    pad = lambda rs: torch.tensor([r + [0] * (width - len(r)) for r in rs])  # noqa: E731
    return IOIData(vocab, pad(rows["clean"]), pad(rows["cf"]), torch.tensor(rows["ans"]), torch.tensor(rows["cf_ans"]),
                   torch.tensor(rows["tpl"]), torch.tensor(rows["s2"]))


def prompt_lengths(tokens: Tensor) -> Tensor:
    """Lengths of word-level prompts padded with id 0."""
    return (tokens != 0).sum(1)


def train_ioi_model(data: IOIData, *, steps: int = 600, batch_size: int = 128, lr: float = 1e-3, seed: int = 0,
                    **model_kwargs) -> HookedTinyTransformer:
    """A :class:`HookedTinyTransformer` trained on the last-token IO prediction of ``data`` (AdamW)."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = HookedTinyTransformer(len(data.vocab), data.clean.shape[1], **model_kwargs)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    end = prompt_lengths(data.clean) - 1
    for _ in range(steps):
        idx = torch.randint(len(data.answer), (batch_size,), generator=gen)
        loss = F.cross_entropy(model(data.clean[idx], end[idx]), data.answer[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def ioi_accuracy(model, data: IOIData) -> float:
    """Fraction of word-level prompts whose top prediction is the IO."""
    with torch.no_grad():
        pred = model(data.clean, prompt_lengths(data.clean) - 1).argmax(-1)
    return float((pred == data.answer).float().mean())
