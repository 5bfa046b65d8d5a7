"""The peft-like API (#61): print_trainable_parameters, save_pretrained / from_pretrained (the adapter only,
restored bit for bit) and modules_to_save."""

import json

import pytest
import torch
from torch import nn

from iclr24.moe_peft import MoELinear, MoEModel, MoLoRAConfig, MoVConfig, get_moe_model

pytest.importorskip("safetensors")

FILES = ["adapter_config.json", "adapter_model.safetensors"]


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3))


def bn_mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))


def randomise(params, seed=1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in params:
            p.copy_(torch.randn(p.shape, generator=g))


def tiny_bert_classifier(seed=0):
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=20, num_labels=3)
    torch.manual_seed(seed)
    return transformers.BertForSequenceClassification(config)


def train(model, steps, make_batch, seed=0):
    """A few Adam steps on the trainable parameters, as a user would."""
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    for _ in range(steps):
        loss = make_batch(model, g)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


def test_print_trainable_parameters_has_peft_s_format(capsys):
    model = get_moe_model(mlp(), MoVConfig(3, ["2", "4"], ["4"]))
    # base 8*16+16 + 16*16+16 + 16*3+3 = 467; per site 3 vectors of 16 and a 16 x 3 router
    assert model.get_nb_trainable_parameters() == (192, 467 + 192)
    model.print_trainable_parameters()
    assert capsys.readouterr().out == "trainable params: 192 || all params: 659 || trainable%: 29.1351\n"
    peft = pytest.importorskip("peft")
    lora = peft.get_peft_model(mlp(), peft.LoraConfig(r=2, target_modules=["0"]))
    lora.print_trainable_parameters()
    theirs = capsys.readouterr().out
    assert theirs == "trainable params: 48 || all params: 515 || trainable%: 9.3204\n"  # the same line
    assert model.trainable_parameters() == 192 and model.trainable_fraction() == 192 / 659
    assert model.get_base_model() is model.base_model


def test_save_pretrained_writes_the_adapter_only_and_from_pretrained_restores_it_bit_for_bit(tmp_path):
    from safetensors import safe_open

    ids = torch.randint(0, 50, (4, 7), generator=torch.Generator().manual_seed(0))
    labels = torch.tensor([0, 2, 1, 2])
    config = MoVConfig(num_experts=3, modules_to_save=["classifier"])  # BERT's default sites
    trained = get_moe_model(tiny_bert_classifier(), config)
    head_before = trained.base_model.classifier.weight.detach().clone()
    train(trained, 5, lambda m, g: m(input_ids=ids, labels=labels).loss)
    assert not torch.equal(trained.base_model.classifier.weight, head_before)  # the head trained
    trained.eval()
    expected = trained(input_ids=ids).logits

    out = trained.save_pretrained(tmp_path / "adapter")
    assert out == tmp_path / "adapter" and sorted(p.name for p in out.iterdir()) == FILES
    written = sum(p.stat().st_size for p in out.iterdir())
    whole = sum(p.numel() * p.element_size() for p in trained.parameters())
    adapter = sum(p.numel() * p.element_size() for p in trained.adapter_state_dict().values())
    assert written < adapter + 4_000 and written < whole / 3  # the adapter and its headers, not the model
    with safe_open(str(out / FILES[1]), framework="pt") as f:
        keys = set(f.keys())
    assert keys == set(trained.adapter_state_dict()) and {"classifier.weight", "classifier.bias"} <= keys
    assert not any("word_embeddings" in k or k.endswith("query.weight") for k in keys)
    saved = json.loads((out / FILES[0]).read_text())
    assert saved["format"] == "iclr24.moe_peft" and saved["method"] == "MoVConfig"
    assert saved["config"]["modules_to_save"] == ["classifier"] and saved["config"]["num_experts"] == 3
    assert saved["config"]["target_modules"] == ["key", "value", "output.dense"]  # the resolved defaults
    assert saved["base_model_class"] == "BertForSequenceClassification"

    fresh = tiny_bert_classifier()  # the same base; its head is a new one, which the adapter replaces
    randomise(fresh.classifier.parameters(), seed=7)
    loaded = MoEModel.from_pretrained(fresh, out)
    assert torch.equal(loaded(input_ids=ids).logits, expected)
    theirs, ours = trained.state_dict(), loaded.state_dict()
    assert list(theirs) == list(ours) and all(torch.equal(theirs[k], ours[k]) for k in theirs)
    # peft's default: loaded for inference, frozen and in eval mode
    assert not loaded.training and loaded.trainable_parameters() == 0
    again = MoEModel.from_pretrained(tiny_bert_classifier(), out, is_trainable=True)
    assert again.training == tiny_bert_classifier().training  # the mode is the user's
    assert [n for n, p in again.named_parameters() if p.requires_grad] == \
        [n for n, p in trained.named_parameters() if p.requires_grad]
    assert again.moe_config == trained.moe_config


