"""The Ray executor: the same run folders and metrics as the local one, failed records, no orphans."""

import datetime
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from iclr24 import cli
from iclr24.core.executors import Job, _run_on_ray, run_jobs
from iclr24.core.runner import latest_run
from iclr24.core.seeds import latest_seed_group

ray = pytest.importorskip("ray")

JOBS = [Job("orthogonal_classifier", "smoke", 0), Job("orthogonal_classifier", "smoke", 1),
        Job("kernel_trees", "smoke", 0), Job("kernel_trees", "smoke", 1)]


def raylets() -> int:
    """Live raylets of clusters this process started (read from /proc; 0 where there is none). Ray names a
    cluster's session folder after the pid of the driver that started it, and a raylet's command line holds its
    socket there; raylets of other processes (another test worker, Flower's simulation) are not ours to count."""
    ours = f"_{os.getpid()}/sockets/raylet".encode()
    count = 0
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            count += ours in cmdline.read_bytes()
        except OSError:  # the process ended while we looked
            continue
    return count


def test_a_cluster_started_for_the_runs_is_shut_down_after_them(tmp_path):
    # first in the module: no cluster is up yet, so run_jobs starts one and must stop it
    assert not ray.is_initialized()
    before = raylets()
    (record,) = run_jobs([Job("orthogonal_classifier", "smoke", 0)], runs_dir=tmp_path, executor="ray", quiet=True)
    assert record.ok and not ray.is_initialized() and raylets() <= before


@pytest.fixture(scope="module")
def cluster():
    before = raylets()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    assert raylets() > before  # the count sees this cluster's raylet, so a zero after shutdown means something
    yield
    ray.shutdown()
    assert raylets() <= before  # no orphan Ray processes


def test_ray_runs_write_the_same_folders_and_metrics_as_local_runs(cluster, tmp_path):
    seen = []
    remote = run_jobs(JOBS, runs_dir=tmp_path / "ray", executor="ray", quiet=True, on_record=seen.append)
    local = run_jobs(JOBS, runs_dir=tmp_path / "local", executor="local", quiet=True)
    assert len(seen) == 4 and all(r.ok for r in remote)
    for a, b in zip(remote, local):
        assert (a.name, a.result["seed"]) == (b.name, b.result["seed"])
        assert a.result["metrics"] == b.result["metrics"]
        assert [c["evidence"] for c in a.result["claims"]] == [c["evidence"] for c in b.result["claims"]]
        assert sorted(p.name for p in a.run_dir.iterdir()) == sorted(p.name for p in b.run_dir.iterdir())
        assert a.run_dir.parent == tmp_path / "ray" / a.name
        started = datetime.datetime.fromisoformat(a.result["started_at"])
        assert a.run_dir.name.startswith(started.strftime("%Y%m%dT%H%M%SZ"))  # named by its start, as locally
        assert json.loads((a.run_dir / "environment.json").read_text())["executor"] == "ray"
    assert not list((tmp_path / "ray").glob("*/.tmp-*"))  # nothing temporary left


def test_a_task_that_raises_becomes_a_failed_record(cluster, tmp_path):
    def explode(job, quiet, threads):
        raise RuntimeError(f"worker for seed {job.seed} blew up")

    (record,) = _run_on_ray([Job("kernel_trees", "smoke", 3)], tmp_path, None, True, 1, lambda r: None,
                            task=explode)
    assert not record.ok and "blew up" in record.result["error"] and record.result["seed"] == 3
    assert latest_run(tmp_path, "kernel_trees").result["status"] == "failed"
    assert [p.name for p in record.run_dir.iterdir()] == ["result.json"]


def test_cli_runs_seeds_on_ray_and_writes_the_group(cluster, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli.app, ["run", "orthogonal_classifier", "--preset", "smoke", "--quiet",
                                          "--seeds", "0-1", "--executor", "ray", "--no-report"])
    assert result.exit_code == 0, result.output
    assert latest_seed_group(tmp_path / "runs", "orthogonal_classifier")["seeds"] == [0, 1]


def test_a_confirmation_on_ray_writes_the_same_records_as_a_local_one(cluster, tmp_path):
    import shutil

    from iclr24.core.confirm import confirm
    from iclr24.core.experiment import get_experiment
    from iclr24.core.plan import build_plan, pilot

    run_jobs([Job("kernel_trees", "smoke", 0)], runs_dir=tmp_path / "ray", quiet=True)
    found = pilot(tmp_path / "ray", get_experiment("kernel_trees"), "smoke")
    plan = build_plan({"kernel_trees": found}, budget_cpu_s=2.5 * found["cpu_s_per_run"])  # two runs at most
    assert plan["methods"]["kernel_trees"]["confirm_runs"] == 2  # the smoke pilot leaves a claim to confirm
    shutil.copytree(tmp_path / "ray", tmp_path / "local")
    records = {}
    for executor in ("ray", "local"):
        path = confirm(plan, ["kernel_trees"], tmp_path / executor, executor=executor, quiet=True)["kernel_trees"]
        records[executor] = json.loads(path.read_text())
    for key in ("seeds", "plan_digest", "preset"):
        assert records["ray"][key] == records["local"][key]
    assert [(c["verdict"], c["evidence"]) for c in records["ray"]["claims"]] == \
        [(c["verdict"], c["evidence"]) for c in records["local"]["claims"]]
    assert [r.rsplit("/", 1)[0] for r in records["ray"]["runs"]] == [r.rsplit("/", 1)[0] for r in
                                                                     records["local"]["runs"]]


def test_a_run_that_needs_more_cpus_than_the_local_cluster_is_refused_up_front(cluster, tmp_path):
    with pytest.raises(ValueError, match="needs 64 CPUs per run; the local Ray cluster has 2"):
        run_jobs([Job("kernel_trees", "smoke", 0)], runs_dir=tmp_path, executor="ray", threads=64, quiet=True)
    assert not (tmp_path / "kernel_trees").exists() or not any((tmp_path / "kernel_trees").iterdir())


def test_executor_errors_are_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bad = CliRunner().invoke(cli.app, ["run", "kernel_trees", "--executor", "dask"])
    assert bad.exit_code == 2 and "--executor must be one of local, ray, got 'dask'" in bad.output
    bad = CliRunner().invoke(cli.app, ["run", "kernel_trees", "--address", "auto"])
    assert bad.exit_code == 2 and "--address joins a Ray cluster" in bad.output

    def missing():
        raise ImportError("--executor ray needs Ray: pip install 'iclr24[cluster]'")

    monkeypatch.setattr(cli, "require_ray", missing)
    bad = CliRunner().invoke(cli.app, ["run", "kernel_trees", "--executor", "ray"])
    assert bad.exit_code == 2 and "pip install 'iclr24[cluster]'" in bad.output
