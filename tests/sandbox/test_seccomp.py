"""The seccomp filter: its system-call numbers against the kernel headers, its decisions through a BPF
interpreter, and its effect on a real program."""

import errno
import json
import platform
import re
import struct
import sys
from pathlib import Path

import pytest

from iclr24.sandbox import run_python
from iclr24.sandbox.seccomp import ALLOWED_FAMILIES, DENIED_SYSCALLS, SOCKET_CALLS, seccomp_filter

AUDIT_X86_64, AUDIT_AARCH64, AUDIT_I386 = 0xC000003E, 0xC00000B7, 0x40000003
ALLOW, KILL, EPERM = 0x7FFF0000, 0x80000000, 0x00050000 | errno.EPERM
EAFNOSUPPORT = 0x00050000 | errno.EAFNOSUPPORT


def decide(program: bytes, arch: int, nr: int, arg0: int = 0) -> int:
    """Run the classic-BPF program over ``struct seccomp_data`` (the subset of opcodes the filter uses)."""
    data = struct.pack("=iIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)
    code = [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    pc, acc = 0, 0
    while True:
        op, jt, jf, k = code[pc]
        if op == 0x20:  # ld [k]
            acc = struct.unpack_from("=I", data, k)[0]
        elif op == 0x15:  # jeq #k
            pc += jt if acc == k else jf
        elif op == 0x35:  # jge #k
            pc += jt if acc >= k else jf
        elif op == 0x06:  # ret #k
            return k
        else:
            raise AssertionError(f"unexpected opcode {op:#x}")
        pc += 1


@pytest.mark.parametrize("machine, arch, column", [("x86_64", AUDIT_X86_64, 0), ("aarch64", AUDIT_AARCH64, 1)])
def test_the_filter_denies_exactly_the_listed_calls(machine, arch, column):
    program = seccomp_filter(machine)
    denied = {pair[column] for pair in DENIED_SYSCALLS.values()}
    sockets = {pair[column] for pair in SOCKET_CALLS.values()}
    for nr in range(0, 600):
        for arg0 in (0, 1, 40):  # AF_UNSPEC, AF_UNIX, AF_VSOCK as the first argument
            expected = (EPERM if nr in denied else
                        (ALLOW if arg0 == 1 else EAFNOSUPPORT) if nr in sockets else ALLOW)
            assert decide(program, arch, nr, arg0) == expected, (nr, arg0)
    assert decide(program, AUDIT_I386, 0) == KILL  # another ABI of the same machine is killed
    if column == 0:  # x32 system calls are another way in on x86-64
        assert decide(program, arch, 0x40000000 | 101) == EPERM


@pytest.mark.parametrize("machine, arch, column", [("x86_64", AUDIT_X86_64, 0), ("aarch64", AUDIT_AARCH64, 1)])
def test_sockets_only_of_the_families_the_network_namespace_contains(machine, arch, column):
    program = seccomp_filter(machine)
    for call in SOCKET_CALLS.values():
        for family in range(0, 64):
            expected = ALLOW if family in ALLOWED_FAMILIES.values() else EAFNOSUPPORT
            assert decide(program, arch, call[column], family) == expected, (call, family)
        # the kernel reads the family as a 32-bit int: high bits set do not sneak AF_VSOCK through
        assert decide(program, arch, call[column], (1 << 32) | 40) == EAFNOSUPPORT


def test_no_filter_where_the_numbers_are_unknown():
    assert seccomp_filter("riscv64") is None


@pytest.mark.parametrize("header, column", [("/usr/include/x86_64-linux-gnu/asm/unistd_64.h", 0),
                                            ("/usr/include/asm-generic/unistd.h", 1)])
def test_numbers_match_the_kernel_headers(header, column):
    if not Path(header).exists():
        pytest.skip(f"{header} is not installed (linux-libc-dev)")
    numbers = dict(re.findall(r"#define __NR(?:3264)?_(\w+)\s+(\d+)", Path(header).read_text()))
    for name, pair in {**DENIED_SYSCALLS, **SOCKET_CALLS}.items():
        assert int(numbers[name]) == pair[column], name


@pytest.mark.skipif(not sys.platform.startswith("linux") or seccomp_filter() is None,
                    reason=f"no filter for {platform.machine()}")
def test_a_program_meets_the_filter():
    # Each of these works for an unprivileged program without the filter (PTRACE_TRACEME on itself, its own
    # keyring, an io_uring): only the filter refuses them.
    result = run_python("""
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
out = {}
for name, call in [("ptrace", lambda: libc.ptrace(0, 0, None, None)),
                   ("keyctl", lambda: libc.syscall(KEYCTL, 0, -3, 0)),
                   ("io_uring_setup", lambda: libc.syscall(425, 1, ctypes.create_string_buffer(120))),
                   ("memfd_secret", lambda: libc.syscall(447, 0))]:
    ctypes.set_errno(0)
    out[name] = [call(), ctypes.get_errno()]
print(json.dumps(out))
""".replace("KEYCTL", str(DENIED_SYSCALLS["keyctl"][0 if platform.machine() == "x86_64" else 1])))
    assert "seccomp" in result.isolation
    assert json.loads(result.stdout) == {name: [-1, errno.EPERM]
                                         for name in ("ptrace", "keyctl", "io_uring_setup", "memfd_secret")}


@pytest.mark.skipif(not sys.platform.startswith("linux") or seccomp_filter() is None,
                    reason=f"no filter for {platform.machine()}")
def test_vsock_reaches_past_the_network_namespace_so_it_is_refused():
    result = run_python("""
import json, socket
out = {}
for name, family in [("vsock", 40), ("packet", 17), ("unix", 1), ("inet", 2), ("inet6", 10)]:
    try:
        socket.socket(family, socket.SOCK_DGRAM if family != 40 else socket.SOCK_STREAM).close()
        out[name] = "ok"
    except OSError as e:
        out[name] = e.errno
print(json.dumps(out))
""")
    found = json.loads(result.stdout)
    assert found["vsock"] == found["packet"] == errno.EAFNOSUPPORT
    assert found["unix"] == found["inet"] == "ok"
