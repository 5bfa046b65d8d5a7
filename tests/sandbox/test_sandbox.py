"""The sandbox's contract: programs run with their files and limits, isolation is chosen and reported, bad
arguments are refused. Hostile programs are in test_attacks.py."""

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from iclr24.sandbox import SandboxUnavailable, probe_isolation, run_pytest, run_python
from iclr24.sandbox.runner import _GUARDED_LAUNCHER

ROOT = os.geteuid() == 0
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")


def sandbox_dirs():
    """This process's sandbox folders (named after the caller's pid; other test workers make their own)."""
    return {p.name for p in Path(tempfile.gettempdir()).glob(f"iclr24-sandbox-{os.getpid()}-*")}


def test_runs_a_program_with_its_files_and_exit_code():
    before = sandbox_dirs()
    result = run_python("import sys, helper, pkg.data\nprint(helper.X * 2, pkg.data.Y)\nsys.exit(3)",
                        files={"helper.py": "X = 21", "pkg/__init__.py": "", "pkg/data.py": b"Y = 'b'"})
    assert (result.stdout, result.exit_code, result.timed_out) == ("42 b\n", 3, False)
    assert sandbox_dirs() == before  # the directory is removed afterwards


def test_the_program_may_change_its_own_files_and_sees_its_arguments():
    code = "import sys\nopen('data.txt', 'a').write('+')\nprint(open('data.txt').read(), sys.argv[1:])"
    result = run_python(code, files={"data.txt": "x"}, args=("--n", "3"))
    assert result.ok and result.stdout == "x+ ['--n', '3']\n"


def test_strong_isolation_is_the_default_and_reports_every_layer():
    result = run_python("import os\nprint(os.getuid(), os.getcwd(), sorted(os.listdir('/')))")
    uid, cwd, _ = result.stdout.split(" ", 2)
    assert (uid, cwd) == ("1000", "/sandbox")
    layers = result.isolation.split("+")
    assert layers[0] == "bwrap" and "seccomp" in layers
    if ROOT:  # a fresh unprivileged id outside, and whole-run cgroup limits where the host has them
        assert "uid" in layers
    assert probe_isolation() == result.isolation


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
    assert result.timed_out and result.exit_code == -9 and 1 <= result.duration < 5


def test_memory_bomb_fails_inside_the_limit():
    result = run_python("x = bytearray(8 * 2**30)", memory_mb=512)
    assert result.exit_code != 0 and "MemoryError" in result.stderr


def test_huge_output_is_truncated():
    result = run_python("import sys\nwhile True:\n    sys.stdout.write('x' * 10000)", timeout_s=3,
                        max_output_bytes=1000, max_file_mb=1)
    assert len(result.stdout) == 1000 and result.truncated and result.exit_code != 0


def test_output_cut_at_the_stream_limit_is_truncated_even_below_max_output_bytes():
    # the review's case: max_output_bytes far above the 1 MiB stream cap; the pipe is closed at the cap
    result = run_python("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)", timeout_s=5,
                        max_output_bytes=2**31, max_file_mb=1)
    assert result.truncated and result.exit_code != 0 and 2**20 <= len(result.stdout) < 2**20 + 2**17


def test_a_large_file_stops_at_the_file_size_limit():
    result = run_python("open('big', 'wb').write(b'x' * (3 * 2**20))", max_file_mb=1)
    assert result.exit_code != 0 and "File too large" in result.stderr


def test_environment_secrets_are_not_inherited(monkeypatch):
    monkeypatch.setenv("ICLR24_TEST_SECRET", "hunter2")
    result = run_python("import os\nprint(os.environ.get('ICLR24_TEST_SECRET'), sorted(os.environ))")
    assert result.stdout.startswith("None ") and "hunter2" not in result.stdout


# --- choosing the isolation -----------------------------------------------------------------------

