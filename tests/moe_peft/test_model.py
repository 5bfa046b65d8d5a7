"""get_moe_model: injection by name, equality with HF peft at one expert, gradients, adapters, unwrapping."""

import copy

import pytest
import torch
from torch import nn

from iclr24.moe_peft import MoEModel, MoLoRAConfig, MoLoRALinear, MoVConfig, MoVLinear, get_moe_model

peft = pytest.importorskip("peft")

FF = ["2", "4"]


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3))


def randomise(params, seed=1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in params:
            p.copy_(torch.randn(p.shape, generator=g))


def test_the_wrapped_model_computes_the_base_at_initialisation():
    net = mlp()
    x = torch.randn(6, 8)
    before = net(x)
    mov = get_moe_model(copy.deepcopy(net), MoVConfig(num_experts=10, target_modules=["2", "4"],
                                                      feedforward_modules=["4"]))
    torch.testing.assert_close(mov(x), before)
    molora = get_moe_model(copy.deepcopy(net), MoLoRAConfig(num_experts=4, target_modules=["0", "2", "4"]))
    assert torch.equal(molora(x), before)


def test_one_expert_mov_equals_peft_ia3_with_the_same_vectors():
    net = mlp()
    ia3 = peft.get_peft_model(copy.deepcopy(net), peft.IA3Config(target_modules=FF, feedforward_modules=["4"]))
    mov = get_moe_model(copy.deepcopy(net), MoVConfig(num_experts=1, target_modules=FF, feedforward_modules=["4"]))
    layers = mov.moe_layers()
    assert [layers[s].feedforward for s in FF] == [False, True]
    for site in FF:
        vector = ia3.base_model.model.get_submodule(site).ia3_l["default"]
        randomise([vector], seed=int(site))
        with torch.no_grad():
            layers[site].mov_scaling.copy_(vector.reshape(1, -1))
    x = torch.randn(7, 8)
    torch.testing.assert_close(mov(x), ia3(x))
    assert not torch.allclose(mov(x), net(x))


def test_one_expert_molora_equals_peft_lora_with_the_same_matrices():
    net = mlp()
    lora = peft.get_peft_model(copy.deepcopy(net), peft.LoraConfig(r=4, lora_alpha=16, target_modules=["0", "4"]))
    molora = get_moe_model(copy.deepcopy(net), MoLoRAConfig(num_experts=1, r=4, alpha=16, target_modules=["0", "4"]))
    for site, layer in molora.moe_layers().items():
        theirs = lora.base_model.model.get_submodule(site)
        randomise([theirs.lora_A["default"].weight, theirs.lora_B["default"].weight], seed=int(site) + 1)
        with torch.no_grad():
            layer.lora_A.copy_(theirs.lora_A["default"].weight[None])
            layer.lora_B.copy_(theirs.lora_B["default"].weight[None])
    x = torch.randn(7, 8)
    torch.testing.assert_close(molora(x), lora(x))
    assert not torch.allclose(molora(x), net(x))


@pytest.mark.parametrize("config", [MoVConfig(3, ["2", "4"], ["4"]), MoLoRAConfig(2, target_modules=["0", "4"])])
def test_only_adapter_parameters_get_gradients(config):
    model = get_moe_model(mlp(), config)
    for layer in model.moe_layers().values():
        randomise(layer.adapter_parameters().values())
    model(torch.randn(5, 8)).square().sum().backward()
    adapter = {id(p) for p in model.adapter_state_dict().values()}
    for name, p in model.named_parameters():
        if id(p) in adapter:
            assert p.requires_grad and p.grad is not None and float(p.grad.abs().max()) > 0, name
        else:
            assert not p.requires_grad and p.grad is None, name
    sites = len(model.moe_layers())
    per_site = (3 * 16 + 16 * 3) if isinstance(config, MoVConfig) else None
    if per_site is not None:
        assert model.trainable_parameters() == sites * per_site
    else:  # E r (in + out) + in E at Linear(8, 16) and Linear(16, 3)
        assert model.trainable_parameters() == 2 * 4 * (8 + 16) + 8 * 2 + 2 * 4 * (16 + 3) + 16 * 2
    total = sum(p.numel() for p in model.parameters())
    assert model.trainable_fraction() == pytest.approx(model.trainable_parameters() / total)


def test_targets_match_by_suffix_or_by_regular_expression():
    net = nn.Sequential(*[nn.Linear(4, 4) for _ in range(13)])
    model = get_moe_model(copy.deepcopy(net), MoVConfig(2, target_modules=["2"]))
    assert list(model.moe_layers()) == ["2"]  # not "12"
    model = get_moe_model(copy.deepcopy(net), MoVConfig(2, target_modules=r"1\d"))
    assert list(model.moe_layers()) == ["10", "11", "12"]
    nested = nn.Sequential(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)))
    assert list(get_moe_model(nested, MoLoRAConfig(2, target_modules=["1"])).moe_layers()) == ["0.1"]


