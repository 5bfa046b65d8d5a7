import warnings

import pytest
import torch
import torch.nn.functional as F

from iclr24.hyperattention import (
    HyperAttention,
    exact_attention,
    hyper_attention,
    lsh_bucket_ranks,
    merge_attention,
    patch_sdpa,
)
from iclr24.hyperattention import attention as attention_module

TOL = {torch.float32: 1e-5, torch.float64: 1e-12}


def qkv(*shape, dtype=torch.float64, seed=0, d_v=None):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*shape, generator=g, dtype=dtype)
    k = torch.randn(*shape, generator=g, dtype=dtype)
    v_shape = (*shape[:-1], d_v or shape[-1])
    return q, k, torch.randn(*v_shape, generator=g, dtype=dtype)


# --- exactness when everything is covered ---------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("cover", ["block", "sample"])
def test_equals_exact_attention_when_blocks_or_samples_cover_every_key(dtype, causal, cover):
    q, k, v = qkv(2, 3, 300, 16, dtype=dtype)
    kwargs = {"block_size": 512, "sample_size": 4} if cover == "block" else {"block_size": 8, "sample_size": 512}
    out, lse = hyper_attention(q, k, v, causal=causal, min_seq_len=16, generator=torch.Generator().manual_seed(1),
                               **kwargs)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(out, ref, atol=TOL[dtype], rtol=TOL[dtype])
    scores = q @ k.transpose(-1, -2) / 4.0
    if causal:
        scores = scores.masked_fill(torch.ones(300, 300, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(lse, torch.logsumexp(scores, -1), atol=TOL[dtype] * 10, rtol=TOL[dtype])


def test_uses_exact_attention_below_min_seq_len_as_the_official_code():
    """Exact for n < min_seq_len, approximated from n = min_seq_len (non-causal) and from
    2 * min_seq_len (causal: the halves must reach the cut-off)."""
    q, k, v = qkv(1, 2, 256, 8)
    kw = {"block_size": 4, "sample_size": 4, "generator": torch.Generator().manual_seed(0)}
    for causal, exact_at in ((False, 257), (True, 129)):  # causal: the 128-long halves reach a cut-off of 128
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.testing.assert_close(hyper_attention(q, k, v, causal=causal, min_seq_len=exact_at, **kw)[0], ref)
        approx, _ = hyper_attention(q, k, v, causal=causal, min_seq_len=exact_at - 1, **kw)
        assert not torch.allclose(approx, ref, atol=1e-3)


@pytest.mark.parametrize("min_seq_len", [0, 1])
def test_tiny_cut_offs_still_end_the_causal_recursion(min_seq_len):
    q, k, v = qkv(1, 1, 7, 4)
    out, _ = hyper_attention(q, k, v, causal=True, block_size=2, sample_size=8, min_seq_len=min_seq_len)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_unequal_query_and_key_lengths_cover_exactly():
    q, _, _ = qkv(1, 1, 333, 8, seed=3)
    _, k, v = qkv(1, 1, 1000, 8, seed=4)
    out, _ = hyper_attention(q, k, v, block_size=64, sample_size=1000, min_seq_len=0)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))


# --- the pieces -----------------------------------------------------------------------------------------


def test_merge_of_two_key_halves_is_attention_over_all_keys():
    q, k, v = qkv(2, 50, 8)
    out1, lse1 = exact_attention(q, k[:, :20], v[:, :20])
    out2, lse2 = exact_attention(q, k[:, 20:], v[:, 20:])
    out, lse = merge_attention(out1, lse1, out2, lse2)
    ref_out, ref_lse = exact_attention(q, k, v)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(lse, ref_lse)


