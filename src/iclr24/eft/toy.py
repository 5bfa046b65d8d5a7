"""A synthetic world in which pre-training teaches facts and fine-tuning teaches a format (the paper's Fig. 2).

No two sizes of one model family with one tokenizer ship offline, so the reproduction trains its
own: fictional people each live in one of a few cities. Pre-training text mentions everyone, states
the facts in sentences ("aldo lives in kelmar .") and answers the question in a whole sentence
("... answer : kelmar is where aldo lives ."); the large base reads every person's facts, the
small base only a few people's. Fine-tuning teaches the small base to answer with the city alone:

    question : where does aldo live ? answer : kelmar <eos>

On people only the large base read about, the large base knows the city but answers in the wrong
format (a sentence goes on after the city), and the small fine-tuned model answers in the format
but can only guess the city. EFT up-scaling should get both right.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass
from functools import cached_property

import torch
import torch.nn.functional as F

from iclr24.core.tiny_lm import TinyLM, TinyLMConfig
from iclr24.llm.torch_lm import TorchLM, WordVocab

__all__ = ["ToyWorld", "deepened", "train_lm"]

_CONSONANTS, _VOWELS = "bdfgklmnprstvz", "aeiou"
FACT_TEMPLATES = ("{name} lives in {city} .", "the home of {name} is {city} .",
                  "{name} moved to {city} long ago .")
QUESTION = "question : where does {name} live ? answer :"
#: How pre-training text answers the question: right city, wrong format for the task (a whole sentence).
VERBOSE_ANSWER = "{city} is where {name} lives ."
MENTION = "{name} is a person ."  # every model reads every name, not every fact


@dataclass(frozen=True)
class ToyWorld:
    """People, their cities, and the corpora built from them; the same seed gives the same world."""

    n_people: int = 200
    n_cities: int = 20
    n_known_small: int = 40  # people the small models read about (and are fine-tuned on)
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.n_known_small < self.n_people or self.n_cities < 2:
            raise ValueError(f"need 0 < n_known_small < n_people and n_cities >= 2, got {self.n_known_small}, "
                             f"{self.n_people}, {self.n_cities}")

    @cached_property
    def _names(self) -> tuple[list[str], list[str]]:
        rng = random.Random(self.seed)
        words: set[str] = set()
        while len(words) < self.n_people + self.n_cities:
            words.add("".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(rng.choice((2, 3)))))
        ordered = sorted(words)
        rng.shuffle(ordered)
        return ordered[:self.n_people], ordered[self.n_people:]

    @property
    def people(self) -> list[str]:
        return self._names[0]

    @property
    def cities(self) -> list[str]:
        return self._names[1]

    @cached_property
    def home(self) -> dict[str, str]:
        rng = random.Random(self.seed + 1)
        return {person: rng.choice(self.cities) for person in self.people}

    @property
    def known_small(self) -> list[str]:
        return self.people[:self.n_known_small]

    @property
    def held_out(self) -> list[str]:
        """People only the large base read about: where up-scaling has to combine the two."""
        return self.people[self.n_known_small:]

    @cached_property
    def vocab(self) -> WordVocab:
        template_words = {w for t in (*FACT_TEMPLATES, QUESTION, VERBOSE_ANSWER, MENTION) for w in t.split()
                          if "{" not in w}
        return WordVocab(["<eos>", *sorted(template_words), *self.people, *self.cities])

    def pretraining(self, people: list[str]) -> list[str]:
        """Pre-training text: a mention of everyone, and for ``people`` every fact sentence and the question
        answered in a whole sentence (the base models' format)."""
        mentions = [MENTION.format(name=p) for p in self.people]
        facts = [t.format(name=p, city=self.home[p]) for p in people for t in FACT_TEMPLATES]
        verbose = [f"{QUESTION.format(name=p)} {VERBOSE_ANSWER.format(name=p, city=self.home[p])}" for p in people]
        return mentions + facts + verbose

    def fine_tuning(self, people: list[str]) -> list[str]:
        """Fine-tuning examples: the question answered with the city alone (the format the task wants)."""
        return [f"{QUESTION.format(name=p)} {self.home[p]}" for p in people]

    def question(self, person: str) -> str:
        return QUESTION.format(name=person)


def train_lm(texts: list[str], vocab: WordVocab, config: TinyLMConfig, *, steps: int, seed: int,
             lr: float = 3e-3, batch_size: int = 64, init: TinyLM | None = None, progress=None) -> TinyLM:
    """Train (or, from ``init``, fine-tune) a :class:`~iclr24.core.tiny_lm.TinyLM` on ``texts``, each one
    sequence ending in ``<eos>``; the loss covers every real token (padding is masked out)."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    torch.manual_seed(seed)
    model = TinyLM(config) if init is None else _copy(init)
    rows = [vocab.encode(t) + [vocab.eos_id] for t in texts]
    width = max(len(r) for r in rows)
    data = torch.full((len(rows), width), vocab.eos_id)
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, r in enumerate(rows):
        data[i, :len(r)] = torch.tensor(r)
        mask[i, 1:len(r)] = True  # targets: every token after the first
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    warmup = max(1, steps // 10)  # linear warm-up, then cosine decay to zero
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * s / steps)))
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        batch = torch.randint(len(rows), (min(batch_size, len(rows)),), generator=generator)
        x, m = data[batch], mask[batch]
        logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="none")
        loss = (loss * m[:, 1:].reshape(-1)).sum() / m[:, 1:].sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        if progress is not None:
            progress()
    return model.eval()


def deepened(model: TinyLM, n_layers: int, *, seed: int = 0) -> TinyLM:
    """``model`` with identity blocks appended up to ``n_layers``: the same function, the cost of a deeper model.

    Each added block's attention and MLP output projections are zero (weights and biases), so it adds exactly 0 to
    the residual stream and the logits are bit-for-bit ``model``'s; its other weights are seeded random, and a
    forward pass still computes every layer norm, attention and MLP. This stands in for a larger model where
    training one is out of budget and only its cost matters (EFT's speed claim: a 70B target against a 7B draft).
    """
    if isinstance(n_layers, bool) or not isinstance(n_layers, int) or n_layers < model.cfg.n_layers:
        raise ValueError(f"n_layers must be an int >= the model's {model.cfg.n_layers} layers, got {n_layers!r}")
    with torch.random.fork_rng():  # seeded added blocks, and the caller's random state left as it was
        torch.manual_seed(seed)
        deep = TinyLM(dataclasses.replace(model.cfg, n_layers=n_layers))
    missing, unexpected = deep.load_state_dict(model.state_dict(), strict=False)
    assert not unexpected and all(k.startswith("blocks.") for k in missing), (missing, unexpected)
    with torch.no_grad():
        for block in deep.blocks[model.cfg.n_layers:]:
            for layer in (block.attn.proj, block.mlp[2]):
                layer.weight.zero_()
                layer.bias.zero_()
    return deep.eval()


def _copy(model: TinyLM) -> TinyLM:
    clone = TinyLM(model.cfg)
    clone.load_state_dict(model.state_dict())
    return clone


def as_language_model(model: TinyLM, world: ToyWorld, name: str) -> TorchLM:
    return TorchLM(model, world.vocab, name=name)
