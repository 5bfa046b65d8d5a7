"""Scoring generated code from a report it cannot write: ``score_pytest`` and ``score_check``.

A program that is being scored must not be able to score itself. So the scorer never reads the program's
standard output (it could print ``2 passed``), never runs a ``pytest`` or ``conftest.py`` the program wrote, and
never takes an exit status of 0 as a pass (``os._exit(0)`` before the tests ran gives one). Instead:

1. A harness (the source below) runs in the sandbox from a read-only folder outside the program's tree, as
   ``python -I``: neither the program's folder nor ``$PYTHON*`` is on its path, so a generated ``pytest.py``
   shadows nothing. pytest runs with ``--noconftest -c /dev/null`` (the program's ``conftest.py``,
   ``pytest.ini``, ``pyproject.toml`` and ``setup.cfg`` are ignored) and no plugin autoloading.
2. The harness reads a per-call nonce from standard input before any program code runs (so it is on no file,
   argument or environment variable the program could read), and writes one JSON report, with the nonce, to a
   pipe the host owns (``$ICLR24_REPORT_FD``), only after the tests or ``check()`` returned; then it exits at
   once, before the program's ``atexit`` handlers. If the program replaced anything of ``unittest.TestCase`` or
   the builtins (a ``run`` that never fails, an ``AssertionError`` that is never raised), the report says so.
3. The host accepts exactly one report with its nonce; anything else (no report, two, a wrong nonce, a
   malformed one) scores every test as failed and says why. Tests the report does not list count as failed.

What this does not stop: code that targets this harness by name from inside the same process (reading the
nonce out of the harness's frames and writing a report itself). The tests and the candidate share a process,
as in HumanEval's and pytest's own designs; docs/sandbox.md says so.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

from iclr24.sandbox.bwrap import SANDBOX_DIR
from iclr24.sandbox.runner import ExecResult, Isolation, _check_files, _run

__all__ = ["CheckResult", "TestReport", "score_check", "score_pytest"]

_REPORT_BYTES = 1 << 20  # a report past this is not one the harness wrote

HARNESS_SOURCE = r'''
"""iclr24's scoring harness (runs inside the sandbox, from a read-only folder, as python -I)."""
import json, os, sys


def _pytest(header):
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    import pytest

    outcomes = {}

    class Recorder:
        def pytest_runtest_logreport(self, report):
            if report.when == "call":
                outcomes[report.nodeid] = report.outcome
            elif report.failed:  # an error in setup or teardown
                outcomes[report.nodeid] = "error"
            elif report.skipped and report.when == "setup":
                outcomes[report.nodeid] = "skipped"

    status = pytest.main(["-q", "-p", "no:cacheprovider", "--noconftest", "-c", os.devnull,
                          "--rootdir", header["workdir"], "--continue-on-collection-errors", *header["tests"]],
                         plugins=[Recorder()])
    return {"outcomes": dict(outcomes), "exit_status": int(status)}


def _check(header):
    sys.path.append(header["workdir"])  # last: a generated json.py shadows nothing
    namespace = {"__name__": "__candidate__"}
    with open(os.path.join(header["workdir"], header["program"]), encoding="utf-8") as f:
        source = f.read()
    try:
        exec(compile(source, header["program"], "exec"), namespace)
    except BaseException as err:  # SystemExit included: exiting is not passing
        return {"passed": False, "error": (type(err).__name__ + ": " + str(err))[:500]}
    return {"passed": True}


def _snapshot():
    """What a program could patch to make failing tests pass: unittest's TestCase and the builtins."""
    import builtins, unittest

    return {**{"unittest.TestCase." + k: id(v) for k, v in vars(unittest.TestCase).items()},
            **{"builtins." + k: id(v) for k, v in vars(builtins).items() if not k.startswith("_")}}


def _main():
    header = json.loads(sys.stdin.readline())
    sys.stdin.close()
    fd = int(os.environ.pop("ICLR24_REPORT_FD"))
    os.chdir(header["workdir"])
    before = _snapshot()
    outcome = _pytest(header) if header["mode"] == "pytest" else _check(header)
    after = _snapshot()
    patched = sorted(k for k in before if after.get(k) != before[k])
    if patched:
        outcome = {"patched": patched[:20]}
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os.write(fd, json.dumps({"nonce": header["nonce"], **outcome}).encode())
    os.close(fd)
    os._exit(0)  # before any atexit handler the program registered