def test_merge_with_an_empty_part_returns_the_other():
    out1, lse1 = torch.randn(1, 3, 4), torch.randn(1, 3)
    out, lse = merge_attention(out1, lse1, torch.zeros(1, 3, 4), torch.full((1, 3), float("-inf")))
    torch.testing.assert_close(out, out1)
    torch.testing.assert_close(lse, lse1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_fast_path_equals_reference_in_values_and_gradients_of_out_and_lse(dtype, causal):
    from iclr24.hyperattention.attention import _exact_attention_reference

    q, k, v = (x.requires_grad_() for x in qkv(2, 60, 8, dtype=dtype))
    w_out, w_lse = torch.randn(2, 60, 8, dtype=dtype), torch.randn(2, 60, dtype=dtype)
    out, lse = exact_attention(q, k, v, causal=causal)
    ref_out, ref_lse = _exact_attention_reference(q, k, v, causal, 8**-0.5)
    torch.testing.assert_close((out, lse), (ref_out, ref_lse), atol=TOL[dtype] * 10, rtol=TOL[dtype] * 10)
    grads = torch.autograd.grad((out * w_out).sum() + (lse * w_lse).sum(), (q, k, v))
    ref_grads = torch.autograd.grad((ref_out * w_out).sum() + (ref_lse * w_lse).sum(), (q, k, v))
    torch.testing.assert_close(grads, ref_grads, atol=TOL[dtype] * 100, rtol=TOL[dtype] * 100)


def test_flash_fast_path_passes_gradcheck():
    q, k, v = (x.requires_grad_() for x in qkv(1, 6, 4))
    assert torch.autograd.gradcheck(lambda a, b, c: exact_attention(a, b, c, causal=True), (q, k, v))


def test_lsh_buckets_are_in_gray_code_order():
    r = 4
    projections = torch.eye(r)  # the hash bit i is the sign of coordinate i
    corners = torch.tensor([[1.0 if (c >> i) & 1 else -1.0 for i in range(r)] for c in range(2**r)])
    ranks = lsh_bucket_ranks(corners, projections)
    assert sorted(ranks.tolist()) == list(range(2**r))
    codes_by_rank = torch.empty(2**r, dtype=torch.long)
    codes_by_rank[ranks] = torch.arange(2**r)
    for a, b in zip(codes_by_rank[:-1].tolist(), codes_by_rank[1:].tolist()):
        assert bin(a ^ b).count("1") == 1, "neighbouring buckets must differ in exactly one bit"


def test_lsh_is_scale_invariant_and_shared_between_queries_and_keys():
    x = torch.randn(100, 16)
    p = torch.randn(16, 7)
    assert torch.equal(lsh_bucket_ranks(x, p), lsh_bucket_ranks(3.0 * x, p))


# --- properties of the approximation ---------------------------------------------------------------


def test_causal_output_never_depends_on_future_keys():
    q, k, v = qkv(1, 2, 512, 16)
    kwargs = {"causal": True, "block_size": 16, "sample_size": 16, "min_seq_len": 64}
    out, _ = hyper_attention(q, k, v, generator=torch.Generator().manual_seed(5), **kwargs)
    k2, v2 = k.clone(), v.clone()
    k2[..., 300:, :] = torch.randn_like(k2[..., 300:, :]) * 10
    v2[..., 300:, :] = torch.randn_like(v2[..., 300:, :]) * 10
    out2, _ = hyper_attention(q, k2, v2, generator=torch.Generator().manual_seed(5), **kwargs)
    torch.testing.assert_close(out[..., :300, :], out2[..., :300, :], atol=0, rtol=0)
    assert not torch.allclose(out[..., 300:, :], out2[..., 300:, :])


def test_same_generator_seed_gives_identical_output():
    q, k, v = qkv(1, 1, 600, 8)
    a, _ = hyper_attention(q, k, v, block_size=32, sample_size=32, min_seq_len=0,
                           generator=torch.Generator().manual_seed(7))
    b, _ = hyper_attention(q, k, v, block_size=32, sample_size=32, min_seq_len=0,
                           generator=torch.Generator().manual_seed(7))
    assert torch.equal(a, b)


def planted(n=2048, d=32, strength=12.0, seed=0):
    """Each query is a noisy copy of one key: one large entry per row (about 90% of its mass)."""
    g = torch.Generator().manual_seed(seed)
    k = torch.nn.functional.normalize(torch.randn(n, d, generator=g), dim=-1)
    q = strength * k[torch.randperm(n, generator=g)] + 0.3 * torch.randn(n, d, generator=g)
    return q, k, torch.randn(n, d, generator=g)


def test_sampling_and_blocks_together_beat_either_alone_on_planted_heavy_keys():
    q, k, v = planted()
    exact = F.scaled_dot_product_attention(q, k, v, scale=1.0)

    def err(**kw):
        errors = []
        for seed in range(3):
            out, _ = hyper_attention(q, k, v, scale=1.0, min_seq_len=0, generator=torch.Generator().manual_seed(seed),
                                     **kw)
            errors.append(((out - exact).norm() / exact.norm()).item())
        return sum(errors) / len(errors)

    both, blocks_only, sampling_only = (err(block_size=64, sample_size=64), err(block_size=64, sample_size=0),
                                        err(block_size=0, sample_size=64))
    assert both < blocks_only and both < sampling_only, (both, blocks_only, sampling_only)


def test_gradients_match_exact_attention_when_covered():
    q, k, v = (x.requires_grad_() for x in qkv(1, 2, 128, 8))
    out, _ = hyper_attention(q, k, v, causal=True, block_size=8, sample_size=256, min_seq_len=16)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    ref_grads = torch.autograd.grad(ref.square().sum(), (q, k, v))
    for g_, r_ in zip(grads, ref_grads):
        torch.testing.assert_close(g_, r_)


# --- shapes and dtypes ------------------------------------------------------------------------------------


def test_batch_dimensions_broadcast_like_sdpa():
    q, _, _ = qkv(2, 3, 64, 8)
    _, k, v = qkv(1, 3, 64, 8, seed=1, d_v=5)
    out, lse = hyper_attention(q, k, v, min_seq_len=0, block_size=128)
    assert out.shape == (2, 3, 64, 5) and lse.shape == (2, 3, 64)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k.expand(2, -1, -1, -1),
                                                                   v.expand(2, -1, -1, -1)))


