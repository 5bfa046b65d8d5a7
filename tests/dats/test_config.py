"""Issue #59: ``--set`` values that passed the config check and then crashed the run are one-line errors."""

import pytest
from typer.testing import CliRunner

from iclr24 import cli
from iclr24.core import get_experiment


@pytest.mark.parametrize(
    "setting, message",
    [
        # a choice: DATS's KL reference distribution
        ("kl=bogus", "error: bad value for 'kl' in experiment 'dats': 'bogus' (expected one of "
                     "['consecutive', 'uniform'])"),
        # a range: the samplers mix with uniform, floor + (1 - 5 floor) p, so floor <= 1/5
        ("floor=0.9", "floor must be in [0, 0.2] (1 / the 5 training configurations: every configuration's minimum "
                      "probability), got 0.9"),
        # a magnitude: Adam's update overflowed
        ("lr=1e308", "error: experiment 'dats': lr must be <= 1, got 1e+308"),
        ("lr=inf", "error: bad value for 'lr' in experiment 'dats': 'inf' (expected a finite float)"),
        # the float32 loss overflowed to inf
        ("residual_weight=1e300", "error: experiment 'dats': residual_weight must be <= 1000, got 1e+300"),
        ("model=big", "error: bad value for 'model' in experiment 'dats': 'big' (expected one of "
                      "['parametric', 'hyper'])"),
    ],
)
def test_bad_set_values_are_one_line_errors_before_the_run(tmp_path, monkeypatch, setting, message):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli.app, ["run", "dats", "--set", setting, "-p", "smoke"])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert not (tmp_path / "runs").exists()


def test_the_edges_of_the_ranges_are_accepted():
    exp = get_experiment("dats")
    cfg = exp.config("smoke", ["floor=0.2", "kl=uniform", "lr=1", "model=hyper"])
    assert (cfg.floor, cfg.kl, cfg.lr, cfg.model) == (0.2, "uniform", 1.0, "hyper")
    assert exp.config("smoke", ["floor=0"]).floor == 0.0
    with pytest.raises(ValueError, match="floor must be in"):
        exp.config("smoke", {"floor": 0.2000001})
    with pytest.raises(ValueError, match="lr must be > 0, got 0"):
        exp.config("smoke", ["lr=0"])
