"""Run one experiment: seed, time, record the environment, write the run folder atomically.

A run writes ``<runs_dir>/<name>/<UTC timestamp>/``::

    result.json        status, metrics, timings, claims, checks, tables, wall and CPU time (and the error if it failed)
    config.json        the preset name, the config class and every field
    environment.json   python, platform, CPU, package versions, torch threads, git commit
    log.txt            what the reproduction logged, with times
    *.png              figures, and evidence.png: each claim's effect and interval against its threshold
    artifacts/         anything the reproduction wrote through ``ctx.path`` (kept only on success)

Everything is written into a hidden temporary folder that is renamed when complete,
so an interrupted run (Ctrl-C or SIGTERM) leaves nothing that looks like a result. The final name is
claimed atomically, so runs finishing in the same second get ``<stamp>``, ``<stamp>-2``, ...; a finished
result is never deleted, and a temporary folder left by a process that died is swept (or, if it holds a
finished result, published) by the next run in the same place. A run that raises is
still recorded: its folder holds ``status: "failed"``, the error and the traceback,
and no metrics, claims, figures or artefacts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import importlib.metadata
import itertools
import json
import os
import platform
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from iclr24.core.evidence import forest_plot, tally
from iclr24.core.experiment import Experiment, Result, RunContext, get_experiment
from iclr24.core.io import write_json_atomic
from iclr24.core.progress import set_quiet

__all__ = ["RunInterrupted", "RunRecord", "cpu_seconds", "environment", "latest_run", "latest_runs", "load_run", "run",
           "run_time", "sandbox_isolation", "seed_everything"]

# 2: claims carry a verdict and its evidence; results carry sanity checks.
RESULT_SCHEMA = 2
#: Seeds are in [0, MAX_SEED): the range every method's libraries take (scikit-learn's random_state < 2**32).
MAX_SEED = 2**32
#: The most torch threads a run may ask for.
MAX_THREADS = 1024
#: The forest plot the runner adds to every run with claims.
EVIDENCE_FIGURE = "evidence.png"
# This machine, in temporary folder names: only its own dead processes' folders are swept.
_HOST = re.sub(r"[^A-Za-z0-9]", "", socket.gethostname())[:32] or "host"
_PACKAGES = ("iclr24", "torch", "numpy", "scipy", "scikit-learn", "matplotlib", "typer", "rich")


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by SIGTERM: handled as Ctrl-C is (nothing partial is left behind)."""


@dataclass(frozen=True)
class RunRecord:
    """A finished run: where it lies and what its result.json says."""

    name: str
    run_dir: Path
    result: dict[str, Any]

    @property
    def ok(self) -> bool:
        return self.result.get("status") == "ok"


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def environment() -> dict[str, Any]:
    """What a reader needs to judge a run's numbers: machine, versions, threads, commit."""
    versions = {}
    for package in _PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        # CPU seconds grow with contention on shared cores: the load when the run was written says how much
        "load_average_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "cuda_available": torch.cuda.is_available(),
        "packages": versions,
        "git_commit": _git_commit(),
        "argv": list(sys.argv),
        # How generated code (ToRA's, L2MAC's programs) is contained: iclr24.sandbox reads the same variable.
        "sandbox_isolation": sandbox_isolation(),
    }


