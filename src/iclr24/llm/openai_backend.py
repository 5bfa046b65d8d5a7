"""Any OpenAI-compatible server (vLLM, llama.cpp server, Ollama, hosted APIs) through the ``openai`` client.

Chat messages go to ``/chat/completions``, text prompts to ``/completions``. Retries (``max_retries``, on 429,
5xx and dropped connections) are this module's own, within one total deadline per call: a server that asks to be
retried later than the deadline allows (``Retry-After``) is reported as rate-limited at once. Every failure is one
of the library's errors naming the server and the cause: :class:`PermissionError` (the key), :class:`TimeoutError`,
:class:`ConnectionError` (refused, reset), :class:`RateLimitError`, :class:`ServerError` (an error status, or a
redirect to another origin), :class:`ResponseError` (an answer that is not a valid completion: malformed, larger than
``max_response_bytes`` once decompressed, a missing text, more tokens than ``max_tokens`` allows by the server's own
count, logprobs that do not spell the text, choices with bad indices) and :class:`InvalidToolCallError`. Over HTTP
only the top ``top_logprobs`` alternatives per token are available (at most 20), never the full vocabulary: methods
that need exact next-token distributions (EFT) must use a local backend.

Servers differ; the client makes them behave alike: a stop string sent back with the text is cut, a server that
ignores or refuses ``n`` gets one request per missing choice, and ``logprobs=True`` from a server that sends none is
an error naming it (``probe_logprobs`` finds that out up front).

The HTTP layer is guarded (issue #59): the deadline bounds every connect, TLS handshake, read and write of the
call's own thread (no helper thread, so nothing outlives a call); a gzip or deflate body is decoded as it arrives and
refused once it passes ``max_response_bytes``; JSON too deep or with numbers too long for Python's parser is a
:class:`ResponseError`; a redirect to another origin is refused unless ``allow_cross_origin_redirects=True``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import itertools
import json
import logging
import math
import os
import re
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Mapping, Sequence

from iclr24.core.checks import check_int
from iclr24.llm.base import (
    PROBE_TIMEOUT_S,
    Capabilities,
    Completion,
    Prompt,
    apply_stop,
    check_generate_args,
    check_messages,
    with_system,
)
from iclr24.llm.structured import check_complete, output_format

__all__ = ["InvalidToolCallError", "OpenAIModel", "RateLimitError", "ResponseError", "ServerError",
           "probe_server"]

#: The largest response body read (bytes), counted after decompression: a completion is text; a server sending
#: more is not answering.
MAX_RESPONSE_BYTES = 8 * 2**20
#: The largest token count a server may report: no context window holds more.
MAX_TOKEN_COUNT = 2**31 - 1
_BACKOFF_S = (0.5, 8.0)  # first wait and the longest, doubling in between
_log = logging.getLogger(__name__)


class OpenAIModel:
    """Args:
        model: the served model's name.
        base_url: the server (default ``$OPENAI_BASE_URL``, else OpenAI's).
        api_key: default ``$OPENAI_API_KEY`` (``"EMPTY"`` for local servers that ignore it).
        timeout: seconds per request; max_retries: retries on 429/5xx/connection errors.
        max_concurrency: requests in flight at once in ``generate_batch`` (servers such as vLLM batch them).
        deadline: total seconds per call, retries and waits included; it bounds every connect, read and write.
        max_response_bytes: the largest response body read (default 8 MiB), counted after gzip/deflate decoding.
        allow_cross_origin_redirects: follow a redirect to another scheme, host or port (default False: such a
            redirect is a :class:`ServerError`, since a 307/308 would send the prompt there; the key never is).
    """

    def __init__(self, model: str | None = None, *, base_url: str | None = None, api_key: str | None = None,
                 timeout: float = 60.0, max_retries: int = 3, max_concurrency: int = 8, chat: bool = True,
                 deadline: float | None = None, max_response_bytes: int = MAX_RESPONSE_BYTES,
                 allow_cross_origin_redirects: bool = False) -> None:
        import openai

        self.max_concurrency = check_int("max_concurrency", max_concurrency, minimum=1)
        self.max_retries = check_int("max_retries", max_retries, minimum=0)
        self.max_response_bytes = check_int("max_response_bytes", max_response_bytes, minimum=1024)
        if not isinstance(chat, bool):
            raise TypeError(f"chat must be True or False, got {chat!r}")
        if not isinstance(allow_cross_origin_redirects, bool):
            raise TypeError(f"allow_cross_origin_redirects must be True or False, got "
                            f"{allow_cross_origin_redirects!r}")
        self.allow_cross_origin_redirects = allow_cross_origin_redirects

        self._openai = openai
        self.name = model or os.environ.get("ICLR24_OPENAI_MODEL") or ""
        if not self.name:
            raise ValueError("the openai backend needs a model name: get_model('openai', model=...) or "
                             "$ICLR24_OPENAI_MODEL")
        if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        # httpx's timeout bounds each read, so a body trickled byte by byte never trips it: every call also
        # has a total deadline: by default the time all tries could take, with the client's waits between
        # tries (up to 60 s when a server sends Retry-After). The transport cuts each socket operation to it.
        default = timeout * (max_retries + 1) + 60.0 * max_retries + 1.0
        self.deadline = float(deadline) if deadline is not None else default
        if not (math.isfinite(self.deadline) and self.deadline > 0):
            raise ValueError(f"deadline must be a positive number of seconds, got {deadline!r}")
        self._deadline = _Deadline()
        # Retries are ours (max_retries=0 for the client), so each one can be weighed against the deadline.
        self.client = openai.OpenAI(base_url=base_url or os.environ.get("OPENAI_BASE_URL"),
                                    api_key=api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
                                    timeout=timeout, max_retries=0,
                                    http_client=_guarded_http_client(openai, self.max_response_bytes, self._deadline,
                                                                     allow_cross_origin_redirects))
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
            common["response_format"] = fmt.to_openai()  # a schema, or {"type": "json_object"} as it was given
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
            for text, choice, score in zip(texts, choices, scored):
                if score is not None:
                    _check_spelling(text, _spelled(choice, score[0]), choice.index)
            prompt_tokens, completion_tokens = _usage(response)
            _check_within_max_tokens(completion_tokens, scored, max_tokens, len(choices))
        if logprobs and any(score is None for score in scored):
            raise NotImplementedError(f"the server at {self._server} sent no log-probabilities for logprobs=True; "
                                      f"use a server that returns them (vLLM, llama.cpp server) or a local backend")
        counts = _choice_token_counts(texts, scored, completion_tokens)
        completions = [_cut_at_stop(Completion(text, _finish(choice), prompt_tokens, count, duration,
                                               *(score if logprobs else (None, None))), stop)
                       for text, choice, score, count in zip(texts, choices, scored, counts)]
        try:
            completions = [dataclasses.replace(c, parsed=check_complete(fmt, c.text, c.finish_reason))
                           for c in completions]
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
        ``{"tool": NAME, "arguments": {...}}`` (what :func:`iclr24.l2mac.parse_tool_call` reads), built from the
        parsed call, never spliced from its raw text; a reply without one as its plain content. A call to a tool
        not offered (or not the forced one), or whose ``arguments`` are not a JSON object, raises
        :class:`InvalidToolCallError`."""
        check_generate_args(max_tokens, temperature, 1)
        check_messages(messages)
        if not isinstance(tools, Mapping) or not tools:
            raise ValueError(f"tools must be a non-empty dict of name -> (description, JSON schema), got {tools!r}")
        if force is not None and force not in tools:
            raise ValueError(f"force must name one of the tools ({', '.join(map(repr, tools))}), got {force!r}")
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
            text = self._tool_call_text(message.tool_calls[0], tools, force, _finish(choice))
        else:
            with self._reading():
                text = _choice_text(choice)
        return Completion(text, _finish(choice), prompt_tokens, completion_tokens, time.perf_counter() - start)

    def _tool_call_text(self, call, tools, force: str | None, finish_reason: str) -> str:
        """``{"tool": NAME, "arguments": {...}}`` for a valid call; :class:`InvalidToolCallError` for any other."""
        function = getattr(call, "function", None)
        name, raw = getattr(function, "name", None), getattr(function, "arguments", None)
        said = f"the server at {self._server} sent a tool call to {name!r}"
        cut = " (finish_reason 'length': the reply was cut at max_tokens)" if finish_reason == "length" else ""
        if not isinstance(name, str) or name not in tools:
            raise InvalidToolCallError(f"{said}, which is not one of the tools offered "
                                       f"({', '.join(map(repr, tools))})", name, raw)
        if force is not None and name != force:
            raise InvalidToolCallError(f"{said}; force={force!r} asked for that tool", name, raw)
        if raw is None or raw == "":  # a tool without arguments: some servers send "" or nothing
            arguments = {}
        elif not isinstance(raw, str):
            raise InvalidToolCallError(f"{said} whose arguments are a {type(raw).__name__}, not JSON text", name, raw)
        else:
            try:
                arguments = json.loads(raw)
            except (ValueError, RecursionError) as err:  # JSONDecodeError, a number too long, nesting too deep
                raise InvalidToolCallError(f"{said} whose arguments are not valid JSON{cut} "
                                           f"({type(err).__name__}: {str(err)[:200]}): {raw[:200]!r}",
                                           name, raw) from None
        if not isinstance(arguments, dict):
            raise InvalidToolCallError(f"{said} whose arguments are a JSON {type(arguments).__name__}, not an "
                                       f"object{cut}: {raw[:200]!r}", name, raw)
        return json.dumps({"tool": name, "arguments": arguments})

    def _call(self, request):
        """``request()`` with retries, all within the total deadline; every failure said in terms of this server.

        The deadline holds for this thread while the call runs: the transport cuts every connect, read and write to
        the time left, so the request runs here, in the caller's thread, and ends with the call."""
        start, tries = time.monotonic(), 0
        with self._deadline.until(start + self.deadline):
            while True:
                try:
                    return self._send(request)
                except self._openai.RateLimitError as err:
                    wait = _retry_after(err)
                    asked = f"; it asks to retry after {wait:g} s" if wait is not None else ""
                    if wait is not None and wait > self.deadline - (time.monotonic() - start):
                        raise RateLimitError(f"{self._server} rate-limited this client (429){asked}, past this "
                                             f"call's {self.deadline:g} s deadline: {_server_message(err)}",
                                             wait) from err
                    failure = RateLimitError(f"{self._server} rate-limited this client (429) in {tries + 1} tries"
                                             f"{asked}: {_server_message(err)}", wait)
                except self._openai.AuthenticationError as err:
                    raise PermissionError(f"the server at {self._server} refused the API key (set "
                                          f"$OPENAI_API_KEY): {_server_message(err)}") from err
                except self._openai.APIStatusError as err:
                    status = getattr(err, "status_code", None)
                    failure = ServerError(f"the server at {self._server} answered {status}: "
                                          f"{_server_message(err)}", status)
                    if status is None or status < 500:  # the request itself is refused: trying again changes nothing
                        raise failure from err
                    wait = _retry_after(err)
                except self._openai.APITimeoutError as err:
                    if self._deadline.passed():  # a wait for a pooled connection, cut to the deadline
                        raise self._past_deadline() from err
                    failure, wait = TimeoutError(f"{self._server} did not answer within {self.client.timeout} s "
                                                 f"per request, in {tries + 1} tries"), None
                    failure.__cause__ = err
                except self._openai.APIConnectionError as err:
                    cause = err.__cause__ or err
                    what = (f"cannot reach {self._server}" if "Connect" in type(cause).__name__ else
                            f"the connection to {self._server} was reset or closed before a complete answer")
                    failure = ConnectionError(f"{what} ({tries + 1} tries): {type(cause).__name__}: {cause}")
                    failure.__cause__, wait = err, None
                if tries >= self.max_retries:
                    raise failure
                wait = wait if wait is not None else min(_BACKOFF_S[0] * 2**tries, _BACKOFF_S[1])
                if wait > self.deadline - (time.monotonic() - start):
                    raise failure
                time.sleep(wait)
                tries += 1

    def _send(self, request):
        """One ``request()``; what the transport refused (the deadline, the size, a redirect, an unreadable body)
        becomes this library's error, whether the openai client passes it on as it is or wrapped (older clients
        wrap every exception in ``APIConnectionError``)."""
        try:
            return request()
        except Exception as err:
            refusal = next((e for e in (err, err.__cause__) if isinstance(e, _TransportRefusal)), None)
            if isinstance(refusal, _DeadlinePassed):
                raise self._past_deadline() from refusal
            if isinstance(refusal, _ResponseTooLarge):
                raise ResponseError(f"the server at {self._server} sent a body over max_response_bytes "
                                    f"({self.max_response_bytes} bytes): {refusal}") from refusal
            if isinstance(refusal, _UnreadableBody):
                raise ResponseError(f"the server at {self._server} sent a body that is not a completion: "
                                    f"{refusal}") from refusal
            if isinstance(refusal, _CrossOriginRedirect):
                raise ServerError(f"the server at {self._server} redirected this request ({refusal.status}) to "
                                  f"{refusal.target}, another origin; it was not followed, so the prompt was not "
                                  f"sent there: pass allow_cross_origin_redirects=True to follow such redirects",
                                  refusal.status) from refusal
            if isinstance(err, (self._openai.APIResponseValidationError, json.JSONDecodeError, UnicodeDecodeError)):
                raise ResponseError(f"the server at {self._server} sent a body that is not a completion "
                                    f"({type(err).__name__}: {err})") from err
            if isinstance(err, self._openai.OpenAIError):
                raise  # handled by _call
            if isinstance(err, OSError) or type(err).__module__.split(".")[0] in ("httpx", "httpx2", "httpcore",
                                                                                  "httpcore2"):
                raise ConnectionError(f"the connection to {self._server} failed: {type(err).__name__}: "
                                      f"{err}") from err
            raise

    def _past_deadline(self) -> TimeoutError:
        return TimeoutError(f"no complete answer from {self._server} within the {self.deadline:g} s deadline")

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


#: Where the openai client sends requests when neither ``base_url`` nor ``$OPENAI_BASE_URL`` says.
DEFAULT_BASE_URL = "https://api.openai.com/v1"
_SERVER_HINT = ("start the server, or set $OPENAI_BASE_URL to its address with the API's path (e.g. "
                "http://localhost:8000/v1 for vLLM, http://localhost:8080/v1 for llama.cpp's server, "
                "http://localhost:11434/v1 for Ollama)")


def probe_server(base_url: str | None = None, api_key: str | None = None, *,
                 timeout: float = PROBE_TIMEOUT_S) -> None:
    """Refuse, before any work, an OpenAI-compatible server that cannot serve a run: one ``GET {base_url}/models``
    (the list every such server has), waiting at most ``timeout`` seconds to connect and as long for an answer.

    A :class:`ValueError` naming the URL and what to do when nothing answers there (refused, unknown host, no
    answer in time), when the server refuses the key (401, 403) or has no ``/models`` (404: the URL often lacks its
    ``/v1``), and when the URL is not an http(s) one. Any other answer, an error status included, shows a server
    there; the run's own requests report what it says. ``base_url`` and ``api_key`` default as the backend's do
    (``$OPENAI_BASE_URL``, else OpenAI's; ``$OPENAI_API_KEY``). Redirects are not followed: the key stays here.
    """
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    base = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
    url = f"{base}/models"
    if not re.match(r"https?://[^/\s]", base):
        raise ValueError(f"the OpenAI-compatible server's address {base!r} ($OPENAI_BASE_URL) is not an http(s) URL: "
                         f"{_SERVER_HINT}")
    key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}", "Accept": "application/json"})
    try:
        with urllib.request.build_opener(_NoRedirect).open(request, timeout=timeout):
            return
    except urllib.error.HTTPError as err:  # the server answered
        err.close()
        if err.code in (401, 403):
            raise ValueError(f"the server at {base} refused the API key ({err.code} for GET {url}): set "
                             f"$OPENAI_API_KEY to a key it accepts") from None
        if err.code == 404:
            raise ValueError(f"the server at {base} has no model list (404 for GET {url}): is the API's path "
                             f"missing from $OPENAI_BASE_URL? e.g. http://localhost:8000/v1, not "
                             f"http://localhost:8000") from None
    except (OSError, ValueError, http.client.HTTPException) as err:  # refused, unknown host, no answer, reset
        cause = err.reason if isinstance(err, urllib.error.URLError) else err
        if isinstance(cause, TimeoutError):
            raise ValueError(f"no answer from {url} within {timeout:g} s: is the server up and listening there? "
                             f"{_SERVER_HINT}") from err
        raise ValueError(f"cannot reach an OpenAI-compatible server at {base} (GET {url}: "
                         f"{type(cause).__name__}: {cause}): {_SERVER_HINT}") from err


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer (the server is there); following it could send the key elsewhere."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


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


