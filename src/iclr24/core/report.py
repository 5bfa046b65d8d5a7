"""The report: the paper's numbers beside ours, from the latest run of each experiment.

``build_report(runs_dir, out_dir)`` writes ``index.html`` (self-contained: styles
inline, figures embedded as base64, no network) and ``README.md`` (figures copied
to ``figures/<method>/``) into ``out_dir``.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iclr24.core.confirm import latest_confirmation
from iclr24.core.evidence import Evidence, forest_rows, tally
from iclr24.core.io import write_bytes_atomic, write_text_atomic
from iclr24.core.runner import RunRecord, latest_runs, run_time
from iclr24.core.seeds import latest_seed_group

__all__ = ["DAMAGED", "StoredClaim", "build_report", "claim_verdict", "claims_tally", "read_claim"]

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:72rem;
color:#1d1d1f;padding:0 1rem;line-height:1.45}
h1{margin-bottom:.2rem} h2{margin-top:2.5rem;border-bottom:1px solid #ddd;padding-bottom:.2rem}
table{border-collapse:collapse;margin:.8rem 0;font-size:.92rem} th,td{border:1px solid #d0d0d0;padding:.3rem .55rem;
text-align:left;vertical-align:top} th{background:#f4f4f6} td.num{text-align:right;font-variant-numeric:tabular-nums}
.holds{color:#0a7a2f;font-weight:600} .fails{color:#b3261e;font-weight:600} .muted{color:#666}
.inconclusive{color:#a0640a;font-weight:600} .notrun{color:#777;font-weight:600}
.env{font-size:.85rem;color:#444} img{max-width:100%;border:1px solid #eee;margin:.4rem 0}
table{max-width:100%} td,th,figcaption,p,li{overflow-wrap:anywhere} td.v{overflow-wrap:normal;white-space:nowrap}
#summary{width:100%} #summary td.ev{min-width:14rem}
tr.method th{background:#e9e9f0;text-align:left} tr.part td{font-size:.85rem;border-top:none;color:#333}
tr.part td.claim{padding-left:1.6rem} .badge{font-size:.75rem;border-radius:3px;padding:0 .3rem;margin:.1rem .3rem 0 0;
background:#eee;color:#444;display:inline-block;max-width:100%} .badge.standin{background:#e8eefc;color:#1d3c8f}
.badge.revised{background:#fdf0dc;color:#7a4a00} .damaged{color:#fff;background:#b3261e;font-weight:600}
pre{background:#f6f6f8;padding:.6rem;overflow-x:auto;font-size:.8rem}
"""


def build_report(
    runs_dir: str | os.PathLike = "runs",
    out_dir: str | os.PathLike = "report",
    experiments: list[Any] | None = None,
) -> Path:
    """Write ``index.html`` and ``README.md`` for the latest run of each experiment.

    Parameters
    ----------
    runs_dir : path
        Folder holding ``<name>/<timestamp>/`` run folders.
    out_dir : path
        Where the report is written.
    experiments : list of Experiment, optional
        Registered experiments; those with no run yet are listed as not run.

    Returns
    -------
    Path
        The path of ``index.html``.
    """
    runs_dir, out_dir = Path(runs_dir), Path(out_dir)
    records = latest_runs(runs_dir)
    names = sorted(set(records) | {e.name for e in experiments or []})
    # a seed group is shown when the latest run belongs to it (a later single run supersedes it)
    groups = {name: group for name, record in records.items()
              if (group := latest_seed_group(runs_dir, name)) and record.run_dir.name in group.get("runs", [])}
    papers = {e.name: e.paper for e in experiments or []}
    confirmations = {name: found for name in records if (found := latest_confirmation(runs_dir, name))}
    environments = {name: _read_json(r.run_dir / "environment.json") for name, r in records.items()}
    newest = max(records.values(), key=lambda r: r.result.get("started_at", ""), default=None)
    env = environments.get(newest.name, {}) if newest else {}

    out_dir.mkdir(parents=True, exist_ok=True)
    html_text = _html(names, records, papers, env, environments, groups, confirmations)
    md_text = _markdown(names, records, papers, env, out_dir, groups, confirmations)
    write_text_atomic(out_dir / "README.md", md_text)
    return write_text_atomic(out_dir / "index.html", html_text)