def run(
    experiment: str | Experiment,
    *,
    preset: str | None = None,
    seed: int = 0,
    overrides: Sequence[str] | Mapping[str, Any] = (),
    runs_dir: str | os.PathLike = "runs",
    quiet: bool = False,
    threads: int | None = None,
) -> RunRecord:
    """Run ``experiment`` and write its run folder.

    Parameters
    ----------
    experiment : str or Experiment
        A registered name (``"hyperattention"``) or the Experiment itself.
    preset : str, optional
        ``"smoke"``, ``"quick"`` (the default) or ``"paper"``.
    seed : int
        Seeds python, numpy and torch before the reproduction starts.
    overrides : list of "key=value" or dict
        Config fields to change, checked against their types.
    runs_dir : path
        Where ``<name>/<timestamp>/`` is written.
    quiet : bool
        No progress bars, no log lines on the console (log.txt is still written).
    threads : int, optional
        torch threads for the run (restored afterwards); None keeps the current setting.
        On a shared 2-core machine one thread gives the steadiest timings.

    Returns
    -------
    RunRecord
        Also for a failed run (``record.ok`` is False); bad arguments raise ValueError
        before anything is written.
    """
    exp = get_experiment(experiment) if isinstance(experiment, str) else experiment
    preset = preset or exp.default_preset
    cfg = exp.config(preset, overrides)  # user errors surface here, before any folder exists
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {seed!r}")
    if not 0 <= seed < MAX_SEED:
        raise ValueError(f"seed must be in [0, 2**32), got {seed} (every method's libraries take such a seed; "
                         "scikit-learn's random_state must be below 2**32)")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or not 1 <= threads <= MAX_THREADS):
        raise ValueError(f"threads must be an int in [1, {MAX_THREADS}] or None, got {threads!r}")

    started = _dt.datetime.now(_dt.timezone.utc)
    parent = Path(runs_dir) / exp.name
    parent.mkdir(parents=True, exist_ok=True)
    _sweep_stale(parent)
    tmp = new_tmp_folder(parent, started)
    log_file = open(tmp / "log.txt", "a", encoding="utf-8")

    def log(message: str) -> None:
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%H:%M:%S")
        log_file.write(f"[{stamp}] {message}\n")
        log_file.flush()
        if not quiet:
            print(f"[{exp.name}] {message}", file=sys.stderr, flush=True)

    header = run_header(exp, preset, seed, started)
    previous_quiet = set_quiet(quiet)
    previous_deterministic = torch.are_deterministic_algorithms_enabled()
    previous_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        # numpy's BLAS and OpenMP pools get the torch threads too: their idle workers otherwise spin beside torch's
        # on a shared machine (38 ms numpy norms measured under load) and inflate the run's CPU time.
        with _sigterm_as_interrupt(), threadpool_limits(limits=torch.get_num_threads()):
            record = _execute(exp, cfg, seed, preset, quiet, tmp, header, log)
            write_json_atomic(tmp / "result.json", record)
            log_file.close()
            final = _publish(tmp, parent, started.strftime("%Y%m%dT%H%M%SZ"))
    except BaseException:  # interrupted, or the writing itself failed: leave nothing partial behind
        log_file.close()
        # Decided by what is on disk, not by a flag a signal could beat: a written result is never deleted
        # (the next run here publishes it).
        if not (tmp / "result.json").is_file():
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        set_quiet(previous_quiet)
        torch.use_deterministic_algorithms(previous_deterministic)
        torch.set_num_threads(previous_threads)
    return RunRecord(name=exp.name, run_dir=final, result=record)


def run_header(exp: Experiment, preset: str, seed: int, started: _dt.datetime) -> dict[str, Any]:
    """The fields every result.json starts with, whoever writes it (the runner, or a Ray driver)."""
    return {"schema": RESULT_SCHEMA, "name": exp.name, "paper": exp.paper, "preset": preset, "seed": seed,
            "started_at": started.isoformat(timespec="seconds")}


