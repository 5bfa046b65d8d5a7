"""The review's bad inputs to the newer packages: each a clear error at the public boundary, naming the argument."""

import numpy as np
import pytest
import torch


def test_fldd_and_interchange_accuracy_refuse_mismatched_empty_and_nan():
    from iclr24.subspace_patching import fldd
    from iclr24.subspace_patching.patching import interchange_accuracy

    with pytest.raises(ValueError, match=r"paired by prompt .* got \(3,\) and \(2,\)"):
        fldd(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.0]))  # the review: -2610.35
    with pytest.raises(ValueError, match="ld_patched is empty"):
        fldd(torch.tensor([]), torch.tensor([]))
    with pytest.raises(ValueError, match="ld_clean must be finite"):
        fldd(torch.tensor([1.0, 2.0]), torch.tensor([1.0, float("nan")]))
    with pytest.raises(ValueError, match="ld_patched is empty"):
        interchange_accuracy(torch.tensor([]))
    assert fldd(torch.tensor([0.5, 0.5]), torch.tensor([1.0, 1.0])) == pytest.approx(50.0)


def test_patch_direction_refuses_integer_tensors():
    from iclr24.subspace_patching import patch_direction

    with pytest.raises(TypeError, match=r"base must have dtype in \(float16, bfloat16, float32, float64\), got int64"):
        patch_direction(torch.ones(2, 3, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long), torch.ones(3))


def test_nt_xent_refuses_bad_temperature_empty_and_mismatched_batches():
    from iclr24.lfr.baselines import nt_xent

    z = torch.randn(4, 8)
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError, match="temperature must be > 0"):
            nt_xent(z, z, bad)
    with pytest.raises(ValueError, match="at least 2 rows"):
        nt_xent(torch.randn(0, 8), torch.randn(0, 8), 0.5)
    with pytest.raises(ValueError, match=r"the same shape\), got \(4, 8\) and \(3, 8\)"):
        nt_xent(z, torch.randn(3, 8), 0.5)
    assert torch.isfinite(nt_xent(z, z + 0.1, 0.5))


def test_linear_probe_names_its_arguments():
    from iclr24.lfr import linear_probe

    Z, y = np.random.default_rng(0).normal(size=(20, 3)), np.arange(20) % 2
    with pytest.raises(ValueError, match=r"y_train must hold one label per row \(20\)"):
        linear_probe(Z, y[:10], Z, y)
    with pytest.raises(ValueError, match="Z_test must have Z_train's width 3, got 2"):
        linear_probe(Z, y, Z[:, :2], y)
    with pytest.raises(ValueError, match="at least two classes"):
        linear_probe(Z, np.zeros(20), Z, y)
    with pytest.raises(ValueError, match="Z_train must be finite"):
        linear_probe(np.full((20, 3), np.nan), y, Z, y)
    with pytest.raises(ValueError, match="C must be > 0"):
        linear_probe(Z, y, Z, y, C=0)
    assert 0.0 <= linear_probe(Z, y, Z, y) <= 1.0


def test_nc1_refuses_float_and_negative_labels():
    from iclr24.orthogonal_classifier import nc1

    features = torch.randn(6, 4)
    with pytest.raises(TypeError, match="labels must be integer class indices, got dtype float32"):
        nc1(features, torch.tensor([0.0, 1.0, 0.0, 1.0, 0.0, 1.0]))
    with pytest.raises(ValueError, match="labels must be class indices >= 0, got -1"):
        nc1(features, torch.tensor([0, -1, 0, -1, 0, -1]))


def test_molora_linear_names_the_expected_input_width():
    from iclr24.moe_peft import MoLoRALinear

    layer = MoLoRALinear(torch.nn.Linear(8, 4), num_experts=2, r=2)
    assert layer(torch.randn(3, 8)).shape == (3, 4)
    with pytest.raises(ValueError, match=r"expects inputs \(\*, in_features=8\), got shape \(3, 5\)"):
        layer(torch.randn(3, 5))
