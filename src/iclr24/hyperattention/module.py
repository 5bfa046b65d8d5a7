"""HyperAttention as a drop-in for ``torch.nn.functional.scaled_dot_product_attention``."""

from __future__ import annotations

import contextlib
import warnings
from collections import Counter
from collections.abc import Iterator

import torch
from torch import Tensor, nn

from iclr24.core.checks import check_int
from iclr24.hyperattention.attention import HyperAttentionConfig, hyper_attention

__all__ = ["HyperAttention", "RoutingStats", "patch_sdpa"]


class RoutingStats:
    """How many attention calls went to HyperAttention, and why the others went to exact attention.

    ``routed`` counts the calls HyperAttention served; ``fallbacks`` counts the others by reason
    (a :class:`collections.Counter`; the keys are those of :attr:`REASONS`). Returned by
    :func:`patch_sdpa` (``with patch_sdpa() as stats:``) and by
    :func:`iclr24.hyperattention.register_hf_attention`.

    With ``warn`` (the default), the first fallback of each reason that is not by design
    (``"decode"`` and ``"short"`` are: HyperAttention would be exact there) gives one
    :class:`UserWarning`; later ones are only counted.
    """

    REASONS = {
        "attn_mask": "an attention mask was passed (e.g. a padded batch); HyperAttention takes none",
        "dropout": "attention dropout > 0; HyperAttention has none",
        "decode": "a single query (a decode step)",
        "short": "fewer queries than min_seq_len (2 x min_seq_len causal), where HyperAttention is exact anyway",
        "causal_lengths": "a causal call with n_q != n_k",
        "gqa_heads": "enable_gqa with query heads that are not a multiple of the key/value heads",
        "unsupported": "an argument HyperAttention does not implement (softcap, position bias, attention sinks, "
                       "a sliding window shorter than the keys)",
    }
    _BY_DESIGN = frozenset({"decode", "short"})

    def __init__(self, *, warn: bool = True) -> None:
        self.routed = 0
        self.fallbacks: Counter[str] = Counter()
        self.warn = warn

    @property
    def fallback(self) -> int:
        """Calls that went to exact attention, all reasons together."""
        return sum(self.fallbacks.values())

    @property
    def calls(self) -> int:
        return self.routed + self.fallback

    def record_fallback(self, reason: str) -> None:
        if reason not in self.REASONS:
            raise ValueError(f"reason must be one of {sorted(self.REASONS)}, got {reason!r}")
        first = reason not in self.fallbacks
        self.fallbacks[reason] += 1
        if first and self.warn and reason not in self._BY_DESIGN:
            warnings.warn(f"HyperAttention: a call went to exact attention: {self.REASONS[reason]}. Such calls are "
                          f"counted in RoutingStats.fallbacks[{reason!r}] without further warnings.", stacklevel=3)

    def reset(self) -> None:
        self.routed = 0
        self.fallbacks.clear()

    def summary(self) -> str:
        reasons = ", ".join(f"{n} {r}" for r, n in self.fallbacks.most_common()) or "none"
        return f"{self.routed} of {self.calls} attention calls routed to HyperAttention; fell back: {reasons}"

    def __repr__(self) -> str:
        return f"RoutingStats(routed={self.routed}, fallbacks={dict(self.fallbacks)})"


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
        - with ``enable_gqa=True``: query ``(*batch, H_q, n, d)``, key/value ``(*batch, H_kv, n_k, d)``,
          ``H_q`` a multiple of ``H_kv`` (the key/value heads are shared, not copied)
        - output: ``(*batch, n, d_v)`` (``(*batch, H_q, n, d_v)``)

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
        """SDPA's arguments; ``enable_gqa`` shares the key/value heads without copying them."""
        if attn_mask is not None:
            raise ValueError(
                f"HyperAttention takes no attn_mask (got one of shape {tuple(attn_mask.shape)}); "
                "use is_causal=True for causal masking, or exact attention for arbitrary masks"
            )
        if dropout_p != 0.0:
            raise ValueError(f"HyperAttention has no attention dropout; dropout_p must be 0.0, got {dropout_p}")
        if query.shape[-1] != self.head_dim:
            raise ValueError(f"query has head dimension {query.shape[-1]}, this module was built for "
                             f"head_dim={self.head_dim}")
        cfg = self.config
        out, _ = hyper_attention(
            query, key, value, causal=is_causal, scale=scale, block_size=cfg.block_size,
            sample_size=cfg.sample_size, lsh_num_projs=cfg.lsh_num_projs, min_seq_len=cfg.min_seq_len,
            lsh_projections=self.lsh_projections, enable_gqa=enable_gqa,
        )
        return out

    def extra_repr(self) -> str:
        c = self.config
        return (f"head_dim={self.head_dim}, block_size={c.block_size}, sample_size={c.sample_size}, "
                f"lsh_num_projs={c.lsh_num_projs}, min_seq_len={c.min_seq_len}")


