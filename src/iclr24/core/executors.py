"""Where runs execute: locally (in this process, or in a pool of local processes) or as Ray tasks (``ray``).

Either way the driver writes every run folder, with the same layout and the same atomic
publish as :func:`iclr24.core.runner.run`: a Ray worker runs the experiment into a private
temporary folder and sends the folder's files back. A task that raises, or a worker that dies,
becomes a failed record in the driver, never a partial folder; Ctrl-C cancels what is still
outstanding.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from iclr24.core.experiment import get_experiment
from iclr24.core.io import write_bytes_atomic, write_json_atomic
from iclr24.core.runner import (
    _HOST,
    RunRecord,
    _pid_alive,
    _publish,
    latest_run,
    load_run,
    new_tmp_folder,
    reference_time,
    run_header,
)
from iclr24.core.runner import run as run_local

__all__ = ["EXECUTORS", "Job", "require_ray", "run_jobs"]

EXECUTORS = ("local", "ray")
# environment variables a worker needs to see: our settings and the OpenAI-compatible server's
_FORWARDED = ("ICLR24_", "OPENAI_")


@dataclass(frozen=True)
class Job:
    """One (method, seed) run."""

    name: str
    preset: str
    seed: int
    overrides: tuple[str, ...] = ()


def require_ray():
    """Import Ray, or fail naming the extra that provides it."""
    try:
        import ray
    except ImportError as err:
        raise ImportError("--executor ray needs Ray: pip install 'iclr24[cluster]'") from err
    return ray


def run_jobs(jobs: Sequence[Job], *, runs_dir: str | os.PathLike, executor: str = "local", address: str | None = None,
             quiet: bool = False, threads: int | None = 1, processes: int = 1,
             on_record: Callable[[RunRecord], None] | None = None) -> list[RunRecord]:
    """Run every job and return their records in the jobs' order; ``on_record`` sees each as it finishes.

    ``processes`` > 1 (local executor) runs jobs concurrently in that many worker processes (spawned, so each
    starts clean); experiments that declare ``runs_alone`` (their claims time wall-clock) run afterwards, one at
    a time, with nothing beside them. A run's metrics do not depend on what ran beside it.
    """
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {EXECUTORS}, got {executor!r}")
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise ValueError(f"processes must be an int >= 1, got {processes!r}")
    on_record = on_record or (lambda record: None)
    if executor == "ray":
        return _run_on_ray(jobs, Path(runs_dir), address, quiet, threads, on_record)
    records: list[RunRecord | None] = [None] * len(jobs)
    alone = [i for i, job in enumerate(jobs) if get_experiment(job.name).runs_alone]
    shared = [i for i in range(len(jobs)) if i not in alone]
    if not all(_spawnable(jobs[i].name) for i in shared):  # a fresh process would not know the experiment
        processes = 1
    in_order = list(range(len(jobs)))  # one at a time: the jobs' own order
    if processes > 1 and len(shared) > 1:
        _run_in_processes(jobs, shared, records, Path(runs_dir), min(processes, len(shared)), threads, on_record)
        in_order = alone  # after the pool has finished: nothing runs beside them
    for i in in_order:
        job = jobs[i]
        records[i] = run_local(job.name, preset=job.preset, seed=job.seed, overrides=list(job.overrides),
                               runs_dir=runs_dir, quiet=quiet, threads=threads)
        on_record(records[i])
    return records


def _spawnable(name: str) -> bool:
    """Whether a fresh process finds ``name``: the method packages register on import; an experiment registered at
    run time (a notebook, a test) exists only in this process."""
    from iclr24.core.methods import METHOD_PACKAGES

    module = getattr(get_experiment(name).fn, "__module__", "")
    return module in {f"iclr24.{package}.experiment" for package in METHOD_PACKAGES}


def _local_worker(job: Job, runs_dir: str, threads: int | None) -> RunRecord:
    """In a worker process: one run, written straight into ``runs_dir`` (publishing claims names atomically)."""
    return run_local(job.name, preset=job.preset, seed=job.seed, overrides=list(job.overrides), runs_dir=runs_dir,
                     quiet=True, threads=threads)


def _run_in_processes(jobs: Sequence[Job], which: list[int], records: list, runs_dir: Path, processes: int,
                      threads: int | None, on_record: Callable[[RunRecord], None]) -> None:
    """Run ``jobs[i]`` for ``i`` in ``which`` on a pool of spawned processes; a worker that dies becomes a failed
    record; Ctrl-C cancels what has not started (the running ones stop as Ctrl-C stops any run)."""
    import concurrent.futures as cf
    import multiprocessing

    pool = cf.ProcessPoolExecutor(max_workers=processes, mp_context=multiprocessing.get_context("spawn"))
    try:
        futures = {pool.submit(_local_worker, jobs[i], str(runs_dir), threads): i
                   for i in _longest_first(jobs, which, runs_dir)}
        for future in cf.as_completed(futures):
            i = futures[future]
            try:
                records[i] = future.result()
            except Exception as err:  # the worker raised or died: a failed record, not a lost run
                records[i] = write_failed_run(runs_dir, jobs[i], f"{type(err).__name__}: {err}",
                                              traceback.format_exc())
            on_record(records[i])
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _longest_first(jobs: Sequence[Job], which: list[int], runs_dir: Path) -> list[int]:
    """``which``, the longest expected run first, so the pool ends on short runs rather than waiting on a long one
    started last (the classic longest-processing-time rule). The expected time is the wall time of the latest run
    of the same method and preset under ``runs_dir``, else the shipped reference time (a fresh folder); runs with
    neither go first, in the jobs' order."""
    def expected(i: int) -> float:
        record = latest_run(runs_dir, jobs[i].name, preset=jobs[i].preset)
        wall = record.result.get("wall_time_s") if record is not None else None
        if wall is None:
            wall = reference_time(jobs[i].name, jobs[i].preset)
        return float("inf") if wall is None else float(wall)

    return sorted(which, key=lambda i: -expected(i))  # stable: ties keep the jobs' order


