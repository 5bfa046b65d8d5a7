"""A seccomp filter (classic BPF) that bubblewrap loads before it starts the program.

It refuses, with ``EPERM``, the system calls a Python program has no business making and that
attacks use: debugging other processes (``ptrace``, ``process_vm_*``), the kernel keyrings
(shared by user id), kernel subsystems with a long record of privilege escalations (``bpf``,
``perf_event_open``, ``userfaultfd``, ``io_uring``), loading kernel code, mounting, namespace
changes and file handles (``open_by_handle_at``, the classic container escape). Most of these
already need a capability the sandbox does not have; the filter removes the kernel code paths
from reach, as Docker's default profile does.

``socket`` and ``socketpair`` are allowed for Unix, IPv4, IPv6 and netlink sockets only (the
network namespace contains those); any other family, such as ``AF_VSOCK``, which reaches the
hypervisor past every namespace, gets ``EAFNOSUPPORT``. A system call of the 32-bit ABI
(``int 0x80``) kills the process and an x32 one gets ``EPERM``, so the numbers below cannot be
sidestepped. Only x86-64 and aarch64 are covered: on another
architecture :func:`seccomp_filter` returns None and the sandbox reports no ``seccomp`` layer.
"""

from __future__ import annotations

import errno
import platform
import struct

__all__ = ["ALLOWED_FAMILIES", "DENIED_SYSCALLS", "SOCKET_CALLS", "seccomp_filter"]

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
    # secret memory the kernel hides even from itself: pinned pages outside the cgroup's reclaim, no use here
    "memfd_secret": (447, 447),
}
# socket() and socketpair(): only these address families; the network namespace covers them, while
# others (AF_VSOCK, for one) reach past it to the hypervisor and the whole machine.
SOCKET_CALLS = {"socket": (41, 198), "socketpair": (53, 199)}
ALLOWED_FAMILIES = {"AF_UNIX": 1, "AF_INET": 2, "AF_INET6": 10, "AF_NETLINK": 16}
_ARCHES = {"x86_64": (0, 0xC000003E), "amd64": (0, 0xC000003E), "aarch64": (1, 0xC00000B7), "arm64": (1, 0xC00000B7)}
_X32_SYSCALL_BIT = 0x40000000

# Classic BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h).
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_RET_ALLOW, _RET_KILL_PROCESS, _RET_ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
_NR_OFFSET, _ARCH_OFFSET, _ARG0_LOW_OFFSET = 0, 4, 16  # struct seccomp_data (little-endian machines)


def seccomp_filter(machine: str | None = None) -> bytes | None:
    """The filter as the bytes of a ``struct sock_filter`` array (what ``bwrap --seccomp FD`` reads).

    ``machine`` defaults to this one (``platform.machine()``); None where it is not covered.
    """
    arch = _ARCHES.get((machine or platform.machine()).lower())
    if arch is None:
        return None
    column, audit_arch = arch
    # (opcode, jump-if-true label, jump-if-false label, k): labels are resolved to offsets below
    program: list[tuple[int, str | None, str | None, int]] = [
        (_LD_W_ABS, None, None, _ARCH_OFFSET),
        (_JEQ_K, "syscall", "kill", audit_arch),  # another ABI of this machine (int 0x80) is killed
        ("kill", _RET_K, _RET_KILL_PROCESS),
        ("syscall", _LD_W_ABS, _NR_OFFSET),
    ]
    if column == 0:
        program.append((_JGE_K, "deny", None, _X32_SYSCALL_BIT))  # x32 system calls on x86-64
    program += [(_JEQ_K, "deny", None, nr) for nr in sorted({pair[column] for pair in DENIED_SYSCALLS.values()})]
    program += [(_JEQ_K, "family", None, pair[column]) for pair in SOCKET_CALLS.values()]
    program += [("allow", _RET_K, _RET_ALLOW),
                ("deny", _RET_K, _RET_ERRNO | errno.EPERM),
                ("family", _LD_W_ABS, _ARG0_LOW_OFFSET)]
    program += [(_JEQ_K, "family allowed", None, family) for family in sorted(ALLOWED_FAMILIES.values())]
    program += [(_RET_K, _RET_ERRNO | errno.EAFNOSUPPORT), ("family allowed", _RET_K, _RET_ALLOW)]
    return _assemble(program)


def _assemble(program: list[tuple]) -> bytes:
    """Resolve labels to relative jumps and pack each instruction as ``struct sock_filter``.

    An entry is ``(op, jt_label, jf_label, k)`` for a jump, ``(op, k)`` otherwise, optionally led by
    its own label.
    """
    labels, plain = {}, []
    for index, entry in enumerate(program):
        if isinstance(entry[0], str):
            labels[entry[0]] = index
            entry = entry[1:]
        plain.append(entry)
    out = []
    for index, entry in enumerate(plain):
        if len(entry) == 2:
            op, jt, jf, k = entry[0], 0, 0, entry[1]
        else:
            op, jt_label, jf_label, k = entry
            jt, jf = (0 if label is None else labels[label] - index - 1 for label in (jt_label, jf_label))
            assert 0 <= jt <= 255 and 0 <= jf <= 255, "jumps go forward, by at most 255"
        out.append(struct.pack("=HBBI", op, jt, jf, k))
    return b"".join(out)
