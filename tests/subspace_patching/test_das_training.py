"""train_das itself, on a model where the answer is known: the planted dormant-neuron MLP (seconds)."""
import math

import pytest
import torch

from iclr24.subspace_patching import PlantedDormantMLP, train_das


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)


class PlantedPatcher:
    """The parts of an EndPatcher that train_das uses, for the planted MLP: the hidden activation is patched and the
    loss is how far the patched output is from the source's (the output a successful patch produces)."""

    hook = "planted.hook_post"
    dim = 2

    def __init__(self, n_batches: int = 20, batch_size: int = 10, seed: int = 0):
        self.model = PlantedDormantMLP()
        g = torch.Generator().manual_seed(seed)
        # features are non-negative; base and source differ, so every pair carries signal
        self.batches = [(3 * torch.rand(batch_size, generator=g), 3 * torch.rand(batch_size, generator=g))
                        for _ in range(n_batches)]

    def loss(self, batch, das):
        x_base, x_source = batch
        patched = das(self.model.hidden(x_base), self.model.hidden(x_source))
        return (self.model.output_from_hidden(x_base, patched) - self.model(x_source)).pow(2).mean()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_das_finds_the_planted_illusory_direction(seed):
    # the only 1-d patch that moves the output to the source's is (e_a + e_d)/sqrt 2 (up to sign): it activates the
    # dormant neuron d with the disconnected neuron a's variation (2 v_a v_d = 1 with |v| = 1). 30 epochs of 20
    # batches at lr 0.03: starts near the loss's maximum (e_a - e_d)/sqrt 2 need the steps (0.9977 at worst, 8 seeds)
    das = train_das(PlantedPatcher(seed=seed), k=1, epochs=30, lr=0.03, seed=seed)
    v = das.basis[:, 0].detach()
    planted = torch.tensor([1.0, 1.0]) / math.sqrt(2)
    assert abs(float(v @ planted)) > 0.99


def test_das_learning_rate_decays_linearly_per_epoch_to_a_tenth(monkeypatch):
    # the authors' schedule (model_utils.patch_training): Adam, LinearLR(end_factor=0.1, total_iters=epochs),
    # stepped once per epoch: epoch e of E runs at lr (1 - 0.9 e / E), every batch of the epoch alike
    seen = []
    step = torch.optim.Adam.step

    def recording_step(self, *args, **kwargs):
        seen.append(self.param_groups[0]["lr"])
        return step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Adam, "step", recording_step)
    epochs, lr, n_batches = 4, 0.02, 3
    train_das(PlantedPatcher(n_batches=n_batches), k=1, epochs=epochs, lr=lr, seed=0)
    expected = [lr * (1 - 0.9 * e / epochs) for e in range(epochs) for _ in range(n_batches)]
    assert seen == pytest.approx(expected, rel=1e-12, abs=0)


def test_das_reports_each_epoch_only_when_asked(monkeypatch):
    # issue #61: no bar by default, even on a terminal; progress=True (the experiment under iclr24 run) draws one
    from tests.progress_probe import bars

    recorder = bars(monkeypatch)
    quiet = train_das(PlantedPatcher(n_batches=3), k=1, epochs=4, seed=0)
    assert recorder.added == []
    loud = train_das(PlantedPatcher(n_batches=3), k=1, epochs=4, seed=0, progress=True)
    assert recorder.added == [("DAS at planted.hook_post", 4)] and recorder.advanced == {"DAS at planted.hook_post": 4}
    torch.testing.assert_close(loud.basis, quiet.basis, rtol=0, atol=0)  # the bar changes nothing else
