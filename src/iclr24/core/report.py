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
import os
from pathlib import Path
from typing import Any

from iclr24.core.evidence import VERDICTS, tally
from iclr24.core.io import write_bytes_atomic, write_text_atomic
from iclr24.core.runner import RunRecord, latest_runs, run_time
from iclr24.core.seeds import latest_seed_group

__all__ = ["build_report", "claim_verdict"]

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:72rem;
color:#1d1d1f;padding:0 1rem;line-height:1.45}
h1{margin-bottom:.2rem} h2{margin-top:2.5rem;border-bottom:1px solid #ddd;padding-bottom:.2rem}
table{border-collapse:collapse;margin:.8rem 0;font-size:.92rem} th,td{border:1px solid #d0d0d0;padding:.3rem .55rem;
text-align:left;vertical-align:top} th{background:#f4f4f6} td.num{text-align:right;font-variant-numeric:tabular-nums}
.holds{color:#0a7a2f;font-weight:600} .fails{color:#b3261e;font-weight:600} .muted{color:#666}
.inconclusive{color:#a0640a;font-weight:600} .notrun{color:#777;font-weight:600}
.env{font-size:.85rem;color:#444} img{max-width:100%;border:1px solid #eee;margin:.4rem 0}
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
    environments = {name: _read_json(r.run_dir / "environment.json") for name, r in records.items()}
    newest = max(records.values(), key=lambda r: r.result.get("started_at", ""), default=None)
    env = environments.get(newest.name, {}) if newest else {}

    out_dir.mkdir(parents=True, exist_ok=True)
    html_text = _html(names, records, papers, env, environments, groups)
    md_text = _markdown(names, records, papers, env, out_dir, groups)
    write_text_atomic(out_dir / "README.md", md_text)
    return write_text_atomic(out_dir / "index.html", html_text)


# --- shared rows ------------------------------------------------------------------------------------


def _summary_rows(names: list[str], records: dict[str, RunRecord], papers: dict[str, str],
                  groups: dict[str, dict] | None = None) -> list[dict[str, str]]:
    """One row per claim. After a seed group, the verdict and evidence are the group's pooled ones."""
    rows = []
    groups = groups or {}
    for name in names:
        record = records.get(name)
        blank = {"paper_value": "", "measured": "", "verdict": "", "evidence": "", "n": "", "seeds": ""}
        if record is None:
            rows.append({**blank, "method": name, "paper": papers.get(name, ""), "claim": "(not run yet)",
                         "time": ""})
            continue
        r = record.result
        time_s = f"{run_time(r)}, {r.get('preset', '?')}"
        if r.get("status") != "ok":
            rows.append({**blank, "method": name, "paper": r.get("paper", ""), "claim": "run failed",
                         "measured": r.get("error", ""), "verdict": "run failed", "time": time_s})
            continue
        group = groups.get(name, {})
        for claim in r.get("claims", []) or [{}]:
            over = group.get("claims", {}).get(claim.get("statement"))
            evidence = (over or {}).get("evidence") or claim.get("evidence") or {}
            verdict = over["verdict"] if over else claim_verdict(claim)
            failed = len(group.get("failed_seeds") or [])
            seeds = ""
            if over:
                per_seed = ", ".join(f"{k}: {v}" for k, v in over.get("per_seed", {}).items())
                seeds = f"pooled over seeds {group.get('seeds')} (each: {per_seed})" + (
                    f", {failed} failed" if failed else "")
            rows.append({
                "method": name,
                "paper": r.get("paper", ""),
                "claim": claim.get("statement", "(no claims)"),
                "paper_value": claim.get("paper", ""),
                "measured": claim.get("measured", ""),
                "verdict": verdict if claim else "",
                "evidence": evidence.get("summary", "") if evidence else (over or {}).get("reason", ""),
                "test": evidence.get("criterion", "") if evidence else "",
                "seeds": seeds,
                "time": time_s,
            })
    return rows


def claim_verdict(claim: dict[str, Any]) -> str:
    """A result.json claim's verdict; results written before verdicts existed (schema 1) read from ``holds``."""
    if claim.get("verdict") in VERDICTS:
        return claim["verdict"]
    return ("holds" if claim["holds"] else "fails") if "holds" in claim else ""


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


def _html(names, records, papers, env, environments, groups=None) -> str:
    e = html.escape
    groups = groups or {}
    generated = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    rows = _summary_rows(names, records, papers, groups)
    counts = tally(row["verdict"] for row in rows if row["verdict"] in VERDICTS)
    failed_runs = sum(row["verdict"] == "run failed" for row in rows)
    out = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<title>iclr24 report</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>iclr24: ICLR 2024 papers, reproduced at small scale</h1>",
        f"<p class='env'>Generated {e(generated)}. Machine: {e(_env_line(env))}.</p>",
        *_weak_banner(environments),
        f"<p><b>{e(counts)}</b>" + (f", {failed_runs} runs failed" if failed_runs else "") + ". Each verdict is "
        "computed from what its run measured, over replicates, against a threshold fixed before the run: "
        "<span class='holds'>holds</span> when the whole 95% interval of the effect is past it, "
        "<span class='fails'>fails</span> when the whole interval is on the other side, "
        "<span class='inconclusive'>inconclusive</span> otherwise (a tie, fewer than 3 replicates, an interval "
        "across the threshold). The paper's number is shown beside ours, at the paper's scale and hardware.</p>",
        "<table id='summary'><thead><tr><th>method</th><th>claim</th><th>paper</th><th>measured here</th>"
        "<th>verdict</th><th>effect [95% interval], n</th><th>time</th></tr></thead><tbody>",
    ]
    for row in rows:
        cls = _verdict_class(row["verdict"])
        out.append(
            f"<tr><td><a href='#{e(row['method'])}'>{e(row['method'])}</a></td><td>{e(row['claim'])}</td>"
            f"<td>{e(row['paper_value'])}</td><td>{e(row['measured'])}</td>"
            f"<td class='{cls}'>{e(row['verdict'])}</td>"
            f"<td title='{e(row.get('test', ''))}'>{e(row['evidence'])}"
            f"{'<br><span class=muted>' + e(row['seeds']) + '</span>' if row.get('seeds') else ''}</td>"
            f"<td class='num'>{e(row['time'])}</td></tr>"
        )
    out.append("</tbody></table>")
    for name in names:
        out.extend(_html_section(name, records.get(name), papers, environments.get(name, {}), groups.get(name)))
    out.append("</body></html>\n")
    return "\n".join(out)


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
    if r.get("claims"):
        out.append("<table><thead><tr><th>claim</th><th>criterion (fixed before the run)</th><th>paper</th>"
                   "<th>measured here</th><th>verdict</th><th>effect [95% interval], n</th><th>test</th>"
                   "<th>P(better)</th></tr></thead><tbody>")
        for c in r["claims"]:
            verdict = claim_verdict(c)
            ev = c.get("evidence") or {}
            prob = ev.get("prob_improvement")
            out.append(f"<tr><td>{e(c['statement'])}</td><td>{e(c.get('criterion', ''))}</td><td>{e(c['paper'])}</td>"
                       f"<td>{e(c['measured'])}</td><td class='{_verdict_class(verdict)}'>{e(verdict)}</td>"
                       f"<td>{e(ev.get('summary', ''))}</td><td>{e(ev.get('test', ''))}</td>"
                       f"<td class='num'>{'' if prob is None else f'{prob:.2f}'}</td></tr>")
        out.append("</tbody></table>")
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
            out.append(f"<figure><img alt='{e(fig)}' src='data:image/png;base64,{data}'>"
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


def _markdown(names, records, papers, env, out_dir: Path, groups=None) -> str:
    def cell(text: str) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    rows = _summary_rows(names, records, papers, groups)
    lines = [
        "# iclr24 report",
        "",
        f"Machine: {_env_line(env)}.",
        "",
        f"{tally(row['verdict'] for row in rows if row['verdict'] in VERDICTS)}.",
        "",
        "| method | claim | paper | measured here | verdict | effect [95% interval], n | time |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        evidence = f"{row['evidence']} ({row['seeds']})" if row.get("seeds") else row["evidence"]
        row = {**row, "evidence": evidence}
        lines.append("| " + " | ".join(cell(row[k]) for k in
                                       ("method", "claim", "paper_value", "measured", "verdict", "evidence",
                                        "time")) + " |")
    for name in names:
        record = records.get(name)
        if record is None or record.result.get("status") != "ok":
            continue
        figures = record.result.get("figures", [])
        if figures:
            lines += ["", f"## {name}", ""]
        for fig in figures:
            source = record.run_dir / fig
            if source.is_file():
                write_bytes_atomic(out_dir / "figures" / name / fig, source.read_bytes())
                lines.append(f"![{fig}](figures/{name}/{fig})")
    return "\n".join(lines) + "\n"