def test_bfloat16_input_gives_bfloat16_output_close_to_float32():
    q, k, v = qkv(1, 2, 256, 16, dtype=torch.float32)
    out32, _ = hyper_attention(q, k, v, block_size=512, min_seq_len=0)
    out16, lse16 = hyper_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), block_size=512, min_seq_len=0)
    assert out16.dtype == torch.bfloat16 and lse16.dtype == torch.float32
    torch.testing.assert_close(out16.float(), out32, atol=2e-2, rtol=2e-2)


# --- errors -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda q, k, v: (q[..., :4], k, v), "same head dimension d"),
        (lambda q, k, v: (q, k, v[..., :10, :]), "same length n_k"),
        (lambda q, k, v: (q[:, :, :10], k, v), "as many queries as keys"),
        (lambda q, k, v: (q.masked_fill(q > 2, float("nan")), k, v), "q must be finite"),
        (lambda q, k, v: (q, k.long(), v), "k must have dtype"),
        (lambda q, k, v: (q, k.float(), v), "share a dtype"),
        (lambda q, k, v: (q[:1, :2], k[:, :3], v[:, :3]), "do not broadcast"),
        (lambda q, k, v: (q[0, 0, 0], k, v), r"q must have at least 2 dimensions \(\*batch, n, d\)"),
    ],
)
def test_bad_inputs_raise_clear_errors(change, match):
    q, k, v = qkv(2, 3, 32, 8)
    with pytest.raises((ValueError, TypeError), match=match):
        hyper_attention(*change(q, k, v), causal=True)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"block_size": -1}, "block_size must be >= 0, got -1"),
        ({"block_size": 0, "sample_size": 0}, "cannot both be 0"),
        ({"sample_size": 2.5}, "sample_size must be an int, got 2.5"),
        ({"lsh_num_projs": 17}, "lsh_num_projs must be <= 16"),
        ({"min_seq_len": -1}, "min_seq_len must be >= 0"),
        ({"lsh_projections": torch.randn(8, 3)}, r"lsh_projections must have shape \(d, lsh_num_projs\)"),
    ],
)
def test_bad_parameters_raise_clear_errors(kwargs, match):
    q, k, v = qkv(1, 32, 8)
    with pytest.raises((ValueError, TypeError), match=match):
        hyper_attention(q, k, v, **kwargs)


