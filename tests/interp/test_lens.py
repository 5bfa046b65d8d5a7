"""TransformerLens's calling conventions on the hooked models (issue #61): fwd_hooks with fn(activation, hook),
filters, bwd_hooks, run_with_cache with no names or names_filter, ActivationCache keys, hook_names/hook_dict,
each checked against the package's own API, and clear errors."""

import pytest
import torch

from iclr24.interp import ActivationCache, HookedTinyTransformer, get_act_name


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)


def tiny(n_layers=3, seed=0):
    torch.manual_seed(seed)
    return HookedTinyTransformer(10, 6, d_model=8, n_layers=n_layers, n_heads=2, d_mlp=16).eval()


def test_fwd_hooks_patch_equals_the_dict_patch_and_resume_from():
    model = tiny()
    tokens, other = torch.randint(10, (3, 6)), torch.randint(10, (3, 6))
    other[:, :2] = tokens[:, :2]
    name = "blocks.1.hook_resid_pre"
    positions = torch.tensor([5, 4, 3])
    with torch.no_grad():
        patch = model.run_with_cache(other, [name])[1][name]

        def patch_hook(activation, hook):
            assert hook.name == name and hook.layer() == 1 and hook is model.hook_dict[name]
            return patch

        lens = model.run_with_hooks(tokens, fwd_hooks=[(name, patch_hook)], positions=positions)
        ours = model.run_with_hooks(tokens, {name: lambda _: patch}, positions=positions)
        assert torch.equal(lens, ours)
        torch.testing.assert_close(lens, model.resume_from(tokens, 1, prefix=2)(patch[:, 2:], positions))
        # a hook that returns None reads: the logits are bitwise the model's; hooks are removed afterwards
        seen = []
        read = model.run_with_hooks(tokens, fwd_hooks=[(name, lambda x, hook: seen.append(x.shape))])
        assert torch.equal(read, model(tokens)) and seen == [(3, 6, 8)]
        assert all(point.fn is None for point in model.hook_dict.values())


def test_a_filter_hooks_every_matching_point_and_hooks_at_one_point_run_in_order():
    model = tiny()
    tokens = torch.randint(10, (2, 6))
    with torch.no_grad():
        names = []

        def ablate(x, hook):
            names.append(hook.name)
            return torch.zeros_like(x)

        lens = model.run_with_hooks(tokens, fwd_hooks=[(lambda n: n.endswith("hook_mlp_out"), ablate)])
        assert names == [f"blocks.{i}.hook_mlp_out" for i in range(3)]
        ours = model.run_with_hooks(tokens, {n: torch.zeros_like for n in names})
        assert torch.equal(lens, ours)
        # several hooks at one point: each sees what the one before returned (TransformerLens's order),
        # after a hook of the package's own dict
        name = "blocks.0.hook_resid_post"
        lens = model.run_with_hooks(tokens, {name: lambda x: x - 1},
                                    fwd_hooks=[(name, lambda x, hook: x + 3), (name, lambda x, hook: None),
                                               (name, lambda x, hook: 2 * x)])
        assert torch.equal(lens, model.run_with_hooks(tokens, {name: lambda x: 2 * (x - 1 + 3)}))
        # hook.ctx lives between runs; clear_contexts=True empties it at the end
        model.run_with_hooks(tokens, fwd_hooks=[(name, lambda x, hook: hook.ctx.update(n=1))])
        assert model.hook_dict[name].ctx == {"n": 1}
        model.run_with_hooks(tokens, fwd_hooks=[(name, lambda x, hook: None)], clear_contexts=True)
        assert model.hook_dict[name].ctx == {}


