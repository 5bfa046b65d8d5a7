"""ProFIt: proof features of a robustness proof, their priority, and the sufficient set.

Debangshu Banerjee, Avaljot Singh, Gagandeep Singh. "Interpreting Robustness Proofs of Deep Neural
Networks". ICLR 2024.

Given a proof (a verified property), its *proof features* are the verifier's abstract
element on each neuron of the last hidden layer, ``[l_i, u_i]``. A feature's priority is
``P_i = max_j |(C W_L)_{j,i}| * max(|l_i|, |u_i|)``. Removing a feature zeroes its column of
``C W_L`` and re-evaluates the spec's lower bound on the same abstract element; the
sufficient set is what remains after removing as many low-priority features as possible
while the property stays proved.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from iclr24.proof_features.verify import AffineNet, ProofElement, VerificationResult, _Crown, spec_matrix

__all__ = ["ORDERS", "ProofFeatures", "feature_gradients", "feature_order", "proof_features", "proves_with",
           "sufficient_set", "top_k_preserved", "weight_abs_priority"]


@dataclass
class ProofFeatures:
    """The proof features of one proof.

    Attributes
    ----------
    lower, upper : Tensor (n_hidden,)
        Bounds of each last-hidden-layer neuron over the input region.
    priority : Tensor (n_hidden,)
        ``max_j |(C W_L)_{j,i}| * max(|l_i|, |u_i|)``.
    W_spec, b_spec : Tensor
        ``C W_L`` (n_props, n_hidden) and ``C b_L``: the property on the last hidden layer.
    element : ProofElement
        The verifier's abstract element, re-used to re-check pruned proofs.
    """

    lower: Tensor
    upper: Tensor
    priority: Tensor
    W_spec: Tensor
    b_spec: Tensor
    element: ProofElement

    @property
    def n_initial(self) -> int:
        """Features that can matter at all (non-zero priority)."""
        return int((self.priority > 0).sum())


def proof_features(result: VerificationResult, net: AffineNet) -> ProofFeatures:
    """Extract proof features from a *verified* result; refuse an unproved property."""
    if not result.verified:
        worst = float(result.lower_bounds.min())
        raise ValueError(f"the property is not proved by {result.method} (smallest margin lower bound {worst:.4g} "
                         "<= 0): there is no proof to interpret")
    C = spec_matrix(result.label, net.weights[-1].shape[0])
    W_spec, b_spec = C @ net.weights[-1], C @ net.biases[-1]
    element = result.element
    priority = W_spec.abs().amax(0) * torch.maximum(element.lower.abs(), element.upper.abs())
    return ProofFeatures(element.lower, element.upper, priority, W_spec, b_spec, element)


def proves_with(pf: ProofFeatures, keep: Tensor) -> bool:
    """Whether the property is still proved using only the features in ``keep`` (a bool mask)."""
    lower = pf.element.bound(pf.W_spec * keep.to(pf.W_spec.dtype), pf.b_spec)
    return bool((lower > 0).all())


ORDERS = ("priority", "weight_abs", "random")


def weight_abs_priority(pf: ProofFeatures) -> Tensor:
    """The paper's "Gradient" baseline (official ``FeaturePriority.Weight_ABS``): ``max_j |(C W_L)_{j,i}|``,
    how strongly the property's margins depend on each feature, ignoring its bounds."""
    return pf.W_spec.abs().amax(0)


def feature_order(pf: ProofFeatures, order: str = "priority", generator: torch.Generator | None = None) -> Tensor:
    """The features of non-zero priority, most important first, by ``order``.

    ``"priority"``: ProFIt's priority; ``"weight_abs"``: :func:`weight_abs_priority`; ``"random"``: a
    random permutation (of the non-zero-priority features only, as the official baselines draw).
    """
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    candidates = torch.nonzero(pf.priority > 0).flatten()
    if order == "random":
        return candidates[torch.randperm(len(candidates), generator=generator)]
    score = pf.priority if order == "priority" else weight_abs_priority(pf)
    return candidates[torch.argsort(score[candidates], descending=True, stable=True)]


def sufficient_set(pf: ProofFeatures, search: str = "linear", order: str = "priority",
                   generator: torch.Generator | None = None) -> Tensor:
    """Indices of the sufficient proof features, most important first.

    Features of zero priority go first; the rest are kept as the shortest prefix of
    :func:`feature_order` that still proves the property (at least one feature stays).
    ``"linear"`` (the official search) tries 1, 2, ... features and returns the first that
    proves: the smallest proving prefix, whatever the shape of the proof. ``"binary"`` needs
    O(log n) re-checks but assumes that removing features never restores a proof; removal is
    not monotone on real nets, and binary then returns a larger set (docs/proof_features.md).
    """
    if search not in ("binary", "linear"):
        raise ValueError(f"search must be 'binary' or 'linear', got {search!r}")
    ranked = feature_order(pf, order, generator)

    def proves_top(n_kept: int) -> bool:
        keep = torch.zeros_like(pf.priority, dtype=torch.bool)
        keep[ranked[:n_kept]] = True
        return proves_with(pf, keep)

    if search == "linear":
        n_kept = next((n for n in range(1, len(ranked)) if proves_top(n)), len(ranked))
    else:
        lo, hi = 1, len(ranked)  # the smallest n_kept that proves, if proving is monotone in n_kept
        while lo < hi:
            mid = (lo + hi) // 2
            if proves_top(mid):
                hi = mid
            else:
                lo = mid + 1
        n_kept = lo
    return ranked[:n_kept]


def top_k_preserved(pf: ProofFeatures, order: Tensor, k: int) -> bool:
    """Whether keeping only the first ``k`` features of ``order`` still proves the property."""
    keep = torch.zeros_like(pf.priority, dtype=torch.bool)
    keep[order[:k]] = True
    return proves_with(pf, keep)


def feature_gradients(pf: ProofFeatures, post_relu: bool = True) -> Tensor:
    """Gradient of each feature's midpoint ``(l_i + u_i)/2`` w.r.t. the input: ``(lA_i + uA_i)/2`` from
    CROWN's linear bounds, ``(n_hidden, n_input)``. Needs a CROWN proof.

    ``post_relu``: the bounds of the feature itself, the ReLU's output, as the official code takes
    them (an inactive neuron has gradient 0); False: of its pre-activation."""
    if not isinstance(pf.element, _Crown):
        raise ValueError("feature_gradients needs a proof from method='crown' (its linear bounds)")
    lA, uA = pf.element.input_coefficients(post_relu=post_relu)
    return (lA + uA) / 2
