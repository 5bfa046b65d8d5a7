"""The sandbox against hostile programs: each is contained and reported, the host unharmed."""

import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from iclr24.sandbox import run_pytest, run_python
from iclr24.sandbox.runner import _GUARDED_LAUNCHER, _PIDS_CGROUP_ROOTS

ROOT = os.geteuid() == 0
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")


def sandbox_dirs():
    return {p.name for p in Path(tempfile.gettempdir()).glob("iclr24-sandbox-*")}


def test_runs_a_program_with_its_files_and_exit_code():
    before = sandbox_dirs()
    result = run_python("import sys, helper\nprint(helper.X * 2)\nsys.exit(3)", files={"helper.py": "X = 21"})
    assert (result.stdout, result.exit_code, result.timed_out) == ("42\n", 3, False)
    assert sandbox_dirs() == before  # the directory is removed afterwards


def test_the_scientific_stack_is_importable():
    result = run_python("import numpy, sympy\nprint(sympy.sqrt(8), numpy.arange(3).sum())", timeout_s=30)
    assert result.ok and result.stdout.split() == ["2*sqrt(2)", "3"]


def test_run_pytest_over_a_file_store():
    store = {"app.py": "def add(a, b):\n    return a + b\n",
             "test_app.py": "from app import add\n\ndef test_add():\n    assert add(1, 2) == 3\n"}
    assert run_pytest(store).ok
    store["test_app.py"] += "\ndef test_wrong():\n    assert add(1, 1) == 3\n"
    failed = run_pytest(store)
    assert failed.exit_code == 1 and "1 failed" in failed.stdout


def test_infinite_loop_is_killed_at_the_time_limit():
    result = run_python("while True:\n    pass", timeout_s=1)
    assert result.timed_out and result.exit_code == -9 and result.duration < 5


@pytest.mark.skipif(not ROOT, reason="process counts are enforced by a pids cgroup as root")
def test_fork_bomb_is_contained_and_cleaned_up():
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    result = run_python(code, timeout_s=2, max_processes=16)
    assert result.timed_out and result.isolation == "netns+mountns+cgroup"
    leftovers = [p for root in _PIDS_CGROUP_ROOTS if root.is_dir() for p in root.glob("iclr24-sandbox-*")]
    assert leftovers == []
    assert subprocess.run(["true"]).returncode == 0  # the host can still start processes


def test_memory_bomb_fails_inside_the_limit():
    result = run_python("x = bytearray(8 * 2**30)", memory_mb=512)
    assert result.exit_code != 0 and "MemoryError" in result.stderr


def test_huge_output_is_truncated():
    result = run_python("import sys\nwhile True:\n    sys.stdout.write('x' * 10000)", timeout_s=3,
                        max_output_bytes=1000, max_file_mb=1)
    assert len(result.stdout) == 1000 and result.truncated and result.exit_code != 0


@pytest.mark.skipif(not ROOT, reason="a read-only mount namespace needs root")
def test_writing_outside_its_directory_is_refused(tmp_path):
    target = tmp_path / "outside.txt"
    result = run_python(f"open({str(target)!r}, 'w').write('x')")
    assert result.exit_code != 0 and "Read-only file system" in result.stderr and not target.exists()
    inside = run_python("open('inside.txt', 'w').write('ok')\nprint(open('inside.txt').read())")
    assert inside.ok and inside.stdout == "ok\n"


def test_opening_a_socket_fails():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    try:
        result = run_python(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
                            "print('connected')")
    finally:
        server.close()
    assert result.exit_code != 0 and "connected" not in result.stdout


def test_environment_secrets_are_not_inherited(monkeypatch):
    monkeypatch.setenv("ICLR24_TEST_SECRET", "hunter2")
    result = run_python("import os\nprint(os.environ.get('ICLR24_TEST_SECRET'))")
    assert result.stdout == "None\n"


def test_the_audit_hook_fallback_blocks_sockets(tmp_path):
    # The launcher used where no namespace can be made (our own code, run here directly).
    (tmp_path / "launch.py").write_text(_GUARDED_LAUNCHER)
    (tmp_path / "main.py").write_text("import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)")
    out = subprocess.run([sys.executable, "launch.py", "script", "main.py"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=30)
    assert out.returncode != 0 and "network access is disabled in the iclr24 sandbox" in out.stderr


@pytest.mark.parametrize("kwargs, match", [({"timeout_s": 0}, "timeout_s must be > 0"),
                                           ({"memory_mb": 8}, "memory_mb must be >= 64"),
                                           ({"files": {"../escape.py": "x"}}, "must stay inside")])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        run_python("pass", **kwargs)