class InvalidToolCallError(ResponseError):
    """The server sent a tool call that cannot be used as it is: a tool not offered (or not the forced one), or
    ``arguments`` that are not a JSON object. ``name`` and ``arguments`` are the call as sent (raw text), so a caller
    can tell the model what to fix; the call is never passed on as text to be parsed again."""

    def __init__(self, message: str, name: object = None, arguments: object = None) -> None:
        super().__init__(message)
        self.name = name
        self.arguments = arguments


# --- the HTTP layer: a deadline on every socket operation, a cap on the decoded body, no cross-origin redirects ----


class _TransportRefusal(Exception):
    """Raised by the transport for what it will not do (not an httpx error: the client must not retry it)."""


class _DeadlinePassed(_TransportRefusal):
    """The call's deadline passed before, or during, a socket operation."""


class _ResponseTooLarge(_TransportRefusal):
    """The body, as read or as decoded, passed ``max_response_bytes``."""


class _UnreadableBody(_TransportRefusal):
    """The body cannot be decoded, or its JSON cannot be read by Python's parser (too deep, a number too long)."""


class _CrossOriginRedirect(_TransportRefusal):
    def __init__(self, status: int, target: str) -> None:
        super().__init__(f"{status} to {target}")
        self.status, self.target = status, target


class _Deadline(threading.local):
    """The monotonic time by which the current thread's call must end (``at`` None: no call in progress).

    Thread-local, so ``generate_batch``'s threads each keep their own; the network backend reads it at every
    socket operation, whichever pooled connection the operation uses."""

    at: float | None = None

    @contextlib.contextmanager
    def until(self, at: float):
        previous, self.at = self.at, at
        try:
            yield
        finally:
            self.at = previous

    def passed(self) -> bool:
        return self.at is not None and time.monotonic() >= self.at

    def bound(self, timeout: float | None) -> float | None:
        """``timeout`` (None: no limit) cut to the time left; :class:`_DeadlinePassed` when none is left."""
        if self.at is None:
            return timeout
        left = self.at - time.monotonic()
        if left <= 0:
            raise _DeadlinePassed()
        return left if timeout is None else min(timeout, left)

    def run(self, operation, *args, timeout: float | None = None, **kwargs):
        """``operation(*args, timeout=..., **kwargs)`` with its timeout cut to the deadline; its failure once the
        deadline has passed (the cut timeout firing) is :class:`_DeadlinePassed`."""
        bounded = self.bound(timeout)
        try:
            return operation(*args, timeout=bounded, **kwargs)
        except Exception as err:
            if self.passed():
                raise _DeadlinePassed() from err
            raise


