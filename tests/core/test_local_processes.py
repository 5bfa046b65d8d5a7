"""`run all` on every core: the local executor's process pool gives the same runs as one process."""

from datetime import datetime, timedelta

from iclr24.core.executors import Job, run_jobs

JOBS = [Job("orthogonal_classifier", "smoke", 0), Job("kernel_trees", "smoke", 0),
        Job("hyperattention", "smoke", 0), Job("orthogonal_classifier", "smoke", 1)]


def test_a_process_pool_writes_the_same_runs_in_the_jobs_order(tmp_path):
    seen = []
    pooled = run_jobs(JOBS, runs_dir=tmp_path / "pool", quiet=True, processes=2, on_record=seen.append)
    alone = run_jobs(JOBS, runs_dir=tmp_path / "one", quiet=True, processes=1)
    assert [(r.name, r.result["seed"]) for r in pooled] == [(j.name, j.seed) for j in JOBS]
    assert all(r.ok for r in pooled) and len(seen) == 4
    for a, b in zip(pooled, alone):  # a metric does not depend on what ran beside it
        assert a.result["metrics"] == b.result["metrics"]
        if a.name != "hyperattention":  # its speed claims judge wall-clock timings, which vary with machine load
            assert [c["verdict"] for c in a.result["claims"]] == [c["verdict"] for c in b.result["claims"]]
        assert a.run_dir.parent == tmp_path / "pool" / a.name
    # hyperattention times wall-clock: it runs after the pool, with nothing beside it
    assert seen[-1].name == "hyperattention"
    finished = max(datetime.fromisoformat(r.result["started_at"]) + timedelta(seconds=r.result["wall_time_s"])
                   for r in pooled if r.name != "hyperattention")
    assert datetime.fromisoformat(seen[-1].result["started_at"]) >= finished - timedelta(seconds=1)  # s resolution


def test_experiments_a_fresh_process_cannot_find_run_here(toys, tmp_path):
    records = run_jobs([Job("toy", "smoke", 0), Job("toy", "smoke", 1)], runs_dir=tmp_path, quiet=True, processes=2)
    assert [r.ok for r in records] == [True, True]


def test_processes_must_be_a_positive_int(tmp_path):
    import pytest

    with pytest.raises(ValueError, match="processes must be an int >= 1, got 0"):
        run_jobs([], runs_dir=tmp_path, processes=0)


def test_the_pool_starts_the_longest_expected_runs_first(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from iclr24.core import executors

    walls = {"short": 10.0, "long": 300.0, "never_run": None, "also_short": 10.0}
    monkeypatch.setattr(executors, "latest_run", lambda runs_dir, name, preset=None: None if walls[name] is None
                        else SimpleNamespace(result={"wall_time_s": walls[name], "preset": preset}))
    jobs = [Job(name, "quick", 0) for name in walls]
    # unknown first (it may be long), then by the last measured time; ties keep the jobs' order
    assert executors._longest_first(jobs, [0, 1, 2, 3], tmp_path) == [2, 1, 0, 3]


def test_a_fresh_folder_starts_the_longest_reference_run_first(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from iclr24.core import executors

    here = {"ran_here": 50.0}  # a run in the folder outweighs the reference
    reference = {"long": 800.0, "short": 20.0, "ran_here": 900.0}
    monkeypatch.setattr(executors, "latest_run", lambda runs_dir, name, preset=None: None if name not in here
                        else SimpleNamespace(result={"wall_time_s": here[name], "preset": preset}))
    monkeypatch.setattr(executors, "reference_time", lambda name, preset="quick": reference.get(name))
    jobs = [Job(name, "quick", 0) for name in ("short", "ran_here", "unknown", "long")]
    assert executors._longest_first(jobs, [0, 1, 2, 3], tmp_path) == [2, 3, 1, 0]


def test_the_shipped_reference_times_cover_every_method():
    from iclr24.core.methods import METHOD_PACKAGES
    from iclr24.core.runner import reference_time, reference_times

    table = reference_times()
    assert table["machine"] and table["measured"]
    assert sorted(table["quick"]) == sorted(METHOD_PACKAGES)
    assert all(reference_time(name) > 0 for name in METHOD_PACKAGES)
    assert reference_time("sae", "smoke") is None  # only quick presets are measured


def test_a_missing_or_damaged_reference_table_is_no_hint(tmp_path):
    from iclr24.core.runner import reference_times

    assert reference_times(tmp_path / "missing.json") == {}
    (tmp_path / "bad.json").write_text("{not json")
    assert reference_times(tmp_path / "bad.json") == {}
    (tmp_path / "wrong.json").write_text('{"quick": [1, 2]}')
    assert reference_times(tmp_path / "wrong.json") == {}
