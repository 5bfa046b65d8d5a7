"""Residual-point selection: RAD (Wu et al., 2023), as the paper's DATS-rp uses it to add points.

RAD draws collocation points with probability ``p(x) ∝ |r(x)|^k / mean|r|^k + c``. The paper's code
takes the top-k of that density over a candidate pool (``"topk"``); sampling from it without
replacement (``"sample"``) is RAD proper.
"""

from __future__ import annotations

from typing import Literal

import torch

from iclr24.core.checks import check_int, check_number, check_tensor

__all__ = ["rad_probabilities", "select_by_residual"]


def rad_probabilities(residuals: torch.Tensor, k: float = 1.0, c: float = 1.0) -> torch.Tensor:
    """RAD's sampling distribution over candidate points: ``|r|^k / mean(|r|^k) + c``, normalised. (n,) -> (n,)."""
    r = check_tensor("residuals", residuals, ndim=1, shape_doc="(n,)").detach().abs().double()
    k = check_number("k", k, minimum=0.0)
    c = check_number("c", c, minimum=0.0)
    rk = r ** k
    mean = rk.mean()
    density = (rk / mean if mean > 0 else torch.zeros_like(rk)) + c
    if float(density.sum()) == 0:
        density = torch.ones_like(density)  # all residuals zero and c = 0: nothing to prefer
    return density / density.sum()


def select_by_residual(residuals: torch.Tensor, n: int, *, strategy: Literal["topk", "sample"] = "topk",
                       k: float = 1.0, c: float = 1.0, generator: torch.Generator | None = None) -> torch.Tensor:
    """Indices of ``n`` candidates to add: the ``n`` most probable under RAD (``"topk"``, the paper's code; the
    same as the largest |r|) or ``n`` draws without replacement (``"sample"``)."""
    n = check_int("n", n, minimum=0)
    if n > residuals.numel():
        raise ValueError(f"n must be <= the number of candidates ({residuals.numel()}), got {n}")
    p = rad_probabilities(residuals, k, c)
    if strategy == "topk":
        return torch.topk(p, n).indices
    if strategy == "sample":
        return torch.multinomial(p, n, replacement=False, generator=generator)
    raise ValueError(f"strategy must be 'topk' or 'sample', got {strategy!r}")
