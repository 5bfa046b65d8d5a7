"""Structured generation: formats, validation, the grammar mask on the embedded model, the HTTP request, choose()."""

import json

import pytest
import torch

from iclr24.llm import Choice, choose, get_model, output_format
from iclr24.llm.base import Capabilities, Completion
from tests.http_stub import JSONHandler, serving

SCHEMA = {"type": "object", "properties": {"tool": {"enum": ["read_file", "write_file", "run_tests"]},
                                           "line": {"type": "integer", "minimum": 1, "maximum": 99}},
          "required": ["tool", "line"], "additionalProperties": False}
AS_JSON = {"type": "json_schema", "json_schema": {"name": "call", "schema": SCHEMA}}
CHAT = [{"role": "user", "content": "Which tool reads a file, and at which line should it start? Reply in JSON."}]


def test_response_formats_normalise_and_validate():
    from pydantic import BaseModel

    class Call(BaseModel):
        tool: str
        line: int

    fmt = output_format(AS_JSON)
    assert (fmt.kind, fmt.name, fmt.spec) == ("json_schema", "call", SCHEMA)
    fmt.validate('{"tool": "read_file", "line": 3}')
    with pytest.raises(ValueError, match="does not follow the schema 'call'"):
        fmt.validate('{"tool": "delete", "line": 3}')
    with pytest.raises(ValueError, match="is not JSON"):
        fmt.validate("read_file")
    assert output_format(Call).name == "Call" and output_format(Call).spec["required"] == ["tool", "line"]
    regex = output_format({"type": "regex", "pattern": "(Yes|No)"})
    regex.validate("No")
    with pytest.raises(ValueError, match="does not match the regex"):
        regex.validate("No way")
    assert output_format(None) is None


@pytest.mark.parametrize("bad, message", [
    ({"type": "json_schema"}, "response_format must be"),
    ({"type": "regex", "pattern": "("}, r"the pattern '\(' is not a regular expression"),
    ("json", "response_format must be .* got 'json'"),
    ({"type": "grammar", "lark": "start: x"}, "response_format must be"),
])
def test_a_bad_response_format_is_named(bad, message):
    with pytest.raises(ValueError, match=message):
        output_format(bad)


def test_scripted_outputs_are_checked_against_the_format():
    model = get_model("scripted", outputs=['{"tool": "run_tests", "line": 9}', "not json"])
    assert json.loads(model.generate("x", response_format=AS_JSON)[0].text)["tool"] == "run_tests"
    with pytest.raises(ValueError, match="is not JSON"):
        model.generate("x", response_format=AS_JSON)
    cut, = get_model("scripted", outputs=['{"tool": "run_tests", "line": 9}']).generate(
        "x", max_tokens=5, response_format=AS_JSON)
    assert (cut.text, cut.finish_reason) == ('{"too', "length")  # incomplete, and says so


def test_choose_constrains_where_it_can_and_parses_where_it_cannot():
    options = ["go to the kitchen", "send a message"]
    scripted = get_model("scripted", outputs=["send a message"], grammar=True)
    assert choose(scripted, "?", options) == Choice(1, "send a message", "constrained")
    assert scripted.calls[0]["max_tokens"] >= len("go to the kitchen")

    class Free:  # a backend that cannot constrain: its reply is parsed as the official CoELA parser does
        capabilities = Capabilities(full_logits=False, top_logprobs_k=0, chat_template=True, grammar=False)

        def __init__(self, reply):
            self.reply = reply

        def generate(self, prompt, **kwargs):
            assert "response_format" not in kwargs
            return [Completion(self.reply, "stop", 0, 0, 0.0)]

    assert choose(Free("I will Send a message now"), "?", options) == Choice(1, "send a message", "parsed")
    assert choose(Free("no idea"), "?", options) == Choice(0, "go to the kitchen", "default")
    with pytest.raises(ValueError, match="options must be a non-empty list of non-empty strings"):
        choose(scripted, "?", [])
    with pytest.raises(ValueError, match="response_format needs a backend that can constrain"):
        from iclr24.llm.structured import require_grammar

        require_grammar(Free(""), output_format(AS_JSON))


# --- the embedded model under a grammar -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def embedded():
    pytest.importorskip("llguidance")
    return get_model("embedded")


