"""Any OpenAI-compatible server (vLLM, llama.cpp server, Ollama, hosted APIs) through the ``openai`` client.

Chat messages go to ``/chat/completions``, text prompts to ``/completions``. Retries (``max_retries``, on 429,
5xx and dropped connections) are this module's own, within one total deadline per call: a server that asks to be
retried later than the deadline allows (``Retry-After``) is reported as rate-limited at once. Every failure is one
of the library's errors naming the server and the cause: :class:`PermissionError` (the key), :class:`TimeoutError`,
:class:`ConnectionError` (refused, reset), :class:`RateLimitError`, :class:`ServerError` (an error status),
:class:`ResponseError` (an answer that is not a valid completion: malformed, larger than ``max_response_bytes``, a
missing text, more tokens than ``max_tokens`` allows by the server's own count). Over HTTP only the top
``top_logprobs`` alternatives per token are available (at most 20), never the full vocabulary: methods that need
exact next-token distributions (EFT) must use a local backend.

Servers differ; the client makes them behave alike: a stop string sent back with the text is cut, a server that
ignores or refuses ``n`` gets one request per missing choice, and ``logprobs=True`` from a server that sends none is
an error naming it (``probe_logprobs`` finds that out up front).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import logging
import math
import os
import threading
import time
from collections.abc import Sequence

from iclr24.core.checks import check_int
from iclr24.llm.base import Capabilities, Completion, Prompt, apply_stop, check_generate_args, with_system
from iclr24.llm.structured import check_complete, output_format

__all__ = ["OpenAIModel", "RateLimitError", "ResponseError", "ServerError"]

#: The largest response body read (bytes): a completion is text; a server sending more is not answering.
MAX_RESPONSE_BYTES = 8 * 2**20
_BACKOFF_S = (0.5, 8.0)  # first wait and the longest, doubling in between
_log = logging.getLogger(__name__)


class OpenAIModel:
    """Args:
        model: the served model's name.
        base_url: the server (default ``$OPENAI_BASE_URL``, else OpenAI's).
        api_key: default ``$OPENAI_API_KEY`` (``"EMPTY"`` for local servers that ignore it).
        timeout: seconds per request; max_retries: retries on 429/5xx/connection errors.
        max_concurrency: requests in flight at once in ``generate_batch`` (servers such as vLLM batch them).
        deadline: total seconds per call, retries and waits included.
        max_response_bytes: the largest response body read (default 8 MiB).
    """

    def __init__(self, model: str | None = None, *, base_url: str | None = None, api_key: str | None = None,
                 timeout: float = 60.0, max_retries: int = 3, max_concurrency: int = 8, chat: bool = True,
                 deadline: float | None = None, max_response_bytes: int = MAX_RESPONSE_BYTES) -> None:
        import openai

        self.max_concurrency = check_int("max_concurrency", max_concurrency, minimum=1)
        self.max_retries = check_int("max_retries", max_retries, minimum=0)
        self.max_response_bytes = check_int("max_response_bytes", max_response_bytes, minimum=1024)
        if not isinstance(chat, bool):
            raise TypeError(f"chat must be True or False, got {chat!r}")

        self._openai = openai
        self.name = model or os.environ.get("ICLR24_OPENAI_MODEL") or ""
        if not self.name:
            raise ValueError("the openai backend needs a model name: get_model('openai', model=...) or "
                             "$ICLR24_OPENAI_MODEL")
        if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        # httpx's timeout bounds each read, so a body trickled byte by byte never trips it: every call also
        # has a total deadline: by default the time all tries could take, with the client's waits between
        # tries (up to 60 s when a server sends Retry-After).
        default = timeout * (max_retries + 1) + 60.0 * max_retries + 1.0
        self.deadline = float(deadline) if deadline is not None else default
        if not (math.isfinite(self.deadline) and self.deadline > 0):
            raise ValueError(f"deadline must be a positive number of seconds, got {deadline!r}")
        # Retries are ours (max_retries=0 for the client), so each one can be weighed against the deadline.
        self.client = openai.OpenAI(base_url=base_url or os.environ.get("OPENAI_BASE_URL"),
                                    api_key=api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
                                    timeout=timeout, max_retries=0,
                                    http_client=_capped_http_client(openai, self.max_response_bytes))
        # The server renders chat messages with its own template; a base model served without one cannot.
        # grammar: sent to the server (OpenAI, vLLM and llama.cpp's server take a schema); what comes back is checked
        self.capabilities = Capabilities(full_logits=False, top_logprobs_k=20, chat_template=chat, grammar=True)
        self._logprobs_probed: dict[int, bool] = {}  # 0: per-token, 1: top alternatives -> whether the server sends

    def generate(self, prompt: Prompt, *, max_tokens: int = 256, stop: Sequence[str] = (), temperature: float = 0.0,
                 top_p: float = 1.0, seed: int | None = None, n: int = 1, system: str | None = None,
                 logprobs: bool = False, response_format=None) -> list[Completion]:
        """Text to ``/completions``, chat messages to ``/chat/completions``; ``logprobs`` asks the server for
        each generated token's log-probability (``Completion.tokens`` / ``.logprobs``); ``response_format``
        (iclr24.llm.structured) is sent as OpenAI's ``response_format`` (a JSON schema on chat) or vLLM's
        ``guided_json`` / ``guided_regex``, and every text that comes back is checked against it."""
        check_generate_args(max_tokens, temperature, n, top_p)
        fmt = output_format(response_format)
        prompt = with_system(prompt, system)
        if not isinstance(prompt, str) and not self.capabilities.chat_template:
            raise ValueError(f"chat messages need a server with a chat template; {self.name!r} was built with "
                             f"chat=False: pass a text prompt")
        common = {"model": self.name, "max_tokens": max_tokens, "temperature": temperature, "n": n,
                  **({"top_p": top_p} if top_p != 1 else {}), **({"stop": list(stop)} if stop else {}),
                  **({"seed": seed} if seed is not None else {})}
        if fmt is not None and fmt.kind == "json_schema" and not isinstance(prompt, str):
            common["response_format"] = fmt.to_openai()
        elif fmt is not None:  # vLLM's extras: regexes, and schemas on /completions
            common["extra_body"] = {"guided_json": fmt.spec} if fmt.kind == "json_schema" else \
                {"guided_regex": fmt.spec}
        start = time.perf_counter()

        def request():
            if isinstance(prompt, str):
                return self.client.completions.create(prompt=prompt, **common, **({"logprobs": 1} if logprobs else {}))
            return self.client.chat.completions.create(messages=list(prompt), **common,
                                                       **({"logprobs": True} if logprobs else {}))

        try:
            response = self._call(request)
        except ServerError as err:
            if n == 1 or err.status != 400:
                raise
            # llama.cpp's server refuses n > 1 outright ("only one completion choice"): one request per choice
            _log.warning("the server at %s refused n=%d (%s); asking for each choice in its own request",
                         self._server, n, err)
            return [completion for i in range(n) for completion in self.generate(
                prompt, max_tokens=max_tokens, stop=stop, temperature=temperature, top_p=top_p,
                seed=None if seed is None else seed + i, logprobs=logprobs, response_format=fmt)]
        duration = time.perf_counter() - start
        with self._reading():
            choices = _choices(response, n, fewer_ok=True)
            texts = [_choice_text(c) for c in choices]
            scored = [_choice_logprobs(c) for c in choices]
            prompt_tokens, completion_tokens = _usage(response)
            _check_within_max_tokens(completion_tokens, scored, max_tokens, len(choices))
        if logprobs and any(score is None for score in scored):
            raise NotImplementedError(f"the server at {self._server} sent no log-probabilities for logprobs=True; "
                                      f"use a server that returns them (vLLM, llama.cpp server) or a local backend")
        counts = _choice_token_counts(texts, scored, completion_tokens)
        completions = [_cut_at_stop(Completion(text, _finish(choice), prompt_tokens, count, duration,
                                               *(score if logprobs else (None, None))), stop)
                       for text, choice, score, count in zip(texts, choices, scored, counts)]
        for completion in completions:
            try:
                check_complete(fmt, completion.text, completion.finish_reason)
            except ValueError as err:
                raise ResponseError(f"the server at {self._server} did not keep to response_format: {err}") from None
        if len(completions) < n:  # the server ignores n (transformers serve does): the rest one request each
            missing = n - len(completions)
            _log.warning("the server at %s sent %d choice(s) for n=%d; asking for the other %d one at a time",
                         self._server, len(completions), n, missing)
            for i in range(missing):
                completions += self.generate(prompt, max_tokens=max_tokens, stop=stop, temperature=temperature,
                                             top_p=top_p, seed=None if seed is None else seed + 1 + i,
                                             logprobs=logprobs, response_format=fmt)
        return completions

    def generate_with_tools(self, messages: Sequence[dict], tools: dict[str, tuple[str, dict]], *,
                            max_tokens: int = 256, temperature: float = 0.0, seed: int | None = None,
                            force: str | None = None) -> Completion:
        """One chat reply in which the model may call one of ``tools`` (name -> (description, JSON schema)) through
        the server's native function calling; ``force`` names a tool it must call. A call comes back as the text
        ``{"tool": NAME, "arguments": {...}}`` (what :func:`iclr24.l2mac.parse_tool_call` reads); a reply
        without one as its plain content."""
        check_generate_args(max_tokens, temperature, 1)
        specs = [{"type": "function", "function": {"name": name, "description": description, "parameters": schema}}
                 for name, (description, schema) in tools.items()]
        choice = {"type": "function", "function": {"name": force}} if force else "auto"
        start = time.perf_counter()
        response = self._call(lambda: self.client.chat.completions.create(
            model=self.name, messages=list(messages), tools=specs, tool_choice=choice, max_tokens=max_tokens,
            temperature=temperature, **({"seed": seed} if seed is not None else {})))
        with self._reading():
            choice = _choices(response, 1)[0]
            message = choice.message
            prompt_tokens, completion_tokens = _usage(response)
            _check_within_max_tokens(completion_tokens, [None], max_tokens, 1)
        if message.tool_calls:
            call = message.tool_calls[0].function
            try:
                arguments = json.loads(call.arguments or "{}")
            except json.JSONDecodeError:  # left for the caller's repairs, as the model wrote it
                text = f'{{"tool": {json.dumps(call.name)}, "arguments": {call.arguments}}}'
            else:
                text = json.dumps({"tool": call.name, "arguments": arguments})
        else:
            with self._reading():
                text = _choice_text(choice)
        return Completion(text, _finish(choice), prompt_tokens, completion_tokens, time.perf_counter() - start)

    def _call(self, request):
        """``request()`` with retries, all within the total deadline; every failure said in terms of this server."""
        start, tries = time.monotonic(), 0
        while True:
            remaining = self.deadline - (time.monotonic() - start)
            try:
                return self._once(request, remaining)
            except self._openai.RateLimitError as err:
                wait = _retry_after(err)
                asked = f"; it asks to retry after {wait:g} s" if wait is not None else ""
                if wait is not None and wait > self.deadline - (time.monotonic() - start):
                    raise RateLimitError(f"{self._server} rate-limited this client (429){asked}, past this call's "
                                         f"{self.deadline:g} s deadline: {_server_message(err)}", wait) from err
                failure = RateLimitError(f"{self._server} rate-limited this client (429) in {tries + 1} tries"
                                         f"{asked}: {_server_message(err)}", wait)
            except self._openai.AuthenticationError as err:
                raise PermissionError(f"the server at {self._server} refused the API key (set $OPENAI_API_KEY): "
                                      f"{_server_message(err)}") from err
            except self._openai.APIStatusError as err:
                status = getattr(err, "status_code", None)
                failure = ServerError(f"the server at {self._server} answered {status}: {_server_message(err)}",
                                      status)
                if status is None or status < 500:  # the request itself is refused: trying again changes nothing
                    raise failure from err
                wait = _retry_after(err)
            except self._openai.APITimeoutError as err:
                failure, wait = TimeoutError(f"{self._server} did not answer within {self.client.timeout} s per "
                                             f"request, in {tries + 1} tries"), None
                failure.__cause__ = err
            except self._openai.APIConnectionError as err:
                cause = err.__cause__ or err
                what = (f"cannot reach {self._server}" if "Connect" in type(cause).__name__ else
                        f"the connection to {self._server} was reset or closed before a complete answer")
                failure, wait = ConnectionError(f"{what} ({tries + 1} tries): {type(cause).__name__}: {cause}"), None
                failure.__cause__ = err
            if tries >= self.max_retries:
                raise failure
            wait = wait if wait is not None else min(_BACKOFF_S[0] * 2**tries, _BACKOFF_S[1])
            if wait > self.deadline - (time.monotonic() - start):
                raise failure
            time.sleep(wait)
            tries += 1

    def _once(self, request, remaining: float):
        """One ``request()`` within ``remaining`` seconds (httpx's timeout bounds each read, not the whole body)."""
        box: dict = {}

        def target():
            try:
                box["response"] = request()
            except BaseException as err:  # handed to the caller's thread below
                box["error"] = err

        worker = threading.Thread(target=target, daemon=True)
        worker.start()
        worker.join(max(remaining, 0.0))
        if worker.is_alive():  # the request thread is abandoned; its socket closes when the server gives up
            raise TimeoutError(f"no complete answer from {self._server} within the {self.deadline:g} s deadline")
        err = box.get("error")
        if err is None:
            return box["response"]
        if isinstance(err, _ResponseTooLarge):
            raise ResponseError(f"the server at {self._server} sent more than {self.max_response_bytes} bytes: "
                                f"{err}") from err
        if isinstance(err, (self._openai.APIResponseValidationError, json.JSONDecodeError, UnicodeDecodeError)):
            raise ResponseError(f"the server at {self._server} sent a body that is not a completion "
                                f"({type(err).__name__}: {err})") from err
        if isinstance(err, self._openai.OpenAIError):
            raise err  # handled by _call
        if isinstance(err, OSError) or type(err).__module__.split(".")[0] in ("httpx", "httpx2", "httpcore"):
            raise ConnectionError(f"the connection to {self._server} failed: {type(err).__name__}: {err}") from err
        raise err

    @property
    def _server(self) -> str:
        return str(self.client.base_url)

    @contextlib.contextmanager
    def _reading(self):
        """Any surprise in the response's shape becomes one error naming the server."""
        try:
            yield
        except ResponseError as err:
            raise ResponseError(f"the server at {self.client.base_url} sent an invalid response: {err}") from None
        except (AttributeError, TypeError, ValueError, KeyError, IndexError) as err:
            raise ResponseError(f"the server at {self.client.base_url} sent an invalid response: "
                                f"{type(err).__name__}: {err}") from err

    def generate_batch(self, prompts: Sequence[Prompt], *, max_tokens: int = 256, stop: Sequence[str] = (),
                       temperature: float = 0.0, seed: int | None = None, top_p: float = 1.0) -> list[Completion]:
        """One completion per prompt, in order, with up to ``max_concurrency`` requests in flight; prompt ``i``
        gets ``seed + i``."""
        from concurrent.futures import ThreadPoolExecutor

        check_generate_args(max_tokens, temperature, 1, top_p)

        def one(item: tuple[int, Prompt]) -> Completion:
            i, prompt = item
            return self.generate(prompt, max_tokens=max_tokens, stop=stop, temperature=temperature, top_p=top_p,
                                 seed=None if seed is None else seed + i)[0]

        pool = ThreadPoolExecutor(min(self.max_concurrency, max(1, len(prompts))))
        try:
            return list(pool.map(one, enumerate(prompts)))
        finally:  # on an error or an interrupt, queued prompts are dropped rather than waited for
            pool.shutdown(wait=False, cancel_futures=True)

    def next_token_top_logprobs(self, prompt: str, k: int = 20) -> dict[str, float]:
        """The server's ``k`` most likely next tokens after ``prompt`` (text) and their log-probabilities.

        The most OpenAI-style servers offer (``k <= 20``): an approximation of the full
        distribution that ``next_token_logprobs`` of a local backend gives exactly.
        """
        if not 1 <= k <= 20:
            raise ValueError(f"k must lie in [1, 20] (the HTTP API's limit), got {k}")
        response = self._call(lambda: self.client.completions.create(model=self.name, prompt=prompt, max_tokens=1,
                                                                     temperature=0.0, logprobs=k))
        with self._reading():
            logprobs = _choices(response, 1)[0].logprobs
            if logprobs is None or not logprobs.top_logprobs:
                raise NotImplementedError(f"the server at {self._server} sent no log-probabilities for logprobs={k}")
            top = dict(logprobs.top_logprobs[0])
            if len(top) > k + 1:  # the API may add the sampled token to the k most likely
                raise ResponseError(f"{len(top)} top logprobs for k={k}")
            _check_logprobs(tuple(top.values()))
        return top

    def probe_logprobs(self, top_k: int = 0) -> bool:
        """Whether the server sends per-token log-probabilities (``top_k`` = 0) or top alternatives (``top_k`` >= 1),
        asked once with a one-token request and remembered; a server that sends none leaves
        ``capabilities.top_logprobs_k`` at 0."""
        key = min(top_k, 1)
        if key not in self._logprobs_probed:
            try:
                if top_k:
                    self.next_token_top_logprobs("Hello", k=min(top_k, 20))
                else:
                    self.generate([{"role": "user", "content": "Hello"}] if self.capabilities.chat_template
                                  else "Hello", max_tokens=1, logprobs=True)
                self._logprobs_probed[key] = True
            except NotImplementedError:
                self._logprobs_probed[key] = False
                self.capabilities = dataclasses.replace(self.capabilities, top_logprobs_k=0)
        return self._logprobs_probed[key]

    def next_token_logprobs(self, token_ids: Sequence[int]):
        raise NotImplementedError("OpenAI-compatible servers return at most the top 20 logprobs per token, not the "
                                  "full vocabulary; use the 'embedded' or 'hf' backend for exact distributions")

    def tokenize(self, text: str) -> list[int]:
        raise NotImplementedError("tokenisation is not part of the OpenAI HTTP API")

    def detokenize(self, token_ids: Sequence[int]) -> str:
        raise NotImplementedError("tokenisation is not part of the OpenAI HTTP API")

    def __repr__(self) -> str:
        return f"OpenAIModel({self.name!r}, base_url={str(self.client.base_url)!r})"


class ResponseError(RuntimeError):
    """The server answered, but not with a valid completion (the message names the server and the fault)."""


class ServerError(RuntimeError):
    """The server answered with an error status (``status``); the message names the server and its reason."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RateLimitError(ServerError):
    """The server rate-limited this client (429); ``retry_after`` is the wait it asked for, in seconds, if any."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message, 429)
        self.retry_after = retry_after


class _ResponseTooLarge(Exception):
    """Raised while reading a body past ``max_response_bytes`` (not an httpx error: the client must not retry)."""


def _capped_http_client(openai, max_bytes: int):
    """The openai client's own HTTP client class, with a transport that stops reading a body past ``max_bytes``.

    The openai package ships with ``httpx`` or its successor; the transport API is the same in both.
    """
    import importlib

    base = next(c for c in openai.DefaultHttpxClient.__mro__[1:] if c.__name__ == "Client")
    httpx = importlib.import_module(base.__module__.split(".")[0])

    class CappedStream(httpx.SyncByteStream):
        def __init__(self, stream) -> None:
            self._stream = stream

        def __iter__(self):
            total = 0
            for chunk in self._stream:
                total += len(chunk)
                if total > max_bytes:
                    raise _ResponseTooLarge(f"the body passed {max_bytes} bytes")
                yield chunk

        def close(self) -> None:
            self._stream.close()

    class CappedTransport(httpx.BaseTransport):
        def __init__(self) -> None:
            self._inner = httpx.HTTPTransport()

        def handle_request(self, request):
            response = self._inner.handle_request(request)
            length = response.headers.get("content-length", "")
            if length.isdigit() and int(length) > max_bytes:
                response.close()
                raise _ResponseTooLarge(f"Content-Length {length}")
            return httpx.Response(response.status_code, headers=response.headers, stream=CappedStream(response.stream),
                                  extensions=response.extensions)

        def close(self) -> None:
            self._inner.close()

    return openai.DefaultHttpxClient(transport=CappedTransport())


def _retry_after(err) -> float | None:
    """The seconds a ``Retry-After`` header (a number of seconds) asks for, or None."""
    headers = getattr(getattr(err, "response", None), "headers", None) or {}
    try:
        value = float(headers.get("retry-after", ""))
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _server_message(err) -> str:
    body = getattr(err, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])[:300]
    return str(getattr(err, "message", err))[:300]


def _finish(choice) -> str:
    """The finish reason: ``length``, ``content_filter`` (kept: the text was withheld, not finished) or ``stop``."""
    reason = getattr(choice, "finish_reason", None)
    return reason if reason in ("length", "content_filter") else "stop"


def _check_within_max_tokens(completion_tokens: int, scored: list, max_tokens: int, n: int) -> None:
    """More tokens than ``max_tokens`` allows, by the server's own count, is not an answer to this request."""
    if completion_tokens > max_tokens * n:
        raise ResponseError(f"{completion_tokens} completion tokens for max_tokens={max_tokens}, n={n}")
    for score in scored:
        if score is not None and len(score[0]) > max_tokens:
            raise ResponseError(f"a choice of {len(score[0])} tokens for max_tokens={max_tokens}")


def _choices(response, n: int, fewer_ok: bool = False) -> list:
    """The response's choices: exactly ``n``, or (``fewer_ok``) between 1 and ``n`` for a server that ignores n."""
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list):
        raise ResponseError(f"no list of choices (got {type(response).__name__})")
    if not (1 <= len(choices) <= n if fewer_ok else len(choices) == n):
        raise ResponseError(f"{len(choices)} choices for n={n}")
    return choices


