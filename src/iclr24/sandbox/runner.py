"""Run untrusted Python (programs a language model wrote) in a contained child process.

Every run gets a fresh temporary directory (removed afterwards) as its working directory,
``python -E -s`` with an empty environment (no inherited secrets), limits on CPU time, wall
time, address space, file size and open files, and output written to size-limited files,
never to unbounded pipes.

The rest depends on privileges (Linux):

- **as root** (containers, CI) everything is enforced by the kernel: a new *network
  namespace* (only a down loopback: no network at all); a new *mount namespace* where every
  mount is read-only except the run's directory (nothing outside it can be written); and a
  *pids cgroup* whose ``pids.max`` bounds the number of processes (root ignores
  ``RLIMIT_NPROC``), which also names every process to kill at the end.
- **otherwise**, a user+network namespace is tried (no network); if the kernel refuses it,
  an audit hook blocks sockets inside the interpreter. Without root, files outside the
  directory are protected only by the user's own permissions, and processes are bounded by
  ``RLIMIT_NPROC``. Code that calls the kernel through ``ctypes`` could bypass an audit hook.

``ExecResult.isolation`` says which of these applied.
"""

from __future__ import annotations

import ctypes
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ExecResult", "run_pytest", "run_python"]

_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
_MS_RDONLY, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
_PIDS_CGROUP_ROOTS = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"))
# Without a network namespace, this launcher installs an audit hook (which Python code cannot
# remove) before running the program.
_GUARDED_LAUNCHER = """
import runpy, sys
def _guard(event, args):
    if event in ("socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo"):
        raise PermissionError("network access is disabled in the iclr24 sandbox")
sys.addaudithook(_guard)
_kind, _name, *_args = sys.argv[1:]
sys.argv = [_name, *_args]
if _kind == "module":
    runpy.run_module(_name, run_name="__main__", alter_sys=True)
else:
    runpy.run_path(_name, run_name="__main__")
"""
# -E -s: no PYTHON* variables, no user site; unlike -I the script's folder stays importable.
_PYTHON = (sys.executable, "-E", "-s")


@dataclass(frozen=True)
class ExecResult:
    """What a sandboxed program did.

    Attributes
    ----------
    stdout, stderr : str
        Decoded output, at most ``max_output_bytes`` each.
    exit_code : int or None
        The exit status; negative for a signal (``-9``: killed); None never happens after return.
    timed_out : bool
        The wall-time limit was reached and the program was killed.
    duration : float
        Wall seconds.
    truncated : bool
        Output was longer than ``max_output_bytes`` (or hit the file-size limit).
    isolation : str
        ``"netns+mountns+cgroup"`` (root), ``"netns+mountns"`` (root, no pids cgroup),
        ``"userns+netns"`` or ``"audit-hook"``.
    """

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    duration: float
    truncated: bool
    isolation: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


def run_python(
    code: str,
    *,
    timeout_s: float = 10.0,
    memory_mb: int = 1024,
    files: Mapping[str, str | bytes] | None = None,
    args: tuple[str, ...] = (),
    max_processes: int = 16,
    max_file_mb: int = 16,
    max_output_bytes: int = 100_000,
) -> ExecResult:
    """Run ``code`` as ``main.py`` in a fresh directory holding ``files``; see the module docstring.

    Parameters
    ----------
    code : str
        The program.
    timeout_s : float
        Wall-clock limit; the CPU-time limit is the same, rounded up.
    memory_mb : int
        Address-space limit (numpy and friends need a few hundred MB of address space).
    files : dict of relative path to text or bytes, optional
        Written into the directory first.
    args : tuple of str
        Command-line arguments for the program.
    max_processes, max_file_mb, max_output_bytes : int
        Processes at once (a pids cgroup as root, else RLIMIT_NPROC), size of any file written,
        output kept per stream.
    """
    return _run(("script", "main.py"), args, {"main.py": code, **(files or {})}, timeout_s, memory_mb,
                max_processes, max_file_mb, max_output_bytes)


def run_pytest(files: Mapping[str, str | bytes], *, timeout_s: float = 60.0, memory_mb: int = 1024,
               max_output_bytes: int = 100_000) -> ExecResult:
    """Run ``pytest -q`` over a file store (``{"app.py": ..., "test_app.py": ...}``) in the sandbox."""
    if not files:
        raise ValueError("files must hold at least one file to test")
    return _run(("module", "pytest"), ("-q", "-p", "no:cacheprovider"), dict(files), timeout_s, memory_mb, 16, 16,
                max_output_bytes)


