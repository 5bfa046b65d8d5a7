"""HyperAttention: long-context attention in near-linear time.

Han, Jayaram, Karbasi, Mirrokni, Woodruff, Zandieh. ICLR 2024. https://arxiv.org/abs/2310.05869

Exact attention is ``out = D^-1 A V`` with ``A = exp(scale * Q K^T)`` and ``D = diag(A 1)``.
HyperAttention splits ``A`` into the few large entries and the rest:

1. sortLSH (Alg. 1, Def. 1): hash queries and keys with ``r`` random hyperplanes, put the
   ``2^r`` buckets in Gray-code order (neighbouring buckets differ in one bit), and sort
   queries and keys by bucket. Large entries ``q_i . k_j`` now fall near the diagonal.
2. The heavy mask ``M`` is the block diagonal of the sorted matrix (block size ``b``);
   ``A o M`` is computed exactly, block by block.
3. The rest, ``(A - A o M) V`` and its row sums, is estimated from ``m`` key columns sampled
   uniformly, each rescaled by ``n / m``, with entries already inside ``M`` excluded
   (Alg. 2: the row norms ``D`` are estimated from the same samples, so the
   normalisation is consistent). The paper samples rows of ``V`` by their norms; like
   the authors' code we sample uniformly.
4. Both parts come back as ``(out, lse)`` and are merged exactly by log-sum-exp.

Causal masking (Sec. 4, Alg. 4) recurses: the two diagonal halves are causal
sub-problems, the lower-left block is unmasked and uses steps 1-4. Sequences of fewer
than ``min_seq_len`` queries use exact attention (as in the official code).

Shapes follow ``torch.nn.functional.scaled_dot_product_attention``: ``q`` is
``(*batch, n_q, d)``, ``k`` is ``(*batch, n_k, d)``, ``v`` is ``(*batch, n_k, d_v)``;
batch dimensions broadcast. (flash-attn's ``(batch, n, heads, d)`` layout must be
transposed first.)

Grouped-query attention (SDPA's ``enable_gqa``: ``H_q`` query heads share ``H_kv`` key/value
heads, ``G = H_q / H_kv``) is computed without copying keys or values: the ``G`` query heads of
a key/value head are interleaved into one sequence of ``n_q * G`` queries, position-major, so
query row ``i`` sits at position ``i // G``. Non-causal steps 1-4 take it as it is (all its
queries see the same keys); the causal recursion splits it by position, and its exact leaves
run the ``G`` heads against the one key/value head.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from iclr24.core.checks import check_int, check_number, check_tensor

__all__ = [
    "HyperAttentionConfig",
    "exact_attention",
    "hyper_attention",
    "lsh_bucket_ranks",
    "merge_attention",
]

_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_SHAPES = "(*batch, n, d)"
# Work on at most this many score entries at once: bounds memory for many heads.
_MAX_SCORES = 1 << 25
# Score entries per chunk of the sorted queries: a few MB, so temporaries stay in cache.
_CHUNK_SCORES = 1 << 20
_HAS_CPU_FLASH = hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu")
# sortLSH hashes into 2^r buckets through a 2^r table: r = 16 is 65536 buckets, r = 40 would be 8 TB.
_MAX_LSH_PROJS = 16


@dataclass(frozen=True)
class HyperAttentionConfig:
    """Parameters of HyperAttention (the defaults are the authors').

    block_size: queries/keys per diagonal block of the sorted matrix (``b``); 0 drops the
        LSH blocks (uniform sampling alone, an ablation).
    sample_size: key columns sampled for the residual (``m``); ``>= n`` uses every key;
        0 drops the residual (LSH blocks alone, an ablation).
    lsh_num_projs: random hyperplanes of sortLSH (``r``); ``2^r`` buckets. 0 keeps the input order
        (blocks without sortLSH, an ablation).
    min_seq_len: sequences of fewer than this many queries use exact attention, as in the official code.
        A causal sequence is first halved, so it is approximated only from ``2 * min_seq_len``.
    """

    block_size: int = 256
    sample_size: int = 256
    lsh_num_projs: int = 7
    min_seq_len: int = 4096

    def __post_init__(self) -> None:
        check_int("block_size", self.block_size, minimum=0)
        check_int("sample_size", self.sample_size, minimum=0)
        if self.block_size == 0 and self.sample_size == 0:
            raise ValueError("block_size and sample_size cannot both be 0: nothing would be attended")
        check_int("lsh_num_projs", self.lsh_num_projs, minimum=0)
        if self.lsh_num_projs > _MAX_LSH_PROJS:
            raise ValueError(f"lsh_num_projs must be <= {_MAX_LSH_PROJS} (2^r buckets), got {self.lsh_num_projs}")
        check_int("min_seq_len", self.min_seq_len, minimum=0)


# --- exact attention and the merge ----------------------------------------------------------------


def _attend(scores: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """Softmax-weighted values and the log row sums; rows that are all ``-inf`` give (0, -inf)."""
    row_max = scores.amax(dim=-1, keepdim=True)
    row_max = row_max.masked_fill(torch.isinf(row_max), 0.0)
    weights = (scores - row_max).exp_()  # one exp per score
    row_sum = weights.sum(dim=-1, keepdim=True)
    out = (weights @ v) / row_sum.masked_fill(row_sum == 0, 1.0)
    return out, (row_max + row_sum.log()).squeeze(-1)


class _FlashAttentionWithLse(torch.autograd.Function):
    """torch's CPU flash kernel, differentiable in both ``out`` and ``lse``.

    The kernel's own autograd treats ``lse`` as constant, which would make merged partial
    attentions' gradients wrong. The lse gradient adds ``g_lse * P`` to the score gradient
    ``dS = P o (dO V^T - rowsum(dO o O))``; the kernel's backward computes exactly that if
    ``V`` gets an extra zero column, ``O`` an extra column of ones and ``dO`` the column
    ``-g_lse`` (then ``rowsum(dO o O)`` drops by ``g_lse``). Inputs are ``(B, 1, n, d)``;
    ``q`` and ``k`` are padded too, so all three share the kernel's head dimension.
    """

    @staticmethod
    def forward(ctx, q, k, v, causal, scale):
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, causal, attn_mask=None, scale=scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.scale = causal, scale
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        q, k, v, out, lse = ctx.saved_tensors
        grad_out = torch.zeros_like(out) if grad_out is None else grad_out
        grad_lse = torch.zeros_like(lse) if grad_lse is None else grad_lse
        pad = torch.nn.functional.pad
        dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            torch.cat([grad_out, -grad_lse.unsqueeze(-1).to(grad_out.dtype)], -1).contiguous(),
            pad(q, (0, 1)), pad(k, (0, 1)), pad(v, (0, 1)), pad(out, (0, 1), value=1.0), lse,
            0.0, ctx.causal, attn_mask=None, scale=ctx.scale,
        )
        return dq[..., :-1], dk[..., :-1], dv[..., :-1], None, None


def exact_attention(
    q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False, scale: float | None = None
) -> tuple[Tensor, Tensor]:
    """Exact softmax attention that also returns the log-sum-exp of each row.

    Args:
        q: ``(B, n_q, d)``, k: ``(B, n_k, d)``, v: ``(B, n_k, d_v)``.
        causal: mask keys after each query (top-left aligned, as SDPA's ``is_causal``).

    Returns:
        ``out`` ``(B, n_q, d_v)`` and ``lse`` ``(B, n_q)``, ``lse_i = log sum_j exp(scale q_i.k_j)``;
        both differentiable.
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, x, ndim=3, dtypes=_FLOAT_DTYPES, shape_doc="(B, n, d)")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must share a dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    if q.shape[0] != k.shape[0] or k.shape[0] != v.shape[0] or q.shape[-1] != k.shape[-1] \
            or k.shape[1] != v.shape[1]:
        raise ValueError(f"expected q (B, n_q, d), k (B, n_k, d) and v (B, n_k, d_v), got {tuple(q.shape)}, "
                         f"{tuple(k.shape)} and {tuple(v.shape)}")
    _check_head_dim(q, k)
    if scale is not None:
        scale = check_number("scale", scale, minimum=0, exclusive=True)
    return _exact_attention(q, k, v, causal=causal, scale=scale)


def _check_head_dim(q: Tensor, k: Tensor) -> None:
    if q.shape[-1] == 0:
        raise ValueError(f"q and k must have a head dimension d >= 1 (the default scale is 1/sqrt(d)), got d=0: "
                         f"q {tuple(q.shape)} and k {tuple(k.shape)}")


def _exact_attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False,
                     scale: float | None = None, group: int = 1) -> tuple[Tensor, Tensor]:
    """:func:`exact_attention` on inputs already checked (HyperAttention's recursion calls it on blocks).

    ``group`` > 1: ``q`` holds ``group`` queries per position, position-major (row ``i`` is at position
    ``i // group``); only the causal mask depends on it.
    """
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    if (_HAS_CPU_FLASH and q.device.type == "cpu" and q.dtype in (torch.float32, torch.float64)
            and v.shape[-1] == q.shape[-1]):
        # Fast path: torch's CPU flash kernel, forward and backward.
        if causal and group > 1:  # the group as heads, against one (broadcast, not copied) key/value head
            B, n, d = k.shape
            heads = (B, group, n, d)
            out, lse = _FlashAttentionWithLse.apply(q.view(B, n, group, d).transpose(1, 2),
                                                    k.unsqueeze(1).expand(heads), v.unsqueeze(1).expand(heads),
                                                    causal, scale)
            return out.transpose(1, 2).reshape(B, n * group, d), lse.transpose(1, 2).reshape(B, n * group)
        out, lse = _FlashAttentionWithLse.apply(q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1), causal, scale)
        return out.squeeze(1), lse.squeeze(1)
    # Readable path (other devices and dtypes): scores in query chunks to bound memory.
    B, n_q, _ = q.shape
    n_k = k.shape[1]
    chunk = max(1, _MAX_SCORES // max(1, B * n_k))
    outs, lses = [], []
    for start in range(0, n_q, chunk):
        scores = (q[:, start:start + chunk] @ k.transpose(-1, -2)) * scale  # (B, c, n_k)
        if causal:
            rows = torch.arange(start, min(start + chunk, n_q), device=q.device) // group
            future = rows[:, None] < torch.arange(n_k, device=q.device)[None, :]
            scores = scores.masked_fill(future, float("-inf"))
        out, lse = _attend(scores, v)
        outs.append(out)
        lses.append(lse)
    return torch.cat(outs, 1), torch.cat(lses, 1)


def _exact_attention_reference(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float) -> tuple[Tensor, Tensor]:
    """The readable path alone (tests compare the fast path with it)."""
    scores = (q @ k.transpose(-1, -2)) * scale
    if causal:
        scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
    return _attend(scores, v)


def merge_attention(out1: Tensor, lse1: Tensor, out2: Tensor, lse2: Tensor) -> tuple[Tensor, Tensor]:
    """Combine attention over two disjoint key sets from their ``(out, lse)`` pairs.

    ``lse = log(e^lse1 + e^lse2)`` and ``out = (e^lse1 out1 + e^lse2 out2) / e^lse``: exact,
    so attention over the union is recovered from its parts.
    """
    for name, out, lse in (("out1", out1, lse1), ("out2", out2, lse2)):
        if out.dim() < 1 or lse.shape != out.shape[:-1]:
            raise ValueError(f"{name} must be (..., n, d_v) and its lse (..., n), got {tuple(out.shape)} and "
                             f"{tuple(lse.shape)}")
    if out1.shape != out2.shape:
        raise ValueError(f"out1 and out2 must have the same shape, got {tuple(out1.shape)} and {tuple(out2.shape)}")
    lse = torch.logaddexp(lse1, lse2)
    safe = lse.masked_fill(torch.isinf(lse), 0.0)
    w1 = torch.exp(lse1 - safe).unsqueeze(-1)
    w2 = torch.exp(lse2 - safe).unsqueeze(-1)
    return out1 * w1 + out2 * w2, lse


# --- step 1: sortLSH --------------------------------------------------------------------------------


def _gray_rank_table(r: int, device: torch.device) -> Tensor:
    """``table[code]`` = position of ``code`` in the r-bit Gray sequence ``i ^ (i >> 1)``."""
    i = torch.arange(2**r, device=device)
    table = torch.empty_like(i)
    table[i ^ (i >> 1)] = i
    return table


def lsh_bucket_ranks(x: Tensor, projections: Tensor) -> Tensor:
    """sortLSH bucket of each row of ``x``, numbered in Gray-code order.

    Args:
        x: ``(..., n, d)`` queries or keys.
        projections: ``(d, r)`` random hyperplane normals, shared by queries and keys;
            ``r <= 16`` (the ranks come from a table of ``2^r`` entries).

    Returns:
        ``(..., n)`` integer ranks in ``[0, 2^r)``; rows whose ranks differ by one lie in
        buckets whose hashes differ in exactly one bit.
    """
    check_tensor("x", x, min_ndim=1, dtypes=_FLOAT_DTYPES, finite=False, shape_doc="(..., n, d)")
    check_tensor("projections", projections, ndim=2, dtypes=_FLOAT_DTYPES, finite=False, shape_doc="(d, r)")
    if projections.shape[0] != x.shape[-1]:
        raise ValueError(f"projections must be (d, r) for x (..., n, d), got {tuple(projections.shape)} and x "
                         f"{tuple(x.shape)}")
    if projections.shape[1] > _MAX_LSH_PROJS:
        raise ValueError(f"projections must have at most {_MAX_LSH_PROJS} columns (r hyperplanes give a table of "
                         f"2^r buckets), got r={projections.shape[1]} (projections {tuple(projections.shape)})")
    return _lsh_bucket_ranks(x, projections)


def _lsh_bucket_ranks(x: Tensor, projections: Tensor) -> Tensor:
    """:func:`lsh_bucket_ranks` on inputs already checked."""
    r = projections.shape[-1]
    bits = (x @ projections.to(x.dtype)) > 0  # (..., n, r)
    codes = (bits.long() << torch.arange(r, device=x.device)).sum(-1)
    return _gray_rank_table(r, x.device)[codes]


# --- steps 2-4: non-causal HyperAttention ------------------------------------------------------------


def _gather_rows(x: Tensor, index: Tensor) -> Tensor:
    """``x[b, index[b, i], :]`` for ``x`` ``(B, n, c)`` and ``index`` ``(B, m)``."""
    return torch.gather(x, 1, index.unsqueeze(-1).expand(-1, -1, x.shape[-1]))


def _pad_rows(x: Tensor, rows: int) -> Tensor:
    return x if x.shape[1] == rows else torch.nn.functional.pad(x, (0, 0, 0, rows - x.shape[1]))


def _noncausal(
    q: Tensor, k: Tensor, v: Tensor, scale: float, cfg: HyperAttentionConfig,
    projections: Tensor, generator: torch.Generator | None, group: int = 1,
) -> tuple[Tensor, Tensor]:
    B, n_q, d = q.shape
    n_k, d_v = k.shape[1], v.shape[-1]
    if n_q // group < max(cfg.min_seq_len, 1):  # the cut-off counts positions, not a group's queries
        return _exact_attention(q, k, v, scale=scale)
    if cfg.block_size == 0:  # ablation: uniform sampling alone, nothing excluded
        index, log_weight = _sample_columns(B, n_k, cfg.sample_size, generator, q.device)
        out, lse = _attend(q @ _gather_rows(k, index).transpose(-1, -2) * scale, _gather_rows(v, index))
        return out, lse + log_weight

    # Step 1: sort queries and keys by their sortLSH bucket.
    q_order = torch.argsort(_lsh_bucket_ranks(q, projections), dim=-1, stable=True)  # (B, n_q)
    k_order = torch.argsort(_lsh_bucket_ranks(k, projections), dim=-1, stable=True)  # (B, n_k)
    q_s, k_s, v_s = _gather_rows(q, q_order), _gather_rows(k, k_order), _gather_rows(v, k_order)

    # The block-diagonal mask M on the sorted order: n_blocks blocks of bk keys. With n_q == n_k
    # query block j holds exactly the sorted positions of key block j (also when n is not a multiple
    # of the block size); with n_q != n_k the query blocks keep the count and scale in proportion (bq).
    n_blocks = math.ceil(n_k / cfg.block_size)
    bk = cfg.block_size
    bq = bk if n_q == n_k else math.ceil(n_q / n_blocks)
    qb = _pad_rows(q_s, n_blocks * bq).view(B, n_blocks, bq, d)
    kb = _pad_rows(k_s, n_blocks * bk).view(B, n_blocks, bk, d)
    vb = _pad_rows(v_s, n_blocks * bk).view(B, n_blocks, bk, d_v)
    key_padding = torch.arange(n_blocks * bk, device=q.device).view(n_blocks, 1, bk) >= n_k

    # Step 3's columns are drawn once for all queries: (A - A o M) V and its row sums are
    # estimated from m columns, each standing for n_k / m.
    if cfg.sample_size > 0:
        index, log_weight = _sample_columns(B, n_k, cfg.sample_size, generator, q.device)
        k_sampled, v_sampled = _gather_rows(k_s, index), _gather_rows(v_s, index)
        sampled_block = (index // bk).unsqueeze(1)  # (B, 1, m)

    # Steps 2-4 walk the sorted queries a few blocks at a time, so every temporary stays
    # cache-sized: that keeps the time linear in n, not just the operation count.
    step = max(1, _CHUNK_SCORES // (bq * (bk + cfg.sample_size)))
    outs, lses = [], []
    for j0 in range(0, n_blocks, step):
        j1 = min(j0 + step, n_blocks)
        # Step 2: exact attention inside the diagonal blocks (A o M).
        scores = (qb[:, j0:j1] @ kb[:, j0:j1].transpose(-1, -2)) * scale  # (B, c, bq, bk)
        out, lse = _attend(scores.masked_fill(key_padding[j0:j1], float("-inf")), vb[:, j0:j1])
        out, lse = out.reshape(B, -1, d_v), lse.reshape(B, -1)  # (B, c*bq, d_v), (B, c*bq)
        if cfg.sample_size > 0:
            # Step 3: the sampled residual, without the columns of the query's own block.
            scores = (qb[:, j0:j1].reshape(B, -1, d) @ k_sampled.transpose(-1, -2)) * scale  # (B, c*bq, m)
            q_block = torch.arange(j0, j1, device=q.device).repeat_interleave(bq).view(1, -1, 1)
            sample_out, sample_lse = _attend(scores.masked_fill(q_block == sampled_block, float("-inf")), v_sampled)
            # Step 4: merge both parts by log-sum-exp.
            out, lse = merge_attention(out, lse, sample_out, sample_lse + log_weight)
        outs.append(out)
        lses.append(lse)
    out_s, lse_s = torch.cat(outs, 1)[:, :n_q], torch.cat(lses, 1)[:, :n_q]

    inverse = torch.argsort(q_order, dim=-1)  # undo the query sort
    return _gather_rows(out_s, inverse), torch.gather(lse_s, 1, inverse)


def _sample_columns(
    batch: int, n_k: int, sample_size: int, generator: torch.Generator | None, device: torch.device
) -> tuple[Tensor, float]:
    """``m`` key columns drawn uniformly with replacement, and ``log(n_k / m)``.

    With the weight ``n_k / m`` per sampled column the estimated row sums are unbiased;
    ``m >= n_k`` takes every column once (weight 1), which is exact.
    """
    if sample_size >= n_k:
        return torch.arange(n_k, device=device).expand(batch, n_k), 0.0
    index = torch.randint(n_k, (batch, sample_size), device=device, generator=generator)
    return index, math.log(n_k / sample_size)


# --- causal recursion ---------------------------------------------------------------------------------


def _causal(
    q: Tensor, k: Tensor, v: Tensor, scale: float, cfg: HyperAttentionConfig,
    projections: Tensor, generator: torch.Generator | None, group: int = 1,
) -> tuple[Tensor, Tensor]:
    n = k.shape[1]  # positions; q holds group queries per position, position-major
    if n < max(cfg.min_seq_len, 2):  # a single query cannot be halved further
        return _exact_attention(q, k, v, causal=True, scale=scale, group=group)
    h = n // 2
    hq = h * group
    # [ causal(top-left)          0          ]
    # [ noncausal(bottom-left)  causal(bottom-right) ]
    out_top, lse_top = _causal(q[:, :hq], k[:, :h], v[:, :h], scale, cfg, projections, generator, group)
    out_left, lse_left = _noncausal(q[:, hq:], k[:, :h], v[:, :h], scale, cfg, projections, generator, group)
    out_right, lse_right = _causal(q[:, hq:], k[:, h:], v[:, h:], scale, cfg, projections, generator, group)
    out_bottom, lse_bottom = merge_attention(out_left, lse_left, out_right, lse_right)
    return torch.cat([out_top, out_bottom], 1), torch.cat([lse_top, lse_bottom], 1)


# --- public entry point ----------------------------------------------------------------------------------


def hyper_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool = False,
    block_size: int = 256,
    sample_size: int = 256,
    lsh_num_projs: int = 7,
    min_seq_len: int = 4096,
    scale: float | None = None,
    generator: torch.Generator | None = None,
    lsh_projections: Tensor | None = None,
    enable_gqa: bool = False,
) -> tuple[Tensor, Tensor]:
    """Approximate softmax attention in near-linear time.

    Args:
        q: queries ``(*batch, n_q, d)``, e.g. ``(batch, heads, n, d)``.
        k: keys ``(*batch, n_k, d)``.
        v: values ``(*batch, n_k, d_v)``. Batch dimensions broadcast as in SDPA.
        causal: causal masking (needs ``n_q == n_k``), by the paper's recursion.
        block_size, sample_size, lsh_num_projs, min_seq_len: see :class:`HyperAttentionConfig`.
        scale: score scale; default ``1 / sqrt(d)``.
        generator: random source for the LSH hyperplanes and the sampled columns.
        lsh_projections: fixed ``(d, lsh_num_projs)`` hyperplanes (a module keeps them as a
            buffer); drawn from ``generator`` when omitted.
        enable_gqa: grouped-query attention, as SDPA's: ``q`` ``(*batch, H_q, n_q, d)`` and ``k``, ``v``
            ``(*batch, H_kv, n_k, d)`` with ``H_q`` a multiple of ``H_kv``; query head ``h`` uses key/value
            head ``h // (H_q / H_kv)``. The key/value heads are not copied: each one's query heads are
            attended together (see the module docstring); ``min_seq_len`` still counts positions.

    Returns:
        ``out`` ``(*batch, n_q, d_v)`` in the input dtype, and ``lse`` ``(*batch, n_q)``: the
        estimated ``log sum_j exp(scale q_i.k_j)`` of each row, in float32 (float64 for
        float64 input), so partial results can be merged with :func:`merge_attention`.

    Example:
        >>> q = k = v = torch.randn(1, 2, 8192, 64)
        >>> out, lse = hyper_attention(q, k, v, causal=True)
        >>> out.shape, lse.shape
        (torch.Size([1, 2, 8192, 64]), torch.Size([1, 2, 8192]))
    """
    cfg = HyperAttentionConfig(block_size, sample_size, lsh_num_projs, min_seq_len)
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, x, min_ndim=2, dtypes=_FLOAT_DTYPES, shape_doc=_SHAPES)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must share a dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same head dimension d, got q {tuple(q.shape)} and k {tuple(k.shape)}")
    _check_head_dim(q, k)
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same length n_k, got k {tuple(k.shape)} and v {tuple(v.shape)}")
    if not isinstance(enable_gqa, bool):
        raise TypeError(f"enable_gqa must be True or False, got {enable_gqa!r}")
    group = 1
    if enable_gqa:
        if min(q.dim(), k.dim(), v.dim()) < 3:
            raise ValueError(f"enable_gqa=True needs q, k and v with a heads dimension (*batch, heads, n, d), got q "
                             f"{tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)}")
        h_q, h_kv = q.shape[-3], k.shape[-3]
        if v.shape[-3] != h_kv:
            raise ValueError(f"enable_gqa=True needs k and v with the same number of heads, got k {tuple(k.shape)} "
                             f"and v {tuple(v.shape)}")
        if h_kv == 0 or h_q % h_kv:
            raise ValueError(f"enable_gqa=True needs the query heads to be a multiple of the key/value heads, got "
                             f"{h_q} query heads (q {tuple(q.shape)}) and {h_kv} key/value heads (k {tuple(k.shape)})")
        group = h_q // h_kv
    n_q, n_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    if group > 1:
        # (*b, H_kv * G, n_q, d) -> (*b, H_kv, n_q * G, d): each key/value head's G query heads, position-major.
        q = q.unflatten(-3, (-1, group)).transpose(-3, -2).flatten(-3, -2)
    try:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        hint = ("" if enable_gqa or min(q.dim(), k.dim()) < 3 or q.shape[-3] == k.shape[-3]
                else "; for grouped-query attention (fewer key/value heads) pass enable_gqa=True")
        raise ValueError(
            f"batch dimensions of q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)} do not broadcast{hint}"
        ) from None
    if not isinstance(causal, bool):  # a string such as "no" would otherwise read as True
        raise TypeError(f"causal must be True or False, got {causal!r}")
    if scale is not None:
        scale = check_number("scale", scale, minimum=0, exclusive=True)
    if n_q == 0:
        raise ValueError("q must hold at least one query, got n_q=0")
    if causal and n_q != n_k:
        raise ValueError(f"causal=True needs as many queries as keys, got n_q={n_q} and n_k={n_k}")
    if n_k == 0:
        raise ValueError("k and v must hold at least one key, got n_k=0")
    if lsh_projections is None:
        lsh_projections = torch.randn(d, lsh_num_projs, generator=generator, device=q.device)
    elif tuple(lsh_projections.shape) != (d, lsh_num_projs):
        raise ValueError(f"lsh_projections must have shape (d, lsh_num_projs) = {(d, lsh_num_projs)}, "
                         f"got {tuple(lsh_projections.shape)}")
    scale = d**-0.5 if scale is None else float(scale)

    # Half precision is computed in float32: the sums over thousands of keys need it.
    compute = torch.promote_types(q.dtype, torch.float32)
    flat = [x.expand(*batch, *x.shape[-2:]).reshape(-1, *x.shape[-2:]).to(compute) for x in (q, k, v)]
    algorithm = _causal if causal else _noncausal
    # Many heads at long n: run them in chunks so the score tensors stay bounded.
    B = flat[0].shape[0]
    per_head = max(n_q * group, n_k) * max(cfg.block_size, min(cfg.sample_size, n_k), min(cfg.min_seq_len, n_k), 1)
    heads = max(1, _MAX_SCORES // per_head)
    outs, lses = [], []
    for start in range(0, B, heads):
        out, lse = algorithm(*(x[start:start + heads] for x in flat), scale, cfg, lsh_projections, generator, group)
        outs.append(out)
        lses.append(lse)
    out = torch.cat(outs).to(q.dtype).reshape(*batch, n_q * group, v.shape[-1])
    lse = torch.cat(lses).reshape(*batch, n_q * group)
    if group > 1:  # back to (*b, H_q, n_q, ...)
        out = out.unflatten(-2, (n_q, group)).transpose(-3, -2).flatten(-4, -3)
        lse = lse.unflatten(-1, (n_q, group)).transpose(-2, -1).flatten(-3, -2)
    return out, lse
