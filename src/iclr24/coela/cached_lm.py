"""Greedy decoding for CoELA's many similar prompts: reused prompt prefixes and prompt-lookup drafts.

An LLM episode makes about 100 calls, each a ~380-token prompt that repeats most of the previous one's head
(the instructions, the goal, the explored rooms) and a short greedy reply that mostly copies the prompt (a
menu line, or the same message as last time). ``PrefixCachedLM`` wraps a local transformers backend
(``iclr24.llm`` ``embedded`` / ``hf``) and computes the same greedy replies with less work:

- *Prefix reuse*: the key-value cache of the last few prompts is kept; a new prompt encodes only the tokens
  after the longest prefix it shares with one of them.
- *Prompt-lookup decoding* (Saxena 2023; transformers' ``prompt_lookup_num_tokens``): the tokens that followed
  the latest earlier occurrence of the last ``ngram`` tokens are proposed as a draft and checked in one forward
  pass; the greedy tokens are kept up to the first disagreement. The reply is the greedy reply whatever the
  drafts: a draft only saves passes when it is right.

Both change only the shapes of the matrix products (a prompt split in two, several positions in one pass), so a
reply equals the plain greedy reply up to float rounding (a near-tie between two tokens could in principle go
the other way). Greedy calls with a ``response_format`` reuse prefixes too and mask each token with the grammar
(no drafts); a token the grammar forces (the only one it allows: the rest of a menu line once its letter is out)
is taken without a pass of its own. Everything else (sampling, ``n > 1``, stop strings, log-probabilities, a
backend without torch weights) goes to the wrapped model unchanged.
"""

from __future__ import annotations

import dataclasses
import inspect
import time
from collections import OrderedDict
from collections.abc import Sequence

import torch

from iclr24.llm import Completion, with_system
from iclr24.llm.hf import fork_cache
from iclr24.llm.hf import lookup_draft as shared_lookup_draft
from iclr24.llm.structured import GrammarConstraint, check_complete, output_format, require_grammar

__all__ = ["PrefixCachedLM", "lookup_draft"]


def lookup_draft(tokens: Sequence[int], *, ngram: int = 3, length: int = 10, min_ngram: int = 1) -> list[int]:
    """The up to ``length`` tokens that followed the latest earlier occurrence of the last ``n`` tokens of
    ``tokens``, for the longest ``min_ngram <= n <= ngram`` that occurs; ``[]`` when none does
    (:func:`iclr24.llm.hf.lookup_draft`, with this wrapper's keywords and defaults).

    >>> lookup_draft([5, 6, 7, 8, 9, 5, 6], ngram=2, length=2)
    [7, 8]
    >>> lookup_draft([5, 6, 7, 8, 9, 6], ngram=2, min_ngram=2)
    []
    """
    return shared_lookup_draft(tokens, length, ngram=ngram, min_ngram=min_ngram)


