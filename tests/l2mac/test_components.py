"""The file store, tool-call parsing and the tools (programs and tests run in the sandbox)."""

import json

import pytest

from iclr24.l2mac import FileStore, Toolbox, ToolCallError, parse_tool_call
from iclr24.l2mac.tools import ToolCall, tool_call_text, tool_signatures

# --- the file store -------------------------------------------------------------------------------


def test_file_store_reads_writes_deletes_and_lists():
    store = FileStore({"b.py": "x = 1\n"})
    store.write("./pkg//a.py", "y = 2\n")
    assert store.list() == ["b.py", "pkg/a.py"] and store.read("pkg/a.py") == "y = 2\n"
    store.write("b.py", "x = 3\n")  # whole-file overwrite
    assert store["b.py"] == "x = 3\n" and len(store) == 2 and store.size_chars() == 12
    store.delete("b.py")
    assert list(store) == ["pkg/a.py"]


@pytest.mark.parametrize("path, match", [("../x.py", "must be relative"), ("/etc/x", "must be relative"),
                                         ("", "non-empty"), (".", "must be relative")])
def test_file_store_refuses_paths_outside(path, match):
    with pytest.raises(ValueError, match=match):
        FileStore().write(path, "x")


def test_file_store_errors_name_what_is_wrong():
    store = FileStore({"a/b.py": ""})
    with pytest.raises(ValueError, match="clashes with the existing 'a/b.py'"):
        store.write("a", "x")
    with pytest.raises(KeyError, match=r"no file 'c.py' in the store; it has \['a/b.py'\]"):
        store.read("c.py")
    with pytest.raises(TypeError, match="contents of 'x.py' must be a str"):
        store.write("x.py", b"bytes")


def test_file_store_snapshot_writes_every_file(tmp_path):
    FileStore({"a.py": "1", "pkg/b.py": "2"}).snapshot(tmp_path / "out")
    assert (tmp_path / "out" / "pkg" / "b.py").read_text() == "2" and (tmp_path / "out" / "a.py").read_text() == "1"


# --- parsing tool calls ---------------------------------------------------------------------------

def test_parses_a_call_in_a_fenced_block_or_bare():
    fenced = "I will write it.\n" + tool_call_text("view_files", files=["a.py"])
    assert parse_tool_call(fenced) == ToolCall("view_files", {"files": ["a.py"]})
    assert parse_tool_call('{"tool": "step_complete", "arguments": {}} and then text') == ToolCall(
        "step_complete", {})


@pytest.mark.parametrize("text", [
    '{"tool": "view_files", "arguments": {"files": ["a.py"],},}',  # trailing commas
    "{'tool': 'view_files', 'arguments': {'files': ['a.py']}}",  # a Python literal
    '```json\n{"tool": "view_files", "arguments": {"files": ["a.py"]',  # cut before the closing brackets
])
def test_mechanical_repairs(text):
    call = parse_tool_call(text)
    assert call.name == "view_files" and call.arguments == {"files": ["a.py"]} and call.repaired


@pytest.mark.parametrize("text, match", [
    ("I think the code is fine.", "no JSON object found"),
    ('{"tool": "rm_rf", "arguments": {}}', "unknown tool 'rm_rf'; the tools are write_files"),
    ('{"arguments": {}}', 'needs a "tool" name'),
    ('{"tool": "view_files", "arguments": {}}', "view_files needs the argument 'files'"),
    ('{"tool": "view_files", "arguments": {"files": "a.py"}}', "view_files.files must be a JSON array, got str"),
    ('{"tool": "write_files", "arguments": {"files": [{"path": "a.py"}]}}', r"write_files.files\[0\] needs 'contents'"),
    ('{"tool": "list_files", "arguments": {"verbose": true}}', "list_files takes no argument 'verbose'"),
    ('{"tool": "view_files", "arguments": {"files": [1}', "not valid JSON"),
])
def test_invalid_calls_are_clear_errors(text, match):
    with pytest.raises(ToolCallError, match=match):
        parse_tool_call(text)


def test_the_plan_tool_only_where_allowed():
    text = tool_call_text("write_plan", steps=["a", "b"])
    assert parse_tool_call(text, ("write_plan",)).arguments == {"steps": ["a", "b"]}
    with pytest.raises(ToolCallError, match="unknown tool 'write_plan'"):
        parse_tool_call(text)


def test_signatures_list_every_argument():
    lines = tool_signatures().splitlines()
    assert lines[0].startswith("- write_files(files: [{path: string, contents: string}])")
    assert "- run_python_file(path: string, arguments?: [string])" in tool_signatures()


# --- the tools ------------------------------------------------------------------------------------

def test_file_tools():
    box = Toolbox(FileStore())
    wrote = box(ToolCall("write_files", {"files": [{"path": "a.py", "contents": "A = 1\n"}]}))
    assert wrote == "wrote a.py\nAll tests passed."  # a write runs the checks, as the official tool does
    assert box(ToolCall("view_files", {"files": ["a.py"]})) == "--- a.py\nA = 1\n"
    assert box(ToolCall("list_files", {})) == "a.py"
    assert box(ToolCall("view_files", {"files": ["nope.py"]})).startswith("error: \"no file 'nope.py'")
    assert box(ToolCall("delete_files", {"files": ["a.py"]})) == "deleted a.py" and len(box.store) == 0


def test_run_python_file_and_tests_go_through_the_sandbox():
    store = FileStore({"app.py": "import sys\nfrom lib import twice\nprint(twice(int(sys.argv[1])))\n",
                       "lib.py": "def twice(x):\n    return 2 * x\n",
                       "test_lib.py": "from lib import twice\n\ndef test_twice():\n    assert twice(3) == 6\n"})
    box = Toolbox(store)
    assert box(ToolCall("run_python_file", {"path": "app.py", "arguments": ["21"]})) == "exit status 0\n42"
    assert "1 passed" in box(ToolCall("run_tests", {}))
    assert box.sandbox_runs == 2 and box.isolation.startswith("bwrap")


def test_the_check_runs_syntax_and_tests():
    store = FileStore({"lib.py": "def f():\n    return 1\n",
                       "test_lib.py": "from lib import f\n\ndef test_f():\n    assert f() == 2\n"})
    box = Toolbox(store)
    failed = box.check()
    assert not failed.passed and failed.tests_failed == 1
    assert "FAILED test_lib.py::test_f" in failed.report and "assert 1 == 2" in failed.report
    store.write("lib.py", "def f(:\n")
    broken = box.check()
    assert not broken.passed and broken.syntax_errors == 1 and "SyntaxError in lib.py" in broken.report
    store.write("lib.py", "def f():\n    return 2\n")
    assert box.check().passed
    assert Toolbox(FileStore({"a.py": "X = 1\n"})).check().passed  # no tests at all: accepted, as officially


def test_generated_code_never_runs_on_the_host(tmp_path):
    # A generated test that would leave a file on the host if it ran here: it runs (its output comes
    # back) but only inside the sandbox, which cannot see the host's folder.
    marker = tmp_path / "ran-on-host"
    store = FileStore({"test_escape.py": f"def test_escape():\n    open({str(marker)!r}, 'w').write('x')\n"})
    report = Toolbox(store).check().report
    assert "FAILED test_escape.py::test_escape" in report and not marker.exists()
    json.dumps(report)  # the report is plain text for the model
