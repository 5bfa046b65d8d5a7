import json
import math

import pytest

from iclr24.core import latest_run, latest_runs, load_run, run


def test_run_writes_a_complete_folder(toys, tmp_path):
    record = run("toy", preset="smoke", seed=1, runs_dir=tmp_path, quiet=True)
    assert record.ok and record.run_dir.parent == tmp_path / "toy"
    names = {p.name for p in record.run_dir.iterdir()}
    assert {"result.json", "config.json", "environment.json", "log.txt", "samples.png", "artifacts"} <= names
    result = json.loads((record.run_dir / "result.json").read_text())
    assert result["status"] == "ok" and result["preset"] == "smoke" and result["seed"] == 1
    assert result["claims"][0]["statement"] == "mean is small" and result["claims"][0]["holds"] is True
    assert result["figures"] == ["samples.png"] and result["tables"]["draws"][0]["i"] == 0
    assert result["wall_time_s"] >= 0 and result["timings"] == {"seconds": 0.1}
    config = json.loads((record.run_dir / "config.json").read_text())
    assert config == {"preset": "smoke", "class": "ToyConfig",
                      "fields": {"n": 4, "lr": 0.1, "flag": False, "sizes": [1, 2], "mode": "a", "limit": None,
                                 "fail": False}}
    env = json.loads((record.run_dir / "environment.json").read_text())
    assert env["torch_threads"] >= 1 and env["packages"]["torch"]
    assert "drew 4 numbers" in (record.run_dir / "log.txt").read_text()
    assert (record.run_dir / "artifacts" / "samples.txt").is_file()
    assert not [p for p in (tmp_path / "toy").iterdir() if p.name.startswith(".")]


def test_same_seed_same_metrics_other_seed_other_metrics(toys, tmp_path):
    a = run("toy", preset="smoke", seed=3, runs_dir=tmp_path, quiet=True).result["metrics"]
    b = run("toy", preset="smoke", seed=3, runs_dir=tmp_path, quiet=True).result["metrics"]
    c = run("toy", preset="smoke", seed=4, runs_dir=tmp_path, quiet=True).result["metrics"]
    assert a == b and a != c


def test_a_failing_run_is_recorded_without_partial_results(toys, tmp_path):
    record = run("toy", preset="smoke", overrides=["fail=true"], runs_dir=tmp_path, quiet=True)
    assert not record.ok
    result = json.loads((record.run_dir / "result.json").read_text())
    assert result["status"] == "failed"
    assert result["error"] == "RuntimeError: the toy failed on purpose"
    assert "Traceback" in result["traceback"]
    assert "metrics" not in result and "claims" not in result
    assert not (record.run_dir / "artifacts").exists() and not list(record.run_dir.glob("*.png"))
    assert "failed after" in (record.run_dir / "log.txt").read_text()


def test_an_undeclared_claim_fails_the_run(toys, tmp_path):
    record = run("toy_forgetful", preset="smoke", runs_dir=tmp_path, quiet=True)
    assert not record.ok and "did not report its declared claims: ['declared']" in record.result["error"]


def test_an_interrupted_run_leaves_nothing(toys, tmp_path):
    with pytest.raises(KeyboardInterrupt):
        run("toy_interrupted", preset="smoke", runs_dir=tmp_path, quiet=True)
    assert list((tmp_path / "toy_interrupted").iterdir()) == []


def test_bad_arguments_raise_before_anything_is_written(toys, tmp_path):
    with pytest.raises(ValueError, match="unknown key 'nope'"):
        run("toy", overrides=["nope=1"], runs_dir=tmp_path)
    with pytest.raises(ValueError, match="unknown preset"):
        run("toy", preset="paper", runs_dir=tmp_path)
    with pytest.raises(TypeError, match="seed must be an int"):
        run("toy", seed="1", runs_dir=tmp_path)
    assert not tmp_path.joinpath("toy").exists() or not any(tmp_path.joinpath("toy").iterdir())


def test_latest_run_is_the_newest(toys, tmp_path):
    first = run("toy", preset="smoke", seed=1, runs_dir=tmp_path, quiet=True)
    second = run("toy", preset="smoke", seed=2, runs_dir=tmp_path, quiet=True)
    assert first.run_dir != second.run_dir  # same second: a suffix keeps both
    assert latest_run(tmp_path, "toy").run_dir == second.run_dir
    assert set(latest_runs(tmp_path)) == {"toy"}
    assert load_run(second.run_dir).result["seed"] == 2
    assert latest_run(tmp_path, "missing") is None


def test_run_restores_global_settings(toys, tmp_path):
    import torch

    from iclr24.core.progress import set_quiet

    before = torch.are_deterministic_algorithms_enabled()
    run("toy", preset="smoke", runs_dir=tmp_path, quiet=True)
    assert torch.are_deterministic_algorithms_enabled() == before
    assert set_quiet(False) is False
    assert math.isfinite(latest_run(tmp_path, "toy").result["metrics"]["mean"])
