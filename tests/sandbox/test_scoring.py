"""Scoring generated code from a report it cannot write: every known forgery scores as a failure."""

import pytest

from iclr24.sandbox import score_check, score_pytest

BROKEN = "def add(a, b):\n    return a - b\n"  # fails test_add, passes test_zero
FIXED = "def add(a, b):\n    return a + b\n"
TESTS = {"test_hidden.py": "from app import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n\n\n"
                           "def test_zero():\n    assert add(0, 0) == 0\n"}
HONEST = {"test_hidden.py::test_add": "failed", "test_hidden.py::test_zero": "passed"}
CONFTEST_FORGERY = ("import pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
                    "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n")


def test_honest_programs_score_what_they_pass():
    assert score_pytest({"app.py": BROKEN}, TESTS).outcomes == HONEST
    fixed = score_pytest({"app.py": FIXED}, TESTS)
    assert (fixed.passed, fixed.total, fixed.rejected) == (2, 2, "")


@pytest.mark.parametrize("forgery", [
    {"pytest.py": "print('2 passed')\nraise SystemExit(0)\n"},                   # shadows the real pytest
    {"conftest.py": CONFTEST_FORGERY},                                           # a hook that reports passes
    {"pytest.ini": "[pytest]\naddopts = -p no:python\n"},                        # config that collects nothing
    {"pyproject.toml": "[tool.pytest.ini_options]\naddopts = '--co'\n"},
    {"setup.cfg": "[tool:pytest]\naddopts = --co\n"},
    {"report.xml": '<testsuite tests="2" failures="0"><testcase name="test_add"/></testsuite>'},  # a fake junit
    {"print_passed.py": "print('2 passed')\n", "app.py": BROKEN + "import print_passed\n"},  # stdout is not read
])
def test_forgeries_leave_the_honest_score(forgery):
    report = score_pytest({"app.py": BROKEN, **forgery}, TESTS)
    assert report.outcomes == HONEST, report


@pytest.mark.parametrize("tail", ["import os\nos._exit(0)\n", "import sys\nsys.exit(0)\n",
                                  "import atexit, os\natexit.register(lambda: os._exit(0))\nraise SystemExit(0)\n"])
def test_exiting_early_scores_every_test_failed(tail):
    report = score_pytest({"app.py": BROKEN + tail}, TESTS)
    assert report.passed == 0 and report.total == 2


def test_a_test_module_that_exits_scores_its_tests_failed():
    tests = {"test_hidden.py": "import sys\nsys.exit(0)\n\ndef test_x():\n    assert False\n"}
    assert score_pytest({"app.py": FIXED}, tests).outcomes == {"test_hidden.py::test_x": "missing"}


def test_a_second_report_on_the_pipe_rejects_the_run():
    writer = ("import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'{\"nonce\": \"forged\"}')\n"
              "    except OSError:\n        pass\n")
    report = score_pytest({"app.py": FIXED + writer}, TESTS)
    assert report.passed == 0 and report.rejected


def test_a_patched_unittest_is_caught():
    tests = {"test_hidden.py": "import unittest\nfrom app import add\n\nclass T(unittest.TestCase):\n"
                               "    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n\n"
                               "def test_add():\n    assert add(1, 2) == 3\n"}
    patch = "import unittest\nunittest.TestCase.run = lambda self, result=None: None\n"
    report = score_pytest({"app.py": FIXED + patch}, tests)
    assert report.passed == 0 and "unittest.TestCase.run" in report.rejected


def test_humaneval_style_check_passes_only_when_check_returns():
    check = "\n\ndef check(candidate):\n    assert candidate(2) == 4\n\ncheck(double)\n"
    assert score_check("def double(x):\n    return 2 * x\n" + check).passed
    assert not score_check("def double(x):\n    return x\n" + check).passed
    for early in ("import os\nos._exit(0)\n", "import sys\nsys.exit(0)\n", "raise SystemExit(0)\n"):
        result = score_check(early + "def double(x):\n    return x\n" + check)
        assert not result.passed, early
    assert "AssertionError" in score_check("def double(x):\n    return x\n" + check).reason


def test_weak_isolation_scores_the_same(monkeypatch):
    from iclr24.sandbox import WeakIsolationWarning

    with pytest.warns(WeakIsolationWarning):
        assert score_pytest({"app.py": BROKEN, "conftest.py": CONFTEST_FORGERY}, TESTS,
                            isolation="weak").outcomes == HONEST
        assert not score_check("import os\nos._exit(0)\n", isolation="weak").passed


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="at least one test file"):
        score_pytest({"app.py": FIXED}, {})
    with pytest.raises(TypeError, match="program must be a str"):
        score_check(b"print(1)")
