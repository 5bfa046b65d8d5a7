"""ProFIt: proof features of a robustness proof, their priority, and the sufficient set.

Banerjee, Xu, Singh. "Interpreting Robustness Proofs of Deep Neural Networks". ICLR 2024.

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

__all__ = ["ProofFeatures", "feature_gradients", "proof_features", "proves_with", "sufficient_set", "top_k_preserved"]


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


def sufficient_set(pf: ProofFeatures, search: str = "binary") -> Tensor:
    """Indices of the sufficient proof features, highest priority first.

    Features of zero priority go first; then the largest prefix of the rest, in ascending
    priority, whose removal keeps the proof (at least one feature stays). ``"binary"``
    search needs O(log n) re-checks and assumes removal is monotone; ``"linear"`` removes
    one feature at a time until the proof breaks.
    """
    if search not in ("binary", "linear"):
        raise ValueError(f"search must be 'binary' or 'linear', got {search!r}")
    candidates = torch.nonzero(pf.priority > 0).flatten()
    candidates = candidates[torch.argsort(pf.priority[candidates], stable=True)]  # ascending

    def proves_without(p: int) -> bool:
        keep = torch.zeros_like(pf.priority, dtype=torch.bool)
        keep[candidates[p:]] = True
        return proves_with(pf, keep)

    if search == "binary":
        lo, hi = 0, len(candidates) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if proves_without(mid):
                lo = mid
            else:
                hi = mid - 1
        removed = lo
    else:
        removed = 0
        while removed < len(candidates) - 1 and proves_without(removed + 1):
            removed += 1
    return candidates[removed:].flip(0)


def top_k_preserved(pf: ProofFeatures, order: Tensor, k: int) -> bool:
    """Whether keeping only the first ``k`` features of ``order`` still proves the property."""
    keep = torch.zeros_like(pf.priority, dtype=torch.bool)
    keep[order[:k]] = True
    return proves_with(pf, keep)


def feature_gradients(pf: ProofFeatures) -> Tensor:
    """Gradient of each feature's midpoint ``(l_i + u_i)/2`` w.r.t. the input: ``(lA_i + uA_i)/2``
    from CROWN's linear bounds, ``(n_hidden, n_input)``. Needs a CROWN proof."""
    if not isinstance(pf.element, _Crown):
        raise ValueError("feature_gradients needs a proof from method='crown' (its linear bounds)")
    lA, uA = pf.element.input_coefficients()
    return (lA + uA) / 2