# --- the module and the SDPA patch ----------------------------------------------------------------------


def test_module_repr_and_buffer():
    attn = HyperAttention(head_dim=16, block_size=64)
    assert repr(attn) == ("HyperAttention(head_dim=16, block_size=64, sample_size=256, lsh_num_projs=7, "
                          "min_seq_len=4096)")
    assert attn.lsh_projections.shape == (16, 7)
    # not in state_dict: a model saved with exact attention loads strictly into one with HyperAttention
    assert "lsh_projections" not in attn.state_dict()
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), attn)
    model.load_state_dict(torch.nn.Sequential(torch.nn.Linear(16, 16)).state_dict(), strict=True)


def test_module_is_an_sdpa_drop_in():
    q, k, v = qkv(2, 2, 128, 16, dtype=torch.float32)
    attn = HyperAttention(head_dim=16, min_seq_len=4096)
    torch.testing.assert_close(attn(q, k, v, is_causal=True), F.scaled_dot_product_attention(q, k, v, is_causal=True))
    attn = HyperAttention(head_dim=16, block_size=16, sample_size=16, min_seq_len=32)
    torch.manual_seed(3)
    a = attn(q, k, v, None, 0.0, True)
    torch.manual_seed(3)
    b, _ = hyper_attention(q, k, v, causal=True, block_size=16, sample_size=16, min_seq_len=32,
                           lsh_projections=attn.lsh_projections)
    torch.testing.assert_close(a, b)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"attn_mask": torch.ones(8, 8, dtype=torch.bool)}, "takes no attn_mask"),
        ({"dropout_p": 0.1}, "dropout_p must be 0.0"),
    ],
)
def test_module_refuses_what_it_cannot_do(kwargs, match):
    q, k, v = qkv(1, 8, 16, dtype=torch.float32)
    with pytest.raises(ValueError, match=match):
        HyperAttention(head_dim=16)(q, k, v, **kwargs)


def test_module_checks_head_dim():
    q, k, v = qkv(1, 8, 16, dtype=torch.float32)
    with pytest.raises(ValueError, match="built for head_dim=32"):
        HyperAttention(head_dim=32)(q, k, v)


def test_patch_sdpa_routes_long_sequences_and_restores():
    q, k, v = qkv(1, 1, 512, 16, dtype=torch.float32)
    exact = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    original = F.scaled_dot_product_attention
    with patch_sdpa(block_size=16, sample_size=16, min_seq_len=64) as stats:
        approx = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        short = F.scaled_dot_product_attention(q[..., :127, :], k[..., :127, :], v[..., :127, :], is_causal=True)
    assert F.scaled_dot_product_attention is original
    assert not torch.allclose(approx, exact)
    torch.testing.assert_close(approx[..., :64, :], exact[..., :64, :])  # causal leaves are exact
    torch.testing.assert_close(short, exact[..., :127, :])  # below 2 * min_seq_len causal: SDPA itself
    assert (stats.routed, dict(stats.fallbacks)) == (1, {"short": 1})


