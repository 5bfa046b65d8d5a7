"""Any OpenAI-compatible server (vLLM, llama.cpp server, Ollama, hosted APIs) through the ``openai`` client.

Chat messages go to ``/chat/completions``, text prompts to ``/completions``. Retries with
exponential backoff on 429 and 5xx are the client's (``max_retries``). Over HTTP only the top
``top_logprobs`` alternatives per token are available (at most 20), never the full
vocabulary: methods that need exact next-token distributions (EFT) must use a local backend.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence

from iclr24.core.checks import check_int
from iclr24.llm.base import Capabilities, Completion, Prompt, check_generate_args, with_system

__all__ = ["OpenAIModel"]


class OpenAIModel:
    """Args:
        model: the served model's name.
        base_url: the server (default ``$OPENAI_BASE_URL``, else OpenAI's).
        api_key: default ``$OPENAI_API_KEY`` (``"EMPTY"`` for local servers that ignore it).
        timeout: seconds per request; max_retries: retries on 429/5xx/connection errors.
        max_concurrency: requests in flight at once in ``generate_batch`` (servers such as vLLM batch them).
    """

    def __init__(self, model: str | None = None, *, base_url: str | None = None, api_key: str | None = None,
                 timeout: float = 60.0, max_retries: int = 3, max_concurrency: int = 8, chat: bool = True) -> None:
        import openai

        self.max_concurrency = check_int("max_concurrency", max_concurrency, minimum=1)
        if not isinstance(chat, bool):
            raise TypeError(f"chat must be True or False, got {chat!r}")

        self._openai = openai
        self.name = model or os.environ.get("ICLR24_OPENAI_MODEL") or ""
        if not self.name:
            raise ValueError("the openai backend needs a model name: get_model('openai', model=...) or "
                             "$ICLR24_OPENAI_MODEL")
        self.client = openai.OpenAI(base_url=base_url or os.environ.get("OPENAI_BASE_URL"),
                                    api_key=api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
                                    timeout=timeout, max_retries=max_retries)
        # The server renders chat messages with its own template; a base model served without one cannot.
        self.capabilities = Capabilities(full_logits=False, top_logprobs_k=20, chat_template=chat, grammar=False)

    def generate(self, prompt: Prompt, *, max_tokens: int = 256, stop: Sequence[str] = (), temperature: float = 0.0,
                 top_p: float = 1.0, seed: int | None = None, n: int = 1, system: str | None = None,
                 logprobs: bool = False) -> list[Completion]:
        """Text to ``/completions``, chat messages to ``/chat/completions``; ``logprobs`` asks the server for
        each generated token's log-probability (``Completion.tokens`` / ``.logprobs``)."""
        check_generate_args(max_tokens, temperature, n, top_p)
        prompt = with_system(prompt, system)
        if not isinstance(prompt, str) and not self.capabilities.chat_template:
            raise ValueError(f"chat messages need a server with a chat template; {self.name!r} was built with "
                             f"chat=False: pass a text prompt")
        common = {"model": self.name, "max_tokens": max_tokens, "temperature": temperature, "n": n,
                  **({"top_p": top_p} if top_p != 1 else {}), **({"stop": list(stop)} if stop else {}),
                  **({"seed": seed} if seed is not None else {})}
        start = time.perf_counter()

        def request():
            if isinstance(prompt, str):
                return self.client.completions.create(prompt=prompt, **common, **({"logprobs": 1} if logprobs else {}))
            return self.client.chat.completions.create(messages=list(prompt), **common,
                                                       **({"logprobs": True} if logprobs else {}))

        response = self._call(request)
        duration = time.perf_counter() - start
        choices = list(response.choices or [])
        if len(choices) != n:
            raise RuntimeError(f"the server at {self.client.base_url} returned {len(choices)} choices for n={n}")
        texts = [_choice_text(c) for c in choices]
        scored = [_choice_logprobs(c) for c in choices]
        usage = response.usage
        prompt_tokens = getattr(usage, "prompt_tokens", 0) or 0
        counts = _choice_token_counts(texts, scored, getattr(usage, "completion_tokens", 0) or 0)
        return [Completion(text, "length" if choice.finish_reason == "length" else "stop", prompt_tokens, count,
                           duration, *(score if logprobs and score else (None, None)))
                for text, choice, score, count in zip(texts, choices, scored, counts)]

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
        message = response.choices[0].message
        if message.tool_calls:
            call = message.tool_calls[0].function
            try:
                arguments = json.loads(call.arguments or "{}")
            except json.JSONDecodeError:  # left for the caller's repairs, as the model wrote it
                text = f'{{"tool": {json.dumps(call.name)}, "arguments": {call.arguments}}}'
            else:
                text = json.dumps({"tool": call.name, "arguments": arguments})
        else:
            text = message.content or ""
        usage = response.usage
        finish = "length" if response.choices[0].finish_reason == "length" else "stop"
        return Completion(text, finish, usage.prompt_tokens if usage else 0,
                          usage.completion_tokens if usage else 0, time.perf_counter() - start)

    def _call(self, request):
        try:
            return request()
        except self._openai.AuthenticationError as err:
            raise PermissionError(f"the server at {self.client.base_url} refused the API key "
                                  f"(set $OPENAI_API_KEY): {err}") from err
        except self._openai.APIConnectionError as err:
            raise ConnectionError(f"cannot reach {self.client.base_url}: {err}") from err

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

        with ThreadPoolExecutor(min(self.max_concurrency, max(1, len(prompts)))) as pool:
            return list(pool.map(one, enumerate(prompts)))

    def next_token_top_logprobs(self, prompt: str, k: int = 20) -> dict[str, float]:
        """The server's ``k`` most likely next tokens after ``prompt`` (text) and their log-probabilities.

        The most OpenAI-style servers offer (``k <= 20``): an approximation of the full
        distribution that ``next_token_logprobs`` of a local backend gives exactly.
        """
        if not 1 <= k <= 20:
            raise ValueError(f"k must lie in [1, 20] (the HTTP API's limit), got {k}")
        try:
            response = self.client.completions.create(model=self.name, prompt=prompt, max_tokens=1, temperature=0.0,
                                                      logprobs=k)
        except self._openai.APIConnectionError as err:
            raise ConnectionError(f"cannot reach {self.client.base_url}: {err}") from err
        logprobs = response.choices[0].logprobs
        if logprobs is None or not logprobs.top_logprobs:
            raise NotImplementedError(f"the server at {self.client.base_url} returned no logprobs")
        return dict(logprobs.top_logprobs[0])

    def next_token_logprobs(self, token_ids: Sequence[int]):
        raise NotImplementedError("OpenAI-compatible servers return at most the top 20 logprobs per token, not the "
                                  "full vocabulary; use the 'embedded' or 'hf' backend for exact distributions")

    def tokenize(self, text: str) -> list[int]:
        raise NotImplementedError("tokenisation is not part of the OpenAI HTTP API")

    def detokenize(self, token_ids: Sequence[int]) -> str:
        raise NotImplementedError("tokenisation is not part of the OpenAI HTTP API")

    def __repr__(self) -> str:
        return f"OpenAIModel({self.name!r}, base_url={str(self.client.base_url)!r})"


def _choice_text(choice) -> str:
    message = getattr(choice, "message", None)
    text = (message.content if message is not None else getattr(choice, "text", None)) or ""
    if not isinstance(text, str):
        raise RuntimeError(f"the server returned a non-text completion: {type(text).__name__}")
    return text


def _choice_logprobs(choice) -> tuple[tuple[str, ...], tuple[float, ...]] | None:
    """``(tokens, logprobs)`` from a choice of either endpoint, or None when the server sent none."""
    logprobs = getattr(choice, "logprobs", None)
    if logprobs is None:
        return None
    content = getattr(logprobs, "content", None)
    if content is not None:  # /chat/completions: a list of {token, logprob, top_logprobs}
        return tuple(t.token for t in content), tuple(float(t.logprob) for t in content)
    tokens, values = getattr(logprobs, "tokens", None), getattr(logprobs, "token_logprobs", None)
    if tokens is None or values is None:
        return None
    return tuple(tokens), tuple(float("nan") if v is None else float(v) for v in values)


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
