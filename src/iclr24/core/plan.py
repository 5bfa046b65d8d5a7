"""Power plans: how many fresh replicates would decide each open claim, and what they cost.

Adding seeds until a claim holds is optional stopping: every look at the data is another chance of a false
"holds". The valid route is a pilot, a plan fixed before the decisive data exist, and a confirmation on fresh
seeds judged on its own replicates. This module is the plan (``iclr24 plan``); :mod:`iclr24.core.confirm` runs it
(``iclr24 run --confirm plan.json``).

For every part of every inconclusive claim, the pilot gives an effect and a spread in the claim's own unit (the
replicate, or its cluster mean when clustered). Taking them as the truth, :func:`units_needed` returns the
smallest n at which the part's interval lies wholly on the pilot's side of the threshold with probability
``power`` (80% by default):

- a mean (paired differences, values, log ratios, cluster means): the one-sided t test at level
  ``(1 - confidence) / 2`` that the interval is, exactly: power(n) = 1 - F_nct(t_{1-alpha/2, n-1}; n - 1,
  sqrt(n) |effect - threshold| / sd), F_nct the noncentral t distribution;
- an unpaired difference: the same with Welch's standard error and degrees of freedom, n per group;
- a pass rate (Clopper-Pearson): the exact binomial power, summing P(k passes) over the k whose interval clears
  the bar; the pilot's rate is shrunk by a half pass (k + 1/2) / (n + 1), so a pilot of 3 passes of 3 is not
  taken as a certain pass;
- a paired difference of pass rates (Tango): the t formula on the paired differences.

``tests/core/test_plan.py`` checks by simulation that the planned n reaches 75-85% power for each kind.

A claim's parts are planned together: if a part lies on the failing side, the claim is planned to fail on that
part; otherwise every part must hold, so the claim needs the largest part's n. A part cannot be decided when its
replicates are a fixed set (``fixed=True``: more seeds add no independent units), when the pilot shows no spread,
fewer than 2 units, or when the effect lies within ``max_units``' reach of the threshold (n would pass the cap).
Units come in runs: a run of the pilot's preset yields ``units_per_run`` units, so a claim needs
``ceil(n / units_per_run)`` fresh runs, priced at the pilot's CPU seconds per run.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import inspect
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from iclr24.core.evidence import MIN_REPLICATES, Evidence, _units, forest_rows

__all__ = ["CONFIRM_FOLDER", "DEFAULT_POWER", "MAX_UNITS", "PLAN_SCHEMA", "ClaimPlan", "PartPlan", "PlanError",
           "build_plan", "experiment_source_digest", "load_plan", "parse_duration", "pilot", "plan_claim",
           "plan_digest", "units_needed", "used_confirmation_seeds", "write_plan"]

PLAN_SCHEMA = 1
DEFAULT_POWER = 0.8
#: Where a confirmation's runs live, under the runs folder: ``.confirm/<plan digest>/<method>/<stamp>/``. Hidden, so
#: a confirmatory run is never a method's latest run, and never a pilot.
CONFIRM_FOLDER = ".confirm"
#: The most units a plan asks for: past it the effect sits too close to its threshold to decide at any CPU budget
#: this project runs at (a standardised distance below about 0.09 at 80% power).
MAX_UNITS = 1000


class PlanError(ValueError):
    """A plan that cannot be made or used; the message names the claim and what is wrong."""


@dataclass(frozen=True)
class PartPlan:
    """One part of a claim (the claim itself when it has no parts): the pilot's estimate and the n it needs."""

    label: str
    kind: str
    unit: str
    pilot_verdict: str
    pilot_n: int
    effect: float | None = None  # in the test's scale: a mean, a difference, a log ratio, a rate
    spread: float | None = None  # the standard deviation of one unit (per group, unpaired)
    threshold: float | None = None
    better: str | None = None
    side: str = ""  # "holds" or "fails": where the pilot's effect lies
    n: int | None = None  # units needed; None: cannot be decided
    method: str = ""
    fixed: bool = False
    reason: str = ""  # why it cannot be decided