@pytest.mark.parametrize("config", [MoLoRAConfig(2, r=2, target_modules=["0", "3"], modules_to_save=["1"]),
                                    MoVConfig(4, target_modules=r"0|3", feedforward_modules=["3"], num_heads=None,
                                              modules_to_save=["1"], top_k=2)])
def test_round_trip_includes_the_buffers_of_modules_to_save(tmp_path, config):
    trained = get_moe_model(bn_mlp(), config)
    for layer in trained.moe_layers().values():
        randomise(layer.adapter_parameters().values())
    x = torch.randn(32, 8, generator=torch.Generator().manual_seed(3))
    train(trained, 3, lambda m, g: m(x).square().mean())  # moves the BatchNorm's running statistics too
    bn = trained.base_model[1]
    assert bn.weight.requires_grad and int(bn.num_batches_tracked) == 3
    assert {"1.running_mean", "1.running_var", "1.num_batches_tracked"} <= set(trained.adapter_state_dict())
    trained.eval()
    path = trained.save_pretrained(tmp_path)
    loaded = MoEModel.from_pretrained(bn_mlp(), path)
    assert torch.equal(loaded(x), trained(x))
    assert int(loaded.base_model[1].num_batches_tracked) == 3
    # load_adapter takes the directory too, into a model wrapped alike
    same = get_moe_model(bn_mlp(), config).load_adapter(path).eval()
    assert torch.equal(same(x), trained(x))


def test_modules_to_save_train_in_full_and_unwrap_keeps_what_they_learned():
    net = mlp()
    frozen = get_moe_model(mlp(), MoVConfig(2, ["2"]))
    assert not frozen.base_model[4].weight.requires_grad  # without modules_to_save the head stays frozen
    model = get_moe_model(net, MoVConfig(2, ["2"], modules_to_save=["4"]))
    assert list(model.modules_to_save()) == ["4"]
    model(torch.randn(5, 8)).sum().backward()
    assert net[4].weight.grad is not None and net[0].weight.grad is None
    assert model.trainable_parameters() == 2 * 16 * 2 + 16 * 3 + 3
    with torch.no_grad():
        net[4].bias.fill_(0.5)
    back = model.unwrap()
    assert torch.equal(back[4].bias, torch.full((3,), 0.5)) and all(p.requires_grad for p in back.parameters())


@pytest.mark.parametrize("modules_to_save, error, message", [
    ("classifier", ValueError, r"modules_to_save must be a list of module names \(as in peft\), got the string "
                               r"'classifier'; write \['classifier'\]"),
    ([], ValueError, r"modules_to_save must be None or a non-empty list of module names, got \[\]"),
    ([""], ValueError, "modules_to_save must be None or a non-empty list"),
])
def test_modules_to_save_config_errors(modules_to_save, error, message):
    for config in (MoVConfig, MoLoRAConfig):
        with pytest.raises(error, match=message):
            config(2, modules_to_save=modules_to_save)