class PrefixCachedLM:
    """A local transformers model whose greedy ``generate`` reuses prompt prefixes and prompt-lookup drafts.

    Args:
        model: an ``iclr24.llm`` backend with torch weights (``.model``, ``.tokenizer``: ``embedded``, ``hf``);
            any other backend is used as it is (see :meth:`wrap`).
        keep: how many prompts' key-value caches to keep.
        ngram, min_ngram, draft: the longest and the shortest n-gram looked up, and the most draft tokens checked
            in one pass. A pass over several positions costs 1.5-2.5 single-token passes on a CPU, so a draft from a
            single matching token (often wrong) costs more than it saves, and a long draft that is right saves many
            passes: the defaults (3, 2, 32) take about 20% fewer passes than (3, 1, 10) on the quick run's messages.
    """

    def __init__(self, model, *, keep: int = 8, ngram: int = 3, min_ngram: int = 2, draft: int = 32) -> None:
        if not 1 <= min_ngram <= ngram or keep < 1 or draft < 0:
            raise ValueError(f"need 1 <= min_ngram <= ngram, keep >= 1 and draft >= 0, got min_ngram={min_ngram}, "
                             f"ngram={ngram}, keep={keep}, draft={draft}")
        self.inner, self.keep, self.ngram, self.min_ngram, self.draft = model, keep, ngram, min_ngram, draft
        self.name, self.capabilities = model.name, model.capabilities
        self.model, self.tokenizer = model.model, model.tokenizer
        self._cache_kwarg = "cache" if "cache" in inspect.signature(self.model.forward).parameters \
            else "past_key_values"
        eos = self.model.generation_config.eos_token_id
        self._eos = set(eos if isinstance(eos, list) else [eos if eos is not None else self.tokenizer.eos_token_id])
        self._eos.add(self.tokenizer.eos_token_id)     # the token a grammar ends with
        self._caches: OrderedDict[tuple[int, ...], object] = OrderedDict()   # prompt ids -> its cache, newest last

    @classmethod
    def wrap(cls, model, **options):
        """``PrefixCachedLM(model)`` for a local transformers backend, else ``model`` itself."""
        if hasattr(model, "model") and hasattr(model, "tokenizer") and hasattr(model.model, "generation_config"):
            return cls(model, **options)
        return model

    # -- the LanguageModel protocol ------------------------------------------------------------------------------
    def generate(self, prompt, *, max_tokens: int = 256, stop: Sequence[str] = (), temperature: float = 0.0,
                 top_p: float = 1.0, seed: int | None = None, n: int = 1, system: str | None = None,
                 logprobs: bool = False, **options) -> list[Completion]:
        response_format = options.pop("response_format", None)
        if temperature != 0 or n != 1 or stop or logprobs or options or not isinstance(max_tokens, int) \
                or max_tokens < 1:   # anything but greedy decoding, plain or constrained, is the model's
            return self.inner.generate(prompt, max_tokens=max_tokens, stop=stop, temperature=temperature,
                                       top_p=top_p, seed=seed, n=n, system=system, logprobs=logprobs,
                                       response_format=response_format, **options)
        ids = self._ids(with_system(prompt, system))
        fmt = output_format(response_format)
        require_grammar(self.inner, fmt)
        completion = self._greedy(ids, max_tokens, GrammarConstraint(self.tokenizer, fmt, len(ids)) if fmt else None)
        return [dataclasses.replace(completion, parsed=check_complete(fmt, completion.text, completion.finish_reason))]

    def next_token_logprobs(self, token_ids):
        return self.inner.next_token_logprobs(token_ids)

    def tokenize(self, text: str) -> list[int]:
        return self.inner.tokenize(text)

    def detokenize(self, token_ids) -> str:
        return self.inner.detokenize(token_ids)

    def format_chat(self, messages) -> str:
        return self.inner.format_chat(messages)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"

    # -- greedy decoding -----------------------------------------------------------------------------------------
    def _ids(self, prompt) -> list[int]:
        """The prompt's token ids, exactly as the wrapped backend encodes them."""
        if isinstance(prompt, str):
            return self.tokenizer(prompt)["input_ids"]
        return self.tokenizer.apply_chat_template(list(prompt), add_generation_prompt=True, return_tensors="pt",
                                                  return_dict=True)["input_ids"][0].tolist()

    def _forward(self, ids: list[int], cache, last_only: bool = False) -> torch.Tensor:
        extra = {"logits_to_keep": 1} if last_only else {}
        return self.model(input_ids=torch.tensor([ids]), use_cache=True, **{self._cache_kwarg: cache},
                          **extra).logits[0].float()

    def _prefix(self, ids: list[int]):
        """A copy of the kept cache sharing the longest prefix with ``ids`` (at least one token left to encode),
        cropped to that prefix, and its length; ``(empty cache, 0)`` when none shares a token."""
        from transformers import DynamicCache

        best, common = None, 0
        for key in self._caches:
            limit, k = min(len(key), len(ids) - 1), 0
            while k < limit and key[k] == ids[k]:
                k += 1
            if k > common:
                best, common = key, k
        if best is None:
            return DynamicCache(), 0
        self._caches.move_to_end(best)
        cache = fork_cache(self._caches[best])
        if common < len(best):
            cache.crop(common - len(best))                   # negative: the tokens to drop
        return cache, common

    @torch.no_grad()
    def _greedy(self, ids: list[int], max_tokens: int, constraint: GrammarConstraint | None = None) -> Completion:
        """Greedy decoding from the longest cached prefix. Under a grammar ``constraint`` each token is the argmax
        over the tokens the grammar allows; where it allows one token only, that token is taken without a pass
        (the argmax of one candidate needs no logits), and the forced tokens are fed with the next pass needed."""
        start = time.perf_counter()
        cache, common = self._prefix(ids)
        logits = self._forward(ids[common:], cache, last_only=True)
        self._caches[tuple(ids)] = fork_cache(cache)
        while len(self._caches) > self.keep:
            self._caches.popitem(last=False)
        if constraint is not None:
            return self._constrained(ids, max_tokens, constraint, cache, logits[-1], start)
        new: list[int] = []
        token = int(logits[-1].argmax())
        while True:
            new.append(token)
            if token in self._eos or len(new) >= max_tokens:
                break
            draft = lookup_draft(ids + new, ngram=self.ngram, min_ngram=self.min_ngram,
                                 length=min(self.draft, max_tokens - len(new)))
            logits = self._forward([token, *draft], cache)
            greedy = logits.argmax(-1).tolist()       # greedy[i]: the token after [token, *draft[:i]]
            accepted = 0
            while accepted < len(draft) and draft[accepted] == greedy[accepted]:
                accepted += 1
            for t in draft[:accepted]:
                new.append(t)
                if t in self._eos or len(new) >= max_tokens:
                    break
            else:
                if accepted < len(draft):
                    cache.crop(accepted - len(draft))  # drop the rejected draft tokens
                token = greedy[accepted]
                continue
            break
        return self._completion(ids, new, max_tokens, start)

    def _constrained(self, ids: list[int], max_tokens: int, constraint: GrammarConstraint, cache,
                     logits: torch.Tensor, start: float) -> Completion:
        new: list[int] = []
        unfed: list[int] = []                      # tokens chosen but not yet run through the model
        while True:
            allowed = constraint.allowed(torch.tensor([ids + new]), logits.shape[-1])
            if not allowed.any():
                raise RuntimeError(f"the grammar allows no token after {self.tokenizer.decode(new)!r}")
            if int(allowed.sum()) == 1:            # forced: e.g. the rest of a menu line once its letter is out
                token = int(allowed.nonzero()[0, 0])
            else:
                if unfed:
                    logits = self._forward(unfed, cache)[-1]
                    unfed = []
                token = int(logits.masked_fill(~allowed, float("-inf")).argmax())
            new.append(token)
            unfed.append(token)
            if token in self._eos or len(new) >= max_tokens:
                return self._completion(ids, new, max_tokens, start)

    def _completion(self, ids: list[int], new: list[int], max_tokens: int, start: float) -> Completion:
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        finish = "stop" if new[-1] in self._eos or len(new) < max_tokens else "length"
        return Completion(text, finish, len(ids), len(new), time.perf_counter() - start)
