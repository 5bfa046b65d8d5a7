"""A small pre-LayerNorm causal transformer (GPT) with rotary positions, for reproductions that train their own LM.

HyperAttention swaps its attention kernel (``CausalSelfAttention.sdpa``); EFT trains a trio of
them (a large and a small base, a small fine-tuned one) on a synthetic world.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["Block", "CausalSelfAttention", "TinyLM", "TinyLMConfig", "rotary"]


@dataclass(frozen=True)
class TinyLMConfig:
    vocab_size: int = 64
    context: int = 1024
    n_layers: int = 4
    n_heads: int = 4
    d_model: int = 64


def rotary(x: Tensor, base: float = 10000.0) -> Tensor:
    """Rotary position embedding (Su et al., 2021) of ``x`` ``(B, nh, T, hs)``: relative offsets
    become easy to attend to, which the induction pattern needs."""
    T, hs = x.shape[-2], x.shape[-1]
    freqs = base ** (-torch.arange(0, hs, 2, device=x.device, dtype=torch.float32) / hs)
    angles = torch.arange(T, device=x.device, dtype=torch.float32)[:, None] * freqs  # (T, hs/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention whose kernel is the attribute ``sdpa``.

    ``sdpa`` defaults to ``F.scaled_dot_product_attention``; any callable with its
    signature (such as :class:`~iclr24.hyperattention.HyperAttention`) can replace it.
    """

    def __init__(self, cfg: TinyLMConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.sdpa = F.scaled_dot_product_attention

    def forward(self, x: Tensor) -> Tensor:
        B, T, C = x.size()
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hs)
        y = self.sdpa(rotary(q), rotary(k), v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, cfg: TinyLMConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(),
                                 nn.Linear(4 * cfg.d_model, cfg.d_model))

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TinyLM(nn.Module):
    """A pre-LayerNorm GPT with rotary positions; ``forward(idx) -> logits (B, T, vocab)``."""

    def __init__(self, cfg: TinyLMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def forward(self, idx: Tensor) -> Tensor:
        T = idx.shape[1]
        assert T <= self.cfg.context, f"sequence length {T} exceeds the context {self.cfg.context}"
        x = self.tok_emb(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))

    def loss(self, idx: Tensor) -> Tensor:
        """Mean next-token cross-entropy (nats) over the sequence."""
        logits = self(idx[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), idx[:, 1:].reshape(-1))
