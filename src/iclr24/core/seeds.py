"""Seed groups: one experiment run under several seeds, and what its claims and metrics do across them.

Each seed's run is an ordinary run folder (``runs/<name>/<timestamp>/``); the group adds
``runs/<name>/seeds-<timestamp>/summary.json``, written atomically, holding per metric the mean,
standard deviation and 95% interval over the seeds, and per claim one verdict from the seeds' replicates
pooled into one comparison (:func:`iclr24.core.evidence.pool`), beside each seed's own verdict.
A group folder has no ``result.json``, so it is never mistaken for a run.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from iclr24.core.evidence import VERDICTS, pool
from iclr24.core.io import write_json_atomic
from iclr24.core.runner import RunRecord, _publish, new_tmp_folder

__all__ = ["GROUP_PREFIX", "latest_seed_group", "parse_seeds", "summarize_seeds", "write_seed_group"]

GROUP_PREFIX = "seeds-"
MAX_SEEDS = 10_000


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"``, ``"0-4"`` or a mix (``"0-2,7"``) as a sorted list of distinct seeds in [0, 2**32)."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"--seeds must list seeds like '0,1,2' or '0-4', got {text!r}")
    seeds: set[int] = set()
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not match:
            raise ValueError(f"--seeds must list seeds like '0,1,2' or '0-4', got {text!r} (bad part {part!r})")
        lo = int(match.group(1))
        hi = int(match.group(2)) if match.group(2) is not None else lo
        if hi < lo:
            raise ValueError(f"--seeds range {part.strip()!r} runs backwards; write {hi}-{lo}")
        if hi >= 2**32:
            raise ValueError(f"--seeds must be in [0, 2**32), got {hi}")
        if hi - lo + len(seeds) >= MAX_SEEDS:
            raise ValueError(f"--seeds {text!r} holds more than {MAX_SEEDS} seeds; at most {MAX_SEEDS}")
        seeds.update(range(lo, hi + 1))
    return sorted(seeds)


def _t_quantile_975(dof: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.975, dof))


def summarize_seeds(records: Sequence[RunRecord]) -> dict[str, Any]:
    """The seed-group record of runs of one experiment: per metric mean, std and 95% interval (Student t)
    over the runs that completed; per claim, the pooled verdict and evidence, and each seed's verdict."""
    if not records:
        raise ValueError("summarize_seeds needs at least one run")
    names = {r.name for r in records}
    if len(names) != 1:
        raise ValueError(f"a seed group holds runs of one experiment, got {sorted(names)}")
    seeds = [r.result.get("seed") for r in records]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"a seed group holds each seed once, got seeds {seeds}")
    ok = [r for r in records if r.ok]
    metrics: dict[str, dict[str, Any]] = {}
    keys = sorted({k for r in ok for k, v in r.result.get("metrics", {}).items() if _is_real(v)})
    for key in keys:
        present = [float(r.result["metrics"][key]) for r in ok if _is_real(r.result["metrics"].get(key))]
        values = [v for v in present if math.isfinite(v)]
        n = len(values)
        with np.errstate(over="ignore", invalid="ignore"):  # values near the float limit give inf, not an error
            mean = float(np.mean(values)) if n else math.nan
            std = float(np.std(values, ddof=1)) if n > 1 else None
        half = _t_quantile_975(n - 1) * std / math.sqrt(n) if n > 1 else None
        metrics[key] = {"mean": mean, "std": std, "ci95": [mean - half, mean + half] if half is not None else None,
                        "n": n, "non_finite": len(present) - n, "values": values}
    claims = {statement: _pool_claim(entries) for statement, entries in _claims_by_statement(ok).items()}
    return {
        "name": records[0].name,
        "preset": records[0].result.get("preset"),
        "seeds": seeds,
        "runs": [r.run_dir.name for r in records],
        "failed_seeds": [r.result.get("seed") for r in records if not r.ok],
        "metrics": metrics,
        "claims": claims,
    }


def _claims_by_statement(records: Sequence[RunRecord]) -> dict[str, list[tuple[int, dict]]]:
    found: dict[str, list[tuple[int, dict]]] = {}
    for r in records:
        for claim in r.result.get("claims", []):
            found.setdefault(claim["statement"], []).append((r.result["seed"], claim))
    return found


