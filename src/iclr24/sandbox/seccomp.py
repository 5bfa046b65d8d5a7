"""A seccomp filter (classic BPF) that bubblewrap loads before it starts the program.

It refuses, with ``EPERM``, the system calls a Python program has no business making and that
attacks use: debugging other processes (``ptrace``, ``process_vm_*``), the kernel keyrings
(shared by user id), kernel subsystems with a long record of privilege escalations (``bpf``,
``perf_event_open``, ``userfaultfd``, ``io_uring``), loading kernel code, mounting, namespace
changes and file handles (``open_by_handle_at``, the classic container escape). Most of these
already need a capability the sandbox does not have; the filter removes the kernel code paths
from reach, as Docker's default profile does.

A system call of another ABI (32-bit ``int 0x80`` or x32 on x86-64) kills the process, so the
numbers below cannot be sidestepped. Only x86-64 and aarch64 are covered: on another
architecture :func:`seccomp_filter` returns None and the sandbox reports no ``seccomp`` layer.
"""

from __future__ import annotations

import errno
import platform
import struct

__all__ = ["DENIED_SYSCALLS", "seccomp_filter"]

# name: (x86-64, aarch64) numbers, from the kernel's unistd_64.h and asm-generic/unistd.h.
DENIED_SYSCALLS: dict[str, tuple[int, int]] = {
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218),
    "bpf": (321, 280), "perf_event_open": (298, 241), "userfaultfd": (323, 282),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294),
    "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106),
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41), "chroot": (161, 51),
    "open_tree": (428, 428), "move_mount": (429, 429), "fsopen": (430, 430), "fsconfig": (431, 431),
    "fsmount": (432, 432), "fspick": (433, 433), "mount_setattr": (442, 442),
    "unshare": (272, 97), "setns": (308, 268),
    "open_by_handle_at": (304, 265), "name_to_handle_at": (303, 264),
    "swapon": (167, 224), "swapoff": (168, 225), "reboot": (169, 142), "acct": (163, 89),
    "syslog": (103, 116), "quotactl": (179, 60), "fanotify_init": (300, 262),
}
_ARCHES = {"x86_64": (0, 0xC000003E), "amd64": (0, 0xC000003E), "aarch64": (1, 0xC00000B7), "arm64": (1, 0xC00000B7)}
_X32_SYSCALL_BIT = 0x40000000

# Classic BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h).
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_RET_ALLOW, _RET_KILL_PROCESS, _RET_ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
_NR_OFFSET, _ARCH_OFFSET = 0, 4  # struct seccomp_data


def seccomp_filter(machine: str | None = None) -> bytes | None:
    """The filter as the bytes of a ``struct sock_filter`` array (what ``bwrap --seccomp FD`` reads).

    ``machine`` defaults to this one (``platform.machine()``); None where it is not covered.
    """
    arch = _ARCHES.get((machine or platform.machine()).lower())
    if arch is None:
        return None
    column, audit_arch = arch
    numbers = sorted({pair[column] for pair in DENIED_SYSCALLS.values()})
    program = [(_LD_W_ABS, 0, 0, _ARCH_OFFSET),
               (_JEQ_K, 1, 0, audit_arch),  # this ABI: go on; any other: kill
               (_RET_K, 0, 0, _RET_KILL_PROCESS),
               (_LD_W_ABS, 0, 0, _NR_OFFSET)]
    checks = [(_JGE_K, _X32_SYSCALL_BIT)] if column == 0 else []
    checks += [(_JEQ_K, nr) for nr in numbers]
    deny_at = len(program) + len(checks) + 1  # after the checks and the final allow
    for op, k in checks:
        program.append((op, deny_at - len(program) - 1, 0, k))
    program += [(_RET_K, 0, 0, _RET_ALLOW), (_RET_K, 0, 0, _RET_ERRNO | errno.EPERM)]
    assert all(0 <= jt <= 255 for _, jt, _, _ in program), "a jump does not fit in eight bits"
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in program)
