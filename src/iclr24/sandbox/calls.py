"""Differential scoring: generated code runs on the test's inputs in the sandbox, and only its outputs come back.

A test that runs in the candidate's process can be reached by the candidate: it can replace the test module,
wrap ``check`` with a decorator, patch the builtins, or read the expected values from the test file (21 such
forgeries scored as passes in a review). EvalPlus's answer is differential testing, and this module is ours:

1. The trusted process decides the inputs: a *call script* of :class:`Call` and :class:`Get` steps (call
   ``calc.add(2, 3)``, construct ``bank.Account()`` and save it as ``acct``, call ``acct.deposit(5)``, read
   ``acct.balance``).
2. A small driver runs the script in the sandbox against the generated files (or program) and returns each
   step's outcome as **plain data**: JSON numbers, strings, lists, dicts, tuples and sets, encoded with tags
   (:func:`encode_plain`). An exception is an outcome too (its type's name), and so is an object that is not
   plain data (its type's name, never the object).
3. The expected outcomes and the comparison live only in the trusted process (:func:`same_outcome`); the
   script, the test files and the expected values never enter the sandbox.

The host decodes the report strictly (:func:`decode_plain`): anything but the tagged plain shapes rejects the
report, so no object with methods (an ``__eq__`` that always returns True) reaches a comparison. The driver
shares a process with the candidate, so the candidate can choose what the report says; it can never learn what
the report should say.
"""

from __future__ import annotations

import json
import math
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from iclr24.sandbox.runner import ExecResult, Isolation, _check_files, _run

__all__ = ["Call", "CallsReport", "Expect", "Get", "Let", "Outcome", "RecordedCall", "Ref", "decode_plain",
           "encode_plain", "record_check", "replay_check", "run_calls", "same_outcome"]

#: A report past this size is refused (every step then fails).
REPORT_BYTES = 8 << 20
#: Nesting deeper than this is not plain data we compare.
MAX_DEPTH = 64

# The driver's encode/decode mirror encode_plain/decode_plain below: it runs inside the sandbox, where iclr24 itself
# is hidden (bwrap.HIDDEN_PACKAGES), so it cannot import them. tests/sandbox/test_calls.py round-trips both.
DRIVER_SOURCE = r'''
"""iclr24's call driver (runs inside the sandbox, from a read-only folder, as python -I)."""
import importlib, json, math, os, sys

MAX_DEPTH = 64


class Unplain(Exception):
    pass


def encode(value, depth=0):
    if depth > MAX_DEPTH:
        raise Unplain("nested deeper than %d" % MAX_DEPTH)
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is str:
        return value
    if kind is float:
        return value if math.isfinite(value) else {"$float": repr(value)}
    if kind is list:
        return [encode(v, depth + 1) for v in value]
    if kind is tuple:
        return {"$tuple": [encode(v, depth + 1) for v in value]}
    if kind is dict:
        return {"$dict": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if kind is set or kind is frozenset:
        return {"$" + kind.__name__: [encode(v, depth + 1) for v in value]}
    raise Unplain(kind.__name__)


def decode(data, names):
    if isinstance(data, list):
        return [decode(v, names) for v in data]
    if isinstance(data, dict):
        (tag, body), = data.items()
        if tag == "$ref":
            return names[body]
        if tag == "$tuple":
            return tuple(decode(v, names) for v in body)
        if tag == "$dict":
            return {decode(k, names): decode(v, names) for k, v in body}
        if tag == "$set":
            return {decode(v, names) for v in body}
        if tag == "$frozenset":
            return frozenset(decode(v, names) for v in body)
        if tag == "$float":
            return float(body)
    return data


def resolve(path, names):
    head, *rest = path.split(".")
    if head in names:
        value = names[head]
    else:
        value = importlib.import_module(head)
    dotted = head
    for part in rest:
        dotted += "." + part
        try:
            value = getattr(value, part)
        except AttributeError:
            if type(value).__name__ != "module":
                raise
            value = importlib.import_module(dotted)
    return value


def run_steps(header):
    names = {}
    if header.get("program") is not None:
        namespace = {"__name__": "__candidate__"}
        try:
            with open(header["program"], encoding="utf-8") as f:
                exec(compile(f.read(), header["program"], "exec"), namespace)
        except BaseException as err:
            message = "program: " + type(err).__name__ + ": " + str(err)[:300]
            return [{"error": message} for _ in header["steps"]]
        names = namespace
    outcomes = []
    for step in header["steps"]:
        try:
            if step["op"] == "let":
                value = decode(step["value"], names)
            else:
                target = resolve(step["target"], names)
            if step["op"] == "call":
                kwargs = {k: decode(v, names) for k, v in step["kwargs"].items()}
                value = target(*decode(step["args"], names), **kwargs)
            elif step["op"] == "get":
                value = target
                for key in decode(step["keys"], names):
                    value = value[key]
            if step.get("save"):
                names[step["save"]] = value
            try:
                outcomes.append({"value": encode(value)})
            except Unplain as err:
                outcomes.append({"object": str(err)[:200]})
        except BaseException as err:  # SystemExit and KeyboardInterrupt included: not an answer
            outcomes.append({"error": type(err).__name__ + ": " + str(err)[:300]})
    return outcomes


def _main():
    header = json.loads(sys.stdin.readline())
    sys.stdin.close()
    fd = int(os.environ.pop("ICLR24_REPORT_FD"))
    os.chdir(header["workdir"])
    sys.path.append(header["workdir"])  # last: a generated json.py shadows nothing
    sys.setrecursionlimit(10000)
    outcomes = run_steps(header)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    report = json.dumps({"nonce": header["nonce"], "outcomes": outcomes}).encode()
    view = memoryview(report)
    while view:
        view = view[os.write(fd, view):]
    os.close(fd)
    os._exit(0)  # before any atexit handler the program registered


_main()
'''


