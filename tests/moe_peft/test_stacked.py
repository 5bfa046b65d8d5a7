import pytest
import torch

from iclr24.moe_peft.experiment import LABELS, PRESETS, _adapt
from iclr24.moe_peft.stacked import StackedTrainer
from iclr24.moe_peft.tasks import SkillTasks, Trainer, accuracy, mlp_base

pytest.importorskip("peft")

# 16 inputs: with 13, one MoLoRA-2 weight came out 4e-8 away (MKL's batched product rounds some odd shapes, whose
# per-fit slices do not start on a 64-byte boundary, unlike the product alone); the presets' runs are equal end to
# end (docs/moe_peft.md, "Profile and run time")
FAMILY = SkillTasks(n_features=9, n_skills=3, n_classes=4, seed=0)
TASKS = FAMILY.adaptation_split()[0]


def _data(seed):
    X, y, _ = FAMILY.sample(TASKS, 30, torch.Generator().manual_seed(seed))  # 180 examples: batches 64, 64, 52
    return X, y


def _bases():
    torch.manual_seed(0)
    return [mlp_base(FAMILY.input_dim, 64, 4).requires_grad_(False) for _ in range(2)]


@pytest.mark.parametrize("name", ["base", *LABELS])
def test_stacked_fits_equal_the_fits_one_at_a_time_bit_for_bit(name):
    """Different rates, bases, data and batch orders side by side, stopped, thinned and continued: every fit's
    weights equal the ones Trainer gives it alone."""
    cfg, bases, lrs = PRESETS["smoke"], _bases(), [3e-3, 1e-2, 3e-2]
    data = [_data(0), _data(0), _data(1)]

    def models():
        out = []
        for i in range(3):
            torch.manual_seed(i)
            out.append(mlp_base(FAMILY.input_dim, 64, 4) if name == "base" else _adapt(name, bases[i // 2], cfg))
        return out

    alone = models()
    for i, model in enumerate(alone):
        Trainer(model, lr=lrs[i], generator=torch.Generator().manual_seed(i)).run(*data[i], epochs=3, batch_size=64)
    stacked = models()
    trainer = StackedTrainer(stacked, lrs=lrs, generators=[torch.Generator().manual_seed(i) for i in range(3)])
    trainer.run(data, epochs=1, batch_size=64)
    trainer.write_back()
    accuracy(stacked[0], *data[0])  # evaluating in between changes nothing
    trainer = trainer.subset([0, 2])
    trainer.run([data[0], data[2]], epochs=2, batch_size=64)
    assert trainer.epochs_done == 3
    trainer.write_back()
    for i in (0, 2):
        for (key, a), b in zip(alone[i].named_parameters(), stacked[i].parameters()):
            assert torch.equal(a, b), f"{name}, fit {i}: {key} differs by {(a - b).abs().max():.3g}"
    changed = [p for p in stacked[0].parameters() if p.requires_grad]
    fresh = [p for p in models()[0].parameters() if p.requires_grad]
    assert any(not torch.equal(a, b) for a, b in zip(changed, fresh))
    # the dropped fit stopped after one epoch
    assert not all(torch.equal(a, b) for a, b in zip(alone[1].parameters(), stacked[1].parameters()))


def test_stacked_trainer_refuses_what_it_does_not_reproduce():
    from iclr24.moe_peft import MoVConfig, get_moe_model

    base = _bases()[0]
    with pytest.raises(ValueError, match="one lr and one generator per model"):
        StackedTrainer([_adapt("ia3", base, PRESETS["smoke"])], lrs=[1e-3, 1e-2], generators=[torch.Generator()])
    top_k = get_moe_model(mlp_base(FAMILY.input_dim, 64, 4), MoVConfig(4, ["2"], ["2"], top_k=2))
    with pytest.raises(ValueError, match="soft, whole-output MoV"):
        StackedTrainer([top_k], lrs=[1e-3], generators=[torch.Generator()])
    with pytest.raises(TypeError, match="does not support ReLU"):
        StackedTrainer([torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU())], lrs=[1e-3],
                       generators=[torch.Generator()])
    trainer = StackedTrainer([mlp_base(FAMILY.input_dim, 8, 4)] * 2, lrs=[1e-3] * 2, generators=[torch.Generator()] * 2)
    with pytest.raises(ValueError, match="same number of examples"):
        trainer.run([_data(0), (_data(0)[0][:10], _data(0)[1][:10])], epochs=1)


@pytest.mark.parametrize("name", ["base", "full", "ia3", "mov10", "molora4"])
def test_stacked_fits_at_one_rate_equal_the_fits_one_at_a_time(name):
    """The seeds' phase: one rate for every fit (Adam's update with one step size for the whole stack), frozen base
    layers run as plain batched products; each fit's weights equal Trainer's alone, bit for bit."""
    cfg, bases = PRESETS["smoke"], _bases()
    data = [_data(0), _data(1)]

    def models():
        out = []
        for i in range(2):
            torch.manual_seed(i)
            out.append(mlp_base(FAMILY.input_dim, 64, 4) if name == "base" else _adapt(name, bases[i], cfg))
        return out

    alone = models()
    for i, model in enumerate(alone):
        Trainer(model, lr=1e-2, generator=torch.Generator().manual_seed(i)).run(*data[i], epochs=2, batch_size=64)
    stacked = models()
    trainer = StackedTrainer(stacked, lrs=[1e-2, 1e-2], generators=[torch.Generator().manual_seed(i) for i in range(2)])
    trainer.run(data, epochs=2, batch_size=64)
    trainer.write_back()
    for i in range(2):
        for (key, a), b in zip(alone[i].named_parameters(), stacked[i].parameters()):
            assert torch.equal(a, b), f"{name}, fit {i}: {key} differs by {(a - b).abs().max():.3g}"
