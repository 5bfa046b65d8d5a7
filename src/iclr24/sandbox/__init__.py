"""Run untrusted code (programs a language model wrote): ``run_python`` and ``run_pytest``.

    from iclr24.sandbox import run_python
    result = run_python("print(2 + 2)", timeout_s=5)
    result.stdout, result.exit_code, result.timed_out, result.isolation

Rule of the house: code that a model generated runs only through this package. It runs
under bubblewrap (user, pid, network, mount namespaces; seccomp; whole-run cgroup limits) and
refuses to run with less unless asked (``isolation="weak"``). Generated code is scored with
``score_pytest`` / ``score_check``, from a report it cannot write (never its output).
docs/sandbox.md: the threat model.
"""

from iclr24.sandbox.runner import (
    ExecResult,
    SandboxUnavailable,
    WeakIsolationWarning,
    probe_isolation,
    requested_isolation,
    run_pytest,
    run_python,
)
from iclr24.sandbox.scoring import CheckResult, TestReport, score_check, score_pytest

__all__ = ["CheckResult", "ExecResult", "SandboxUnavailable", "TestReport", "WeakIsolationWarning", "probe_isolation",
           "requested_isolation", "run_pytest", "run_python", "score_check", "score_pytest"]