def test_the_mask_allows_exactly_the_tokens_that_keep_the_output_inside_the_format(embedded):
    from iclr24.llm.structured import GrammarConstraint

    ids = embedded._ids(CHAT)
    logits = embedded.model(input_ids=ids).logits[:, -1].float().detach()
    fmt = output_format({"type": "regex", "pattern": "(Yes|No)"})
    constrained = GrammarConstraint(embedded.tokenizer, fmt, ids.shape[1])(ids, logits)
    allowed = torch.isfinite(constrained[0]).nonzero().flatten().tolist()
    prefixes = {"Y", "Ye", "Yes", "N", "No"}
    pieces = embedded.tokenizer.convert_ids_to_tokens(list(range(len(embedded.tokenizer))))  # no byte marks here
    expected = [t for t, piece in enumerate(pieces) if piece in prefixes]
    assert allowed == expected and len(allowed) >= 2
    wider = GrammarConstraint(embedded.tokenizer, fmt, ids.shape[1]).allowed(ids, logits.shape[-1] + 7)
    assert wider.nonzero().flatten().tolist() == expected      # rows past the vocabulary are never allowed
    with pytest.raises(ValueError, match="logits for a tokenizer of"):
        GrammarConstraint(embedded.tokenizer, fmt, ids.shape[1]).allowed(ids, 100)
    with pytest.raises(ValueError, match="fewer than the"):               # it follows one growing sequence
        GrammarConstraint(embedded.tokenizer, fmt, ids.shape[1]).allowed(ids[:, :-1], logits.shape[-1])
    # the constrained distribution is the model's, renormalised over the allowed tokens
    renormalised = torch.log_softmax(logits[0, allowed].double(), -1)
    assert torch.allclose(torch.log_softmax(constrained[0].double(), -1)[allowed], renormalised, atol=1e-9)


def _sampled(embedded, fmt, n, max_tokens=40):
    return embedded.generate(CHAT, max_tokens=max_tokens, temperature=1.0, seed=0, n=n, response_format=fmt)


def test_every_sampled_output_follows_the_schema_and_the_regex(embedded):
    for out in _sampled(embedded, AS_JSON, n=4):
        output_format(AS_JSON).validate(out.text)
        assert out.finish_reason == "stop" and json.loads(out.text)["tool"] in SCHEMA["properties"]["tool"]["enum"]
    pattern = {"type": "regex", "pattern": r"line [1-9][0-9]?"}
    assert all(output_format(pattern).validate(o.text) is None for o in _sampled(embedded, pattern, n=3, max_tokens=8))
    greedy = embedded.generate(CHAT, max_tokens=40, response_format=AS_JSON)[0]
    assert greedy.text == embedded.generate(CHAT, max_tokens=40, response_format=AS_JSON)[0].text  # deterministic


@pytest.mark.slow  # ~2 minutes; the test above samples the same path 7 times
def test_a_hundred_sampled_outputs_all_follow_the_schema(embedded):
    outs = _sampled(embedded, AS_JSON, n=100)
    for out in outs:
        output_format(AS_JSON).validate(out.text)
    assert len({o.text for o in outs}) > 1  # sampled, not one answer repeated


def test_choose_on_the_embedded_model_always_returns_an_option(embedded):
    options = ["walk to the kitchen", "pick up the apple", "send a message"]
    picks = {choose(embedded, CHAT, options, temperature=1.0, seed=s) for s in range(4)}
    assert all(p.how == "constrained" and p.option == options[p.index] for p in picks)


# --- over HTTP: what the request carries, and what a server that ignores it gets ---------------------------------

class _Echo(JSONHandler):
    bodies: list = []
    reply = '{"tool": "read_file", "line": 1}'

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Echo.bodies.append(body)
        key = "message" if "messages" in body else "text"
        choice = {"index": 0, "finish_reason": "stop",
                  key: {"role": "assistant", "content": _Echo.reply} if key == "message" else _Echo.reply}
        self._send(200, {"id": "x", "object": "x", "created": 0, "model": "m", "choices": [choice]})


def test_the_openai_backend_sends_the_format_and_checks_the_answer():
    from iclr24.llm.openai_backend import ResponseError

    _Echo.bodies, _Echo.reply = [], '{"tool": "read_file", "line": 1}'
    with serving(_Echo) as url:
        model = get_model("openai", model="m", base_url=url, max_retries=0)
        assert model.capabilities.grammar
        model.generate(CHAT, response_format=AS_JSON)
        assert _Echo.bodies[-1]["response_format"] == {"type": "json_schema", "json_schema": {
            "name": "call", "schema": SCHEMA, "strict": True}}
        model.generate("Tool:", response_format=AS_JSON)
        assert _Echo.bodies[-1]["guided_json"] == SCHEMA and "response_format" not in _Echo.bodies[-1]
        _Echo.reply = "Yes"
        model.generate(CHAT, response_format={"type": "regex", "pattern": "(Yes|No)"})
        assert _Echo.bodies[-1]["guided_regex"] == "(Yes|No)"
        _Echo.reply = "Sure! Here is the JSON you asked for."
        with pytest.raises(ResponseError, match="did not keep to response_format: .* is not JSON"):
            model.generate(CHAT, response_format=AS_JSON)


# --- a class as the format: the reply parsed into it (.parsed), as the openai client's parse() gives it -----------