class _DeadlineNetworkBackend:
    """httpcore's network backend with every connect and TLS handshake, and every read and write on the streams it
    opens, cut to the current call's deadline. Name resolution (``getaddrinfo``) is the system resolver's and is not
    bounded by it."""

    def __init__(self, inner, deadline: _Deadline) -> None:
        self._inner, self._deadline = inner, deadline

    def connect_tcp(self, host, port, timeout=None, **options):
        stream = self._deadline.run(self._inner.connect_tcp, host, port, timeout=timeout, **options)
        return _DeadlineNetworkStream(stream, self._deadline)

    def connect_unix_socket(self, path, timeout=None, **options):
        stream = self._deadline.run(self._inner.connect_unix_socket, path, timeout=timeout, **options)
        return _DeadlineNetworkStream(stream, self._deadline)

    def __getattr__(self, name):  # sleep, and whatever later httpcore versions add
        return getattr(self._inner, name)


class _DeadlineNetworkStream:
    def __init__(self, inner, deadline: _Deadline) -> None:
        self._inner, self._deadline = inner, deadline

    def read(self, max_bytes, timeout=None):
        return self._deadline.run(self._inner.read, max_bytes, timeout=timeout)

    def write(self, buffer, timeout=None):
        return self._deadline.run(self._inner.write, buffer, timeout=timeout)

    def start_tls(self, ssl_context, server_hostname=None, timeout=None):
        stream = self._deadline.run(self._inner.start_tls, ssl_context, server_hostname, timeout=timeout)
        return _DeadlineNetworkStream(stream, self._deadline)

    def close(self) -> None:
        self._inner.close()

    def get_extra_info(self, info):
        return self._inner.get_extra_info(info)

    def __getattr__(self, name):
        return getattr(self._inner, name)


