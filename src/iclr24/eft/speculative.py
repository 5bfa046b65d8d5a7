"""Speculative sampling (Leviathan et al., 2023; Chen et al., 2023), which EFT uses to speed up up-scaling.

The small fine-tuned model drafts ``k`` tokens; the target (the EFT up-scaled model) scores all of
them in one pass per component; each draft token t is kept with probability ``min(1, p(t) / q(t))``
and the first rejected one is replaced by a draw from ``max(0, p - q)`` renormalised. When all
``k`` are kept one more token is drawn from ``p``. The samples follow the target's distribution
exactly; the large model runs once per block instead of once per token (EFT Sec. 4.3).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from iclr24.core.checks import check_int
from iclr24.llm.base import apply_stop

__all__ = ["SpeculativeResult", "speculative_generate"]


@dataclass(frozen=True)
class SpeculativeResult:
    """The sampled ``token_ids`` and ``text``, and how the drafts fared."""

    token_ids: list[int]
    text: str
    finish_reason: str
    proposed: int  # draft tokens proposed
    accepted: int  # draft tokens the target kept
    target_calls: int  # scoring passes of the target
    draft_calls: int  # next-token calls of the draft
    duration_s: float

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0


def _probs(logprobs: torch.Tensor, temperature: float) -> torch.Tensor:
    """The sampling distribution: softmax at ``temperature``, or the one-hot argmax at 0."""
    logprobs = torch.as_tensor(logprobs).double()
    if logprobs.isnan().any():
        raise ValueError("a next-token distribution holds NaN")
    if temperature == 0:
        return torch.nn.functional.one_hot(logprobs.argmax(-1), logprobs.shape[-1]).double()
    return torch.softmax(logprobs / temperature, -1)


def _target_rows(target, ids: list[int], drafted: list[int]) -> torch.Tensor:
    """``(len(drafted) + 1, V)``: the target's next-token log-probabilities after ids + drafted[:i]."""
    if callable(getattr(target, "sequence_logprobs", None)):
        return torch.as_tensor(target.sequence_logprobs(ids + drafted, len(ids) - 1))
    return torch.stack([torch.as_tensor(target.next_token_logprobs(ids + drafted[:i]))
                        for i in range(len(drafted) + 1)])


def speculative_generate(target, draft, prompt: str | Sequence[int], *, k: int = 4, max_tokens: int = 64,
                         temperature: float = 1.0, seed: int | None = None, stop: Sequence[str] = (),
                         eos_id: int | None = None) -> SpeculativeResult:
    """Sample from ``target`` with ``draft`` proposing ``k`` tokens at a time.

    Parameters
    ----------
    target, draft : LanguageModel
        Both with ``next_token_logprobs`` over one vocabulary; a target with ``sequence_logprobs``
        (the transformers, torch and EFT models) scores a whole draft in one pass.
    prompt : str or list of int
        Text (tokenised by the target) or token ids.
    k : int
        Draft tokens per block.
    temperature : float
        Applied to both distributions; 0 gives the target's greedy output.
    eos_id : int, optional
        The end token, which stops sampling; None samples ``max_tokens`` tokens whatever they are.

    Returns
    -------
    SpeculativeResult
    """
    check_int("k", k, minimum=1)
    check_int("max_tokens", max_tokens, minimum=1)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature >= 0:
        raise ValueError(f"temperature must be a number >= 0, got {temperature!r}")
    ids = target.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
    if not ids:
        raise ValueError("the prompt must hold at least one token")
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    start = time.perf_counter()
    new: list[int] = []
    proposed = accepted = target_calls = draft_calls = 0
    finish, text = "length", ""

    def uniform() -> float:
        return float(torch.rand((), generator=generator, dtype=torch.float64))

    def draw(probs: torch.Tensor) -> int:
        return int(torch.multinomial(probs, 1, generator=generator))

    while len(new) < max_tokens and finish == "length":
        drafted, draft_probs = [], []
        for _ in range(min(k, max_tokens - len(new))):
            q = _probs(draft.next_token_logprobs(ids + new + drafted), temperature)
            draft_calls += 1
            drafted.append(draw(q))
            draft_probs.append(q)
            if drafted[-1] == eos_id:
                break
        p_rows = _probs(_target_rows(target, ids + new, drafted), temperature)
        target_calls += 1
        proposed += len(drafted)
        block = []
        for i, token in enumerate(drafted):
            p, q = p_rows[i], draft_probs[i]
            if uniform() < min(1.0, float(p[token] / q[token])):
                block.append(token)
                accepted += 1
                continue
            residual = (p - q).clamp_min(0)
            block.append(draw(residual / residual.sum()))
            break
        else:
            if len(block) < max_tokens - len(new):
                block.append(draw(p_rows[len(drafted)]))
        for token in block:
            if token == eos_id:
                finish = "stop"
                break
            new.append(token)
            text, stopped = apply_stop(target.detokenize(new), stop)
            if stopped:
                finish = "stop"
                break
            if len(new) >= max_tokens:
                break
    return SpeculativeResult(new, text, finish, proposed, accepted, target_calls, draft_calls,
                             time.perf_counter() - start)