def test_bad_targets_are_refused_before_the_model_is_touched():
    net = mlp()
    with pytest.raises(ValueError, match=r"target_modules \('q',\) matched no module; the model's nn.Linear "
                                         r"layers are \['0', '2', '4'\]"):
        get_moe_model(net, MoVConfig(2, target_modules=["q"]))
    with pytest.raises(TypeError, match="target module '1' is a ReLU; MoV and MoLoRA wrap nn.Linear"):
        get_moe_model(net, MoVConfig(2, target_modules=["0", "1"]))
    assert all(p.requires_grad for p in net.parameters()) and type(net[0]) is nn.Linear
    attention = nn.Sequential(nn.MultiheadAttention(8, 2))
    with pytest.raises(TypeError, match="out_proj, whose weight the attention reads directly"):
        get_moe_model(attention, MoLoRAConfig(2, target_modules=["out_proj"]))
    with pytest.raises(ValueError, match="target_modules is required for this model"):
        get_moe_model(net, MoVConfig(2))
    model = get_moe_model(net, MoVConfig(2, target_modules=["0"]))
    with pytest.raises(ValueError, match="already carries MoV/MoLoRA layers"):
        get_moe_model(net, MoVConfig(2, target_modules=["2"]))
    with pytest.raises(TypeError, match="config must be a MoVConfig or MoLoRAConfig, got dict"):
        MoEModel(mlp(), {"num_experts": 2})
    assert isinstance(model.base_model[0], MoVLinear)


@pytest.mark.parametrize("kwargs, message", [
    ({"num_experts": 0}, "num_experts must be >= 1, got 0"),
    ({"top_k": 11}, r"top_k must be in \[1, num_experts=10\] or None, got 11"),
    ({"load_balance": -0.1}, "load_balance must be >= 0, got -0.1"),
    ({"target_modules": []}, "target_modules must be a non-empty list of module names or a regular expression"),
    ({"target_modules": "(["}, "target_modules must be a list of module names or a regular expression"),
    ({"feedforward_modules": [3]}, "feedforward_modules must be a non-empty list"),
])
def test_config_errors_name_the_argument(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        MoVConfig(**kwargs)


def test_molora_config_errors():
    with pytest.raises(ValueError, match="r must be >= 1, got 0"):
        MoLoRAConfig(r=0)
    with pytest.raises(ValueError, match="alpha must be > 0"):
        MoLoRAConfig(alpha=-1)


def test_save_and_load_round_trip_the_adapter_only(tmp_path):
    from safetensors import safe_open

    config = MoVConfig(3, ["2", "4"], ["4"])
    trained = get_moe_model(mlp(), config)
    for layer in trained.moe_layers().values():
        randomise(layer.adapter_parameters().values())
    path = trained.save_adapter(tmp_path / "adapter.safetensors")
    with safe_open(str(path), framework="pt") as f:
        assert sorted(f.keys()) == ["2.mov_scaling", "2.router.weight", "4.mov_scaling", "4.router.weight"]
    fresh = get_moe_model(mlp(), config)
    x = torch.randn(4, 8)
    assert not torch.allclose(fresh(x), trained(x))
    torch.testing.assert_close(fresh.load_adapter(path)(x), trained(x))
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind

    other = get_moe_model(mlp(), MoVConfig(4, ["2", "4"], ["4"]))
    with pytest.raises(ValueError, match="saved from .*'num_experts': 3.* this model is .*'num_experts': 4"):
        other.load_adapter(path)
    with pytest.raises(FileNotFoundError, match="adapter file .* does not exist"):
        fresh.load_adapter(tmp_path / "missing.safetensors")
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(2)}, str(tmp_path / "plain.safetensors"))
    with pytest.raises(ValueError, match="is not an iclr24.moe_peft adapter"):
        fresh.load_adapter(tmp_path / "plain.safetensors")


def test_unwrap_restores_the_original_modules_and_trainability():
    net = mlp()
    net[0].weight.requires_grad_(False)  # the user's own freezing must survive
    originals = {name: module for name, module in net.named_children()}
    state = {k: v.clone() for k, v in net.state_dict().items()}
    model = get_moe_model(net, MoLoRAConfig(2, target_modules=["0", "2", "4"]))
    for layer in model.moe_layers().values():
        randomise(layer.adapter_parameters().values())
    x = torch.randn(3, 8)
    before = mlp()(x)  # the same weights, never wrapped
    assert not torch.allclose(model(x), before)
    back = model.unwrap()
    assert back is net and torch.equal(back(x), before)
    assert all(back.get_submodule(n) is m for n, m in originals.items())
    assert all(type(m) is not MoLoRALinear for m in back.modules())
    assert all(torch.equal(back.state_dict()[k], v) for k, v in state.items()) and set(back.state_dict()) == set(state)
    assert [p.requires_grad for p in back.parameters()] == [False, True, True, True, True, True]
    for use in (model.router_statistics, lambda: model(x), model.trainable_parameters):
        with pytest.raises(RuntimeError, match="was unwrapped"):
            use()