@dataclass(frozen=True)
class ClaimPlan:
    """One claim: its parts' plans and what deciding it costs."""

    statement: str
    pilot_verdict: str
    pilot_summary: str
    parts: tuple[PartPlan, ...]
    status: str  # "planned", "cannot decide", "over budget"
    reason: str = ""
    side: str = ""  # the verdict the plan aims at: "holds" or "fails"
    n: int | None = None  # units, in the deciding parts' unit
    runs: int | None = None  # fresh runs of the pilot's preset
    cpu_s: float | None = None
    criteria: tuple[str, ...] = field(default_factory=tuple)  # each part's decision rule, to spot a changed margin


# --- n for one part ------------------------------------------------------------------------------------------


def _t_power(n: float, distance: float, dof: float, confidence: float) -> float:
    """P(the t interval clears the threshold) at n units, standardised distance |effect - threshold| / sd."""
    from scipy import stats

    critical = stats.t.ppf(0.5 + confidence / 2, dof)
    return float(stats.nct.sf(critical, dof, math.sqrt(n) * distance))


def _smallest(power_at, target: float, max_units: int) -> int | None:
    """The smallest n in [MIN_REPLICATES, max_units] with power_at(n) >= target (power grows with n), or None."""
    if power_at(max_units) < target:
        return None
    lo, hi = MIN_REPLICATES, max_units
    while lo < hi:
        mid = (lo + hi) // 2
        if power_at(mid) >= target:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _rate_power(n: int, p: float, bar: float, confidence: float) -> float:
    """Exact power of the Clopper-Pearson interval clearing ``bar`` (on the pilot's side) with n outcomes at rate p."""
    from scipy import stats

    k = np.arange(n + 1)
    alpha = 1 - confidence
    low = np.where(k > 0, stats.beta.ppf(alpha / 2, np.maximum(k, 1), n - k + 1), 0.0)
    high = np.where(k < n, stats.beta.ppf(1 - alpha / 2, k + 1, np.maximum(n - k, 1)), 1.0)
    clears = low > bar if p > bar else high < bar  # the pilot's side of the bar, whichever verdict that is
    return float(stats.binom.pmf(k, n, p)[clears].sum())