# --- shared rows ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _MethodRows:
    name: str
    paper: str
    time: str = ""
    status: str = "not run"  # "ok", "failed" or "not run"
    error: str = ""
    claims: tuple[tuple[StoredClaim, str], ...] = ()  # each claim (the seed group's pooled one, if any) and seeds
    confirmed: tuple[tuple[str, StoredClaim, str], ...] = ()  # (statement, its confirmation, how it was planned)


def _method_rows(names: list[str], records: dict[str, RunRecord], papers: dict[str, str],
                 groups: dict[str, dict] | None = None, confirmations: dict[str, dict] | None = None
                 ) -> list[_MethodRows]:
    """Per method, its claims re-derived from the stored samples. After a seed group, a claim's verdict and
    evidence are the group's pooled ones. A confirmation's claims come beside them, re-derived too."""
    out = []
    groups, confirmations = groups or {}, confirmations or {}
    for name in names:
        record = records.get(name)
        if record is None:
            out.append(_MethodRows(name, papers.get(name, "")))
            continue
        r = record.result
        time_s = f"{run_time(r)}, {r.get('preset', '?')}"
        if r.get("status") != "ok":
            out.append(_MethodRows(name, str(r.get("paper", "")), time_s, "failed", str(r.get("error", ""))))
            continue
        group = groups.get(name, {})
        failed = len(group.get("failed_seeds") or [])
        claims = []
        for claim in r.get("claims", []) if isinstance(r.get("claims"), list) else []:
            statement = claim.get("statement") if isinstance(claim, Mapping) else None
            over = group.get("claims", {}).get(statement) if isinstance(statement, str) else None
            seeds = ""
            if over:
                per_seed = ", ".join(f"{k}: {v}" for k, v in over.get("per_seed", {}).items())
                seeds = f"pooled over seeds {group.get('seeds')} (each: {per_seed})" + (
                    f", {failed} failed" if failed else "")
                claim = {**claim, "verdict": over.get("verdict"), "evidence": over.get("evidence")}
            claims.append((read_claim(claim), seeds))
        out.append(_MethodRows(name, str(r.get("paper", "")), time_s, "ok", claims=tuple(claims),
                               confirmed=_confirmed(confirmations.get(name), claims)))
    return out


def _confirmed(record: dict | None, claims: list[tuple[StoredClaim, str]]) -> tuple[tuple[str, StoredClaim, str], ...]:
    """A confirmation record's claims, each re-derived from its samples, with the pilot claim's subject."""
    if not record:
        return ()
    subjects = {c.statement: (c.subject, c.stand_in) for c, _ in claims}
    out = []
    for entry in record.get("claims", []):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("statement"), str):
            continue
        subject, stand_in = subjects.get(entry["statement"], ("paper", ""))
        if entry.get("evidence") is None:
            stored = StoredClaim(statement=entry["statement"], verdict="not run", subject=subject, stand_in=stand_in,
                                 problem=str(entry.get("problem", "")))
        else:
            stored = read_claim({"statement": entry["statement"], "verdict": entry.get("verdict"),
                                 "evidence": entry["evidence"], "subject": subject, "stand_in": stand_in})
        how = (f"confirmation on fresh seeds {entry.get('seeds')} (planned before it ran: {entry.get('planned_n')} "
               f"{entry.get('unit', 'units')} in {entry.get('planned_runs')} runs at {record.get('power', 0.8):.0%} "
               "power; the pilot not pooled in)")
        out.append((entry["statement"], stored, how))
    return tuple(out)


def _all_claims(methods: list[_MethodRows]) -> list[StoredClaim]:
    return [c for m in methods for c, _ in m.claims]


def _all_confirmed(methods: list[_MethodRows]) -> list[StoredClaim]:
    return [c for m in methods for _, c, _ in m.confirmed]


def _parts(claim: StoredClaim) -> list[tuple[str, Evidence, bool]]:
    """The sub-rows of a combined claim: ``(name, evidence, deciding)``; none for a single statistic."""
    if claim.evidence is None or claim.evidence.kind not in ("all_of", "given"):
        return []
    return forest_rows(claim.evidence)


def _evidence_text(claim: StoredClaim) -> str:
    if claim.verdict == DAMAGED:
        return f"damaged record: {claim.problem}"
    if claim.evidence is None:
        return ""
    if claim.evidence.kind == "all_of":
        return f"all of {len(claim.evidence.parts)} parts (below)"
    if claim.evidence.kind == "given":
        return "a claim tested only if its requirement holds (below)"
    return claim.evidence.summary()


