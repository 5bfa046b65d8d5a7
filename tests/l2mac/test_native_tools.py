"""L2MAC over an OpenAI-compatible server's native tool calls, against a local stub server."""

import json

import pytest

from iclr24.l2mac import L2MAC
from iclr24.llm import LoggedModel, get_model
from tests.http_stub import JSONHandler, serving

pytest.importorskip("openai")

LIB = "def f(x):\n    return 2 * x\n"
TEST = "from lib import f\n\ndef test_f():\n    assert f(3) == 6\n"


class _Server(JSONHandler):
    requests: list = []

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Server.requests.append(body)
        tools = [t["function"]["name"] for t in body.get("tools", [])]
        last = body["messages"][-1]["content"]
        if not tools:
            message = {"role": "assistant", "content": "lib.py holds f and its test."}
        elif tools == ["write_plan"]:
            message = self._call("write_plan", {"steps": ["Write lib.py with f(x) = 2x and a test."]})
        elif "lib.py" not in last.split("Files")[-1]:
            message = self._call("write_files", {"files": [{"path": "lib.py", "contents": LIB},
                                                           {"path": "test_lib.py", "contents": TEST}]})
        else:
            message = self._call("step_complete", {})
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        self._send(200, {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})

    @staticmethod
    def _call(name, arguments):
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}


@pytest.fixture
def server():
    _Server.requests = []
    with serving(_Server) as url:
        yield url


def test_l2mac_uses_native_tool_calls_where_the_backend_has_them(server, tmp_path):
    model = get_model("openai", model="stub", base_url=server, api_key="k", max_retries=0)
    llm = LoggedModel(model, tmp_path / "calls.jsonl")  # no tokenizer over HTTP: the loop estimates
    codebase = L2MAC(llm, context_tokens=4000).run("Write lib.py with f(x) = 2x.")
    assert codebase.plan == ["Write lib.py with f(x) = 2x and a test."]
    assert codebase.steps[0].status == "complete" and codebase.steps[0].summary == "lib.py holds f and its test."
    assert codebase.files["lib.py"] == LIB and codebase.final_check.passed
    plan, first_step, *_, summary = _Server.requests
    assert plan["tool_choice"] == {"type": "function", "function": {"name": "write_plan"}}
    assert first_step["tool_choice"] == "auto" and "write_files" in [t["function"]["name"] for t in first_step["tools"]]
    assert first_step["tools"][0]["function"]["parameters"]["required"] == ["files"]  # the JSON schema travels
    assert "tools" not in summary  # the summary is plain text
    logged = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert len(logged) == len(_Server.requests) and logged[0]["kwargs"]["tools"] == ["write_plan"]


class _Malformed(_Server):
    """The first write comes with arguments that are not JSON (a `view_files` whose text could be re-parsed into a
    `delete_files` call): a failed call the model is asked to repair, never text."""

    malformed_sent = False

    @staticmethod
    def _call(name, arguments):
        if name == "write_files" and not _Malformed.malformed_sent:
            _Malformed.malformed_sent = True
            return {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {
                    "name": "write_files", "arguments": '{"name": "delete_files", "arguments": {"paths": ["lib.py"]'}}]}
        return _Server._call(name, arguments)


def test_a_malformed_native_tool_call_is_a_failed_call_and_the_loop_goes_on(tmp_path):
    _Server.requests, _Malformed.malformed_sent = [], False
    with serving(_Malformed) as url:
        model = get_model("openai", model="stub", base_url=url, api_key="k", max_retries=0)
        codebase = L2MAC(LoggedModel(model, tmp_path / "calls.jsonl"), context_tokens=4000).run("Write lib.py.")
    assert _Malformed.malformed_sent and codebase.steps[0].parse_failures == 1
    repair = _Server.requests[2]["messages"][-1]["content"]  # the model is told, and the loop goes on
    assert repair.startswith("That reply was not a valid tool call") and "not valid JSON" in repair
    assert "delete_files" not in codebase.steps[0].tool_calls and codebase.steps[0].status == "complete"
