"""Run untrusted Python (programs a language model wrote): ``run_python`` and ``run_pytest``.

Two levels of isolation, chosen by ``isolation=`` or ``$ICLR24_SANDBOX``:

- ``"strong"`` (the default): bubblewrap, see :mod:`iclr24.sandbox.bwrap` for the view and
  the namespaces, :mod:`iclr24.sandbox.seccomp` for the system-call filter and
  :mod:`iclr24.sandbox.cgroup` for the whole-run memory and process limits. If it cannot be
  set up here, :class:`SandboxUnavailable` says what is missing; nothing runs.
- ``"weak"``, only when asked for: the same limits on one process tree, an empty
  environment, a fresh directory and an audit hook against sockets, but the host's file
  system, processes and network stay in reach of a program that means harm. For trusted
  code and for machines where namespaces are off.

``ExecResult.isolation`` names the layers that applied, e.g. ``"bwrap+uid+seccomp+cgroup(memory,pids)"``.
"""

from __future__ import annotations

import math
import os
import posixpath
import shutil
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from iclr24.sandbox.bwrap import HARNESS_FILE, HARNESS_MOUNT, INSTALL_HINT, SANDBOX_DIR, BwrapPlan, missing_tools
from iclr24.sandbox.cgroup import RunCgroup
from iclr24.sandbox.process import execute
from iclr24.sandbox.seccomp import seccomp_filter

__all__ = ["ExecResult", "SandboxUnavailable", "WeakIsolationWarning", "probe_isolation", "requested_isolation",
           "run_pytest", "run_python"]

Isolation = Literal["strong", "weak"]
_ISOLATIONS = ("strong", "weak")
_ENV_VAR = "ICLR24_SANDBOX"
_NOFILE = 256
_FOLDER_PREFIX = "iclr24-sandbox-"  # + the caller's pid: a dead caller's folders are swept by the next run
_MAX_TIMEOUT_S = 7 * 86400
# With weak isolation, this launcher installs an audit hook (which Python code cannot remove)
# before running the program: careless code gets no socket; ctypes or a subprocess get around it.
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


class SandboxUnavailable(RuntimeError):
    """Strong isolation cannot be set up on this machine; the message says what is missing."""


@dataclass(frozen=True)
class ExecResult:
    """What a sandboxed program did.

    Attributes
    ----------
    stdout, stderr : str
        Decoded output, at most ``max_output_bytes`` each.
    exit_code : int
        The program's exit status; ``128 + n`` when a signal ``n`` ended it inside the sandbox
        (137: killed, e.g. by the memory limit), ``-9`` when the host killed it at the time limit.
    timed_out : bool
        The wall-time limit was reached and every process of the run was killed.
    duration : float
        Wall seconds.
    truncated : bool
        Output was longer than ``max_output_bytes``.
    isolation : str
        The layers that applied: ``bwrap`` (user, pid, network, ipc, uts, mount and cgroup
        namespaces; a read-only minimal root), ``uid`` (a fresh unprivileged id outside, as
        root), ``seccomp`` (the system-call filter), ``cgroup(memory,pids)`` (whole-run limits
        the program cannot see); or ``weak(rlimits,audit-hook)``.
    oom_killed : bool
        The whole-run memory limit (a cgroup) killed a process of the run.
    """

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    duration: float
    truncated: bool
    isolation: str
    oom_killed: bool = False

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
    isolation: Isolation | None = None,
    entry: str = "main.py",
) -> ExecResult:
    """Run ``code`` as ``entry`` (``main.py``) in a fresh directory holding ``files``; see the module docstring.

    Parameters
    ----------
    code : str
        The program.
    timeout_s : float
        Wall-clock limit (finite, > 0); the CPU-time limit is the same, rounded up.
    memory_mb : int
        Memory for the whole run (a cgroup, where the host has one) and address space for each
        process (numpy and friends need a few hundred MB of address space).
    files : dict of relative path to text or bytes, optional
        Written into the directory first; ``entry`` is the program and cannot be given here.
    args : tuple of str
        Command-line arguments for the program.
    max_processes : int
        Processes alive at once, counted over the whole run.
    max_file_mb : int
        Size of any one file written (and of /tmp).
    max_output_bytes : int
        Output kept per stream.
    isolation : {"strong", "weak"}, optional
        Default: ``$ICLR24_SANDBOX``, else ``"strong"``. ``"weak"`` is an explicit opt-out.
    entry : str
        The file name the program is written to and run as (a relative ``.py`` path).
    """
    if not isinstance(code, str):
        raise TypeError(f"code must be a str, got {type(code).__name__}")
    files = _check_files(files if files is not None else {})
    entry = next(iter(_check_files({entry: ""}))) if isinstance(entry, str) else entry
    if not isinstance(entry, str) or not entry.endswith(".py"):
        raise ValueError(f"entry must be a relative path ending in .py, got {entry!r}")
    if entry in files:
        raise ValueError(f"files must not contain {entry!r}: that name holds the program given as code")
    _check_files({entry: code})  # a program with a lone surrogate cannot be written: a clear error, not a crash
    return _run(("script", entry), _check_argv(args), {entry: code, **files}, timeout_s=timeout_s,
                memory_mb=memory_mb, max_processes=max_processes, max_file_mb=max_file_mb,
                max_output_bytes=max_output_bytes, isolation=isolation)[0]


