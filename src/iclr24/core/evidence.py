"""Verdicts as evidence: a claim is judged by a statistic over independent replicates, never by a bare boolean.

Every claim of every reproduction is decided here, from what its run measured, against a margin fixed before
the run (at the top of each ``experiment.py``, with its provenance on the :class:`~iclr24.core.Claim`):

- :func:`compare` two methods over paired (or unpaired) replicates: the mean difference ``a - b``;
- :func:`against` a fixed bar (the paper's number, or a threshold stated before the run): the mean value;
- :func:`ratio` two sets of timings or counts: the geometric mean of the paired ratios ``a / b``.

Each returns an :class:`Evidence`: the effect, a confidence interval, n and its unit (seeds, problems, templates,
...), the probability of improvement past the claim's threshold and the verdict:

- ``holds``: the whole interval lies past the threshold in the claimed direction;
- ``fails``: the whole interval lies on the other side;
- ``inconclusive``: anything else: an interval across the threshold, replicates with no spread (a deterministic
  quantity is a check, not evidence), or fewer than :data:`MIN_REPLICATES` independent units;
- ``not run``: the run did not measure it (:func:`not_run`, with the reason).

The intervals, each chosen by simulation (``tests/core/test_evidence.py`` measures their coverage):

- a mean (``against``, paired ``compare``, ``ratio`` on log ratios): Student t at every n. A BCa bootstrap
  under-covered heavy-tailed noise (88% at n = 20 with Student-t(3) noise, where t covers 95%) and needs memory
  growing with n^2;
- an unpaired difference: Welch t;
- a rate of pass/fail outcomes (``against(..., binary=True)``): exact Clopper-Pearson;
- a paired difference of pass rates (``compare(..., binary=True)``): Tango's score interval, valid at any margin
  (an interval conditional on the discordant pairs covered 44-56% off a zero margin);
- clustered replicates (``clusters=``: problems drawn from templates, images from one trained network): the
  above over the cluster means, n being the number of clusters.

Replicates that a seed does not draw (two bundled data sets, the first N HumanEval problems, labelled pairs) are
``fixed=True``: a seed group (:func:`pool`) counts each of them once instead of once per seed. Claims built from
several facts combine them with :func:`all_of` (every part must hold) and :func:`given` (a comparison that means
something only once a requirement holds); each part keeps its own effect, interval and n.

References: Agarwal et al., "Deep RL at the Edge of the Statistical Precipice" (NeurIPS 2021; rliable);
Bouthillier et al., "Accounting for Variance in Machine Learning Benchmarks" (MLSys 2021); Tango, "Equivalence
test and confidence interval for the difference in proportions for the paired-sample design" (Stat. Med. 1998);
Newcombe, "Improved confidence intervals for the difference between binomial proportions based on paired data"
(Stat. Med. 1998).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

__all__ = [
    "MAX_REPLICATES",
    "MIN_REPLICATES",
    "VERDICTS",
    "Evidence",
    "against",
    "all_of",
    "compare",
    "forest_plot",
    "forest_rows",
    "given",
    "not_run",
    "pool",
    "ratio",
    "tally",
]

Verdict = Literal["holds", "fails", "inconclusive", "not run"]
VERDICTS: tuple[str, ...] = ("holds", "fails", "inconclusive", "not run")
Better = Literal["higher", "lower"]

#: Fewer independent units than this can never decide a claim.
MIN_REPLICATES = 3
#: The most replicates one sample may hold. Every interval here needs memory linear in n (10^7 values: 80 MB);
#: past it, summarise first (e.g. one pass rate per problem instead of one outcome per sample).
MAX_REPLICATES = 10_000_000
_BASE_KINDS = ("compare", "against", "ratio")
_NO_SPREAD = "none (no spread: every replicate equal; a deterministic quantity is a check, not evidence)"


@dataclass(frozen=True)
class Evidence:
    """What a verdict rests on. Build it with :func:`compare`, :func:`against`, :func:`ratio`,
    :func:`all_of`, :func:`given` or :func:`not_run`; the constructor re-derives the verdict from the
    interval and refuses one that does not follow, and :meth:`rederived` recomputes everything from the samples.

    Attributes
    ----------
    kind : str
        ``"compare"``, ``"against"``, ``"ratio"``, ``"all_of"``, ``"given"`` or ``"not run"``.
    verdict : str
        One of :data:`VERDICTS`.
    effect : float or None
        Mean difference ``a - b`` (compare), mean value (against), geometric-mean ratio ``a / b`` (ratio); over
        cluster means when clustered. None for ``all_of`` / ``given``: each part has its own.
    interval : (float, float) or None
        The confidence interval of ``effect``; None where there is none (one unit, or no spread).
    threshold : float or None
        What the interval must clear: the margin (compare), the bar (against, ratio).
    better : "higher" or "lower"
        The direction the claim asserts: ``effect > threshold`` or ``effect < threshold``.
    n : int
        Independent units: pairs, values, or clusters when clustered (unpaired: the smaller sample).
    unit : str
        What a unit is: ``"seeds"``, ``"problems"``, ``"templates"``, ``"graphs"``, ...
    test : str
        How the interval was computed.
    prob_improvement : float or None
        The share of units past the claim's threshold in the claimed direction, ties counted half (unpaired:
        over all pairs of values, the Mann-Whitney U over na nb).
    samples : tuple of tuples
        The replicates: ``(a, b)`` or ``(values,)``; what :func:`pool` concatenates.
    binary : bool
        The replicates are pass/fail outcomes (1/0).
    clusters : tuple of str
        One label per replicate, naming the independent unit it belongs to (empty: every replicate is one).
    fixed : bool
        The replicates are a fixed set the seed does not draw: pooling counts each once.
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
    binary: bool = False
    clusters: tuple[str, ...] = ()
    fixed: bool = False
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
            if self.kind == "given" and len(self.parts) != 2:
                raise ValueError(f"given evidence has a requirement and a claim, got {len(self.parts)} parts")
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
    def deciding(self) -> tuple[Evidence, ...]:
        """The parts that decide the verdict: a failing part of an ``all_of`` (else every part that did not
        hold), or a ``given``'s requirement while it does not hold. Itself for a base kind."""
        if self.kind == "given":
            return (self.parts[0],) if self.parts[0].verdict != "holds" else (self.parts[1],)
        if self.kind == "all_of":
            failing = tuple(p for p in self.parts if p.verdict == "fails")
            return failing or tuple(p for p in self.parts if p.verdict != "holds") or self.parts
        return (self,)

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
                "against": "pass rate" if self.binary else "mean", "ratio": "geometric-mean ratio"}[self.kind]
        sign = ">" if self.better == "higher" else "<"
        label = f" of {self.label}" if self.label else ""
        return (f"{what}{label} {sign} {self.threshold:g} (whole {self.confidence:.0%} interval), "
                f"n >= {MIN_REPLICATES} {self.unit}")

    @property
    def bar(self) -> str:
        """The side that holds, in words: ``"> 0"``, ``"< 0.1"``, ``"> 1x"``."""
        if self.kind not in _BASE_KINDS:
            return ""
        return f"{'>' if self.better == 'higher' else '<'} {_num(self.threshold)}{'x' if self.kind == 'ratio' else ''}"

    def summary(self) -> str:
        """One line: ``"-0.012 [-0.020, -0.004], n=8 seeds"`` (or the reason a claim was not run). A combined
        claim lists every part with its verdict."""
        if self.kind == "not run":
            return f"not run: {self.reason}"
        if self.kind == "all_of":
            return "; ".join(f"({i}) {p.verdict}: {p.summary()}" for i, p in enumerate(self.parts, 1))
        if self.kind == "given":
            requirement, claim = self.parts
            if requirement.verdict != "holds":
                return (f"{claim.summary()}; untested: requires {requirement.label or 'a condition'} "
                        f"({requirement.summary()}: {requirement.verdict})")
            return f"{claim.summary()} (requirement holds: {requirement.summary()})"
        if self.effect is None:
            return "-"
        interval = (f" [{_num(self.interval[0])}, {_num(self.interval[1])}]" if self.interval
                    else " [no interval: no spread]" if self.test == _NO_SPREAD else " [no interval]")
        x = "x" if self.kind == "ratio" else ""
        if self.paired is False and len(self.samples) == 2 and len(self.samples[0]) != len(self.samples[1]):
            n = f"n={len(self.samples[0])} vs {len(self.samples[1])}"
        else:
            n = f"n={self.n}"
        return f"{_num(self.effect)}{x}{interval}, {n} {self.unit}, vs {self.bar}"

    def rederived(self) -> Evidence:
        """The same evidence recomputed from its samples (and each part's): what a stored record must equal.
        Raises ValueError if the record cannot be recomputed (no samples, or samples that are not numbers)."""
        if self.kind == "not run":
            return not_run(self.reason)
        if self.kind in ("all_of", "given"):
            parts = [p.rederived() for p in self.parts]
            return all_of(*parts) if self.kind == "all_of" else given(*parts)
        expected = 1 if self.kind == "against" else 2
        if len(self.samples) != expected:
            raise ValueError(f"{self.kind} evidence{_named(self.label)} holds {len(self.samples)} samples, expected "
                             f"{expected}: it cannot be recomputed")
        common = {"better": self.better, "confidence": self.confidence, "unit": self.unit, "label": self.label,
                  "clusters": self.clusters or None, "fixed": self.fixed}
        if self.kind == "compare":
            return compare(*self.samples, margin=self.threshold, paired=bool(self.paired), binary=self.binary,
                           **common)
        if self.kind == "ratio":
            return ratio(*self.samples, bar=self.threshold, paired=bool(self.paired), **common)
        return against(self.samples[0], self.threshold, binary=self.binary, **common)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "parts"}
        out["interval"] = list(self.interval) if self.interval is not None else None
        out["samples"] = [list(s) for s in self.samples]
        out["clusters"] = list(self.clusters)
        out["parts"] = [p.to_dict() for p in self.parts]
        out["criterion"] = self.criterion
        out["summary"] = self.summary()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Evidence:
        """The inverse of :meth:`to_dict` (the verdict is re-checked against the interval; :meth:`rederived`
        recomputes the interval too)."""
        if not isinstance(data, Mapping):
            raise TypeError(f"evidence must be a mapping, got {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        fields = {k: v for k, v in data.items() if k in names}
        if fields.get("interval") is not None:
            fields["interval"] = tuple(float(v) for v in fields["interval"])
        fields["samples"] = tuple(tuple(float(v) for v in s) for s in fields.get("samples", ()))
        fields["clusters"] = tuple(str(v) for v in fields.get("clusters", ()))
        fields["parts"] = tuple(cls.from_dict(p) for p in fields.get("parts", ()))
        return cls(**fields)


# --- the three measurements ----------------------------------------------------------------------------------


def compare(a: Any, b: Any, *, better: Better = "higher", margin: float = 0.0, paired: bool = True,
            binary: bool = False, clusters: Sequence[Any] | None = None, fixed: bool = False,
            confidence: float = 0.95, unit: str = "seeds", label: str = "") -> Evidence:
    """Is ``a`` better than ``b`` by more than ``margin``?

    The effect is the mean of the paired differences ``a - b`` (or the difference of the means when
    ``paired=False``); the claim is ``effect > margin`` (``better="higher"``) or ``effect < margin``
    (``better="lower"``). A negative margin with ``better="higher"`` states non-inferiority ("no more than
    ``|margin|`` worse").

    ``binary=True`` says each pair is two pass/fail outcomes (1/0), e.g. two methods on the same problem: the
    interval of the difference of the pass rates is Tango's score interval, valid at any margin.
    ``clusters`` gives each pair's independent unit (its template, data set or trained network): the effect and
    its interval are then over the cluster means, and n counts clusters. ``fixed=True`` says the pairs are a
    fixed set the seed does not draw (see :func:`pool`).

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
    paired, binary, fixed = _check_bool("paired", paired), _check_bool("binary", binary), _check_bool("fixed", fixed)
    a, b = _sample("a", a, binary), _sample("b", b, binary)
    if binary and not paired:
        raise ValueError("binary=True compares paired pass/fail outcomes; pass paired=True")
    if not paired:
        if clusters is not None:
            raise ValueError("clusters label paired replicates; pass paired=True, or average each cluster first")
        effect = _finite_effect("mean(a) - mean(b)", float(np.mean(a)) - float(np.mean(b)))
        interval, test = _difference_interval(a, b, confidence)
        return _base("compare", effect, interval, margin, better, min(len(a), len(b)), unit, test, confidence,
                     False, _prob_unpaired(a - margin, b, better), (a, b), binary, (), fixed, label)
    if len(a) != len(b):
        raise ValueError(f"paired samples must have the same length, got a of {len(a)} and b of {len(b)}")
    labels = _labels(clusters, len(a))
    with np.errstate(over="ignore", invalid="ignore"):
        d = a - b
    if not np.isfinite(d).all():
        raise ValueError(f"a - b overflows at index {int(np.argmax(~np.isfinite(d)))}: rescale the values")
    (units_a, units_b), over = _units((a, b), labels)
    if binary and _is_binary(units_a) and _is_binary(units_b):
        interval, test = _paired_rate_interval(units_a, units_b, confidence)
    else:
        interval, test = _mean_interval(units_a - units_b, confidence)
    units = units_a - units_b
    return _base("compare", _finite_effect("mean(a - b)", float(np.mean(units))), interval, margin, better,
                 len(units), unit, test + over, confidence, True, _share_past(units, margin, better), (a, b),
                 binary, labels, fixed, label)


def against(values: Any, bar: float, *, better: Better = "higher", binary: bool = False,
            clusters: Sequence[Any] | None = None, fixed: bool = False, confidence: float = 0.95,
            unit: str = "seeds", label: str = "") -> Evidence:
    """Is the mean of ``values`` past ``bar`` (a number fixed before the run)?

    ``binary=True`` says the values are pass/fail outcomes (1/0), e.g. one per problem: the mean is a rate and
    gets the exact Clopper-Pearson interval. (Not inferred from the values: per-seed shares that all happen to
    be 1.0 are not three coin flips; they have no spread and decide nothing.) ``clusters`` and ``fixed`` as in
    :func:`compare`.

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
    binary, fixed = _check_bool("binary", binary), _check_bool("fixed", fixed)
    x = _sample("values", values, binary)
    labels = _labels(clusters, len(x))
    (units,), over = _units((x,), labels)
    if binary and _is_binary(units):
        from scipy.stats import binomtest

        ci = binomtest(int(units.sum()), len(units)).proportion_ci(confidence_level=confidence, method="exact")
        interval, test = (float(ci.low), float(ci.high)), "exact binomial (Clopper-Pearson)"
    else:
        interval, test = _mean_interval(units, confidence)
    return _base("against", float(np.mean(units)), interval, bar, better, len(units), unit, test + over, confidence,
                 None, _share_past(units, bar, better), (x,), binary, labels, fixed, label)


def ratio(a: Any, b: Any, *, bar: float = 1.0, better: Better = "higher", paired: bool = True,
          clusters: Sequence[Any] | None = None, fixed: bool = False, confidence: float = 0.95,
          unit: str = "repeats", label: str = "") -> Evidence:
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
    paired, fixed = _check_bool("paired", paired), _check_bool("fixed", fixed)
    a, b = _sample("a", a), _sample("b", b)
    for name, x in (("a", a), ("b", b)):
        if (x <= 0).any():
            raise ValueError(f"{name} must hold positive values for a ratio, got {x[x <= 0][0]:g} at index "
                             f"{int(np.argmax(x <= 0))}")
    logs = compare(np.log(a), np.log(b), better=better, margin=math.log(bar), paired=paired, clusters=clusters,
                   confidence=confidence, unit=unit)
    interval = tuple(math.exp(v) for v in logs.interval) if logs.interval else None
    return _base("ratio", math.exp(logs.effect), interval, bar, better, logs.n, unit, f"{logs.test} on log ratios",
                 confidence, paired, logs.prob_improvement, (a, b), False, logs.clusters, fixed, label)


# --- combining, not running, pooling -------------------------------------------------------------------------


def all_of(*parts: Evidence) -> Evidence:
    """Every part must hold: ``fails`` if any part fails, ``holds`` if all hold, else ``inconclusive`` (``not
    run`` if none ran). Each part keeps its own effect, interval and n; the report shows each."""
    if not parts or not all(isinstance(p, Evidence) for p in parts):
        raise TypeError(f"all_of takes one or more Evidence, got {parts!r}")
    return Evidence(kind="all_of", verdict=_combine("all_of", [p.verdict for p in parts]), parts=tuple(parts),
                    label=" and ".join(p.label for p in parts if p.label))


def given(requirement: Evidence, evidence: Evidence) -> Evidence:
    """``evidence``'s verdict, if ``requirement`` holds; otherwise ``inconclusive`` (the claim could not be
    tested). E.g. "on par with full fine-tuning" means nothing while full fine-tuning sits at chance."""
    if not isinstance(requirement, Evidence) or not isinstance(evidence, Evidence):
        raise TypeError(f"given takes two Evidence, got {type(requirement).__name__} and {type(evidence).__name__}")
    verdict = _combine("given", [requirement.verdict, evidence.verdict])
    reason = (f"requirement {requirement.verdict}: {requirement.criterion}"
              if requirement.verdict != "holds" and evidence.verdict != "not run" else "")
    return Evidence(kind="given", verdict=verdict, parts=(requirement, evidence), label=evidence.label, reason=reason)


def not_run(reason: str) -> Evidence:
    """A claim this run did not measure (a switched-off part, a missing dataset), with the reason; never a
    failure."""
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError(f"not_run needs a reason, got {reason!r}")
    return Evidence(kind="not run", verdict="not run", reason=reason.strip())


def pool(evidence: Sequence[Evidence | Mapping[str, Any]]) -> Evidence:
    """One comparison from several runs' evidence for the same claim (a seed group), recomputed with the same
    threshold, direction and confidence.

    Replicates a seed draws are concatenated: each is new evidence. Replicates of a fixed set (``fixed=True``:
    the same data sets, problems or pairs in every seed) are not: each unit (its cluster label, or its position)
    stays one unit, its outcomes over the seeds averaged, so five seeds of three bundled tasks are still n = 3.
    Cluster labels name units across runs: the same label in two runs is the same unit.
    """
    if isinstance(evidence, (str, bytes, Mapping, Evidence)):
        raise TypeError(f"pool takes a sequence of Evidence, got {type(evidence).__name__}")
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
    expected = 1 if kind == "against" else 2
    for e in ran:
        if len(e.samples) != expected or not all(len(s) for s in e.samples):
            raise ValueError(f"cannot pool {kind} evidence{_named(e.label)} without its replicates: its 'samples' "
                             "are missing (a record written without them can be shown, not pooled)")
        key = (e.threshold, e.better, e.paired, e.confidence, e.binary, e.fixed)
        if key != (first.threshold, first.better, first.paired, first.confidence, first.binary, first.fixed):
            raise ValueError("cannot pool evidence with different thresholds, directions, pairing, confidence, "
                             f"binary or fixed: {(first.threshold, first.better, first.paired, first.confidence)} "
                             f"vs {(e.threshold, e.better, e.paired, e.confidence)}")
    if len({bool(e.clusters) for e in ran}) != 1:
        raise ValueError("cannot pool clustered with unclustered evidence of one claim")
    samples = [np.concatenate([np.asarray(e.samples[i], float) for e in ran]) for i in range(expected)]
    labels = [c for e in ran for c in e.clusters] or None
    if first.fixed and labels is None:
        sizes = {len(e.samples[0]) for e in ran}
        if len(sizes) != 1:
            raise ValueError(f"cannot pool a fixed set of different sizes across runs: {sorted(sizes)}")
        labels = [f"#{i}" for e in ran for i in range(len(e.samples[0]))]
    common = {"better": first.better, "confidence": first.confidence, "unit": first.unit, "label": first.label,
              "clusters": labels, "fixed": first.fixed}
    if kind == "compare":
        return compare(*samples, margin=first.threshold, paired=bool(first.paired), binary=first.binary, **common)
    if kind == "ratio":
        return ratio(*samples, bar=first.threshold, paired=bool(first.paired), **common)
    return against(samples[0], first.threshold, binary=first.binary, **common)


def tally(verdicts: Iterable[str]) -> str:
    """``"3 hold, 1 fail, 2 inconclusive, 0 not run"``."""
    if isinstance(verdicts, (str, bytes)):
        raise TypeError(f"tally takes an iterable of verdicts, not one string: {verdicts!r}")
    verdicts = list(verdicts)
    unknown = [v for v in verdicts if v not in VERDICTS]
    if unknown:
        raise ValueError(f"tally: unknown verdict {unknown[0]!r}; expected one of {VERDICTS}")
    counts = {v: verdicts.count(v) for v in VERDICTS}
    return (f"{counts['holds']} hold, {counts['fails']} fail, {counts['inconclusive']} inconclusive, "
            f"{counts['not run']} not run")


# --- the forest plot -----------------------------------------------------------------------------------------

VERDICT_COLOURS = {"holds": "#0a7a2f", "fails": "#b3261e", "inconclusive": "#a0640a", "not run": "#777777"}


def forest_rows(evidence: Evidence) -> list[tuple[str, Evidence, bool]]:
    """The rows a claim shows: ``(name, evidence, deciding)``, one for a base claim and one per part of an
    ``all_of`` / ``given`` (nested parts flattened), ``deciding`` marking the parts that set the verdict."""
    if evidence.kind not in ("all_of", "given"):
        return [("", evidence, True)]
    deciding = {id(p) for p in evidence.deciding}
    rows = []
    for i, part in enumerate(evidence.parts, 1):
        name = ("requirement" if i == 1 else "claim") if evidence.kind == "given" else f"part {i}"
        for sub, e, decides in forest_rows(part):
            rows.append((f"{name}{' / ' + sub if sub else ''}", e, id(part) in deciding and decides))
    return rows


def forest_plot(claims: Sequence[Any], title: str = ""):
    """One row per claim, and per part of a combined claim: its effect and interval against its threshold,
    coloured by verdict, the side that holds shaded, the parts that decide the verdict marked. Claims have
    different units, so each row has its own axis. ``claims`` are Claim objects (``.statement``,
    ``.evidence``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(claim, name, e, decides) for claim in claims for name, e, decides in forest_rows(claim.evidence)]
    fig, axes = plt.subplots(max(len(rows), 1), 1, figsize=(9, 0.95 * max(len(rows), 1) + 0.5), squeeze=False)
    for ax, (claim, name, e, decides) in zip(axes[:, 0], rows):
        colour = VERDICT_COLOURS[e.verdict]
        statement = claim.statement if len(claim.statement) <= 60 else claim.statement[:57] + "..."
        first = name in ("", "part 1", "requirement") or name.startswith(("part 1 /", "requirement /"))
        head = f"{statement}: {claim.evidence.verdict}" if first else ""
        if name:
            head += f"{'; ' if head else '    '}{name}{' (decides)' if decides else ''}: {e.verdict}"
        ax.set_title(head, fontsize=8, loc="left", color=colour, fontweight="bold" if decides and name else "normal")
        ax.set_yticks([])
        for side in ("left", "right", "top"):
            ax.spines[side].set_visible(False)
        if e.kind == "not run" or e.effect is None:
            ax.text(0.0, 0.0, e.summary()[:110], fontsize=7, color=colour, va="center")
            ax.set_xticks([])
            ax.spines["bottom"].set_visible(False)
            ax.set_ylim(-1, 1)
            continue
        lo, hi = e.interval if e.interval else (e.effect, e.effect)
        finite = [v for v in (lo, hi, e.effect, e.threshold) if math.isfinite(v)]
        if e.kind == "ratio":
            ax.set_xscale("log")
            left, right = min(finite) / 1.3, max(finite) * 1.3
        else:
            pad = (max(finite) - min(finite)) * 0.15 or abs(finite[0]) * 0.1 or 0.1
            left, right = min(finite) - pad, max(finite) + pad
        # the side of the threshold where the claim holds, shaded
        ax.axvspan(e.threshold, right, color="#0a7a2f", alpha=0.07) if e.better == "higher" else \
            ax.axvspan(left, e.threshold, color="#0a7a2f", alpha=0.07)
        if e.interval:
            ax.plot([lo, hi], [0, 0], color=colour, linewidth=2.5, solid_capstyle="butt")
        ax.plot([e.effect], [0], "o", color=colour, markersize=6)
        ax.axvline(e.threshold, color="black", linestyle="--", linewidth=0.9)
        ax.set_xlim(left, right)
        ax.set_ylim(-1, 1)
        ax.tick_params(axis="x", which="both", labelsize=7)
        ax.set_title(f"{e.summary()}", fontsize=7, loc="right", color="#333")
    if not rows:
        axes[0, 0].set_axis_off()
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


# --- internals -----------------------------------------------------------------------------------------------


def _base(kind, effect, interval, threshold, better, n, unit, test, confidence, paired, prob, samples, binary,
          clusters, fixed, label) -> Evidence:
    if not isinstance(unit, str) or not unit.strip():
        raise ValueError(f"unit must name what a replicate is (e.g. 'seeds', 'problems'), got {unit!r}")
    if not isinstance(label, str):
        raise TypeError(f"label must be a str, got {label!r}")
    interval = None if interval is None else (float(interval[0]), float(interval[1]))
    verdict = _decide(n, interval, threshold, better)
    return Evidence(kind=kind, verdict=verdict, effect=float(effect), interval=interval, threshold=float(threshold),
                    better=better, n=int(n), unit=unit.strip(), test=test, confidence=confidence, paired=paired,
                    prob_improvement=prob, samples=tuple(tuple(np.asarray(s, float).tolist()) for s in samples),
                    binary=binary, clusters=tuple(clusters), fixed=fixed, label=label)


def _decide(n: int, interval: tuple[float, float] | None, threshold: float | None, better: str | None) -> str:
    if n < MIN_REPLICATES or interval is None or threshold is None or better not in ("higher", "lower"):
        return "inconclusive"
    lo, hi = interval
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo == hi:  # no spread decides nothing
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
    """Student t interval of the mean of one sample (memory linear in n)."""
    from scipy import stats

    n = len(x)
    if n < 2:
        return None, "none (one replicate)"
    if np.ptp(x) == 0:
        return None, _NO_SPREAD
    with np.errstate(over="ignore", invalid="ignore"):
        sd = float(np.std(x, ddof=1))
    if not math.isfinite(sd):
        raise ValueError("the replicates' spread overflows: rescale the values")
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)
    mean = float(np.mean(x))
    return (mean - half, mean + half), "Student t"


def _difference_interval(a: np.ndarray, b: np.ndarray, confidence: float):
    """Welch t interval of mean(a) - mean(b) for independent samples."""
    from scipy import stats

    if min(len(a), len(b)) < 2:
        return None, "none (one replicate)"
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        return None, _NO_SPREAD
    with np.errstate(over="ignore", invalid="ignore"):
        va, vb = np.var(a, ddof=1) / len(a), np.var(b, ddof=1) / len(b)
    se = math.sqrt(va + vb)
    if not math.isfinite(se):
        raise ValueError("the replicates' spread overflows: rescale the values")
    dof = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))  # Welch-Satterthwaite
    half = float(stats.t.ppf(0.5 + confidence / 2, dof)) * se
    d = float(np.mean(a) - np.mean(b))
    return (d - half, d + half), "Welch t"


def _paired_rate_interval(a: np.ndarray, b: np.ndarray, confidence: float):
    """Tango's (1998) score interval for the difference of two paired pass rates, P(a passes) - P(b passes).

    With w pairs that ``a`` wins (1, 0), l that it loses (0, 1) and r that agree, the score statistic at a
    difference delta is T = (w - l - n delta) / sqrt(n (2 q + delta (1 - delta))), q being the maximum-likelihood
    P(0, 1) under the constraint P(1, 0) - P(0, 1) = delta (the root of 2n q^2 - B q - l delta (1 - delta) = 0,
    B = w (1 - delta) + l (1 - 3 delta) - 2 r delta). The interval is every delta with |T| <= z.
    """
    from scipy import optimize, stats

    n, wins, losses = len(a), int(np.sum(a > b)), int(np.sum(a < b))
    agree = n - wins - losses
    z = float(stats.norm.ppf(0.5 + confidence / 2))

    def score(delta: float) -> float:
        big = wins * (1 - delta) + losses * (1 - 3 * delta) - 2 * agree * delta
        q = (big + math.sqrt(max(big * big + 8 * n * losses * delta * (1 - delta), 0.0))) / (4 * n)
        q = min(max(q, max(0.0, -delta)), (1 - delta) / 2)
        num = wins - losses - n * delta
        var = n * (2 * q + delta * (1 - delta))
        return 0.0 if num == 0 else num / math.sqrt(var) if var > 0 else math.copysign(math.inf, num)

    point, eps = (wins - losses) / n, 1e-12
    lo = -1.0 if score(-1 + eps) <= z else optimize.brentq(lambda t: score(t) - z, -1 + eps, point, xtol=1e-12)
    hi = 1.0 if score(1 - eps) >= -z else optimize.brentq(lambda t: score(t) + z, point, 1 - eps, xtol=1e-12)
    return (lo, hi), "Tango score interval (paired pass/fail)"


def _share_past(x: np.ndarray, threshold: float, better: str) -> float:
    """The share of values past the threshold in the claimed direction, ties counted half."""
    past = np.sign(x - threshold) if better == "higher" else np.sign(threshold - x)
    return float(np.mean((past > 0) + 0.5 * (past == 0)))


def _prob_unpaired(a: np.ndarray, b: np.ndarray, better: str) -> float:
    """P(a better than b) for independent draws, ties counted half: the Mann-Whitney U over na nb, from ranks
    (memory linear in na + nb)."""
    from scipy.stats import rankdata

    ranks = rankdata(np.concatenate([a, b]))  # ties get their mean rank: counted half
    u = float(ranks[: len(a)].sum()) - len(a) * (len(a) + 1) / 2
    share = u / (len(a) * len(b))
    return share if better == "higher" else 1.0 - share


def _units(samples: tuple[np.ndarray, ...], labels: tuple[str, ...]) -> tuple[tuple[np.ndarray, ...], str]:
    """The independent units: the replicates themselves, or each cluster's mean (in order of first
    appearance)."""
    if not labels:
        return samples, ""
    names, index = np.unique(np.asarray(labels, dtype=object).astype(str), return_inverse=True)
    counts = np.bincount(index, minlength=len(names))
    if counts.max() == 1:
        return samples, ""
    order = np.argsort(np.unique(index, return_index=True)[1])  # first appearance, not alphabetical
    means = tuple((np.bincount(index, weights=s, minlength=len(names)) / counts)[order] for s in samples)
    return means, f" over {len(names)} cluster means"


def _labels(clusters: Sequence[Any] | None, n: int) -> tuple[str, ...]:
    if clusters is None:
        return ()
    if isinstance(clusters, (str, bytes, Mapping)) or not isinstance(clusters, Iterable):
        raise TypeError(f"clusters must be a sequence of labels, one per replicate, got {clusters!r}")
    labels = tuple(str(c) for c in clusters)
    if len(labels) != n:
        raise ValueError(f"clusters must hold one label per replicate: got {len(labels)} labels for {n} replicates")
    return labels


def _is_binary(x: np.ndarray) -> bool:
    return bool(np.isin(x, (0.0, 1.0)).all())


def _sample(name: str, values: Any, binary: bool = False) -> np.ndarray:
    if isinstance(values, (str, bytes)) or isinstance(values, Mapping):
        raise TypeError(f"{name} must be a sequence of numbers, got {type(values).__name__}")
    if hasattr(values, "detach"):  # a torch tensor
        values = values.detach().cpu().numpy()
    try:
        x = np.asarray(values, dtype=float)
    except (TypeError, ValueError, OverflowError):
        raise TypeError(f"{name} must be a sequence of numbers, got {values!r}") from None
    if x.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional (one value per replicate), got shape {x.shape}")
    if len(x) == 0:
        raise ValueError(f"{name} is empty: a claim needs at least one replicate")
    if len(x) > MAX_REPLICATES:
        raise ValueError(f"{name} holds {len(x):,} replicates, more than MAX_REPLICATES = {MAX_REPLICATES:,}: "
                         "summarise first (e.g. one rate per problem)")
    bad = ~np.isfinite(x)
    if bad.any():
        raise ValueError(f"{name} must be finite, got {x[bad][0]} at index {int(np.argmax(bad))}")
    if binary and not _is_binary(x):
        raise ValueError(f"binary outcomes must be 0 or 1, got {x[~np.isin(x, (0.0, 1.0))][0]:g} in {name}")
    return x


def _finite_effect(what: str, value: float) -> float:
    if not math.isfinite(value):
        raise ValueError(f"{what} overflows ({value}): rescale the values")
    return value


def _check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


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


def _named(label: str) -> str:
    return f" ({label!r})" if label else ""


def _num(value: float) -> str:
    return f"{value:.3g}"