def test_run_with_cache_without_names_caches_every_hook_point_like_the_named_call():
    model = tiny()
    tokens = torch.randint(10, (3, 6))
    logits, cache = model.run_with_cache(tokens)
    names = model.hook_names(every=True)
    assert isinstance(cache, ActivationCache) and isinstance(cache, dict)
    assert sorted(cache) == sorted(names) == sorted(model.hook_dict) and len(names) == 1 + 6 * 3
    ref_logits, ref = model.run_with_cache(tokens, names)
    assert torch.equal(logits, ref_logits) and torch.equal(logits, model(tokens))
    assert all(torch.equal(cache[n], ref[n]) for n in names)
    # names_filter as a str, a list and a filter; the package's positional names take the same forms
    for spec, expected in [("blocks.1.hook_resid_pre", ["blocks.1.hook_resid_pre"]),
                           (["blocks.2.mlp.hook_post", "hook_embed"], ["blocks.2.mlp.hook_post", "hook_embed"]),
                           (lambda n: "resid_mid" in n, [f"blocks.{i}.hook_resid_mid" for i in range(3)])]:
        for _, got in (model.run_with_cache(tokens, names_filter=spec), model.run_with_cache(tokens, spec)):
            assert sorted(got) == sorted(expected) and all(torch.equal(got[n], ref[n]) for n in expected)
    # TransformerLens's keys
    assert torch.equal(cache["resid_pre", 1], cache["blocks.1.hook_resid_pre"])
    assert torch.equal(cache["post", -1], cache["blocks.2.mlp.hook_post"])
    assert torch.equal(cache["embed"], cache["hook_embed"])
    assert get_act_name("pattern", 0) == "blocks.0.attn.hook_pattern" and get_act_name("z5") == "blocks.5.attn.hook_z"
    assert get_act_name("mlp_out", 3) == "blocks.3.hook_mlp_out" and get_act_name("scale") == "ln_final.hook_scale"
    # TransformerLens's options
    assert type(model.run_with_cache(tokens, names_filter="hook_embed", return_cache_object=False)[1]) is dict
    one = model.run_with_cache(tokens[:1], remove_batch_dim=True)[1]
    assert one["resid_post", 0].shape == (6, 8) and torch.equal(one["resid_post", 0], cache["resid_post", 0][0])
    positions = torch.tensor([1, 2, 3])
    end_logits, end_cache = model.run_with_cache(tokens, names_filter="hook_embed", positions=positions)
    assert torch.equal(end_logits, model(tokens, positions)) and end_cache["hook_embed"].shape == (3, 6, 8)


def test_hook_names_hook_dict_and_mod_dict():
    model = tiny(n_layers=2)
    assert model.hook_names() == [f"blocks.{i}.{p}" for i in range(2) for p in
                                  ("hook_resid_pre", "hook_attn_out", "hook_mlp_out", "mlp.hook_post",
                                   "hook_resid_post")]
    assert set(model.hook_names()) < set(model.hook_names(every=True)) == set(model.hook_points())
    assert all(point.name == name for name, point in model.hook_dict.items())
    assert model.mod_dict["blocks.1.mlp"] is model.blocks[1].mlp and "" not in model.mod_dict


def test_bwd_hooks_see_the_gradient_at_the_hook_point():
    model = tiny()
    tokens = torch.randint(10, (2, 6))
    name = "blocks.1.hook_resid_mid"
    # the package's way: patch the point with a leaf and differentiate
    leaf = model.run_with_cache(tokens, [name])[1][name].clone().requires_grad_()
    expected = torch.autograd.grad(model.run_with_hooks(tokens, {name: lambda _: leaf})[:, -1, 3].sum(), leaf)[0]
    grads = []
    logits = model.run_with_hooks(tokens, bwd_hooks=[(name, lambda g, hook: grads.append((hook.name, g)))])
    assert torch.equal(logits, model(tokens))
    logits[:, -1, 3].sum().backward()
    assert [n for n, _ in grads] == [name]
    torch.testing.assert_close(grads[0][1], expected)
    # TransformerLens's idiom for backward hooks: reset_hooks_end=False, backward, reset_hooks()
    grads.clear()
    model.run_with_hooks(tokens, bwd_hooks=[(name, lambda g, hook: grads.append((hook.name, g)))],
                         reset_hooks_end=False)[:, -1, 3].sum().backward()
    model.reset_hooks()
    torch.testing.assert_close(grads[0][1], expected)
    # a returned tensor replaces the gradient: zero at resid_mid of block 1 leaves nothing for the embedding
    model.zero_grad()
    model.run_with_hooks(tokens, bwd_hooks=[(lambda n: n.endswith("hook_resid_mid") and "1" in n,
                                             lambda g, hook: torch.zeros_like(g))]).sum().backward()
    block0 = model.blocks[0].mlp.W_in.weight.grad
    assert block0 is not None and torch.count_nonzero(block0) == 0


