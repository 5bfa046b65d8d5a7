from dataclasses import dataclass

import numpy as np
import pytest
import torch

from iclr24.core import Check, Claim, Result, RunContext, apply_overrides, compare, experiment, get_experiment, not_run
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


def test_a_claim_takes_its_verdict_from_evidence_only():
    claim = Claim("s", "p", "m", evidence=compare([3.0, 4.0, 5.0], [1.0, 1.5, 2.0]))
    assert (claim.verdict, claim.holds) == ("holds", True)
    assert claim.criterion.startswith("mean paired difference > 0")  # the evidence's rule by default
    record = claim.to_dict()
    assert record["verdict"] == "holds" and record["holds"] is True and record["evidence"]["n"] == 3
    assert Claim("s", "p", "m", evidence=not_run("switched off")).verdict == "not run"
    with pytest.raises(TypeError, match="Claim.evidence must be an Evidence"):
        Claim("s", "p", "m", evidence=True)
    with pytest.raises(TypeError, match="unexpected keyword argument 'holds'"):
        Claim("s", "p", "m", holds=True)


def test_a_sanity_check_is_a_plain_bool_kept_apart_from_claims():
    assert Check("x is finite", np.bool_(True)).passed is True
    assert Check("x is finite", torch.tensor(1.0) > 2).passed is False
    with pytest.raises(TypeError, match="Check.passed must be a bool"):
        Check("x", "yes")
    with pytest.raises(TypeError, match="Check objects"):
        Result(metrics={"a": 1.0}, claims=[], checks=["fine"])


def test_replicate_seeds_of_a_seed_group_never_overlap(tmp_path):
    blocks = [RunContext(seed=s, preset="smoke", run_dir=tmp_path).replicate_seeds(3) for s in range(4)]
    assert blocks[0] == [0, 1, 2]  # seed 0 keeps the replicates it always had
    flat = [s for block in blocks for s in block]
    assert len(set(flat)) == len(flat) == 12
    with pytest.raises(ValueError, match="n must be an int >= 1"):
        RunContext(seed=0, preset="smoke", run_dir=tmp_path).replicate_seeds(0)


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


def test_config_ints_have_an_upper_bound_and_given_paths_must_exist(toys, tmp_path):
    exp = get_experiment("toy")
    with pytest.raises(ValueError, match=r"n must be <= 1e\+07, got 1e\+23"):
        exp.config("smoke", ["n=99999999999999999999999"])
    with pytest.raises(ValueError, match=r"sizes must hold values <= 1e\+07"):
        exp.config("smoke", ["sizes=1,100000000"])


def test_a_path_given_with_set_must_exist(tmp_path):
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class WithPath:
        shape_sets_dir: str = ""

    with pytest.raises(ValueError, match=r"shape_sets_dir='/nonexistent' does not exist"):
        apply_overrides(WithPath(), ["shape_sets_dir=/nonexistent"])
    assert apply_overrides(WithPath(), [f"shape_sets_dir={tmp_path}"]).shape_sets_dir == str(tmp_path)
