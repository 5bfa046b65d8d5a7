"""Hostile programs, one class of attack each: every one must be contained and leave the host as it was.

They follow an attack run as root against the earlier, namespace-by-hand sandbox (issue #13): the
caller's files and secrets through /proc, host processes, mount and namespace system calls, sockets,
/dev/shm, cgroup files, daemons, per-process limits, and a machine where namespaces are refused.
"""

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from iclr24.sandbox import run_python

ROOT = os.geteuid() == 0
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")
SANDBOX_SRC = Path(__file__).resolve().parents[2] / "src" / "iclr24" / "sandbox"


def run(code: str, **kwargs):
    return run_python(textwrap.dedent(code), **kwargs)


def report(result) -> dict:
    """The JSON a hostile program printed on its last line."""
    assert result.stdout.strip(), f"the program printed nothing; stderr: {result.stderr[-2000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def host_processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def leftover_cgroups() -> list[Path]:
    """This process's sandbox cgroups (named after the caller's pid; other test workers make their own)."""
    return [p for p in Path("/sys/fs/cgroup").rglob(f"iclr24-sandbox-{os.getpid()}-*") if p.is_dir()] if ROOT else []


def test_the_callers_files_are_out_of_reach_through_proc(tmp_path):
    target = tmp_path / "written-through-proc"
    held = tmp_path / "held-open.txt"
    with open(held, "a") as handle:  # an open file of the caller, as in /proc/<ppid>/fd/N
        result = run(f"""
            import json, os
            hits = []
            for pid in [p for p in os.listdir('/proc') if p.isdigit()]:
                for path in (f'/proc/{{pid}}/root{target}', f'/proc/{{pid}}/cwd/{target.name}',
                             f'/proc/{{pid}}/root{held}'):
                    try:
                        open(path, 'a').write('pwned')
                        hits.append(path)
                    except OSError:
                        pass
                try:
                    fds = os.listdir(f'/proc/{{pid}}/fd')
                except OSError:
                    continue
                for fd in fds:
                    try:  # stdout and stderr are the run's own output files: appending there is harmless
                        if fd not in ('1', '2'):
                            open(f'/proc/{{pid}}/fd/{{fd}}', 'a').write('pwned')
                            hits.append(os.readlink(f'/proc/{{pid}}/fd/{{fd}}'))
                    except OSError:
                        pass
            print(json.dumps({{"pids": sorted(p for p in os.listdir('/proc') if p.isdigit()), "hits": hits}}))
        """)
        handle.write("")
    assert result.ok, result.stderr
    assert not target.exists() and held.read_text() == ""
    # what it could write is its own: /dev/null (its stdin) and its working directory (its cwd, /sandbox)
    inside = [h for h in report(result)["hits"] if h == "/dev/null" or h.startswith("/proc/") and "/cwd/" in h]
    assert inside == report(result)["hits"], report(result)
    assert len(report(result)["pids"]) <= 3  # the reaper, the program, the listing itself


def test_the_callers_secrets_stay_hidden(monkeypatch):
    secret = "sk-test-" + secrets.token_hex(12)
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    result = run("""
        import glob, os
        out = [repr(dict(os.environ))]
        for path in glob.glob('/proc/*/environ') + glob.glob('/proc/*/cmdline') + ['/proc/1/root/proc/1/environ']:
            try:
                out.append(open(path, 'rb').read().decode(errors='replace'))
            except OSError as e:
                out.append(str(e))
        print('\\n'.join(out))
    """)
    assert result.ok and secret not in result.stdout + result.stderr