def test_bad_names_filters_and_hooks_give_errors_naming_the_argument():
    model = tiny(n_layers=2)
    tokens = torch.randint(10, (1, 6))
    reference = model(tokens)
    with pytest.raises(ValueError, match=r"fwd_hooks\[1\]: unknown hook name 'blocks.9.hook_resid_pre'; hook points: "
                                         r"hook_embed; blocks.<i>.<hook> for i in 0..1 and hook in .*hook_resid_pre"):
        model.run_with_hooks(tokens, fwd_hooks=[("hook_embed", lambda x, hook: 0 * x),
                                                ("blocks.9.hook_resid_pre", lambda x, hook: None)])
    with pytest.raises(ValueError, match=r"fwd_hooks\[0\]: the filter '<lambda>' matched no hook point"):
        model.run_with_hooks(tokens, fwd_hooks=[(lambda n: n.endswith("hook_q"), lambda x, hook: None)])
    with pytest.raises(TypeError, match=r"fwd_hooks\[0\] must be a \(name or filter, fn\(activation, hook\)\) pair"):
        model.run_with_hooks(tokens, fwd_hooks=[("hook_embed",)])
    with pytest.raises(TypeError, match="fwd_hooks must be a list of"):
        model.run_with_hooks(tokens, fwd_hooks={"hook_embed": lambda x, hook: None})
    with pytest.raises(TypeError, match=r"hooks must be a dict .*pass fwd_hooks="):
        model.run_with_hooks(tokens, [("hook_embed", lambda x, hook: None)])
    with pytest.raises(TypeError, match=r"fwd_hooks\[0\] at hook_embed must return None or a tensor, got int"):
        model.run_with_hooks(tokens, fwd_hooks=[("hook_embed", lambda x, hook: 0)])
    with pytest.raises(ValueError, match="reset_hooks_end=False"):
        model.run_with_hooks(tokens, fwd_hooks=[("hook_embed", lambda x, hook: None)], reset_hooks_end=False)
    with pytest.raises(ValueError, match=r"names_filter: unknown hook name 'blocks.0.hook_z'"):
        model.run_with_cache(tokens, names_filter=["hook_embed", "blocks.0.hook_z"])
    with pytest.raises(ValueError, match=r"names_filter: the filter .* matched no hook point; hook points: hook_embed"):
        model.run_with_cache(tokens, names_filter=lambda n: False)
    with pytest.raises(TypeError, match="names_filter must be a hook name, a list of hook names or a filter"):
        model.run_with_cache(tokens, names_filter=3)
    with pytest.raises(ValueError, match="names or names_filter"):
        model.run_with_cache(tokens, ["hook_embed"], names_filter="hook_embed")
    _, cache = model.run_with_cache(tokens, names_filter="hook_embed")
    with pytest.raises(KeyError, match=r"'blocks.0.hook_resid_pre' is not in this cache \(cached: hook_embed\)"):
        cache["resid_pre", 0]
    assert torch.equal(model(tokens), reference) and all(p.fn is None for p in model.hook_dict.values())


# -- HookedLM (tiny random Hugging Face models built from configs) -------------------------------------------------

def hf_models():
    pytest.importorskip("transformers")
    from tests.interp.tiny_models import gpt2, llama, neox

    return {"llama": llama, "gpt2": gpt2, "neox_parallel": neox}