def run_pytest(files: Mapping[str, str | bytes], *, timeout_s: float = 60.0, memory_mb: int = 1024,
               max_output_bytes: int = 100_000, isolation: Isolation | None = None,
               args: Iterable[str] = ()) -> ExecResult:
    """Run ``pytest -q`` over a file store (``{"app.py": ..., "test_app.py": ...}``) in the sandbox.

    ``args`` go to pytest after ``-q`` (e.g. the test files to run, ``-x``).
    """
    files = _check_files(files)
    if not files:
        raise ValueError("files must hold at least one file to test")
    return _run(("module", "pytest"), ("-q", "-p", "no:cacheprovider", *_check_argv(args)), files, timeout_s=timeout_s,
                memory_mb=memory_mb, max_processes=16, max_file_mb=16, max_output_bytes=max_output_bytes,
                isolation=isolation)[0]


def requested_isolation() -> str:
    """The isolation runs get by default here: ``"strong"``, or ``"weak"`` when ``$ICLR24_SANDBOX`` asks for it."""
    return _resolve_isolation(None)


def probe_isolation(isolation: Isolation | None = None) -> str:
    """The ``isolation`` a run would report here, found by running an empty program once.

    Raises :class:`SandboxUnavailable` where strong isolation is asked for and cannot be had.
    """
    return run_python("pass", timeout_s=30, isolation=isolation).isolation


# --- checks -------------------------------------------------------------------------------------

# Not iclr24.core.checks.check_int: the sandbox imports only the standard library (core imports torch),
# so it starts fast and can be run inside itself (tests/sandbox/test_attacks.py), and it needs an upper bound.
def _check_int(name: str, value, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if not minimum <= value <= maximum:
        raise ValueError(f"{name} must be in [{minimum}, {maximum}], got {value}")
    return value


def _check_limits(timeout_s, memory_mb, max_processes, max_file_mb, max_output_bytes) -> None:
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)):
        raise TypeError(f"timeout_s must be a number of seconds, got {timeout_s!r}")
    if not (math.isfinite(timeout_s) and 0 < timeout_s <= _MAX_TIMEOUT_S):
        raise ValueError(f"timeout_s must be finite, > 0 and <= {_MAX_TIMEOUT_S} (a week), got {timeout_s}")
    _check_int("memory_mb", memory_mb, 64, 2**22)
    _check_int("max_processes", max_processes, 1, 2**15)
    _check_int("max_file_mb", max_file_mb, 1, 2**20)
    _check_int("max_output_bytes", max_output_bytes, 0, 2**31)


