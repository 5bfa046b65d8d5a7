"""L2MAC against one long conversation: model calls, prompt tokens and seconds per completed step, and what the
sandboxed check costs against the official code's unsandboxed ``python -m pytest`` in a temporary folder.

The coder is the simulated one (iclr24.l2mac.SimulatedCoder), so the numbers measure the control loop and the
checks, not a model; with a real model multiply the calls by its seconds per call. Times are medians of
interleaved repetitions, reported as ratios in one run.

    python benchmarks/l2mac.py [repetitions]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from iclr24.l2mac import BOOKSHOP, L2MAC, SimulatedCoder, SingleContext, Toolbox


def per_step(method, label: str) -> dict:
    coder = SimulatedCoder(BOOKSHOP, bug_rate=0.3, seed=0)
    start = time.perf_counter()
    codebase = method(coder).run(BOOKSHOP.spec)
    seconds = time.perf_counter() - start
    done = max(1, codebase.steps_completed)
    prompt_tokens = sum(t["context_tokens"] for t in codebase.trace)
    print(f"{label:>16}: {codebase.steps_completed}/{len(codebase.steps)} steps completed, "
          f"{codebase.llm_calls / done:5.1f} calls, {prompt_tokens / done:7.0f} prompt tokens, "
          f"{seconds / done:5.2f} s per completed step; files {len(codebase.files)}")
    return {"codebase": codebase, "seconds": seconds}


def unsandboxed_pytest(files: dict) -> None:
    with tempfile.TemporaryDirectory() as folder:
        for path, text in files.items():
            (Path(folder) / path).write_text(text)
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=folder,
                       capture_output=True, timeout=60)


def main(repetitions: int = 5) -> None:
    l2mac = per_step(lambda llm: L2MAC(llm, context_tokens=1280), "L2MAC")
    per_step(lambda llm: SingleContext(llm, context_tokens=1280), "single context")
    files = dict(l2mac["codebase"].files)
    box = Toolbox(l2mac["codebase"].files)
    sandboxed, bare = [], []
    for _ in range(repetitions):  # interleaved: both see the same machine load
        start = time.perf_counter()
        box.check()
        sandboxed.append(time.perf_counter() - start)
        start = time.perf_counter()
        unsandboxed_pytest(files)
        bare.append(time.perf_counter() - start)
    s, b = statistics.median(sandboxed), statistics.median(bare)
    print(f"check of the finished codebase (16 files): sandboxed {s * 1e3:.0f} ms, unsandboxed pytest "
          f"{b * 1e3:.0f} ms, ratio {s / b:.2f}x (the check also compiles every file)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
