"""DAS and END-token patching on a tiny trained IOI transformer and on a hooked HF model."""

import pytest
import torch

from iclr24.interp import ioi_dataset, prompt_lengths, train_ioi_model
from iclr24.subspace_patching import EndPatcher, PatchingPairs, fldd, patch_direction, train_das


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny_ioi():
    torch.set_num_threads(1)
    data = ioi_dataset(templates=[0], names=["Mary", "John", "Alice", "Bob"])
    model = train_ioi_model(data, steps=150, d_model=32, n_layers=2, n_heads=2, d_mlp=64)
    # base: the clean prompt; source: its counterfactual (the other name repeated), so the answer flips
    pairs = PatchingPairs(data.clean, data.counterfactual, prompt_lengths(data.clean), data.answer, data.cf_answer)
    return model, pairs


def test_end_patcher_clean_and_full_patches_match_the_hooked_model(tiny_ioi):
    model, pairs = tiny_ioi
    hook = "blocks.1.hook_resid_pre"
    patcher = EndPatcher(model, hook, pairs, batch_size=5)
    end = pairs.lengths - 1
    rows = torch.arange(len(pairs))
    with torch.no_grad():
        logits = model(pairs.base, end)
        ld = logits[rows, pairs.answer] - logits[rows, pairs.other]
        torch.testing.assert_close(patcher.logit_diff(), ld, atol=1e-5, rtol=1e-5)
        source = model.run_with_cache(pairs.source, [hook])[1][hook]

        def patch_end(x):
            x = x.clone()
            x[rows, end] = source[rows, end]
            return x

        patched = model.run_with_hooks(pairs.base, {hook: patch_end}, positions=end)
    expected = patched[rows, pairs.answer] - patched[rows, pairs.other]
    torch.testing.assert_close(patcher.logit_diff(lambda w, u: u), expected, atol=1e-5, rtol=1e-5)
    assert fldd(patcher.logit_diff(lambda w, u: w), patcher.logit_diff()) == pytest.approx(0.0, abs=1e-4)


def test_das_finds_a_direction_that_moves_the_answer(tiny_ioi):
    model, pairs = tiny_ioi
    patcher = EndPatcher(model, "blocks.1.hook_resid_post", pairs, batch_size=6)  # after the name moves to END
    clean = patcher.logit_diff()
    assert clean.mean() > 2  # the model solves its task
    full = fldd(patcher.logit_diff(lambda w, u: u), clean)
    das = train_das(patcher, k=1, epochs=8, lr=0.05, seed=0)
    v = das.basis[:, 0].detach()
    learned = fldd(patcher.logit_diff(lambda w, u: patch_direction(w, u, v)), clean)
    random_v = torch.randn(v.shape, generator=torch.Generator().manual_seed(0))
    chance = fldd(patcher.logit_diff(lambda w, u: patch_direction(w, u, random_v)), clean)
    assert full > 100 and learned > 60 and learned > chance + 40
    assert all(p.requires_grad for p in model.parameters())  # the model is left as it was


def _tiny_hooked_llama_and_pairs():
    """A seeded 3-layer Llama under HookedLM, and 6 patching pairs of up to 7 tokens differing at position 3."""
    transformers = pytest.importorskip("transformers")
    from iclr24.interp import HookedLM

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=30, hidden_size=16, intermediate_size=32, num_hidden_layers=3,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    lm = HookedLM(transformers.LlamaForCausalLM(cfg))
    base = torch.randint(30, (6, 7))
    source = base.clone()
    source[:, 3] = torch.randint(30, (6,))
    pairs = PatchingPairs(base, source, torch.tensor([7, 7, 6, 6, 5, 7]), torch.randint(30, (6,)),
                          torch.randint(30, (6,)))
    return lm, pairs


def test_end_patcher_on_a_hooked_hf_model_patches_the_mlp_hidden_activation():
    lm, pairs = _tiny_hooked_llama_and_pairs()
    base, source, lengths = pairs.base, pairs.source, pairs.lengths
    hook = "blocks.1.mlp.hook_post"
    patcher = EndPatcher(lm, hook, pairs, batch_size=2)
    rows, end = torch.arange(6), lengths - 1
    with torch.no_grad():
        src = lm.run_with_cache(source, [hook])[1][hook]
        expected = torch.empty(6)
        for i in range(6):  # one prompt at a time, unpadded, full model, patched at END
            n = int(lengths[i])

            def patch_end(x, i=i, n=n):
                x = x.clone()
                x[0, n - 1] = src[i, n - 1]
                return x

            logits = lm.run_with_hooks(base[i:i + 1, :n], {hook: patch_end}, positions=torch.tensor([n - 1]))[0]
            expected[i] = logits[pairs.answer[i]] - logits[pairs.other[i]]
    torch.testing.assert_close(patcher.logit_diff(lambda w, u: u), expected, atol=1e-4, rtol=1e-4)
    assert rows.numel() == 6 and end.numel() == 6


def test_patchers_for_several_hooks_share_the_clean_runs_and_equal_one_patcher_each():
    lm, pairs = _tiny_hooked_llama_and_pairs()
    hooks = ["blocks.1.hook_resid_pre", "blocks.2.hook_resid_pre", "blocks.1.mlp.hook_post"]
    calls = []
    run_with_cache = lm.run_with_cache
    lm.run_with_cache = lambda *a, **k: calls.append(a[1]) or run_with_cache(*a, **k)
    shared = EndPatcher.for_hooks(lm, hooks, pairs, batch_size=2)
    assert len(calls) == 2 * 4  # base and source once per batch (4 batches of one length), for all hooks
    v = torch.nn.functional.normalize(torch.randn(32), dim=0)
    for hook in hooks:
        alone = EndPatcher(lm, hook, pairs, batch_size=2)
        patch = (lambda w, u: patch_direction(w, u, v)) if "mlp" in hook else (lambda w, u: u)
        torch.testing.assert_close(shared[hook].logit_diff(patch), alone.logit_diff(patch), rtol=0, atol=0)
        torch.testing.assert_close(shared[hook].logit_diff(), alone.logit_diff(), rtol=0, atol=0)