def test_patch_sdpa_counts_every_fallback_by_reason_and_warns_once_per_unexpected_reason():
    """Issue #61: nothing said whether calls were routed. Masks, dropout, decode steps, short and
    misaligned causal calls go to SDPA, each counted; an unexpected reason warns once."""
    q, k, v = qkv(1, 2, 128, 16, dtype=torch.float32)
    mask = torch.ones(128, 128, dtype=torch.bool).tril()
    with patch_sdpa(block_size=16, sample_size=16, min_seq_len=32) as stats:
        with pytest.warns(UserWarning, match=r"an attention mask was passed.*fallbacks\['attn_mask'\]"):
            masked = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message="HyperAttention")  # the second masked call: counted only
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            F.scaled_dot_product_attention(q[..., :1, :], k, v)  # a decode step: by design, no warning
            F.scaled_dot_product_attention(q[..., :20, :], k, v)  # short: by design
        with pytest.warns(UserWarning, match="dropout"):
            F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
        with pytest.warns(UserWarning, match="n_q != n_k"):
            F.scaled_dot_product_attention(q[..., :100, :], k, v, is_causal=True)
        F.scaled_dot_product_attention(q, k, v)
    assert stats.routed == 1
    assert dict(stats.fallbacks) == {"attn_mask": 2, "decode": 1, "short": 1, "dropout": 1, "causal_lengths": 1}
    assert stats.fallback == 6 and stats.calls == 7
    torch.testing.assert_close(masked, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    assert "1 of 7 attention calls routed" in stats.summary()


def test_patch_sdpa_warns_on_leaving_a_block_that_routed_nothing():
    q, k, v = qkv(1, 1, 64, 8, dtype=torch.float32)
    with pytest.warns(UserWarning, match=r"0 of 2 attention calls routed to HyperAttention; fell back: 2 short"):
        with patch_sdpa() as stats:
            F.scaled_dot_product_attention(q, k, v)
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
    with pytest.warns(UserWarning, match="nothing called torch.nn.functional.scaled_dot_product_attention"):
        with patch_sdpa():
            pass
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with patch_sdpa(warn=False) as quiet:
            F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(64, 64, dtype=torch.bool))
    assert quiet.fallbacks == {"attn_mask": 1} and stats.fallbacks == {"short": 2}


@pytest.mark.parametrize("causal", [False, True])
def test_patch_sdpa_routes_grouped_query_calls(causal):
    """Issue #61: HF passes enable_gqa=True for Llama-style models, which the patch used to decline."""
    q, _, _ = qkv(2, 4, 256, 16, dtype=torch.float64)
    _, k, v = qkv(2, 2, 256, 16, dtype=torch.float64, seed=1)
    with patch_sdpa(block_size=16, sample_size=256, min_seq_len=32) as stats:  # every key sampled: exact
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    assert (stats.routed, stats.fallback) == (1, 0)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True))
    with patch_sdpa(block_size=16, sample_size=16, min_seq_len=32) as stats:
        approx = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        with pytest.raises(RuntimeError), pytest.warns(UserWarning, match="not a multiple"):
            F.scaled_dot_product_attention(q[:, :3], k, v, enable_gqa=True)  # SDPA's own error, counted
    assert not torch.allclose(approx, out, atol=1e-3)
    assert (stats.routed, dict(stats.fallbacks)) == (1, {"gqa_heads": 1})


# --- grouped-query attention (enable_gqa) -----------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("cover", ["block", "sample"])
def test_grouped_query_attention_equals_sdpa_when_blocks_or_samples_cover_every_key(causal, cover):
    q, _, _ = qkv(2, 6, 300, 16)
    _, k, v = qkv(2, 2, 300, 16, seed=1)
    kwargs = {"block_size": 512, "sample_size": 4} if cover == "block" else {"block_size": 8, "sample_size": 512}
    out, lse = hyper_attention(q, k, v, causal=causal, min_seq_len=16, enable_gqa=True,
                               generator=torch.Generator().manual_seed(1), **kwargs)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True))
    scores = q @ k.repeat_interleave(3, dim=1).transpose(-1, -2) / 4.0  # query head h uses key head h // 3
    if causal:
        scores = scores.masked_fill(torch.ones(300, 300, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(lse, torch.logsumexp(scores, -1))


def test_grouped_query_attention_shares_key_heads_without_copying_them(monkeypatch):
    """The algorithm sees B * H_kv key heads (each with its G query heads as one sequence), never B * H_q."""
    seen = []
    causal = attention_module._causal

    def spy(q, k, v, *args):
        seen.append((tuple(q.shape), tuple(k.shape), k.untyped_storage().nbytes()))
        return causal(q, k, v, *args)

    monkeypatch.setattr(attention_module, "_causal", spy)
    q, _, _ = qkv(1, 8, 128, 16, dtype=torch.float32)
    _, k, v = qkv(1, 2, 128, 16, dtype=torch.float32, seed=1)
    hyper_attention(q, k, v, causal=True, block_size=16, sample_size=16, min_seq_len=16, enable_gqa=True)
    assert seen[0][:2] == ((2, 128 * 4, 16), (2, 128, 16))
    assert seen[0][2] == k.numel() * k.element_size()  # the keys are k's own storage, not k repeated 4 times


def test_grouped_query_attention_with_a_value_dim_unlike_d_uses_the_readable_path_exactly():
    q, _, _ = qkv(1, 4, 64, 8)
    _, k, v = qkv(1, 1, 64, 8, seed=1, d_v=5)
    out, _ = hyper_attention(q, k, v, causal=True, block_size=4, sample_size=64, min_seq_len=8, enable_gqa=True)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))


