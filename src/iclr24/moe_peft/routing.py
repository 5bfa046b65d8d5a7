"""The router of a mixture of lightweight experts, its options, and the measures of what it learned.

Each adapted site has its own router: a bias-free linear map from the activation it sees to E logits,
initialised N(0, 0.02) as in the official code, then a softmax over experts per token. *Soft merging*
(the paper's default) uses every probability; top-k keeps the k largest, renormalised.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from iclr24.core import check_int
from iclr24.core.checks import check_tensor

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

__all__ = ["Router", "keep_top_k", "load_balancing_loss", "routing_mutual_information"]


class Router(nn.Module):
    """Token-wise routing probabilities over ``num_experts`` experts.

    Shapes:
        x: ``(*, in_features)`` -> probabilities ``(*, num_experts)``, summing to one over the last axis.

    The logits and the softmax are computed in at least float32 (float64 stays float64) and outside
    autocast, as the official code does for stability ("selective precision", Switch Transformer);
    the result has the input's dtype.
    """

    def __init__(self, in_features: int, num_experts: int, *, device=None, dtype=None) -> None:
        super().__init__()
        self.in_features = check_int("in_features", in_features, minimum=1)
        self.num_experts = check_int("num_experts", num_experts, minimum=1)
        self.weight = nn.Parameter(torch.empty(num_experts, in_features, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_tensor("x", x, min_ndim=1, dtypes=_FLOATS, finite=False, shape_doc="(*, in_features)")
        if x.shape[-1] != self.in_features:
            raise ValueError(f"x must be (*, in_features={self.in_features}), got shape {tuple(x.shape)}")
        dtype = torch.promote_types(x.dtype, torch.float32)
        with torch.autocast(x.device.type, enabled=False):
            logits = F.linear(x.to(dtype), self.weight.to(dtype))
            return logits.softmax(dim=-1).to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, num_experts={self.num_experts}"


def keep_top_k(probs: torch.Tensor, k: int) -> torch.Tensor:
    """Zero all but the ``k`` largest probabilities of each token and renormalise the rest to sum to one.

    The official code multiplies by the top-k mask without renormalising; renormalising keeps the
    wrapped model equal to its base at initialisation (all experts are equal then, so any convex
    combination of them is the identity), which the unnormalised weights would not.
    """
    check_int("k", k, minimum=1)
    check_tensor("probs", probs, min_ndim=1, dtypes=_FLOATS, finite=False, shape_doc="(*, num_experts)")
    bad = ~torch.isfinite(probs)
    if bool(bad.any()):
        where = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(f"probs must be finite probabilities (*, num_experts), got {int(bad.sum())} non-finite "
                         f"entries, the first {float(probs[where])} at index {where} (NaN or inf cannot be ranked "
                         f"into a top-k nor renormalised)")
    return _keep_top_k(probs, k)


def _keep_top_k(probs: torch.Tensor, k: int) -> torch.Tensor:
    """:func:`keep_top_k` without the checks: the layers' path, which costs no device synchronisation
    (a non-finite routing there comes from a non-finite activation, which the base layer propagates anyway)."""
    if k >= probs.shape[-1]:
        return probs
    top = probs.topk(k, dim=-1).indices
    kept = probs * torch.zeros_like(probs).scatter_(-1, top, 1.0)
    return kept / kept.sum(dim=-1, keepdim=True)


def load_balancing_loss(probs: torch.Tensor, k: int = 1) -> torch.Tensor:
    """Switch Transformer's auxiliary loss ``E / k * sum_e f_e P_e`` over all tokens of ``probs``.

    ``f_e`` is the fraction of tokens whose top-k experts include ``e`` (not differentiable), ``P_e``
    the mean probability of ``e``. It is 1 when routing is uniform and grows to ``E / k`` as all
    tokens go to the same experts. (The official code, without top-k, averages ``P_e`` alone, which is
    the constant 1/E and has no gradient; the token fractions of the Switch loss are used here instead.)

    Shapes:
        probs: ``(*, E)`` full softmax probabilities -> scalar.
    """
    check_tensor("probs", probs, min_ndim=1, dtypes=_FLOATS, finite=False, shape_doc="(*, num_experts)")
    if probs.numel() == 0:
        raise ValueError(f"probs must hold at least one token's probabilities, got shape {tuple(probs.shape)}")
    num_experts = probs.shape[-1]
    if not 1 <= check_int("k", k) <= num_experts:
        raise ValueError(f"k must be in [1, {num_experts}] (the number of experts), got {k}")
    flat = probs.reshape(-1, num_experts)
    top = flat.topk(k, dim=-1).indices
    fraction = torch.zeros_like(flat).scatter_(-1, top, 1.0).mean(dim=0)
    return num_experts / k * (fraction.detach() * flat.mean(dim=0)).sum()


def routing_mutual_information(mean_probs: torch.Tensor, weights: torch.Tensor | None = None) -> float:
    """Mutual information in bits between a task and the expert its tokens are routed to.

    ``mean_probs[t]`` is task t's mean routing distribution ``p(e | t)`` (rows sum to one);
    ``weights`` is ``p(t)``, uniform by default. I(T; E) = H(E) - H(E | T): 0 when every task routes
    alike, up to ``min(log2 T, log2 E)`` when each task has experts of its own.
    """
    check_tensor("mean_probs", mean_probs, dtypes=_FLOATS, shape_doc="(tasks, experts)")
    if weights is not None:
        check_tensor("weights", weights, dtypes=_FLOATS, shape_doc="(tasks,)")
    p_e_given_t = mean_probs.double()
    if p_e_given_t.dim() != 2:
        raise ValueError(f"mean_probs must be (tasks, experts), got shape {tuple(mean_probs.shape)}")
    if bool((p_e_given_t < 0).any()) or not torch.allclose(p_e_given_t.sum(-1), torch.ones(()).double(), atol=1e-4):
        raise ValueError("mean_probs must hold one probability distribution per row (non-negative, summing to 1)")
    if weights is not None and (weights.shape != p_e_given_t.shape[:1] or bool((weights < 0).any())
                                or float(weights.sum()) <= 0):
        raise ValueError(f"weights must be {p_e_given_t.shape[0]} non-negative task weights, not all zero, got "
                         f"{weights}")
    p_t = (torch.full((p_e_given_t.shape[0],), 1.0 / p_e_given_t.shape[0], dtype=torch.float64)
           if weights is None else weights.double() / weights.double().sum())
    p_e = p_t @ p_e_given_t
    return max(0.0, float(_entropy_bits(p_e) - p_t @ _entropy_bits(p_e_given_t)))


def _entropy_bits(p: torch.Tensor) -> torch.Tensor:
    return -(p * torch.log2(p.clamp_min(1e-300))).sum(-1)
