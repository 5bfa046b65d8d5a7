"""Seed groups: one experiment run under several seeds, and what its claims and metrics do across them.

Each seed's run is an ordinary run folder (``runs/<name>/<timestamp>/``); the group adds
``runs/<name>/seeds-<timestamp>/summary.json``, written atomically, holding per metric the mean,
standard deviation and 95% interval over the seeds, and per claim in how many seeds it holds.
A group folder has no ``result.json``, so it is never mistaken for a run.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from iclr24.core.io import write_json_atomic
from iclr24.core.runner import RunRecord

__all__ = ["GROUP_PREFIX", "latest_seed_group", "parse_seeds", "summarize_seeds", "write_seed_group"]

GROUP_PREFIX = "seeds-"


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"``, ``"0-4"`` or a mix (``"0-2,7"``) as a sorted list of distinct seeds in [0, 2**63)."""
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
        if hi >= 2**63:
            raise ValueError(f"--seeds must be in [0, 2**63), got {hi}")
        if hi - lo >= 10_000:
            raise ValueError(f"--seeds range {part.strip()!r} holds {hi - lo + 1} seeds; at most 10000")
        seeds.update(range(lo, hi + 1))
    return sorted(seeds)


def _t_quantile_975(dof: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.975, dof))


def summarize_seeds(records: Sequence[RunRecord]) -> dict[str, Any]:
    """The seed-group record of runs of one experiment: per metric mean, std and 95% interval (Student t)
    over the runs that completed; per claim, the seeds where it holds."""
    if not records:
        raise ValueError("summarize_seeds needs at least one run")
    names = {r.name for r in records}
    if len(names) != 1:
        raise ValueError(f"a seed group holds runs of one experiment, got {sorted(names)}")
    ok = [r for r in records if r.ok]
    metrics: dict[str, dict[str, Any]] = {}
    keys = sorted({k for r in ok for k, v in r.result.get("metrics", {}).items() if _is_number(v)})
    for key in keys:
        values = [float(r.result["metrics"][key]) for r in ok if _is_number(r.result["metrics"].get(key))]
        n = len(values)
        mean = statistics.fmean(values)
        std = statistics.stdev(values) if n > 1 else 0.0
        half = _t_quantile_975(n - 1) * std / math.sqrt(n) if n > 1 else math.nan
        metrics[key] = {"mean": mean, "std": std, "ci95": [mean - half, mean + half] if n > 1 else None, "n": n,
                        "values": values}
    claims: dict[str, dict[str, Any]] = {}
    for r in ok:
        for claim in r.result.get("claims", []):
            entry = claims.setdefault(claim["statement"], {"holds_in": [], "fails_in": []})
            entry["holds_in" if claim["holds"] else "fails_in"].append(r.result["seed"])
    return {
        "name": records[0].name,
        "preset": records[0].result.get("preset"),
        "seeds": [r.result.get("seed") for r in records],
        "runs": [r.run_dir.name for r in records],
        "failed_seeds": [r.result.get("seed") for r in records if not r.ok],
        "metrics": metrics,
        "claims": {s: {**c, "holds": len(c["holds_in"]), "of": len(c["holds_in"]) + len(c["fails_in"])}
                   for s, c in claims.items()},
    }


def write_seed_group(runs_dir: str | os.PathLike, records: Sequence[RunRecord]) -> Path:
    """Write ``<runs_dir>/<name>/seeds-<UTC time>/summary.json`` atomically; returns its path."""
    summary = summarize_seeds(records)
    parent = Path(runs_dir) / summary["name"]
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    folder, k = parent / f"{GROUP_PREFIX}{stamp}", 1
    while True:
        try:
            folder.mkdir(parents=True)  # claims the name: a concurrent group takes the next suffix
            break
        except FileExistsError:
            k += 1
            folder = parent / f"{GROUP_PREFIX}{stamp}-{k}"
    return write_json_atomic(folder / "summary.json", summary)


def latest_seed_group(runs_dir: str | os.PathLike, name: str) -> dict[str, Any] | None:
    """The newest readable seed-group summary of ``name``, or None."""
    parent = Path(runs_dir) / name
    if not parent.is_dir():
        return None
    def order(folder: Path) -> tuple[str, int]:
        stamp, _, suffix = folder.name.removeprefix(GROUP_PREFIX).partition("-")
        return stamp, int(suffix) if suffix.isdigit() else 0

    groups = sorted((d for d in parent.iterdir() if d.name.startswith(GROUP_PREFIX)), key=order, reverse=True)
    for folder in groups:
        try:
            return json.loads((folder / "summary.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
