"""Structured generation: output forced into a JSON schema, a regular expression or a list of choices.

    from iclr24.llm import get_model, choose
    llm = get_model()
    schema = {"type": "object", "properties": {"tool": {"enum": ["read", "write"]}}, "required": ["tool"]}
    llm.generate(messages, response_format={"type": "json_schema", "json_schema": {"name": "call", "schema": schema}})
    llm.generate(messages, response_format={"type": "regex", "pattern": r"(Yes|No)"})
    choose(llm, messages, ["go to the kitchen", "send a message"])      # one of the options, always

``response_format`` takes OpenAI's shapes (``{"type": "json_schema", "json_schema": {"name", "schema"}}``, and
``{"type": "json_object"}``: any JSON object), a class (a pydantic model or a dataclass, as the openai client's
``beta.chat.completions.parse`` takes them: each completion's ``.parsed`` is then the reply validated into an
instance), or ``{"type": "regex", "pattern": ...}``.
Local transformers backends enforce it token by token with llguidance's grammar engine as a logits processor (the
disallowed tokens' logits set to -inf, so the constrained distribution is the model's renormalised over the allowed
tokens); the openai backend sends it to the server (``response_format``, or vLLM's ``guided_json`` /
``guided_regex``) and checks what comes back; the scripted backend checks its canned outputs. Every backend
validates a finished text, so an output that escapes the format is an error, never a silently wrong answer; one cut
off by ``max_tokens`` comes back with finish reason ``length``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Choice", "OutputFormat", "choose", "output_format"]


@dataclass(frozen=True)
class OutputFormat:
    """A normalised ``response_format``: ``kind`` is ``"json_schema"`` (``spec`` a schema dict) or ``"regex"``
    (``spec`` a pattern matched in full). ``model``: the class a JSON schema was built from (a pydantic model or a
    dataclass), which a finished text is parsed into; None otherwise."""

    kind: str
    spec: Any
    name: str = "output"
    model: type | None = None

    def validate(self, text: str) -> None:
        """Raise ValueError naming the format when ``text`` is not in it."""
        self.parse(text)

    def parse(self, text: str) -> Any:
        """``text`` checked against the format (a ValueError naming the format when it is not in it); for a format
        given as a class, the instance pydantic validates the text into, else None."""
        if self.kind == "regex":
            if re.fullmatch(self.spec, text, flags=re.DOTALL) is None:
                raise ValueError(f"{text!r} does not match the regex {self.spec!r}")
            return None
        try:
            value = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"{text[:200]!r} is not JSON ({err.msg}) for the schema {self.name!r}") from None
        import jsonschema

        try:
            jsonschema.validate(value, self.spec)
        except jsonschema.ValidationError as err:
            raise ValueError(f"{text[:200]!r} does not follow the schema {self.name!r}: {err.message}") from None
        if self.model is None:
            return None
        # the schema says what the grammar allows; the class may ask for more (a validator, a strict type)
        from pydantic import ValidationError

        try:
            return _adapter(self.model).validate_json(text)
        except ValidationError as err:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'the object'}: {e['msg']}"
                                 for e in err.errors()[:5])
            raise ValueError(f"{text[:200]!r} does not validate as {self.name}: {problems}") from None

    def to_openai(self) -> dict:
        """The request field an OpenAI-style server reads."""
        if self == JSON_OBJECT:  # OpenAI's JSON mode, sent as the caller wrote it (a strict schema would be refused)
            return {"type": "json_object"}
        if self.kind == "json_schema":
            return {"type": "json_schema", "json_schema": {"name": self.name, "schema": self.spec, "strict": True}}
        return {"type": "regex", "pattern": self.spec}

    def grammar(self) -> str:
        """The llguidance grammar for this format."""
        from llguidance import LLMatcher

        if self.kind == "json_schema":
            return LLMatcher.grammar_from_json_schema(self.spec, defaults={"whitespace_flexible": False})
        return LLMatcher.grammar_from_regex(self.spec)


#: OpenAI's ``{"type": "json_object"}`` (JSON mode): any JSON object, as a schema the local engines can enforce.
JSON_OBJECT = OutputFormat("json_schema", {"type": "object"}, "json_object")


def output_format(response_format) -> OutputFormat | None:
    """Normalise ``response_format`` (None, OpenAI's dicts, a pydantic model class, or a regex dict)."""
    if response_format is None:
        return None
    if isinstance(response_format, OutputFormat):
        return response_format
    if isinstance(response_format, type):
        return _class_format(response_format)
    if isinstance(response_format, dict):
        kind = response_format.get("type")
        if kind == "json_object" and set(response_format) == {"type"}:
            return JSON_OBJECT
        if kind == "json_schema" and isinstance(response_format.get("json_schema"), dict) \
                and isinstance(response_format["json_schema"].get("schema"), dict):
            spec = response_format["json_schema"]
            return OutputFormat("json_schema", spec["schema"], str(spec.get("name") or "output"))
        if kind == "regex" and isinstance(response_format.get("pattern"), str):
            try:
                re.compile(response_format["pattern"])
            except re.error as err:
                raise ValueError(f"response_format: the pattern {response_format['pattern']!r} is not a regular "
                                 f"expression ({err})") from None
            return OutputFormat("regex", response_format["pattern"])
    raise ValueError(f"response_format must be {{'type': 'json_schema', 'json_schema': {{'name': ..., 'schema': "
                     f"{{...}}}}}}, {{'type': 'json_object'}}, a pydantic model class or a dataclass, or "
                     f"{{'type': 'regex', 'pattern': ...}}; got {response_format!r}")


def _class_format(cls: type) -> OutputFormat:
    """The JSON-schema format of a pydantic model class or a dataclass (the classes the openai client's ``parse``
    takes), whose finished texts are parsed into instances of it."""
    try:
        import pydantic
    except ImportError:
        raise ImportError(f"response_format={cls.__name__} (a class) needs pydantic, which builds the class's JSON "
                          f"schema and parses each reply into it: pip install 'iclr24[llm]' (or 'pydantic>=2'); or "
                          f"pass the schema as {{'type': 'json_schema', 'json_schema': {{'name': ..., 'schema': "
                          f"{{...}}}}}}") from None
    if not (issubclass(cls, pydantic.BaseModel) or dataclasses.is_dataclass(cls)):
        raise ValueError(f"response_format={cls.__name__}: a class must be a pydantic (v2) BaseModel subclass or a "
                         f"dataclass, as for the openai client's parse(); got {cls!r}")
    try:
        schema = _adapter(cls).json_schema()
    except pydantic.PydanticUserError as err:  # a field type with no JSON schema
        raise ValueError(f"response_format={cls.__name__}: pydantic cannot build its JSON schema ({err})") from None
    return OutputFormat("json_schema", schema, cls.__name__, cls)


@functools.lru_cache(maxsize=64)
def _adapter(cls: type):
    """pydantic's validator and schema builder for ``cls``, built once per class."""
    from pydantic import TypeAdapter

    return TypeAdapter(cls)


def require_grammar(model, fmt: OutputFormat | None) -> None:
    """A backend asked for a format it cannot enforce refuses clearly, before any work."""
    if fmt is not None and not model.capabilities.grammar:
        raise ValueError(f"response_format needs a backend that can constrain its output (capabilities.grammar); "
                         f"{model!r} cannot (embedded and hf need the llguidance package: pip install "
                         f"'iclr24[llm]'; llamacpp and OpenAI-compatible servers can)")


def check_complete(fmt: OutputFormat | None, text: str, finish_reason: str) -> Any:
    """A finished text is in the format; returns what it parses into (``Completion.parsed``: an instance of the
    class the format was given as, else None). One cut off by ``max_tokens`` (finish ``length``) is a prefix of the
    format and is returned as such, as OpenAI's API does: its finish reason says it is incomplete, and it parses
    into None."""
    if fmt is None or finish_reason == "length":
        return None
    return fmt.parse(text)


class GrammarConstraint:
    """A transformers logits processor that allows only tokens keeping the output inside ``fmt``.

    Built on llguidance (a 3 MB wheel with no dependencies; xgrammar, the other engine the field uses, pulls in
    Triton on Linux). At each step the tokens the matcher has not seen yet (the last sampled one) are consumed, and
    the logits of every token the grammar forbids become -inf; once the format is complete only end-of-sequence
    remains allowed.
    """

    _tokenizers: dict[int, Any] = {}  # id(hf tokenizer) -> llguidance tokenizer (~1 s to build)

    def __init__(self, tokenizer, fmt: OutputFormat, prompt_length: int) -> None:
        import llguidance
        import llguidance.hf

        key = id(tokenizer)
        if key not in self._tokenizers:
            self._tokenizers[key] = (tokenizer, llguidance.hf.from_tokenizer(tokenizer))
        self.ll_tokenizer = self._tokenizers[key][1]
        self.matcher = llguidance.LLMatcher(self.ll_tokenizer, fmt.grammar())
        if self.matcher.is_error():
            raise ValueError(f"response_format: llguidance cannot compile {fmt.kind} {fmt.name!r}: "
                             f"{self.matcher.get_error()}")
        self.consumed = prompt_length

    def allowed(self, input_ids, width: int):
        """The tokens the grammar allows after ``input_ids``, as a bool mask over ``width`` logits.

        Read straight from llguidance's bitmask (bit ``i`` of word ``w``: token ``32 w + i``); its own
        ``apply_token_bitmask_inplace`` goes through a ``torch.compile``-d kernel, seconds to compile once on a CPU."""
        import llguidance.torch
        import torch

        if input_ids.shape[0] != 1:
            raise ValueError("GrammarConstraint follows one sequence at a time")
        vocab = self.ll_tokenizer.vocab_size
        if width < vocab:  # padding rows of an embedding (width > vocab) are never tokens
            raise ValueError(f"{width} logits for a tokenizer of {vocab} tokens")
        if input_ids.shape[1] < self.consumed:
            raise ValueError(f"input_ids has {input_ids.shape[1]} tokens, fewer than the {self.consumed} the grammar "
                             f"has already read: a constraint follows one growing sequence")
        for token in input_ids[0, self.consumed:].tolist():
            if not self.matcher.consume_token(token):
                raise RuntimeError(f"the grammar refused token {token}: {self.matcher.get_error()}")
            self.consumed += 1
        words = llguidance.torch.allocate_token_bitmask(1, vocab)
        llguidance.torch.fill_next_token_bitmask(self.matcher, words, 0)
        bits = ((words[0, :, None] >> torch.arange(32, dtype=torch.int32)) & 1).flatten().bool()
        mask = torch.zeros(width, dtype=torch.bool)
        mask[:vocab] = bits[:vocab]
        return mask

    def __call__(self, input_ids, scores):
        return scores.masked_fill(~self.allowed(input_ids, scores.shape[-1]), float("-inf"))


@dataclass(frozen=True)
class Choice:
    """What :func:`choose` picked: ``index`` into the options, the ``option``, and ``how`` (``constrained``: the
    output was forced to an option; ``parsed``: a free reply that names one; ``default``: a free reply naming none,
    so the first option)."""

    index: int
    option: str
    how: str


def choose(llm, prompt, options: Sequence[str], *, temperature: float = 0.0, seed: int | None = None) -> Choice:
    """One of ``options`` for ``prompt``: constrained decoding where the backend can, else the first option a free
    reply contains (the official CoELA parser's containment match), else the first option (``how`` says which)."""
    options = list(options)
    if not options or not all(isinstance(o, str) and o for o in options):
        raise ValueError(f"options must be a non-empty list of non-empty strings, got {options!r}")
    if llm.capabilities.grammar:
        pattern = "|".join(re.escape(o) for o in options)
        completion = llm.generate(prompt, max_tokens=_token_budget(llm, options), temperature=temperature, seed=seed,
                                  response_format={"type": "regex", "pattern": f"({pattern})"})[0]
        if completion.text not in options:  # only a reply cut short (finish 'length') can be none of them
            raise RuntimeError(f"the constrained reply {completion.text!r} is none of the options (finish "
                               f"{completion.finish_reason!r}); the backend stopped before an option was complete")
        return Choice(options.index(completion.text), completion.text, "constrained")
    reply = llm.generate(prompt, max_tokens=64, temperature=temperature, seed=seed)[0].text.lower()
    for i, option in enumerate(options):
        if option.lower() in reply:
            return Choice(i, option, "parsed")
    return Choice(0, options[0], "default")


def _token_budget(llm, options: list[str]) -> int:
    """Enough tokens for the longest option (its characters, where the backend cannot count tokens)."""
    try:
        return max(len(llm.tokenize(o)) for o in options) + 8
    except NotImplementedError:
        return max(len(o) for o in options) + 8