def _execute(exp: Experiment, cfg: Any, seed: int, preset: str, quiet: bool, tmp: Path, header: dict,
             log: Any) -> dict[str, Any]:
    """Run the reproduction inside ``tmp``; its result record (a failed run is recorded, not raised)."""
    write_json_atomic(tmp / "config.json", {"preset": preset, "class": type(cfg).__name__,
                                            "fields": _jsonable(dataclasses.asdict(cfg))})
    write_json_atomic(tmp / "environment.json", environment())
    seed_everything(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    log(f"start: preset={preset} seed={seed} config={cfg}")
    t0, cpu0 = time.perf_counter(), cpu_seconds()
    try:
        result = exp(cfg, RunContext(seed=seed, preset=preset, run_dir=tmp, quiet=quiet, _log=log))
        if not isinstance(result, Result):
            raise TypeError(f"experiment {exp.name!r} returned {type(result).__name__}, expected Result")
        missing = [c for c in exp.claims if c not in {claim.statement for claim in result.claims}]
        if missing:
            raise RuntimeError(f"experiment {exp.name!r} did not report its declared claims: {missing}")
        if not result.metrics:  # claims checked over nothing are not a result
            raise RuntimeError(f"experiment {exp.name!r} measured nothing (no metrics) with config {cfg}")
        wall = time.perf_counter() - t0
        figures = dict(result.figures)
        if result.claims and EVIDENCE_FIGURE not in figures:
            figures[EVIDENCE_FIGURE] = forest_plot(result.claims, title=f"{exp.name}: each claim's effect and "
                                                   "interval against its threshold")
        figures = _save_figures(figures, tmp)
        failed_checks = [c.statement for c in result.checks if not c.passed]
        log(f"done in {wall:.1f}s: {tally(c.verdict for c in result.claims)}"
            + (f"; sanity checks FAILED: {failed_checks}" if failed_checks else ""))
        return {**header, "status": "ok", "wall_time_s": wall, "cpu_time_s": cpu_seconds() - cpu0,
                "metrics": result.metrics,
                "timings": result.timings, "claims": [c.to_dict() for c in result.claims],
                "checks": [c.to_dict() for c in result.checks],
                "tables": _jsonable(result.tables), "figures": figures, "notes": result.notes}
    except Exception as err:  # a failed run is recorded, not lost
        wall = time.perf_counter() - t0
        tb = traceback.format_exc()
        log(f"failed after {wall:.1f}s: {type(err).__name__}: {err}\n{tb}")
        shutil.rmtree(tmp / "artifacts", ignore_errors=True)
        for png in tmp.glob("*.png"):
            png.unlink()
        return {**header, "status": "failed", "wall_time_s": wall, "error": f"{type(err).__name__}: {err}",
                "traceback": tb}


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """Within the block, SIGTERM raises :class:`RunInterrupted` (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise RunInterrupted(f"terminated by signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def new_tmp_folder(parent: Path, now: _dt.datetime) -> Path:
    """A fresh hidden ``.tmp-<time>-<host>-<pid>`` folder under ``parent``, where a run is built before
    :func:`_publish` renames it into place (and where :func:`_sweep_stale` finds the ones of dead processes)."""
    parent.mkdir(parents=True, exist_ok=True)
    stamp = now.strftime("%Y%m%dT%H%M%S%f")
    for k in itertools.count():
        tmp = parent / f".tmp-{stamp}{k or ''}-{_HOST}-{os.getpid()}"
        try:
            tmp.mkdir()
            return tmp
        except FileExistsError:
            continue
    raise AssertionError("unreachable")


def _publish(tmp: Path, parent: Path, stamp: str) -> Path:
    """Rename the finished ``tmp`` to the first free ``<stamp>[-i]``, claiming the name atomically (mkdir)."""
    candidate, i = parent / stamp, 1
    while True:
        try:
            candidate.mkdir()
        except FileExistsError:  # another run finished in the same second
            i += 1
            candidate = parent / f"{stamp}-{i}"
            continue
        try:
            os.replace(tmp, candidate)  # replaces the empty folder this process just made
        except BaseException as err:  # a failed rename, or a signal in between: drop the claimed name
            with contextlib.suppress(OSError):
                candidate.rmdir()
            if isinstance(err, OSError):
                raise RuntimeError(f"the finished run could not be renamed; it is kept at {tmp}: {err}") from err
            raise
        return candidate


def sandbox_isolation() -> str:
    """How generated code is contained in this run: ``$ICLR24_SANDBOX`` (iclr24.sandbox reads the same), else
    ``"strong"``."""
    return os.environ.get("ICLR24_SANDBOX") or "strong"


def cpu_seconds() -> float:
    """CPU seconds of this process (every thread) and of the children it has waited for (sandboxed programs)."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _sweep_stale(parent: Path) -> None:
    """Remove the temporary folders of this machine's processes that died mid-run; publish any that hold a
    finished result. Folders made on another host (a shared runs folder) are left alone: their processes
    cannot be seen from here."""
    for tmp in parent.glob(f".tmp-*-{_HOST}-*"):
        stamp, _, rest = tmp.name[len(".tmp-"):].partition("-")
        host, _, pid = rest.rpartition("-")
        if host != _HOST or not pid.isdigit() or int(pid) == os.getpid() or _pid_alive(int(pid)) \
                or not tmp.is_dir():
            continue
        if (tmp / "result.json").is_file():
            with contextlib.suppress(OSError, RuntimeError):
                _publish(tmp, parent, stamp[:15] + "Z")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def load_run(run_dir: str | os.PathLike) -> RunRecord:
    """Read a run folder written by :func:`run`; a ValueError naming the file if it is unreadable."""
    path = Path(run_dir) / "result.json"
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise ValueError(f"cannot read run result {path}: {type(err).__name__}: {err}") from None
    problem = _record_problem(result)
    if problem:
        raise ValueError(f"damaged run result {path}: {problem}")
    return RunRecord(name=result["name"], run_dir=Path(run_dir), result=result)


def _record_problem(result: Any) -> str:
    """What makes a ``result.json`` unreadable by ``list``, ``show`` and ``report``, or "" (a claim inside is
    judged on its own: :func:`iclr24.core.report.read_claim`)."""
    if not isinstance(result, dict):
        return f"not a JSON object but a {type(result).__name__}"
    if not isinstance(result.get("name"), str) or not result["name"]:
        return "no method name"
    for key in ("claims", "checks", "figures"):
        if not isinstance(result.get(key, []), list):
            return f"{key!r} is a {type(result[key]).__name__}, not a list"
    if not all(isinstance(c, dict) for c in result.get("checks", [])):
        return "a check is not a JSON object"
    for key in ("metrics", "timings"):
        values = result.get(key, {})
        if not isinstance(values, dict) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in values.values()):
            return f"{key!r} must map names to numbers"
    for key in ("wall_time_s", "cpu_time_s"):
        value = result.get(key)
        if result.get("status") == "ok" and key == "wall_time_s" and value is None:
            return "no wall_time_s"
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            return f"{key} is {value!r}, not a number"
    for key in ("status", "preset", "paper", "started_at"):
        if not isinstance(result.get(key, ""), str):
            return f"{key} is not a string"
    return ""


