"""A cgroup per run that bounds memory and process count for the whole run, not per process.

As root, a child cgroup is made under the caller's own cgroup for ``memory`` and ``pids`` (v1:
one hierarchy each; v2: one tree with the controllers enabled for children). The program
never sees it: bubblewrap gives it a cgroup namespace and no ``/sys``, and it runs as an
unprivileged user that could not write the root-owned files anyway. At the end every process
still in it is killed and the cgroup removed. Where none can be made (not root, a v2 tree with
processes in the inner node), :func:`RunCgroup.create` returns None and the run is bounded by
its per-namespace ``RLIMIT_NPROC`` and per-process ``RLIMIT_AS`` alone.
"""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["RunCgroup"]

_PREFIX = "iclr24-sandbox-"


@dataclass
class RunCgroup:
    """The cgroup directories of one run (one per v1 hierarchy, or one v2 directory)."""

    paths: dict[str, Path]  # controller -> directory

    @classmethod
    def create(cls, memory_bytes: int, max_processes: int) -> RunCgroup | None:
        """A fresh cgroup limited to ``memory_bytes`` (no swap) and ``max_processes``, or None."""
        if os.geteuid() != 0:
            return None
        name = f"{_PREFIX}{os.getpid()}-{random.SystemRandom().randrange(10**9)}"
        parents = _parents()
        made: dict[str, Path] = {}
        try:
            for controller in ("memory", "pids"):
                parent = parents.get(controller)
                if parent is None:
                    continue
                path = parent / name
                if path not in made.values():
                    _remove_stale(parent)
                    path.mkdir()
                made[controller] = path
                if controller == "pids":
                    (path / "pids.max").write_text(str(max_processes))
                elif (path / "memory.max").exists():  # v2
                    (path / "memory.max").write_text(str(memory_bytes))
                    if (path / "memory.swap.max").exists():
                        (path / "memory.swap.max").write_text("0")
                else:  # v1: the swap limit goes after the memory limit, and equal to it; socket
                    # buffers are charged apart (v2 charges them to memory.max), so they get a limit too
                    (path / "memory.limit_in_bytes").write_text(str(memory_bytes))
                    for extra in ("memory.memsw.limit_in_bytes", "memory.kmem.tcp.limit_in_bytes"):
                        if (path / extra).exists():
                            (path / extra).write_text(str(memory_bytes))
        except OSError:
            made = {c: p for c, p in made.items() if p.exists()}
            cls(made).remove()
            made = {}
        return cls(made) if made else None

    @property
    def controllers(self) -> list[str]:
        return sorted(self.paths)

    @property
    def procs_files(self) -> list[Path]:
        """The files a process writes its pid to, to join (once per distinct directory)."""
        return [path / "cgroup.procs" for path in sorted(set(self.paths.values()))]

    def oom_kills(self) -> int:
        """How many processes the kernel killed for going over the memory limit."""
        path = self.paths.get("memory")
        if path is None:
            return 0
        for name, key in (("memory.events", "oom_kill"), ("memory.oom_control", "oom_kill")):
            for line in _read_text(path / name).splitlines():
                if line.startswith(key + " "):
                    return int(line.split()[1])
        return 0

    def kill_all(self) -> None:
        """SIGKILL every process still inside; sweep until empty (a fork bomb may be mid-fork)."""
        for _ in range(100):
            pids = {int(p) for f in self.procs_files for p in _read_text(f).split()}
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.01)

    def remove(self) -> None:
        for path in sorted(set(self.paths.values())):
            for _ in range(50):  # rmdir fails while killed processes are still being reaped
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)


def _parents() -> dict[str, Path]:
    """controller -> the caller's own cgroup directory in which a child can be made."""
    mounts: dict[str, Path] = {}
    v2_mount = None
    for line in _read_text(Path("/proc/self/mountinfo")).splitlines():
        fields = line.split()
        sep = fields.index("-")
        fstype, options = fields[sep + 1], fields[sep + 3].split(",")
        if fstype == "cgroup":
            for controller in ("memory", "pids"):
                if controller in options:
                    mounts[controller] = Path(fields[4])
        elif fstype == "cgroup2" and v2_mount is None:
            v2_mount = Path(fields[4])
    own: dict[str, str] = {}
    for line in _read_text(Path("/proc/self/cgroup")).splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            own[controller] = path.lstrip("/")
    parents: dict[str, Path] = {}
    for controller, mount in mounts.items():
        parent = mount / own.get(controller, "")
        parents[controller] = parent if parent.is_dir() else mount
    if v2_mount is not None:
        parent = v2_mount / own.get("", "")
        parent = parent if parent.is_dir() else v2_mount
        enabled = _read_text(parent / "cgroup.subtree_control").split()
        for controller in ("memory", "pids"):
            if controller in parents:
                continue
            if controller not in enabled:
                try:  # refused while the inner node holds processes (v2's no-internal-process rule)
                    (parent / "cgroup.subtree_control").write_text(f"+{controller}")
                except OSError:
                    continue
            parents[controller] = parent
    return parents


def _remove_stale(parent: Path) -> None:
    """Remove the empty cgroups of callers that died before cleaning up (their pid is in the name)."""
    for path in parent.glob(f"{_PREFIX}*"):
        try:
            owner = int(path.name[len(_PREFIX):].split("-")[0])
            os.kill(owner, 0)
        except ValueError:
            continue
        except ProcessLookupError:
            try:
                path.rmdir()
            except OSError:
                pass
        except PermissionError:
            pass


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
