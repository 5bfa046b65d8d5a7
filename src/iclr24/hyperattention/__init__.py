"""HyperAttention: long-context attention in near-linear time.

Insu Han, Rajesh Jayaram, Amin Karbasi, Vahab Mirrokni, David P. Woodruff, Amir Zandieh.
"HyperAttention: Long-context Attention in Near-Linear Time". ICLR 2024.
https://arxiv.org/abs/2310.05869

    from iclr24.hyperattention import hyper_attention, HyperAttention
    out, lse = hyper_attention(q, k, v, causal=True)          # (batch, heads, n, d)
    attn = HyperAttention(head_dim=64)                          # SDPA's calling convention
    with patch_sdpa() as stats: ...                             # route F.scaled_dot_product_attention
    stats = register_hf_attention("hyper")                      # transformers: attn_implementation="hyper"
"""

from iclr24.hyperattention.attention import (
    HyperAttentionConfig,
    exact_attention,
    hyper_attention,
    lsh_bucket_ranks,
    merge_attention,
)
from iclr24.hyperattention.hf import make_hf_attention, register_hf_attention
from iclr24.hyperattention.module import HyperAttention, RoutingStats, patch_sdpa

__all__ = [
    "HyperAttention",
    "HyperAttentionConfig",
    "exact_attention",
    "hyper_attention",
    "RoutingStats",
    "lsh_bucket_ranks",
    "make_hf_attention",
    "merge_attention",
    "patch_sdpa",
    "register_hf_attention",
]
