"""A small causal linear-transformer language model with or without AID, and a synthetic recall corpus.

The paper's language-model check (WikiText-103, a 16-layer linear transformer) in miniature: the same
:class:`LinearTransformerLM` with ``decomposition="mlp"`` (the plain layer) and ``"aid"``, trained on
multi-query associative recall sequences, compared by perplexity on held-out sequences.

Corpus (:func:`recall_corpus`): keys and values are disjoint token sets; a sequence lists P pairs
``k_1 v_1 ... k_P v_P`` (distinct keys, random values), then Q queries ``k v`` of listed keys. Every token is
a training target; the perplexity that matters is on the queried values, the only tokens the context
determines (:func:`recall_perplexity`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from iclr24.aid.tpr import LinearTransformerLayer
from iclr24.core.checks import check_int, check_number, check_tensor
from iclr24.core.progress import progress as progress_bar

__all__ = ["LinearTransformerLM", "RecallBatch", "recall_corpus", "recall_perplexity", "train_recall_lm"]


@dataclass(frozen=True)
class RecallBatch:
    """``tokens`` (B, T) and ``recall_mask`` (B, T - 1): which next-token targets are queried values."""

    tokens: torch.Tensor
    recall_mask: torch.Tensor


def recall_corpus(batch_size: int, n_keys: int = 32, n_values: int = 32, n_pairs: int = 8, n_queries: int = 8,
                  generator: torch.Generator | None = None) -> RecallBatch:
    """Sequences of ``n_pairs`` key-value pairs then ``n_queries`` queried pairs; vocabulary keys then values."""
    check_int("batch_size", batch_size, minimum=1)
    check_int("n_keys", n_keys, minimum=1)
    check_int("n_values", n_values, minimum=1)
    check_int("n_pairs", n_pairs, minimum=1)
    check_int("n_queries", n_queries, minimum=1)
    if n_pairs > n_keys:
        raise ValueError(f"n_pairs must be <= n_keys ({n_keys}) so that keys are distinct, got {n_pairs}")
    B, P, Q = batch_size, n_pairs, n_queries
    keys = torch.rand(B, n_keys, generator=generator).argsort(1)[:, :P]
    values = n_keys + torch.randint(n_values, (B, P), generator=generator)
    asked = torch.randint(P, (B, Q), generator=generator)
    pairs = torch.stack([keys, values], dim=2).flatten(1)  # (B, 2P)
    queries = torch.stack([keys.gather(1, asked), values.gather(1, asked)], dim=2).flatten(1)  # (B, 2Q)
    tokens = torch.cat([pairs, queries], dim=1)
    mask = torch.zeros(B, tokens.shape[1] - 1, dtype=torch.bool)
    mask[:, 2 * P::2] = True  # target at t + 1 is a queried value when t is a query key
    return RecallBatch(tokens, mask)


class LinearTransformerLM(nn.Module):
    """Token and learned position embeddings, ``n_layers`` x (linear-attention layer, feed-forward), a head.

    Shapes: ``tokens`` (batch, time) -> logits (batch, time, vocab_size).
    """

    def __init__(self, vocab_size: int, max_len: int, *, d_model: int = 64, n_layers: int = 2, n_heads: int = 4,
                 d_head: int = 16, decomposition: str = "aid", iterations: int = 2, dropout: float = 0.0) -> None:
        super().__init__()
        self.vocab_size = check_int("vocab_size", vocab_size, minimum=2)
        self.max_len = check_int("max_len", max_len, minimum=1)
        self.token = nn.Embedding(vocab_size, d_model)
        self.position = nn.Embedding(max_len, d_model)
        self.attention = nn.ModuleList(
            LinearTransformerLayer(d_model, n_heads, d_head, decomposition=decomposition, iterations=iterations,
                                   dropout=dropout) for _ in range(check_int("n_layers", n_layers, minimum=1)))
        self.feed_forward = nn.ModuleList(
            nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))
            for _ in range(n_layers))
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(n_layers))
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        tokens = check_tensor("tokens", tokens, ndim=2, dtypes=(torch.long,), shape_doc="(batch, time)")
        T = tokens.shape[1]
        if T > self.max_len:
            raise ValueError(f"tokens has {T} positions, more than max_len = {self.max_len}")
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= self.vocab_size):
            raise ValueError(f"tokens must be ids in [0, {self.vocab_size}), got {tokens.min()}..{tokens.max()}")
        h = self.token(tokens) + self.position(torch.arange(T, device=tokens.device))
        for attention, feed_forward, norm in zip(self.attention, self.feed_forward, self.norms):
            h = attention(h)
            h = norm(h + feed_forward(h))
        return self.head(h)


@torch.no_grad()
def recall_perplexity(model: LinearTransformerLM, batch: RecallBatch) -> tuple[float, float]:
    """(perplexity over every next token, perplexity over the queried values), in eval mode."""
    was_training = model.training
    model.eval()
    logits = model(batch.tokens[:, :-1])
    model.train(was_training)
    nll = F.cross_entropy(logits.transpose(1, 2), batch.tokens[:, 1:], reduction="none")  # (B, T - 1)
    return nll.mean().exp().item(), nll[batch.recall_mask].mean().exp().item()


def train_recall_lm(model: LinearTransformerLM, steps: int, *, batch_size: int = 32, lr: float = 3e-3,
                    generator: torch.Generator | None = None, description: str = "recall LM",
                    progress: bool = False, **corpus) -> list[float]:
    """Adam on next-token cross-entropy over whole sequences of :func:`recall_corpus`; returns the losses.

    ``progress=True`` draws a bar named ``description`` through :mod:`iclr24.core.progress`; off by default."""
    check_int("steps", steps, minimum=1)
    check_number("lr", lr, minimum=0.0, exclusive=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    model.train()
    with progress_bar(description, total=steps, enabled=progress) as bar:
        for _ in range(steps):
            tokens = recall_corpus(batch_size, generator=generator, **corpus).tokens
            loss = F.cross_entropy(model(tokens[:, :-1]).transpose(1, 2), tokens[:, 1:])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            bar.advance(loss=losses[-1])
    return losses
