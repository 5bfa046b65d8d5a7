"""The review's bad inputs to the newer packages: each a clear error at the public boundary, naming the argument."""

import re

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


# --- issue #59: --set values that passed the config check and crashed the run ------------------------------------

LEARNING_RATES = [("aid", "lr"), ("aid", "lm_lr"), ("dats", "lr"), ("federated", "lr"), ("holonets", "lr"),
                  ("hyperattention", "lm_lr"), ("loqa", "actor_lr"), ("loqa", "critic_lr"),
                  ("subspace_patching", "lr")]


@pytest.mark.parametrize("method, field", LEARNING_RATES)
def test_every_learning_rate_has_a_documented_maximum(method, field):
    from iclr24.core import get_experiment

    exp = get_experiment(method)
    cap = exp.config_class.maximum[field]
    assert all(getattr(cfg, field) <= cap for cfg in exp.presets.values())
    with pytest.raises(ValueError, match=rf"experiment '{method}': {field} must be <= {cap:g}, got 1e\+308"):
        exp.config("smoke", [f"{field}=1e308"])
    assert getattr(exp.config("smoke", [f"{field}={cap:g}"]), field) == cap


def test_no_learning_rate_field_is_left_without_a_maximum():
    """Any config field named like a learning rate, in any method, gets a maximum (tora's, l2mac's, ... too)."""
    import dataclasses

    from iclr24.core import list_experiments

    for exp in list_experiments():
        cap = getattr(exp.config_class, "maximum", {})
        for f in dataclasses.fields(exp.config_class):
            if f.name == "lr" or f.name.endswith("_lr"):
                assert f.name in cap, f"{exp.name}.{f.name} has no maximum"


@pytest.mark.parametrize("method, setting, expected", [
    ("dats", "kl=bogus", "['consecutive', 'uniform']"),
    ("dats", "model=bogus", "['parametric', 'hyper']"),
    ("kernel_trees", "features=bogus", "['auto', 'kernel_matrix', 'taylor', 'raw']"),
    ("kernel_trees", "kernels=rbf,bogus", "['rbf', 'laplace']"),
    ("orthogonal_classifier", "extra_arc_variants=mask", "['cls_cbs', 'per_sample']"),
])
def test_string_choices_are_checked_when_set(method, setting, expected):
    from iclr24.core import get_experiment

    key, _, value = setting.partition("=")
    with pytest.raises(ValueError, match=rf"bad value for '{key}' in experiment '{method}': '{value}' "
                                         rf"\(.*expected one of {re.escape(expected)}\)"):
        get_experiment(method).config("smoke", [setting])


def test_an_empty_extra_arc_variants_skips_them_as_documented():
    from iclr24.core import get_experiment

    assert get_experiment("orthogonal_classifier").config("smoke", ["extra_arc_variants="]).extra_arc_variants == ()


def test_greedy_dpp_refuses_a_kernel_that_is_not_positive_semidefinite():
    from iclr24.lfr import greedy_dpp, max_min_selection

    indefinite = torch.tensor([[1.0, 2.0], [2.0, 1.0]])  # symmetric, eigenvalues -1 and 3
    with pytest.raises(ValueError, match=r"kernel must be positive semi-definite .* smallest eigenvalue is -1, below "
                                         r"-tol \* max \|eigenvalue\| = -3e-06"):
        greedy_dpp(indefinite, 1)
    with pytest.raises(ValueError, match="symmetric"):
        greedy_dpp(torch.tensor([[1.0, 0.5], [0.0, 1.0]]), 1)
    assert max_min_selection(indefinite, 2) == [0, 1]  # a plain similarity: no PSD needed there
    # rounding below zero is not refused: a Gram matrix of rank 2 whose zero eigenvalues come out slightly negative
    A = torch.randn(6, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    rounded = (A @ A.T).float().double()
    assert torch.linalg.eigvalsh(rounded)[0] < 0
    assert len(set(greedy_dpp(rounded, 4))) == 4
    with pytest.raises(ValueError, match=r"tol must be a number in \[0, 1\)"):
        greedy_dpp(torch.eye(2), 1, tol=-1.0)
