"""A scripted model for tests: replays given outputs or calls a function, and records every call.

Never for results: a reproduction's numbers must come from a real model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from iclr24.llm.base import Capabilities, Completion, Prompt, apply_stop, check_generate_args, with_system
from iclr24.llm.structured import check_complete, output_format

__all__ = ["ScriptedModel"]


class ScriptedModel:
    """Replays ``outputs`` in order (or calls ``outputs(prompt, call_index)``), applying ``stop`` and
    ``max_tokens`` (a token is a character here) as a real backend would.

    ``logprobs``, when given, maps token ids to a full next-token distribution (a list or tensor),
    which makes ``next_token_logprobs`` available for tests of methods that need it. ``chat`` makes
    it report ``capabilities.chat_template`` as a chat server does, ``grammar`` ``capabilities.grammar`` as a
    constrained backend does.
    """

    name = "scripted"

    def __init__(self, outputs: Sequence[str] | Callable[[Prompt, int], str], logprobs=None,
                 vocab_size: int = 256, chat: bool = False, grammar: bool = False) -> None:
        self._outputs, self._logprobs, self.vocab_size = outputs, logprobs, vocab_size
        self.calls: list[dict] = []
        # chat=True stands in for a chat server: methods then send it messages rather than text
        # grammar=True stands in for a constrained backend (methods then send it a response_format); an output
        # outside a response_format it is sent is an error either way
        self.capabilities = Capabilities(full_logits=logprobs is not None, top_logprobs_k=0, chat_template=chat,
                                         grammar=grammar)

    def generate(self, prompt: Prompt, *, max_tokens: int = 256, stop: Sequence[str] = (), temperature: float = 0.0,
                 top_p: float = 1.0, seed: int | None = None, n: int = 1, system: str | None = None,
                 logprobs: bool = False, response_format=None) -> list[Completion]:
        """Replays the next output; with ``logprobs`` each character is a token of log-probability 0 (a script
        is certain of what it says). Under ``response_format`` an output outside the format is an error."""
        check_generate_args(max_tokens, temperature, n, top_p)
        fmt = output_format(response_format)
        prompt = with_system(prompt, system)
        results = []
        for _ in range(n):
            index = len(self.calls)
            self.calls.append({"prompt": prompt, "max_tokens": max_tokens, "stop": list(stop),
                               "temperature": temperature, "top_p": top_p, "seed": seed})
            if callable(self._outputs):
                raw = self._outputs(prompt, index)
            elif index < len(self._outputs):
                raw = self._outputs[index]
            else:
                raise IndexError(f"ScriptedModel ran out of outputs after {len(self._outputs)} calls")
            text, stopped = apply_stop(raw, stop)
            finish = "stop" if stopped or len(text) <= max_tokens else "length"
            text = text[:max_tokens]
            parsed = check_complete(fmt, text, finish)
            scored = (tuple(text), (0.0,) * len(text)) if logprobs else (None, None)
            results.append(Completion(text, finish, len(str(prompt)), len(text), 0.0, *scored, parsed=parsed))
        return results

    def next_token_logprobs(self, token_ids: Sequence[int]):
        if self._logprobs is None:
            raise NotImplementedError("this ScriptedModel was given no logprobs table")
        return self._logprobs(list(token_ids))

    def tokenize(self, text: str) -> list[int]:
        return [ord(c) % self.vocab_size for c in text]

    def detokenize(self, token_ids: Sequence[int]) -> str:
        return "".join(chr(i) for i in token_ids)

    def __repr__(self) -> str:
        return f"ScriptedModel({len(self.calls)} calls)"