#: Content codings this client decodes itself, each with its zlib window bits; the request asks for no others.
_DECODED_CODINGS = {"gzip": zlib.MAX_WBITS | 16, "x-gzip": zlib.MAX_WBITS | 16, "deflate": zlib.MAX_WBITS}
_MAX_CODINGS = 2  # "gzip" or "deflate", at most stacked once ("gzip, gzip"): each layer is decoded under the cap


def _guarded_http_client(openai, max_bytes: int, deadline: _Deadline, allow_cross_origin_redirects: bool):
    """The openai client's own HTTP client class, with a transport that cuts every socket operation to the call's
    deadline, reads each body whole under ``max_bytes`` (decoded: a 64 KiB gzip body may inflate to gigabytes),
    refuses JSON that Python's parser cannot read, and a response hook that refuses cross-origin redirects.

    The openai package ships with ``httpx`` or its successor ``httpx2`` (with ``httpcore`` / ``httpcore2``); the
    transport and network-backend APIs are the same in both.
    """
    import importlib

    base = next(c for c in openai.DefaultHttpxClient.__mro__[1:] if c.__name__ == "Client")
    httpx = importlib.import_module(base.__module__.split(".")[0])

    class GuardedTransport(httpx.BaseTransport):
        def __init__(self) -> None:
            self._inner = httpx.HTTPTransport()
            pool = getattr(self._inner, "_pool", None)
            if not hasattr(pool, "_network_backend"):  # fail loudly rather than run without the deadline
                raise RuntimeError(f"{httpx.__name__} {getattr(httpx, '__version__', '?')}: its transport has no "
                                   f"connection pool with a network backend, which the openai backend needs to "
                                   f"bound each request by its deadline; install a supported openai/httpx")
            pool._network_backend = _DeadlineNetworkBackend(pool._network_backend, deadline)

        def handle_request(self, request):
            timeouts = request.extensions.get("timeout")
            if isinstance(timeouts, dict):  # the wait for a pooled connection, too, ends at the deadline
                request.extensions["timeout"] = {key: deadline.bound(value) for key, value in timeouts.items()}
            request.headers["Accept-Encoding"] = ", ".join(c for c in _DECODED_CODINGS if c != "x-gzip")
            response = self._inner.handle_request(request)
            try:
                body = _read_body(response.headers, response.stream, max_bytes)
            finally:
                response.close()
            if 200 <= response.status_code < 300:
                _check_json_readable(body)
            headers = httpx.Headers(response.headers)
            headers.pop("Content-Encoding", None)  # decoded here: httpx must not decode it again
            headers["Content-Length"] = str(len(body))
            return httpx.Response(response.status_code, headers=headers, stream=httpx.ByteStream(body),
                                  extensions=response.extensions)

        def close(self) -> None:
            self._inner.close()

    def refuse_cross_origin_redirect(response) -> None:
        if allow_cross_origin_redirects or not response.has_redirect_location:
            return
        source = response.request.url
        try:
            target = source.join(response.headers["Location"])
        except Exception:  # a malformed Location: httpx refuses it itself
            return
        if _origin(target) != _origin(source):
            raise _CrossOriginRedirect(response.status_code, str(target)[:200])

    return openai.DefaultHttpxClient(transport=GuardedTransport(),
                                     event_hooks={"response": [refuse_cross_origin_redirect]})