def _notes(claim: StoredClaim) -> list[tuple[str, str]]:
    """Badges under a claim: ``(css class, text)``."""
    out = []
    if claim.subject == "stand-in":
        out.append(("standin", f"stand-in: {claim.stand_in}"))
    if claim.provenance == "revised":
        out.append(("revised", f"margin revised: {claim.revision}"))
    elif claim.provenance:
        out.append(("", f"margin from the {claim.provenance}"))
    else:
        out.append(("revised", "margin's provenance not recorded"))
    if claim.original is not None:
        out.append(("revised", f"under the first definition: {claim.original.verdict}, {claim.original.summary()}"))
    return out


#: The verdict shown for a stored claim whose record does not re-derive (planted, edited or truncated).
DAMAGED = "damaged"


@dataclass(frozen=True)
class StoredClaim:
    """A claim read back from ``result.json``, its verdict re-derived from the stored samples.

    ``verdict`` is one of :data:`~iclr24.core.evidence.VERDICTS`, or :data:`DAMAGED` with ``problem`` saying why
    when the record does not re-derive: a stored verdict or interval that its samples do not give, a record
    missing its evidence, or one that is not a claim at all."""

    statement: str
    verdict: str
    evidence: Evidence | None = None
    problem: str = ""
    paper: str = ""
    measured: str = ""
    criterion: str = ""
    subject: str = "paper"
    stand_in: str = ""
    provenance: str = ""
    revision: str = ""
    original: Evidence | None = None


def read_claim(claim: Any) -> StoredClaim:
    """Re-derive a stored claim: its evidence recomputed from the samples must give the stored verdict."""
    if not isinstance(claim, Mapping):
        return StoredClaim(statement=str(claim)[:80], verdict=DAMAGED, problem="not a claim record")
    text = {k: claim.get(k) if isinstance(claim.get(k), str) else "" for k in
            ("statement", "paper", "measured", "criterion", "stand_in", "provenance", "revision")}
    base = {**text, "subject": "stand-in" if claim.get("subject") == "stand-in" else "paper"}
    if not text["statement"]:
        return StoredClaim(**base, verdict=DAMAGED, problem="the record has no statement")
    if not isinstance(claim.get("evidence"), Mapping):
        return StoredClaim(**base, verdict=DAMAGED, problem="the record holds no evidence to re-derive its verdict "
                           "from (written before result schema 2, or edited)")
    try:
        stored = Evidence.from_dict(claim["evidence"])
        evidence = stored.rederived()
        original = Evidence.from_dict(claim["original"]).rederived() if claim.get("original") else None
    except (TypeError, ValueError, KeyError) as err:
        return StoredClaim(**base, verdict=DAMAGED, problem=f"its evidence does not re-derive: {err}")
    problem = _differs(stored, evidence)
    if not problem and claim.get("verdict") != evidence.verdict:
        problem = f"stored verdict {claim.get('verdict')!r}, its samples give {evidence.verdict!r}"
    if problem:
        return StoredClaim(**base, verdict=DAMAGED, evidence=evidence, problem=problem)
    return StoredClaim(**base, verdict=evidence.verdict, evidence=evidence, original=original)


def claim_verdict(claim: Any) -> str:
    """A stored claim's verdict, re-derived from its samples (:data:`DAMAGED` if they do not give it)."""
    return read_claim(claim).verdict


def claims_tally(claims: Iterable[StoredClaim]) -> str:
    """``"paper claims: 3 hold, ...; stand-ins: 1 hold, ..."``, and the damaged records, counted apart."""
    claims = list(claims)
    damaged = sum(c.verdict == DAMAGED for c in claims)
    paper = [c.verdict for c in claims if c.verdict != DAMAGED and c.subject == "paper"]
    stand_ins = [c.verdict for c in claims if c.verdict != DAMAGED and c.subject == "stand-in"]
    text = f"paper claims: {tally(paper)}"
    if stand_ins:
        text += f"; stand-ins: {tally(stand_ins)}"
    return text + (f"; {damaged} damaged record{'s' if damaged != 1 else ''}" if damaged else "")


