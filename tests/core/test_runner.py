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
    assert result["claims"][0]["statement"] == "mean is small" and result["claims"][0]["verdict"] == "holds"
    assert result["claims"][0]["evidence"]["unit"] == "draws" and result["checks"][0]["passed"] is True
    assert (record.run_dir / "evidence.png").stat().st_size > 1000  # the forest plot, added by the runner
    assert result["figures"] == ["samples.png", "evidence.png"] and result["tables"]["draws"][0]["i"] == 0
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


def test_sigterm_is_handled_like_ctrl_c(toys, tmp_path):
    import signal

    from iclr24.core.runner import RunInterrupted

    def mine(signum, frame):
        pass

    before = signal.signal(signal.SIGTERM, mine)
    try:
        with pytest.raises(RunInterrupted, match="signal"):
            run("toy_terminated", preset="smoke", runs_dir=tmp_path, quiet=True)
        assert list((tmp_path / "toy_terminated").iterdir()) == []
        assert signal.getsignal(signal.SIGTERM) is mine  # the caller's handler comes back
    finally:
        signal.signal(signal.SIGTERM, before)


def test_an_interrupt_after_the_result_is_written_keeps_it(toys, tmp_path, monkeypatch):
    from iclr24.core import runner

    real = runner.write_json_atomic

    def write_then_interrupt(path, payload):
        real(path, payload)
        if path.name == "result.json":
            raise KeyboardInterrupt  # the signal lands just after the write

    monkeypatch.setattr(runner, "write_json_atomic", write_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        run("toy", preset="smoke", runs_dir=tmp_path, quiet=True)
    (kept,) = (tmp_path / "toy").iterdir()
    assert json.loads((kept / "result.json").read_text())["status"] == "ok"


def test_a_run_that_measures_nothing_fails(toys, tmp_path):
    record = run("toy_empty", preset="smoke", runs_dir=tmp_path, quiet=True)
    assert not record.ok and "measured nothing" in record.result["error"]


def test_seed_must_fit_the_generators(toys, tmp_path):
    for seed in (-1, 2**32):  # scikit-learn's random_state must be below 2**32
        with pytest.raises(ValueError, match=r"seed must be in \[0, 2\*\*32\)"):
            run("toy", seed=seed, runs_dir=tmp_path)


def test_a_name_clash_takes_the_next_free_name_and_keeps_both(tmp_path):
    from iclr24.core.runner import _publish

    (tmp_path / "20260101T000000Z").mkdir()
    (tmp_path / "20260101T000000Z" / "result.json").write_text("{}")
    tmp = tmp_path / ".tmp-x-1"
    tmp.mkdir()
    (tmp / "result.json").write_text('{"name": "second"}')
    final = _publish(tmp, tmp_path, "20260101T000000Z")
    assert final.name == "20260101T000000Z-2" and (final / "result.json").read_text() == '{"name": "second"}'
    assert (tmp_path / "20260101T000000Z" / "result.json").read_text() == "{}" and not tmp.exists()


def test_a_finished_run_that_cannot_be_renamed_is_kept(toys, tmp_path, monkeypatch):
    import os

    real_replace = os.replace

    def refuse(src, dst):  # only the final rename of the run folder fails
        if os.path.isdir(src):
            raise OSError(39, "Directory not empty")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(RuntimeError, match="it is kept at .*tmp-"):
        run("toy", preset="smoke", runs_dir=tmp_path, quiet=True)
    monkeypatch.undo()
    kept = [p for p in (tmp_path / "toy").iterdir()]
    assert len(kept) == 1 and kept[0].name.startswith(".tmp-") and (kept[0] / "result.json").is_file()
    # the next run in the same place publishes it once its process is gone (here: a dead pid in its name)
    dead = kept[0].with_name(kept[0].name.rsplit("-", 1)[0] + "-999999999")
    kept[0].rename(dead)
    run("toy", preset="smoke", runs_dir=tmp_path, quiet=True)
    published = [p for p in (tmp_path / "toy").iterdir() if not p.name.startswith(".")]
    assert len(published) == 2 and all((p / "result.json").is_file() for p in published)


def test_stale_temporary_folders_of_dead_processes_are_swept(toys, tmp_path):
    import os

    from iclr24.core.runner import _HOST

    parent = tmp_path / "toy"
    parent.mkdir()
    stale = parent / f".tmp-20260101T000000000000-{_HOST}-999999999"
    stale.mkdir()
    (stale / "log.txt").write_text("died")
    alive = parent / f".tmp-20260101T000000000000-{_HOST}-{os.getppid()}"
    alive.mkdir()
    elsewhere = parent / ".tmp-20260101T000000000000-otherhost-999999999"  # a shared folder's other machine
    elsewhere.mkdir()
    run("toy", preset="smoke", runs_dir=tmp_path, quiet=True)
    assert not stale.exists() and alive.exists() and elsewhere.exists()


def test_concurrent_runs_finishing_together_lose_nothing(toys, tmp_path):
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    for trial in range(2):
        out = tmp_path / f"trial{trial}"
        barrier = ctx.Barrier(8)  # every run reaches its final rename at the same moment, in the same second
        procs = [ctx.Process(target=_run_toy, args=(out, seed, barrier)) for seed in range(8)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
        assert all(p.exitcode == 0 for p in procs)
        finished = [d for d in (out / "toy").iterdir() if not d.name.startswith(".")]
        seeds = sorted(json.loads((d / "result.json").read_text())["seed"] for d in finished)
        assert seeds == list(range(8))


def _run_toy(out, seed, barrier):
    from iclr24.core import runner

    publish = runner._publish

    def synchronised(tmp, parent, stamp):
        barrier.wait(60)
        return publish(tmp, parent, "20260101T000000Z")  # one stamp for all: every name is contested

    runner._publish = synchronised
    run("toy", preset="smoke", seed=seed, runs_dir=out, quiet=True)


def test_a_damaged_result_is_skipped_with_a_warning(toys, tmp_path):
    older = run("toy", preset="smoke", seed=1, runs_dir=tmp_path, quiet=True)
    newer = tmp_path / "toy" / "29990101T000000Z"
    newer.mkdir()
    (newer / "result.json").write_text("{not json")
    with pytest.warns(UserWarning, match="cannot read run result .*29990101T000000Z"):
        assert latest_run(tmp_path, "toy").run_dir == older.run_dir
    with pytest.raises(ValueError, match="cannot read run result"):
        load_run(newer)