def test_grouped_query_gradients_match_sdpa():
    q, _, _ = qkv(1, 4, 96, 8)
    _, k, v = qkv(1, 2, 96, 8, seed=1)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    out, _ = hyper_attention(q, k, v, causal=True, block_size=8, sample_size=256, min_seq_len=16, enable_gqa=True)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    for g_, r_ in zip(torch.autograd.grad(out.square().sum(), (q, k, v)),
                      torch.autograd.grad(ref.square().sum(), (q, k, v))):
        torch.testing.assert_close(g_, r_)


def test_grouped_query_cut_off_counts_positions_not_the_groups_queries():
    q, _, _ = qkv(1, 4, 256, 8)
    _, k, v = qkv(1, 1, 256, 8, seed=1)
    kw = {"block_size": 4, "sample_size": 4, "enable_gqa": True, "generator": torch.Generator().manual_seed(0)}
    ref = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    torch.testing.assert_close(hyper_attention(q, k, v, min_seq_len=257, **kw)[0], ref)  # 256 positions: exact
    assert not torch.allclose(hyper_attention(q, k, v, min_seq_len=256, **kw)[0], ref, atol=1e-3)


def test_grouped_query_errors_name_the_heads():
    q, k, v = qkv(1, 4, 32, 8)
    with pytest.raises(ValueError, match=r"do not broadcast; for grouped-query attention .* pass enable_gqa=True"):
        hyper_attention(q, k[:, :2], v[:, :2])
    with pytest.raises(ValueError, match="multiple of the key/value heads, got 4 query heads .* and 3 key/value"):
        hyper_attention(q, k[:, :3], v[:, :3], enable_gqa=True)
    with pytest.raises(ValueError, match="k and v with the same number of heads"):
        hyper_attention(q, k[:, :2], v[:, :1], enable_gqa=True)
    with pytest.raises(ValueError, match=r"enable_gqa=True needs q, k and v with a heads dimension"):
        hyper_attention(q[0, 0], k[0, 0], v[0, 0], enable_gqa=True)
    with pytest.raises(TypeError, match="enable_gqa must be True or False, got 'yes'"):
        hyper_attention(q, k, v, enable_gqa="yes")


def test_module_serves_grouped_query_attention():
    q, _, _ = qkv(1, 4, 64, 16, dtype=torch.float32)
    _, k, v = qkv(1, 2, 64, 16, dtype=torch.float32, seed=1)
    out = HyperAttention(head_dim=16, min_seq_len=4096)(q, k, v, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))


# --- edge cases of the public functions (issue #59) ---------------------------------------------------------


def test_head_dim_zero_is_a_clear_error_not_a_zero_division():
    q = torch.randn(1, 2, 16, 0)
    with pytest.raises(ValueError, match=r"head dimension d >= 1 .* got d=0: q \(1, 2, 16, 0\)"):
        hyper_attention(q, q, q)
    with pytest.raises(ValueError, match=r"head dimension d >= 1 .* got d=0"):
        exact_attention(q[0], q[0], q[0])


def test_lsh_bucket_ranks_refuses_more_than_16_projections_before_allocating():
    x = torch.randn(10, 4)
    with pytest.raises(ValueError, match=r"projections must have at most 16 columns .* got r=40 \(projections "
                                         r"\(4, 40\)\)"):
        lsh_bucket_ranks(x, torch.randn(4, 40))  # used to build a 2^40-entry table (8 TB)
    assert lsh_bucket_ranks(x, torch.randn(4, 16)).max() < 2**16
    with pytest.raises(ValueError, match=r"projections must be \(d, r\) for x \(..., n, d\)"):
        lsh_bucket_ranks(x, torch.randn(5, 3))
    with pytest.raises(ValueError, match=r"projections must have 2 dimensions \(d, r\)"):
        lsh_bucket_ranks(x, torch.randn(4))
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got list"):
        lsh_bucket_ranks([[1.0]], torch.randn(1, 2))


