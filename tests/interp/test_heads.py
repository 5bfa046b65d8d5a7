"""Per-head hooks (attn.hook_q/k/v/z/pattern), hook_embed, hook_resid_mid and padding masks on HookedLM.

Tiny Llama (grouped-query attention, rotary), GPT-2 (fused concatenated qkv, learned positions) and
GPT-NeoX (fused per-head qkv, partial rotary, parallel residual) built from configs, and the embedded
SmolLM2-135M-Instruct (slow tests).
"""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from iclr24.interp import HookedLM, Layout, padding_mask  # noqa: E402
from tests.interp.tiny_models import gpt2, llama, neox  # noqa: E402


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)


MODELS = {"llama": llama, "gpt2": gpt2, "neox_parallel": neox, "neox_sequential": lambda: neox(False)}


def w_o(lm, layer):
    """The attention output map as (d_model, n_heads * d_head) and its bias."""
    proj = lm.blocks[layer].get_submodule(f"{lm.layout.attn}.{lm.layout.attn_out_proj}")
    weight = proj.weight.detach() if isinstance(proj, torch.nn.Linear) else proj.weight.detach().T
    return weight, 0 if proj.bias is None else proj.bias.detach()


def all_hooks_read_and_identity_patched(lm, tokens):
    """Logits unhooked, with every hook read, and with every hook patched by a copy of itself."""
    names = lm.hook_names(every=True)
    with torch.no_grad():
        reference = lm(tokens)
        logits, cache = lm.run_with_cache(tokens, names)
        identity = lm.run_with_hooks(tokens, {name: lambda x: x.clone() for name in names})
    return reference, logits, identity, cache


@pytest.mark.parametrize("build", MODELS.values(), ids=MODELS.keys())
def test_every_hook_read_or_identity_patched_leaves_the_logits_bitwise_equal(build):
    lm = build()
    tokens = torch.randint(50, (2, 7))
    reference, logits, identity, c = all_hooks_read_and_identity_patched(lm, tokens)
    assert torch.equal(logits, reference) and torch.equal(identity, reference)
    assert lm.model.config._attn_implementation == "sdpa"  # put back after the pattern hooks
    n, g, d = lm.n_heads, lm.n_key_value_heads, lm.d_head
    assert c["blocks.1.attn.hook_q"].shape == (2, 7, n, d) and c["blocks.1.attn.hook_z"].shape == (2, 7, n, d)
    assert c["blocks.1.attn.hook_k"].shape == c["blocks.1.attn.hook_v"].shape == (2, 7, g, d)
    assert c["blocks.1.attn.hook_pattern"].shape == (2, n, 7, 7)
    torch.testing.assert_close(c["hook_embed"], lm.model.get_input_embeddings().weight[tokens])


