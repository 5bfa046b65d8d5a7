import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression

from iclr24.lfr import linear_probe
from iclr24.lfr.data import digit_images, load_table, synthetic_series


def test_every_series_class_is_its_own_signal():
    # Without noise, the phase-free spectrum tells all classes apart: none is a copy of another.
    split = synthetic_series(n=600, length=128, n_classes=12, noise=0.0, seed=0)
    spectrum = [np.abs(np.fft.rfft(x.numpy(), axis=-1))[:, 0] for x in (split.X_train, split.X_test)]
    probe = LogisticRegression(max_iter=5000).fit(spectrum[0], split.y_train)
    assert probe.score(spectrum[1], split.y_test) > 0.95
    assert split.X_train.shape[1:] == (1, 128) and set(split.y_train) == set(range(12))


@pytest.mark.parametrize("kwargs, message", [({"n_classes": 1}, "n_classes must be in"),
                                             ({"n_classes": 13}, "n_classes must be in"),
                                             ({"length": 4}, "length must be >= 16"),
                                             ({"n": 10}, r"n must be >= 4 \* n_classes = 24"),
                                             ({"noise": -1.0}, "noise must be finite")])
def test_series_arguments_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        synthetic_series(**kwargs)


def test_digits_are_placed_on_the_canvas_and_tables_are_standardised():
    split = digit_images(seed=0, canvas=12, noise=0.0)
    assert split.X_train.shape[1:] == (1, 12, 12) and len(split.X_train) + len(split.X_test) == 1797
    table = load_table("wine", seed=0)
    assert torch.allclose(table.X_train.mean(0), torch.zeros(13), atol=1e-5)
    with pytest.raises(ValueError, match="table must be one of"):
        load_table("iris")
    with pytest.raises(ValueError, match="canvas must be >= 8"):
        digit_images(canvas=6)


def test_linear_probe_scores_the_held_out_rows():
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(80, 3))
    y = (Z[:, 0] > 0).astype(int)
    right = linear_probe(Z, y, Z, y)
    assert right > 0.9 and linear_probe(Z, y, Z, 1 - y) == pytest.approx(1 - right)  # the test labels are scored
