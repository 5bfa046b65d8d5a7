"""L2MAC on a backend that constrains its output: every tool call it is sent is a schema, so every reply parses."""

import json

import pytest

from iclr24.l2mac import L2MAC
from iclr24.l2mac.l2mac import tool_call_format
from iclr24.l2mac.tools import parse_tool_call
from iclr24.llm import get_model, output_format

LIB = "def f(x):\n    return 2 * x\n"
TEST = "from lib import f\n\ndef test_f():\n    assert f(3) == 6\n"


def _call(tool, **arguments):
    return json.dumps({"tool": tool, "arguments": arguments})


def test_the_tool_call_format_accepts_each_offered_tool_and_nothing_else():
    fmt = output_format(tool_call_format(("write_files", "step_complete")))
    fmt.validate(_call("step_complete"))
    fmt.validate(_call("write_files", files=[{"path": "lib.py", "contents": LIB}]))
    for bad in (_call("view_files", files=["lib.py"]), _call("write_files", files="lib.py"),
                _call("write_files", files=[]), _call("write_files", files=[{"path": "", "contents": LIB}]),
                '{"tool": "step_complete"}', "step_complete()",
                json.dumps({"tool": "step_complete", "arguments": {"tool": "x"}})):
        with pytest.raises(ValueError):
            fmt.validate(bad)


def test_l2mac_sends_the_tool_schema_to_a_constraining_backend():
    replies = iter([_call("write_plan", steps=["Write lib.py with f(x) = 2x and a test."]),
                    _call("write_files", files=[{"path": "lib.py", "contents": LIB},
                                                {"path": "test_lib.py", "contents": TEST}]),
                    _call("step_complete"), "lib.py holds f and its test."])
    llm = get_model("scripted", outputs=lambda prompt, i: next(replies), chat=True, grammar=True)
    codebase = L2MAC(llm, context_tokens=4000).run("Write lib.py with f(x) = 2x.")
    assert codebase.files["lib.py"] == LIB and codebase.final_check.passed
    assert sum(s.parse_failures for s in codebase.steps) == 0


def test_l2mac_sends_no_format_to_a_backend_that_cannot_constrain():
    replies = iter([_call("write_plan", steps=["Write lib.py."]), "I am not sure.", _call("step_complete"),
                    "Nothing was written."])
    llm = get_model("scripted", outputs=lambda prompt, i: next(replies), chat=True)
    codebase = L2MAC(llm, context_tokens=4000, max_calls_per_step=3).run("Write lib.py.")
    assert codebase.steps[0].parse_failures == 1  # the free reply is repaired by asking again, as before


def test_smollm2_under_the_tool_schema_writes_a_call_that_parses():
    pytest.importorskip("llguidance")
    llm = get_model("embedded")
    messages = [{"role": "system", "content": "You call tools by replying with JSON."},
                {"role": "user", "content": "The step is finished. Call the tool that says so."}]
    tools = ("list_files", "step_complete", "view_files")
    reply = llm.generate(messages, max_tokens=64, response_format=tool_call_format(tools))[0]
    call = parse_tool_call(reply.text, tools)
    assert reply.finish_reason == "stop" and call.name in tools and not call.repaired


def test_a_plan_or_a_write_with_nothing_in_it_is_not_a_call():
    # constrained, SmolLM2 filled the schema with empty lists: calls that do nothing now fail the schema and the parser
    for text in (_call("write_plan", steps=[]), _call("write_files", files=[]),
                 _call("write_files", files=[{"path": "lib.py", "contents": ""}])):
        with pytest.raises(ValueError, match="must have at least 1 (item|character), got 0"):
            parse_tool_call(text, ("write_plan", "write_files"))
        with pytest.raises(ValueError):
            output_format(tool_call_format(("write_plan", "write_files"))).validate(text)
