"""`iclr24 run all` on one process and on every core, side by side: wall time, CPU time, CPU/wall.

Runs every method's preset twice into temporary folders, first with ``--jobs 1`` (one process, one after
another), then with one process per core (experiments that time wall-clock run alone at the end), and prints a
table per method (wall and CPU seconds of its run in each mode) and the totals: the whole run's wall time, CPU
time (this process and its worker processes) and CPU/wall, the share of the cores kept busy.

    python benchmarks/run_all.py                     # quick presets: the README's main command, twice
    python benchmarks/run_all.py --preset smoke      # seconds per method: the tests' preset
    python benchmarks/run_all.py --methods sae,lfr --jobs 2
    python benchmarks/run_all.py --record-from runs   # no run: the reference quick times from a run folder

``--record`` (after the runs) or ``--record-from DIR`` writes the per-method quick times to
``src/iclr24/core/reference_times.json``: what ``iclr24 list`` quotes before a method has run on a machine, and
the order ``run all`` starts a fresh folder's runs in (longest first).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import tempfile
import time
from pathlib import Path

from iclr24.core import list_experiments
from iclr24.core.executors import Job, run_jobs
from iclr24.core.io import write_json_atomic
from iclr24.core.runner import REFERENCE_TIMES, cpu_seconds, latest_runs


def run_all(jobs: list[Job], processes: int) -> tuple[dict[str, tuple[float, float]], float, float]:
    """Per method (wall, CPU) seconds of its run, and the whole run's wall and CPU seconds."""
    with tempfile.TemporaryDirectory(prefix="iclr24-bench-run-all-") as runs:
        cpu0, t0 = cpu_seconds(), time.perf_counter()
        records = run_jobs(jobs, runs_dir=runs, quiet=True, threads=1, processes=processes)
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    failed = [r.name for r in records if not r.ok]
    if failed:
        print(f"failed with {processes} processes: {failed}")
    return {r.name: (r.result.get("wall_time_s", float("nan")), r.result.get("cpu_time_s", float("nan")))
            for r in records}, wall, cpu


def record_reference(times: dict[str, tuple[float, float]], jobs: int) -> Path:
    """Write the quick presets' (wall, CPU) seconds as the shipped reference table."""
    table = {
        "machine": f"a {os.cpu_count()}-core {platform.machine()} machine, --jobs {jobs}, one torch thread a run",
        "measured": datetime.date.today().isoformat(),
        "quick": {name: {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1)}
                  for name, (wall, cpu) in sorted(times.items()) if wall == wall},  # NaN: the run failed
    }
    return write_json_atomic(REFERENCE_TIMES, table)


def times_in(runs_dir: str) -> dict[str, tuple[float, float]]:
    """Per method, the (wall, CPU) seconds of its latest quick run under ``runs_dir``."""
    return {name: (r.result["wall_time_s"], r.result.get("cpu_time_s", float("nan")))
            for name, r in latest_runs(runs_dir).items()
            if r.result.get("preset") == "quick" and r.result.get("status") == "ok" and "wall_time_s" in r.result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="quick")
    parser.add_argument("--methods", default="", help="comma-separated; default all")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes of the concurrent run")
    parser.add_argument("--record", action="store_true", help="write the concurrent run's quick times as the "
                        "shipped reference (src/iclr24/core/reference_times.json)")
    parser.add_argument("--record-from", default="", metavar="DIR", help="no run: write the reference from the "
                        "latest quick runs under DIR (e.g. what `iclr24 run all --out DIR` left)")
    args = parser.parse_args()
    if args.record_from:
        found = times_in(args.record_from)
        if not found:
            parser.error(f"--record-from: no completed quick run under {args.record_from!r}")
        print(f"wrote {record_reference(found, args.jobs)} ({len(found)} methods)")
        return
    names = [n for n in args.methods.split(",") if n] or [e.name for e in list_experiments()]
    jobs = [Job(name, args.preset, 0) for name in names]
    one, one_wall, one_cpu = run_all(jobs, 1)
    many, many_wall, many_cpu = run_all(jobs, args.jobs)
    print(f"\n{'method':24} {'wall, 1 process':>16} {'wall, ' + str(args.jobs) + ' processes':>18} {'CPU s':>8}")
    for name in names:
        print(f"{name:24} {one[name][0]:16.1f} {many[name][0]:18.1f} {many[name][1]:8.1f}")
    print(f"\nwhole run, --jobs 1: {one_wall:.0f} s wall, {one_cpu:.0f} s CPU, CPU/wall {one_cpu / one_wall:.2f}")
    print(f"whole run, --jobs {args.jobs}: {many_wall:.0f} s wall, {many_cpu:.0f} s CPU, CPU/wall "
          f"{many_cpu / many_wall:.2f}")
    print(f"wall-time ratio (1 process / {args.jobs}): {one_wall / many_wall:.2f}x; slowest quick-style budget "
          f"180 s exceeded by: {[n for n in names if many[n][0] > 180] or 'none'}")
    if args.record:
        if args.preset != "quick":
            parser.error("--record: only quick times are the reference")
        print(f"wrote {record_reference(many, args.jobs)}")


if __name__ == "__main__":
    main()