def units_needed(evidence: Evidence, *, power: float = DEFAULT_POWER, max_units: int = MAX_UNITS) -> PartPlan:
    """The units a fresh sample needs for ``evidence``'s interval to clear its threshold on the pilot's side with
    probability ``power``, taking the pilot's effect and spread as the truth (see the module docstring)."""
    if not isinstance(evidence, Evidence):
        raise TypeError(f"evidence must be an Evidence, got {type(evidence).__name__}")
    if not 0.5 <= power < 1:
        raise ValueError(f"power must be in [0.5, 1), got {power!r}")
    common = {"label": evidence.label, "kind": evidence.kind, "unit": evidence.unit, "pilot_verdict": evidence.verdict,
              "pilot_n": evidence.n, "threshold": evidence.threshold, "better": evidence.better,
              "fixed": evidence.fixed}
    if evidence.kind not in ("compare", "against", "ratio"):
        raise ValueError(f"units_needed takes one comparison, not {evidence.kind!r} evidence (plan its parts)")
    if len(evidence.samples) != (1 if evidence.kind == "against" else 2):
        return PartPlan(**common, reason="the pilot's record holds no replicates to estimate a spread from")
    samples = tuple(np.asarray(s, float) for s in evidence.samples)
    threshold = float(evidence.threshold)
    if evidence.kind == "ratio":
        samples, threshold = tuple(np.log(s) for s in samples), math.log(threshold)
    confidence = evidence.confidence
    if evidence.kind == "compare" and evidence.paired is False:
        a, b = samples
        if min(len(a), len(b)) < 2:
            return PartPlan(**common, reason=f"the pilot has {min(len(a), len(b))} {evidence.unit} in a group; "
                            "a spread needs 2")
        effect = float(a.mean() - b.mean())
        sa, sb = (float(x.std(ddof=1)) if np.ptp(x) > 0 else 0.0 for x in (a, b))
        spread = math.sqrt((sa ** 2 + sb ** 2) / 2)
        method = "Welch t power (noncentral t), n per group"

        def power_at(n: int) -> float:
            if spread == 0:
                return 0.0
            dof = (n - 1) * (sa ** 2 + sb ** 2) ** 2 / (sa ** 4 + sb ** 4) if sa or sb else n - 1
            return _t_power(n, abs(effect - threshold) / (spread * math.sqrt(2)), max(dof, 1), confidence)
    else:
        units = _units(samples, evidence.clusters)[0]
        values = units[0] if evidence.kind == "against" else units[0] - units[1]
        if len(values) < 2:
            return PartPlan(**common, reason=f"the pilot has {len(values)} {evidence.unit}; a spread needs 2")
        effect = float(values.mean())
        rate = evidence.binary and evidence.kind == "against" and bool(np.isin(values, (0.0, 1.0)).all())
        if rate:
            p = (float(values.sum()) + 0.5) / (len(values) + 1)
            spread, method = math.sqrt(p * (1 - p)), "exact binomial power (Clopper-Pearson), rate (k + 1/2) / (n + 1)"
            effect = p

            def power_at(n: int) -> float:
                return _rate_power(n, p, threshold, confidence)
        else:
            spread = float(values.std(ddof=1)) if np.ptp(values) > 0 else 0.0  # equal values: no spread, exactly
            method = ("t power (noncentral t) on paired pass/fail differences" if evidence.binary
                      else "t power (noncentral t)") + (" over cluster means" if len(values) < len(samples[0])
                                                       else "")

            def power_at(n: int) -> float:
                return _t_power(n, abs(effect - threshold) / spread, n - 1, confidence) if spread > 0 else 0.0
    beyond = effect > threshold if evidence.better == "higher" else effect < threshold
    side = "holds" if beyond else "fails"
    found = {**common, "effect": effect, "spread": spread, "side": side, "method": method}
    if evidence.fixed:
        return PartPlan(**found, reason=f"a fixed set of {evidence.n} {evidence.unit}: more seeds add no "
                        "independent units")
    if spread == 0:
        return PartPlan(**found, reason="no spread in the pilot (every unit equal): a deterministic quantity is a "
                        "check, not evidence")
    if effect == threshold:
        return PartPlan(**found, reason="the pilot's effect equals the threshold")
    n = _smallest(power_at, power, max_units)
    if n is None:
        return PartPlan(**found, reason=f"the effect lies {abs(effect - threshold) / spread:.2g} sd from the "
                        f"threshold: {power:.0%} power needs more than {max_units} {evidence.unit}")
    return PartPlan(**found, n=n)


# --- a claim ---------------------------------------------------------------------------------------------------


def _leaves(evidence: Evidence) -> list[Evidence]:
    """The single comparisons a claim rests on, nested parts flattened (the report's rows)."""
    return [leaf for _, leaf, _ in forest_rows(evidence)]


