"""Risk measures of f(x, Z) over a discrete environmental variable Z, their confidence bounds, lacing values.

The risk measures are for maximisation (a high value is good; the risk lies in the lower tail):

    VaR_a(f(x, Z))  = inf { w : P(f(x, Z) <= w) >= a }                      (V-UCB, Nguyen et al. 2021, eq. 1)
    CVaR_a(f(x, Z)) = (1/a) int_0^a VaR_g(f(x, Z)) dg                        (CV-UCB, Nguyen et al. 2021)

Both are monotone: l(x, z) <= f(x, z) <= u(x, z) for every z gives rho(l(x, Z)) <= rho(f(x, Z)) <= rho(u(x, Z)),
which is how a GP's confidence bounds on f become bounds on the risk. Every function here takes the values
of one or more x at the n_z environmental values in its last dimension, ``(..., n_z)``.
"""

from __future__ import annotations

import torch

from iclr24.core.checks import check_number, check_tensor

__all__ = ["RISK_MEASURES", "conditional_value_at_risk", "lacing_values", "risk_measure", "value_at_risk"]

RISK_MEASURES = ("var", "cvar")

# cumulative weights are float sums: 0.1 + 0.1 + 0.1 may land just below 0.3, and a level hit exactly must count.
# They are always float64, whatever the values' dtype: in float32 the sums drift by more than this.
_LEVEL_TOL = 1e-9


def _weights(values: torch.Tensor, weights) -> torch.Tensor:
    """P(Z = z) as float64, checked and renormalised (a sum within 1e-6 of 1 is accepted, then made exact)."""
    n_z = values.shape[-1]
    if weights is None:
        return torch.full((n_z,), 1.0 / n_z, dtype=torch.float64, device=values.device)
    try:
        weights = torch.as_tensor(weights, device=values.device)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"weights must be a tensor or sequence of n_z probabilities, got {weights!r}") from None
    if weights.dtype == torch.bool or weights.is_complex():
        raise TypeError(f"weights must be real numbers, got dtype {weights.dtype}")
    weights = check_tensor("weights", weights.to(torch.float64), ndim=1, shape_doc="(n_z,)")
    if weights.shape[0] != n_z:
        raise ValueError(f"weights must have one entry per environmental value ({n_z}, the last dimension of "
                         f"values), got {weights.shape[0]}")
    if bool((weights < 0).any()) or abs(float(weights.sum()) - 1.0) > 1e-6:
        raise ValueError(f"weights must be a probability vector (non-negative, summing to 1), got sum "
                         f"{float(weights.sum()):.6g} and minimum {float(weights.min()):.3g}")
    return weights / weights.sum()


def _check_values(values: torch.Tensor) -> torch.Tensor:
    values = check_tensor("values", values, min_ndim=1, shape_doc="(..., n_z)")
    if values.shape[-1] == 0:
        raise ValueError("values must hold at least one environmental value in its last dimension")
    if values.dtype == torch.bool or values.is_complex():
        raise TypeError(f"values must be real numbers, got dtype {values.dtype}")
    if not values.is_floating_point():
        values = values.double()
    return values