def _origin(url) -> tuple:
    """(scheme, host, port) with the scheme's default port filled in."""
    return url.scheme, url.host, url.port or {"http": 80, "https": 443}.get(url.scheme)


def _read_body(headers, stream, max_bytes: int) -> bytes:
    """The whole body, decoded from gzip or deflate as it arrives; :class:`_ResponseTooLarge` as soon as what was
    read, or what it decodes to, passes ``max_bytes``."""
    length = headers.get("Content-Length", "")
    if length.isdigit() and int(length) > max_bytes:
        raise _ResponseTooLarge(f"Content-Length {length}")
    coding = headers.get("Content-Encoding", "")
    codings = [c.strip().lower() for c in coding.split(",") if c.strip() and c.strip().lower() != "identity"]
    unknown = [c for c in codings if c not in _DECODED_CODINGS]
    if unknown or len(codings) > _MAX_CODINGS:
        raise _UnreadableBody(f"Content-Encoding {coding!r}: this client decodes gzip or deflate, at most "
                              f"{_MAX_CODINGS} layers, and asked for nothing else")
    chunks = _capped(stream, max_bytes)
    for name in reversed(codings):  # the last coding applied is the first undone
        chunks = _inflated(chunks, name, max_bytes)
    return b"".join(chunks)


def _capped(chunks, max_bytes: int):
    read = 0
    for chunk in chunks:
        read += len(chunk)
        if read > max_bytes:
            raise _ResponseTooLarge(f"the body passed {max_bytes} bytes")
        yield chunk