def test_host_processes_cannot_be_seen_signalled_or_traced():
    victim = subprocess.Popen(["sleep", "300"])
    try:
        result = run(f"""
            import ctypes, json, os, signal
            libc = ctypes.CDLL(None, use_errno=True)
            visible = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
            try:
                os.kill({victim.pid}, signal.SIGTERM)
                direct = 'delivered'
            except OSError as e:
                direct = e.strerror
            for pid in range(2, 1 << 15):
                if pid != os.getpid():
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
            try:
                os.kill(-1, signal.SIGKILL)  # every process it may signal, but itself
            except OSError:
                pass
            traced = libc.ptrace(16, {victim.pid}, None, None)  # PTRACE_ATTACH
            print(json.dumps({{"visible": visible, "direct": direct, "ptrace": traced,
                               "errno": ctypes.get_errno()}}))
        """, timeout_s=30)
        time.sleep(0.2)
        assert victim.poll() is None, "a host process was killed from inside the sandbox"
        assert "TracerPid:\t0" in Path(f"/proc/{victim.pid}/status").read_text()
    finally:
        victim.kill()
        victim.wait()
    found = report(result)
    assert found["visible"] == [1, 2]  # bubblewrap's reaper and the program: a pid namespace of its own
    assert found["ptrace"] == -1 and found["direct"] != "delivered"


def test_killing_its_parent_and_init_leaves_nothing_behind():
    mine = f"iclr24-sandbox-{os.getpid()}-*"  # other test workers make their own
    before = {p.name for p in Path(tempfile.gettempdir()).glob(mine)}
    marker = f"{secrets.randbelow(10**6)}.{secrets.randbelow(10**6)}"
    result = run(f"""
        import os
        for pid in (os.getppid(), 1):
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        os.execv('/bin/sleep', ['sleep', '{marker}'])
    """, timeout_s=2)
    assert result.timed_out and result.duration < 6
    assert host_processes_with(marker) == []
    assert {p.name for p in Path(tempfile.gettempdir()).glob(mine)} == before
    assert leftover_cgroups() == []


def test_a_daemon_does_not_outlive_the_call():
    marker = f"{secrets.randbelow(10**6)}.{secrets.randbelow(10**6)}"
    result = run(f"""
        import os
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv('/bin/sleep', ['sleep', '{marker}'])
            os._exit(0)
        print('detached')
    """)
    assert result.ok and result.stdout == "detached\n" and result.duration < 5
    time.sleep(0.1)
    assert host_processes_with(marker) == []
    assert leftover_cgroups() == []


def test_mount_and_namespace_system_calls_are_refused():
    result = run("""
        import ctypes, glob, json, os
        libc = ctypes.CDLL(None, use_errno=True)
        MS_REMOUNT, MS_BIND = 32, 4096
        calls = {
            "remount /": libc.mount(None, b"/", None, MS_REMOUNT | MS_BIND, None),
            "remount /usr": libc.mount(None, b"/usr", None, MS_REMOUNT | MS_BIND, None),
            "bind over /usr": libc.mount(b"/sandbox", b"/usr", None, MS_BIND, None),
            "mount cgroup": libc.mount(b"cgroup", b"/tmp", b"cgroup2", 0, None),
            "unshare user": libc.unshare(0x10000000),
            "unshare mount": libc.unshare(0x00020000),
            "chroot": libc.chroot(b"/tmp"),
        }
        for path in glob.glob('/proc/*/ns/*'):
            fd = os.open(path, os.O_RDONLY)
            calls["setns " + path] = libc.setns(fd, 0)
            os.close(fd)
        writes = {}
        for path in ('/usr/pwned', '/etc/pwned', '/pwned', '/proc/sys/kernel/hostname', '/proc/sysrq-trigger',
                     '/.sandbox-input/pwned'):
            try:
                open(path, 'w').write('x')
                writes[path] = 'written'
            except OSError as e:
                writes[path] = e.strerror
        print(json.dumps({"calls": calls, "writes": writes}))
    """)
    found = report(result)
    assert all(value == -1 for value in found["calls"].values()), found["calls"]
    assert len(found["calls"]) > 7  # the setns attempts ran
    assert "written" not in found["writes"].values(), found["writes"]