@dataclass(frozen=True)
class Call:
    """Call ``target`` (a dotted name: a module of the generated files, a name the program defines, or a name an
    earlier step saved) with ``args`` and ``kwargs`` (plain data); ``save`` keeps the result under that name."""

    target: str
    args: tuple = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    save: str = ""

    def to_step(self) -> dict[str, Any]:
        _check_target(self.target)
        if not isinstance(self.kwargs, Mapping) or not all(isinstance(k, str) for k in self.kwargs):
            raise TypeError(f"Call.kwargs must map names to values, got {self.kwargs!r}")
        return {"op": "call", "target": self.target, "args": encode_plain(list(self.args)),
                "kwargs": {k: encode_plain(v) for k, v in self.kwargs.items()}, "save": _check_save(self.save)}


@dataclass(frozen=True)
class Get:
    """Read ``target`` (a dotted name, as for :class:`Call`), then index it by each of ``keys`` in turn
    (``Get("stock", ("a",))`` reads ``stock["a"]``); ``save`` keeps the result under that name."""

    target: str
    keys: tuple = ()
    save: str = ""

    def to_step(self) -> dict[str, Any]:
        _check_target(self.target)
        return {"op": "get", "target": self.target, "keys": encode_plain(list(self.keys)),
                "save": _check_save(self.save)}


@dataclass(frozen=True)
class Let:
    """Make a value (plain data) in the sandbox and keep it under ``save``: state the script's later steps pass
    by :class:`Ref` and read back with :class:`Get` (e.g. a dict a function changes in place)."""

    save: str
    value: Any

    def to_step(self) -> dict[str, Any]:
        if not _check_save(self.save):
            raise ValueError("a Let step needs a name to save its value under")
        return {"op": "let", "value": encode_plain(self.value), "save": self.save}


@dataclass(frozen=True)
class Ref:
    """An argument that is the value an earlier step saved under ``name`` (the same object, not a copy)."""

    name: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"Ref needs an identifier, got {self.name!r}")


@dataclass(frozen=True)
class Expect:
    """What a step must give, decided in the trusted process: ``Expect.value(v)`` (equal plain data, floats
    within a tolerance), ``Expect.raises("ValueError")`` (an exception of that type), ``Expect.truth(True)``
    (a value whose truth is that, as ``assert f(x)`` reads it), or ``Expect.ok()`` (any answer but an
    exception)."""

    kind: str
    value: Any = None

    @classmethod
    def equal(cls, value: Any) -> Expect:
        encode_plain(value)  # refuses what is not plain data
        return cls("value", value)

    @classmethod
    def raises(cls, error_type: str) -> Expect:
        return cls("raises", error_type)

    @classmethod
    def truth(cls, truth: bool) -> Expect:
        return cls("truth", bool(truth))

    @classmethod
    def ok(cls) -> Expect:
        return cls("ok")

    def met_by(self, outcome: Outcome, *, rel_tol: float = 1e-9, abs_tol: float = 1e-9) -> bool:
        if self.kind == "raises":
            return outcome.kind == "error" and outcome.error_type == self.value
        if outcome.kind == "error":
            return False
        if self.kind == "ok":
            return True
        if outcome.kind != "value":  # an object is neither equal to plain data nor read for its truth
            return False
        if self.kind == "truth":
            return type(outcome.value) in (bool, int, float, str, list, tuple, dict, set, frozenset, type(None)) \
                and bool(outcome.value) is self.value
        return _same_value(self.value, outcome.value, rel_tol, abs_tol)