def _inflated(chunks, coding: str, max_bytes: int):
    """``chunks`` decoded from ``coding`` as they come, never more than ``max_bytes`` in all: each step asks zlib for
    at most the bytes still allowed plus one, so a compression bomb is stopped after ``max_bytes``, not expanded."""
    decompressor = zlib.decompressobj(_DECODED_CODINGS[coding])
    produced, first, raw = 0, True, False
    for chunk in chunks:
        pending = chunk
        while pending and not decompressor.eof:
            try:
                out = decompressor.decompress(pending, max_bytes - produced + 1)
            except zlib.error as err:
                if coding == "deflate" and first and produced == 0 and not raw:
                    # "deflate" is meant to be zlib-wrapped, but some servers send it raw (as httpx also accepts)
                    decompressor, pending, raw = zlib.decompressobj(-zlib.MAX_WBITS), chunk, True
                    continue
                raise _UnreadableBody(f"the body is not valid {coding} ({err})") from None
            produced += len(out)
            if produced > max_bytes:
                raise _ResponseTooLarge(f"decoded from {coding}, the body passed {max_bytes} bytes")
            if out:
                yield out
            pending = decompressor.unconsumed_tail
        first = False
    try:
        tail = decompressor.flush()
    except zlib.error as err:
        raise _UnreadableBody(f"the body is not valid {coding} ({err})") from None
    if produced + len(tail) > max_bytes:
        raise _ResponseTooLarge(f"decoded from {coding}, the body passed {max_bytes} bytes")
    if tail:
        yield tail


