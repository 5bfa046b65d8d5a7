"""Risk measures of discrete distributions, their monotonicity, and the lacing-value rule."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from iclr24.meta_vbo import conditional_value_at_risk, lacing_values, risk_measure, value_at_risk

VALUES = torch.tensor([3.0, 1.0, 2.0, 5.0, 4.0], dtype=torch.float64)


@pytest.mark.parametrize("alpha, expected", [(0.2, 1.0), (0.4, 2.0), (0.41, 3.0), (0.6, 3.0), (1.0, 5.0)])
def test_value_at_risk_of_a_uniform_distribution(alpha, expected):
    assert value_at_risk(VALUES, alpha).item() == expected


@pytest.mark.parametrize("alpha, expected", [(0.5, 0.0), (0.51, 10.0), (0.8, 10.0), (0.81, 20.0)])
def test_value_at_risk_uses_the_weights(alpha, expected):
    weights = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    assert value_at_risk(torch.tensor([20.0, 0.0, 10.0]), alpha, weights[[2, 0, 1]]).item() == expected


def test_levels_met_by_float_cumulative_sums_count_as_reached():
    # 0.1 + 0.1 + 0.1 < 0.3 in floating point: the third smallest value must still be VaR_0.3
    values = torch.arange(10.0, dtype=torch.float64).flip(0)
    assert value_at_risk(values, 0.3).item() == 2.0
    assert value_at_risk(values, 0.7).item() == 6.0


@pytest.mark.parametrize("alpha, expected", [(0.2, 1.0), (0.4, 1.5), (0.5, 1.8), (1.0, 3.0)])
def test_conditional_value_at_risk_averages_the_lower_tail(alpha, expected):
    assert conditional_value_at_risk(VALUES, alpha).item() == pytest.approx(expected)


def test_conditional_value_at_risk_weights_the_straddling_atom():
    weights = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    values = torch.tensor([0.0, 10.0, 20.0], dtype=torch.float64)
    assert conditional_value_at_risk(values, 0.6, weights).item() == pytest.approx((0.5 * 0 + 0.1 * 10) / 0.6)
    assert conditional_value_at_risk(values, 1.0, weights).item() == pytest.approx(7.0)  # the mean


def test_batched_shapes_and_gradient_reaches_the_selected_entry():
    values = torch.randn(4, 3, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(0),
                         requires_grad=True)
    var = value_at_risk(values, 0.25)
    assert var.shape == (4, 3)
    var.sum().backward()
    third_smallest = values.detach().argsort(-1)[..., 2]
    assert torch.equal(values.grad.argmax(-1), third_smallest) and values.grad.sum().item() == 12.0
    assert risk_measure(values.detach(), 0.25, measure="cvar").shape == (4, 3)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.floats(0.01, 1.0), st.integers(0, 10_000), st.sampled_from(["var", "cvar"]))
def test_risk_is_monotone_so_bounds_of_f_bound_its_risk(n_z, alpha, seed, measure):
    g = torch.Generator().manual_seed(seed)
    weights = torch.rand(n_z, generator=g, dtype=torch.float64) + 0.05
    weights = weights / weights.sum()
    f = torch.randn(5, n_z, generator=g, dtype=torch.float64)
    lower = f - torch.rand(5, n_z, generator=g, dtype=torch.float64)
    upper = f + torch.rand(5, n_z, generator=g, dtype=torch.float64)
    rho = [risk_measure(v, alpha, weights, measure) for v in (lower, f, upper)]
    assert bool((rho[0] <= rho[1] + 1e-12).all()) and bool((rho[1] <= rho[2] + 1e-12).all())
    # CVaR averages VaR below the level, so it never exceeds it
    assert bool((conditional_value_at_risk(f, alpha, weights) <= value_at_risk(f, alpha, weights) + 1e-12).all())


def test_lacing_value_is_not_simply_the_widest_interval():
    # VaR_0.5 of 4 values is the 2nd smallest: VaR(l) = 1 (z1), VaR(u) = 1.4 (z1). z2 and z3 have the widest
    # intervals but start above VaR(l); z0 ends below VaR(u). Only z1 laces.
    lower = torch.tensor([0.0, 1.0, 2.0, 3.0], dtype=torch.float64)
    upper = torch.tensor([1.2, 1.4, 9.0, 10.0], dtype=torch.float64)
    assert lacing_values(lower, upper, 0.5).tolist() == [False, True, False, False]


def test_lacing_values_for_cvar_use_the_widest_level():
    # levels 0.25: VaR(l)=0 (z0), VaR(u)=0.5 (z0), gap 0.5; level 0.5: VaR(l)=1 (z1), VaR(u)=6 (z2), gap 5.
    # CVaR_0.5's widest VaR gap is at 0.5, where z2 laces (l=1 <= 1, u=6 >= 6) and z1 too (l=1, u=7).
    lower = torch.tensor([0.0, 1.0, 1.0, 4.0], dtype=torch.float64)
    upper = torch.tensor([0.5, 7.0, 6.0, 9.0], dtype=torch.float64)
    assert lacing_values(lower, upper, 0.5, measure="cvar").tolist() == [False, True, True, False]
    assert lacing_values(lower, upper, 0.25, measure="cvar").tolist() == [True, False, False, False]


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 15), st.floats(0.01, 1.0), st.integers(0, 10_000), st.sampled_from(["var", "cvar"]),
       st.booleans())
def test_a_lacing_value_always_exists_and_its_interval_spans_the_risk_interval(n_z, alpha, seed, measure,
                                                                               uniform):
    g = torch.Generator().manual_seed(seed)
    weights = None
    if not uniform:
        weights = torch.rand(n_z, generator=g, dtype=torch.float64) + 0.05
        weights = weights / weights.sum()
    mid = torch.randn(6, n_z, generator=g, dtype=torch.float64)
    half = torch.rand(6, n_z, generator=g, dtype=torch.float64)
    lower, upper = mid - half, mid + half
    lacing = lacing_values(lower, upper, alpha, weights, measure)
    assert bool(lacing.any(-1).all())
    gap = risk_measure(upper, alpha, weights, measure) - risk_measure(lower, alpha, weights, measure)
    width = (upper - lower).masked_fill(~lacing, float("inf")).min(-1).values
    assert bool((width >= gap - 1e-12).all())


@pytest.mark.parametrize("call, match", [
    (lambda: value_at_risk(VALUES, 0.0), "alpha"),
    (lambda: value_at_risk(VALUES, 1.5), "alpha"),
    (lambda: value_at_risk(VALUES, 0.1, torch.ones(4) / 4), "weights"),
    (lambda: value_at_risk(VALUES, 0.1, torch.ones(5)), "weights"),
    (lambda: risk_measure(VALUES, 0.1, measure="mean"), "measure"),
    (lambda: value_at_risk([1.0, 2.0], 0.1), "values"),
    (lambda: value_at_risk(torch.tensor([True, False]), 0.5), "real numbers"),
    (lambda: lacing_values(VALUES, VALUES - 1, 0.1), "lower must be <= upper"),
    (lambda: lacing_values(VALUES, VALUES[:3], 0.1), "same shape"),
])
def test_bad_input_is_named(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


def test_float32_values_get_the_same_quantile_as_float64():
    # float32 cumulative sums of 50 x 0.02 drift past a 1e-9 tolerance: the 5th value must still be VaR_0.1
    values = torch.randn(200, 50, generator=torch.Generator().manual_seed(0))
    var = value_at_risk(values, 0.1)
    assert var.dtype == torch.float32 and torch.equal(var, values.sort(-1).values[:, 4])
    assert torch.allclose(conditional_value_at_risk(values, 0.1), values.sort(-1).values[:, :5].mean(-1))


def test_zero_probability_values_are_never_the_risk_nor_queried():
    values = torch.tensor([-100.0, 2.0, 9.0], dtype=torch.float64)
    weights = torch.tensor([0.0, 0.5, 0.5], dtype=torch.float64)
    assert value_at_risk(values, 1e-12, weights).item() == 2.0
    # weights within 1e-6 of summing to 1 are renormalised: the zero-weight 9 is not VaR_1
    assert value_at_risk(torch.tensor([1.0, 2.0, 9.0]), 1.0, [0.5, 0.5 - 5e-7, 0.0]).item() == 2.0
    lacing = lacing_values(values - 1, values + 300, 0.5, weights)
    assert not lacing[0] and lacing.any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("alpha", [1e-46, 5e-324, 1e-300, 1e-12])
def test_conditional_value_at_risk_at_tiny_alpha_is_the_smallest_value(dtype, alpha):
    # alpha is in the accepted range (0, 1]: the tail is the smallest value alone. Below ~7e-46 the tail's mass
    # is zero in float32 (and below ~6e-8 in float16), and the former 0 / alpha in the values' dtype was NaN.
    values = torch.randn(3, 10, generator=torch.Generator().manual_seed(0)).to(dtype).requires_grad_(True)
    cvar = conditional_value_at_risk(values, alpha)
    assert cvar.dtype == dtype and torch.equal(cvar, values.detach().min(-1).values)
    cvar.sum().backward()
    assert torch.equal(values.grad, (values.detach() == values.detach().min(-1, keepdim=True).values).to(dtype))
    # with weights, a leading zero-probability value is skipped and the next one is the whole tail
    weights = torch.tensor([0.0, 0.25, 0.75], dtype=torch.float64)
    three = torch.tensor([-9.0, 2.0, 1.0], dtype=dtype)
    assert conditional_value_at_risk(three, alpha, weights).item() == 1.0
    assert conditional_value_at_risk(three, alpha, weights[[0, 2, 1]]).item() == 1.0
    assert risk_measure(three, alpha, weights, measure="cvar").item() == 1.0


def test_conditional_value_at_risk_in_float32_matches_float64():
    values = torch.randn(50, 20, generator=torch.Generator().manual_seed(1))
    for alpha in (1e-46, 0.05, 0.13, 0.5, 1.0):
        low = conditional_value_at_risk(values, alpha)
        assert low.dtype == torch.float32
        assert torch.equal(low, conditional_value_at_risk(values.double(), alpha).float())