def latest_run(runs_dir: str | os.PathLike, name: str, preset: str | None = None) -> RunRecord | None:
    """The most recent completed run of ``name`` under ``runs_dir`` (of ``preset``, if given), or None."""
    parent = Path(runs_dir) / name
    if not parent.is_dir():
        return None
    done = [d for d in parent.iterdir() if not d.name.startswith(".") and (d / "result.json").is_file()]
    for run_dir in sorted(done, key=_run_sort_key, reverse=True):
        try:
            record = load_run(run_dir)
        except ValueError as err:  # a damaged run does not hide the ones before it
            warnings.warn(f"skipping {err}", stacklevel=2)
            continue
        if record.name != name:  # a record of another method, planted or moved into this one's folder
            warnings.warn(f"skipping {run_dir}: it holds a run of {record.name!r}, not of {name!r}", stacklevel=2)
            continue
        if preset is None or record.result.get("preset") == preset:
            return record
    return None


def run_time(result: Mapping[str, Any]) -> str:
    """A run's cost as people read it, ``"158 s (CPU 156 s)"``."""
    wall, cpu = result.get("wall_time_s"), result.get("cpu_time_s")
    if wall is None:
        return ""
    text = f"{wall:.0f} s" + (f" (CPU {cpu:.0f} s)" if cpu is not None else "")
    return text


#: Where the reference quick times live: written by ``benchmarks/run_all.py --record`` from a measured
#: ``iclr24 run all``, shipped with the package. Not a result: a scheduling hint (which run to start first in a
#: fresh folder) and what ``iclr24 list`` quotes before a method has run here.
REFERENCE_TIMES = Path(__file__).with_name("reference_times.json")


def reference_times(path: str | os.PathLike | None = None) -> dict[str, Any]:
    """The reference measurement: ``{"machine": ..., "measured": ..., "quick": {name: {"wall_s", "cpu_s"}}}``;
    empty when the file is missing or unreadable (the hint is optional: nothing depends on it)."""
    try:
        table = json.loads(Path(path or REFERENCE_TIMES).read_text())
    except (OSError, ValueError):
        return {}
    return table if isinstance(table, dict) and isinstance(table.get("quick"), dict) else {}


def reference_time(name: str, preset: str = "quick") -> float | None:
    """The reference wall seconds of ``name``'s ``preset`` run (only quick is measured), or None."""
    if preset != "quick":
        return None
    entry = reference_times().get("quick", {}).get(name)
    wall = entry.get("wall_s") if isinstance(entry, dict) else None
    return float(wall) if isinstance(wall, (int, float)) else None


def latest_runs(runs_dir: str | os.PathLike) -> dict[str, RunRecord]:
    """The most recent completed run of every experiment under ``runs_dir``, by name."""
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        return {}
    found = {}
    for sub in sorted(runs_dir.iterdir()):
        if sub.is_dir() and not sub.name.startswith("."):
            record = latest_run(runs_dir, sub.name)
            if record is not None:
                found[record.name] = record
    return found


def _run_sort_key(path: Path) -> tuple[str, int]:
    stamp, _, suffix = path.name.partition("-")
    return stamp, int(suffix) if suffix.isdigit() else 0


def _save_figures(figures: Mapping[str, Any], run_dir: Path) -> list[str]:
    import matplotlib.pyplot as plt

    names = []
    for name, fig in figures.items():
        fig.savefig(run_dir / name, dpi=110, bbox_inches="tight")
        plt.close(fig)
        names.append(name)
    return names


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (np.generic, torch.Tensor)) and getattr(obj, "ndim", 0) == 0:
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    return repr(obj)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _git_commit() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if out.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=5,
        )
        return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None
