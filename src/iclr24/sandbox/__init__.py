"""Run untrusted code (programs a language model wrote): ``run_python`` and ``run_pytest``.

    from iclr24.sandbox import run_python
    result = run_python("print(2 + 2)", timeout_s=5)
    result.stdout, result.exit_code, result.timed_out, result.isolation

Rule of the house: code that a model generated runs only through this package. It runs
under bubblewrap (user, pid, network, mount namespaces; seccomp; whole-run cgroup limits) and
refuses to run with less unless asked (``isolation="weak"``). docs/sandbox.md: the threat model.
"""

from iclr24.sandbox.runner import ExecResult, SandboxUnavailable, probe_isolation, run_pytest, run_python

__all__ = ["ExecResult", "SandboxUnavailable", "probe_isolation", "run_pytest", "run_python"]