def _call_class():
    from typing import Literal

    from pydantic import BaseModel, Field, field_validator

    class Call(BaseModel):
        tool: Literal["read_file", "write_file", "run_tests"]
        line: int = Field(ge=1, le=99)

        @field_validator("tool")
        @classmethod
        def _not_write(cls, tool):  # more than the schema says: pydantic validates it, jsonschema cannot
            if tool == "write_file":
                raise ValueError("this caller never writes")
            return tool

    return Call


def test_a_pydantic_class_gives_the_parsed_instance_and_other_formats_none():
    Call = _call_class()
    model = get_model("scripted", outputs=['{"tool": "run_tests", "line": 9}', '{"tool": "run_tests", "line": 9}',
                                           "Yes", '{"tool": "run_tests", "line": 9}'])
    out, = model.generate("x", response_format=Call)
    assert isinstance(out.parsed, Call) and out.parsed == Call(tool="run_tests", line=9)
    assert model.generate("x", response_format=AS_JSON)[0].parsed is None          # a schema dict: no class
    assert model.generate("x", response_format={"type": "regex", "pattern": "(Yes|No)"})[0].parsed is None
    cut, = model.generate("x", max_tokens=5, response_format=Call)                  # unfinished: nothing to parse
    assert (cut.finish_reason, cut.parsed) == ("length", None)
    assert get_model("scripted", outputs=["free text"]).generate("x")[0].parsed is None


@pytest.mark.parametrize("reply, message", [
    ('{"tool": "write_file", "line": 3}', "does not validate as Call: tool: Value error, this caller never writes"),
    ('{"tool": "run_tests", "line": 300}', "does not follow the schema 'Call'"),
    ("run the tests", "is not JSON"),
])
def test_a_reply_the_class_refuses_is_an_error_naming_it(reply, message):
    with pytest.raises(ValueError, match=message):
        get_model("scripted", outputs=[reply]).generate("x", response_format=_call_class())


def test_a_dataclass_is_parsed_as_the_openai_client_parses_one():
    from dataclasses import dataclass

    @dataclass
    class Point:
        x: int
        y: int

    fmt = output_format(Point)
    assert (fmt.name, fmt.model, fmt.spec["required"]) == ("Point", Point, ["x", "y"])
    assert get_model("scripted", outputs=['{"x": 1, "y": 2}']).generate("x", response_format=Point)[0].parsed == \
        Point(1, 2)


def test_a_class_format_without_pydantic_or_of_another_kind_is_named(monkeypatch):
    from dataclasses import dataclass

    @dataclass
    class Point:
        x: int

    class Plain:
        x: int

    with pytest.raises(ValueError, match="a class must be a pydantic .*BaseModel subclass or a dataclass"):
        output_format(Plain)
    monkeypatch.setitem(__import__("sys").modules, "pydantic", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"response_format=Point \(a class\) needs pydantic.*pip install"):
        get_model("scripted", outputs=['{"x": 1}']).generate("x", response_format=Point)


def test_the_log_records_the_parsed_instance_as_its_fields(tmp_path):
    from iclr24.llm import LoggedModel

    logged = LoggedModel(get_model("scripted", outputs=['{"tool": "read_file", "line": 2}']), tmp_path / "calls.jsonl")
    logged.generate("x", response_format=_call_class())
    record = json.loads((tmp_path / "calls.jsonl").read_text())
    assert record["outputs"][0]["parsed"] == {"tool": "read_file", "line": 2}
    assert "Call" in record["kwargs"]["response_format"]                              # the class, by its repr


def test_the_openai_backend_sends_the_class_schema_and_parses_the_answer():
    from iclr24.llm.openai_backend import ResponseError

    Call = _call_class()
    _Echo.bodies, _Echo.reply = [], '{"tool": "read_file", "line": 4}'
    with serving(_Echo) as url:
        model = get_model("openai", model="m", base_url=url, max_retries=0)
        out, = model.generate(CHAT, response_format=Call)
        assert out.parsed == Call(tool="read_file", line=4)
        sent = _Echo.bodies[-1]["response_format"]
        assert (sent["type"], sent["json_schema"]["name"]) == ("json_schema", "Call")
        assert sent["json_schema"]["schema"]["required"] == ["tool", "line"]
        _Echo.reply = '{"tool": "write_file", "line": 4}'
        with pytest.raises(ResponseError, match="did not keep to response_format: .* does not validate as Call"):
            model.generate(CHAT, response_format=Call)


def test_the_embedded_model_under_a_class_gives_an_instance(embedded):
    from typing import Literal

    from pydantic import BaseModel, Field

    class Call(BaseModel):  # what the grammar enforces is all it asks: any reply the grammar allows parses
        tool: Literal["read_file", "write_file", "run_tests"]
        line: int = Field(ge=1, le=99)

    out, = embedded.generate(CHAT, max_tokens=40, response_format=Call)
    assert out.finish_reason == "stop" and isinstance(out.parsed, Call)
    assert out.parsed == Call.model_validate_json(out.text)
