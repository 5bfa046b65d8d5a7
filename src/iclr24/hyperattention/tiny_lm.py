"""A small causal transformer and a synthetic language that needs long-range attention.

Used by the reproduction to measure what HyperAttention costs in a model (the paper
replaces the attention of ChatGLM2's final layers and reports perplexity).

The language: every sequence draws its own lexicon of ``n_words`` random words, each
``word_len`` tokens long, and is a stream of those words drawn from a Zipf law. Only a
word's first token is uncertain; the rest can be recalled from an earlier occurrence
of the same word in the sequence (an induction pattern), so a model that predicts
well must attend to specific far-away positions: the large entries HyperAttention has
to find.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from iclr24.core.tiny_lm import TinyLM, TinyLMConfig

__all__ = ["LexiconLanguage", "TinyLM", "TinyLMConfig"]


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