def _sorted(values: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Values in ascending order with the cumulative probability up to each (ties in any order)."""
    ordered, order = values.sort(dim=-1)
    return ordered, weights[order].cumsum(dim=-1)


def _values_at_levels(ordered: torch.Tensor, cumulative: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
    """VaR at each of ``levels`` (..., k): the first sorted value whose cumulative probability reaches it.

    The tolerance is at most half the level, so a tiny level never selects a leading zero-probability value.
    """
    levels = levels.to(torch.float64)
    threshold = levels - torch.minimum(torch.full_like(levels, _LEVEL_TOL), levels / 2)
    index = torch.searchsorted(cumulative.contiguous(), threshold.contiguous())
    return ordered.gather(-1, index.clamp(max=ordered.shape[-1] - 1))


def value_at_risk(values: torch.Tensor, alpha: float, weights: torch.Tensor | None = None) -> torch.Tensor:
    """VaR_alpha over the last dimension: the smallest value whose cumulative probability reaches ``alpha``.

    Parameters
    ----------
    values : Tensor of shape (..., n_z)
        f(x, z) for each environmental value z: samples, a posterior mean, or a confidence bound.
    alpha : float in (0, 1]
        The risk level; alpha = 1 gives the largest value, alpha -> 0 the smallest.
    weights : Tensor of shape (n_z,), optional
        P(Z = z); uniform if omitted.

    Returns
    -------
    Tensor of shape (...). Differentiable in ``values`` (the gradient reaches the selected entry).
    """
    values = _check_values(values)
    alpha = check_number("alpha", alpha, minimum=0.0, exclusive=True, maximum=1.0)
    ordered, cumulative = _sorted(values, _weights(values, weights))
    level = torch.full(values.shape[:-1] + (1,), alpha, dtype=torch.float64, device=values.device)
    return _values_at_levels(ordered, cumulative, level).squeeze(-1)


def conditional_value_at_risk(values: torch.Tensor, alpha: float,
                              weights: torch.Tensor | None = None) -> torch.Tensor:
    """CVaR_alpha over the last dimension: the mean of the lower alpha-tail, (1/alpha) int_0^alpha VaR_g dg.

    With uniform weights over n_z values and alpha = k / n_z this is the mean of the k smallest values;
    an atom straddling the level contributes its share. Same arguments as :func:`value_at_risk`.
    """
    values = _check_values(values)
    alpha = check_number("alpha", alpha, minimum=0.0, exclusive=True, maximum=1.0)
    ordered, cumulative = _sorted(values, _weights(values, weights))
    previous = torch.cat([torch.zeros_like(cumulative[..., :1]), cumulative[..., :-1]], dim=-1)
    mass = (cumulative.clamp(max=alpha) - previous).clamp(min=0.0)
    # each value's share of the tail, mass / alpha (summing to 1), in float64 as the cumulative weights are: the
    # tail's mass itself can be below the values' dtype (float32 flushes alpha < ~7e-46 to zero, and 0 / alpha
    # rounded to float32 was 0 / 0 = NaN), its share never is. The weighted sum is float64 too, then cast back.
    share = mass / alpha
    return (ordered.to(torch.float64) * share).sum(-1).to(values.dtype)


def risk_measure(values: torch.Tensor, alpha: float, weights: torch.Tensor | None = None,
                 measure: str = "var") -> torch.Tensor:
    """:func:`value_at_risk` (``measure="var"``) or :func:`conditional_value_at_risk` (``"cvar"``)."""
    if measure == "var":
        return value_at_risk(values, alpha, weights)
    if measure == "cvar":
        return conditional_value_at_risk(values, alpha, weights)
    raise ValueError(f"measure must be one of {RISK_MEASURES}, got {measure!r}")


def lacing_values(lower: torch.Tensor, upper: torch.Tensor, alpha: float, weights: torch.Tensor | None = None,
                  measure: str = "var") -> torch.Tensor:
    """Which environmental values are lacing values: their confidence interval spans the risk's.

    For VaR (V-UCB's Lemma): z with ``lower(x, z) <= VaR_a(lower(x, Z))`` and ``upper(x, z) >= VaR_a(upper(x,
    Z))``; at least one exists whenever lower <= upper, and querying one shrinks the risk's confidence interval
    (``upper(x, z) - lower(x, z) >= VaR(upper) - VaR(lower)``). For CVaR (CV-UCB): the lacing values of VaR at
    the level g <= alpha where the VaR gap is widest, which bounds the CVaR gap in the same way.

    Parameters
    ----------
    lower, upper : Tensor of shape (..., n_z)
        Confidence bounds of f(x, z), ``lower <= upper``.

    Returns
    -------
    Bool tensor of shape (..., n_z).
    """
    lower, upper = _check_values(lower), _check_values(upper)
    if lower.shape != upper.shape:
        raise ValueError(f"lower and upper must have the same shape, got {tuple(lower.shape)} and "
                         f"{tuple(upper.shape)}")
    if bool((lower > upper).any()):
        raise ValueError("lower must be <= upper everywhere (confidence bounds of f)")
    alpha = check_number("alpha", alpha, minimum=0.0, exclusive=True, maximum=1.0)
    if measure not in RISK_MEASURES:
        raise ValueError(f"measure must be one of {RISK_MEASURES}, got {measure!r}")
    weights = _weights(lower, weights)
    ordered_lower, cum_lower = _sorted(lower, weights)
    ordered_upper, cum_upper = _sorted(upper, weights)
    if measure == "var":
        level = torch.full(lower.shape[:-1] + (1,), alpha, dtype=torch.float64, device=lower.device)
    else:
        # the VaR gap only changes where either bound's cumulative probability does: its maximum over
        # g <= alpha is attained at one of those breakpoints (capped at alpha) or at alpha itself
        cap = torch.full(lower.shape[:-1] + (1,), alpha, dtype=torch.float64, device=lower.device)
        levels = torch.cat([cum_lower, cum_upper, cap], dim=-1).clamp(max=alpha)       # (..., 2 n_z + 1)
        gap = (_values_at_levels(ordered_upper, cum_upper, levels)
               - _values_at_levels(ordered_lower, cum_lower, levels))
        level = levels.gather(-1, gap.argmax(-1, keepdim=True))
    var_lower = _values_at_levels(ordered_lower, cum_lower, level)
    var_upper = _values_at_levels(ordered_upper, cum_upper, level)
    # a value of probability zero is never the risk's, and querying it teaches nothing about the risk
    return (lower <= var_lower) & (upper >= var_upper) & (weights > 0)
