import pytest
import torch

from iclr24.interp import HookedTinyTransformer, cache_only, collect_activations, hook_layer


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)


def tiny(n_layers=2, seed=0):
    torch.manual_seed(seed)
    return HookedTinyTransformer(10, 6, d_model=8, n_layers=n_layers, n_heads=2, d_mlp=16).eval()


def test_hooks_cache_and_patch_by_transformerlens_names():
    model = tiny()
    tokens = torch.randint(10, (3, 6))
    assert {"hook_embed", "blocks.0.hook_resid_pre", "blocks.1.hook_resid_post", "blocks.1.mlp.hook_post",
            "blocks.0.hook_attn_out", "blocks.0.hook_mlp_out"} <= set(model.hook_points())
    logits, cache = model.run_with_cache(tokens, ["blocks.1.hook_resid_pre"])
    torch.testing.assert_close(logits, model(tokens))
    assert cache["blocks.1.hook_resid_pre"].shape == (3, 6, 8)
    zeroed = model.run_with_hooks(tokens, {"blocks.1.hook_resid_pre": lambda x: torch.zeros_like(x)})
    assert not torch.allclose(zeroed, logits)
    torch.testing.assert_close(model(tokens), logits)  # hooks removed afterwards
    with pytest.raises(ValueError, match="unknown hook names"):
        model.run_with_hooks(tokens, {"blocks.9.hook_resid_pre": lambda x: x})


def test_the_residual_stream_adds_up_and_w_out_reads_the_mlp_hidden_activation():
    model = tiny()
    tokens = torch.randint(10, (2, 6))
    names = ["blocks.0.hook_resid_pre", "blocks.0.hook_attn_out", "blocks.0.hook_mlp_out", "blocks.0.mlp.hook_post",
             "blocks.0.hook_resid_post", "blocks.1.hook_resid_pre"]
    _, c = model.run_with_cache(tokens, names)
    torch.testing.assert_close(c["blocks.0.hook_resid_pre"] + c["blocks.0.hook_attn_out"] + c["blocks.0.hook_mlp_out"],
                               c["blocks.0.hook_resid_post"])
    torch.testing.assert_close(c["blocks.0.hook_resid_post"], c["blocks.1.hook_resid_pre"])
    bias = model.blocks[0].mlp.W_out.bias
    torch.testing.assert_close(c["blocks.0.mlp.hook_post"] @ model.mlp_out_weight(0).T + bias,
                               c["blocks.0.hook_mlp_out"])


def test_positions_give_the_logits_there():
    model = tiny()
    tokens = torch.randint(10, (4, 6))
    positions = torch.tensor([5, 2, 0, 3])
    torch.testing.assert_close(model(tokens, positions), model(tokens)[torch.arange(4), positions])


def test_cache_only_stops_after_the_last_hook():
    model = tiny(n_layers=3)
    calls = []
    model.blocks[2].register_forward_hook(lambda *a: calls.append(1))
    cache = cache_only(model, torch.randint(10, (2, 6)), ["blocks.1.hook_resid_pre"])
    assert cache["blocks.1.hook_resid_pre"].shape == (2, 6, 8) and calls == []


def test_activation_store_keeps_real_positions_only():
    model = tiny()
    tokens = torch.randint(10, (7, 6))
    lengths = torch.tensor([6, 3, 1, 6, 4, 2, 5])
    acts = collect_activations(model, tokens, "blocks.1.hook_resid_pre", lengths=lengths, skip_first=1, batch_size=3)
    full = model.run_with_cache(tokens, ["blocks.1.hook_resid_pre"])[1]["blocks.1.hook_resid_pre"]
    expected = torch.cat([full[i, 1:n] for i, n in enumerate(lengths.tolist())])
    torch.testing.assert_close(acts, expected)
    with pytest.raises(ValueError, match="lengths must hold one length"):
        collect_activations(model, tokens, "blocks.1.hook_resid_pre", lengths=torch.tensor([7] * 7))


def test_resume_from_equals_patching_the_whole_model():
    model = tiny(n_layers=3)
    tokens = torch.randint(10, (3, 6))
    other = torch.randint(10, (3, 6))
    other[:, :2] = tokens[:, :2]  # the first two positions are shared
    name = "blocks.1.hook_resid_pre"
    patch = model.run_with_cache(other, [name])[1][name]
    positions = torch.tensor([5, 4, 3])
    expected = model.run_with_hooks(tokens, {name: lambda _: patch}, positions=positions)
    run = model.resume_from(tokens, 1, prefix=2)
    torch.testing.assert_close(run(patch[:, 2:], positions), expected)
    # extra hooks during the re-run see (and patch) the positions after the prefix only
    zero_mlp = {"blocks.2.hook_mlp_out": lambda x: torch.zeros_like(x)}
    seen = []
    run(patch[:, 2:], positions, {"blocks.2.hook_mlp_out": lambda x: seen.append(x.shape)})
    assert seen == [(3, 4, 8)]

    def zero_after_prefix(x):
        x = x.clone()
        x[:, 2:] = 0
        return x

    expected = model.run_with_hooks(tokens, {name: lambda _: patch, "blocks.2.hook_mlp_out": zero_after_prefix},
                                    positions=positions)
    torch.testing.assert_close(run(patch[:, 2:], positions, zero_mlp), expected)
    with pytest.raises(ValueError, match="prefix must be < the sequence length 6"):
        model.resume_from(tokens, 1, prefix=6)


def test_ragged_resume_patches_each_rows_window_only():
    """Each row keeps the clean run before its own start and after its window; rows pick prompts in any order."""
    model = tiny(n_layers=3)
    tokens, other = torch.randint(10, (3, 6)), torch.randint(10, (3, 6))
    name = "blocks.1.hook_resid_pre"
    with torch.no_grad():
        clean = model.run_with_cache(tokens, [name])[1][name]
        patch = model.run_with_cache(other, [name])[1][name]
        run = model.resume_ragged(tokens, 1, torch.tensor([1, 3, 4]))
        rows, positions = torch.tensor([2, 0, 1, 0]), torch.tensor([5, 2, 5, 1])
        window = torch.tensor([4, 1, 3, 1])[:, None] + torch.arange(3)  # row 2's window runs past the sequence
        got = run(patch[rows[:, None], window.clamp(max=5)], positions, rows)
        for k, (row, start) in enumerate(zip(rows.tolist(), window[:, 0].tolist())):
            mixed = clean[row:row + 1].clone()
            mixed[:, start:start + 3] = patch[row:row + 1, start:start + 3]
            expected = model.run_with_hooks(tokens[row:row + 1], {name: lambda _, m=mixed: m},
                                            positions=positions[k:k + 1])
            torch.testing.assert_close(got[k:k + 1], expected)
        with pytest.raises(ValueError, match="inside its window"):
            run(patch[rows[:, None], window.clamp(max=5)], positions - 1, rows)


def test_hook_layer_and_bad_arguments():
    assert hook_layer("blocks.12.mlp.hook_post") == 12
    with pytest.raises(ValueError, match="names no block"):
        hook_layer("hook_embed")
    with pytest.raises(ValueError, match="d_model=8 must be divisible by n_heads=3"):
        HookedTinyTransformer(10, 6, d_model=8, n_heads=3)
    with pytest.raises(ValueError, match="more than the model's n_ctx=6"):
        tiny()(torch.zeros(1, 7, dtype=torch.long))