def plan_claim(claim: Mapping[str, Any], *, units_per_run: Mapping[str, float] | float, cpu_s_per_run: float,
               power: float = DEFAULT_POWER, max_units: int = MAX_UNITS) -> ClaimPlan:
    """Plan one stored claim (a ``result.json`` claim, or a seed group's pooled one) from its pilot evidence.

    ``units_per_run``: how many units one run yields, per part label (or one number for every part).
    """
    statement = str(claim.get("statement", ""))
    evidence = Evidence.from_dict(claim["evidence"]).rederived() if claim.get("evidence") else None
    if evidence is None or evidence.kind == "not run":
        reason = evidence.reason if evidence is not None else "no evidence recorded"
        return ClaimPlan(statement, "not run", "", (), "cannot decide", f"not run in the pilot: {reason}")
    leaves = _leaves(evidence)
    parts = tuple(units_needed(leaf, power=power, max_units=max_units) if leaf.kind != "not run" else
                  PartPlan(leaf.label, leaf.kind, "", "not run", 0, reason=f"not run: {leaf.reason}")
                  for leaf in leaves)
    criteria = tuple(leaf.criterion for leaf in leaves)
    common = {"statement": statement, "pilot_verdict": evidence.verdict, "pilot_summary": evidence.summary(),
              "parts": parts, "criteria": criteria}
    if evidence.kind == "given" and parts[0].side == "fails" and len(parts) == 2:
        return ClaimPlan(**common, status="cannot decide", reason="the requirement lies on its failing side in the "
                         f"pilot ({parts[0].label or 'requirement'}): the claim would stay untested")
    failing = [p for p in parts if p.side == "fails" and p.n is not None]
    if evidence.kind != "given" and failing:  # one part failing decides an all_of
        aim, deciding = "fails", [min(failing, key=lambda p: _runs(p, units_per_run))]
    else:
        aim, deciding = "holds", list(parts)
        stuck = [p for p in parts if p.n is None]
        if stuck:
            p = stuck[0]
            where = f"{p.label}: " if p.label and len(parts) > 1 else ""
            return ClaimPlan(**common, status="cannot decide", reason=where + p.reason)
        if any(p.side == "fails" for p in parts) and evidence.kind == "given":
            aim = "fails"
    runs = max(_runs(p, units_per_run) for p in deciding)
    n = max(p.n for p in deciding)
    return ClaimPlan(**common, status="planned", side=aim, n=n, runs=runs, cpu_s=runs * float(cpu_s_per_run))


def _runs(part: PartPlan, units_per_run: Mapping[str, float] | float) -> int:
    per_run = units_per_run.get(part.label, 0) if isinstance(units_per_run, Mapping) else float(units_per_run)
    if not per_run or per_run <= 0:
        raise PlanError(f"part {part.label!r}: the pilot yields no units per run")
    return max(1, math.ceil(part.n / per_run - 1e-9))


# --- a plan over methods ---------------------------------------------------------------------------------------


