"""The name-mover split: what the heads' queries read, and patches that reach their queries only."""
import pytest
import torch
import torch.nn.functional as F

from iclr24.subspace_patching import EndPatcher, find_name_movers, query_patch_hooks, query_read_basis
from tests.subspace_patching.test_das_on_models import _tiny_hooked_llama_and_pairs


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    lm, pairs = _tiny_hooked_llama_and_pairs()
    with torch.no_grad():  # a non-trivial norm scale, so that folding it into W_Q matters
        for block in lm.blocks:
            block.input_layernorm.weight.uniform_(0.2, 2.0)
    return lm, pairs


def test_query_hooks_give_the_heads_the_queries_of_the_patched_stream(tiny):
    lm, pairs = tiny
    patcher = EndPatcher(lm, "blocks.1.hook_resid_pre", pairs, batch_size=2)
    every_head = [(1, h) for h in range(lm.n_heads)]
    # delta = 0: the heads read the clean stream, to the bit
    zero = patcher.logit_diff_hooked(lambda w, u: (None, query_patch_hooks(lm, every_head, torch.zeros_like(w))))
    torch.testing.assert_close(zero, patcher.logit_diff(), rtol=0, atol=0)
    # delta = u - w into every head's query equals the queries of a run whose stream is the source's
    seen = {"stream": [], "hooks": []}

    def patched_stream(w, u):
        return u, {"blocks.1.attn.hook_q": lambda q: seen["stream"].append(q.clone())}

    def query_only(w, u):
        hooks = query_patch_hooks(lm, every_head, u - w)
        patch = hooks["blocks.1.attn.hook_q"]
        hooks["blocks.1.attn.hook_q"] = lambda q: seen["hooks"].append(patch(q)) or seen["hooks"][-1]
        return None, hooks

    full = patcher.logit_diff_hooked(patched_stream)
    only = patcher.logit_diff_hooked(query_only)
    for a, b in zip(seen["stream"], seen["hooks"], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(full, only)  # keys, values and the MLP still read the clean stream


def test_query_read_basis_spans_what_the_heads_queries_read(tiny):
    lm, _ = tiny
    heads = [(2, 0), (2, 3)]
    basis = query_read_basis(lm, heads)
    assert basis.shape == (16, 2 * lm.d_head)
    torch.testing.assert_close(basis.T @ basis, torch.eye(2 * lm.d_head), rtol=0, atol=1e-5)
    block = lm.blocks[2]
    x = torch.randn(5, 16)
    rest = x - (x @ basis) @ basis.T
    q = F.linear(block.input_layernorm(rest), block.self_attn.q_proj.weight).unflatten(-1, (lm.n_heads, lm.d_head))
    assert q[:, [0, 3]].abs().max() < 1e-5  # the chosen heads do not see the rest
    assert q[:, [1, 2]].abs().max() > 1e-2  # the others do


def test_name_mover_search_reports_heads_and_names_bad_layers(tiny):
    lm, pairs = tiny
    heads, rows = find_name_movers(lm, pairs, [1, 2], batch_size=2)
    assert all(layer in (1, 2) and 0 <= h < lm.n_heads for layer, h in heads)
    assert all({"head", "attention to IO", "attention to S", "direct effect", "name mover"} <= set(r) for r in rows)
    with pytest.raises(ValueError, match="layers must be < n_layers=3"):
        find_name_movers(lm, pairs, [3])
    with pytest.raises(ValueError, match="heads is empty"):
        query_read_basis(lm, [])