def _run(target: tuple[str, str], args, files, timeout_s, memory_mb, max_processes, max_file_mb,
         max_output_bytes) -> ExecResult:
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    if not memory_mb >= 64:
        raise ValueError(f"memory_mb must be >= 64, got {memory_mb}")
    if not sys.platform.startswith("linux"):
        raise RuntimeError(f"iclr24.sandbox needs Linux (resource limits, namespaces); this is {sys.platform}")
    root = os.geteuid() == 0
    base = Path(tempfile.mkdtemp(prefix="iclr24-sandbox-"))
    workdir = base / "work"
    workdir.mkdir()
    cgroup = _make_pids_cgroup(max_processes) if root else None
    try:
        for name, content in files.items():
            path = (workdir / name).resolve()
            if workdir.resolve() not in path.parents:
                raise ValueError(f"file name {name!r} must stay inside the sandbox directory")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content.encode() if isinstance(content, str) else content)
        (workdir / ".tmp").mkdir()
        if root:
            isolation = "netns+mountns+cgroup" if cgroup else "netns+mountns"
        else:
            isolation = _namespace_probe()
        kind, name = target
        if isolation == "audit-hook":
            launcher = base / "launch.py"
            launcher.write_text(_GUARDED_LAUNCHER)
            command = [*_PYTHON, str(launcher), kind, name, *args]
        else:
            command = [*_PYTHON, *(["-m", name] if kind == "module" else [name]), *args]
        env = {"PATH": "/usr/bin:/bin", "HOME": str(workdir), "TMPDIR": str(workdir / ".tmp"), "LANG": "C.UTF-8",
               "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8", "OPENBLAS_NUM_THREADS": "1",
               "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
        limits = {"cpu": math.ceil(timeout_s) + 1, "memory": memory_mb * 2**20, "fsize": max_file_mb * 2**20,
                  "nproc": max_processes}
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            start = time.monotonic()
            proc = subprocess.Popen(command, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    preexec_fn=lambda: _contain(limits, isolation, workdir, cgroup), close_fds=True)
            timed_out = False
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _kill_all(proc, cgroup)
            duration = time.monotonic() - start
            stdout, cut_out = _read(out, max_output_bytes)
            stderr, cut_err = _read(err, max_output_bytes)
        return ExecResult(stdout, stderr, proc.returncode, timed_out, duration,
                          cut_out or cut_err or proc.returncode == -signal.SIGXFSZ, isolation)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        if cgroup is not None:
            try:
                cgroup.rmdir()
            except OSError:
                pass


def _contain(limits: dict, isolation: str, workdir: Path, cgroup: Path | None) -> None:
    """In the child, before exec: session, cgroup, namespaces, read-only mounts, limits."""
    import resource

    os.setsid()
    if cgroup is not None:
        (cgroup / "cgroup.procs").write_text(str(os.getpid()))
    libc = ctypes.CDLL(None, use_errno=True)
    if isolation.startswith("netns+mountns"):
        if libc.unshare(_CLONE_NEWNET | _CLONE_NEWNS) != 0:
            os._exit(126)  # refuse to run without the promised isolation
        _read_only_except(libc, workdir)
    elif isolation == "userns+netns":
        if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
            os._exit(126)
    for name, value in (("RLIMIT_CPU", limits["cpu"]), ("RLIMIT_AS", limits["memory"]),
                        ("RLIMIT_FSIZE", limits["fsize"]), ("RLIMIT_CORE", 0), ("RLIMIT_NOFILE", 256),
                        ("RLIMIT_NPROC", limits["nproc"])):
        try:
            resource.setrlimit(getattr(resource, name), (value, value))
        except (ValueError, OSError):
            if name != "RLIMIT_NPROC":  # NPROC may exceed the hard limit of an unprivileged user
                raise


def _read_only_except(libc, workdir: Path) -> None:
    """In a private mount namespace: every mount read-only, the work directory writable."""
    def mount(source, target, flags):
        return libc.mount(source, str(target).encode(), None, flags, None)

    if mount(None, "/", _MS_REC | _MS_PRIVATE) != 0 or mount(str(workdir).encode(), workdir, _MS_BIND) != 0:
        os._exit(126)
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for point in sorted(set(points), key=len):
        if point != str(workdir) and not point.startswith(("/proc", "/sys", "/dev")):
            mount(None, point, _MS_REMOUNT | _MS_BIND | _MS_RDONLY)  # best effort per mount
    if mount(None, "/", _MS_REMOUNT | _MS_BIND | _MS_RDONLY) != 0:
        os._exit(126)
    os.chdir(workdir)  # Popen entered it before the bind mount: re-enter through the writable mount


def _make_pids_cgroup(max_processes: int) -> Path | None:
    """A fresh pids cgroup limited to ``max_processes`` (v1 or v2), or None where none can be made."""
    for root in _PIDS_CGROUP_ROOTS:
        if not (root / "cgroup.procs").exists():
            continue
        if root == Path("/sys/fs/cgroup") and "pids" not in _read_text(root / "cgroup.controllers"):
            continue
        path = root / f"iclr24-sandbox-{os.getpid()}-{random.SystemRandom().randrange(10**9)}"
        try:
            path.mkdir()
            (path / "pids.max").write_text(str(max_processes))
            return path
        except OSError:
            try:
                path.rmdir()
            except OSError:
                pass
    return None


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _namespace_probe() -> str:
    """Whether an unprivileged user+network namespace can be made here (tried in a child)."""
    pid = os.fork()
    if pid == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        os._exit(0 if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) == 0 else 1)
    _, status = os.waitpid(pid, 0)
    return "userns+netns" if os.waitstatus_to_exitcode(status) == 0 else "audit-hook"


def _kill_all(proc: subprocess.Popen, cgroup: Path | None) -> None:
    """Kill the process group and, with a cgroup, every process in it (escaped groups included)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if cgroup is not None:
        for _ in range(50):  # a fork bomb may be mid-fork: sweep until the cgroup is empty
            pids = [int(p) for p in _read_text(cgroup / "cgroup.procs").split()]
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.01)
    proc.wait()


def _read(f, limit: int) -> tuple[str, bool]:
    f.seek(0, os.SEEK_END)
    size = f.tell()
    f.seek(0)
    return f.read(limit).decode("utf-8", errors="replace"), size > limit
