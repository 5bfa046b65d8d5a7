"""Emulated fine-tuning: sample what a large model would say after a small model's fine-tuning (Sec. 3).

EFT reads fine-tuning as KL-constrained RL whose optimum is ``pi_ft(y|x) ∝ pi_ref(y|x) exp(r(x,y)/beta)``,
so a fine-tuned model and its base define an implicit reward ``r = beta log(pi_ft / pi_ref)``. Moving
that reward onto another base emulates fine-tuning it. Per token (Eq. 4, with the per-step
partition function approximated by renormalising over the vocabulary):

    log p_EFT(y_t | x, y_<t) = log p_base_L + beta (log p_ft_S - log p_base_S) - log Z      (up-scaling)

beta = 0 is the large base, beta = 1 emulates fine-tuning it; a large fine-tuned model with a small
base is down-scaling. Several rewards mix at test time (Sec. 4.2): ``r_lambda = sum_i lambda_i r_i``.

    from iclr24.eft import EFTModel
    eft = EFTModel(base_large, ft_small, base_small)      # any three LanguageModels sharing a tokenizer
    eft.generate("question : where does Aldo live ? answer :", max_tokens=4)
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence

import numpy as np
import torch

from iclr24.core.checks import check_int
from iclr24.llm.base import (
    Capabilities,
    Completion,
    Prompt,
    apply_stop,
    check_generate_args,
    decode_tokens,
    format_chat,
    require_logprobs,
    sample_token,
    with_system,
)

__all__ = ["EFTModel", "check_shared_tokenizer", "eft_logprobs", "implicit_reward", "interpolate_rewards"]

#: Token strings that end a sequence over HTTP, where the server names tokens and not ids.
END_TOKENS = frozenset({"</s>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<eos>"})


def _as_tensor(x, name: str = "x") -> tuple[torch.Tensor, bool]:
    """``x`` as float64 log-probabilities ``(..., vocab)``: NaN and +inf refused (-inf rules a token out)."""
    is_numpy = isinstance(x, np.ndarray)
    t = torch.as_tensor(np.asarray(x) if is_numpy else x).double()
    if t.dim() == 0 or t.shape[-1] == 0:
        raise ValueError(f"{name} must be (..., vocab) log-probabilities with vocab >= 1, got shape {tuple(t.shape)}")
    if bool((t.isnan() | (t == math.inf)).any()):
        raise ValueError(f"{name} must hold log-probabilities (finite or -inf), found NaN or +inf")
    return t, is_numpy


#: Log-probabilities are read no lower than this (nats), so a token a small model rules out (-inf) gives a
#: finite reward and the combination never becomes NaN; no real model's log-probability comes near it.
LOGPROB_FLOOR = -1e4


def implicit_reward(ft, base):
    """``log p_ft - log p_base`` per token: the reward fine-tuning implicitly optimised (up to beta).

    Zero probabilities are read as ``exp(LOGPROB_FLOOR)``: a token both rule out gets reward 0, a token
    only the base rules out a large finite one."""
    (ft, is_numpy), (base, _) = _as_tensor(ft, "ft"), _as_tensor(base, "base")
    if ft.shape != base.shape:
        raise ValueError(f"ft and base must have the same shape, got {tuple(ft.shape)} and {tuple(base.shape)}")
    reward = ft.clamp_min(LOGPROB_FLOOR) - base.clamp_min(LOGPROB_FLOOR)
    return reward.numpy() if is_numpy else reward


def interpolate_rewards(base, fts: Sequence, weights: Sequence[float]):
    """The test-time mixture ``sum_i weights[i] (log p_fts[i] - log p_base)`` of fine-tuned behaviours (Sec. 4.2).

    ``base``: the small base model's log-probabilities; ``fts``: one vector per fine-tuned model
    (helpful, harmless, ...) over the same vocabulary. With weights ``(lam, 1 - lam)`` this is the
    paper's ``r_lambda = lam r_helpful + (1 - lam) r_harmless``. Pass the result to
    :func:`eft_logprobs` as ``reward=``.
    """
    if len(fts) != len(weights) or not fts:
        raise ValueError(f"fts and weights must have the same non-zero length, got {len(fts)} and {len(weights)}")
    weights = [_finite("weights[%d]" % i, w) for i, w in enumerate(weights)]
    rewards = [implicit_reward(ft, base) for ft in fts]
    return sum(w * r for w, r in zip(weights, rewards))


def _finite(name: str, value) -> float:
    """``value`` as a float (Python, numpy or 0-d torch numbers), refusing bools, NaN and infinities."""
    try:
        if isinstance(value, bool):
            raise TypeError
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a finite number, got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return number


def eft_logprobs(base_large, ft_small=None, base_small=None, beta: float = 1.0, *, reward=None):
    """The EFT next-token distribution: ``log_softmax(base_large + beta * (ft_small - base_small))``.

    Parameters
    ----------
    base_large, ft_small, base_small : tensor or ndarray, shape ``(..., vocab)``
        Next-token log-probabilities (or logits: each is shifted by its own log-normaliser, which
        the renormalisation removes). ``-inf`` entries are tokens a model rules out.
    beta : float
        The reward's weight: 0 gives ``base_large``, 1 emulates fine-tuning it.
    reward : optional
        A precomputed reward (:func:`interpolate_rewards`) in place of ``ft_small - base_small``.

    Returns
    -------
    Log-probabilities of the same type and shape, summing to 1 over the last axis.

    >>> import torch
    >>> large = torch.log_softmax(torch.tensor([2.0, 1.0, 0.0]), -1)
    >>> torch.allclose(eft_logprobs(large, large * 0, large * 0), large.double())      # zero reward: the base
    True
    """
    beta = _finite("beta", beta)
    base, is_numpy = _as_tensor(base_large, "base_large")
    if reward is None:
        if ft_small is None or base_small is None:
            raise ValueError("pass ft_small and base_small, or reward=")
        reward = implicit_reward(ft_small, base_small)
    elif ft_small is not None or base_small is not None:
        raise ValueError("pass either ft_small and base_small, or reward=, not both")
    reward, _ = _as_tensor(reward, "reward")
    if reward.shape != base.shape:
        raise ValueError(f"the reward's shape {tuple(reward.shape)} differs from base_large's {tuple(base.shape)}: "
                         f"the models must share a vocabulary")
    if reward.isnan().any():
        raise ValueError("the reward holds NaN")
    combined = torch.log_softmax(base + beta * reward if beta else base, -1)
    return combined.numpy() if is_numpy else combined


class EFTModel:
    """Three :class:`~iclr24.llm.LanguageModel` s composed into one that samples from the EFT distribution.

    Args:
        base_large: supplies the knowledge (pre-training at the large scale).
        ft_small: supplies the behaviour, with ``base_small`` (fine-tuning at the small scale).
        base_small: the model ``ft_small`` was fine-tuned from.
        beta: the weight of the fine-tuning reward (0: ``base_large`` alone).

    The three must share a tokenizer. On construction every pair is compared (:func:`check_shared_tokenizer`):
    by vocabulary, else by the tokens of a probe text, and a mismatch raises ValueError. A pair with neither to
    compare is not checked and a ``UserWarning`` names it: this is the case over HTTP, where the OpenAI API
    has no tokenizer endpoint, so two servers with different tokenizers are combined token string by token
    string, and EFT is wrong without an error. Serve the three from one model family.

    Where every component has the full next-token distribution (local backends), ``next_token_logprobs`` and
    ``sequence_logprobs`` are exact and ``generate`` decodes token by token. Over HTTP, where a server reports
    only its top-k tokens, ``capabilities.full_logits`` is False and ``generate`` works on the union of the
    three top-k sets, a token missing from one model's list taking that list's lowest log-probability (an
    upper bound): an approximation, as :attr:`approximation` says.
    """

    def __init__(self, base_large, ft_small, base_small, *, beta: float = 1.0, top_k: int = 20) -> None:
        for role, model in (("base_large", base_large), ("ft_small", ft_small), ("base_small", base_small)):
            if not callable(getattr(model, "next_token_logprobs", None)):
                raise TypeError(f"{role} must be a LanguageModel, got {type(model).__name__}")
        beta = _finite("beta", beta)
        check_int("top_k", top_k, minimum=1)
        self.base_large, self.ft_small, self.base_small, self.beta = base_large, ft_small, base_small, beta
        self.components = (base_large, ft_small, base_small)
        exact = all(m.capabilities.full_logits for m in self.components)
        unchecked = check_shared_tokenizer(self.components)
        if unchecked:
            pairs = ", ".join(f"{a!r} and {b!r}" for a, b in unchecked)
            warnings.warn(f"EFT could not check that {pairs} share a tokenizer (no vocabulary, and no tokenize for "
                          "a probe text, as over the OpenAI HTTP API); with different tokenizers the combined "
                          "distribution is wrong without an error", UserWarning, stacklevel=2)
        if not exact and not all(callable(getattr(m, "next_token_top_logprobs", None)) for m in self.components):
            raise ValueError("EFT needs each model's next-token distribution: full logits (a local backend) or "
                             "top-k log-probabilities (the openai backend)")
        if not exact:  # a server may send no log-probabilities at all: found out now, not mid-generation
            for role, model in zip(("base_large", "ft_small", "base_small"), self.components):
                require_logprobs(model, f"EFT's {role}", top_k=top_k)
        self.top_k = top_k
        self.approximation = None if exact else f"the union of each model's top-{top_k} next tokens"
        self.name = f"eft({base_large.name} + {beta:g} * ({ft_small.name} - {base_small.name}))"
        vocab_k = min(m.capabilities.top_logprobs_k for m in self.components)
        self.capabilities = Capabilities(full_logits=exact, top_logprobs_k=vocab_k if exact else top_k,
                                         chat_template=bool(format_chat(ft_small, [{"role": "user", "content": ""}])),
                                         grammar=False)

    # --- exact distributions (local backends) -------------------------------------------------------------
    def next_token_logprobs(self, token_ids: Sequence[int]) -> torch.Tensor:
        """The EFT distribution over the vocabulary after ``token_ids``, ``(V,)``."""
        self._require_exact("next_token_logprobs")
        large, ft, small = (torch.as_tensor(m.next_token_logprobs(token_ids)) for m in self.components)
        return eft_logprobs(large, ft, small, self.beta)

    def sequence_logprobs(self, token_ids: Sequence[int], start: int = 0) -> torch.Tensor:
        """``(T - start, V)``: the EFT distribution after each prefix ``token_ids[:t + 1]``, ``t >= start``; one
        forward pass per component where it can."""
        self._require_exact("sequence_logprobs")
        if not 0 <= start < len(token_ids):
            raise ValueError(f"start must lie in [0, {len(token_ids)}), got {start}")
        rows = []
        for m in self.components:
            if callable(getattr(m, "sequence_logprobs", None)):
                rows.append(torch.as_tensor(m.sequence_logprobs(token_ids, start)))
            else:
                rows.append(torch.stack([torch.as_tensor(m.next_token_logprobs(token_ids[:t + 1]))
                                         for t in range(start, len(token_ids))]))
        return eft_logprobs(*rows, self.beta)

    # --- top-k union (HTTP backends) ----------------------------------------------------------------------
    def next_token_top_logprobs(self, prompt: str, k: int | None = None) -> dict[str, float]:
        """The EFT distribution over the union of the three models' top-``k`` next tokens after ``prompt``."""
        k = self.top_k if k is None else k
        tops = [m.next_token_top_logprobs(prompt, k) for m in self.components]
        union = sorted(set().union(*tops))
        filled = [torch.tensor([top.get(t, min(top.values())) for t in union], dtype=torch.float64) for top in tops]
        combined = eft_logprobs(*filled, self.beta)
        return dict(zip(union, combined.tolist()))

    # --- the LanguageModel protocol -----------------------------------------------------------------------
    def generate(self, prompt: Prompt, *, max_tokens: int = 256, stop: Sequence[str] = (), temperature: float = 0.0,
                 top_p: float = 1.0, seed: int | None = None, n: int = 1, system: str | None = None,
                 logprobs: bool = False) -> list[Completion]:
        """Decode from the EFT distribution; chat prompts are rendered by ``ft_small``'s template."""
        check_generate_args(max_tokens, temperature, n, top_p)
        prompt = with_system(prompt, system)
        if not isinstance(prompt, str):
            rendered = format_chat(self.ft_small, prompt)
            if rendered is None:
                raise ValueError(f"{self.ft_small.name!r} renders no chat template: pass a text prompt")
            prompt = rendered
        out = []
        for i in range(n):
            start, sample_seed = time.perf_counter(), None if seed is None else seed + i
            if self.capabilities.full_logits:
                ids = self.base_large.tokenize(prompt)
                if not ids:
                    raise ValueError("the prompt must hold at least one token")
                text, finish, new, scores = decode_tokens(
                    self.next_token_logprobs, ids, max_tokens=max_tokens, detokenize=self.detokenize, stop=stop,
                    temperature=temperature, top_p=top_p, seed=sample_seed, eos_id=_eos_id(self.base_large))
                pieces = tuple(self.detokenize([t]) for t in new)
                prompt_tokens = len(ids)
            else:
                text, finish, pieces, scores = self._generate_top_k(prompt, max_tokens, stop, temperature, top_p,
                                                                    sample_seed)
                prompt_tokens = 0
            scored = (pieces, tuple(scores)) if logprobs else (None, None)
            out.append(Completion(text, finish, prompt_tokens, len(scores), time.perf_counter() - start, *scored))
        return out

    def _generate_top_k(self, prompt, max_tokens, stop, temperature, top_p, seed):
        generator = torch.Generator().manual_seed(seed) if seed is not None else None
        text, pieces, scores, finish = "", [], [], "length"
        for _ in range(max_tokens):
            dist = self.next_token_top_logprobs(prompt + text)
            tokens = list(dist)
            values = torch.tensor([dist[t] for t in tokens], dtype=torch.float64)
            token = tokens[sample_token(values, temperature=temperature, top_p=top_p, generator=generator)]
            if token in END_TOKENS:
                finish = "stop"
                break
            pieces.append(token)
            scores.append(dist[token])
            text, stopped = apply_stop(text + token, stop)
            if stopped:
                finish = "stop"
                break
        return text, finish, tuple(pieces), scores

    def tokenize(self, text: str) -> list[int]:
        return self.base_large.tokenize(text)

    def detokenize(self, token_ids: Sequence[int]) -> str:
        return self.base_large.detokenize(token_ids)

    def _require_exact(self, what: str) -> None:
        if not self.capabilities.full_logits:
            raise NotImplementedError(f"{what} needs every model's full next-token distribution; these models give "
                                      f"only top-k log-probabilities: use next_token_top_logprobs or generate")

    def __repr__(self) -> str:
        return f"EFTModel({self.name!r}{'' if self.approximation is None else ', ' + self.approximation})"