_SCRATCH = "iclr24-ray-"


def _worker_run(job: Job, quiet: bool, threads: int | None) -> dict[str, bytes]:
    """In a Ray worker: run the job into a private folder; the run folder's files, by relative path.

    A cancelled task's worker is killed before it can clean up, so each task first removes the
    scratch folders of this machine's dead workers (named with host and pid, as run folders are).
    """
    import tempfile

    root = Path(tempfile.gettempdir())
    for stale in root.glob(f"{_SCRATCH}{_HOST}-*-*"):
        pid = stale.name[len(_SCRATCH) + len(_HOST) + 1:].partition("-")[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix=f"{_SCRATCH}{_HOST}-{os.getpid()}-") as scratch:
        record = run_local(job.name, preset=job.preset, seed=job.seed, overrides=list(job.overrides),
                           runs_dir=scratch, quiet=quiet, threads=threads)
        return {str(p.relative_to(record.run_dir)): p.read_bytes()
                for p in sorted(record.run_dir.rglob("*")) if p.is_file()}


def _run_on_ray(jobs: Sequence[Job], runs_dir: Path, address: str | None, quiet: bool, threads: int | None,
                on_record: Callable[[RunRecord], None], task: Callable | None = None) -> list[RunRecord]:
    ray = require_ray()
    started_here = not ray.is_initialized()
    if started_here:  # without --address a fresh local cluster, whatever RAY_ADDRESS says
        forwarded = {k: v for k, v in os.environ.items() if k.startswith(_FORWARDED)}
        ray.init(address=address or "local", include_dashboard=False, log_to_driver=not quiet,
                 runtime_env={"env_vars": forwarded})
    remote = ray.remote(max_retries=0)(task or _worker_run)
    pending = {}
    try:
        needs = [max(get_experiment(job.name).num_cpus, threads or 1) for job in jobs]  # the cores a run keeps busy
        available = ray.cluster_resources().get("CPU", 0)
        too_big = [(job.name, n) for job, n in zip(jobs, needs) if n > available]
        if too_big and address is None:  # a local cluster cannot grow: those tasks would wait forever
            raise ValueError(f"{too_big[0][0]} needs {too_big[0][1]} CPUs per run; the local Ray cluster has "
                             f"{available:g} (lower --threads, or join a larger cluster with --address)")
        for i, (job, cpus) in enumerate(zip(jobs, needs)):
            pending[remote.options(num_cpus=cpus).remote(job, quiet, threads)] = i
        records: list[RunRecord | None] = [None] * len(jobs)
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            i = pending.pop(done[0])
            try:
                records[i] = adopt_run(runs_dir, jobs[i].name, ray.get(done[0]))
            except Exception as err:  # the task raised or its worker died: a failed record, not a lost run
                records[i] = write_failed_run(runs_dir, jobs[i], f"{type(err).__name__}: {err}",
                                              traceback.format_exc())
            on_record(records[i])
        return records
    except BaseException:  # Ctrl-C (or a failure writing): cancel what is still outstanding
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
    finally:
        if started_here:
            ray.shutdown()


def adopt_run(runs_dir: Path, name: str, files: dict[str, bytes]) -> RunRecord:
    """Write a run folder's files (from a worker) under ``runs_dir/name`` with the runner's atomic publish."""
    if "result.json" not in files:
        raise ValueError(f"a run of {name} came back without result.json ({sorted(files)[:5]})")
    parent, now = runs_dir / name, _dt.datetime.now(_dt.timezone.utc)
    try:  # named by when the run started, as a local run is, so the latest run is the same either way
        started = _dt.datetime.fromisoformat(json.loads(files["result.json"])["started_at"])
    except (ValueError, KeyError, TypeError):
        started = now
    if "environment.json" in files:  # the machine is the worker's; the command is the driver's
        environment = json.loads(files["environment.json"])
        files = {**files, "environment.json": json.dumps({**environment, "argv": list(sys.argv),
                                                          "executor": "ray"}, indent=2).encode() + b"\n"}
    tmp = new_tmp_folder(parent, now)
    try:
        for relative, data in files.items():
            target = (tmp / relative).resolve()
            if tmp.resolve() not in target.parents:
                raise ValueError(f"a run of {name} came back with a path outside its folder: {relative!r}")
            write_bytes_atomic(target, data)
        return load_run(_publish(tmp, parent, started.strftime("%Y%m%dT%H%M%SZ")))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # nothing partial is left behind
        raise


def write_failed_run(runs_dir: Path, job: Job, error: str, tb: str) -> RunRecord:
    """A failed record for a run whose worker raised or died before it could record anything itself."""
    exp = get_experiment(job.name)
    parent, now = runs_dir / job.name, _dt.datetime.now(_dt.timezone.utc)
    tmp = new_tmp_folder(parent, now)
    result = {**run_header(exp, job.preset, job.seed, now), "status": "failed", "wall_time_s": 0.0, "error": error,
              "traceback": tb}
    write_json_atomic(tmp / "result.json", result)
    return RunRecord(name=job.name, run_dir=_publish(tmp, parent, now.strftime("%Y%m%dT%H%M%SZ")), result=result)