def _differs(stored: Evidence, derived: Evidence) -> str:
    """Why a stored evidence is not what its samples give, or ""."""
    if stored.verdict != derived.verdict:
        return f"stored verdict {stored.verdict!r}, its samples give {derived.verdict!r}"
    if stored.n != derived.n:
        return f"stored n = {stored.n}, its samples give n = {derived.n}"
    a, b = stored.effect, derived.effect
    if (a is None) != (b is None) or (a is not None and not math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)):
        return f"stored effect {a}, its samples give {b}"
    if (stored.interval is None) != (derived.interval is None) or (stored.interval and not all(
            math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-9) for x, y in zip(stored.interval, derived.interval))):
        return f"stored interval {stored.interval}, its samples give {derived.interval}"
    for part, again in zip(stored.parts, derived.parts):
        if problem := _differs(part, again):
            return problem
    return ""


def _env_line(env: dict[str, Any]) -> str:
    if not env:
        return "no runs yet"
    packages = env.get("packages", {})
    return (
        f"{env.get('cpu', '?')} ({env.get('cpu_count', '?')} cores, {env.get('torch_threads', '?')} torch threads), "
        f"{env.get('platform', '?')}; python {env.get('python', '?')}, torch {packages.get('torch', '?')}, "
        f"iclr24 {packages.get('iclr24', '?')}, commit {env.get('git_commit') or 'unknown'}"
    )


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


# --- HTML -------------------------------------------------------------------------------------------


def _html(names, records, papers, env, environments, groups=None, confirmations=None) -> str:
    e = html.escape
    groups = groups or {}
    generated = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    methods = _method_rows(names, records, papers, groups, confirmations)
    failed_runs = sum(m.status == "failed" for m in methods)
    out = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<title>iclr24 report</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>iclr24: ICLR 2024 papers, reproduced at small scale</h1>",
        f"<p class='env'>Generated {e(generated)}. Machine: {e(_env_line(env))}.</p>",
        *_weak_banner(environments),
        f"<p><b>{e(claims_tally(_all_claims(methods)))}</b>" + (f", {failed_runs} runs failed" if failed_runs else "")
        + (f"; <b>confirmed on fresh seeds: {e(claims_tally(_all_confirmed(methods)))}</b> (each planned from "
           "its pilot before it ran; the pilot's verdict stays in the table, the confirmation below it)"
           if _all_confirmed(methods) else "")
        + ". Each verdict is re-derived here from the replicates its run stored, against the threshold shown "
        "beside it (its provenance under the claim: the paper's number, the spec written before the method first "
        "ran, or a revision made with results in view): "
        "<span class='holds'>holds</span> when the whole 95% interval of the effect is past it, "
        "<span class='fails'>fails</span> when the whole interval is on the other side, "
        "<span class='inconclusive'>inconclusive</span> otherwise (an interval across the threshold, no spread, "
        "fewer than 3 independent units). A combined claim shows each part, the deciding ones marked. "
        "<span class='badge standin'>stand-in</span> claims are measured on something standing in for the "
        "paper's subject (a simulated or small model, a toy task) and are tallied apart. The paper's number is "
        "shown beside ours, at the paper's scale and hardware.</p>",
        *_html_glance(methods, records),
        "<h2>Every claim</h2>",
        "<table id='summary'><thead><tr><th>claim</th><th>paper</th><th>measured here</th>"
        "<th>verdict</th><th>effect [95% interval], n, vs threshold</th></tr></thead><tbody>",
    ]
    for m in methods:
        counts = (claims_tally(c for c, _ in m.claims) if m.claims else "run failed" if m.status == "failed"
                  else "not run yet" if m.status == "not run" else "no claims")
        how = f" (<code>iclr24 run {e(m.name)}</code>)" if m.status == "not run" else ""
        out.append(f"<tr class='method'><th colspan='5'><a href='#{e(m.name)}'>{e(m.name)}</a>: {e(m.paper)}"
                   f"<br><span class='muted'>{e(counts)}{how}{'; ' + e(m.time) if m.time else ''}</span></th></tr>")
        if m.status == "failed":
            out.append(f"<tr><td colspan='5' class='fails'>run failed: {e(m.error)}</td></tr>")
        confirmed = {statement: (c, how) for statement, c, how in m.confirmed}
        for claim, seeds in m.claims:
            out.extend(_html_claim_rows(claim, seeds))
            if claim.statement in confirmed:
                out.extend(_html_confirmation_row(*confirmed[claim.statement]))
    out.append("</tbody></table>")
    for name in names:
        out.extend(_html_section(name, records.get(name), papers, environments.get(name, {}), groups.get(name)))
    out.append("</body></html>\n")
    return "\n".join(out)


