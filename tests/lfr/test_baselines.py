import math

import pytest
import torch
import torch.nn.functional as F

from iclr24.lfr import SCARF, Autoencoder, RandomInit, SimCLR, image_augment, nt_xent, series_augment
from iclr24.lfr.networks import mlp_encoder


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)


def test_nt_xent_known_value():
    # Two one-hot rows, each view equal to its anchor: the positive has cosine 1, the two negatives 0.
    z = torch.eye(2, 4)
    t = 0.5
    expected = -math.log(math.exp(1 / t) / (math.exp(1 / t) + 2 * math.exp(0.0)))
    assert nt_xent(z, z, t).item() == pytest.approx(expected, rel=1e-6)


def test_nt_xent_prefers_matching_views():
    torch.manual_seed(0)
    a = torch.randn(16, 8)
    assert nt_xent(a, a + 0.01 * torch.randn(16, 8), 0.5) < nt_xent(a, torch.randn(16, 8), 0.5)


def test_scarf_corrupts_exactly_the_configured_share_from_the_marginals():
    torch.manual_seed(0)
    pool = torch.arange(200.0).view(20, 10) + 1000  # every pool value differs from every batch value
    model = SCARF(mlp_encoder(10, dim=4, hidden=8), 10, corruption_rate=0.3)
    model.prepare(pool)
    model._rng = torch.Generator().manual_seed(0)
    x = torch.zeros(6, 10)
    corrupted = model.corrupt(x)
    changed = corrupted != 0
    assert changed.sum(1).tolist() == [3] * 6
    rows, cols = changed.nonzero(as_tuple=True)
    # a replaced value comes from the same column of some pool row
    assert torch.all((corrupted[rows, cols] - 1000 - cols) % 10 == 0)


def test_scarf_needs_its_training_data():
    model = SCARF(mlp_encoder(3, dim=4, hidden=4), 3)
    with pytest.raises(RuntimeError, match="call fit"):
        model.corrupt(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="corruption_rate"):
        SCARF(mlp_encoder(3, dim=4, hidden=4), 3, corruption_rate=1.0)


def test_augmentations_are_the_identity_at_zero_strength_and_shift_as_asked():
    torch.manual_seed(0)
    images = torch.randn(5, 1, 6, 6)
    assert torch.equal(image_augment(images, max_shift=0, noise=0.0, erase=0), images)
    series = torch.randn(5, 2, 16)
    assert torch.equal(series_augment(series, jitter=0.0, scale=0.0, max_shift=0), series)
    shifted = series_augment(series, torch.Generator().manual_seed(1), jitter=0.0, scale=0.0, max_shift=3)
    for row, out in zip(series, shifted):
        assert any(torch.equal(torch.roll(row, k, dims=-1), out) for k in range(-3, 4))
    moved = image_augment(images, torch.Generator().manual_seed(2), max_shift=1, noise=0.0, erase=0)
    for img, out in zip(images, moved):
        padded = F.pad(img, (1, 1, 1, 1))
        assert any(torch.equal(padded[:, dy:dy + 6, dx:dx + 6], out) for dy in range(3) for dx in range(3))
    erased = image_augment(torch.ones(3, 1, 6, 6), max_shift=0, noise=0.0, erase=2)
    assert (erased == 0).sum((1, 2, 3)).tolist() == [4, 4, 4]


def test_random_init_does_not_train_and_the_others_do():
    torch.manual_seed(0)
    X = torch.randn(64, 6)
    for make in (lambda e: RandomInit(e), lambda e: Autoencoder(e, 6), lambda e: SCARF(e, 6),
                 lambda e: SimCLR(e, 6, lambda x, g: x + 0.1 * torch.randn(x.shape, generator=g))):
        torch.manual_seed(0)
        encoder = mlp_encoder(6, dim=8, hidden=16)
        before = [p.clone() for p in encoder.parameters()]
        method = make(encoder).fit(X, epochs=2, batch_size=16, generator=torch.Generator().manual_seed(0))
        moved = any(not torch.equal(a, b) for a, b in zip(before, encoder.parameters()))
        assert moved == (not isinstance(method, RandomInit)), type(method).__name__
        assert method.transform(X).shape == (64, 8)


def test_autoencoder_learns_to_reconstruct():
    torch.manual_seed(0)
    X = torch.randn(128, 4) @ torch.randn(4, 12)
    model = Autoencoder(mlp_encoder(12, dim=8, hidden=32), 12)
    model.fit(X, epochs=30, batch_size=32, lr=3e-3, generator=torch.Generator().manual_seed(0))
    assert model.history_[-1]["all"] < 0.2 * model.history_[0]["all"]