def _check_argv(args) -> tuple[str, ...]:
    if args is None or isinstance(args, (str, bytes)) or not isinstance(args, Iterable):
        raise TypeError(f"args must be a tuple of str, got {args!r}")
    args = tuple(args)  # once: a generator is not used up by the check
    if not all(isinstance(a, str) and "\0" not in a for a in args):
        raise TypeError(f"args must be a tuple of str without NUL, got {args!r}")
    return args


def _check_files(files) -> dict[str, str | bytes]:
    """``files`` keyed by normalised relative path (``./a.py`` and ``a.py`` are one file)."""
    if not isinstance(files, Mapping):
        raise TypeError(f"files must be a mapping of relative path to str or bytes, got {type(files).__name__}")
    out: dict[str, str | bytes] = {}
    for name, content in files.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"file name {_shown(name)} must be a non-empty str")
        try:
            name.encode()
        except UnicodeEncodeError:
            raise ValueError(f"file name {_shown(name)} must be valid UTF-8") from None
        path = posixpath.normpath(name)
        if name.startswith("/") or "\0" in name or path in (".", "..") or path.startswith("../"):
            raise ValueError(f"file name {_shown(name)} must be a relative path that stays inside the sandbox "
                             "directory")
        if any(len(part.encode()) > 255 for part in path.split("/")) or len(path.encode()) > 1024:
            raise ValueError(f"file name {_shown(name)} is too long (a part over 255 bytes, or over 1024 in all)")
        if path in out:
            raise ValueError(f"file names {_shown(name)} and another both name {_shown(path)}")
        if not isinstance(content, (str, bytes)):
            raise TypeError(f"file {_shown(name)} must hold str or bytes, got {type(content).__name__}")
        if isinstance(content, str):
            try:
                content.encode()
            except UnicodeEncodeError as err:
                raise ValueError(f"file {_shown(name)} cannot be written as UTF-8 (a lone surrogate at character "
                                 f"{err.start})") from None
        out[path] = content
    for path in out:
        parent = posixpath.dirname(path)
        while parent:
            if parent in out:
                raise ValueError(f"file name {_shown(parent)} is also a folder of {_shown(path)}")
            parent = posixpath.dirname(parent)
    return out


def _shown(name) -> str:
    text = repr(name)
    return text if len(text) <= 80 else text[:77] + "...'"


def _resolve_isolation(isolation) -> str:
    source = "isolation"
    if isolation is None:
        isolation, source = os.environ.get(_ENV_VAR, "strong") or "strong", f"${_ENV_VAR}"
    if isolation not in _ISOLATIONS:
        raise ValueError(f"{source} must be one of {_ISOLATIONS}, got {isolation!r}")
    return isolation


# --- running ------------------------------------------------------------------------------------

