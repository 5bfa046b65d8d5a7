"""Automated interpretability with an offline explainer and simulator: explanations made of tokens.

The paper's score (Bills et al. 2023, as Cunningham et al. use it): an explainer reads a feature's top-activating
contexts and writes a short explanation; a simulator predicts the feature's activation on held-out contexts from
the explanation alone; the score is the correlation between simulated and true activations, on held-out contexts
drawn "top and random" (some of the feature's top-activating ones, some at random).

Here the explanation is a fixed, small budget of ``k`` tokens, which keeps the score offline and deterministic and
makes a dense direction hard to "explain":

1. **Explain** (training contexts only): take the feature's ``n_top`` top-activating contexts (by their largest
   activation); among their tokens, the ``k`` token ids with the highest mean activation are the explanation,
   each with that mean.
2. **Simulate** (held-out contexts only): a token of the explanation gets its mean from step 1; every other token 0.
3. **Score**: Pearson correlation between simulated and true activations over every token of the feature's
   ``n_top_heldout`` top-activating held-out contexts and ``n_random_heldout`` others drawn at random.

A monosemantic feature that fires on a few tokens is predicted well; a random direction, whose activation is spread
over every token of every context, is not: ``k`` tokens cover a sliver of its variance.

Signed bases (PCA, ICA, neurons, random directions) are read as the paper reads a direction: one feature per
direction, centred on its training mean, its sign chosen on the training contexts so that its heavier tail (positive
skewness) is the positive side, and negatives clipped to 0 (the ReLU an SAE code has). SAE codes are used as they
are.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["TokenExplanations", "orient_signed_codes", "token_simulation_scores"]


@dataclass(frozen=True)
class TokenExplanations:
    """What :func:`token_simulation_scores` found.

    Attributes:
        scores: ``(n_groups, n_features)`` correlation per held-out group and feature; NaN where the feature's true
            activation is constant on the scored tokens (nothing to predict: it never fires there).
        tokens: ``(k, n_features)`` the explanation's token ids per feature (-1 where fewer than ``k`` were seen).
        values: ``(k, n_features)`` the activation the simulator predicts for each explanation token.
    """

    scores: Tensor
    tokens: Tensor
    values: Tensor

    def per_group(self) -> list[float]:
        """Each held-out group's mean score over the features it can score."""
        return [float(row[~row.isnan()].mean()) if (~row.isnan()).any() else float("nan") for row in self.scores]


def orient_signed_codes(codes: Tensor, train: Tensor) -> Tensor:
    """Signed projections as features: centred on the training positions' mean, flipped so that the training
    skewness is positive (the side a direction "fires" on), negatives clipped to 0.

    Args:
        codes: ``(n_positions, n_features)``.
        train: bool ``(n_positions,)``, the positions the centre and the sign are chosen on.
    """
    codes = codes.double()
    centred = codes - codes[train].mean(0)
    skew = centred[train].pow(3).mean(0)
    sign = torch.where(skew < 0, -1.0, 1.0).to(codes.dtype)
    return (centred * sign).clamp_min(0)


def _context_max(codes: Tensor, context: Tensor, n_contexts: int) -> Tensor:
    out = torch.zeros(n_contexts, codes.shape[1], dtype=codes.dtype)
    return out.scatter_reduce(0, context[:, None].expand_as(codes), codes, "amax", include_self=True)