def _html_claim_rows(claim: StoredClaim, seeds: str = "") -> list[str]:
    e = html.escape
    badges = "".join(f"<span class='badge {cls}'>{e(text)}</span>" for cls, text in _notes(claim))
    verdict_cls = "damaged" if claim.verdict == DAMAGED else _verdict_class(claim.verdict)
    rows = [f"<tr class='claim'><td>{e(claim.statement)}<br>{badges}</td><td>{e(claim.paper)}</td>"
            f"<td>{e(claim.measured)}</td><td class='v {verdict_cls}'>{e(claim.verdict)}</td>"
            f"<td class='ev' title='{e(claim.criterion)}'>{e(_evidence_text(claim))}"
            f"{'<br><span class=muted>' + e(seeds) + '</span>' if seeds else ''}</td></tr>"]
    for name, part, deciding in _parts(claim):
        label = f"{name}: {part.label}" if part.label else name
        rows.append(f"<tr class='part'><td class='claim' colspan='3'>&#8627; {e(label)}"
                    f"{' <b>(decides)</b>' if deciding else ''}</td>"
                    f"<td class='v {_verdict_class(part.verdict)}'>{e(part.verdict)}</td>"
                    f"<td class='ev' title='{e(part.criterion)}'>{e(part.summary())}</td></tr>")
    return rows


def _html_glance(methods: list[_MethodRows], records: dict[str, RunRecord]) -> list[str]:
    """One line per paper: its verdict counts (confirmations apart) and a link to its forest plot."""
    e = html.escape
    out = ["<h2>At a glance</h2><table id='glance'><thead><tr><th>paper</th><th>holds</th><th>fails</th>"
           "<th>inconclusive</th><th>not run</th><th>confirmed on fresh seeds</th><th>forest plot</th></tr></thead>"
           "<tbody>"]
    for m in methods:
        counts = {v: sum(c.verdict == v for c, _ in m.claims) for v in ("holds", "fails", "inconclusive", "not run")}
        damaged = sum(c.verdict == DAMAGED for c, _ in m.claims)
        cells = "".join(f"<td class='num {_verdict_class(v) if n else 'muted'}'>{n}</td>" for v, n in counts.items())
        confirmed = ", ".join(f"{c.verdict}" for _, c, _ in m.confirmed) or "–"
        record = records.get(m.name)
        has_plot = record is not None and "evidence.png" in (record.result.get("figures") or [])
        plot = f"<a href='#{e(m.name)}-evidence'>evidence.png</a>" if has_plot else "–"
        status = "" if m.status == "ok" else f" <span class='muted'>({e(m.status)})</span>"
        out.append(f"<tr><td><a href='#{e(m.name)}'>{e(m.name)}</a>{status}"
                   f"{' <span class=damaged>' + str(damaged) + ' damaged</span>' if damaged else ''}</td>{cells}"
                   f"<td>{e(confirmed)}</td><td>{plot}</td></tr>")
    out.append("</tbody></table>")
    return out


def _html_confirmation_row(claim: StoredClaim, how: str) -> list[str]:
    e = html.escape
    cls = "damaged" if claim.verdict == DAMAGED else _verdict_class(claim.verdict)
    text = claim.evidence.summary() if claim.evidence is not None else claim.problem
    if claim.verdict == DAMAGED:
        text = f"damaged record: {claim.problem}"
    return [f"<tr class='part confirm'><td class='claim' colspan='3'>&#10003; {e(how)}</td>"
            f"<td class='v {cls}'>{e(claim.verdict)}</td><td class='ev'>{e(text)}</td></tr>"]