def test_no_network_and_no_host_sockets(tmp_path):
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    unix_path = Path(tempfile.mkdtemp()) / "host.sock"
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(unix_path))
    unix.listen()
    abstract_name = "\0iclr24-test-" + secrets.token_hex(4)
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind(abstract_name)
    abstract.listen()
    try:
        result = run(f"""
            import json, socket
            out = {{}}
            def attempt(name, fn):
                try:
                    fn()
                    out[name] = 'ok'
                except OSError as e:
                    out[name] = e.strerror or str(e)
            attempt('tcp', lambda: socket.create_connection(('127.0.0.1', {tcp.getsockname()[1]}), timeout=2))
            attempt('udp', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(
                b'x', ('127.0.0.1', {udp.getsockname()[1]})))
            attempt('dns', lambda: socket.getaddrinfo('example.com', 80))
            attempt('unix', lambda: socket.socket(socket.AF_UNIX).connect({str(unix_path)!r}))
            attempt('abstract', lambda: socket.socket(socket.AF_UNIX).connect({abstract_name!r}))
            print(json.dumps(out))
        """)
        for server in (tcp, unix, abstract):
            server.setblocking(False)
            with pytest.raises(BlockingIOError):
                server.accept()
        udp.setblocking(False)
        with pytest.raises(BlockingIOError):
            udp.recv(10)
    finally:
        for s in (tcp, udp, unix, abstract):
            s.close()
        shutil.rmtree(unix_path.parent)
    found = report(result)
    # a datagram "sent" goes to the sandbox's own loopback: the host server above received nothing
    assert [k for k, v in found.items() if v == "ok"] in ([], ["udp"]), found


def test_writes_to_shared_memory_dev_and_tmp_vanish_with_the_run():
    token = secrets.token_hex(6)
    paths = [f"/dev/shm/iclr24-{token}", f"/dev/iclr24-{token}", f"/tmp/iclr24-{token}", f"/var/tmp/iclr24-{token}"]
    result = run(f"""
        for path in {paths!r}:
            try:
                open(path, 'w').write('x')
            except OSError:
                pass
    """)
    assert result.ok
    assert [p for p in paths if os.path.exists(p)] == []


def test_the_disk_cannot_be_filled_through_the_working_directory():
    # Many files, each under the file-size limit. The working directory is a tmpfs bounded in size
    # (and charged to the run's memory cgroup, which may end the run first), not the host's disk.
    result = run("""
        for n in range(1000):
            open(f'f{n}', 'wb').write(b'x' * (4 << 20))
            print(n + 1, flush=True)
    """, memory_mb=256, max_file_mb=8, timeout_s=30)
    written = int(result.stdout.split()[-1]) if result.stdout.strip() else 0
    assert not result.ok and written * 4 <= 256, (written, result.stderr[-300:])
    assert "No space left on device" in result.stderr or result.oom_killed or result.exit_code == 137


def test_cgroups_are_out_of_sight_and_out_of_reach():
    result = run("""
        import json, os
        lines = open('/proc/self/cgroup').read().split()
        print(json.dumps({"sys": os.path.exists('/sys'), "paths": sorted({line.split(':', 2)[2] for line in lines})}))
    """)
    found = report(result)
    assert found == {"sys": False, "paths": ["/"]}


FORKS = textwrap.dedent("""
    import os, time
    forks = 0
    try:
        for _ in range(40):
            if os.fork() == 0:
                time.sleep(3)
                os._exit(0)
            forks += 1
    except OSError:
        pass
    print(forks)
""")


def test_process_count_is_bounded_for_the_whole_run():
    result = run_python(FORKS, max_processes=8, timeout_s=10)
    assert result.ok and 5 <= int(result.stdout) <= 7  # 8 processes at once, the program included


def test_fork_bomb_is_contained_and_cleaned_up():
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    result = run_python(code, timeout_s=2, max_processes=16)
    assert result.timed_out and result.duration < 6
    assert leftover_cgroups() == []
    assert subprocess.run(["true"]).returncode == 0  # the host can still start processes


