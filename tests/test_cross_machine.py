"""Same seed, same verdict on another CPU: each smoke preset rerun with the vector instructions of an AVX2 machine
(no AVX-512) in torch, MKL, oneDNN and OpenBLAS. Metrics may differ in the last bits (docs/evidence.md says
which numbers are bit-identical only on one machine); a verdict that flips rests on float noise."""

import json
import os
import subprocess
import sys

import pytest

from iclr24.core import get_experiment, list_experiments, run

NAMES = [e.name for e in list_experiments()]
#: What another x86 CPU without AVX-512 would run: each library's kernels capped at AVX2.
AVX2_MACHINE = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "DNNL_MAX_CPU_ISA": "AVX2",
                "OPENBLAS_CORETYPE": "Haswell"}


def _verdicts(name, result):
    """Every verdict but those judged on wall-clock (they vary with the load, on one machine too)."""
    timed = set(get_experiment(name).timed_claims)
    return {c["statement"]: c["verdict"] for c in result["claims"] if c["statement"] not in timed}


@pytest.mark.parametrize("name", NAMES)
def test_a_smoke_run_gives_the_same_verdicts_with_avx2_kernels(name, tmp_path):
    here = run(name, preset="smoke", seed=3, runs_dir=tmp_path / "here", quiet=True)
    assert here.ok, here.result.get("traceback")
    env = {**os.environ, **AVX2_MACHINE, "OMP_NUM_THREADS": "1"}
    out = tmp_path / "avx2"
    done = subprocess.run([sys.executable, "-m", "iclr24", "run", name, "-p", "smoke", "--seed", "3", "--out",
                           str(out), "--no-report", "-q", "--threads", "1"],
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    (result_path,) = out.glob(f"{name}/*/result.json")
    there = json.loads(result_path.read_text())
    assert _verdicts(name, there) == _verdicts(name, here.result)