def _run(target: tuple[str, str], args, files: dict, *, timeout_s, memory_mb, max_processes, max_file_mb,
         max_output_bytes, isolation, harness: str | None = None, stdin_data: bytes | None = None,
         report_keep_bytes: int = 0) -> tuple[ExecResult, bytes]:
    """Run ``target`` (``("script", path)`` or ``("module", name)``) over ``files``; the result and what arrived
    on the report pipe.

    With ``harness`` (a Python source), the target is that harness instead, run isolated (``python -I``) from a
    read-only folder outside the program's tree, so nothing the program writes can shadow it or stand in for it.
    """
    _check_limits(timeout_s, memory_mb, max_processes, max_file_mb, max_output_bytes)
    mode = _resolve_isolation(isolation)
    if not sys.platform.startswith("linux"):
        raise SandboxUnavailable(f"iclr24.sandbox needs Linux (namespaces, resource limits); this is {sys.platform}")
    root = os.geteuid() == 0
    if mode == "strong" and (missing := missing_tools(root)):
        raise SandboxUnavailable(f"strong isolation needs {', '.join(missing)} on PATH: {INSTALL_HINT}; or opt "
                                 f"into weak isolation with isolation='weak' or {_ENV_VAR}=weak")
    if mode == "weak" and shutil.which("prlimit") is None:
        raise SandboxUnavailable("the sandbox needs prlimit (util-linux) on PATH")
    kind, name = target
    limits = [f"--cpu={math.ceil(timeout_s) + 1}", f"--as={memory_mb * 2**20}", f"--fsize={max_file_mb * 2**20}",
              "--core=0", f"--nofile={_NOFILE}"]
    _sweep_stale_folders()
    base = Path(tempfile.mkdtemp(prefix=f"{_FOLDER_PREFIX}{os.getpid()}-"))
    cgroup = None
    try:
        workdir = base / "work"
        workdir.mkdir()
        for rel, content in files.items():
            path = workdir / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content.encode() if isinstance(content, str) else content)
        harness_dir = None
        if harness is not None:
            harness_dir = base / "harness"
            harness_dir.mkdir()
            (harness_dir / HARNESS_FILE).write_text(harness)
            os.chmod(harness_dir, 0o755)
            os.chmod(harness_dir / HARNESS_FILE, 0o644)
        if mode == "weak":
            (workdir / ".tmp").mkdir()
            (base / "launch.py").write_text(_GUARDED_LAUNCHER)
            if harness_dir is not None:
                kind, name = "script", str(harness_dir / HARNESS_FILE)
            # the pid namespace is missing here, so NPROC counts the caller's processes too: leave room for them
            limits.append(f"--nproc={max_processes + _processes_of_this_user()}")
            program = [sys.executable, "-E", "-s", str(base / "launch.py"), kind, name, *args]
            command = [shutil.which("prlimit"), *limits, "--", *program]
            env = _environment(home=str(workdir), tmp=str(workdir / ".tmp"))
            _warn_weak()
            report_pipe, env = _report_pipe(env, report_keep_bytes)
            return _execute(command, workdir, env, (), timeout_s, max_output_bytes, max_file_mb,
                            "weak(rlimits,audit-hook)", None, stdin_data, report_pipe, report_keep_bytes)
        cgroup = RunCgroup.create(memory_mb * 2**20, max_processes + 1) if root else None
        plan = BwrapPlan(workdir, stage_dir=base / "stage", etc_dir=base / "etc", root=root,
                         cgroup_procs=cgroup.procs_files if cgroup else [], harness_dir=harness_dir)
        if root:
            os.chmod(base, 0o711)  # the unprivileged id traverses it to reach work/, etc/ and stage/
            for path in workdir.rglob("*"):  # readable, not writable: it is copied in
                os.chmod(path, 0o755 if path.is_dir() else 0o644)
            os.chown(workdir, plan.outside_uid, plan.outside_uid)  # and closed to the host's other users
            os.chmod(workdir, 0o700)
        # the reaper bubblewrap runs as pid 1 of the namespace counts as one process
        limits.append(f"--nproc={max_processes + 1}")
        if harness_dir is not None:
            program = [sys.executable, "-I", f"{HARNESS_MOUNT}/{HARNESS_FILE}", *args]
        else:
            program = [sys.executable, "-E", "-s", *(["-m", name] if kind == "module" else [name]), *args]
        env = _environment(home=SANDBOX_DIR, tmp="/tmp")
        layers = ["bwrap"] + (["uid"] if root else [])
        with tempfile.TemporaryFile() as status, tempfile.TemporaryFile() as bpf:
            filter_bytes = seccomp_filter()
            if filter_bytes is not None:
                bpf.write(filter_bytes)
                bpf.flush()
                bpf.seek(0)
                layers.append("seccomp")
            if cgroup is not None:
                layers.append(f"cgroup({','.join(cgroup.controllers)})")
            report_pipe, env = _report_pipe(env, report_keep_bytes)
            command = plan.command(program, env=env, limits=limits, tmpfs_bytes=memory_mb * 2**20,
                                   status_fd=status.fileno(),
                                   seccomp_fd=bpf.fileno() if filter_bytes is not None else None)
            fds = (status.fileno(),) + ((bpf.fileno(),) if filter_bytes is not None else ())
            result, report = _execute(command, workdir, env, fds, timeout_s, max_output_bytes, max_file_mb,
                                      "+".join(layers), cgroup, stdin_data, report_pipe, report_keep_bytes)
            status.seek(0)
            started = b'"child-pid"' in status.read()
        if not started and not result.timed_out:
            raise SandboxUnavailable(
                "bubblewrap could not set up the sandbox here: "
                f"{(result.stderr.strip() or f'exit status {result.exit_code}')[-500:]}. Strong isolation needs "
                "unprivileged user namespaces (sysctl user.max_user_namespaces > 0; kernel.unprivileged_userns_clone"
                "=1 where it exists; in a container, a seccomp profile that allows unshare/clone); or opt into "
                f"weak isolation with isolation='weak' or {_ENV_VAR}=weak")
        return result, report
    finally:
        if cgroup is not None:
            cgroup.kill_all()
            cgroup.remove()
        shutil.rmtree(base, ignore_errors=True)