@pytest.mark.skipif(not ROOT, reason="whole-run memory needs a cgroup, which the sandbox makes as root")
def test_memory_is_bounded_for_the_whole_run_not_per_process():
    if "cgroup(memory" not in run_python("pass").isolation:
        pytest.skip("this host offers no memory cgroup")
    result = run("""
        import os, time
        children = []
        for _ in range(4):
            pid = os.fork()
            if pid == 0:
                block = b'\\1' * (300 << 20)  # touched, so it is really resident
                time.sleep(2)  # so that survivors would hold their memory at the same time
                os._exit(0)
            children.append(pid)
        # a child the memory limit killed ends with SIGKILL; the survivors held 300 MB each, together
        print(sum(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0 for pid in children))
    """, memory_mb=512, timeout_s=15)
    assert int(result.stdout) <= 1 and result.oom_killed, result  # 4 x 300 MB > 512 MB for the run


def test_a_sandboxed_program_cannot_start_a_sandbox_of_its_own():
    # Nested bubblewrap needs a user namespace, which the sandbox forbids: the same refusal a host
    # without namespaces gives. The sandbox code, run inside, must then refuse to run (not run unisolated).
    files = {f"iclr24/sandbox/{p.name}": p.read_text() for p in SANDBOX_SRC.glob("*.py")}
    files["iclr24/__init__.py"] = ""
    result = run("""
        import json
        from iclr24.sandbox import SandboxUnavailable, run_python
        try:
            inner = run_python("print('inner ran')")
            out = {"strong": inner.isolation}
        except SandboxUnavailable as e:
            out = {"strong": "refused: " + str(e)}
        out["weak"] = run_python("print('inner ran')", isolation="weak").isolation
        print(json.dumps(out))
    """, files=files, timeout_s=30)
    found = report(result)
    assert found["strong"].startswith("refused: bubblewrap could not set up the sandbox"), found
    assert found["weak"] == "weak(rlimits,audit-hook)"


@pytest.mark.skipif(not ROOT or shutil.which("unshare") is None, reason="makes an unprivileged caller as root")
def test_an_unprivileged_caller_gets_the_same_isolation(tmp_path):
    """As uid 65534 (nobody): strong isolation, its own process count, no secrets."""
    from iclr24.sandbox.bwrap import python_paths

    public = Path(tempfile.mkdtemp())
    try:
        public.chmod(0o755)
        package = public / "iclr24" / "sandbox"
        package.mkdir(parents=True)
        (public / "iclr24" / "__init__.py").write_text("")
        for p in SANDBOX_SRC.glob("*.py"):
            shutil.copy(p, package / p.name)
        (public / "forks.py").write_text(FORKS)
        (public / "check.py").write_text(textwrap.dedent("""
            import json, subprocess, sys
            sys.path.insert(0, sys.argv[1])
            from iclr24.sandbox import run_python
            FORKS = open(sys.argv[1] + '/forks.py').read()
            sleepers = [subprocess.Popen(['sleep', '30']) for _ in range(24)]  # the user's own processes
            forks = run_python(FORKS, max_processes=8, timeout_s=10)
            who = run_python("import os\\nprint(os.getuid(), open('/proc/1/environ').read())")
            for s in sleepers:
                s.kill()
            print(json.dumps({"uid": __import__('os').getuid(), "forks": forks.stdout.strip(),
                              "isolation": forks.isolation, "who": who.stdout.strip()}))
        """))
        # Expose the interpreter to nobody: a private mount namespace where the folders it lives
        # under (e.g. /root, mode 0700) are replaced by open ones holding just the interpreter.
        steps, hidden = ["set -e"], []
        for i, path in enumerate(python_paths()):
            stage = public / f"stage{i}"
            stage.mkdir()
            steps.append(f"mount --bind '{path}' '{stage}'")
            closed = next((str(a) for a in reversed(Path(path).parents) if not os.stat(a).st_mode & 0o001), None)
            if closed and closed not in hidden:
                hidden.append(closed)
                steps.append(f"mount -t tmpfs -o mode=755 tmpfs '{closed}'")
            steps += [f"mkdir -p '{path}'", f"mount --bind '{stage}' '{path}'"]
        steps.append('exec setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"')
        out = subprocess.run(["unshare", "--mount", "--", "sh", "-c", "\n".join(steps), "sh", sys.executable,
                              str(public / "check.py"), str(public)],
                             capture_output=True, text=True, timeout=120, env={"PATH": os.environ["PATH"],
                                                                                "SECRET_TOKEN": "hunter2"})
    finally:
        shutil.rmtree(public, ignore_errors=True)
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["uid"] == 65534
    assert found["isolation"].startswith("bwrap+seccomp") and "uid" not in found["isolation"]
    assert 5 <= int(found["forks"]) <= 7  # counted per run, though nobody already runs 24 processes
    assert found["who"].startswith("1000 ") and "hunter2" not in found["who"]