def _cut_at_stop(completion: Completion, stop: Sequence[str]) -> Completion:
    """The text up to the earliest stop string, which some servers (transformers serve) send back with it; the
    per-token log-probabilities keep the tokens wholly before the cut."""
    text, cut = apply_stop(completion.text, stop)
    if not cut:
        return completion
    tokens, logprobs = completion.tokens, completion.logprobs
    if tokens is not None:
        ends = list(itertools.accumulate(len(t) for t in tokens))
        keep = sum(end <= len(text) for end in ends)
        tokens, logprobs = tokens[:keep], logprobs[:keep]
    return dataclasses.replace(completion, text=text, finish_reason="stop", tokens=tokens, logprobs=logprobs,
                               completion_tokens=len(tokens) if tokens is not None else completion.completion_tokens)


def _usage(response) -> tuple[int, int]:
    """(prompt, completion) token counts; 0 where the server reports none (usage is optional)."""
    usage = getattr(response, "usage", None)
    counts = tuple(getattr(usage, name, None) or 0 for name in ("prompt_tokens", "completion_tokens"))
    if not all(isinstance(c, int) and c >= 0 for c in counts):
        raise ResponseError(f"token counts {counts} are not counts")
    return counts


def _choice_text(choice) -> str:
    message = getattr(choice, "message", None)
    holder, name = (message, "content") if message is not None else (choice, "text")
    if not _field_sent(holder, name):
        raise ResponseError(f"a choice without a {name!r} field")
    text = getattr(holder, name, None)
    if text is None:  # a refusal, or a reasoning model cut off by max_tokens: null is the empty text
        return ""
    if not isinstance(text, str):
        raise ResponseError(f"a choice whose text is a {type(text).__name__}, not a string")
    return text