def experiment_source_digest(exp: Any) -> str:
    """SHA-256 of the source of the experiment's module: the claims' definitions (margins, bars, units). A plan
    made under one definition is refused under another."""
    import sys

    module = sys.modules.get(getattr(exp.fn, "__module__", ""))
    try:
        text = inspect.getsource(module) if module is not None else ""
    except (OSError, TypeError):
        text = ""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def plan_digest(plan: Mapping[str, Any]) -> str:
    """The digest a plan carries over everything but itself: editing a plan by hand breaks it."""
    body = {k: v for k, v in plan.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def build_plan(pilots: Mapping[str, Mapping[str, Any]], *, power: float = DEFAULT_POWER, max_units: int = MAX_UNITS,
               budget_cpu_s: float | None = None, max_claim_cpu_s: float | None = None) -> dict[str, Any]:
    """A plan from pilots: ``{method: {"preset", "runs", "seeds", "cpu_s_per_run", "claims", "source"}}``, each
    ``claims`` the stored claims pooled over the pilot's runs. Claims are selected cheapest first while the methods'
    total CPU (each method runs as many fresh runs as its costliest selected claim) stays within ``budget_cpu_s``;
    a claim over ``max_claim_cpu_s`` is not selected."""
    for name, value in (("budget_cpu_s", budget_cpu_s), ("max_claim_cpu_s", max_claim_cpu_s)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
            raise ValueError(f"{name} must be a positive number of CPU seconds or None, got {value!r}")
    methods: dict[str, Any] = {}
    candidates = []
    for name, found in sorted(pilots.items()):
        n_runs = len(found["seeds"])
        cpu = float(found["cpu_s_per_run"])
        entries = []
        for claim in found["claims"]:
            if claim.get("verdict") != "inconclusive":
                continue
            per_run = _units_per_run(claim, n_runs)
            cp = plan_claim(claim, units_per_run=per_run, cpu_s_per_run=cpu, power=power, max_units=max_units)
            entries.append((cp, found.get("confirmed", {}).get(cp.statement, "")))
            if cp.status == "planned":
                candidates.append((cp.cpu_s, name, cp))
        methods[name] = {"preset": found["preset"],
                         "pilot": {"runs": list(found["runs"]), "seeds": list(found["seeds"]), "cpu_s_per_run": cpu,
                                   "wall_s_per_run": found.get("wall_s_per_run"), "machine": found.get("machine", "")},
                         "source": found["source"], "claims": entries}
    chosen: dict[str, int] = {}
    over: set[int] = set()
    for cost, name, cp in sorted(candidates, key=lambda c: (c[0], c[1], c[2].statement)):
        if max_claim_cpu_s is not None and cost > max_claim_cpu_s:
            over.add(id(cp))
            continue
        trial = {**chosen, name: max(chosen.get(name, 0), cp.runs)}
        total = sum(trial[m] * methods[m]["pilot"]["cpu_s_per_run"] for m in trial)
        if budget_cpu_s is not None and total > budget_cpu_s:
            over.add(id(cp))
            continue
        chosen = trial
    out_methods = {}
    for name, m in methods.items():
        claims = []
        for cp, confirmed in m["claims"]:
            if id(cp) in over:
                limit = (f"over the per-claim limit of {max_claim_cpu_s:.0f} CPU s" if max_claim_cpu_s is not None
                         and cp.cpu_s > max_claim_cpu_s else "does not fit the budget")
                cp = dataclasses.replace(cp, status="over budget", reason=limit)
            # a confirmation of this pilot stays the answer; planning again takes new seeds
            claims.append({**_claim_to_dict(cp), "confirmed_before": confirmed})
        runs = chosen.get(name, 0)
        seeds = _fresh_seeds(list(m["pilot"]["seeds"]) + list(pilots[name].get("exclude_seeds", [])), runs)
        out_methods[name] = {**m, "claims": claims, "confirm_runs": runs, "confirm_seeds": seeds,
                             "cpu_s": runs * m["pilot"]["cpu_s_per_run"]}
    plan = {"schema": PLAN_SCHEMA, "kind": "iclr24 power plan",
            "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "power": power, "max_units": max_units, "budget_cpu_s": budget_cpu_s, "max_claim_cpu_s": max_claim_cpu_s,
            "methods": out_methods,
            "cpu_s": sum(m["cpu_s"] for m in out_methods.values())}
    plan["digest"] = plan_digest(plan)
    return plan


def _claim_to_dict(cp: ClaimPlan) -> dict[str, Any]:
    out = asdict(cp)
    out["parts"] = [asdict(p) for p in cp.parts]
    out["criteria"] = list(cp.criteria)
    return out


def _units_per_run(claim: Mapping[str, Any], n_runs: int) -> dict[str, float]:
    evidence = Evidence.from_dict(claim["evidence"])
    return {leaf.label: leaf.n / max(n_runs, 1) for leaf in _leaves(evidence) if leaf.kind != "not run"}


def _fresh_seeds(used: Sequence[int], count: int) -> list[int]:
    """The ``count`` smallest seeds not in ``used``: fresh replicates, disjoint from the pilot's (a run's
    replicates are ``seed * n + i``, so disjoint run seeds of one preset give disjoint replicates)."""
    taken, seeds, s = set(used), [], 0
    while len(seeds) < count:
        if s not in taken:
            seeds.append(s)
        s += 1
    return seeds


def pilot(runs_dir: str | os.PathLike, exp: Any, preset: str = "quick") -> dict[str, Any]:
    """The pilot of ``exp``: its latest completed ``preset`` run, or the seed group that run belongs to (its
    claims pooled over the group's runs). A PlanError if there is none."""
    from iclr24.core.runner import latest_run, load_run
    from iclr24.core.seeds import latest_seed_group

    runs_dir = Path(runs_dir)
    record = latest_run(runs_dir, exp.name, preset=preset)
    if record is None or not record.ok:
        raise PlanError(f"{exp.name}: no completed {preset} run under {str(runs_dir)!r} to plan from; run `iclr24 run "
                        f"{exp.name} -p {preset}` first (the pilot)")
    group = latest_seed_group(runs_dir, exp.name)
    if group and record.run_dir.name in group.get("runs", []) and group.get("preset") == preset:
        records = [load_run(runs_dir / exp.name / folder) for folder in group["runs"]]
        records = [r for r in records if r.ok]
        claims = [{"statement": s, **c} for s, c in group["claims"].items()]
    else:
        records, claims = [record], list(record.result.get("claims", []))
    environment = _read_json(record.run_dir / "environment.json")
    return {"preset": preset, "runs": [f"{exp.name}/{r.run_dir.name}" for r in records],
            "seeds": [int(r.result["seed"]) for r in records],
            "cpu_s_per_run": float(np.mean([r.result.get("cpu_time_s") or r.result["wall_time_s"] for r in records])),
            "wall_s_per_run": float(np.mean([r.result["wall_time_s"] for r in records])),
            "machine": f"{environment.get('cpu', 'unknown CPU')}, {environment.get('cpu_count', '?')} cores",
            "claims": claims, "source": experiment_source_digest(exp),
            "exclude_seeds": used_confirmation_seeds(runs_dir, exp.name),
            "confirmed": _confirmed_before(runs_dir, exp.name, [f"{exp.name}/{r.run_dir.name}" for r in records])}


def _confirmed_before(runs_dir: Path, name: str, pilot_runs: list[str]) -> dict[str, str]:
    """Claims a finished confirmation of this very pilot already judged: ``{statement: "holds on seeds [1, 2]"}``."""
    found: dict[str, str] = {}
    for path in sorted(Path(runs_dir, name).glob("confirm-*/confirmation.json")):
        record = _read_json(path)
        if record.get("pilot", {}).get("runs") != pilot_runs:
            continue
        for claim in record.get("claims", []):
            if isinstance(claim, dict) and isinstance(claim.get("statement"), str):
                found[claim["statement"]] = f"{claim.get('verdict')} on seeds {claim.get('seeds')}"
    return found


def used_confirmation_seeds(runs_dir: str | os.PathLike, name: str) -> list[int]:
    """Seeds earlier confirmations of ``name`` ran (finished or not): a new plan never reuses them."""
    seeds = set()
    for result in Path(runs_dir, CONFIRM_FOLDER).glob(f"*/{name}/*/result.json"):
        seed = _read_json(result).get("seed")
        if isinstance(seed, int):
            seeds.add(seed)
    for record in Path(runs_dir, name).glob("confirm-*/confirmation.json"):
        seeds.update(s for s in _read_json(record).get("seeds", []) if isinstance(s, int))
    return sorted(seeds)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


_DURATION_UNITS = {"s": 1, "m": 60, "min": 60, "h": 3600}


def parse_duration(text: str) -> float:
    """``"2h"``, ``"90m"``, ``"15min"``, ``"600s"`` or ``"600"`` as seconds (> 0)."""
    import re

    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|m|min|h)?\s*", str(text))
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"expected a duration like 2h, 90m or 600s, got {text!r}")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2) or "s"]


def write_plan(plan: Mapping[str, Any], path: str | os.PathLike) -> Path:
    from iclr24.core.io import write_json_atomic

    return write_json_atomic(path, plan)


def load_plan(path: str | os.PathLike) -> dict[str, Any]:
    """Read a plan and check that it was not edited since it was written; a PlanError saying what is wrong."""
    try:
        plan = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise PlanError(f"cannot read plan {str(path)!r}: {type(err).__name__}: {err}") from None
    if not isinstance(plan, dict) or plan.get("kind") != "iclr24 power plan" or not isinstance(plan.get("methods"),
                                                                                                dict):
        raise PlanError(f"{str(path)!r} is not a plan written by `iclr24 plan`")
    if plan.get("schema") != PLAN_SCHEMA:
        raise PlanError(f"plan {str(path)!r} has schema {plan.get('schema')!r}; this version reads {PLAN_SCHEMA}")
    if plan.get("digest") != plan_digest(plan):
        raise PlanError(f"plan {str(path)!r} was edited after `iclr24 plan` wrote it (its digest does not match); "
                        "make a new plan instead of editing one")
    return plan
