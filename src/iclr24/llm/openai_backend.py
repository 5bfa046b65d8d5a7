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
from iclr24.llm.base import Capabilities, Completion, Prompt, check_generate_args

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
                 timeout: float = 60.0, max_retries: int = 3, max_concurrency: int = 8) -> None:
        import openai

        self.max_concurrency = check_int("max_concurrency", max_concurrency, minimum=1)

        self._openai = openai
        self.name = model or os.environ.get("ICLR24_OPENAI_MODEL") or ""
        if not self.name:
            raise ValueError("the openai backend needs a model name: get_model('openai', model=...) or "
                             "$ICLR24_OPENAI_MODEL")
        self.client = openai.OpenAI(base_url=base_url or os.environ.get("OPENAI_BASE_URL"),
                                    api_key=api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
                                    timeout=timeout, max_retries=max_retries)
        self.capabilities = Capabilities(full_logits=False, top_logprobs_k=20, chat_template=True, grammar=False)

    def generate(self, prompt: Prompt, *, max_tokens: int = 256, stop: Sequence[str] = (), temperature: float = 0.0,
                 seed: int | None = None, n: int = 1) -> list[Completion]:
        check_generate_args(max_tokens, temperature, n)
        common = {"model": self.name, "max_tokens": max_tokens, "temperature": temperature, "n": n,
                  **({"stop": list(stop)} if stop else {}), **({"seed": seed} if seed is not None else {})}
        start = time.perf_counter()

        def request():
            if isinstance(prompt, str):
                response = self.client.completions.create(prompt=prompt, **common)
                return response, [c.text for c in response.choices]
            response = self.client.chat.completions.create(messages=list(prompt), **common)
            return response, [c.message.content or "" for c in response.choices]

        response, texts = self._call(request)
        duration = time.perf_counter() - start
        usage = response.usage
        prompt_tokens = usage.prompt_tokens if usage else 0
        per_choice = (usage.completion_tokens // max(1, n)) if usage else 0
        return [Completion(text, choice.finish_reason or "stop", prompt_tokens, per_choice, duration)
                for text, choice in zip(texts, response.choices)]

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
                       temperature: float = 0.0, seed: int | None = None) -> list[Completion]:
        """One completion per prompt, in order, with up to ``max_concurrency`` requests in flight; prompt ``i``
        gets ``seed + i``."""
        from concurrent.futures import ThreadPoolExecutor

        check_generate_args(max_tokens, temperature, 1)

        def one(item: tuple[int, Prompt]) -> Completion:
            i, prompt = item
            return self.generate(prompt, max_tokens=max_tokens, stop=stop, temperature=temperature,
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