def test_router_statistics_count_tokens_and_reset():
    model = get_moe_model(mlp(), MoVConfig(4, ["2", "4"], ["4"]))
    model.eval()
    model(torch.randn(2, 5, 8))
    stats = model.router_statistics()
    assert set(stats) == {"2", "4"}
    for s in stats.values():
        assert s.tokens == 10 and s.mean_probability.shape == (4,)
        assert float(s.mean_probability.sum()) == pytest.approx(1.0)
        assert float(s.top1_fraction.sum()) == pytest.approx(1.0)
    model.reset_router_statistics()
    assert all(s.tokens == 0 for s in model.router_statistics().values())


def test_auxiliary_loss_is_the_weighted_mean_of_the_sites_balance_losses():
    from iclr24.moe_peft import load_balancing_loss

    model = get_moe_model(mlp(), MoVConfig(4, ["2", "4"], ["4"], load_balance=0.5))
    for layer in model.moe_layers().values():
        randomise(layer.adapter_parameters().values())
    x = torch.randn(32, 8)
    model.train()
    model(x)
    expected = 0.5 * torch.stack([load_balancing_loss(layer.last_probabilities)
                                  for layer in model.moe_layers().values()]).mean()
    aux = model.auxiliary_loss()
    torch.testing.assert_close(aux, expected)
    assert float(aux.detach()) > 0.5  # the loss is >= 1 per site
    aux.backward()
    assert all(float(layer.router.weight.grad.abs().max()) > 0 for layer in model.moe_layers().values())
    model.eval()
    assert float(model.auxiliary_loss()) == 0.0  # not the last training forward's loss
    model(x)
    assert float(model.auxiliary_loss()) == 0.0
    off = get_moe_model(mlp(), MoVConfig(4, ["2"]))
    off.train()
    off(x)
    assert float(off.auxiliary_loss()) == 0.0


def test_repr_and_attribute_delegation():
    model = get_moe_model(mlp(), MoVConfig(3, ["2", "4"], ["4"]))
    assert repr(model).startswith("MoEModel(\n  MoV, num_experts=3, 2 sites")
    assert model.moe_config.num_experts == 3
    assert model.__getitem__(0) is model.base_model[0]  # attributes reach the model (dunder syntax does not)


def tiny_bert():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=20)
    torch.manual_seed(0)
    return transformers.BertModel(config).eval()


def test_a_transformers_model_built_from_a_config_takes_the_default_sites():
    bert = tiny_bert()
    ids = torch.randint(0, 50, (2, 7))
    before = bert(input_ids=ids).last_hidden_state
    ia3 = peft.get_peft_model(copy.deepcopy(bert), peft.IA3Config())  # peft's own defaults for BERT
    model = get_moe_model(bert, MoVConfig(num_experts=1))
    assert model.config.model_type == "bert"  # attributes reach the wrapped model
    sites = model.moe_layers()
    assert len(sites) == 2 * 4 and sum(layer.feedforward for layer in sites.values()) == 4
    torch.testing.assert_close(model(input_ids=ids).last_hidden_state, before)
    for name, layer in sites.items():
        vector = ia3.base_model.model.get_submodule(name).ia3_l["default"]
        randomise([vector], seed=len(name))
        with torch.no_grad():
            layer.mov_scaling.copy_(vector.reshape(1, -1))
    torch.testing.assert_close(model(input_ids=ids).last_hidden_state, ia3(input_ids=ids).last_hidden_state)


def test_molora_trains_a_llama_built_from_a_config():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16)
    torch.manual_seed(0)
    llama = transformers.LlamaForCausalLM(config)
    ids = torch.randint(0, 40, (2, 6))
    model = get_moe_model(llama, MoLoRAConfig(num_experts=2, top_k=1))
    assert len(model.moe_layers()) == 7 and model.trainable_fraction() < 0.5
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    assert all(p.grad is None for n, p in model.named_parameters() if not p.requires_grad)
    assert model.router_statistics()["model.layers.0.self_attn.q_proj"].tokens == 12


