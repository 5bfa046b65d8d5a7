"""Small Hugging Face causal LMs built from configs (no download), randomly initialised with seed 0, wrapped in
HookedLM: Llama (grouped-query attention, rotary), GPT-2 (fused concatenated qkv, learned positions) and GPT-NeoX
(fused per-head qkv, partial rotary, parallel or sequential residual)."""

import pytest

transformers = pytest.importorskip("transformers")

import torch  # noqa: E402

from iclr24.interp import HookedLM  # noqa: E402


def llama():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=3,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    return HookedLM(transformers.LlamaForCausalLM(cfg))


def gpt2():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=50, n_embd=16, n_layer=3, n_head=4, n_positions=32)
    return HookedLM(transformers.GPT2LMHeadModel(cfg))


def neox(parallel=True):
    torch.manual_seed(0)
    cfg = transformers.GPTNeoXConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=3,
                                     num_attention_heads=4, max_position_embeddings=32, rotary_pct=0.5,
                                     use_parallel_residual=parallel)
    return HookedLM(transformers.GPTNeoXForCausalLM(cfg))
