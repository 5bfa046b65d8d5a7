"""Verdicts as evidence: a claim is judged by a statistic over replicates, never by a bare boolean.

Every claim of every reproduction is decided here, from what its run measured, against a margin fixed before
the run (at the top of each ``experiment.py``):

- :func:`compare` two methods over paired (or unpaired) replicates: the mean difference ``a - b``;
- :func:`against` a fixed bar (the paper's number, or a threshold stated before the run): the mean value;
- :func:`ratio` two sets of timings or counts: the geometric mean of the paired ratios ``a / b``.

Each returns an :class:`Evidence`: the effect, a confidence interval (Student t below
:data:`BOOTSTRAP_MIN_N` replicates, where a bootstrap under-covers; scipy's BCa bootstrap from there on; an exact
Clopper-Pearson interval for a rate of pass/fail outcomes, ``against(..., binary=True)``, and an exact one for
paired pass/fail outcomes, ``compare(..., binary=True)``), n and its unit (seeds, problems, prompts, ...), the
probability of improvement ``P(a better than b)`` (rliable's, ties counted half) and the verdict:

- ``holds``: the whole interval lies past the threshold in the claimed direction;
- ``fails``: the whole interval lies on the other side;
- ``inconclusive``: anything else: an interval across the threshold, a tie, or fewer than
  :data:`MIN_REPLICATES` replicates;
- ``not run``: the run did not measure it (:func:`not_run`, with the reason).

Claims built from several facts combine them with :func:`all_of` (every part must hold) and :func:`given` (a
comparison that means something only once a requirement holds, e.g. "on par" only above chance). An
:class:`Evidence` keeps its replicates, so a seed group pools them into one comparison (:func:`pool`) instead of
counting booleans. Facts true by construction are not evidence: they are ``Result.checks``.

References: Agarwal et al., "Deep RL at the Edge of the Statistical Precipice" (NeurIPS 2021; rliable);
Bouthillier et al., "Accounting for Variance in Machine Learning Benchmarks" (MLSys 2021).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

__all__ = [
    "BOOTSTRAP_MIN_N",
    "MIN_REPLICATES",
    "VERDICTS",
    "Evidence",
    "Verdict",
    "against",
    "all_of",
    "compare",
    "given",
    "not_run",
    "pool",
    "ratio",
    "tally",
]

Verdict = Literal["holds", "fails", "inconclusive", "not run"]
VERDICTS: tuple[str, ...] = ("holds", "fails", "inconclusive", "not run")
Better = Literal["higher", "lower"]

#: Fewer replicates than this can never decide a claim.
MIN_REPLICATES = 3
#: From this many replicates on, the interval is scipy's BCa bootstrap; below it, Student t (a bootstrap of a
#: handful of values under-covers: 82% for a nominal 95% at n = 5 in a simulation of 300 normal samples).
BOOTSTRAP_MIN_N = 20
_BOOTSTRAP_RESAMPLES = 4999
_BASE_KINDS = ("compare", "against", "ratio")


@dataclass(frozen=True)
class Evidence:
    """What a verdict rests on. Build it with :func:`compare`, :func:`against`, :func:`ratio`,
    :func:`all_of`, :func:`given` or :func:`not_run`; the constructor re-derives the verdict from the
    interval and refuses one that does not follow.

    Attributes
    ----------
    kind : str
        ``"compare"``, ``"against"``, ``"ratio"``, ``"all_of"``, ``"given"`` or ``"not run"``.
    verdict : str
        One of :data:`VERDICTS`.
    effect : float or None
        Mean difference ``a - b`` (compare), mean value (against), geometric-mean ratio ``a / b`` (ratio).
    interval : (float, float) or None
        The confidence interval of ``effect``.
    threshold : float or None
        What the interval must clear: the margin (compare), the bar (against, ratio).
    better : "higher" or "lower"
        The direction the claim asserts: ``effect > threshold`` or ``effect < threshold``.
    n : int
        Replicates (pairs, or the smaller sample when unpaired).
    unit : str
        What a replicate is: ``"seeds"``, ``"problems"``, ``"prompts"``, ``"graphs"``, ...
    test : str
        How the interval was computed.
    prob_improvement : float or None
        P(a better than b) in the claimed direction, ties counted half (against: the share of values past the
        bar).
    samples : tuple of tuples
        The replicates: ``(a, b)`` or ``(values,)``; what :func:`pool` concatenates.
    parts : tuple of Evidence
        For ``all_of`` and ``given``: the evidence combined (``given``: requirement first).
    label : str
        What the effect measures, e.g. ``"worst-case L2, DATS-w - uniform"``.
    reason : str
        Why a claim is not run, or why a ``given`` claim could not be tested.
    """

    kind: str
    verdict: str
    effect: float | None = None
    interval: tuple[float, float] | None = None
    threshold: float | None = None
    better: str | None = None
    n: int = 0
    unit: str = ""
    test: str = ""
    confidence: float = 0.95
    paired: bool | None = None
    prob_improvement: float | None = None
    samples: tuple[tuple[float, ...], ...] = ()
    parts: tuple[Evidence, ...] = ()
    label: str = ""
    reason: str = ""

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        if self.kind in _BASE_KINDS:
            expected = _decide(self.n, self.interval, self.threshold, self.better)
        elif self.kind in ("all_of", "given"):
            if not self.parts or not all(isinstance(p, Evidence) for p in self.parts):
                raise TypeError(f"{self.kind} evidence needs Evidence parts, got {self.parts!r}")
            expected = _combine(self.kind, [p.verdict for p in self.parts])
        elif self.kind == "not run":
            expected = "not run"
            if not self.reason:
                raise ValueError("a claim that was not run needs a reason")
        else:
            raise ValueError(f"unknown evidence kind {self.kind!r}")
        if self.verdict != expected:
            raise ValueError(f"verdict {self.verdict!r} does not follow from the evidence ({expected!r}); verdicts "
                             "are computed by iclr24.core.evidence, not written down")

    @property
    def holds(self) -> bool:
        return self.verdict == "holds"

    @property
    def criterion(self) -> str:
        """The decision rule in words, e.g. ``"mean paired difference < 0 (whole 95% interval), n >= 3 seeds"``."""
        if self.kind == "not run":
            return f"not run: {self.reason}"
        if self.kind == "all_of":
            return "all of: " + "; ".join(p.criterion for p in self.parts)
        if self.kind == "given":
            return f"{self.parts[1].criterion}, tested only if {self.parts[0].criterion}"
        what = {"compare": "mean paired difference" if self.paired else "difference of means",
                "against": "mean", "ratio": "geometric-mean ratio"}[self.kind]
        sign = ">" if self.better == "higher" else "<"
        label = f" of {self.label}" if self.label else ""
        return (f"{what}{label} {sign} {self.threshold:g} (whole {self.confidence:.0%} interval), "
                f"n >= {MIN_REPLICATES} {self.unit}")

    def summary(self) -> str:
        """One line: ``"-0.012 [-0.020, -0.004], n=8 seeds"`` (or the reason a claim was not run)."""
        if self.kind == "not run":
            return f"not run: {self.reason}"
        if self.kind == "given" and self.parts[0].verdict != "holds":
            return (f"{self.parts[1].summary()}; untested: requires {self.parts[0].label or 'a condition'} "
                    f"({self.parts[0].summary()}: {self.parts[0].verdict})")
        if self.effect is None:
            return "-"
        interval = (f" [{_num(self.interval[0])}, {_num(self.interval[1])}]"
                    if self.interval and all(math.isfinite(v) for v in self.interval) else " [no interval]")
        more = f" (+{len(self.parts) - 1} more)" if self.kind == "all_of" and len(self.parts) > 1 else ""
        x = "x" if self.kind == "ratio" else ""
        return f"{_num(self.effect)}{x}{interval}, n={self.n} {self.unit}{more}"

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "parts"}
        out["interval"] = list(self.interval) if self.interval is not None else None
        out["samples"] = [list(s) for s in self.samples]
        out["parts"] = [p.to_dict() for p in self.parts]
        out["criterion"] = self.criterion
        out["summary"] = self.summary()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Evidence:
        """The inverse of :meth:`to_dict` (the verdict is re-checked)."""
        if not isinstance(data, Mapping):
            raise TypeError(f"evidence must be a mapping, got {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        fields = {k: v for k, v in data.items() if k in names}
        if fields.get("interval") is not None:
            fields["interval"] = tuple(float(v) for v in fields["interval"])
        fields["samples"] = tuple(tuple(float(v) for v in s) for s in fields.get("samples", ()))
        fields["parts"] = tuple(cls.from_dict(p) for p in fields.get("parts", ()))
        return cls(**fields)


# --- the three measurements ----------------------------------------------------------------------------------


def compare(a: Any, b: Any, *, better: Better = "higher", margin: float = 0.0, paired: bool = True,
            binary: bool = False, confidence: float = 0.95, unit: str = "seeds", label: str = "") -> Evidence:
    """Is ``a`` better than ``b`` by more than ``margin``?

    The effect is the mean of the paired differences ``a - b`` (or the difference of the means when
    ``paired=False``); the claim is ``effect > margin`` (``better="higher"``) or ``effect < margin``
    (``better="lower"``). A negative margin with ``better="higher"`` states non-inferiority ("no more than
    ``|margin|`` worse").

    ``binary=True`` says each pair is two pass/fail outcomes (1/0), e.g. two methods on the same problem. The
    interval is then exact and conditional on the discordant pairs (McNemar's setting): of the m problems where
    the methods differ, ``a`` wins k; Clopper-Pearson bounds P(a wins | they differ), and the difference of the
    pass rates is ``m (2p - 1) / n``. (A bootstrap of a few discordant pairs, all one way, is far too sure.)

    Examples
    --------
    >>> compare([0.30, 0.28, 0.31, 0.29], [0.20, 0.19, 0.22, 0.20]).verdict
    'holds'
    >>> compare([0.2, 0.2, 0.2], [0.2, 0.2, 0.2]).verdict   # a tie decides nothing
    'inconclusive'
    >>> compare([0.1, 0.2], [0.3, 0.4], better="lower").verdict   # two replicates decide nothing
    'inconclusive'
    """
    better = _check_better(better)
    margin = _check_real("margin", margin)
    confidence = _check_confidence(confidence)
    a = _sample("a", a)
    b = _sample("b", b)
    if not isinstance(binary, bool):
        raise TypeError(f"binary must be True or False, got {binary!r}")
    if binary and not paired:
        raise ValueError("binary=True compares paired pass/fail outcomes; pass paired=True")
    if paired:
        if len(a) != len(b):
            raise ValueError(f"paired samples must have the same length, got a of {len(a)} and b of {len(b)}")
        d = a - b
        effect = float(np.mean(d))
        interval, test = _discordant_interval(a, b, confidence) if binary else _mean_interval(d, confidence)
        wins = np.sign(d) if better == "higher" else -np.sign(d)
        prob = float(np.mean((wins > 0) + 0.5 * (wins == 0)))
        n = len(d)
    else:
        effect = float(np.mean(a) - np.mean(b))
        interval, test = _difference_interval(a, b, confidence)
        prob = _prob_unpaired(a, b, better)
        n = min(len(a), len(b))
    return _base("compare", effect, interval, margin, better, n, unit, test, confidence, paired, prob,
                 (tuple(a.tolist()), tuple(b.tolist())), label)


def against(values: Any, bar: float, *, better: Better = "higher", binary: bool = False, confidence: float = 0.95,
            unit: str = "seeds", label: str = "") -> Evidence:
    """Is the mean of ``values`` past ``bar`` (a number fixed before the run)?

    ``binary=True`` says the values are pass/fail outcomes (1/0), e.g. one per problem: the mean is a rate and
    gets the exact Clopper-Pearson interval. (Not inferred from the values: per-seed shares that all happen to
    be 1.0 are not three coin flips.)

    Examples
    --------
    >>> against([0.91, 0.93, 0.92], 0.85).verdict
    'holds'
    >>> against([0.91, 0.93, 0.92], 0.9).verdict   # [0.895, 0.945]: three values cannot clear 0.9
    'inconclusive'
    >>> against([1, 1, 0, 1, 1], 0.5, binary=True, unit="problems").verdict   # 4 of 5 passes: too few
    'inconclusive'
    """
    better = _check_better(better)
    bar = _check_real("bar", bar)
    confidence = _check_confidence(confidence)
    if not isinstance(binary, bool):
        raise TypeError(f"binary must be True or False, got {binary!r}")
    x = _sample("values", values)
    interval, test = _mean_interval(x, confidence)
    if binary:
        if not np.isin(x, (0.0, 1.0)).all():
            raise ValueError(f"binary outcomes must be 0 or 1, got {x[~np.isin(x, (0.0, 1.0))][0]:g}")
        from scipy.stats import binomtest

        ci = binomtest(int(x.sum()), len(x)).proportion_ci(confidence_level=confidence, method="exact")
        interval, test = (float(ci.low), float(ci.high)), "exact binomial (Clopper-Pearson)"
    past = np.sign(x - bar) if better == "higher" else np.sign(bar - x)
    prob = float(np.mean((past > 0) + 0.5 * (past == 0)))
    return _base("against", float(np.mean(x)), interval, bar, better, len(x), unit, test, confidence, None, prob,
                 (tuple(x.tolist()),), label)


def ratio(a: Any, b: Any, *, bar: float = 1.0, better: Better = "higher", paired: bool = True,
          confidence: float = 0.95, unit: str = "repeats", label: str = "") -> Evidence:
    """Is ``a / b`` past ``bar``? For times, counts and other positive quantities.

    Ratios multiply, so the effect is the geometric mean of the paired ratios (unpaired: the ratio of geometric
    means) and its interval is that of the mean log-ratio, mapped back. A speed-up claim is
    ``ratio(exact_times, our_times, bar=1.0)``.

    Examples
    --------
    >>> e = ratio([2.0, 2.2, 1.9, 2.1], [1.0, 1.0, 1.0, 1.0])
    >>> round(e.effect, 2), e.verdict
    (2.05, 'holds')
    """
    better = _check_better(better)
    bar = _check_real("bar", bar)
    if bar <= 0:
        raise ValueError(f"bar must be > 0 for a ratio, got {bar}")
    confidence = _check_confidence(confidence)
    a = _sample("a", a)
    b = _sample("b", b)
    for name, x in (("a", a), ("b", b)):
        if len(x) and (x <= 0).any():
            raise ValueError(f"{name} must hold positive values for a ratio, got {x[x <= 0][0]:g} at index "
                             f"{int(np.argmax(x <= 0))}")
    logs = compare(np.log(a), np.log(b), better=better, margin=math.log(bar), paired=paired, confidence=confidence,
                   unit=unit)
    interval = tuple(math.exp(v) if math.isfinite(v) else v for v in logs.interval) if logs.interval else None
    return _base("ratio", math.exp(logs.effect), interval, bar, better, logs.n, unit,
                 f"{logs.test} on log ratios", confidence, paired, logs.prob_improvement,
                 (tuple(a.tolist()), tuple(b.tolist())), label)


# --- combining, not running, pooling -------------------------------------------------------------------------


def all_of(*parts: Evidence) -> Evidence:
    """Every part must hold: ``fails`` if any part fails, ``holds`` if all hold, else ``inconclusive`` (``not
    run`` if none ran). The first part is the one shown as the claim's effect."""
    if not parts or not all(isinstance(p, Evidence) for p in parts):
        raise TypeError(f"all_of takes one or more Evidence, got {parts!r}")
    return _composite("all_of", parts, parts[0])


def given(requirement: Evidence, evidence: Evidence) -> Evidence:
    """``evidence``'s verdict, if ``requirement`` holds; otherwise ``inconclusive`` (the claim could not be
    tested). E.g. "on par with full fine-tuning" means nothing while full fine-tuning sits at chance."""
    if not isinstance(requirement, Evidence) or not isinstance(evidence, Evidence):
        raise TypeError(f"given takes two Evidence, got {type(requirement).__name__} and {type(evidence).__name__}")
    out = _composite("given", (requirement, evidence), evidence)
    if requirement.verdict != "holds" and evidence.verdict != "not run":
        out = dataclasses.replace(out, reason=f"requirement {requirement.verdict}: {requirement.criterion}")
    return out


def not_run(reason: str) -> Evidence:
    """A claim this run did not measure (a switched-off part, a missing dataset), with the reason; never a
    failure."""
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError(f"not_run needs a reason, got {reason!r}")
    return Evidence(kind="not run", verdict="not run", reason=reason.strip())


def pool(evidence: Sequence[Evidence | Mapping[str, Any]]) -> Evidence:
    """One comparison from several runs' evidence for the same claim (a seed group): the replicates are
    concatenated and the statistic recomputed with the same threshold, direction and confidence."""
    items = [e if isinstance(e, Evidence) else Evidence.from_dict(e) for e in evidence]
    if not items:
        raise ValueError("pool needs at least one Evidence")
    ran = [e for e in items if e.kind != "not run"]
    if not ran:
        return items[0]
    kinds = {e.kind for e in ran}
    if len(kinds) != 1:
        raise ValueError(f"cannot pool evidence of different kinds: {sorted(kinds)}")
    kind = kinds.pop()
    if kind in ("all_of", "given"):
        widths = {len(e.parts) for e in ran}
        if len(widths) != 1:
            raise ValueError(f"cannot pool {kind} evidence with different numbers of parts: {sorted(widths)}")
        parts = [pool([e.parts[i] for e in ran]) for i in range(widths.pop())]
        return all_of(*parts) if kind == "all_of" else given(*parts)
    first = ran[0]
    for e in ran[1:]:
        if (e.threshold, e.better, e.paired, e.confidence) != (first.threshold, first.better, first.paired,
                                                              first.confidence):
            raise ValueError("cannot pool evidence with different thresholds, directions, pairing or confidence: "
                             f"{(first.threshold, first.better, first.paired, first.confidence)} vs "
                             f"{(e.threshold, e.better, e.paired, e.confidence)}")
    samples = [np.concatenate([np.asarray(e.samples[i], float) for e in ran]) for i in range(len(first.samples))]
    common = {"better": first.better, "confidence": first.confidence, "unit": first.unit, "label": first.label}
    if kind == "compare":
        return compare(*samples, margin=first.threshold, paired=bool(first.paired),
                       binary=first.test.startswith("exact conditional"), **common)
    if kind == "ratio":
        return ratio(*samples, bar=first.threshold, paired=bool(first.paired), **common)
    return against(samples[0], first.threshold, binary=first.test.startswith("exact binomial"), **common)


def tally(verdicts: Iterable[str]) -> str:
    """``"3 hold, 1 fail, 2 inconclusive, 0 not run"``."""
    verdicts = list(verdicts)
    counts = {v: verdicts.count(v) for v in VERDICTS}
    return (f"{counts['holds']} hold, {counts['fails']} fail, {counts['inconclusive']} inconclusive, "
            f"{counts['not run']} not run")


# --- the forest plot -----------------------------------------------------------------------------------------

VERDICT_COLOURS = {"holds": "#0a7a2f", "fails": "#b3261e", "inconclusive": "#a0640a", "not run": "#777777"}


def forest_plot(claims: Sequence[Any], title: str = ""):
    """One row per claim: its effect and interval against its threshold, coloured by verdict. Claims have
    different units, so each row has its own axis. ``claims`` are Claim objects (``.statement``,
    ``.evidence``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = max(len(claims), 1)
    fig, axes = plt.subplots(rows, 1, figsize=(9, 0.95 * rows + 0.5), squeeze=False)
    for ax, claim in zip(axes[:, 0], claims):
        e = claim.evidence
        shown = e.parts[1] if e.kind == "given" else e.parts[0] if e.kind == "all_of" else e
        colour = VERDICT_COLOURS[e.verdict]
        statement = claim.statement if len(claim.statement) <= 60 else claim.statement[:57] + "..."
        ax.set_title(f"{statement}: {e.verdict}", fontsize=8, loc="left", color=colour)
        ax.set_yticks([])
        for side in ("left", "right", "top"):
            ax.spines[side].set_visible(False)
        if shown.kind == "not run" or shown.effect is None:
            ax.text(0.0, 0.0, e.summary()[:110], fontsize=7, color=colour, va="center")
            ax.set_xticks([])
            ax.spines["bottom"].set_visible(False)
            ax.set_ylim(-1, 1)
            continue
        lo, hi = shown.interval if shown.interval else (shown.effect, shown.effect)
        finite = [v for v in (lo, hi, shown.effect, shown.threshold) if v is not None and math.isfinite(v)]
        if shown.kind == "ratio":
            ax.set_xscale("log")
        if all(math.isfinite(v) for v in (lo, hi)):
            ax.plot([lo, hi], [0, 0], color=colour, linewidth=2.5, solid_capstyle="butt")
        ax.plot([shown.effect], [0], "o", color=colour, markersize=6)
        ax.axvline(shown.threshold, color="black", linestyle="--", linewidth=0.9)
        pad = (max(finite) - min(finite)) * 0.15 or abs(finite[0]) * 0.1 or 0.1
        if shown.kind == "ratio":
            ax.set_xlim(min(finite) / 1.3, max(finite) * 1.3)
        else:
            ax.set_xlim(min(finite) - pad, max(finite) + pad)
        ax.set_ylim(-1, 1)
        ax.tick_params(axis="x", which="both", labelsize=7)
        ax.set_title(f"{shown.summary()}; dashed: {shown.threshold:g}", fontsize=7, loc="right", color="#333")
    if not claims:
        axes[0, 0].set_axis_off()
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


# --- internals -----------------------------------------------------------------------------------------------


def _base(kind, effect, interval, threshold, better, n, unit, test, confidence, paired, prob, samples,
          label) -> Evidence:
    if not isinstance(unit, str) or not unit.strip():
        raise ValueError(f"unit must name what a replicate is (e.g. 'seeds', 'problems'), got {unit!r}")
    if not isinstance(label, str):
        raise TypeError(f"label must be a str, got {label!r}")
    interval = None if interval is None else (float(interval[0]), float(interval[1]))
    verdict = _decide(n, interval, threshold, better)
    return Evidence(kind=kind, verdict=verdict, effect=float(effect), interval=interval, threshold=float(threshold),
                    better=better, n=int(n), unit=unit.strip(), test=test, confidence=confidence, paired=paired,
                    prob_improvement=prob, samples=samples, label=label)


def _composite(kind: str, parts: Sequence[Evidence], shown: Evidence) -> Evidence:
    return Evidence(kind=kind, verdict=_combine(kind, [p.verdict for p in parts]), effect=shown.effect,
                    interval=shown.interval, threshold=shown.threshold, better=shown.better, n=shown.n,
                    unit=shown.unit, test=shown.test, confidence=shown.confidence, paired=shown.paired,
                    prob_improvement=shown.prob_improvement, parts=tuple(parts), label=shown.label)


def _decide(n: int, interval: tuple[float, float] | None, threshold: float | None, better: str | None) -> str:
    if n < MIN_REPLICATES or interval is None or threshold is None or better not in ("higher", "lower"):
        return "inconclusive"
    lo, hi = interval
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "inconclusive"
    if better == "higher":
        return "holds" if lo > threshold else "fails" if hi < threshold else "inconclusive"
    return "holds" if hi < threshold else "fails" if lo > threshold else "inconclusive"


def _combine(kind: str, verdicts: Sequence[str]) -> str:
    if kind == "given":
        requirement, verdict = verdicts
        if verdict == "not run" or requirement == "not run":
            return "not run"
        return verdict if requirement == "holds" else "inconclusive"
    if "fails" in verdicts:
        return "fails"
    if all(v == "holds" for v in verdicts):
        return "holds"
    if all(v == "not run" for v in verdicts):
        return "not run"
    return "inconclusive"


def _mean_interval(x: np.ndarray, confidence: float) -> tuple[tuple[float, float] | None, str]:
    """The interval of the mean of one sample."""
    from scipy import stats

    n = len(x)
    if n < 2:
        return None, "none (one replicate)"
    if np.ptp(x) == 0:  # every replicate equal: no spread to build an interval from
        return (float(x[0]), float(x[0])), "none (every replicate equal)"
    if n >= BOOTSTRAP_MIN_N:
        interval = _bootstrap((x,), lambda s, axis: np.mean(s, axis=axis), confidence)
        if interval is not None:
            return interval, "BCa bootstrap"
    ci = stats.ttest_1samp(x, 0.0).confidence_interval(confidence_level=confidence)
    return (float(ci.low), float(ci.high)), "Student t"


def _discordant_interval(a: np.ndarray, b: np.ndarray, confidence: float):
    """Exact interval of the difference of paired pass rates, conditional on the discordant pairs."""
    from scipy.stats import binomtest

    for name, x in (("a", a), ("b", b)):
        if not np.isin(x, (0.0, 1.0)).all():
            raise ValueError(f"binary outcomes must be 0 or 1, got {x[~np.isin(x, (0.0, 1.0))][0]:g} in {name}")
    n, wins, losses = len(a), int(np.sum(a > b)), int(np.sum(a < b))
    test = "exact conditional on discordant pairs (McNemar, Clopper-Pearson)"
    m = wins + losses
    if m == 0:  # every pair agrees: a tie
        return (0.0, 0.0), test
    ci = binomtest(wins, m).proportion_ci(confidence_level=confidence, method="exact")
    return (m * (2 * float(ci.low) - 1) / n, m * (2 * float(ci.high) - 1) / n), test


def _difference_interval(a: np.ndarray, b: np.ndarray, confidence: float):
    """The interval of mean(a) - mean(b) for independent samples."""
    from scipy import stats

    if min(len(a), len(b)) < 2:
        return None, "none (one replicate)"
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        d = float(a[0] - b[0])
        return (d, d), "none (every replicate equal)"
    if min(len(a), len(b)) >= BOOTSTRAP_MIN_N:
        interval = _bootstrap((a, b), lambda s, t, axis: np.mean(s, axis=axis) - np.mean(t, axis=axis),
                              confidence)
        if interval is not None:
            return interval, "BCa bootstrap (unpaired)"
    ci = stats.ttest_ind(a, b, equal_var=False).confidence_interval(confidence_level=confidence)
    return (float(ci.low), float(ci.high)), "Welch t"


def _bootstrap(data, statistic, confidence: float) -> tuple[float, float] | None:
    import warnings

    from scipy import stats

    # A fixed generator: the same replicates give the same interval (a run's verdicts are deterministic).
    generator = np.random.default_rng(0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # BCa's degenerate-distribution warning: handled below
            try:
                res = stats.bootstrap(data, statistic, confidence_level=confidence, method="BCa",
                                      n_resamples=_BOOTSTRAP_RESAMPLES, vectorized=True, rng=generator)
            except TypeError:  # scipy < 1.15 names the generator random_state
                res = stats.bootstrap(data, statistic, confidence_level=confidence, method="BCa",
                                      n_resamples=_BOOTSTRAP_RESAMPLES, vectorized=True, random_state=generator)
    except ValueError:
        return None
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else None


def _prob_unpaired(a: np.ndarray, b: np.ndarray, better: str) -> float:
    """P(a better than b) for independent draws, ties counted half (the Mann-Whitney U over na * nb)."""
    diff = a[:, None] - b[None, :]
    wins = np.sign(diff) if better == "higher" else -np.sign(diff)
    return float(np.mean((wins > 0) + 0.5 * (wins == 0)))


def _sample(name: str, values: Any) -> np.ndarray:
    if isinstance(values, (str, bytes)) or isinstance(values, Mapping):
        raise TypeError(f"{name} must be a sequence of numbers, got {type(values).__name__}")
    if hasattr(values, "detach"):  # a torch tensor
        values = values.detach().cpu().numpy()
    try:
        x = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a sequence of numbers, got {values!r}") from None
    if x.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional (one value per replicate), got shape {x.shape}")
    if len(x) == 0:
        raise ValueError(f"{name} is empty: a claim needs at least one replicate")
    bad = ~np.isfinite(x)
    if bad.any():
        raise ValueError(f"{name} must be finite, got {x[bad][0]} at index {int(np.argmax(bad))}")
    return x


def _check_better(better: Any) -> str:
    if better not in ("higher", "lower"):
        raise ValueError(f"better must be 'higher' or 'lower', got {better!r}")
    return better


def _check_real(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return value


def _check_confidence(confidence: Any) -> float:
    value = _check_real("confidence", confidence)
    if not 0.5 <= value < 1:
        raise ValueError(f"confidence must be in [0.5, 1), got {value}")
    return value


def _num(value: float) -> str:
    return f"{value:.3g}"