def test_adapters_load_across_settings_that_do_not_change_the_weights(tmp_path):
    trained = get_moe_model(mlp(), MoVConfig(3, ["2", "4"], ["4"], load_balance=0.01, top_k=2))
    for layer in trained.moe_layers().values():
        randomise(layer.adapter_parameters().values())
    path = trained.save_adapter(tmp_path / "a.safetensors")
    x = torch.randn(4, 8)
    same = get_moe_model(mlp(), MoVConfig(3, r"2|4", feedforward_modules="4", top_k=2))  # spelled differently
    torch.testing.assert_close(same.load_adapter(path)(x), trained(x))
    flipped = get_moe_model(mlp(), MoVConfig(3, ["2", "4"], ["2"]))  # the same tensors mean something else
    with pytest.raises(ValueError, match="'feedforward_sites': \\['4'\\].* this model is .*'feedforward_sites': "
                                         "\\['2'\\]"):
        flipped.load_adapter(path)


def test_a_bad_adapter_file_is_refused_before_anything_is_copied(tmp_path):
    from safetensors.torch import save

    model = get_moe_model(mlp(), MoVConfig(3, ["2", "4"], ["4"]))
    good = {k: v.detach().clone() for k, v in model.adapter_state_dict().items()}
    tensors = dict(good) | {"4.mov_scaling": torch.zeros(3, 5)}  # the last site's shape is wrong
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(save(tensors, metadata={"iclr24.moe_peft": __import__("json").dumps(model._structure())}))
    with pytest.raises(ValueError, match=r"adapter tensor '4.mov_scaling' is \(3, 5\) torch.float32, the model "
                                         r"expects \(3, 16\)"):
        model.load_adapter(bad)
    assert all(torch.equal(v, good[k]) for k, v in model.adapter_state_dict().items())  # untouched
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\xff" * 64)
    with pytest.raises(ValueError, match="is not a readable safetensors file"):
        model.load_adapter(junk)
    with pytest.raises(IsADirectoryError, match="is a directory"):
        model.load_adapter(tmp_path)
    with pytest.raises(IsADirectoryError, match="give the adapter's file name"):
        model.save_adapter(tmp_path)


def test_numbers_from_numpy_are_stored_as_python_floats(tmp_path):
    np = pytest.importorskip("numpy")
    config = MoLoRAConfig(2, alpha=np.float32(8), load_balance=torch.tensor(0.1), target_modules=["0"])
    assert type(config.alpha) is float and type(config.load_balance) is float
    get_moe_model(mlp(), config).save_adapter(tmp_path / "a.safetensors")


def test_feedforward_sites_must_be_targets():
    with pytest.raises(ValueError, match=r"feedforward_modules must be a subset of target_modules; \['2'\] match"):
        get_moe_model(mlp(), MoVConfig(2, target_modules=["0"], feedforward_modules=["2"]))


def test_lazy_layers_are_refused_before_the_model_is_touched():
    net = nn.Sequential(nn.Linear(4, 4), nn.LazyLinear(3))
    with pytest.raises(ValueError, match="uninitialised lazy parameters .*run one forward pass first"):
        get_moe_model(net, MoVConfig(2, target_modules=["0"]))
    assert net[0].weight.requires_grad


def test_router_statistics_survive_half_precision_and_follow_the_device():
    model = get_moe_model(mlp(), MoVConfig(3, ["2", "4"], ["4"])).to(torch.bfloat16)
    for _ in range(3):
        model(torch.randn(1000, 8, dtype=torch.bfloat16))
    assert model.router_statistics()["2"].tokens == 3000  # bfloat16 counts would have rounded
    layer = model.moe_layers()["2"]
    assert layer.top1_count.dtype == torch.int64 and layer.probability_sum.dtype == torch.float64
    meta = get_moe_model(mlp().to("meta"), MoVConfig(3, ["2"]))
    assert meta.moe_layers()["2"].top1_count.device.type == "meta"


def test_t5_models_run_wrapped_with_the_default_sites():
    transformers = pytest.importorskip("transformers")
    for proj in ("relu", "gated-gelu"):  # T5 v1.0 (wi) and v1.1 / mT5 (wi_0, wi_1)
        config = transformers.T5Config(vocab_size=40, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2,
                                       feed_forward_proj=proj, decoder_start_token_id=0, pad_token_id=0)
        torch.manual_seed(0)
        ids = torch.randint(1, 40, (2, 5))
        for cfg in (MoVConfig(num_experts=2), MoLoRAConfig(num_experts=2)):
            t5 = transformers.T5ForConditionalGeneration(config).eval()
            before = t5(input_ids=ids, labels=ids).loss
            model = get_moe_model(t5, cfg)
            torch.testing.assert_close(model(input_ids=ids, labels=ids).loss, before)
            sites = {name.rsplit(".", 1)[-1] for name in model.moe_layers()}
            expected = {"k", "v", "wo"} if isinstance(cfg, MoVConfig) else (
                {"q", "k", "v", "o", "wo"} | ({"wi"} if proj == "relu" else {"wi_0", "wi_1"}))
            assert sites == expected
