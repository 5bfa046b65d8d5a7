"""The tools an L2MAC agent calls, with JSON-schema signatures; parsing a call from the model's reply; running it.

A call is one JSON object, ``{"tool": NAME, "arguments": {...}}``, in the reply's text (inside a
```json block or bare). A reply that does not parse gets mechanical repairs first (code fences,
trailing commas, Python literals, unclosed brackets, as the official code appends ``"]}``); what
still fails raises :class:`ToolCallError` with a message the control unit shows the model.

Every program, test and syntax check runs in :mod:`iclr24.sandbox`; nothing the model wrote runs here.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any

from iclr24.l2mac.filestore import FileStore

__all__ = ["TOOLS", "CheckResult", "ToolCall", "ToolCallError", "Toolbox", "parse_tool_call", "tool_call_text",
           "tool_signatures"]

_TEXT = {"type": "string", "minLength": 1}
_FILES = {"type": "array", "items": _TEXT}
# A plan and a write need at least one step or file: under constrained decoding a small model otherwise fills the
# schema with empty lists (SmolLM2 wrote `"steps": []` and `"files": []`), calls that do nothing.
_SOME = {"minItems": 1}
#: name -> (description, JSON schema of the arguments). ``write_plan`` is only offered for the plan.
TOOLS: dict[str, tuple[str, dict]] = {
    "write_plan": ("Give the plan: the list of steps, each a detailed instruction for a separate agent.",
                   {"type": "object", "properties": {"steps": {**_FILES, **_SOME}}, "required": ["steps"]}),
    "write_files": ("Write whole files.",
                    {"type": "object", "required": ["files"], "properties": {"files": {
                        "type": "array", **_SOME, "items": {"type": "object", "required": ["path", "contents"],
                                                            "properties": {"path": _TEXT, "contents": _TEXT}}}}}),
    "view_files": ("Show files.",
                   {"type": "object", "properties": {"files": _FILES}, "required": ["files"]}),
    "delete_files": ("Delete files.", {"type": "object", "properties": {"files": _FILES}, "required": ["files"]}),
    "list_files": ("List the files.", {"type": "object", "properties": {}}),
    "run_tests": ("Run pytest (all tests, or the files given).",
                  {"type": "object", "properties": {"files": _FILES}}),
    "run_python_file": ("Run a Python file.",
                        {"type": "object", "required": ["path"],
                         "properties": {"path": {"type": "string"}, "arguments": _FILES}}),
    "step_complete": ("The step is done: check syntax and run every test.",
                      {"type": "object", "properties": {}}),
}
STEP_TOOLS = tuple(name for name in TOOLS if name != "write_plan")


class ToolCallError(ValueError):
    """A reply that holds no valid tool call; the message says what is wrong and what is expected."""


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]
    repaired: bool = False  # parsed only after a mechanical repair


@dataclass(frozen=True)
class CheckResult:
    """The control unit's check on ``step_complete``: syntax of every Python file, then the tests."""

    passed: bool
    syntax_errors: int
    tests_passed: int
    tests_failed: int
    report: str  # what the model is shown when it fails


def tool_signatures(names=STEP_TOOLS) -> str:
    """The tools as the prompt lists them, one line each: ``name(argument: type, ...)``: description."""
    def signature(schema: dict) -> str:
        required = schema.get("required", [])
        return ", ".join(f"{key}{'' if key in required else '?'}: {_type_name(spec)}"
                         for key, spec in schema["properties"].items())

    return "\n".join(f"- {name}({signature(TOOLS[name][1])}): {TOOLS[name][0]}" for name in names)


def _type_name(spec: dict) -> str:
    if spec["type"] == "array":
        return f"[{_type_name(spec['items'])}]"
    if spec["type"] == "object":
        return "{" + ", ".join(f"{k}: {_type_name(v)}" for k, v in spec["properties"].items()) + "}"
    return spec["type"]


def tool_call_text(tool: str, **arguments) -> str:
    """A tool call as a model writes it in text, the form :func:`parse_tool_call` reads.

    >>> tool_call_text("list_files")
    '```json\\n{\\n "tool": "list_files",\\n "arguments": {}\\n}\\n```'
    """
    return "```json\n" + json.dumps({"tool": tool, "arguments": arguments}, indent=1) + "\n```"


