"""The evidence API: verdicts on known cases, interval coverage, bad input, pooling, the forest plot."""

import math

import numpy as np
import pytest
import torch

from iclr24.core import Claim
from iclr24.core.evidence import (
    BOOTSTRAP_MIN_N,
    Evidence,
    against,
    all_of,
    compare,
    forest_plot,
    given,
    not_run,
    pool,
    ratio,
    tally,
)


def test_identical_samples_are_a_tie_not_a_pass():
    e = compare([0.203, 0.5, 0.7], [0.203, 0.5, 0.7], better="lower")
    assert e.verdict == "inconclusive" and e.effect == 0 and e.interval == (0.0, 0.0)
    assert e.prob_improvement == 0.5  # ties count half


def test_the_dats_review_case_a_median_of_zero_lower_in_two_of_three_is_inconclusive():
    # seed 0 tied (0.203 vs 0.203), two seeds slightly lower: the old median rule said "holds"
    e = compare([0.203, 0.180, 0.251], [0.203, 0.182, 0.254], better="lower")
    assert e.verdict == "inconclusive"


def test_a_clear_effect_holds_and_its_opposite_fails():
    better = [0.30, 0.28, 0.31, 0.29, 0.30]
    worse = [0.20, 0.19, 0.22, 0.20, 0.21]
    assert compare(better, worse).verdict == "holds"
    assert compare(worse, better).verdict == "fails"
    assert compare(worse, better, better="lower").verdict == "holds"
    assert compare(better, worse).prob_improvement == 1.0


@pytest.mark.parametrize("n", [1, 2])
def test_fewer_than_three_replicates_decide_nothing(n):
    e = compare([10.0 + i for i in range(n)], [0.0] * n)
    assert e.verdict == "inconclusive" and e.n == n


def test_the_student_t_interval_has_its_closed_form():
    d = np.array([1.0, 2.0, 3.0])
    e = compare(d, np.zeros(3))
    half = 4.302652729911275 * 1.0 / math.sqrt(3)  # t_{0.975, 2} * sd / sqrt(n)
    assert e.test == "Student t" and e.interval == pytest.approx((2 - half, 2 + half))
    assert e.verdict == "inconclusive"  # three consistent gains, but the interval [-0.48, 4.48] spans 0


def test_margin_and_direction():
    a, b = [1.05, 1.06, 1.04, 1.05], [1.0, 1.0, 1.0, 1.0]
    assert compare(a, b, margin=0.01).verdict == "holds"  # better by more than the margin
    assert compare(a, b, margin=0.1).verdict == "fails"  # better, but by less than asked: whole interval short
    assert compare(b, a, margin=-0.1).verdict == "holds"  # non-inferiority: at most 0.1 worse
    assert compare(a, b, better="lower", margin=0.1).verdict == "holds"  # "at most 0.1 higher"


def test_against_a_bar_and_the_exact_binomial_interval_for_pass_rates():
    assert against([0.91, 0.93, 0.92], 0.85).verdict == "holds"
    assert against([0.91, 0.93, 0.92], 0.9).verdict == "inconclusive"  # [0.895, 0.945] straddles 0.9
    assert against([0.91, 0.93, 0.92], 0.95).verdict == "fails"
    assert against([0.91, 0.93, 0.92], 0.85, better="lower").verdict == "fails"
    rate = against([1] * 18 + [0] * 2, 0.5, binary=True, unit="problems")
    assert rate.test.startswith("exact binomial") and rate.effect == 0.9 and rate.verdict == "holds"
    assert rate.interval == pytest.approx((0.683, 0.988), abs=1e-3)  # Clopper-Pearson, 18 of 20
    shares = against([1.0, 1.0, 1.0], 0.95)  # per-seed shares that are all 1: not three coin flips
    assert shares.test.startswith("none") and shares.verdict == "holds"
    assert pool([rate, rate]).test.startswith("exact binomial") and pool([rate, rate]).n == 40
    with pytest.raises(ValueError, match="binary outcomes must be 0 or 1, got 0.5"):
        against([1.0, 0.5, 0.0], 0.5, binary=True)


def test_ratio_is_judged_on_log_ratios():
    e = ratio([2.0, 2.2, 1.9, 2.1], [1.0, 1.0, 1.0, 1.0])
    assert e.effect == pytest.approx(math.exp(np.mean(np.log([2.0, 2.2, 1.9, 2.1]))))
    assert e.verdict == "holds" and e.interval[0] > 1
    load = ratio([0.91, 0.95, 1.06, 1.09], [1.0] * 4)  # eft's wall-clock flips: inconclusive, not a pass
    assert load.verdict == "inconclusive"
    with pytest.raises(ValueError, match="positive values"):
        ratio([1.0, 0.0, 1.0], [1.0, 1.0, 1.0])


