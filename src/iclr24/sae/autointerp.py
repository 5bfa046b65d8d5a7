"""Automated interpretability with a language model (Bills et al. 2023, as the paper uses it).

For a feature: show an explainer model the contexts where it fires most, with per-token
activations scaled to 0-10, and ask for a short explanation; then give a simulator (the same
model) only the explanation and held-out contexts, and ask it to predict each token's
activation. The score is the correlation between predicted and true activations.
"""

from __future__ import annotations

import re

import numpy as np
import torch
from torch import Tensor

__all__ = ["explain_and_score"]

_EXPLAIN = ("We are studying a feature of a neural network. Each token below is followed by the feature's "
            "activation on it, from 0 to 10.\n\n{examples}\n\nIn a few words, what does the feature detect?")
_SIMULATE = ("A feature of a neural network detects: {explanation}\n\nFor each token of the text below, predict "
             "the feature's activation from 0 to 10. Reply with one number per token, comma-separated, and "
             "nothing else.\n\nTokens: {tokens}")


def _scaled(acts: Tensor, top: float) -> list[int]:
    return [int(round(10 * max(0.0, float(a)) / top)) if top > 0 else 0 for a in acts]


def _numbers(text: str, length: int) -> np.ndarray:
    values = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", text)][:length]
    return np.array(values + [0.0] * (length - len(values)))


def explain_and_score(model, codes: Tensor, tokens: list[list[str]], feature: int, *, n_explain: int = 4,
                      n_simulate: int = 4, max_tokens: int = 64, seed: int = 0) -> tuple[str, float]:
    """Explain ``feature`` from its top contexts and score the explanation by simulation.

    Args:
        model: an ``iclr24.llm`` model (explainer and simulator).
        codes: ``(n_contexts, T, n_features)`` activations.
        tokens: the ``n_contexts`` contexts as token strings (``T`` each).
        feature: which feature.

    Returns:
        ``(explanation, score)``; the score is the Pearson correlation over the simulated
        contexts' tokens (0 when either side is constant).
    """
    acts = codes[..., feature].double()  # (n_contexts, T)
    order = torch.argsort(acts.amax(1), descending=True)
    top = float(acts.max())
    explain_ids = order[:n_explain].tolist()
    rng = np.random.default_rng(seed)
    rest = order[n_explain:].tolist()
    # held-out: half more top contexts, half random ones, so both firing and silence are tested
    simulate_ids = rest[: n_simulate // 2] + list(rng.choice(rest[n_simulate // 2:], n_simulate - n_simulate // 2,
                                                             replace=False))
    examples = "\n".join(" ".join(f"{t}({a})" for t, a in zip(tokens[i], _scaled(acts[i], top))) for i in explain_ids)
    prompt = [{"role": "user", "content": _EXPLAIN.format(examples=examples)}]
    explanation = model.generate(prompt, max_tokens=max_tokens, stop=["\n\n"], temperature=0.0, seed=seed)[0].text
    explanation = explanation.strip() or "(no explanation)"
    predicted, actual = [], []
    for i in simulate_ids:
        reply = model.generate([{"role": "user", "content": _SIMULATE.format(explanation=explanation,
                                                                             tokens=", ".join(tokens[i]))}],
                               max_tokens=4 * len(tokens[i]), temperature=0.0, seed=seed)[0].text
        predicted.append(_numbers(reply, len(tokens[i])))
        actual.append(np.array(_scaled(acts[i], top), dtype=float))
    p, a = np.concatenate(predicted), np.concatenate(actual)
    score = float(np.corrcoef(p, a)[0, 1]) if p.std() > 0 and a.std() > 0 else 0.0
    return explanation, score
