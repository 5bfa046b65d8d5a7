"""A small causal transformer and synthetic languages that need long-range attention.

Used by the reproduction to measure what HyperAttention costs in a model (the paper
replaces the attention of ChatGLM2's final layers and reports perplexity).

:class:`RepeatedSegments` (the one the reproduction trains on): random segments of
``segment`` tokens, each followed by an exact copy of itself. The first copy is noise;
every token of the second can be recalled from ``segment`` positions back (an induction
pattern), so a model that predicts well must attend to specific far-away positions: the
large entries HyperAttention has to find. A 2-layer model learns it in a few hundred
steps on a CPU. :func:`bag_of_tokens_perplexity` is the floor a model without attention
patterns reaches by counting the tokens seen so far; a model that beats it by a wide margin
uses its attention.

:class:`LexiconLanguage`: every sequence draws its own lexicon of ``n_words`` random
words, each ``word_len`` tokens long, and is a stream of those words drawn from a Zipf law.
It also rewards induction, but a tiny model trained for minutes on a CPU stays behind the
bag-of-tokens floor on it (64.9 vs 59.4 perplexity at context 512), so it is not used.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from iclr24.core.tiny_lm import TinyLM, TinyLMConfig

__all__ = ["LexiconLanguage", "RepeatedSegments", "TinyLM", "TinyLMConfig", "bag_of_tokens_perplexity"]


@dataclass(frozen=True)
class LexiconLanguage:
    """Generator of sequences with a per-sequence lexicon (see the module docstring)."""

    vocab_size: int = 64
    n_words: int = 32
    word_len: int = 4
    zipf_exponent: float = 1.0

    def sample(self, batch: int, length: int, generator: torch.Generator) -> Tensor:
        """``(batch, length)`` token ids."""
        n_draws = length // self.word_len + 1
        lexicon = torch.randint(self.vocab_size, (batch, self.n_words, self.word_len), generator=generator)
        ranks = torch.arange(1, self.n_words + 1, dtype=torch.float64)
        probs = (ranks**-self.zipf_exponent).expand(batch, -1)
        words = torch.multinomial(probs, n_draws, replacement=True, generator=generator)  # (batch, n_draws)
        tokens = torch.gather(lexicon, 1, words.unsqueeze(-1).expand(-1, -1, self.word_len))
        return tokens.reshape(batch, -1)[:, :length]


@dataclass(frozen=True)
class RepeatedSegments:
    """Random segments of ``segment`` tokens, each immediately repeated (see the module docstring)."""

    vocab_size: int = 128
    segment: int = 64

    def sample(self, batch: int, length: int, generator: torch.Generator) -> Tensor:
        """``(batch, length)`` token ids: ``a a b b ...`` for random segments ``a, b, ...``."""
        pairs = length // (2 * self.segment) + 1
        fresh = torch.randint(self.vocab_size, (batch, pairs, 1, self.segment), generator=generator)
        return fresh.expand(-1, -1, 2, -1).reshape(batch, -1)[:, :length]


def bag_of_tokens_perplexity(tokens: Tensor, vocab_size: int, alpha: float = 1.0) -> float:
    """Perplexity of predicting each token (after the first) by the counts of the tokens before it,
    add-``alpha`` smoothed: ``p(x_t) = (count_{<t}(x_t) + alpha) / (t + alpha V)``.

    The same targets as :meth:`TinyLM.loss` (positions 1..n-1 of each row of ``tokens``).
    """
    counts = torch.nn.functional.one_hot(tokens[:, :-1], vocab_size).cumsum(1).double()  # (B, n-1, V)
    seen = torch.arange(1, tokens.shape[1], dtype=torch.float64)  # tokens before each target
    hits = counts.gather(-1, tokens[:, 1:, None]).squeeze(-1)
    nll = -torch.log((hits + alpha) / (seen + alpha * vocab_size))
    return float(torch.exp(nll.mean()))