@pytest.mark.parametrize("arch", ["llama", "gpt2", "neox_parallel"])
def test_hooked_lm_takes_transformerlens_hooks_and_caches_every_hook_point(arch):
    lm = hf_models()[arch]()
    tokens, other = torch.randint(50, (2, 6)), torch.randint(50, (2, 6))
    names = lm.hook_names(every=True)
    with torch.no_grad():
        logits, cache = lm.run_with_cache(tokens)
        ref_logits, ref = lm.run_with_cache(tokens, names)
        assert torch.equal(logits, ref_logits) and list(cache) == list(ref) and sorted(cache) == sorted(names)
        assert all(torch.equal(cache[n], ref[n]) for n in names)
        assert set(lm.hook_dict) == set(names) and lm.hook_dict["blocks.1.attn.hook_z"].layer() == 1
        assert torch.equal(cache["z", 1], cache["blocks.1.attn.hook_z"])
        assert torch.equal(cache["pattern", -1], cache[f"blocks.{lm.n_layers - 1}.attn.hook_pattern"])
        _, heads = lm.run_with_cache(tokens, names_filter=lambda n: n.endswith(("hook_z", "hook_pattern")))
        assert sorted(heads) == sorted(n for n in names if n.endswith(("hook_z", "hook_pattern")))
        # patch head 1's z at the last position from the other run, TransformerLens-style, against the dict
        source = lm.run_with_cache(other, names_filter=lambda n: n.endswith("hook_z"))[1]

        def patch_head(z, hook):
            z = z.clone()
            z[:, -1, 1] = source[hook.name][:, -1, 1]
            return z

        lens = lm.run_with_hooks(tokens, fwd_hooks=[(lambda n: n.endswith("attn.hook_z"), patch_head)])
        ours = lm.run_with_hooks(tokens, {n: (lambda z, n=n: patch_head(z, lm.hook_dict[n])) for n in names
                                          if n.endswith("attn.hook_z")})
        assert torch.equal(lens, ours) and not torch.allclose(lens, logits)
    # bwd_hooks at a per-head point: the gradient of the patched leaf
    name = "blocks.1.attn.hook_z"
    leaf = cache[name].clone().requires_grad_()
    expected = torch.autograd.grad(lm.run_with_hooks(tokens, {name: lambda _: leaf})[:, -1, 7].sum(), leaf)[0]
    grads = []
    out = lm.run_with_hooks(tokens, bwd_hooks=[(name, lambda g, hook: grads.append(g))])
    assert torch.equal(out, logits)
    out[:, -1, 7].sum().backward()
    torch.testing.assert_close(grads[0], expected)


def test_hooked_lm_errors_name_the_argument_and_a_bare_layout_lists_only_its_hooks():
    from iclr24.interp import Layout

    models = hf_models()
    lm = models["neox_parallel"]()
    tokens = torch.randint(50, (1, 4))
    with pytest.raises(ValueError, match=r"fwd_hooks\[0\]: blocks.1.hook_resid_mid: this model's blocks are parallel"):
        lm.run_with_hooks(tokens, fwd_hooks=[("blocks.1.hook_resid_mid", lambda x, hook: None)])
    with pytest.raises(ValueError, match=r"names_filter: unknown hook name 'blocks.3.hook_resid_pre'"):
        lm.run_with_cache(tokens, names_filter="blocks.3.hook_resid_pre")
    with pytest.raises(ValueError, match=r"fwd_hooks\[0\]: the filter .* matched no hook point; hook points: "
                                         r"hook_embed; blocks.<i>.<hook> for i in 0..2"):
        lm.run_with_hooks(tokens, fwd_hooks=[(lambda n: "resid_mid" in n, lambda x, hook: None)])
    llama = models["llama"]()
    bare = type(llama)(llama.model, layout=Layout("model.layers", "self_attn", "mlp", "down_proj"))
    every = bare.hook_names(every=True)
    assert not any(n.endswith(("hook_q", "hook_k", "hook_v", "hook_z", "hook_resid_mid")) for n in every)
    assert any(n.endswith("hook_pattern") for n in every)
    _, cache = bare.run_with_cache(tokens)
    assert sorted(cache) == sorted(every)
    with pytest.raises(ValueError, match=r"names: blocks.0.attn.hook_z: layout.attn_out_proj is None"):
        bare.run_with_cache(tokens, ["blocks.0.attn.hook_z"])
