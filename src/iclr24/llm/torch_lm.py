"""Any torch causal LM with a word-level vocabulary, as a :class:`~iclr24.llm.LanguageModel`.

For models a reproduction trains itself (EFT's synthetic trio): ``module(ids (1, T)) -> logits
(1, T, vocab)`` and a list of words. Text is split on whitespace, one word a token.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch
from torch import nn

from iclr24.llm.base import Capabilities, Completion, Prompt, check_generate_args, decode_tokens, with_system

__all__ = ["TorchLM", "WordVocab"]


class WordVocab:
    """A fixed list of words; ``encode`` splits text on whitespace and refuses words it does not know.

    >>> WordVocab(["<eos>", "a", "b"]).encode("b a")
    [2, 1]
    """

    def __init__(self, words: Sequence[str], eos: str = "<eos>") -> None:
        words = list(words)
        if len(set(words)) != len(words):
            raise ValueError("words must be distinct")
        if eos not in words:
            raise ValueError(f"the vocabulary must contain the end-of-sequence word {eos!r}")
        self.words, self.index, self.eos_id = words, {w: i for i, w in enumerate(words)}, words.index(eos)

    def encode(self, text: str) -> list[int]:
        try:
            return [self.index[w] for w in text.split()]
        except KeyError as err:
            raise ValueError(f"the word {err.args[0]!r} is not in the vocabulary ({len(self.words)} words)") from None

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(self.words[i] for i in ids)

    def __len__(self) -> int:
        return len(self.words)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WordVocab) and self.words == other.words

    __hash__ = None  # type: ignore[assignment]


class TorchLM:
    """A :class:`~iclr24.llm.LanguageModel` over ``module`` (``ids (1, T) -> logits (1, T, V)``) and ``vocab``.

    Exposes ``next_token_logprobs`` (the full vocabulary) and ``sequence_logprobs`` (every position's
    next-token distribution from one forward pass, which speculative decoding scores drafts with).
    """

    def __init__(self, module: nn.Module, vocab: WordVocab, *, name: str = "torch-lm") -> None:
        self.module, self.vocab, self.name = module.eval(), vocab, name
        self.capabilities = Capabilities(full_logits=True, top_logprobs_k=len(vocab), chat_template=False,
                                         grammar=False)

    @torch.no_grad()
    def sequence_logprobs(self, token_ids: Sequence[int], start: int = 0) -> torch.Tensor:
        """``(T - start, V)``: row i is log p(next token | token_ids[:start + i + 1])."""
        if not len(token_ids):
            raise ValueError("token_ids must hold at least one token")
        if not 0 <= start < len(token_ids):
            raise ValueError(f"start must lie in [0, {len(token_ids)}), got {start}")
        logits = self.module(torch.tensor([list(token_ids)]))[0, start:]
        return torch.log_softmax(logits.double(), -1)

    def next_token_logprobs(self, token_ids: Sequence[int]) -> torch.Tensor:
        """log p(next token | token_ids) over the vocabulary, ``(V,)``."""
        return self.sequence_logprobs(token_ids)[-1]

    def generate(self, prompt: Prompt, *, max_tokens: int = 256, stop: Sequence[str] = (), temperature: float = 0.0,
                 top_p: float = 1.0, seed: int | None = None, n: int = 1, system: str | None = None,
                 logprobs: bool = False) -> list[Completion]:
        check_generate_args(max_tokens, temperature, n, top_p)
        prompt = with_system(prompt, system)
        if not isinstance(prompt, str):
            raise ValueError(f"{self.name!r} has no chat template: pass a text prompt")
        ids = self.tokenize(prompt)
        out = []
        for i in range(n):
            start = time.perf_counter()
            text, finish, new, scores = decode_tokens(
                self.next_token_logprobs, ids, max_tokens=max_tokens, detokenize=self.detokenize, stop=stop,
                temperature=temperature, top_p=top_p, seed=None if seed is None else seed + i,
                eos_id=self.vocab.eos_id)
            scored = (tuple(self.vocab.words[t] for t in new), tuple(scores)) if logprobs else (None, None)
            out.append(Completion(text, finish, len(ids), len(new), time.perf_counter() - start, *scored))
        return out

    def tokenize(self, text: str) -> list[int]:
        return self.vocab.encode(text)

    def detokenize(self, token_ids: Sequence[int]) -> str:
        return self.vocab.decode(token_ids)

    def __repr__(self) -> str:
        return f"TorchLM({self.name!r}, vocab={len(self.vocab)})"