def _environment(home: str, tmp: str) -> dict[str, str]:
    """The program's whole environment: nothing is inherited from the caller."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "TMPDIR": tmp, "LANG": "C.UTF-8",
            "PYTHONIOENCODING": "utf-8", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg"}


def _execute(command, workdir, env, pass_fds, timeout_s, max_output_bytes, max_file_mb, isolation,
             cgroup, stdin_data=None, report_pipe=None, report_keep_bytes=0) -> tuple[ExecResult, bytes]:
    done = execute(command, cwd=workdir, env=env, pass_fds=(*pass_fds, *(report_pipe[1:] if report_pipe else ())),
                   timeout_s=timeout_s, keep_bytes=max_output_bytes, max_bytes=max_file_mb * 2**20,
                   kill_all=cgroup.kill_all if cgroup is not None else lambda: None, stdin_data=stdin_data,
                   report_pipe=report_pipe, report_keep_bytes=report_keep_bytes)
    oom = cgroup is not None and cgroup.oom_kills() > 0
    return ExecResult(done.stdout.decode("utf-8", errors="replace"), done.stderr.decode("utf-8", errors="replace"),
                      done.returncode, done.timed_out, done.duration, done.truncated, isolation, oom), done.report


def _sweep_stale_folders() -> None:
    """Remove the run folders of callers that died without cleaning up (SIGKILL): their pid is in the name."""
    for path in Path(tempfile.gettempdir()).glob(f"{_FOLDER_PREFIX}*-*"):
        owner = path.name[len(_FOLDER_PREFIX):].split("-")[0]
        if not owner.isdigit() or int(owner) == os.getpid():
            continue
        try:
            os.kill(int(owner), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except (PermissionError, OverflowError):
            pass


def _report_pipe(env: dict[str, str], keep_bytes: int) -> tuple[tuple[int, int] | None, dict[str, str]]:
    """A pipe for the harness's report (``$ICLR24_REPORT_FD`` names its write end), made just before the command
    starts: :func:`iclr24.sandbox.process.execute` closes both ends."""
    if keep_bytes <= 0:
        return None, env
    read, write = os.pipe()
    return (read, write), {**env, "ICLR24_REPORT_FD": str(write)}


def _warn_weak() -> None:
    """Weak isolation leaves the host in reach of the program: say so on every run, not only in the docs."""
    import warnings

    warnings.warn("iclr24.sandbox runs generated code with WEAK isolation (ICLR24_SANDBOX=weak or "
                  "isolation='weak'): the program can read and write the host's files and signal its processes. "
                  "Use it only for trusted code; install bubblewrap for strong isolation.", WeakIsolationWarning,
                  stacklevel=4)


class WeakIsolationWarning(UserWarning):
    """A program ran under weak isolation: the host's files and processes were in its reach."""


def _processes_of_this_user() -> int:
    uid = os.getuid()
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                count += os.stat(f"/proc/{entry}").st_uid == uid
            except OSError:
                pass
    return count
