"""HyperAttention inside a Hugging Face Llama with grouped-query attention (issue #61).

The model is built from a config (nothing is downloaded): 4 query heads share 2 key/value heads, as in
Llama, Mistral, Qwen and SmolLM2, whose SDPA path calls ``F.scaled_dot_product_attention(..., enable_gqa=True)``.
"""

import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")

from iclr24.hyperattention import make_hf_attention, patch_sdpa, register_hf_attention  # noqa: E402

LAYERS, N = 2, 64
CONFIG = dict(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256)
# min_seq_len 16 at n = 64 causal: approximated (from 2 x 16). Every key sampled: exact (the package's invariant).
EXACT = dict(block_size=8, sample_size=N, min_seq_len=16)
APPROX = dict(block_size=4, sample_size=4, min_seq_len=8)


def llama(attn_implementation, state_dict=None):
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG, attn_implementation=attn_implementation))
    if state_dict is not None:
        model.load_state_dict(state_dict)
    return model.double().eval()


@pytest.fixture(scope="module")
def sdpa_model():
    return llama("sdpa")


@pytest.fixture(scope="module")
def ids():
    return torch.randint(64, (2, N), generator=torch.Generator().manual_seed(1))


def logits(model, ids, **kwargs):
    with torch.no_grad():
        return model(ids, **kwargs).logits


def test_the_model_is_grouped_query():
    attn = llama("sdpa").model.layers[0].self_attn
    assert attn.num_key_value_groups == 2


def test_registered_interface_routes_a_grouped_query_llama_and_is_exact_when_every_key_is_sampled(sdpa_model, ids):
    stats = register_hf_attention("hyper_exact", **EXACT)
    model = llama("hyper_exact", sdpa_model.state_dict())
    assert model.config._attn_implementation == "hyper_exact"
    torch.testing.assert_close(logits(model, ids), logits(sdpa_model, ids), atol=1e-10, rtol=1e-10)
    assert (stats.routed, stats.fallback) == (LAYERS, 0)

    stats = register_hf_attention("hyper_approx", **APPROX)
    approx = logits(llama("hyper_approx", sdpa_model.state_dict()), ids)
    assert (stats.routed, stats.fallback) == (LAYERS, 0)
    assert not torch.allclose(approx, logits(sdpa_model, ids), atol=1e-3)  # it really is HyperAttention


def test_patch_sdpa_routes_the_grouped_query_calls_of_an_sdpa_llama(sdpa_model, ids):
    """Before #61: 0 calls routed and bit-identical output, since HF passes enable_gqa=True."""
    with patch_sdpa(**EXACT) as stats:
        exact = logits(sdpa_model, ids)
    assert (stats.routed, stats.fallback) == (LAYERS, 0)
    torch.testing.assert_close(exact, logits(sdpa_model, ids), atol=1e-10, rtol=1e-10)
    with patch_sdpa(**APPROX) as stats:
        approx = logits(sdpa_model, ids)
    assert stats.routed == LAYERS
    assert not torch.allclose(approx, logits(sdpa_model, ids), atol=1e-3)


def test_a_padded_batch_falls_back_to_sdpa_and_is_counted(sdpa_model, ids):
    mask = torch.ones_like(ids)
    mask[0, :5] = 0  # left padding
    reference = logits(sdpa_model, ids, attention_mask=mask)

    stats = register_hf_attention("hyper_padded", **APPROX)
    model = llama("hyper_padded", sdpa_model.state_dict())
    with pytest.warns(UserWarning, match="an attention mask was passed"):
        padded = logits(model, ids, attention_mask=mask)
    assert torch.equal(padded, reference)  # SDPA itself, with the padding mask honoured
    assert (stats.routed, dict(stats.fallbacks)) == (0, {"attn_mask": LAYERS})
    logits(model, ids, attention_mask=torch.ones_like(ids))  # an all-ones mask needs none: routed
    assert stats.routed == LAYERS

    with pytest.warns(UserWarning) as record, patch_sdpa(**APPROX) as stats:
        padded = logits(sdpa_model, ids, attention_mask=mask)
    messages = [str(w.message) for w in record]
    assert any("an attention mask was passed" in m for m in messages)  # the first one
    assert any("0 of 2 attention calls routed to HyperAttention; fell back: 2 attn_mask" in m for m in messages)
    assert torch.equal(padded, reference)
    assert (stats.routed, dict(stats.fallbacks)) == (0, {"attn_mask": LAYERS})


def test_generate_routes_the_prefill_and_counts_the_decode_steps(sdpa_model, ids):
    stats = register_hf_attention("hyper_generate", **EXACT)
    model = llama("hyper_generate", sdpa_model.state_dict())
    new = 4
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("error", message="HyperAttention")  # decode steps are by design: no warning
        out = model.generate(ids[:1], max_new_tokens=new, do_sample=False)
        ref = sdpa_model.generate(ids[:1], max_new_tokens=new, do_sample=False)
    assert out.shape == (1, N + new)
    assert torch.equal(out, ref)  # exact configuration: the same greedy tokens
    assert stats.routed == LAYERS  # the prefill
    assert dict(stats.fallbacks) == {"decode": LAYERS * (new - 1)}  # each later token is one query per layer

    with torch.no_grad(), patch_sdpa(**EXACT) as stats:  # the same through the patched SDPA of an "sdpa" model
        out = sdpa_model.generate(ids[:1], max_new_tokens=new, do_sample=False)
    assert torch.equal(out, ref)
    assert (stats.routed, dict(stats.fallbacks)) == (LAYERS, {"decode": LAYERS * (new - 1)})


class _Attention(torch.nn.Module):
    is_causal = True
    num_key_value_groups = 2


def test_the_interface_function_has_transformers_signature_and_layout():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    fn = make_hf_attention(**EXACT)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, N, 16, generator=g, dtype=torch.float64)
    k, v = (torch.randn(2, 2, N, 16, generator=g, dtype=torch.float64) for _ in range(2))
    out, weights = fn(_Attention(), q, k, v, None, scaling=0.25, dropout=0.0)
    ref, _ = sdpa_attention_forward(_Attention(), q, k, v, None, scaling=0.25)
    assert out.shape == (2, N, 4, 16) and weights is None
    torch.testing.assert_close(out, ref)
    assert fn.stats.routed == 1

    # what it does not implement goes to transformers' SDPA, counted
    with pytest.warns(UserWarning, match="dropout"):
        fn(_Attention(), q, k, v, None, dropout=0.1)
    with pytest.warns(UserWarning, match="softcap"):
        fn(_Attention(), q, k, v, None, softcap=None, position_bias=torch.zeros(1, 4, N, N))
    fn(_Attention(), q, k, v, None, sliding_window=N // 2)
    fn(_Attention(), q, k, v, None, sliding_window=N)  # a window as long as the keys: routed
    out, _ = fn(_Attention(), q[:, :, -1:], k, v, None)  # decode step
    torch.testing.assert_close(out, sdpa_attention_forward(_Attention(), q[:, :, -1:], k, v, None)[0])
    assert fn.stats.routed == 2
    assert dict(fn.stats.fallbacks) == {"dropout": 1, "unsupported": 2, "decode": 1}


def test_registration_refuses_transformers_own_names():
    for name in ("sdpa", "eager", "flash_attention_2", ""):
        with pytest.raises(ValueError, match="name must"):
            register_hf_attention(name)