_main()
'''


@dataclass(frozen=True)
class TestReport:
    """Per-test outcomes read from the harness's report.

    Attributes
    ----------
    outcomes : dict of str to str
        Test id (``path::name``) to ``"passed"``, ``"failed"``, ``"error"``, ``"skipped"`` or ``"missing"``
        (expected, but not in the report).
    result : ExecResult
        How the run ended (its output is for reading, never for scoring).
    rejected : str
        Why the report was not accepted ("" when it was); a rejected report scores every test as failed.
    """

    outcomes: dict[str, str]
    result: ExecResult
    rejected: str = ""

    @property
    def passed(self) -> int:
        return sum(outcome == "passed" for outcome in self.outcomes.values())

    @property
    def total(self) -> int:
        return len(self.outcomes)


@dataclass(frozen=True)
class CheckResult:
    """Whether a program ran its check to the end: ``passed`` only with the harness's own report."""

    passed: bool
    result: ExecResult
    reason: str = ""
    details: dict = field(default_factory=dict)


def score_pytest(files: Mapping[str, str | bytes], tests: Mapping[str, str], *, timeout_s: float = 60.0,
                 memory_mb: int = 1024, isolation: Isolation | None = None) -> TestReport:
    """Run the hidden ``tests`` (path to source; they overwrite same-named files) against ``files`` with the real
    pytest in the sandbox, and read each test's outcome from the harness's report.

    The expected tests are the top-level ``def test_*`` functions of ``tests``; any the report lacks are
    ``"missing"`` (failed).
    """
    tests = _check_files(tests)
    if not tests:
        raise ValueError("tests must hold at least one test file")
    expected = {f"{path}::{name}" for path, text in tests.items()
                for name in re.findall(r"^def (test_\w*)", text if isinstance(text, str) else text.decode(),
                                       flags=re.MULTILINE)}
    store = {**{p: t for p, t in _check_files(files).items() if p not in tests}, **tests}
    header = {"mode": "pytest", "tests": sorted(tests)}
    report, result, rejected = _run_harness(header, store, timeout_s, memory_mb, isolation)
    recorded = report.get("outcomes", {}) if not rejected else {}
    if not rejected and not isinstance(recorded, dict):
        recorded, rejected = {}, "the report's outcomes are not a mapping"
    outcomes = {test: (recorded.get(test) if recorded.get(test) in ("passed", "failed", "error", "skipped")
                       else "missing") if not rejected else "failed" for test in sorted(expected)}
    return TestReport(outcomes, result, rejected)


def score_check(program: str, *, timeout_s: float = 10.0, memory_mb: int = 1024,
                isolation: Isolation | None = None) -> CheckResult:
    """Run ``program`` (a candidate followed by its check, e.g. HumanEval's ``check(entry_point)``) in the
    sandbox: passed only when the harness reports, with this call's nonce, that it ran to the end without
    raising (``SystemExit`` and ``os._exit`` included)."""
    if not isinstance(program, str):
        raise TypeError(f"program must be a str, got {type(program).__name__}")
    name = "candidate_check.py"
    report, result, rejected = _run_harness({"mode": "check", "program": name}, {name: program}, timeout_s,
                                            memory_mb, isolation)
    if rejected:
        return CheckResult(False, result, rejected)
    passed = report.get("passed") is True
    return CheckResult(passed, result, "" if passed else str(report.get("error", "the check raised")), report)


def _run_harness(header: dict, files: dict, timeout_s: float, memory_mb: int,
                 isolation: Isolation | None) -> tuple[dict, ExecResult, str]:
    nonce = secrets.token_hex(16)
    line = json.dumps({**header, "nonce": nonce, "workdir": _workdir(isolation)}) + "\n"
    result, raw = _run(("script", "harness"), (), files, timeout_s=timeout_s, memory_mb=memory_mb,
                       max_processes=16, max_file_mb=16, max_output_bytes=100_000, isolation=isolation,
                       harness=HARNESS_SOURCE, stdin_data=line.encode(), report_keep_bytes=_REPORT_BYTES)
    if result.timed_out:
        return {}, result, "the run reached its time limit before the harness reported"
    if not raw:
        return {}, result, "no report: the run ended before the harness wrote one"
    if len(raw) >= _REPORT_BYTES:
        return {}, result, "the report is larger than the harness writes"
    try:
        report = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {}, result, "the report is not one JSON document (something else wrote to the report pipe)"
    if not isinstance(report, dict) or report.get("nonce") != nonce:
        return {}, result, "the report does not carry this run's nonce"
    if report.get("patched"):
        return {}, result, f"the program patched the test machinery: {', '.join(map(str, report['patched']))}"
    return report, result, ""


def _workdir(isolation: Isolation | None) -> str:
    """Where the program's files are, as the harness sees them: /sandbox, or (weak isolation) its cwd."""
    from iclr24.sandbox.runner import _resolve_isolation

    return SANDBOX_DIR if _resolve_isolation(isolation) == "strong" else "."