def test_bad_modules_to_save_are_refused_before_the_model_is_touched():
    net = mlp()
    with pytest.raises(ValueError, match=r"modules_to_save entry 'head' matched no module; the model's top-level "
                                         r"modules are \['0', '1', '2', '3', '4'\]"):
        get_moe_model(net, MoVConfig(2, ["2"], modules_to_save=["head"]))
    with pytest.raises(ValueError, match="modules_to_save '2' is or holds the MoV/MoLoRA site '2'"):
        get_moe_model(net, MoVConfig(2, ["2"], modules_to_save=["2"]))
    with pytest.raises(ValueError, match="modules_to_save '1' is a ReLU without parameters"):
        get_moe_model(net, MoVConfig(2, ["2"], modules_to_save=["1"]))
    assert all(type(m) is not MoELinear for m in net.modules()) and all(p.requires_grad for p in net.parameters())
    nested = nn.Sequential(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)), nn.Linear(4, 2))
    with pytest.raises(ValueError, match=r"modules_to_save '0' is or holds the MoV/MoLoRA site '0.1'"):
        get_moe_model(nested, MoLoRAConfig(2, target_modules=["0.1"], modules_to_save=["0"]))
    # a match inside another match is saved once, with its parent
    model = get_moe_model(nested, MoLoRAConfig(2, target_modules="1", modules_to_save=["0", "0.0"]))
    assert list(model.modules_to_save()) == ["0"]


def test_pretrained_errors_name_what_was_expected(tmp_path):
    trained = get_moe_model(mlp(), MoVConfig(3, ["2", "4"], ["4"]))
    path = trained.save_pretrained(tmp_path / "a")
    with pytest.raises(NotADirectoryError, match="save_directory .* is a file; save_pretrained writes a directory"):
        trained.save_pretrained(path / FILES[1])
    with pytest.raises(FileNotFoundError, match="pretrained_path .* does not exist; give a directory written by "
                                                "save_pretrained"):
        MoEModel.from_pretrained(mlp(), tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="pretrained_path .* is a file"):
        MoEModel.from_pretrained(mlp(), path / FILES[1])
    with pytest.raises(FileNotFoundError, match="adapter_config.json' does not exist"):
        MoEModel.from_pretrained(mlp(), tmp_path)
    with pytest.raises(TypeError, match="is_trainable must be a bool, got 'yes'"):
        MoEModel.from_pretrained(mlp(), path, is_trainable="yes")
    # an adapter that does not fit: the model is refused and left as it was
    other = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 12), nn.ReLU(), nn.Linear(12, 3))
    with pytest.raises(ValueError, match=r"adapter tensor '2.mov_scaling' is \(3, 16\) torch.float32, the model "
                                         r"expects \(3, 12\)"):
        MoEModel.from_pretrained(other, path)
    assert all(type(m) is nn.Linear for m in other if not isinstance(m, nn.ReLU))
    assert all(p.requires_grad for p in other.parameters())
    # an HF peft adapter directory is not ours
    peft = pytest.importorskip("peft")
    peft.get_peft_model(mlp(), peft.LoraConfig(r=2, target_modules=["0"])).save_pretrained(tmp_path / "peft")
    with pytest.raises(ValueError, match=r"is not an iclr24.moe_peft adapter config: format None, expected "
                                         r"'iclr24.moe_peft' \(an HF peft adapter: load it with peft.PeftModel\)"):
        MoEModel.from_pretrained(mlp(), tmp_path / "peft")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / FILES[0]).write_text("{not json")
    with pytest.raises(ValueError, match="is not valid JSON"):
        MoEModel.from_pretrained(mlp(), tmp_path / "bad")
    with pytest.raises(IsADirectoryError, match="is a directory without adapter_config.json"):
        trained.load_adapter(tmp_path)