@pytest.mark.parametrize("build", MODELS.values(), ids=MODELS.keys())
def test_pattern_v_and_z_are_the_models_attention(build):
    lm = build()
    tokens = torch.randint(50, (2, 7))
    names = lm.hook_names(every=True)
    with torch.no_grad():
        _, c = lm.run_with_cache(tokens, names)
        config = lm.model.config
        config._attn_implementation = "eager"  # the one implementation that returns its weights
        try:
            weights = lm.model(input_ids=tokens, output_attentions=True).attentions
        finally:
            config._attn_implementation = "sdpa"
    for i in range(lm.n_layers):
        pattern, v, z = (c[f"blocks.{i}.attn.hook_{x}"] for x in ("pattern", "v", "z"))
        torch.testing.assert_close(pattern, weights[i])
        assert torch.all(pattern.triu(1) == 0)  # causal
        # z = pattern @ v, query head h reading value head h // (n_heads / n_key_value_heads), as TransformerLens
        v = v.repeat_interleave(lm.n_heads // lm.n_key_value_heads, dim=2)
        torch.testing.assert_close(z, torch.einsum("bhqk,bkhd->bqhd", pattern, v))
        weight, bias = w_o(lm, i)
        torch.testing.assert_close(z.flatten(-2) @ weight.T + bias, c[f"blocks.{i}.hook_attn_out"])


def test_q_and_k_are_gpt2s_projections_before_the_softmax():
    lm = gpt2()  # no rotary: the pattern is softmax(q k^T / sqrt(d_head)) with the causal mask
    tokens = torch.randint(50, (2, 7))
    with torch.no_grad():
        _, c = lm.run_with_cache(tokens, ["blocks.1.attn.hook_q", "blocks.1.attn.hook_k", "blocks.1.attn.hook_pattern"])
    scores = torch.einsum("bqhd,bkhd->bhqk", c["blocks.1.attn.hook_q"], c["blocks.1.attn.hook_k"]) / 2
    scores = scores.masked_fill(torch.ones(7, 7, dtype=torch.bool).triu(1), -torch.inf)
    torch.testing.assert_close(scores.softmax(-1), c["blocks.1.attn.hook_pattern"])


def test_llama_q_is_the_query_projection_before_rotary():
    lm = llama()
    tokens = torch.randint(50, (2, 7))
    with torch.no_grad():
        _, c = lm.run_with_cache(tokens, ["blocks.1.hook_resid_pre", "blocks.1.attn.hook_q"])
        attn = lm.blocks[1].self_attn
        q = attn.q_proj(lm.blocks[1].input_layernorm(c["blocks.1.hook_resid_pre"]))
    assert torch.equal(c["blocks.1.attn.hook_q"], q.unflatten(-1, (4, 4)))


@pytest.mark.parametrize("build", MODELS.values(), ids=MODELS.keys())
def test_a_patch_of_one_heads_z_changes_only_what_flows_from_that_head(build):
    lm = build()
    tokens = torch.randint(50, (2, 7))
    head = 2

    def scale_head(z):
        z = z.clone()
        z[:, :, head] *= 3
        return z

    with torch.no_grad():
        names = ["blocks.1.attn.hook_z", "blocks.1.hook_attn_out"]
        _, clean = lm.run_with_cache(tokens, names)
        seen = {}
        lm.run_with_hooks(tokens, {"blocks.1.attn.hook_z": scale_head,
                                   "blocks.1.hook_attn_out": lambda x: seen.setdefault("out", x.clone())})
    weight, _ = w_o(lm, 1)
    d = lm.d_head
    expected = clean["blocks.1.hook_attn_out"] + 2 * clean["blocks.1.attn.hook_z"][:, :, head] @ \
        weight[:, head * d:(head + 1) * d].T
    torch.testing.assert_close(seen["out"], expected)


def test_a_patch_of_one_key_head_changes_the_patterns_of_its_query_group_only():
    lm = llama()  # 4 query heads, 2 key/value heads: query heads 0, 1 read key head 0
    tokens = torch.randint(50, (2, 7))

    def shift_key_head_0(k):
        k = k.clone()
        k[:, :, 0] += 1.0
        return k

    with torch.no_grad():
        _, clean = lm.run_with_cache(tokens, ["blocks.1.attn.hook_pattern"])
        seen = {}
        lm.run_with_hooks(tokens, {"blocks.1.attn.hook_k": shift_key_head_0,
                                   "blocks.1.attn.hook_pattern": lambda p: seen.setdefault("p", p.clone())})
    changed = (seen["p"] != clean["blocks.1.attn.hook_pattern"]).flatten(2).any(-1).any(0)  # per query head
    assert changed.tolist() == [True, True, False, False]


@pytest.mark.parametrize("build", MODELS.values(), ids=MODELS.keys())
def test_a_pattern_patch_moves_that_heads_z_only(build):
    lm = build()
    tokens = torch.randint(50, (2, 7))
    head = 1

    def attend_to_first_token(pattern):
        pattern = pattern.clone()
        pattern[:, head] = 0
        pattern[:, head, :, 0] = 1
        return pattern

    with torch.no_grad():
        names = ["blocks.1.attn.hook_z", "blocks.1.attn.hook_v"]
        _, clean = lm.run_with_cache(tokens, names)
        seen = {}
        lm.run_with_hooks(tokens, {"blocks.1.attn.hook_pattern": attend_to_first_token,
                                   "blocks.1.attn.hook_z": lambda z: seen.setdefault("z", z.clone())})
    z, clean_z = seen["z"], clean["blocks.1.attn.hook_z"]
    group = lm.n_heads // lm.n_key_value_heads
    first_v = clean["blocks.1.attn.hook_v"][:, :1, head // group].expand(-1, 7, -1)
    torch.testing.assert_close(z[:, :, head], first_v)  # the head now copies the first token's value
    others = [h for h in range(lm.n_heads) if h != head]
    assert torch.equal(z[:, :, others], clean_z[:, :, others])


@pytest.mark.parametrize("build", MODELS.values(), ids=MODELS.keys())
@pytest.mark.parametrize("name", ["hook_embed", "blocks.1.hook_resid_mid", "blocks.1.attn.hook_q",
                                  "blocks.1.attn.hook_k", "blocks.1.attn.hook_v", "blocks.1.attn.hook_z"])
def test_a_patch_at_position_p_leaves_earlier_positions_unchanged(build, name):
    lm = build()
    if name.endswith("resid_mid") and lm.parallel:
        pytest.skip("parallel blocks have no resid_mid")
    tokens, p = torch.randint(50, (2, 7)), 4

    def perturb_at_p(x):
        x = x.clone()
        x[:, p] += 1.0
        return x

    with torch.no_grad():
        clean = lm(tokens)
        patched = lm.run_with_hooks(tokens, {name: perturb_at_p})
    assert torch.equal(patched[:, :p], clean[:, :p])
    assert not torch.allclose(patched[:, p:], clean[:, p:])


@pytest.mark.parametrize("build", MODELS.values(), ids=MODELS.keys())
def test_resid_mid_sits_between_attention_and_mlp_and_transplants_the_other_run(build):
    lm = build()
    a, b = torch.randint(50, (2, 7)), torch.randint(50, (2, 7))
    name = "blocks.1.hook_resid_mid"
    if lm.parallel:
        with pytest.raises(ValueError, match="parallel"):
            lm.run_with_cache(a, [name])
        assert name not in lm.hook_names(every=True)
        return
    with torch.no_grad():
        names = ["blocks.1.hook_resid_pre", "blocks.1.hook_attn_out", name, "blocks.1.hook_mlp_out",
                 "blocks.1.hook_resid_post"]
        _, c = lm.run_with_cache(a, names)
        assert torch.equal(c[name], c["blocks.1.hook_resid_pre"] + c["blocks.1.hook_attn_out"])
        assert torch.equal(c[name] + c["blocks.1.hook_mlp_out"], c["blocks.1.hook_resid_post"])
        _, cache_b = lm.run_with_cache(b, [name])
        # the patch feeds the MLP and is the residual the block adds the MLP's output to
        assert torch.equal(lm.run_with_hooks(a, {name: lambda _: cache_b[name]}), lm(b))


@pytest.mark.parametrize("build", MODELS.values(), ids=MODELS.keys())
def test_a_left_padded_batch_gives_each_texts_logits_at_its_real_positions(build):
    lm = build()
    torch.manual_seed(1)
    texts = [torch.randint(50, (n,)) for n in (7, 4, 1)]
    lengths = torch.tensor([len(t) for t in texts])
    for side in ("left", "right"):
        mask = padding_mask(lengths, 7, padding_side=side)
        tokens = torch.zeros(3, 7, dtype=torch.long)
        tokens[mask.bool()] = torch.cat(texts)
        names = ["blocks.2.hook_resid_post", "blocks.2.attn.hook_z", "blocks.2.attn.hook_pattern"]
        with torch.no_grad():
            logits, cache = lm.run_with_cache(tokens, names, attention_mask=mask)
            for i, text in enumerate(texts):
                alone, cache_alone = lm.run_with_cache(text[None], names)
                real = mask[i].bool()
                torch.testing.assert_close(logits[i, real], alone[0], rtol=1e-5, atol=1e-5)
                torch.testing.assert_close(cache["blocks.2.attn.hook_z"][i, real],
                                           cache_alone["blocks.2.attn.hook_z"][0], rtol=1e-5, atol=1e-5)
                pattern = cache["blocks.2.attn.hook_pattern"][i][:, real][:, :, real]  # (head, query, key)
                torch.testing.assert_close(pattern, cache_alone["blocks.2.attn.hook_pattern"][0], rtol=1e-5, atol=1e-5)
                assert torch.all(cache["blocks.2.attn.hook_pattern"][i][:, real][:, :, ~real] == 0)  # no padding read
            last = lm(tokens, positions=torch.full((3,), 6) if side == "left" else lengths - 1, attention_mask=mask)
            torch.testing.assert_close(last, torch.stack([logits[i, mask[i].bool()][-1] for i in range(3)]))
            if side == "left":  # without the mask, the padding before a text is read as text
                assert not torch.allclose(lm(tokens)[1, 3:], logits[1, 3:], atol=1e-3)


def test_bad_masks_patches_and_names_give_clear_errors():
    lm = llama()
    tokens = torch.randint(50, (2, 5))
    with pytest.raises(ValueError, match="attention_mask must be 0/1 of the tokens' shape"):
        lm(tokens, attention_mask=torch.ones(2, 4))
    with pytest.raises(ValueError, match="a row with no real token"):
        lm(tokens, attention_mask=torch.tensor([[1] * 5, [0] * 5]))
    with pytest.raises(ValueError, match=r"blocks.0.attn.hook_z must return None or a tensor of shape \(2, 5, 4, 4\)"):
        lm.run_with_hooks(tokens, {"blocks.0.attn.hook_z": lambda z: z.flatten(-2)})
    with pytest.raises(ValueError, match=r"hook_pattern must return None or a tensor of shape \(2, 4, 5, 5\)"):
        lm.run_with_hooks(tokens, {"blocks.0.attn.hook_pattern": lambda p: p[:, :2]})
    assert lm.model.config._attn_implementation == "sdpa"  # a failed run puts the attention function back
    with pytest.raises(ValueError, match="unknown hook name 'blocks.0.attn.hook_x'"):
        lm.run_with_hooks(tokens, {"blocks.0.attn.hook_x": lambda x: None})
    with pytest.raises(ValueError, match="hook_embed does not run in a re-run"):
        lm.resume_from(tokens, 1)(torch.zeros(2, 5, 16), torch.tensor([4, 4]), {"hook_embed": lambda x: None})
    # a layout without the part a hook needs: a clear error, and the hooks before it are removed
    bare = HookedLM(lm.model, layout=Layout("model.layers", "self_attn", "mlp", "down_proj"))
    reference = bare(tokens)
    with pytest.raises(ValueError, match=r"layout.attn_out_proj is None"):
        bare.run_with_hooks(tokens, {"blocks.0.hook_resid_pre": torch.zeros_like, "blocks.0.attn.hook_z": print})
    assert torch.equal(bare(tokens), reference)
    with pytest.raises(ValueError, match="lengths must be one integer in"):
        padding_mask(torch.tensor([6]), 5)


def test_per_head_hooks_inside_a_resumed_run_equal_the_whole_patched_run():
    lm = llama()
    tokens = torch.randint(50, (2, 8))
    positions, name = torch.tensor([7, 6]), "blocks.1.hook_resid_pre"

    def zero_head_0_after(prefix):
        def hook(z):
            z = z.clone()
            z[:, prefix:, 0] = 0
            return z
        return hook

    with torch.no_grad():
        resid = lm.run_with_cache(tokens, [name])[1][name]
        expected = lm.run_with_hooks(tokens, {"blocks.2.attn.hook_z": zero_head_0_after(4)}, positions=positions)
        run = lm.resume_from(tokens, 1, prefix=4)
        got = run(resid[:, 4:], positions, {"blocks.2.attn.hook_z": zero_head_0_after(0)})
        # a resumed run's pattern: the queries after the prefix, every key (the prefix's are cached)
        full = lm.run_with_cache(tokens, ["blocks.2.attn.hook_pattern"])[1]["blocks.2.attn.hook_pattern"]
        seen = {}
        run(resid[:, 4:], positions, {"blocks.2.attn.hook_pattern": lambda p: seen.setdefault("p", p)})
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(seen["p"], full[:, :, 4:])


# -- the embedded SmolLM2-135M-Instruct -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def smollm2():
    torch.set_num_threads(1)
    return HookedLM.from_llm()


def test_smollm2_every_hook_read_or_identity_patched_is_bitwise_and_patches_are_causal(smollm2):
    lm = smollm2
    tokens, lengths = lm.to_tokens(["When Mary and John went to the store, John gave a drink to"])
    assert (lm.n_heads, lm.n_key_value_heads, lm.d_head) == (9, 3, 64)
    reference, logits, identity, c = all_hooks_read_and_identity_patched(lm, tokens)
    assert torch.equal(logits, reference) and torch.equal(identity, reference)
    assert c["blocks.9.attn.hook_k"].shape == (1, len(tokens[0]), 3, 64)
    p = 6
    for name in ("blocks.9.hook_resid_mid", "blocks.9.attn.hook_v", "blocks.9.attn.hook_z"):
        def perturb_at_p(x):
            x = x.clone()
            x[:, p] += 1.0
            return x

        with torch.no_grad():
            patched = lm.run_with_hooks(tokens, {name: perturb_at_p})
        assert torch.equal(patched[:, :p], reference[:, :p]) and not torch.allclose(patched[:, p:], reference[:, p:])


def test_smollm2_left_padded_batch_matches_each_text_alone(smollm2):
    lm = smollm2
    texts = ["When Mary and John went to the store, John gave a drink to", "The cat sat on the", "Hello"]
    tokens, lengths = lm.to_tokens(texts, padding_side="left")
    mask = padding_mask(lengths, tokens.shape[1], padding_side="left")
    with torch.no_grad():
        logits = lm(tokens, attention_mask=mask)
        for i, text in enumerate(texts):
            alone = lm(lm.to_tokens([text])[0])
            torch.testing.assert_close(logits[i, mask[i].bool()], alone[0], rtol=1e-4, atol=1e-4)


def test_smollm2_pattern_is_the_eager_attentions(smollm2):
    lm = smollm2
    tokens, _ = lm.to_tokens(["When Mary and John went to the store, John gave a drink to"])
    with torch.no_grad():
        _, c = lm.run_with_cache(tokens, ["blocks.20.attn.hook_pattern"])
        config = lm.model.config
        config._attn_implementation = "eager"
        try:
            weights = lm.model(input_ids=tokens, output_attentions=True).attentions[20]
        finally:
            config._attn_implementation = "sdpa"
    torch.testing.assert_close(c["blocks.20.attn.hook_pattern"], weights)


def test_smollm2_has_name_mover_heads_and_a_negative_one(smollm2):
    """Wang et al.'s split, found with the per-head hooks: at END, name movers attend to the IO and write
    IO - S into the logits; a negative name mover attends to the IO and writes against it. Patching the
    movers' z at END from the counterfactual (S2 -> IO, the answer flips) lowers the logit difference;
    patching the negative one raises it. Measured (24 prompts, seed 0): movers L23H0/1/2/7, negative L24H4."""
    from iclr24.interp import ioi_batch, ioi_prompts, logit_difference

    lm = smollm2
    batch = ioi_batch(lm, ioi_prompts(24, seed=0, tokenizer=lm.tokenizer))
    rows, end, last = torch.arange(len(batch)), batch.end, lm.n_layers - 1
    names = [f"blocks.{i}.attn.hook_{x}" for i in range(20, lm.n_layers) for x in ("z", "pattern")]
    with torch.no_grad():
        logits, c = lm.run_with_cache(batch.tokens, [*names, f"blocks.{last}.hook_resid_post"], positions=end)
    clean = logit_difference(logits, batch.io, batch.s).mean()
    # the direct effect: each head's output at END through the final RMSNorm's scale onto W_U[IO] - W_U[S]
    final, norm = c[f"blocks.{last}.hook_resid_post"][rows, end], lm.model.model.norm
    scale = norm.weight / (final.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon).sqrt()
    unembed = lm.model.get_output_embeddings().weight
    direction = (unembed[batch.io] - unembed[batch.s]) * scale  # (n, d_model)
    io_pos = (batch.tokens == batch.io[:, None]).long().argmax(1)
    s_pos = (batch.tokens == batch.s[:, None]).long().argmax(1)
    movers, negative = [], []
    for i in range(20, lm.n_layers):
        z = c[f"blocks.{i}.attn.hook_z"][rows, end]  # (n, head, d_head)
        w_o = lm.blocks[i].self_attn.o_proj.weight.unflatten(1, (lm.n_heads, lm.d_head))  # (d_model, head, d_head)
        effect = torch.einsum("nhd,mhd,nm->h", z, w_o, direction) / len(batch)
        pattern = c[f"blocks.{i}.attn.hook_pattern"][rows, :, end]  # (n, head, key_pos)
        to_io, to_s = pattern[rows, :, io_pos].mean(0), pattern[rows, :, s_pos].mean(0)
        for h in range(lm.n_heads):
            if to_io[h] > 0.3 and to_io[h] > 2 * to_s[h]:
                if effect[h] > 0.2:
                    movers.append((i, h))
                elif effect[h] < -0.5:
                    negative.append((i, h))
    assert len(movers) >= 3 and len(negative) >= 1

    def patched_logit_difference(heads):
        layers = sorted({i for i, _ in heads})
        z_names = [f"blocks.{i}.attn.hook_z" for i in layers]
        with torch.no_grad():
            counterfactual = lm.run_with_cache(batch.counterfactual, z_names)[1]

            def from_counterfactual(i):
                def hook(z):
                    z = z.clone()
                    for layer, h in heads:
                        if layer == i:
                            z[rows, end, h] = counterfactual[f"blocks.{i}.attn.hook_z"][rows, end, h]
                    return z
                return hook

            out = lm.run_with_hooks(batch.tokens, {f"blocks.{i}.attn.hook_z": from_counterfactual(i) for i in layers},
                                    positions=end)
        return logit_difference(out, batch.io, batch.s).mean()

    moved, negated = patched_logit_difference(movers), patched_logit_difference(negative)
    print(f"clean {clean:.2f}, movers {movers} patched {moved:.2f}, negative {negative} patched {negated:.2f}")
    assert moved < clean - 1.0  # measured 4.67 -> 2.57
    assert negated > clean + 1.0  # measured 4.67 -> 7.13


def test_a_parallel_gpt_neox_block_reads_its_own_residual_stream():
    lm = neox()  # Pythia's layout: attention and MLP both read resid_pre; resid_post = pre + attn + mlp
    assert lm.parallel and lm.model.config.use_parallel_residual
    tokens = torch.randint(50, (2, 7))
    with torch.no_grad():
        _, c = lm.run_with_cache(tokens, lm.hook_names())
        hidden = lm.model(input_ids=tokens, output_hidden_states=True).hidden_states
    for i in range(lm.n_layers):
        assert torch.equal(c[f"blocks.{i}.hook_resid_pre"], hidden[i])
        torch.testing.assert_close(c[f"blocks.{i}.hook_resid_pre"] + c[f"blocks.{i}.hook_attn_out"]
                                   + c[f"blocks.{i}.hook_mlp_out"], c[f"blocks.{i}.hook_resid_post"])
        mlp_out = c[f"blocks.{i}.mlp.hook_post"] @ lm.mlp_out_weight(i).T + lm.blocks[i].mlp.dense_4h_to_h.bias
        torch.testing.assert_close(mlp_out, c[f"blocks.{i}.hook_mlp_out"])
    # the MLP reads resid_pre, not resid_pre + attn_out: zeroing attention leaves this block's MLP alone
    seen = {}
    with torch.no_grad():
        lm.run_with_hooks(tokens, {"blocks.1.hook_attn_out": torch.zeros_like,
                                   "blocks.1.hook_mlp_out": lambda x: seen.setdefault("mlp", x.clone())})
    assert torch.equal(seen["mlp"], c["blocks.1.hook_mlp_out"])
