"""HyperAttention: long-context attention in near-linear time.

Insu Han, Rajesh Jayaram, Amin Karbasi, Vahab Mirrokni, David P. Woodruff, Amir Zandieh.
"HyperAttention: Long-context Attention in Near-Linear Time". ICLR 2024.
https://arxiv.org/abs/2310.05869

    from iclr24.hyperattention import hyper_attention, HyperAttention
    out, lse = hyper_attention(q, k, v, causal=True)          # (batch, heads, n, d)
    attn = HyperAttention(head_dim=64)                          # SDPA's calling convention
"""

from iclr24.hyperattention.attention import (
    HyperAttentionConfig,
    exact_attention,
    hyper_attention,
    lsh_bucket_ranks,
    merge_attention,
)
from iclr24.hyperattention.module import HyperAttention, patch_sdpa

__all__ = [
    "HyperAttention",
    "HyperAttentionConfig",
    "exact_attention",
    "hyper_attention",
    "lsh_bucket_ranks",
    "merge_attention",
    "patch_sdpa",
]
