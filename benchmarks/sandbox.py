"""What containment costs per program: ``run_python`` (strong and weak) against what a user would do by hand.

The peers: a bare ``python -c`` (no isolation, what the official ToRA code is close to) and a one-line
``bwrap --unshare-all --ro-bind / /`` (namespaces over the host's whole file system, read-only). Each is
timed on the same small program, interleaved so every path sees the same machine load; medians over
repetitions, reported as ratios to the bare subprocess.

    python benchmarks/sandbox.py [repetitions]
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time

from iclr24.sandbox import run_python

PROGRAM = "x = 1245 * 36\nprint(x)"


def main(repetitions: int = 20) -> None:
    paths = {
        "bare python -c": lambda: subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, timeout=10,
                                                 check=True),
        "run_python, weak": lambda: run_python(PROGRAM, isolation="weak"),
        "run_python, strong": lambda: run_python(PROGRAM),
    }
    if shutil.which("bwrap"):
        paths["bwrap --unshare-all --ro-bind / /"] = lambda: subprocess.run(
            ["bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
             "--tmpfs", "/tmp", sys.executable, "-c", PROGRAM], capture_output=True, timeout=10, check=True)
    times: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(repetitions):
        for name, run in paths.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    base = statistics.median(times["bare python -c"])
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:>36}: {median * 1e3:6.1f} ms  ({median / base:.2f}x bare)")
    print(f"isolation of the strong run: {run_python(PROGRAM).isolation}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