def _eos_id(model) -> int | None:
    vocab = getattr(model, "vocab", None)
    if vocab is not None and hasattr(vocab, "eos_id"):
        return vocab.eos_id
    tokenizer = getattr(model, "tokenizer", None)
    return getattr(tokenizer, "eos_token_id", None)


_PROBE = "The quick brown fox, 12345 jumps over émigrés; x**2 == 4?\n\tdef f(): return 'ok'"


def check_shared_tokenizer(models: Sequence) -> list[tuple[str, str]]:
    """Raise ValueError naming the first two models whose tokenizers differ; return the pairs it could not compare.

    Every pair is compared: by vocabulary where both expose one (transformers tokenizers, word
    vocabularies), else by how each tokenizes a probe text. A pair with nothing to compare (a model with
    neither a vocabulary nor a working ``tokenize``, such as an OpenAI-API server) is returned by name, so
    the caller can warn.
    """
    def vocabulary(model):
        tokenizer = getattr(model, "tokenizer", None)
        if tokenizer is not None and callable(getattr(tokenizer, "get_vocab", None)):
            return tokenizer.get_vocab()
        vocab = getattr(model, "vocab", None)
        return list(vocab.words) if vocab is not None and hasattr(vocab, "words") else None

    def probe(model):
        try:
            return model.tokenize(_PROBE)
        except (AttributeError, NotImplementedError, ValueError):  # no tokenize, or one that refuses (HTTP)
            return None

    prints = [(vocabulary(m), probe(m)) for m in models]
    unchecked = []
    for i in range(len(models)):
        for j in range(i + 1, len(models)):
            (vocab_a, probe_a), (vocab_b, probe_b) = prints[i], prints[j]
            if vocab_a is not None and vocab_b is not None:
                kind, a, b = "vocabulary", vocab_a, vocab_b
            elif probe_a is not None and probe_b is not None:
                kind, a, b = "tokenization of a probe text", probe_a, probe_b
            else:
                unchecked.append((models[i].name, models[j].name))
                continue
            if a != b:
                raise ValueError(f"EFT needs models that share a tokenizer: {models[i].name!r} and {models[j].name!r} "
                                 f"differ in their {kind} ({len(a)} and {len(b)} entries)")
    return unchecked
