"""HookedLM on small Hugging Face models built from a config (no download), and on the embedded SmolLM2."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from iclr24.interp import HookedLM, Layout  # noqa: E402
from tests.interp.tiny_models import gpt2, llama  # noqa: E402


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)


MODELS = {"llama": llama, "gpt2": gpt2}


@pytest.mark.parametrize("build", MODELS.values(), ids=MODELS.keys())
def test_hooks_read_the_models_own_residual_stream(build):
    lm = build()
    tokens = torch.randint(50, (2, 7))
    names = lm.hook_names()
    assert len(names) == 5 * lm.n_layers and "blocks.1.mlp.hook_post" in names
    logits, c = lm.run_with_cache(tokens, names)
    with torch.no_grad():
        torch.testing.assert_close(logits, lm.model(input_ids=tokens).logits)
        hidden = lm.model(input_ids=tokens, output_hidden_states=True).hidden_states
    for i in range(lm.n_layers):
        torch.testing.assert_close(c[f"blocks.{i}.hook_resid_pre"], hidden[i])
        # GPT-2 and Llama are sequential: resid_post = resid_pre + attn_out + mlp_out
        torch.testing.assert_close(c[f"blocks.{i}.hook_resid_pre"] + c[f"blocks.{i}.hook_attn_out"]
                                   + c[f"blocks.{i}.hook_mlp_out"], c[f"blocks.{i}.hook_resid_post"])
        bias = getattr(lm.blocks[i].get_submodule(f"{lm.layout.mlp}.{lm.layout.mlp_out}"), "bias", None)
        mlp_out = c[f"blocks.{i}.mlp.hook_post"] @ lm.mlp_out_weight(i).T + (0 if bias is None else bias)
        torch.testing.assert_close(mlp_out, c[f"blocks.{i}.hook_mlp_out"])


@pytest.mark.parametrize("build", MODELS.values(), ids=MODELS.keys())
def test_patching_the_residual_stream_transplants_the_other_run(build):
    lm = build()
    a, b = torch.randint(50, (2, 7)), torch.randint(50, (2, 7))
    name = "blocks.1.hook_resid_pre"
    with torch.no_grad():
        _, cache_b = lm.run_with_cache(b, [name])
        patched = lm.run_with_hooks(a, {name: lambda _: cache_b[name]})
        torch.testing.assert_close(patched, lm(b))  # everything downstream comes from b
        torch.testing.assert_close(lm(a), lm.model(input_ids=a).logits)  # hooks removed
        ablated = lm.run_with_hooks(a, {"blocks.2.hook_mlp_out": torch.zeros_like}, positions=torch.tensor([6, 3]))
        assert not torch.allclose(ablated, lm(a)[torch.arange(2), torch.tensor([6, 3])])


@pytest.mark.parametrize("build", MODELS.values(), ids=MODELS.keys())
def test_resume_from_a_cached_prefix_equals_the_whole_patched_run(build):
    lm = build()
    tokens = torch.randint(50, (3, 8))
    other = tokens.clone()
    other[:, 4:] = torch.randint(50, (3, 4))
    name, positions = "blocks.1.hook_resid_pre", torch.tensor([7, 6, 5])
    with torch.no_grad():
        patch = lm.run_with_cache(other, [name])[1][name]
        expected = lm.run_with_hooks(tokens, {name: lambda _: patch}, positions=positions)
        for prefix in (0, 4):
            run = lm.resume_from(tokens, 1, prefix=prefix)
            torch.testing.assert_close(run(patch[:, prefix:], positions), expected, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(run(patch[:, prefix:], positions), expected, rtol=1e-5, atol=1e-5)  # reusable
        assert len(lm.blocks) == 3  # the blocks are put back
        # hooks inside the re-run see the positions after the prefix
        mlp = "blocks.2.mlp.hook_post"
        halve = {mlp: lambda x: x / 2}

        def halve_after_prefix(x):
            x = x.clone()
            x[:, 4:] /= 2
            return x

        expected = lm.run_with_hooks(tokens, {name: lambda _: patch, mlp: halve_after_prefix}, positions=positions)
        run = lm.resume_from(tokens, 1, prefix=4)
        torch.testing.assert_close(run(patch[:, 4:], positions, halve), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("build", MODELS.values(), ids=MODELS.keys())
def test_ragged_resume_re_runs_each_prompt_from_its_own_start(build):
    """Every row resumes from its own prompt's start (cached before it), rows pick prompts in any order and
    number, and a window may run past the position read and the sequence: the logits are the whole patched run's."""
    lm = build()
    tokens = torch.randint(50, (3, 8))
    other = tokens.clone()
    other[:, 4:] = torch.randint(50, (3, 4))
    name = "blocks.1.hook_resid_pre"
    with torch.no_grad():
        patch = lm.run_with_cache(other, [name])[1][name]
        full = lm.run_with_hooks(tokens, {name: lambda _: patch})
        starts, rows = torch.tensor([2, 4, 0]), torch.tensor([0, 1, 2, 1, 0])
        run = lm.resume_ragged(tokens, 1, starts)
        window = starts[rows][:, None] + torch.arange(5)  # row 1 (start 4) runs past the sequence's 8 positions
        positions = torch.tensor([6, 7, 4, 5, 3])
        got = run(patch[rows[:, None], window.clamp(max=7)], positions, rows)
        torch.testing.assert_close(got, full[rows, positions], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(run(patch[rows[:, None], window.clamp(max=7)], positions, rows), got)  # reusable
        assert len(lm.blocks) == 3  # the blocks are put back
        # a row whose prefix is shorter than the others' must not see their cached positions: patch position 2
        moved = patch.clone()
        moved[:, 2] += 1.0
        expected = lm.run_with_hooks(tokens, {name: lambda _: moved})[2, 5]
        torch.testing.assert_close(run(moved[2:3, 0:6], torch.tensor([5]), torch.tensor([2]))[0], expected, rtol=1e-5,
                                   atol=1e-5)
        with pytest.raises(ValueError, match="inside its window"):
            run(patch[rows[:, None], window.clamp(max=7)], positions - 4, rows)
        with pytest.raises(ValueError, match="rows must be"):
            run(patch[rows[:, None], window.clamp(max=7)], positions, rows + 3)


def test_a_ragged_window_past_the_last_position_embedding():
    """A window running past the sequence must not index a learned position table (GPT-2) past its end."""
    lm = gpt2()  # n_positions=32
    tokens = torch.randint(50, (2, 32))
    name = "blocks.1.hook_resid_pre"
    with torch.no_grad():
        patch = lm.run_with_cache(tokens, [name])[1][name]
        run = lm.resume_ragged(tokens, 1, torch.tensor([0, 30]))
        got = run(torch.stack([patch[0, 0:3], patch[1, [30, 31, 31]]]), torch.tensor([2, 30]), torch.tensor([0, 1]))
        torch.testing.assert_close(got, lm(tokens)[[0, 1], [2, 30]], rtol=1e-5, atol=1e-5)


def test_bad_names_and_unknown_architectures():
    lm = llama()
    with pytest.raises(ValueError, match="unknown hook name 'blocks.3.hook_resid_pre'"):
        lm.run_with_hooks(torch.zeros(1, 3, dtype=torch.long), {"blocks.3.hook_resid_pre": lambda x: x})
    with pytest.raises(ValueError, match="no known layout for model_type 'bert'"):
        HookedLM(transformers.BertForMaskedLM(transformers.BertConfig(vocab_size=20, hidden_size=8,
                                                                      num_hidden_layers=1, num_attention_heads=2,
                                                                      intermediate_size=8)))
    with pytest.raises(ValueError, match="has no submodule 'ffn'"):
        HookedLM(lm.model, layout=Layout("model.layers", "self_attn", "ffn", "down_proj"))
    with pytest.raises(ValueError, match="no tokenizer"):
        lm.to_tokens(["a"])


def test_load_torch_model_needs_a_local_backend():
    from iclr24.llm import load_torch_model

    with pytest.raises(ValueError, match="needs a local backend"):
        load_torch_model("openai:gpt-4o-mini")


@pytest.fixture(scope="module")
def smollm2():
    torch.set_num_threads(1)
    return HookedLM.from_llm()


def test_the_embedded_model_solves_ioi(smollm2):
    from iclr24.interp import ioi_batch, ioi_prompts, logit_difference

    batch = ioi_batch(smollm2, ioi_prompts(24, seed=0, tokenizer=smollm2.tokenizer))
    with torch.no_grad():
        ld = logit_difference(smollm2(batch.tokens, batch.end), batch.io, batch.s)
        ld_cf = logit_difference(smollm2(batch.counterfactual, batch.end), batch.io, batch.s)
    assert (ld > 0).float().mean() >= 0.8 and ld.mean() > 2.0  # the IO wins
    assert ld_cf.mean() < -2.0  # repeating the IO instead flips the answer to S
    assert smollm2.n_layers == 30 and smollm2.mlp_out_weight(0).shape == (576, 1536)


def test_a_bad_hook_name_leaves_no_hook_behind_and_resume_checks_its_inputs():
    lm = llama()
    tokens = torch.randint(50, (2, 6))
    with torch.no_grad():
        reference = lm(tokens)
        with pytest.raises(ValueError, match="unknown hook name 'blocks.9.hook_resid_pre'"):
            lm.run_with_hooks(tokens, {"blocks.0.hook_resid_pre": lambda x: 0 * x,
                                       "blocks.9.hook_resid_pre": lambda x: x})
        torch.testing.assert_close(lm(tokens), reference)  # the good hook was not left attached
        name = "blocks.1.hook_resid_pre"
        resid = lm.run_with_cache(tokens, [name])[1][name]
        run = lm.resume_from(tokens, 1, prefix=3)
        with pytest.raises(ValueError, match=r"positions must lie in \[3, 6\)"):
            run(resid[:, 3:], torch.tensor([1, 5]))
        with pytest.raises(ValueError, match="resid must be"):
            run(resid[:, 2:], torch.tensor([5, 5]))
        with pytest.raises(ValueError, match="unknown hook name 'blocks.0.hook_mlp_out'"):
            run(resid[:, 3:], torch.tensor([5, 5]), {"blocks.0.hook_mlp_out": lambda x: x})
        # a hook on the resumed block's resid_pre sees the injected residual stream and can patch it
        seen = []
        run(resid[:, 3:], torch.tensor([5, 5]), {name: lambda x: seen.append(x.clone())})
        torch.testing.assert_close(seen[0], resid[:, 3:])
        with pytest.raises(ValueError, match="positions must hold one integer index per prompt"):
            lm(tokens, positions=torch.tensor([[5], [5]]))
