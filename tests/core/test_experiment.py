from dataclasses import dataclass

import numpy as np
import pytest
import torch

from iclr24.core import Claim, Result, apply_overrides, experiment, get_experiment
from iclr24.core.experiment import _REGISTRY
from tests.core.toys import PRESETS, ToyConfig


def test_duplicate_names_are_refused(toys):
    with pytest.raises(ValueError, match="'toy' is already registered"):
        @experiment(name="toy", paper="p", presets=PRESETS)
        def other(cfg, ctx):
            return Result(metrics={}, claims=[])


def test_reregistering_the_same_function_is_allowed(toys):
    again = experiment(name="toy", paper="p", presets=PRESETS)(toys.fn)
    assert get_experiment("toy") is again


def test_unknown_name_lists_known_ones(toys):
    with pytest.raises(ValueError, match=r"unknown experiment 'nope'; known experiments: .*hyperattention.*toy"):
        get_experiment("nope")


def test_presets_must_include_smoke_and_quick():
    with pytest.raises(ValueError, match=r"missing \['quick'\]"):
        experiment(name="bad", paper="p", presets={"smoke": ToyConfig()})
    with pytest.raises(ValueError, match=r"unknown \['huge'\]"):
        experiment(name="bad", paper="p", presets={**PRESETS, "huge": ToyConfig()})
    with pytest.raises(TypeError, match="one dataclass"):
        experiment(name="bad", paper="p", presets={"smoke": ToyConfig(), "quick": {"n": 1}})
    assert "bad" not in _REGISTRY


def test_unknown_preset(toys):
    with pytest.raises(ValueError, match=r"unknown preset 'paper' for experiment 'toy'; expected one of"):
        toys.config("paper")


@pytest.mark.parametrize(
    "override, field, value",
    [
        ("n=3", "n", 3),
        ("lr=1e-3", "lr", 1e-3),
        ("flag=true", "flag", True),
        ("flag=0", "flag", False),
        ("sizes=4,5,6", "sizes", (4, 5, 6)),
        ("sizes=(7)", "sizes", (7,)),
        ("mode=b", "mode", "b"),
        ("limit=none", "limit", None),
        ("limit=12", "limit", 12),
    ],
)
def test_overrides_are_parsed_by_field_type(override, field, value):
    cfg = apply_overrides(ToyConfig(), [override])
    assert getattr(cfg, field) == value and type(getattr(cfg, field)) is type(value)


@pytest.mark.parametrize(
    "override, match",
    [
        ("size=3", r"unknown key 'size' for config; known keys: n, lr, flag"),
        ("n=three", r"bad value for 'n' in config: 'three' \(expected an int\)"),
        ("lr=nan", "expected a finite float"),
        ("flag=maybe", r"expected a bool"),
        ("mode=c", r"expected one of \['a', 'b'\]"),
        ("n", "must look like key=value"),
        ("n=0", "n must be >= 1, got 0"),
    ],
)
def test_bad_overrides_name_the_key_and_value(override, match):
    with pytest.raises(ValueError, match=match):
        apply_overrides(ToyConfig(), [override])


def test_dict_overrides_are_type_checked():
    assert apply_overrides(ToyConfig(), {"lr": 1, "sizes": [3]}) == ToyConfig(lr=1.0, sizes=(3,))
    with pytest.raises(ValueError, match="bad value for 'n'"):
        apply_overrides(ToyConfig(), {"n": "3"})
    with pytest.raises(ValueError, match="bad value for 'n'"):
        apply_overrides(ToyConfig(), {"n": True})


def test_claim_holds_must_be_a_computed_bool():
    assert Claim("s", "p", "m", holds=np.float64(2.0) > 1).holds is True
    assert Claim("s", "p", "m", holds=torch.tensor(0.5) > 1).holds is False
    with pytest.raises(TypeError, match="holds must be a bool"):
        Claim("s", "p", "m", holds="yes")


def test_result_checks_metrics_and_figure_names():
    assert Result(metrics={"a": np.float32(1.5)}, claims=[]).metrics == {"a": 1.5}
    with pytest.raises(TypeError, match=r"metrics\['a'\] must be a number"):
        Result(metrics={"a": "high"}, claims=[])
    with pytest.raises(ValueError, match="plain"):
        Result(metrics={}, claims=[], figures={"../x.png": None})
    with pytest.raises(TypeError, match="Claim objects"):
        Result(metrics={}, claims=["it works"])


def test_config_dataclass_must_be_dataclass():
    @dataclass
    class C:
        n: int = 1

    assert apply_overrides(C(), ["n=2"]).n == 2
