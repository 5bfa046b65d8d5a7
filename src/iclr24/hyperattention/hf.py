"""HyperAttention as a Hugging Face transformers attention implementation.

    from iclr24.hyperattention import register_hf_attention
    stats = register_hf_attention("hyper", min_seq_len=4096)
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="hyper")
    model.generate(...)          # prefill through HyperAttention, decode steps through SDPA
    stats                        # RoutingStats(routed=..., fallbacks={'decode': ...})

transformers is imported only when these functions are called (it is an optional dependency).
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

from iclr24.hyperattention.attention import HyperAttentionConfig, hyper_attention
from iclr24.hyperattention.module import RoutingStats, _fallback_reason

__all__ = ["make_hf_attention", "register_hf_attention"]

# Keyword arguments some models pass to their attention function that HyperAttention does not implement.
_UNSUPPORTED_KWARGS = ("softcap", "position_bias", "s_aux", "sinks")


def make_hf_attention(
    *, block_size: int = 256, sample_size: int = 256, lsh_num_projs: int = 7, min_seq_len: int = 4096,
    warn: bool = True,
) -> Callable[..., tuple[Tensor, None]]:
    """An attention function for transformers' ``AttentionInterface``.

    Its signature is the interface's: ``fn(module, query, key, value, attention_mask, scaling=None,
    dropout=0.0, **kwargs) -> (attn_output, None)``, with ``query`` ``(batch, heads, n_q, d)``,
    ``key``/``value`` ``(batch, kv_heads, n_k, d)`` (grouped-query models pass fewer key/value
    heads; they are shared without copying) and ``attn_output`` ``(batch, n_q, heads, d)``.

    Calls with an attention mask (a padded batch, a sliding window, a continued prefill),
    dropout, a single query (decode steps), fewer queries than the exact cut-off, or an
    argument HyperAttention lacks (softcap, position bias, attention sinks) go to transformers'
    own SDPA implementation, and are counted by reason in ``fn.stats`` (a :class:`RoutingStats`).
    The sortLSH hyperplanes are drawn per call from torch's global generator.
    """
    cfg = HyperAttentionConfig(block_size, sample_size, lsh_num_projs, min_seq_len)
    stats = RoutingStats(warn=warn)
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def hyper_attention_forward(module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor | None,
                                scaling: float | None = None, dropout: float = 0.0, **kwargs):
        is_causal = kwargs.pop("is_causal", None)
        is_causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
        n_q, n_k = query.shape[2], key.shape[2]
        # transformers' SDPA convention: a missing mask means causal (if the module is), or none for one query.
        causal = bool(n_q > 1 and attention_mask is None and is_causal)
        if causal and n_k > n_q:  # prefill into an empty static cache: the keys past n_q are unused slots
            key, value = key[:, :, :n_q], value[:, :, :n_q]
        window = kwargs.get("sliding_window")
        if any(kwargs.get(name) is not None for name in _UNSUPPORTED_KWARGS) or (window is not None
                                                                                 and window < key.shape[2]):
            reason = "unsupported"
        else:
            reason = _fallback_reason(query, key, attention_mask, dropout, causal, False, cfg)
        if reason is not None:
            stats.record_fallback(reason)
            return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                          scaling=scaling, is_causal=is_causal, **kwargs)
        h_q, h_kv = query.shape[1], key.shape[1]
        if h_q % h_kv:
            raise ValueError(f"query heads must be a multiple of the key/value heads, got {h_q} and {h_kv}")
        out, _ = hyper_attention(query, key, value, causal=causal, scale=scaling, block_size=cfg.block_size,
                                 sample_size=cfg.sample_size, lsh_num_projs=cfg.lsh_num_projs,
                                 min_seq_len=cfg.min_seq_len, enable_gqa=h_q != h_kv)
        stats.routed += 1
        return out.transpose(1, 2).contiguous(), None

    hyper_attention_forward.stats = stats
    hyper_attention_forward.config = cfg
    return hyper_attention_forward


def register_hf_attention(
    name: str = "hyper", *, block_size: int = 256, sample_size: int = 256, lsh_num_projs: int = 7,
    min_seq_len: int = 4096, warn: bool = True,
) -> RoutingStats:
    """Register HyperAttention with transformers as ``attn_implementation=name``; returns its :class:`RoutingStats`.

    Registers :func:`make_hf_attention`'s function with ``AttentionInterface`` and transformers'
    SDPA mask builder with ``AttentionMaskInterface`` under the same name. The mask builder
    matters: transformers builds no mask at all for a name it has no mask function for, so a
    padded batch would be attended as if unpadded. With it, unpadded causal calls come without
    a mask (HyperAttention serves them) and padded ones with one (they fall back, counted).
    Registering the name again replaces the function (and starts new stats).

    Example (a model from a config, so nothing is downloaded):
        >>> import torch
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> stats = register_hf_attention("hyper", block_size=16, sample_size=16, min_seq_len=32)
        >>> config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        ...                      num_attention_heads=4, num_key_value_heads=2, attn_implementation="hyper")
        >>> model = LlamaForCausalLM(config)
        >>> _ = model(torch.randint(64, (1, 128)))
        >>> stats
        RoutingStats(routed=1, fallbacks={})
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if name in ("sdpa", "eager") or name.startswith(("flash_attention", "flex_attention", "paged")):
        raise ValueError(f"name must not replace one of transformers' own implementations, got {name!r}")
    from transformers import AttentionInterface

    fn = make_hf_attention(block_size=block_size, sample_size=sample_size, lsh_num_projs=lsh_num_projs,
                           min_seq_len=min_seq_len, warn=warn)
    AttentionInterface.register(name, fn)
    try:
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError:  # older transformers build masks per model; a non-SDPA name then always gets one
        pass
    else:
        AttentionMaskInterface.register(name, sdpa_mask)
    return fn.stats
