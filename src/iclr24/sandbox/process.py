"""Start a contained command, read its output through pipes, and end it at the time limit.

Output goes through pipes that this process drains, never to a file the program holds: a file
descriptor on a host file could be grown past every limit (``fallocate`` is not bound by
``RLIMIT_FSIZE``) and fill the host's disk. The first ``keep_bytes`` of each stream are kept;
past ``max_bytes`` the pipe is closed, so the writer gets ``EPIPE`` rather than the host
spending the rest of the time limit reading.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Completed", "execute"]

_CHUNK = 1 << 16
_GRACE_S = 1.0  # after the command ends, how long its output may still arrive


@dataclass(frozen=True)
class Completed:
    stdout: bytes
    stderr: bytes
    returncode: int
    timed_out: bool
    duration: float
    truncated: bool
    report: bytes = b""  # what arrived on the report pipe (``report_fd``), if one was given


class _Stream:
    def __init__(self, pipe, keep: int) -> None:
        self.pipe, self.fd, self.keep, self.data, self.total = pipe, pipe.fileno(), keep, bytearray(), 0
        self.cut = False  # the pipe was closed on the writer before it was done

    @property
    def truncated(self) -> bool:
        return self.cut or self.total > self.keep

    def take(self, chunk: bytes) -> None:
        room = self.keep - len(self.data)
        if room > 0:
            self.data += chunk[:room]
        self.total += len(chunk)


def execute(command: list[str], *, cwd, env: dict[str, str], pass_fds: tuple[int, ...], timeout_s: float,
            keep_bytes: int, max_bytes: int, kill_all: Callable[[], None] = lambda: None,
            stdin_data: bytes | None = None, report_pipe: tuple[int, int] | None = None,
            report_keep_bytes: int = 0) -> Completed:
    """Run ``command`` in a new session; on the time limit kill its group and call ``kill_all``.

    ``stdin_data`` is written to the command's standard input, which is then closed (otherwise it reads
    nothing). ``report_pipe`` is ``(read end, write end)`` of a pipe whose write end is among ``pass_fds``: the
    write end is closed here once the command holds it, and what arrives on the read end (up to
    ``report_keep_bytes``) is ``Completed.report``: a channel the host owns, not a file in the program's reach.
    """
    start = time.monotonic()
    try:
        proc = subprocess.Popen(command, cwd=cwd, env=env,
                                stdin=subprocess.DEVNULL if stdin_data is None else subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=pass_fds, close_fds=True,
                                start_new_session=True)
    except BaseException:
        if report_pipe is not None:
            os.close(report_pipe[0])
        raise
    finally:
        if report_pipe is not None:
            os.close(report_pipe[1])  # the command holds it now; EOF comes when the command's side closes
    if stdin_data is not None:
        try:
            proc.stdin.write(stdin_data)  # a few hundred bytes: they fit the pipe's buffer
        except BrokenPipeError:
            pass
        finally:
            try:
                proc.stdin.close()
            except BrokenPipeError:
                pass
    streams = [_Stream(proc.stdout, keep_bytes), _Stream(proc.stderr, keep_bytes)]
    if report_pipe is not None:
        streams.append(_Stream(os.fdopen(report_pipe[0], "rb", buffering=0), report_keep_bytes))
    selector = selectors.DefaultSelector()
    for stream in streams:
        os.set_blocking(stream.fd, False)
        selector.register(stream.fd, selectors.EVENT_READ, stream)
    pidfd = _pidfd(proc.pid)
    if pidfd is not None:
        selector.register(pidfd, selectors.EVENT_READ, None)
    deadline, ended, timed_out = start + timeout_s, None, False
    try:
        while selector.get_map():
            now = time.monotonic()
            if ended is None and (pidfd is None and proc.poll() is not None):
                ended = now
            if ended is None and now >= deadline:
                timed_out = True
                _kill_group(proc, kill_all)
                ended = now
            if ended is not None and now >= ended + _GRACE_S:
                break  # a writer outlived the command (weak isolation): stop reading
            limit = (ended + _GRACE_S if ended is not None else deadline) - now
            for key, _ in selector.select(timeout=min(limit, 0.05) if pidfd is None else limit):
                if key.data is None:  # the pidfd: the command has ended
                    selector.unregister(key.fd)
                    ended = time.monotonic()
                    continue
                stream = key.data
                try:
                    chunk = os.read(stream.fd, _CHUNK)
                except BlockingIOError:
                    continue
                stream.take(chunk)
                stream.cut = bool(chunk) and stream.total > max_bytes
                if not chunk or stream.total > max_bytes:
                    selector.unregister(stream.fd)  # EOF, or enough: the writer gets EPIPE from now on
                    stream.pipe.close()
    finally:
        selector.close()
        if pidfd is not None:
            os.close(pidfd)
        _kill_group(proc, kill_all)
        proc.wait()
        for stream in streams:
            stream.pipe.close()
    return Completed(bytes(streams[0].data), bytes(streams[1].data), proc.returncode, timed_out,
                     time.monotonic() - start, any(s.truncated for s in streams[:2]),
                     bytes(streams[2].data) if len(streams) > 2 else b"")


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)  # Linux >= 5.3: woken the moment the command ends
    except (AttributeError, OSError):
        return None


def _kill_group(proc: subprocess.Popen, kill_all: Callable[[], None]) -> None:
    # bubblewrap's --die-with-parent takes the namespace down with its monitor; ``kill_all`` (the
    # cgroup sweep) catches anything else; the group kill is all that weak isolation has
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    kill_all()