def test_scale_causal_and_empty_queries_are_checked():
    import numpy as np

    q = torch.randn(1, 1, 16, 8)
    with pytest.raises(ValueError, match="scale must be finite"):
        hyper_attention(q, q, q, scale=float("nan"))
    with pytest.raises(ValueError, match="scale must be > 0"):
        hyper_attention(q, q, q, scale=-0.5)
    with pytest.raises(TypeError, match="causal must be True or False, got 'no'"):
        hyper_attention(q, q, q, causal="no")
    with pytest.raises(ValueError, match="at least one query, got n_q=0"):
        hyper_attention(q[:, :, :0], q, q)
    a, _ = hyper_attention(q, q, q, scale=np.float32(0.25))
    b, _ = hyper_attention(q, q, q, scale=0.25)
    torch.testing.assert_close(a, b)


def test_the_sampled_residual_is_rescaled_so_row_sums_are_unbiased():
    # 400 heads share one q, k, v and each draws its own columns: the mean estimated row sum
    # exp(lse) must match the exact one. Without the n/m weight it falls far short.
    torch.manual_seed(0)
    n, d, heads = 64, 8, 400
    q, k, v = (torch.randn(1, n, d).expand(heads, n, d).contiguous() for _ in range(3))
    _, lse = hyper_attention(q, k, v, block_size=16, sample_size=16, min_seq_len=0,
                             generator=torch.Generator().manual_seed(0))
    _, exact_lse = exact_attention(q[:1], k[:1], v[:1], scale=d**-0.5)
    ratio = lse.exp().mean(0) / exact_lse[0].exp()
    assert abs(ratio.mean().item() - 1) < 0.02 and ratio.min() > 0.93 and ratio.max() < 1.1


def test_sort_lsh_puts_clustered_queries_with_their_keys():
    # Clustered queries and keys in random order: sorting by LSH bucket brings each cluster into
    # one block. Zero hyperplanes give every row the same bucket, i.e. no sorting at all.
    torch.manual_seed(0)
    n, d = 1024, 16
    centres = torch.randn(16, d) * 4
    x = centres[torch.randint(16, (n,))] + 0.3 * torch.randn(n, d)
    q, k, v = x[None], (x + 0.1 * torch.randn(n, d))[None], torch.randn(1, n, d)
    exact, _ = exact_attention(q, k, v)

    def error(projections):
        out, _ = hyper_attention(q, k, v, block_size=64, sample_size=64, min_seq_len=0,
                                 lsh_projections=projections, generator=torch.Generator().manual_seed(1))
        return ((out - exact).norm() / exact.norm()).item()

    sorted_error = error(torch.randn(d, 7, generator=torch.Generator().manual_seed(2)))
    assert sorted_error < 0.6 * error(torch.zeros(d, 7))
    # lsh_num_projs=0 is that control: blocks in the input order
    unsorted, _ = hyper_attention(q, k, v, block_size=64, sample_size=64, min_seq_len=0, lsh_num_projs=0,
                                  generator=torch.Generator().manual_seed(1))
    assert ((unsorted - exact).norm() / exact.norm()).item() == pytest.approx(error(torch.zeros(d, 7)), rel=1e-6)


def test_query_and_key_blocks_stay_aligned_when_n_is_not_a_multiple_of_the_block_size():
    # q == k with a sharp scale: each query attends to itself. Blocks alone (no sampling) find it only
    # if query block j and key block j hold the same sorted positions.
    torch.manual_seed(0)
    x = F.normalize(torch.randn(1, 130, 16), dim=-1)
    v = torch.randn(1, 130, 16)
    out, _ = hyper_attention(x, x, v, block_size=64, sample_size=0, min_seq_len=0, scale=60.0)
    exact, _ = exact_attention(x, x, v, scale=60.0)
    assert ((out - exact).norm() / exact.norm()).item() < 0.05
