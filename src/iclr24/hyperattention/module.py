"""HyperAttention as a drop-in for ``torch.nn.functional.scaled_dot_product_attention``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import Tensor, nn

from iclr24.core.checks import check_int
from iclr24.hyperattention.attention import HyperAttentionConfig, hyper_attention

__all__ = ["HyperAttention", "patch_sdpa"]


class HyperAttention(nn.Module):
    r"""HyperAttention with SDPA's calling convention, so it can replace
    ``F.scaled_dot_product_attention`` in an existing model.

    From "HyperAttention: Long-context Attention in Near-Linear Time" (Han et al.,
    ICLR 2024, https://arxiv.org/abs/2310.05869). The sortLSH hyperplanes are a buffer,
    fixed at construction (as in the authors' code) and saved with the model; the
    sampled key columns are drawn from torch's global generator at each call.

    Args:
        head_dim: ``d``, the last dimension of queries and keys.
        block_size, sample_size, lsh_num_projs, min_seq_len: see
            :class:`HyperAttentionConfig` (defaults are the authors').

    Shapes:
        - query: ``(*batch, n, d)``; key: ``(*batch, n_k, d)``; value: ``(*batch, n_k, d_v)``
        - output: ``(*batch, n, d_v)``

    Example:
        >>> attn = HyperAttention(head_dim=64)
        >>> q = k = v = torch.randn(2, 4, 1024, 64)
        >>> attn(q, k, v, is_causal=True).shape
        torch.Size([2, 4, 1024, 64])
    """

    def __init__(
        self,
        head_dim: int,
        *,
        block_size: int = 256,
        sample_size: int = 256,
        lsh_num_projs: int = 7,
        min_seq_len: int = 4096,
    ) -> None:
        super().__init__()
        self.head_dim = check_int("head_dim", head_dim, minimum=1)
        self.config = HyperAttentionConfig(block_size, sample_size, lsh_num_projs, min_seq_len)
        # Not saved in state_dict (as in the official code): a checkpoint of the model with exact attention
        # loads strictly into one using this module. Each construction draws its own hyperplanes.
        self.register_buffer("lsh_projections", torch.empty(head_dim, lsh_num_projs), persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.lsh_projections)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attn_mask: Tensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        enable_gqa: bool = False,
    ) -> Tensor:
        if attn_mask is not None:
            raise ValueError(
                f"HyperAttention takes no attn_mask (got one of shape {tuple(attn_mask.shape)}); "
                "use is_causal=True for causal masking, or exact attention for arbitrary masks"
            )
        if dropout_p != 0.0:
            raise ValueError(f"HyperAttention has no attention dropout; dropout_p must be 0.0, got {dropout_p}")
        if enable_gqa:
            raise ValueError("HyperAttention does not implement enable_gqa; repeat the key/value heads first")
        if query.shape[-1] != self.head_dim:
            raise ValueError(f"query has head dimension {query.shape[-1]}, this module was built for "
                             f"head_dim={self.head_dim}")
        cfg = self.config
        out, _ = hyper_attention(
            query, key, value, causal=is_causal, scale=scale, block_size=cfg.block_size,
            sample_size=cfg.sample_size, lsh_num_projs=cfg.lsh_num_projs, min_seq_len=cfg.min_seq_len,
            lsh_projections=self.lsh_projections,
        )
        return out

    def extra_repr(self) -> str:
        c = self.config
        return (f"head_dim={self.head_dim}, block_size={c.block_size}, sample_size={c.sample_size}, "
                f"lsh_num_projs={c.lsh_num_projs}, min_seq_len={c.min_seq_len}")


@contextlib.contextmanager
def patch_sdpa(
    *, block_size: int = 256, sample_size: int = 256, lsh_num_projs: int = 7, min_seq_len: int = 4096
) -> Iterator[None]:
    """Route ``torch.nn.functional.scaled_dot_product_attention`` to HyperAttention inside the block.

    For models you do not want to edit (e.g. a transformers model with
    ``attn_implementation="sdpa"``). Calls that HyperAttention cannot serve exactly as
    asked (an ``attn_mask``, dropout, GQA), or that it would compute exactly (fewer than ``min_seq_len``
    queries, ``2 * min_seq_len`` causal), go to the
    original function. The LSH hyperplanes are drawn per call from the global generator.

    Example:
        >>> import torch.nn.functional as F
        >>> q = k = v = torch.randn(1, 1, 8192, 64)
        >>> with patch_sdpa():
        ...     out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    """
    cfg = HyperAttentionConfig(block_size, sample_size, lsh_num_projs, min_seq_len)
    functional = torch.nn.functional
    original = functional.scaled_dot_product_attention

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        exact_below = cfg.min_seq_len * (2 if is_causal else 1)  # where HyperAttention would be exact anyway
        if attn_mask is not None or dropout_p or enable_gqa or query.shape[-2] < exact_below:
            return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                            scale=scale, enable_gqa=enable_gqa)
        out, _ = hyper_attention(query, key, value, causal=is_causal, scale=scale, block_size=cfg.block_size,
                                 sample_size=cfg.sample_size, lsh_num_projs=cfg.lsh_num_projs,
                                 min_seq_len=cfg.min_seq_len)
        return out

    functional.scaled_dot_product_attention = sdpa
    try:
        yield
    finally:
        functional.scaled_dot_product_attention = original