@dataclass(frozen=True)
class Outcome:
    """What one step gave: ``kind`` is ``"value"`` (``value`` is plain data), ``"error"`` (``error`` names the
    exception's type, then its message) or ``"object"`` (a value that is not plain data; ``error`` names its
    type)."""

    kind: str
    value: Any = None
    error: str = ""

    @property
    def error_type(self) -> str:
        return self.error.split(":", 1)[0] if self.kind == "error" else ""


@dataclass(frozen=True)
class CallsReport:
    """Each step's outcome, in order; ``rejected`` says why the driver's report was refused (then every step is
    an error)."""

    outcomes: tuple[Outcome, ...]
    result: ExecResult
    rejected: str = ""


def run_calls(steps: Sequence[Call | Get], *, files: Mapping[str, str | bytes] | None = None,
              program: str | None = None, timeout_s: float = 30.0, memory_mb: int = 1024,
              isolation: Isolation | None = None) -> CallsReport:
    """Run a call script against generated ``files`` (a codebase: targets name its modules) or a ``program``
    (one source: targets name what it defines) in the sandbox; each step's outcome as plain data.

    Examples
    --------
    >>> report = run_calls([Call("add", (2, 3))], program="def add(a, b):\\n    return a + b\\n")  # doctest: +SKIP
    >>> report.outcomes[0].value  # doctest: +SKIP
    5
    """
    from iclr24.sandbox.scoring import _workdir

    if (files is None) == (program is None):
        raise ValueError("run_calls takes files (a codebase) or program (one source), exactly one")
    if isinstance(steps, (str, bytes, Mapping)) or not all(isinstance(s, (Call, Get, Let)) for s in steps):
        raise TypeError(f"steps must be a sequence of Call, Get and Let, got {steps!r}")
    script = [s.to_step() for s in steps]
    if program is not None:
        if not isinstance(program, str):
            raise TypeError(f"program must be a str, got {type(program).__name__}")
        store = {"candidate_program.py": _encodable("program", program)}
    else:
        store = _check_files(files)
    nonce = secrets.token_hex(16)
    header = {"nonce": nonce, "workdir": _workdir(isolation), "steps": script,
              "program": "candidate_program.py" if program is not None else None}
    result, raw = _run(("script", "harness"), (), store, timeout_s=timeout_s, memory_mb=memory_mb, max_processes=16,
                       max_file_mb=16, max_output_bytes=100_000, isolation=isolation, harness=DRIVER_SOURCE,
                       stdin_data=(json.dumps(header) + "\n").encode(), report_keep_bytes=REPORT_BYTES)
    rejected = _reject(raw, result, nonce, len(script))
    if rejected:
        return CallsReport(tuple(Outcome("error", error=f"rejected: {rejected}") for _ in script), result, rejected)
    outcomes = json.loads(raw.decode("utf-8"))["outcomes"]
    try:
        decoded = tuple(_outcome(o) for o in outcomes)
    except ValueError as err:
        rejected = f"an outcome is not plain data: {err}"
        return CallsReport(tuple(Outcome("error", error=f"rejected: {rejected}") for _ in script), result, rejected)
    return CallsReport(decoded, result)


def same_outcome(expected: Outcome, actual: Outcome, *, rel_tol: float = 1e-9, abs_tol: float = 1e-9) -> bool:
    """Whether a candidate's outcome matches the expected one: equal plain values (numbers within the tolerance,
    ``bool`` never equal to a number), the same exception type, or both a non-plain object."""
    if expected.kind != actual.kind:
        return False
    if expected.kind == "error":
        return expected.error_type == actual.error_type
    if expected.kind == "object":
        return True
    return _same_value(expected.value, actual.value, rel_tol, abs_tol)