def _field_sent(obj, name: str) -> bool:
    """Whether the server's JSON had ``name`` at all (a null counts as sent); the openai client's models record
    the fields they were given."""
    fields = getattr(obj, "model_fields_set", None)
    extra = getattr(obj, "model_extra", None) or {}
    return name in fields or name in extra if fields is not None else hasattr(obj, name)


def _check_logprobs(values: tuple[float, ...]) -> None:
    # -inf is a probability of 0; NaN, None and positive values are not log-probabilities.
    bad = [v for v in values if not (isinstance(v, (int, float)) and not math.isnan(v) and v <= 1e-6)]
    if bad:
        raise ResponseError(f"log-probabilities must be numbers <= 0, got {bad[:3]}")


def _choice_logprobs(choice) -> tuple[tuple[str, ...], tuple[float, ...]] | None:
    """``(tokens, logprobs)`` from a choice of either endpoint, or None when the server sent none."""
    logprobs = getattr(choice, "logprobs", None)
    if logprobs is None:
        return None
    content = getattr(logprobs, "content", None)
    if content is not None:  # /chat/completions: a list of {token, logprob, top_logprobs}
        tokens, values = tuple(t.token for t in content), tuple(t.logprob for t in content)
    else:
        tokens, values = getattr(logprobs, "tokens", None), getattr(logprobs, "token_logprobs", None)
        if tokens is None or values is None:
            return None
        tokens, values = tuple(tokens), tuple(values)
    if len(tokens) != len(values) or not all(isinstance(t, str) for t in tokens):
        raise ResponseError(f"{len(tokens)} tokens with {len(values)} log-probabilities")
    _check_logprobs(values)
    return tokens, tuple(float(v) for v in values)


def _choice_token_counts(texts: list[str], scored: list, total: int) -> list[int]:
    """Completion tokens per choice: counted from its logprobs where the server sent them; otherwise the
    usage total, shared out in proportion to the texts' lengths (the API reports only the total)."""
    if all(score is not None for score in scored):
        return [len(score[0]) for score in scored]
    if len(texts) == 1:
        return [total]
    chars = sum(len(t) for t in texts)
    shares = [round(total * len(t) / chars) if chars else total // len(texts) for t in texts]
    shares[-1] += total - sum(shares)  # the shares add up to the reported total
    return shares