def _fallback_reason(query: Tensor, key: Tensor, attn_mask, dropout_p, is_causal: bool, enable_gqa: bool,
                     cfg: HyperAttentionConfig) -> str | None:
    """Why an SDPA-style call should go to exact attention, or None when HyperAttention serves it."""
    if attn_mask is not None:
        return "attn_mask"
    if dropout_p:
        return "dropout"
    if enable_gqa and (min(query.dim(), key.dim()) < 3 or key.shape[-3] == 0 or query.shape[-3] % key.shape[-3]):
        return "gqa_heads"  # SDPA itself then says what is wrong
    n_q, n_k = query.shape[-2], key.shape[-2]
    if n_q == 1:
        return "decode"
    if n_q < cfg.min_seq_len * (2 if is_causal else 1):  # where HyperAttention would be exact anyway
        return "short"
    if is_causal and n_q != n_k:
        return "causal_lengths"  # SDPA's top-left alignment; HyperAttention's recursion needs n_q == n_k
    return None


@contextlib.contextmanager
def patch_sdpa(
    *, block_size: int = 256, sample_size: int = 256, lsh_num_projs: int = 7, min_seq_len: int = 4096,
    warn: bool = True,
) -> Iterator[RoutingStats]:
    """Route ``torch.nn.functional.scaled_dot_product_attention`` to HyperAttention inside the block.

    For models you do not want to edit (e.g. a transformers model with
    ``attn_implementation="sdpa"``; for transformers, :func:`register_hf_attention` is the
    more direct route). Grouped-query calls (``enable_gqa=True``, as transformers makes for
    Llama, Mistral, Qwen, SmolLM2) are served without copying the key/value heads. Calls that
    HyperAttention cannot serve exactly as asked (an ``attn_mask``, e.g. a padded batch;
    dropout; a causal call with ``n_q != n_k``), or that it would compute exactly (a single
    query, fewer than ``min_seq_len`` queries, ``2 * min_seq_len`` causal), go to the original
    function. The LSH hyperplanes are drawn per call from the global generator.

    Yields a :class:`RoutingStats`: ``stats.routed`` and ``stats.fallbacks`` (counts by
    reason). With ``warn``, the first fallback of each unexpected reason warns once, and
    leaving the block without a single routed call warns with the counts.

    Example:
        >>> import torch.nn.functional as F
        >>> q = k = v = torch.randn(1, 1, 8192, 64)
        >>> with patch_sdpa() as stats:
        ...     out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        >>> stats
        RoutingStats(routed=1, fallbacks={})
    """
    cfg = HyperAttentionConfig(block_size, sample_size, lsh_num_projs, min_seq_len)
    stats = RoutingStats(warn=warn)
    functional = torch.nn.functional
    original = functional.scaled_dot_product_attention

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        reason = _fallback_reason(query, key, attn_mask, dropout_p, is_causal, enable_gqa, cfg)
        if reason is not None:
            stats.record_fallback(reason)
            return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                            scale=scale, enable_gqa=enable_gqa)
        out, _ = hyper_attention(query, key, value, causal=is_causal, scale=scale, block_size=cfg.block_size,
                                 sample_size=cfg.sample_size, lsh_num_projs=cfg.lsh_num_projs,
                                 min_seq_len=cfg.min_seq_len, enable_gqa=enable_gqa)
        stats.routed += 1
        return out

    functional.scaled_dot_product_attention = sdpa
    try:
        yield stats
    finally:
        functional.scaled_dot_product_attention = original
    if warn and stats.routed == 0:
        if stats.calls == 0:
            warnings.warn("patch_sdpa: nothing called torch.nn.functional.scaled_dot_product_attention inside the "
                          "block (a model with attn_implementation='eager' does not), so nothing was routed to "
                          "HyperAttention", stacklevel=3)
        else:
            warnings.warn(f"patch_sdpa: {stats.summary()}", stacklevel=3)