def encode_plain(value: Any, _depth: int = 0) -> Any:
    """Plain data as JSON, with tags for what JSON lacks: ``{"$tuple": [...]}``, ``{"$dict": [[k, v], ...]}``,
    ``{"$set": [...]}``, ``{"$frozenset": [...]}``, ``{"$float": "nan"}``. Exact types only: a subclass of
    ``str`` or ``int`` (which could carry its own ``__eq__``) is not plain data."""
    if _depth > MAX_DEPTH:
        raise ValueError(f"plain data nests at most {MAX_DEPTH} deep")
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return value if math.isfinite(value) else {"$float": repr(value)}
    if kind is list:
        return [encode_plain(v, _depth + 1) for v in value]
    if kind is tuple:
        return {"$tuple": [encode_plain(v, _depth + 1) for v in value]}
    if kind is dict:
        return {"$dict": [[encode_plain(k, _depth + 1), encode_plain(v, _depth + 1)] for k, v in value.items()]}
    if kind in (set, frozenset):
        return {f"${kind.__name__}": [encode_plain(v, _depth + 1) for v in value]}
    if kind is Ref:  # only on the way in: the driver puts the saved object there
        return {"$ref": value.name}
    raise TypeError(f"not plain data: a {kind.__name__} (plain data is None, bool, int, float, str, and lists, "
                    "tuples, dicts and sets of them)")


def decode_plain(data: Any, _depth: int = 0) -> Any:
    """The inverse of :func:`encode_plain`, strict: anything else raises ValueError."""
    if _depth > MAX_DEPTH:
        raise ValueError(f"plain data nests at most {MAX_DEPTH} deep")
    kind = type(data)
    if data is None or kind in (bool, int, str, float):
        return data
    if kind is list:
        return [decode_plain(v, _depth + 1) for v in data]
    if kind is dict and len(data) == 1:
        (tag, body), = data.items()
        if tag == "$float" and body in ("nan", "inf", "-inf"):
            return float(body)
        if type(body) is list:
            items = [decode_plain(v, _depth + 1) for v in body] if tag != "$dict" else None
            try:
                if tag == "$tuple":
                    return tuple(items)
                if tag in ("$set", "$frozenset"):
                    return set(items) if tag == "$set" else frozenset(items)
                if tag == "$dict" and all(type(p) is list and len(p) == 2 for p in body):
                    return {decode_plain(k, _depth + 1): decode_plain(v, _depth + 1) for k, v in body}
            except TypeError as err:  # an unhashable key or member
                raise ValueError(f"not plain data: {err}") from None
    raise ValueError(f"not plain data: {str(data)[:80]!r}")


# --- internals -----------------------------------------------------------------------------------------------


def _outcome(raw: Any) -> Outcome:
    if type(raw) is not dict or len(raw) != 1:
        raise ValueError(f"an outcome must be one of value/error/object, got {str(raw)[:80]!r}")
    (kind, body), = raw.items()
    if kind == "value":
        return Outcome("value", value=decode_plain(body))
    if kind in ("error", "object") and type(body) is str:
        return Outcome(kind, error=body[:400])
    raise ValueError(f"an outcome must be one of value/error/object, got {str(raw)[:80]!r}")


def _reject(raw: bytes, result: ExecResult, nonce: str, steps: int) -> str:
    if result.timed_out:
        return "the run reached its time limit before the driver reported"
    if not raw:
        return "no report: the run ended before the driver wrote one"
    if len(raw) >= REPORT_BYTES:
        return "the report is larger than the driver may write"
    try:
        report = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return "the report is not one JSON document"
    if type(report) is not dict or report.get("nonce") != nonce:
        return "the report does not carry this run's nonce"
    if type(report.get("outcomes")) is not list or len(report["outcomes"]) != steps:
        return f"the report does not hold one outcome for each of the {steps} steps"
    return ""


def _same_value(a: Any, b: Any, rel_tol: float, abs_tol: float) -> bool:
    numbers = (int, float)
    if type(a) is bool or type(b) is bool:
        return type(a) is type(b) and a == b
    if type(a) in numbers and type(b) in numbers:
        if isinstance(a, float) or isinstance(b, float):
            if math.isnan(a) or math.isnan(b):
                return math.isnan(a) and math.isnan(b)
            return math.isclose(a, b, rel_tol=rel_tol, abs_tol=abs_tol)
        return a == b
    if type(a) is not type(b):
        return False
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(_same_value(x, y, rel_tol, abs_tol) for x, y in zip(a, b))
    if type(a) is dict:
        return a.keys() == b.keys() and all(_same_value(a[k], b[k], rel_tol, abs_tol) for k in a)
    return a == b  # str, None, sets of hashable plain values


