"""Wall-clock comparisons that survive a shared, noisy 2-core machine.

Candidates are run side by side in one process, interleaved (A, B, A, B, ...), and
summarised by medians, so load that comes and goes hits all of them alike. Report
ratios, never a lone absolute time.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

__all__ = ["fit_power_law", "interleaved_times", "median_ratio"]


def interleaved_times(
    candidates: Mapping[str, Callable[[], object]], *, repeats: int = 5, warmup: int = 1
) -> dict[str, list[float]]:
    """Seconds per call of each candidate, measured in interleaved rounds.

    Parameters
    ----------
    candidates : dict of str to callable
        Zero-argument callables; each call is one measurement.
    repeats : int
        Measured rounds; every round calls each candidate once, in a rotating order.
    warmup : int
        Unmeasured rounds first (allocator, caches, lazy init).
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    names = list(candidates)
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(warmup + repeats):
        # Rotate the order so no candidate always runs right after the same other one.
        order = names[round_ % len(names):] + names[: round_ % len(names)]
        for name in order:
            start = time.perf_counter()
            candidates[name]()
            elapsed = time.perf_counter() - start
            if round_ >= warmup:
                times[name].append(elapsed)
    return times


def median_ratio(times: Mapping[str, Sequence[float]], numerator: str, denominator: str) -> float:
    """median(times[numerator]) / median(times[denominator]); e.g. a speed-up is exact / ours."""
    return statistics.median(times[numerator]) / statistics.median(times[denominator])


def fit_power_law(ns: Sequence[float], times: Sequence[float]) -> float:
    """Exponent p of the least-squares fit ``time ~ c * n**p`` in log-log space."""
    if len(ns) != len(times) or len(ns) < 2:
        raise ValueError(f"need at least two (n, time) pairs of equal length, got {len(ns)} and {len(times)}")
    slope, _ = np.polyfit(np.log(np.asarray(ns, float)), np.log(np.asarray(times, float)), 1)
    return float(slope)