def _html_section(name: str, record: RunRecord | None, papers: dict[str, str], env: dict[str, Any],
                  group: dict | None = None) -> list[str]:
    e = html.escape
    out = [f"<section id='{e(name)}'><h2>{e(name)}</h2>"]
    if record is None:
        how = f"<code>iclr24 run {e(name)}</code>"
        return out + [f"<p class='muted'>{e(papers.get(name, ''))}: not run yet ({how}).</p>",
                      "</section>"]
    r = record.result
    out.append(
        f"<p><b>{e(r.get('paper', ''))}</b><br><span class='env'>run {e(record.run_dir.name)}, preset "
        f"{e(r.get('preset', ''))}, seed {e(str(r.get('seed', '')))}, {e(run_time(r))}; "
        f"{e(_env_line(env))}</span></p>"
    )
    if r.get("status") != "ok":
        return out + [f"<p class='fails'>Run failed: {e(r.get('error', ''))}</p>",
                      f"<pre>{e(r.get('traceback', ''))}</pre></section>"]
    claims = [read_claim(c) for c in r.get("claims", [])] if isinstance(r.get("claims"), list) else []
    if claims:
        out.append("<table><thead><tr><th>claim</th><th>criterion (fixed before the run)</th><th>test</th>"
                   "<th>verdict</th><th>effect [95% interval], n, vs threshold</th><th>share past the threshold"
                   "</th></tr></thead><tbody>")
        for c in claims:
            rows = [(c.statement, c.evidence, c.verdict)] + [
                (f"\u21b3 {name}{': ' + part.label if part.label else ''}", part, part.verdict)
                for name, part, _ in _parts(c)]
            for i, (what, ev, verdict) in enumerate(rows):
                single = ev is not None and ev.kind not in ("all_of", "given", "not run")
                prob = ev.prob_improvement if single else None
                criterion = c.criterion if i == 0 else ev.criterion
                test = ev.test if single else ""
                summary = _evidence_text(c) if i == 0 else ev.summary()
                cls = "damaged" if verdict == DAMAGED else _verdict_class(verdict)
                out.append(f"<tr{' class=part' if i else ''}><td>{e(what)}</td><td>{e(criterion)}</td>"
                           f"<td>{e(test)}</td><td class='{cls}'>{e(verdict)}</td><td>{e(summary)}</td>"
                           f"<td class='num'>{'' if prob is None else f'{prob:.2f}'}</td></tr>")
        out.append("</tbody></table><p class='muted'>Share past the threshold: of the independent units, the "
                   "share whose own value lies past the claim's threshold in the claimed direction (ties half); "
                   "shown, never used to decide.</p>")
    if r.get("checks"):
        out.append("<h3>sanity checks (true by construction; not evidence for the paper)</h3><ul>")
        for c in r["checks"]:
            mark = "<span class='holds'>ok</span>" if c.get("passed") else "<span class='fails'>FAILED</span>"
            detail = f": {e(c['detail'])}" if c.get("detail") else ""
            out.append(f"<li>{mark} {e(c.get('statement', ''))}{detail}</li>")
        out.append("</ul>")
    if group:
        out.extend(_html_group(group))
    if r.get("notes"):
        out.append(f"<p>{e(r['notes'])}</p>")
    for title, values in (("metrics", r.get("metrics", {})), ("timings (machine-dependent)", r.get("timings", {}))):
        if values:
            out.append(f"<details><summary>{e(title)} ({len(values)})</summary><table><tbody>")
            out.extend(f"<tr><td>{e(k)}</td><td class='num'>{e(_fmt(v))}</td></tr>" for k, v in values.items())
            out.append("</tbody></table></details>")
    for table_name, table_rows in (r.get("tables") or {}).items():
        out.extend(_html_table(table_name, table_rows))
    for fig in r.get("figures", []):
        path = record.run_dir / fig
        if path.is_file():
            data = base64.b64encode(path.read_bytes()).decode("ascii")
            anchor = f" id='{e(name)}-evidence'" if fig == "evidence.png" else ""
            out.append(f"<figure{anchor}><img alt='{e(fig)}' src='data:image/png;base64,{data}'>"
                       f"<figcaption class='muted'>{e(fig)}</figcaption></figure>")
    out.append("</section>")
    return out