def _check_json_readable(body: bytes) -> None:
    """Refuse, in words, JSON that Python's parser raises on other than for a syntax error: nesting deeper than its
    recursion limit (``RecursionError``), an integer of more digits than it converts (``ValueError``). A syntax
    error (an HTML page, a truncated body) is left to the openai client, whose error names it."""
    if not body.strip():
        return
    try:
        json.loads(body)
    except json.JSONDecodeError:
        return
    except RecursionError:
        raise _UnreadableBody("its JSON is nested deeper than Python's parser follows (RecursionError)") from None
    except ValueError as err:  # also a UnicodeDecodeError: a body that is not UTF-8 text
        raise _UnreadableBody(f"its JSON cannot be read ({type(err).__name__}: {str(err)[:200]})") from None


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
    """The response's choices in the order of their ``index``: exactly ``n``, or (``fewer_ok``) between 1 and ``n``
    for a server that ignores n; each index an int in [0, n), none repeated."""
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list):
        raise ResponseError(f"no list of choices (got {type(response).__name__})")
    if not (1 <= len(choices) <= n if fewer_ok else len(choices) == n):
        raise ResponseError(f"{len(choices)} choices for n={n}")
    indices = [getattr(choice, "index", None) for choice in choices]
    for index in indices:
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n:
            raise ResponseError(f"a choice with index {index!r}; expected an int from 0 to {n - 1} for n={n}")
    if len(set(indices)) != len(indices):
        raise ResponseError(f"choices with repeated indices {indices}; each index must appear once")
    return [choice for _, choice in sorted(zip(indices, choices), key=lambda pair: pair[0])]


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
    counts = []
    for name in ("prompt_tokens", "completion_tokens"):
        count = getattr(usage, name, None)
        count = 0 if count is None else count
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_TOKEN_COUNT:
            raise ResponseError(f"usage.{name} is {str(count)[:40]!r}; expected a whole number of tokens from 0 to "
                                f"{MAX_TOKEN_COUNT}")
        counts.append(count)
    return counts[0], counts[1]


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