def parse_tool_call(text: str, allowed=STEP_TOOLS) -> ToolCall:
    """The tool call in a model's reply, repaired if needed; :class:`ToolCallError` when there is none."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    candidate = _json_candidate(text)
    if candidate is None:
        raise ToolCallError('no JSON object found; reply with one object {"tool": NAME, "arguments": {...}}')
    value, repaired = _loads_with_repairs(candidate)
    if not isinstance(value, dict) or not isinstance(value.get("tool"), str):
        raise ToolCallError('the JSON object needs a "tool" name and an "arguments" object')
    name, arguments = value["tool"], value.get("arguments", {})
    if name not in allowed:
        raise ToolCallError(f"unknown tool {name!r}; the tools are {', '.join(allowed)}")
    if not isinstance(arguments, dict):
        raise ToolCallError(f'"arguments" of {name} must be an object, got {type(arguments).__name__}')
    _check_schema(name, arguments, TOOLS[name][1])
    return ToolCall(name, arguments, repaired)


def _json_candidate(text: str) -> str | None:
    fenced = re.findall(r"```(?:json)?\s*\n(.*?)(?:```|$)", text, flags=re.DOTALL)
    for block in fenced:
        if "{" in block:
            return block[block.index("{"):].strip()
    return text[text.index("{"):].strip() if "{" in text else None


def _loads_with_repairs(candidate: str) -> tuple[Any, bool]:
    try:
        return json.JSONDecoder().raw_decode(candidate)[0], False
    except json.JSONDecodeError as error:
        first = error
    trimmed = re.sub(r",\s*([}\]])", r"\1", candidate.strip().rstrip("`").strip())
    attempts = [trimmed] + [trimmed + tail for tail in ('"}}', '"}]}}', '"]}}', "}}", "]}}", "}", '"}', "}]}}")]
    for attempt in attempts:
        try:
            return json.JSONDecoder().raw_decode(attempt)[0], True
        except json.JSONDecodeError:
            pass
        try:  # single quotes, True/None: a Python literal
            return ast.literal_eval(attempt), True
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            pass
    raise ToolCallError(f"the tool call is not valid JSON ({first.msg} at character {first.pos})")


def _check_schema(name: str, arguments: dict, schema: dict) -> None:
    for key in schema.get("required", []):
        if key not in arguments:
            raise ToolCallError(f"{name} needs the argument {key!r}")
    for key, value in arguments.items():
        spec = schema["properties"].get(key)
        if spec is None:
            raise ToolCallError(f"{name} takes no argument {key!r}; it takes {sorted(schema['properties'])}")
        _check_value(f"{name}.{key}", value, spec)


def _check_value(where: str, value, spec: dict) -> None:
    kind = spec["type"]
    expected = {"string": str, "array": list, "object": dict}[kind]
    if not isinstance(value, expected):
        raise ToolCallError(f"{where} must be a JSON {kind}, got {type(value).__name__}")
    least = spec.get("minLength", spec.get("minItems", 0))
    if len(value) < least:
        unit = "character" if kind == "string" else "item"
        raise ToolCallError(f"{where} must have at least {least} {unit}{'s' * (least != 1)}, got {len(value)}")
    if kind == "array":
        for i, item in enumerate(value):
            _check_value(f"{where}[{i}]", item, spec["items"])
    elif kind == "object":
        for key in spec.get("required", []):
            if key not in value:
                raise ToolCallError(f"{where} needs {key!r}")
        for key, item in value.items():
            if key in spec.get("properties", {}):
                _check_value(f"{where}.{key}", item, spec["properties"][key])


# pytest in the sandbox runs without the plugins installed beside it (xdist, hypothesis, anyio, ...), as the hidden
# tests' scoring harness (iclr24.sandbox.score_pytest) does: the generated tests are plain pytest, and loading those
# plugins took ~4 s of each ~5 s check here (reading their modules), while the tests themselves took milliseconds.
_PYTEST_ALONE = "import os\nos.environ['PYTEST_DISABLE_PLUGIN_AUTOLOAD'] = '1'\nimport pytest\n"

class Toolbox:
    """Runs tool calls against a :class:`FileStore`; programs and tests go to the sandbox.

    Args:
        store: the file store the tools read and write.
        timeout_s: wall-clock limit of each sandboxed run.
        max_view_chars: a viewed file longer than this is cut (the model sees that it was).
        enable_tests: after each write, check the store (syntax, tests) and report what fails, as the
            official ``write_files`` does; ``step_complete`` runs the same check.
    """

    def __init__(self, store: FileStore, *, timeout_s: float = 30.0, max_view_chars: int = 8000,
                 enable_tests: bool = True) -> None:
        self.store, self.timeout_s, self.max_view_chars = store, timeout_s, max_view_chars
        self.enable_tests = enable_tests
        self.sandbox_runs = 0
        self.isolation = ""

    def __call__(self, call: ToolCall) -> str:
        """The tool's result as the text the model reads next."""
        handler = getattr(self, f"_{call.name}")
        try:
            return handler(**call.arguments)
        except (KeyError, ValueError, TypeError) as error:
            return f"error: {error}"

    def _write_files(self, files: list[dict]) -> str:
        for item in files:
            self.store.write(item["path"], item["contents"])
        wrote = f"wrote {', '.join(item['path'] for item in files)}"
        if not self.enable_tests:
            return wrote
        check = self.check()
        return f"{wrote}\n" + ("All tests passed." if check.passed else
                                f"Test run results:\n{_failures(check.report)}\nFix the code (or a wrong test).")

    def _view_files(self, files: list[str]) -> str:
        parts = []
        for path in files:
            text = self.store.read(path)
            cut = len(text) > self.max_view_chars
            parts.append(f"--- {path}{' (cut)' if cut else ''}\n{text[:self.max_view_chars]}")
        return "\n".join(parts)

    def _delete_files(self, files: list[str]) -> str:
        for path in files:
            self.store.delete(path)
        return f"deleted {', '.join(files)}"

    def _list_files(self) -> str:
        return ", ".join(self.store.list()) or "(no files)"

    def _run_tests(self, files: list[str] | None = None) -> str:
        result = self._pytest(files or [])
        return _tail(result.stdout + result.stderr)

    def _run_python_file(self, path: str, arguments: list[str] | None = None) -> str:
        from iclr24.sandbox import run_python

        code = self.store.read(path)
        rest = {p: t for p, t in self.store.items() if p != FileStore.normalise(path)}
        result = self._record(run_python(code, files=rest, entry=FileStore.normalise(path),
                                         args=tuple(arguments or ()), timeout_s=self.timeout_s))
        status = "timed out" if result.timed_out else f"exit status {result.exit_code}"
        return f"{status}\n{_tail(result.stdout)}\n{_tail(result.stderr)}".strip()

    def _step_complete(self) -> str:
        return self.check().report

    def check(self) -> CheckResult:
        """Syntax of every Python file, then the whole test suite, in one sandboxed run."""
        from iclr24.sandbox import run_python

        checker = ("import pathlib, sys\nbad = 0\nfor path in sorted(pathlib.Path('.').rglob('*.py')):\n"
                   "    if path.name == '_l2mac_check.py':\n        continue\n    try:\n"
                   "        compile(path.read_text(), str(path), 'exec')\n    except SyntaxError as e:\n"
                   "        bad += 1\n        print(f'SyntaxError in {path}: {e}')\n"
                   f"print(f'syntax errors: {{bad}}')\n{_PYTEST_ALONE}"
                   "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '--tb=line', '-rfE',\n"
                   "                      '--ignore=_l2mac_check.py']))\n")
        result = self._record(run_python(checker, files=dict(self.store), entry="_l2mac_check.py",
                                         timeout_s=self.timeout_s))
        out = result.stdout + result.stderr
        syntax = int(m.group(1)) if (m := re.search(r"syntax errors: (\d+)", out)) else 0
        passed, failed = _pytest_counts(out)
        no_tests = result.exit_code == 5  # pytest: nothing collected, which the official check accepts
        ok = not result.timed_out and syntax == 0 and (result.exit_code == 0 or no_tests)
        report = ("All checks passed: the step is complete." if ok else
                  "The step is not complete: the checks failed.\n" + _failures(out))
        return CheckResult(ok, syntax, passed, failed, report)

    def _pytest(self, files: list[str]):
        from iclr24.sandbox import run_python

        runner = (f"import sys\n{_PYTEST_ALONE}sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', "
                  f"'--ignore=_l2mac_pytest.py', *sys.argv[1:]]))\n")
        return self._record(run_python(runner, files=dict(self.store), entry="_l2mac_pytest.py",
                                       args=tuple(files), timeout_s=self.timeout_s))

    def _record(self, result):
        self.sandbox_runs += 1
        self.isolation = result.isolation
        return result


def _pytest_counts(output: str) -> tuple[int, int]:
    def count(word: str) -> int:
        return sum(int(n) for n in re.findall(rf"(\d+) {word}", output))

    return count("passed"), count("failed") + count("error")


def _failures(output: str, limit: int = 800) -> str:
    """The lines of a check's output that say what failed (syntax errors, pytest's short summary), compactly:
    the first failures first, the closing count always."""
    keep = [line for line in output.splitlines()
            if line.startswith(("SyntaxError", "FAILED", "ERROR", "E ")) or re.search(r"\d+ (failed|error)", line)]
    text = "\n".join(keep) or output.strip()
    if len(text) <= limit:
        return text
    last = text.splitlines()[-1]
    return text[: max(0, limit - len(last) - 5)] + "\n...\n" + last


def _tail(text: str, limit: int = 1000) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]