def _html_group(group: dict) -> list[str]:
    """Claims with the seeds' replicates pooled, and each metric's spread: the tables above are the latest
    seed's."""
    claims = [{"claim": s, "pooled verdict": c.get("verdict", ""),
               "effect [95% interval], n": (c.get("evidence") or {}).get("summary", c.get("reason", "")),
               "each seed": ", ".join(f"{k}: {v}" for k, v in c.get("per_seed", {}).items())}
              for s, c in group.get("claims", {}).items()]
    metrics = [{"metric": k, "mean": m["mean"], "std": m["std"],
                "95% interval": "–" if m.get("ci95") is None else f"{m['ci95'][0]:.4g} .. {m['ci95'][1]:.4g}",
                "seeds": m["n"]} for k, m in group.get("metrics", {}).items()]
    failed = group.get("failed_seeds") or []
    title = f"over seeds {group.get('seeds')}" + (f" (failed: {failed})" if failed else "")
    return _html_table(f"claims {title}", claims) + _html_table(f"metrics {title}", metrics)


def _weak_banner(environments: dict[str, dict]) -> list[str]:
    weak = sorted(name for name, env in environments.items() if env.get("sandbox_isolation") == "weak")
    if not weak:
        return []
    return [f"<p class='fails'>Generated code ran with WEAK isolation (ICLR24_SANDBOX=weak) in the runs of "
            f"{html.escape(', '.join(weak))}: the host's files and processes were in its reach.</p>"]


def _verdict_class(verdict: str) -> str:
    return {"holds": "holds", "fails": "fails", "run failed": "fails", "inconclusive": "inconclusive",
            "not run": "notrun"}.get(verdict, "muted")


def _html_table(title: str, rows: list[dict[str, Any]]) -> list[str]:
    e = html.escape
    if not rows:
        return []
    columns = list(dict.fromkeys(k for row in rows for k in row))
    out = [f"<h3>{e(title)}</h3><table><thead><tr>", *(f"<th>{e(c)}</th>" for c in columns), "</tr></thead><tbody>"]
    for row in rows:
        out.append("<tr>" + "".join(f"<td class='num'>{e(_fmt(row.get(c, '')))}</td>" for c in columns) + "</tr>")
    out.append("</tbody></table>")
    return out


# --- Markdown ---------------------------------------------------------------------------------------


def _markdown(names, records, papers, env, out_dir: Path, groups=None, confirmations=None) -> str:
    def cell(text: str) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    methods = _method_rows(names, records, papers, groups, confirmations)
    lines = [
        "# iclr24 report",
        "",
        f"Machine: {_env_line(env)}.",
        "",
        f"{claims_tally(_all_claims(methods))}."
        + (f" Confirmed on fresh seeds: {claims_tally(_all_confirmed(methods))}." if _all_confirmed(methods) else ""),
        "",
    ]
    for m in methods:
        counts = claims_tally(c for c, _ in m.claims) if m.claims else m.status
        lines += [f"## {m.name}: {cell(m.paper)}", "", f"{counts}{'; ' + m.time if m.time else ''}.", ""]
        if m.status == "failed":
            lines += [f"Run failed: {cell(m.error)}", ""]
        if not m.claims:
            continue
        lines += ["| claim | paper | measured here | verdict | effect [95% interval], n, vs threshold |",
                  "| --- | --- | --- | --- | --- |"]
        for claim, seeds in m.claims:
            notes = "; ".join(text for _, text in _notes(claim))
            evidence = _evidence_text(claim) + (f" ({seeds})" if seeds else "")
            lines.append(f"| {cell(claim.statement)} ({cell(notes)}) | {cell(claim.paper)} | {cell(claim.measured)} "
                         f"| {claim.verdict} | {cell(evidence)} |")
            for name, part, deciding in _parts(claim):
                label = f"{name}: {part.label}" if part.label else name
                lines.append(f"| &#8627; {cell(label)}{' (decides)' if deciding else ''} | | | {part.verdict} "
                             f"| {cell(part.summary())} |")
            for statement, confirmed, how in m.confirmed:
                if statement == claim.statement:
                    text = confirmed.evidence.summary() if confirmed.evidence is not None else confirmed.problem
                    lines.append(f"| &#10003; {cell(how)} | | | {confirmed.verdict} | {cell(text)} |")
        lines.append("")
    for name in names:
        record = records.get(name)
        if record is None or record.result.get("status") != "ok":
            continue
        figures = record.result.get("figures", [])
        if figures:
            lines += ["", f"### {name}: figures", ""]
        for fig in figures:
            source = record.run_dir / fig
            if source.is_file():
                write_bytes_atomic(out_dir / "figures" / name / fig, source.read_bytes())
                lines.append(f"![{fig}](figures/{name}/{fig})")
    return "\n".join(lines) + "\n"