def _check_target(target: Any) -> None:
    if not isinstance(target, str) or not all(part.isidentifier() for part in target.split(".")):
        raise ValueError(f"a step's target must be a dotted name like 'calc.add', got {target!r}")


def _check_save(save: Any) -> str:
    if not isinstance(save, str) or (save and not save.isidentifier()):
        raise ValueError(f"a step's save must be an identifier or '', got {save!r}")
    return save


def _encodable(name: str, text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(f"{name} cannot be written as UTF-8 (a lone surrogate at {err.start}): it is not a "
                         "program Python can read") from None
    return text


# --- a check's own logic, on the candidate's outputs ------------------------------------------------------------


@dataclass(frozen=True)
class RecordedCall:
    """One call a check made of the function under test: its arguments and the reference's outcome."""

    args: tuple
    kwargs: dict
    expected: Outcome


def record_check(trusted_source: str, check: str, entry_point: str, *, seed: int = 0) -> tuple[RecordedCall, ...]:
    """Run a test's ``check(candidate)`` in this (trusted) process with the reference solution as the candidate,
    and record each call: the inputs the candidate will get, and the reference's outcome.

    ``trusted_source`` defines ``entry_point`` and whatever the check uses (HumanEval: the prompt and the
    canonical solution, then the test). ``random`` is seeded with ``seed`` for the check, so a check that draws
    random inputs draws the same ones when it is replayed (:func:`replay_check`). Inputs must be plain data.
    """
    import copy

    namespace = _trusted_namespace(trusted_source)
    reference = namespace[entry_point]
    calls: list[RecordedCall] = []

    def recorder(*args, **kwargs):
        inputs = (copy.deepcopy(args), copy.deepcopy(kwargs))
        encode_plain([list(args), kwargs])  # the sandbox gets them as plain data: refuse anything else here
        try:
            value = reference(*args, **kwargs)
        except Exception as err:
            calls.append(RecordedCall(*inputs, Outcome("error", error=f"{type(err).__name__}: {err}")))
            raise
        try:
            encode_plain(value)
            outcome = Outcome("value", value=copy.deepcopy(value))
        except TypeError:
            outcome = Outcome("object", error=type(value).__name__)
        calls.append(RecordedCall(*inputs, outcome))
        return value

    _seeded(seed, lambda: namespace[check](recorder))
    return tuple(calls)


def replay_check(trusted_source: str, check: str, recorded: Sequence[RecordedCall], outcomes: Sequence[Outcome], *,
                 seed: int = 0) -> tuple[bool, str]:
    """Run ``check`` again in this process, answering its calls with the candidate's ``outcomes`` (plain data
    from :func:`run_calls` on the recorded inputs): passed, or why not. The check's own assertions and
    tolerances judge the candidate's answers; the candidate never sees them."""
    if len(outcomes) != len(recorded):
        return False, f"{len(outcomes)} outcomes for {len(recorded)} recorded calls"
    namespace = _trusted_namespace(trusted_source)
    position = iter(range(len(recorded)))

    def replayer(*args, **kwargs):
        i = next(position, None)
        if i is None:
            raise AssertionError("the check made more calls than were recorded")
        if encode_plain([list(args), kwargs]) != encode_plain([list(recorded[i].args), recorded[i].kwargs]):
            raise AssertionError(f"call {i} got other inputs than were recorded")
        outcome = outcomes[i]
        if outcome.kind == "error":
            raise RuntimeError(f"the candidate raised {outcome.error}")
        if outcome.kind == "object":
            raise TypeError(f"the candidate returned a {outcome.error}, not plain data")
        return decode_plain(encode_plain(outcome.value))  # a fresh copy: the check may change what it gets

    try:
        _seeded(seed, lambda: namespace[check](replayer))
    except BaseException as err:  # noqa: BLE001 - any way out of the check but returning is a failure
        return False, f"{type(err).__name__}: {str(err)[:300]}"
    return True, ""


def _trusted_namespace(source: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "__trusted_check__"}
    exec(compile(source, "<trusted check>", "exec"), namespace)  # noqa: S102 - bundled reference code, not generated
    return namespace


def _seeded(seed: int, fn) -> None:
    import random

    state = random.getstate()
    random.seed(seed)
    try:
        fn()
    finally:
        random.setstate(state)