def _spelled(choice, tokens: tuple[str, ...]) -> str:
    """The text a choice's logprob tokens spell: from their UTF-8 ``bytes`` where every token has them (chat; a
    token may hold part of a character), else the token strings joined."""
    content = getattr(getattr(choice, "logprobs", None), "content", None)
    if content:
        pieces = [getattr(token, "bytes", None) for token in content]
        if all(isinstance(piece, list) and all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b < 256
                                                for b in piece) for piece in pieces):
            return bytes(itertools.chain.from_iterable(pieces)).decode("utf-8", errors="replace")
    return "".join(tokens)


def _check_spelling(text: str, spelled: str, index: int) -> None:
    """The logprob tokens must spell the text: exactly, or the text and then more (a server may leave out of the
    text the stop string or end-of-sequence token it stopped at). Where tokens hold parts of characters (shown as
    U+FFFD) and no bytes came, runs of non-ASCII characters are compared as one unknown each."""
    if spelled.startswith(text):
        return
    if "\ufffd" in spelled and _coarse(spelled).startswith(_coarse(text)):
        return
    raise ResponseError(f"choice {index}'s logprobs tokens spell {_clip(spelled)!r}, which does not begin with its "
                        f"text {_clip(text)!r}; expected tokens that spell the text")


def _coarse(text: str) -> str:
    return re.sub(r"[^\x00-\x7f]+", "\ufffd", text)


def _clip(text: str, chars: int = 80) -> str:
    return text if len(text) <= chars else text[:chars] + "..."


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