def test_seen_from_the_host_the_program_is_unprivileged():
    import threading

    marker = f"{secrets.randbelow(10**6)}.{secrets.randbelow(10**6)}"
    done = []
    thread = threading.Thread(target=lambda: done.append(
        run_python(f"import os\nos.execv('/bin/sleep', ['sleep', '{marker}'])", timeout_s=4)))
    thread.start()
    pids = []
    for _ in range(300):
        if pids := host_processes_with(marker):
            break
        time.sleep(0.01)
    status = dict(line.split(":\t", 1) for line in Path(f"/proc/{pids[0]}/status").read_text().splitlines()
                  if ":\t" in line) if pids else {}
    thread.join()
    assert pids, "the sandboxed process was never seen"
    uids = {int(u) for u in status["Uid"].split()}
    assert (0 not in uids) if ROOT else (uids == {os.getuid()})  # as root: a fresh id; else the caller's own
    assert int(status["CapEff"], 16) == 0 and int(status["NoNewPrivs"]) == 1
    assert int(status["Seccomp"]) == 2  # a filter is loaded


@pytest.mark.skipif(not ROOT, reason="whole-run memory needs a cgroup, which the sandbox makes as root")
def test_socket_buffers_count_against_the_memory_limit():
    # Loopback TCP buffers are kernel memory outside the process; cgroup v1 charges them only when
    # memory.kmem.tcp is limited too. 60 connections could queue about 220 MB here otherwise.
    if "cgroup(memory" not in run_python("pass").isolation:
        pytest.skip("this host offers no memory cgroup")
    result = run("""
        import socket
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(100)
        total, held = 0, []
        for _ in range(60):
            client = socket.create_connection(server.getsockname())
            peer, _ = server.accept()
            client.setblocking(False)
            held += [client, peer]
            try:
                while True:
                    total += client.send(b"x" * (1 << 20))
            except OSError:
                pass
            print(total >> 20, flush=True)
    """, memory_mb=128, timeout_s=30)
    queued_mb = int(result.stdout.split()[-1])
    assert queued_mb <= 128, f"{queued_mb} MB of socket buffers with memory_mb=128"


def test_output_cannot_be_grown_on_the_hosts_disk():
    # fallocate on a host file ignores RLIMIT_FSIZE: output therefore goes through pipes
    result = run("""
        import ctypes, os, sys
        libc = ctypes.CDLL(None, use_errno=True)
        libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
        grown = [libc.fallocate(fd, 1, 0, 2 << 30) for fd in (1, 2)]  # FALLOC_FL_KEEP_SIZE, 2 GB each
        print(grown, os.path.realpath('/proc/self/fd/1').startswith('pipe:') or os.readlink('/proc/self/fd/1'))
    """)
    assert result.ok and result.stdout.startswith("[-1, -1] ")
    assert "pipe:" in result.stdout