def test_weak_isolation_only_when_asked_for(monkeypatch):
    from iclr24.sandbox import WeakIsolationWarning

    with pytest.warns(WeakIsolationWarning, match="WEAK isolation.*can read and write the host's files"):
        weak = run_python("print('hi')", isolation="weak")
    assert weak.ok and weak.stdout == "hi\n" and weak.isolation == "weak(rlimits,audit-hook)"
    monkeypatch.setenv("ICLR24_SANDBOX", "weak")
    assert run_python("pass").isolation == "weak(rlimits,audit-hook)"
    assert run_python("pass", isolation="strong").isolation.startswith("bwrap")  # the argument wins
    monkeypatch.setenv("ICLR24_SANDBOX", "none")
    with pytest.raises(ValueError, match=r"\$ICLR24_SANDBOX must be one of \('strong', 'weak'\), got 'none'"):
        run_python("pass")


def test_missing_bubblewrap_is_a_clear_error_not_a_silent_downgrade(monkeypatch, tmp_path):
    # a PATH holding every tool but bwrap
    for tool in ("prlimit", "unshare", "setpriv", "mount", "sh"):
        (tmp_path / tool).symlink_to(subprocess.check_output(["which", tool], text=True).strip())
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SandboxUnavailable, match=r"needs bwrap on PATH: install bubblewrap \(Debian/Ubuntu: "
                                                 r"apt-get install bubblewrap.*isolation='weak'"):
        run_python("print(1)")
    assert run_python("print(1)", isolation="weak").stdout == "1\n"


def test_a_bubblewrap_that_cannot_make_namespaces_is_a_clear_error(monkeypatch):
    # what bwrap prints in a container whose seccomp profile refuses user namespaces (in a folder
    # the unprivileged sandbox id can read: as root, bwrap runs under it)
    tmp_path = Path(tempfile.mkdtemp())
    tmp_path.chmod(0o755)
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    try:
        with pytest.raises(SandboxUnavailable, match="No permissions to creating new namespace.*user namespaces"):
            run_python("print(1)")
    finally:
        shutil.rmtree(tmp_path)


def test_the_audit_hook_of_weak_isolation_blocks_sockets(tmp_path):
    (tmp_path / "launch.py").write_text(_GUARDED_LAUNCHER)
    (tmp_path / "main.py").write_text("import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)")
    out = subprocess.run([sys.executable, "launch.py", "script", "main.py"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=30)
    assert out.returncode != 0 and "network access is disabled in the iclr24 sandbox" in out.stderr


# --- arguments --------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, error, match", [
    ({"timeout_s": 0}, ValueError, r"timeout_s must be finite, > 0 and <= 604800 \(a week\), got 0"),
    ({"timeout_s": float("inf")}, ValueError, r"timeout_s must be finite, > 0 and <= 604800 \(a week\), got inf"),
    ({"timeout_s": float("nan")}, ValueError, r"timeout_s must be finite.*got nan"),
    ({"timeout_s": 1e300}, ValueError, r"timeout_s must be finite.*got 1e\+300"),
    ({"timeout_s": "5"}, TypeError, r"timeout_s must be a number of seconds, got '5'"),
    ({"memory_mb": 8}, ValueError, r"memory_mb must be in \[64, 4194304\], got 8"),
    ({"memory_mb": 2**62}, ValueError, r"memory_mb must be in \[64, 4194304\]"),
    ({"max_processes": -1}, ValueError, r"max_processes must be in \[1, 32768\], got -1"),
    ({"max_processes": 0}, ValueError, r"max_processes must be in \[1, 32768\], got 0"),
    ({"max_processes": 2**40}, ValueError, r"max_processes must be in \[1, 32768\]"),
    ({"max_output_bytes": -1}, ValueError, r"max_output_bytes must be in \[0, 2147483648\], got -1"),
    ({"max_file_mb": 0}, ValueError, r"max_file_mb must be in \[1, 1048576\], got 0"),
    ({"max_file_mb": 2**50}, ValueError, r"max_file_mb must be in \[1, 1048576\]"),
    ({"max_file_mb": 1.5}, TypeError, r"max_file_mb must be an int, got 1.5"),
    ({"files": {"main.py": "print(1)"}}, ValueError, r"files must not contain 'main.py'"),
    ({"files": {"./main.py": "print(1)"}}, ValueError, r"files must not contain 'main.py'"),
    ({"files": {"main.py/": "print(1)"}}, ValueError, r"files must not contain 'main.py'"),
    ({"files": {"a.py": "1", "./a.py": "2"}}, ValueError, r"file names './a.py' and another both name 'a.py'"),
    ({"files": {"a": "1", "a/b.py": "2"}}, ValueError, r"file name 'a' is also a folder of 'a/b.py'"),
    ({"files": {".": "x"}}, ValueError, r"'\.' must be a relative path that stays inside"),
    ({"files": {"../escape.py": "x"}}, ValueError, r"'../escape.py' must be a relative path that stays inside"),
    ({"files": {"a/../../x": "x"}}, ValueError, r"must be a relative path that stays inside"),
    ({"files": {"/etc/x": "x"}}, ValueError, r"'/etc/x' must be a relative path"),
    ({"files": {"\udc80.py": "x"}}, ValueError, r"must be valid UTF-8"),
    ({"files": {"x" * 300: "x"}}, ValueError, r"is too long \(a part over 255 bytes"),
    ({"files": {"a.py": 3}}, TypeError, r"file 'a.py' must hold str or bytes, got int"),
    ({"files": "abc"}, TypeError, r"files must be a mapping of relative path to str or bytes, got str"),
    ({"args": "--flag"}, TypeError, r"args must be a tuple of str, got '--flag'"),
    ({"args": None}, TypeError, r"args must be a tuple of str, got None"),
    ({"args": (1,)}, TypeError, r"args must be a tuple of str without NUL"),
    ({"isolation": "none"}, ValueError, r"isolation must be one of \('strong', 'weak'\), got 'none'"),
])
def test_bad_arguments_are_refused_before_anything_runs(kwargs, error, match):
    before = sandbox_dirs()
    with pytest.raises(error, match=match):
        run_python("pass", **kwargs)
    assert sandbox_dirs() == before


