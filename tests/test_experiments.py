"""The experiment contract, checked for every registered method: a smoke run is complete,
honest in form, and deterministic. New methods are covered by registering."""

import math

import pytest

from iclr24.core import get_experiment, list_experiments, run

NAMES = [e.name for e in list_experiments()]


@pytest.mark.parametrize("name", NAMES)
def test_smoke_run_is_complete_and_deterministic(name, tmp_path):
    first = run(name, preset="smoke", seed=3, runs_dir=tmp_path, quiet=True)
    assert first.ok, first.result.get("traceback")
    result = first.result
    assert [c["statement"] for c in result["claims"]] == list(get_experiment(name).claims)
    for claim in result["claims"]:
        assert isinstance(claim["holds"], bool) and claim["paper"] and claim["measured"] and claim["criterion"]
    assert all(math.isfinite(v) for v in {**result["metrics"], **result["timings"]}.values())
    assert result["figures"] and all((first.run_dir / f).stat().st_size > 1000 for f in result["figures"])
    second = run(name, preset="smoke", seed=3, runs_dir=tmp_path, quiet=True)
    assert second.result["metrics"] == result["metrics"]


def test_every_method_package_registers_its_experiment():
    from iclr24.core.methods import METHOD_PACKAGES

    assert sorted(NAMES) == sorted(METHOD_PACKAGES)


@pytest.mark.parametrize("name", NAMES)
def test_every_config_refuses_nonsense_counts_and_empty_lists_before_running(name):
    import dataclasses

    exp = get_experiment(name)
    cfg = exp.config("smoke")
    negative_ok = set(getattr(cfg, "allow_negative", ()))
    empty_ok = set(getattr(cfg, "allow_empty", ()))
    for field in dataclasses.fields(cfg):
        value = getattr(cfg, field.name)
        if isinstance(value, int) and not isinstance(value, bool) and field.name not in negative_ok:
            with pytest.raises(ValueError, match=field.name):
                exp.config("smoke", [f"{field.name}=-1"])
        if isinstance(value, float) and field.name not in negative_ok:
            with pytest.raises(ValueError, match=field.name):
                exp.config("smoke", [f"{field.name}=-1.5"])
        if isinstance(value, tuple) and field.name not in empty_ok:
            with pytest.raises(ValueError, match=field.name):
                exp.config("smoke", [f"{field.name}="])


@pytest.mark.parametrize("name", NAMES)
def test_fields_declared_to_allow_zero_accept_it(name):
    exp = get_experiment(name)
    for field in getattr(exp.config("smoke"), "allow_zero", ()):
        assert getattr(exp.config("smoke", [f"{field}=0"]), field) == 0