def test_unpaired_samples_use_welch_and_the_mann_whitney_probability():
    e = compare([3.0, 3.1, 2.9, 3.2], [1.0, 1.1], paired=False)
    assert e.test == "Welch t" and e.n == 2 and e.verdict == "inconclusive"  # the smaller sample counts
    e = compare([3.0, 3.1, 2.9, 3.2], [1.0, 1.1, 0.9], paired=False)
    assert e.verdict == "holds" and e.prob_improvement == 1.0


def test_all_of_and_given():
    yes, no, tie = compare([2, 3, 4], [0, 0, 0]), compare([0, 0, 0], [2, 3, 4]), compare([1, 1, 1], [1, 1, 1])
    assert all_of(yes, yes).verdict == "holds"
    assert all_of(yes, no).verdict == "fails" and all_of(yes, tie).verdict == "inconclusive"
    assert all_of(not_run("off"), not_run("off")).verdict == "not run"
    # moe_peft's case: "on par" while everything sits at chance is untested, not a pass
    at_chance = against([0.275, 0.25, 0.26], 0.30)
    on_par = compare([0.27, 0.25, 0.26], [0.275, 0.25, 0.26], margin=-0.05)
    assert on_par.verdict == "holds" and given(at_chance, on_par).verdict == "inconclusive"
    assert "requirement fails" in given(at_chance, on_par).reason
    assert given(against([0.8, 0.85, 0.9], 0.3), on_par).verdict == "holds"


def test_not_run_is_not_fails_and_needs_a_reason():
    assert not_run("coin_iterations=0").verdict == "not run"
    with pytest.raises(ValueError, match="needs a reason"):
        not_run("  ")


def test_a_verdict_cannot_be_written_down():
    e = compare([0.2, 0.2, 0.2], [0.2, 0.2, 0.2])
    forged = {**e.to_dict(), "verdict": "holds"}
    with pytest.raises(ValueError, match="does not follow from the evidence"):
        Evidence.from_dict(forged)
    with pytest.raises(ValueError, match="does not follow"):
        Evidence(kind="against", verdict="holds", effect=1.0, interval=(0.5, 1.5), threshold=1.0, better="higher",
                 n=3, unit="seeds")


@pytest.mark.parametrize("call, message", [
    (lambda: compare([1.0, float("nan"), 2.0], [1.0, 1.0, 1.0]), r"a must be finite, got nan at index 1"),
    (lambda: compare([1.0, 2.0, 3.0], [1.0, 2.0]), "paired samples must have the same length, got a of 3 and b of 2"),
    (lambda: compare([], []), "a is empty"),
    (lambda: compare([[1.0, 2.0]], [[1.0, 2.0]]), r"one-dimensional .* got shape \(1, 2\)"),
    (lambda: compare("abc", [1.0]), "a must be a sequence of numbers"),
    (lambda: compare([1.0], [1.0], better="bigger"), "better must be 'higher' or 'lower', got 'bigger'"),
    (lambda: compare([1.0], [1.0], margin=float("inf")), "margin must be finite"),
    (lambda: compare([1.0], [1.0], confidence=1.5), r"confidence must be in \[0.5, 1\)"),
    (lambda: compare([1.0], [1.0], unit=""), "unit must name what a replicate is"),
    (lambda: against([1.0, 2.0], None), "bar must be a real number"),
    (lambda: ratio([1.0], [1.0], bar=0), "bar must be > 0"),
])
def test_bad_input_is_a_clear_error(call, message):
    with pytest.raises((TypeError, ValueError), match=message):
        call()


def test_tensors_and_numpy_values_are_accepted():
    e = compare(torch.tensor([3.0, 4.0, 5.0]), np.array([1.0, 1.0, 1.0]))
    assert e.verdict == "holds" and isinstance(e.samples[0][0], float)


@pytest.mark.parametrize("n", [5, 10, BOOTSTRAP_MIN_N + 10])
def test_a_95_percent_interval_covers_the_true_effect_90_to_99_percent_of_the_time(n):
    """400 simulated experiments of n paired replicates with true mean difference 0.3 (skewed noise at the
    bootstrap size, so the test is not only about normal data)."""
    rng = np.random.default_rng(n)
    covered = 0
    for _ in range(400):
        if n >= BOOTSTRAP_MIN_N:
            d = rng.exponential(1.0, n) - 1.0 + 0.3
        else:
            d = rng.normal(0.3, 1.0, n)
        lo, hi = compare(d, np.zeros(n)).interval
        covered += lo <= 0.3 <= hi
    assert 0.90 * 400 <= covered <= 0.99 * 400, covered