def test_run_pytest_needs_files():
    with pytest.raises(ValueError, match="files must hold at least one file"):
        run_pytest({})
    with pytest.raises(TypeError, match="files must be a mapping"):
        run_pytest([("test_a.py", "def test(): pass")])


def test_the_program_may_have_another_file_name_and_pytest_its_arguments():
    result = run_python("import os, sys\nprint(os.path.basename(sys.argv[0]))", entry="tools/check.py",
                        files={"main.py": "X = 1"})
    assert result.ok and result.stdout == "check.py\n"
    store = {"test_a.py": "def test_a():\n    pass\n", "test_b.py": "def test_b():\n    assert False\n"}
    assert run_pytest(store, args=["test_a.py"]).ok and not run_pytest(store).ok
    with pytest.raises(ValueError, match="entry must be a relative path ending in .py, got 'x.txt'"):
        run_python("pass", entry="x.txt")
    with pytest.raises(ValueError, match="files must not contain 'x.py': that name holds the program"):
        run_python("pass", entry="x.py", files={"./x.py": "1"})


def test_arguments_from_a_generator_reach_the_program():
    result = run_python("import sys\nprint(sys.argv[1:])", args=(a for a in ["x", "y"]))
    assert result.stdout == "['x', 'y']\n"


def test_folders_left_by_a_killed_caller_are_swept_by_the_next_run(tmp_path):
    import os
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = Path(tempfile.gettempdir()) / f"iclr24-sandbox-{int(dead.stdout)}-abc"
    stale.mkdir()
    (stale / "work").mkdir()
    alive = Path(tempfile.mkdtemp(prefix=f"iclr24-sandbox-{os.getppid()}-"))  # a live owner: kept
    try:
        assert run_python("pass").ok
        assert not stale.exists() and alive.exists()
    finally:
        import shutil

        shutil.rmtree(stale, ignore_errors=True)
        shutil.rmtree(alive, ignore_errors=True)


def test_the_requested_isolation_is_named(monkeypatch):
    from iclr24.sandbox import requested_isolation

    monkeypatch.delenv("ICLR24_SANDBOX", raising=False)
    assert requested_isolation() == "strong"
    monkeypatch.setenv("ICLR24_SANDBOX", "weak")
    assert requested_isolation() == "weak"