def token_simulation_scores(codes: Tensor, tokens: Tensor, context: Tensor, train_contexts: Tensor,
                            heldout_groups: list[Tensor], *, k: int = 5, n_top: int = 20, n_top_heldout: int = 10,
                            n_random_heldout: int = 10, seed: int = 0) -> TokenExplanations:
    """Explain each feature by ``k`` tokens on the training contexts and score it by simulation on held-out ones.

    Args:
        codes: ``(n_positions, n_features)`` non-negative activations (SAE codes, or
            :func:`orient_signed_codes` of a signed basis).
        tokens: ``(n_positions,)`` the token id at each position.
        context: ``(n_positions,)`` the context (text) each position belongs to, ``0 .. n_contexts - 1``.
        train_contexts: ``(m,)`` the context ids explanations are made from.
        heldout_groups: lists of held-out context ids (disjoint from ``train_contexts``), each scored on its own.
        k: the explanation's budget of tokens.
        n_top: top-activating training contexts the explainer sees.
        n_top_heldout, n_random_heldout: per group, the feature's top-activating held-out contexts and random
            others the simulation is scored on.

    Returns:
        :class:`TokenExplanations`.
    """
    if codes.ndim != 2 or tokens.shape != codes.shape[:1] or context.shape != codes.shape[:1]:
        raise ValueError(f"codes must be (n_positions, n_features) with tokens and context (n_positions,), got "
                         f"{tuple(codes.shape)}, {tuple(tokens.shape)}, {tuple(context.shape)}")
    if (codes < 0).any():
        raise ValueError("codes must be non-negative: pass a signed basis through orient_signed_codes first")
    for name, value in (("k", k), ("n_top", n_top), ("n_top_heldout", n_top_heldout)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    if n_random_heldout < 0:
        raise ValueError(f"n_random_heldout must be >= 0, got {n_random_heldout}")
    n_contexts = int(context.max()) + 1
    train_contexts = torch.as_tensor(train_contexts).long()
    heldout = torch.cat([torch.as_tensor(g).long() for g in heldout_groups]) if heldout_groups else train_contexts[:0]
    if torch.isin(heldout, train_contexts).any():
        raise ValueError("heldout_groups share contexts with train_contexts: the simulation must be held out")
    if len(train_contexts) < n_top:
        raise ValueError(f"n_top={n_top} exceeds the {len(train_contexts)} training contexts")
    codes = codes.double()
    n_features = codes.shape[1]
    peak = _context_max(codes, context, n_contexts)  # (n_contexts, n_features)

    # 1. explain: the k tokens with the highest mean activation over each feature's top training contexts
    top = train_contexts[peak[train_contexts].topk(n_top, dim=0).indices]  # (n_top, n_features) context ids
    in_top = torch.zeros(n_contexts, n_features, dtype=torch.bool).scatter_(0, top, True)
    in_top &= peak > 0  # a context where the feature never fires is not a top-activating one
    is_train = torch.zeros(n_contexts, dtype=torch.bool)
    is_train[train_contexts] = True
    rows = is_train[context]
    vocab, index = torch.unique(tokens[rows], return_inverse=True)
    seen = in_top[context[rows]].double()  # (n_train_positions, n_features)
    sums = torch.zeros(len(vocab), n_features, dtype=torch.float64).index_add_(0, index, codes[rows] * seen)
    counts = torch.zeros(len(vocab), n_features, dtype=torch.float64).index_add_(0, index, seen)
    means = torch.where(counts > 0, sums / counts.clamp_min(1), torch.tensor(-1.0, dtype=torch.float64))
    k_used = min(k, len(vocab))
    best_means, best = means.topk(k_used, dim=0)  # (k, n_features)
    explained = best_means > 0
    table = torch.zeros(len(vocab) + 1, n_features, dtype=torch.float64)  # the last row: tokens never explained
    table.scatter_(0, best, torch.where(explained, best_means, 0.0))
    explanation_tokens = torch.full((k, n_features), -1, dtype=torch.long)
    explanation_values = torch.zeros(k, n_features, dtype=torch.float64)
    explanation_tokens[:k_used] = torch.where(explained, vocab[best], -1)
    explanation_values[:k_used] = torch.where(explained, best_means, 0.0)

    # 2-3. simulate on each held-out group's top-and-random contexts, score by correlation
    gen = torch.Generator().manual_seed(seed)
    scores = torch.full((len(heldout_groups), n_features), float("nan"), dtype=torch.float64)
    for g, group in enumerate(heldout_groups):
        group = torch.as_tensor(group).long()
        n_top_g = min(n_top_heldout, len(group))
        n_random_g = min(n_random_heldout, len(group) - n_top_g)
        local = torch.full((n_contexts,), -1, dtype=torch.long)
        local[group] = torch.arange(len(group))
        order = peak[group].argsort(dim=0, descending=True, stable=True)  # (len(group), n_features)
        chosen = torch.zeros(len(group), n_features, dtype=torch.bool).scatter_(0, order[:n_top_g], True)
        if n_random_g:
            draw = torch.rand(len(group), n_features, generator=gen, dtype=torch.float64).masked_fill(chosen, -1.0)
            chosen.scatter_(0, draw.topk(n_random_g, dim=0).indices, True)
        pos = local[context] >= 0
        weight = chosen[local[context[pos]]].double()  # (n_group_positions, n_features)
        place = torch.searchsorted(vocab, tokens[pos]).clamp(max=len(vocab) - 1)
        place = torch.where(vocab[place] == tokens[pos], place, len(vocab))
        simulated = table[place]
        true = codes[pos]
        n = weight.sum(0)
        mean_s, mean_t = (weight * simulated).sum(0) / n, (weight * true).sum(0) / n
        ds, dt = simulated - mean_s, true - mean_t
        cov, var_s, var_t = (weight * ds * dt).sum(0), (weight * ds * ds).sum(0), (weight * dt * dt).sum(0)
        corr = torch.where(var_s > 1e-24, cov / (var_s * var_t).clamp_min(1e-300).sqrt(), 0.0)
        scores[g] = torch.where(var_t > 1e-24, corr, float("nan"))
    return TokenExplanations(scores=scores, tokens=explanation_tokens, values=explanation_values)