def test_bootstrap_intervals_are_deterministic():
    d = np.random.default_rng(0).normal(0.1, 1, 40)
    a, b = compare(d, np.zeros(40)), compare(d, np.zeros(40))
    assert a.test == "BCa bootstrap" and a.interval == b.interval


def test_pooling_concatenates_replicates_and_recomputes():
    seeds = [compare([0.4, 0.5], [0.0, 0.0]), compare([0.45, 0.55], [0.0, 0.0]), compare([0.5, 0.6], [0.0, 0.0])]
    assert {e.verdict for e in seeds} == {"inconclusive"}  # two replicates each
    pooled = pool([e.to_dict() for e in seeds])
    assert pooled.n == 6 and pooled.verdict == "holds" and pooled.effect == pytest.approx(0.5)
    assert pool([not_run("off"), not_run("off")]).verdict == "not run"
    assert pool([not_run("off"), seeds[0], seeds[1]]).n == 4  # seeds that ran are pooled
    both = pool([all_of(seeds[0], seeds[1]), all_of(seeds[1], seeds[2])])
    assert both.kind == "all_of" and both.parts[0].n == 4
    with pytest.raises(ValueError, match="different thresholds"):
        pool([compare([1.0, 2.0], [0.0, 0.0]), compare([1.0, 2.0], [0.0, 0.0], margin=0.5)])
    with pytest.raises(ValueError, match="different kinds"):
        pool([compare([1.0, 2.0], [0.0, 0.0]), against([1.0, 2.0], 0.0)])


def test_round_trip_through_json_keeps_everything():
    import json

    e = given(against([0.8, 0.85, 0.9], 0.3, label="accuracy"), ratio([2.0, 2.1, 1.9], [1.0, 1.1, 0.9]))
    back = Evidence.from_dict(json.loads(json.dumps(e.to_dict())))
    assert back == e


def test_summary_criterion_and_tally():
    e = compare([0.30, 0.28, 0.31], [0.20, 0.19, 0.22], unit="seeds", label="accuracy, MoV - (IA)^3")
    assert e.summary().startswith("0.0933 [") and e.summary().endswith("n=3 seeds")
    assert e.criterion == "mean paired difference of accuracy, MoV - (IA)^3 > 0 (whole 95% interval), n >= 3 seeds"
    assert tally(["holds", "holds", "fails", "not run"]) == "2 hold, 1 fail, 0 inconclusive, 1 not run"


def test_forest_plot_draws_every_kind():
    claims = [Claim("speed", "p", "m", ratio([2.0, 2.1, 1.9], [1.0, 1.0, 1.0])),
              Claim("tie", "p", "m", compare([1.0, 1.0, 1.0], [1.0, 1.0, 1.0])),
              Claim("untested", "p", "m", given(against([0.2, 0.2, 0.21], 0.5), compare([1, 2, 3], [0, 0, 0]))),
              Claim("off", "p", "m", not_run("switched off"))]
    fig = forest_plot(claims, title="toy")
    assert len(fig.axes) == 4 and "speed: holds" in fig.axes[0].get_title(loc="left")
    assert fig.axes[0].get_xscale() == "log"


def test_paired_pass_fail_outcomes_get_an_exact_interval():
    # tora's review case: ToRA solves 3 of 24 problems PAL does not, none the other way. A bootstrap said
    # [0.042, 0.292] ("holds"); the exact sign test gives p = 0.25: inconclusive.
    tora, pal = [1] * 3 + [1] * 6 + [0] * 15, [0] * 3 + [1] * 6 + [0] * 15
    e = compare(tora, pal, binary=True, unit="problems")
    assert e.test.startswith("exact conditional") and e.effect == pytest.approx(0.125)
    assert e.verdict == "inconclusive" and e.interval[0] < 0 < e.interval[1]
    clear = compare([1] * 12 + [0] * 12, [0] * 24, binary=True, unit="problems")  # 12 of 12 discordant wins
    assert clear.verdict == "holds" and clear.interval[0] > 0
    assert compare([1, 0, 1], [1, 0, 1], binary=True).interval == (0.0, 0.0)  # a tie
    assert pool([clear, clear]).test.startswith("exact conditional") and pool([clear, clear]).n == 48
    with pytest.raises(ValueError, match="binary outcomes must be 0 or 1"):
        compare([0.5, 1.0, 1.0], [0.0, 1.0, 1.0], binary=True)
    with pytest.raises(ValueError, match="pass paired=True"):
        compare([1, 0, 1], [0, 0, 1], binary=True, paired=False)