def _pool_claim(entries: list[tuple[int, dict]]) -> dict[str, Any]:
    """One claim over the group: its replicates pooled into one comparison (not a count of per-seed verdicts)."""
    per_seed = {str(seed): claim.get("verdict", "inconclusive") for seed, claim in entries}
    evidence = [claim["evidence"] for _, claim in entries if isinstance(claim.get("evidence"), dict)]
    if not evidence:
        return {"verdict": "not run", "per_seed": per_seed, "evidence": None,
                "reason": "the runs hold no evidence to pool (written before result schema 2)"}
    try:
        pooled = pool(evidence)
    except (TypeError, ValueError) as err:  # e.g. a threshold that differs between seeds: nothing to pool
        return {"verdict": "inconclusive", "per_seed": per_seed, "evidence": None,
                "reason": f"the seeds' evidence cannot be pooled: {err}"}
    return {"verdict": pooled.verdict, "per_seed": per_seed, "evidence": pooled.to_dict()}


def write_seed_group(runs_dir: str | os.PathLike, records: Sequence[RunRecord]) -> Path:
    """Write ``<runs_dir>/<name>/seeds-<UTC time>/summary.json``; returns its path. The folder is built
    hidden and renamed into place as a run folder is, so an interrupt leaves no half-made group."""
    summary = summarize_seeds(records)
    parent = Path(runs_dir) / summary["name"]
    now = _dt.datetime.now(_dt.timezone.utc)
    tmp = new_tmp_folder(parent, now)
    write_json_atomic(tmp / "summary.json", summary)
    return _publish(tmp, parent, GROUP_PREFIX + now.strftime("%Y%m%dT%H%M%SZ")) / "summary.json"


def latest_seed_group(runs_dir: str | os.PathLike, name: str) -> dict[str, Any] | None:
    """The newest readable seed-group summary of ``name``, or None."""
    for folder, group in newest_records(Path(runs_dir) / name, GROUP_PREFIX, "summary.json", what="seed group"):
        try:
            _check_group(group)
            return group
        except (ValueError, TypeError, KeyError) as err:  # a damaged group never breaks a report
            warnings.warn(f"skipping seed group {folder}: {type(err).__name__}: {err}", stacklevel=2)
    return None


def newest_records(parent: Path, prefix: str, filename: str, what: str | None = None):
    """``(folder, parsed json)`` of every ``parent/<prefix><stamp>[-i]/<filename>``, newest first (a stamp's
    ``-i`` suffix counted as a number); unreadable files are skipped, with a warning naming ``what`` if given."""
    if not parent.is_dir():
        return

    def order(folder: Path) -> tuple[str, int]:
        stamp, _, suffix = folder.name.removeprefix(prefix).partition("-")
        return stamp, int(suffix) if suffix.isdigit() else 0

    for folder in sorted((d for d in parent.iterdir() if d.name.startswith(prefix)), key=order, reverse=True):
        try:
            yield folder, json.loads((folder / filename).read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            if what is not None:
                warnings.warn(f"skipping {what} {folder}: {type(err).__name__}: {err}", stacklevel=2)


def _check_group(group: Any) -> None:
    """The fields the CLI and the report read, with their types; a ValueError otherwise."""
    ok = (isinstance(group, dict) and isinstance(group.get("runs"), list) and isinstance(group.get("seeds"), list)
          and isinstance(group.get("failed_seeds", []), list) and isinstance(group.get("claims"), dict)
          and isinstance(group.get("metrics"), dict)
          and all(isinstance(c, dict) and c.get("verdict") in VERDICTS and isinstance(c.get("per_seed"), dict)
                  for c in group["claims"].values())
          and all(isinstance(m, dict) and _is_real(m.get("mean")) and (m.get("std") is None or _is_real(m["std"]))
                  and (m.get("ci95") is None or (isinstance(m["ci95"], list) and len(m["ci95"]) == 2
                                                 and all(_is_real(v) for v in m["ci95"])))
                  and isinstance(m.get("n"), int) for m in group["metrics"].values()))
    if not ok:
        raise ValueError("summary.json does not have the seed-group layout")


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
