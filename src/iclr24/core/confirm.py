"""A confirmation: the runs a plan fixed, on fresh seeds, each planned claim judged on its own runs only.

``iclr24 run <method|all> --confirm plan.json`` checks the plan before anything runs (not edited, made from the
pilot it names, under the claims' current definitions, seeds disjoint from the pilot's and from earlier
confirmations), then runs the missing runs into ``<runs>/.confirm/<plan digest>/<method>/`` (local processes or Ray
tasks: the same records either way) and writes ``<runs>/<method>/confirm-<stamp>/confirmation.json``.

Each planned claim is judged by pooling exactly its planned runs (the first ``runs`` of the plan's seeds, all a
claim's planned units) and nothing else: the pilot is never pooled in, and it stays beside the confirmation in
the record, the CLI and the report. A confirmation is final: its claims are not planned again from it, and a
second confirmation needs a new plan (which takes new seeds). An interrupted confirmation keeps its finished runs;
the same command resumes it without re-running them or changing n.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from iclr24.core.evidence import pool
from iclr24.core.executors import Job, run_jobs
from iclr24.core.experiment import get_experiment
from iclr24.core.io import write_json_atomic
from iclr24.core.plan import (
    CONFIRM_FOLDER,
    PlanError,
    _leaves,
    _units_per_run,
    experiment_source_digest,
    plan_claim,
)
from iclr24.core.runner import RunRecord, _publish, load_run, new_tmp_folder

__all__ = ["CONFIRMATION_PREFIX", "check_plan", "confirm", "judge", "latest_confirmation"]

CONFIRMATION_PREFIX = "confirm-"
REPLAN_RULE = ("confirmatory: judged on these runs only; its claims are not planned again from it (a second "
               "confirmation needs a new plan from a pilot, and new seeds)")


def check_plan(plan: Mapping[str, Any], names: Sequence[str], runs_dir: str | os.PathLike,
               seeds: Mapping[str, Sequence[int]] | None = None) -> dict[str, list[int]]:
    """The seeds each method in ``names`` will confirm on; a PlanError naming the claim and what is wrong if the
    plan cannot be confirmed as it stands. Nothing runs here."""
    runs_dir = Path(runs_dir)
    planned = {}
    for name in names:
        method = plan["methods"].get(name)
        if method is None:
            raise PlanError(f"{name}: not in the plan (it holds {', '.join(sorted(plan['methods'])) or 'nothing'})")
        claims = [c for c in method["claims"] if c["status"] == "planned"]
        if not claims:
            raise PlanError(f"{name}: the plan confirms none of its claims ({_why_none(method)})")
        exp = get_experiment(name)
        if experiment_source_digest(exp) != method["source"]:
            raise PlanError(f"{name}: the claims' definitions changed since the plan (src/iclr24/{name}/experiment.py "
                            f"differs): {claims[0]['statement']!r} may have another margin; plan again from a pilot")
        _rederive(name, method, runs_dir, plan)
        chosen = list(seeds[name]) if seeds and name in seeds else list(method["confirm_seeds"])
        _check_seeds(name, chosen, method, runs_dir, claims, plan["digest"])
        planned[name] = chosen
    return planned


def _why_none(method: Mapping[str, Any]) -> str:
    reasons = [f"{c['statement']!r}: {c['status']}" for c in method["claims"]]
    return "; ".join(reasons) if reasons else "no inconclusive claims in its pilot"


def _rederive(name: str, method: Mapping[str, Any], runs_dir: Path, plan: Mapping[str, Any]) -> None:
    """Re-plan every claim from the pilot runs the plan names: a hand-edited n, runs or claim is caught even when
    the digest was recomputed."""
    records = []
    for folder in method["pilot"]["runs"]:
        try:
            records.append(load_run(runs_dir / folder))
        except ValueError as err:
            raise PlanError(f"{name}: the plan's pilot run {folder!r} cannot be read under {str(runs_dir)!r}: {err}") \
                from None
    if len(records) > 1:
        from iclr24.core.seeds import summarize_seeds

        stored = [{"statement": s, **c} for s, c in summarize_seeds(records)["claims"].items()]
    else:
        stored = list(records[0].result.get("claims", []))
    by_statement = {c["statement"]: c for c in stored}
    for entry in method["claims"]:
        claim = by_statement.get(entry["statement"])
        if claim is None or claim.get("verdict") != "inconclusive":
            raise PlanError(f"{name}: claim {entry['statement']!r} is not an inconclusive claim of the pilot "
                            f"{method['pilot']['runs']}")
        again = plan_claim(claim, units_per_run=_units_per_run(claim, len(records)),
                           cpu_s_per_run=method["pilot"]["cpu_s_per_run"], power=plan["power"],
                           max_units=plan["max_units"])
        if entry["status"] == "planned" and (again.status != "planned" or again.n != entry["n"]
                                             or again.runs != entry["runs"] or again.side != entry["side"]):
            raise PlanError(f"{name}: claim {entry['statement']!r} plans n = {entry['n']} in {entry['runs']} runs, "
                            f"but its pilot gives {again.n} in {again.runs} ({again.status}): the plan was edited")
    if method["confirm_runs"] != max((c["runs"] for c in method["claims"] if c["status"] == "planned"), default=0):
        raise PlanError(f"{name}: the plan's confirm_runs {method['confirm_runs']} is not its planned claims' most "
                        "runs: the plan was edited")


def _check_seeds(name: str, seeds: list[int], method: Mapping[str, Any], runs_dir: Path, claims: list,
                 digest: str) -> None:
    if len(seeds) != method["confirm_runs"] or len(set(seeds)) != len(seeds):
        raise PlanError(f"{name}: the confirmation needs {method['confirm_runs']} distinct seeds (the plan's n), got "
                        f"{seeds}")
    overlap = sorted(set(seeds) & set(method["pilot"]["seeds"]))
    if overlap:
        raise PlanError(f"{name}: seeds {overlap} are the pilot's: claim {claims[0]['statement']!r} would count the "
                        "pilot's replicates again; a confirmation runs fresh seeds")
    earlier = sorted(set(seeds) & set(_seeds_of_earlier_confirmations(name, runs_dir, digest)))
    if earlier:
        raise PlanError(f"{name}: seeds {earlier} were confirmed before: claim {claims[0]['statement']!r} needs new "
                        "seeds (make a new plan)")


def _seeds_of_earlier_confirmations(name: str, runs_dir: Path, digest: str) -> list[int]:
    """Seeds of the finished confirmations of ``name`` under other plans (this plan's own record may be
    rewritten: resuming or re-judging it uses the same runs)."""
    seeds = set()
    for path in (runs_dir / name).glob(f"{CONFIRMATION_PREFIX}*/confirmation.json"):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("plan_digest") != digest:
            seeds.update(s for s in record.get("seeds", []) if isinstance(s, int))
    return sorted(seeds)


def confirm(plan: Mapping[str, Any], names: Sequence[str], runs_dir: str | os.PathLike, *,
            seeds: Mapping[str, Sequence[int]] | None = None, executor: str = "local", address: str | None = None,
            quiet: bool = False, threads: int | None = 1, processes: int = 1,
            on_record: Callable[[RunRecord], None] | None = None) -> dict[str, Path]:
    """Run the plan's confirmation for ``names`` and write each method's confirmation record; returns the records'
    paths. Finished runs of this plan are kept and not run again (resume)."""
    runs_dir = Path(runs_dir)
    planned = check_plan(plan, names, runs_dir, seeds)
    folder = runs_dir / CONFIRM_FOLDER / plan["digest"][:16]
    done: dict[str, dict[int, RunRecord]] = {name: _finished(folder, name, plan["methods"][name]["preset"],
                                                             planned[name]) for name in names}
    jobs = [Job(name, plan["methods"][name]["preset"], seed) for name in names for seed in planned[name]
            if seed not in done[name]]
    for record in run_jobs(jobs, runs_dir=folder, executor=executor, address=address, quiet=quiet, threads=threads,
                           processes=processes, on_record=on_record):
        if record.ok:
            done[record.name][int(record.result["seed"])] = record
    paths = {}
    for name in names:
        record = judge(plan, name, planned[name], done[name], runs_dir)
        paths[name] = _write_confirmation(runs_dir, name, record)
    return paths


def _finished(folder: Path, name: str, preset: str, seeds: Sequence[int]) -> dict[int, RunRecord]:
    found: dict[int, RunRecord] = {}
    parent = folder / name
    if not parent.is_dir():
        return found
    for run_dir in sorted(parent.iterdir()):
        if run_dir.name.startswith(".") or not (run_dir / "result.json").is_file():
            continue
        try:
            record = load_run(run_dir)
        except ValueError:
            continue
        seed = record.result.get("seed")
        if record.ok and record.name == name and record.result.get("preset") == preset and seed in seeds:
            found[int(seed)] = record
    return found


def judge(plan: Mapping[str, Any], name: str, seeds: Sequence[int], records: Mapping[int, RunRecord],
          runs_dir: str | os.PathLike) -> dict[str, Any]:
    """The confirmation record of ``name``: each planned claim pooled over its own planned runs (the first
    ``runs`` of ``seeds``), never the pilot's, beside the pilot's verdict."""
    method = plan["methods"][name]
    claims = []
    for entry in method["claims"]:
        if entry["status"] != "planned":
            continue
        own = list(seeds[: entry["runs"]])
        missing = [s for s in own if s not in records]
        evidence, problem = None, ""
        if missing:
            problem = f"runs of seeds {missing} failed or are missing: judged on {len(own) - len(missing)} of " \
                      f"{len(own)} planned runs"
        found = [c for s in own if s in records for c in records[s].result.get("claims", [])
                 if c.get("statement") == entry["statement"]]
        if found:
            evidence = pool([c["evidence"] for c in found])
            criteria = [leaf.criterion for leaf in _leaves(evidence)]
            if criteria != list(entry["criteria"]):
                problem = (f"the claim's definition differs from the plan's ({criteria[0]!r} vs "
                           f"{entry['criteria'][0]!r}): not judged")
                evidence = None
        claims.append({"statement": entry["statement"], "pilot_verdict": entry["pilot_verdict"],
                       "pilot_summary": entry["pilot_summary"], "side": entry["side"], "planned_n": entry["n"],
                       "unit": next((p["unit"] for p in entry["parts"] if p.get("n") == entry["n"]), "units"),
                       "planned_runs": entry["runs"], "seeds": own,
                       "verdict": evidence.verdict if evidence is not None else "not run",
                       "evidence": evidence.to_dict() if evidence is not None else None,
                       "summary": evidence.summary() if evidence is not None else problem, "problem": problem})
    used = sorted(records)
    return {"kind": "iclr24 confirmation", "name": name, "plan_digest": plan["digest"],
            "preset": method["preset"], "seeds": list(seeds),
            "runs": [f"{CONFIRM_FOLDER}/{plan['digest'][:16]}/{name}/{records[s].run_dir.name}" for s in used],
            "cpu_s": sum(records[s].result.get("cpu_time_s") or 0.0 for s in used),
            "wall_s": sum(records[s].result.get("wall_time_s") or 0.0 for s in used),
            "machine": _machine(records[used[0]].run_dir) if used else "",
            "pilot": method["pilot"], "power": plan.get("power"), "claims": claims, "rule": REPLAN_RULE,
            "written_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}


def _machine(run_dir: Path) -> str:
    try:
        environment = json.loads((run_dir / "environment.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    return f"{environment.get('cpu', 'unknown CPU')}, {environment.get('cpu_count', '?')} cores"


def _write_confirmation(runs_dir: Path, name: str, record: Mapping[str, Any]) -> Path:
    parent, now = runs_dir / name, _dt.datetime.now(_dt.timezone.utc)
    tmp = new_tmp_folder(parent, now)
    write_json_atomic(tmp / "confirmation.json", record)
    return _publish(tmp, parent, CONFIRMATION_PREFIX + now.strftime("%Y%m%dT%H%M%SZ")) / "confirmation.json"


def latest_confirmation(runs_dir: str | os.PathLike, name: str) -> dict[str, Any] | None:
    """The newest readable confirmation record of ``name``, or None."""
    from iclr24.core.seeds import newest_records

    for _, record in newest_records(Path(runs_dir) / name, CONFIRMATION_PREFIX, "confirmation.json"):
        if isinstance(record, dict) and record.get("kind") == "iclr24 confirmation" and isinstance(
                record.get("claims"), list):
            return record
    return None
