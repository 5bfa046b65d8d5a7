"""The ``iclr24`` command: list, run, plan, report, show.

A user error (unknown method, bad preset, bad ``--set``) prints one line and exits 2;
a reproduction that fails is recorded in its run folder, its traceback printed, and
the command exits 1 (``run all`` finishes the others first).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from iclr24 import __version__
from iclr24.core.executors import EXECUTORS, Job, require_ray, run_jobs
from iclr24.core.experiment import PRESETS, Experiment, get_experiment, list_experiments
from iclr24.core.methods import METHOD_PACKAGES
from iclr24.core.report import DAMAGED, build_report, claims_tally, read_claim
from iclr24.core.runner import (
    MAX_SEED,
    MAX_THREADS,
    RunRecord,
    latest_run,
    reference_time,
    reference_times,
    run_time,
    sandbox_isolation,
)
from iclr24.core.seeds import latest_seed_group, parse_seeds, write_seed_group

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="ICLR 2024 papers as components, each with a CPU reproduction that checks the paper's claims.",
)
console = Console()
err_console = Console(stderr=True)


def _version(value: bool) -> None:
    if value:
        console.print(f"iclr24 {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def main_options(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                              help="Print the version and exit.")) -> None:
    """ICLR 2024 papers as components, each with a CPU reproduction that checks the paper's claims."""


def _user_error(message: str) -> typer.Exit:
    err_console.print(f"error: {message}", markup=False, highlight=False, soft_wrap=True)
    return typer.Exit(2)


def _check_writable_folder(option: str, path: Path | str) -> Path:
    """A folder that exists (or can be made) and takes a new file, or a user error naming ``option``."""
    import tempfile

    if not str(path).strip():
        raise _user_error(f"{option} is empty; give a folder (e.g. {option} runs)")
    path = Path(path)
    try:
        if path.exists() and not path.is_dir():
            raise _user_error(f"{option} {str(path)!r} is a file; give a folder")
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".iclr24-probe-")  # /proc and read-only mounts say no here
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        shown = str(path) if len(str(path)) <= 80 else str(path)[:77] + "..."
        raise _user_error(f"{option} {shown!r} is not a folder a run can write to: {err.strerror or err}") from None
    return path


def _is_folder(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:  # e.g. a name too long for the file system
        return False


def _resolve(name: str) -> list[Experiment]:
    if name == "all":
        return list_experiments()
    try:
        return [get_experiment(name)]
    except ValueError as err:
        raise _user_error(str(err)) from None


@app.command("list")
def list_command(runs: Path = typer.Option(Path("runs"), "--runs", help="Folder of run folders."),
                 claims: bool = typer.Option(False, "--claims", help="Each claim and its latest verdict too.")) -> None:
    """List the methods, one line each: its paper and its latest result (--claims: each claim too)."""
    table = Table(show_lines=claims)
    columns = ("method", "paper", "claims checked (latest verdict)", "latest run; quick preset's time") if claims \
        else ("method", "paper", "latest verdicts", "latest run; quick preset's time")
    for column in columns:
        table.add_column(column, overflow="fold")
    for exp in list_experiments():
        record = latest_run(runs, exp.name)
        stored = [read_claim(c) for c in record.result.get("claims", [])] if record and record.ok else []
        quick = latest_run(runs, exp.name, preset="quick")
        if record is None:
            latest = "not run"
        elif not record.ok:
            latest = f"failed ({record.result.get('preset')}, {record.run_dir.name})"
        else:
            latest = f"{record.result.get('preset')}, {run_time(record.result)}; {record.run_dir.name}"
        if quick is None:  # what it cost where it was measured, until it has run here
            latest += f"\nquick: {_reference_quick_time(exp.name)}"
        elif record is not None and quick.run_dir != record.run_dir:  # the quick time, too
            latest += f"\nquick: {run_time(quick.result)}"
        if claims:
            verdicts = {c.statement: c.verdict for c in stored}
            shown = "\n".join(f"- {c}" + (f": {_styled(verdicts[c])}" if c in verdicts else "") for c in exp.claims)
        else:
            shown = _verdict_counts(stored) if stored else f"{len(exp.claims)} claims, not run" if record is None \
                else "-"
        table.add_row(exp.name, _short(exp.paper), shown, latest)
    console.print(table)


def _verdict_counts(claims) -> str:
    """``"holds 3, fails 1, inconclusive 2"``, each verdict in its colour, the zero counts left out."""
    counts = {}
    for c in claims:
        counts[c.verdict] = counts.get(c.verdict, 0) + 1
    return ", ".join(f"{_styled(v)} {n}" for v, n in counts.items())


def _short(paper: str, width: int = 60) -> str:
    return paper if len(paper) <= width else paper[: width - 3] + "..."


def _reference_quick_time(name: str) -> str:
    """``"not run here; 806 s on a 2-core x86 machine (reference, ...)"``, or ``"not run"`` with no reference."""
    wall = reference_time(name)
    if wall is None:
        return "not run"
    table = reference_times()
    return f"not run here; {wall:.0f} s on {table.get('machine', 'the reference machine')} " \
           f"(reference, {table.get('measured', 'undated')})"


def _latest_summary(record: RunRecord | None) -> str:
    if record is None:
        return "not run"
    r = record.result
    if r.get("status") != "ok":
        return f"failed ({r.get('preset')}, {record.run_dir.name})"
    verdicts = claims_tally(read_claim(c) for c in r.get("claims", []))
    return f"{verdicts} ({r.get('preset')}, {run_time(r)}; {record.run_dir.name})"


@app.command("run", help="Run one reproduction (or all) and write runs/<name>/<timestamp>/.\n\nMethods: "
             f"{', '.join(sorted(METHOD_PACKAGES))}; or all.")
def run_command(
    name: str = typer.Argument(..., help="A method name, or 'all'."),
    preset: str = typer.Option("quick", "--preset", "-p", help=f"One of {', '.join(PRESETS)}."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed for python, numpy and torch (default 0)."),
    seeds: Optional[str] = typer.Option(None, "--seeds", help="Several seeds, e.g. 0,1,2 or 0-4: one run each, "
                                        "plus a seed group that pools their replicates into one verdict per "
                                        "claim."),
    executor: str = typer.Option("local", "--executor", help="local (this process) or ray (Ray tasks; extra "
                                 "'cluster')."),
    address: Optional[str] = typer.Option(None, "--address", help="Ray cluster to join (e.g. auto); by default a "
                                          "local one is started."),
    overrides: Optional[list[str]] = typer.Option(None, "--set", help="Config override key=value (repeatable)."),
    out: str = typer.Option("runs", "--runs", "--out", help="Folder for run folders (--runs, as for list, show "
                            "and report; --out is the older name)."),
    report_dir: str = typer.Option("report", "--report-dir", help="Where the report is rebuilt."),
    report: bool = typer.Option(True, "--report/--no-report", help="Rebuild the report after running."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars, log lines or tables: the closing "
                               "line and errors only."),
    threads: int = typer.Option(1, "--threads",
                                help="torch threads; 1 gives the steadiest timings on a shared machine."),
    processes: Optional[int] = typer.Option(None, "--jobs", "-j",
                                       help="Runs at once on this machine (local executor); default: one per core. "
                                            "Experiments whose claims time wall-clock run alone afterwards; "
                                            "--jobs 1 runs everything one after another."),
    llm: Optional[str] = typer.Option(None, "--llm", help="Language-model backend for methods that use one: "
                                      "embedded, hf:/checkpoint/folder, llamacpp[:/file.gguf], openai:MODEL "
                                      "(server from $OPENAI_BASE_URL); sets $ICLR24_LLM."),
    confirm_plan: Optional[Path] = typer.Option(None, "--confirm", help="A plan from `iclr24 plan`: run exactly its "
                                                "fresh seeds and judge each planned claim on them alone."),
) -> None:
    """Run one reproduction (or all) and write runs/<name>/<timestamp>/."""
    if llm is not None:
        from iclr24.llm.base import check_model_spec

        try:
            check_model_spec(llm, probe=True)  # an openai: server that does not answer is an error now, not later
        except ValueError as err:
            raise _user_error(f"--llm: {err}") from None
        os.environ["ICLR24_LLM"] = llm
    if seed is not None and not 0 <= seed < MAX_SEED:
        raise _user_error(f"--seed must be in [0, 2**32), got {seed} (scikit-learn's random_state must be below "
                          "2**32)")
    if not 1 <= threads <= MAX_THREADS:
        raise _user_error(f"--threads must be in [1, {MAX_THREADS}], got {threads}")
    if processes is not None and not 1 <= processes <= MAX_THREADS:
        raise _user_error(f"--jobs must be in [1, {MAX_THREADS}], got {processes}")
    if seed is not None and seeds is not None:
        raise _user_error(f"--seed {seed} and --seeds {seeds!r} both choose seeds; give one of them")
    if seeds is not None:
        try:
            seed_list = parse_seeds(seeds)
        except ValueError as err:
            raise _user_error(str(err)) from None
    else:
        seed_list = [0 if seed is None else seed]
    if executor not in EXECUTORS:
        raise _user_error(f"--executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    if executor == "ray":
        try:
            require_ray()
        except ImportError as err:
            raise _user_error(str(err)) from None
    elif address is not None:
        raise _user_error("--address joins a Ray cluster; use it with --executor ray")
    experiments = _resolve(name)
    overrides = overrides or []
    if preset not in PRESETS:
        raise _user_error(f"unknown preset {preset!r}; expected one of {', '.join(PRESETS)}")
    if name == "all" and overrides:
        raise _user_error("--set applies to one method's config; run methods one by one to override fields")
    for exp in experiments:  # check every config before running anything
        try:
            exp.config(preset, overrides)
        except (TypeError, ValueError) as err:
            raise _user_error(str(err)) from None
    out = _check_writable_folder("--out", out)
    if report:
        report_dir = _check_writable_folder("--report-dir", report_dir)

    if processes is not None and executor != "local":
        raise _user_error("--jobs sets the local executor's processes; Ray places tasks itself")
    if processes is None:  # one run per core
        processes = max(1, (os.cpu_count() or 1) // threads)
    if confirm_plan is not None:
        if overrides or preset != "quick" or seed is not None:
            raise _user_error("--confirm runs the plan's preset and seeds as planned; drop --preset, --seed and --set")
        _confirm(confirm_plan, name, experiments, seeds, out, report_dir if report else None, executor, address, quiet,
                 threads, processes)
        return
    jobs = [Job(exp.name, preset, s, tuple(overrides)) for exp in experiments for s in seed_list]
    finished: dict[str, list[RunRecord]] = {}

    def on_record(record: RunRecord) -> None:
        if not quiet or not record.ok:
            _print_record(record)
        finished.setdefault(record.name, []).append(record)
        if len(seed_list) > 1 and len(finished[record.name]) == len(seed_list):  # the method's group is complete
            group = write_seed_group(out, sorted(finished[record.name], key=lambda r: r.result["seed"]))
            if not quiet:
                _print_group(group)

    try:
        records = run_jobs(jobs, runs_dir=out, executor=executor, address=address, quiet=quiet, threads=threads,
                           processes=processes, on_record=on_record)
    except ValueError as err:  # a run the executor cannot place (e.g. more CPUs than a local cluster has)
        raise _user_error(str(err)) from None
    except KeyboardInterrupt as err:  # Ctrl-C or SIGTERM: finished runs stay published, nothing partial is left
        err_console.print(f"interrupted ({str(err) or 'Ctrl-C'}); finished runs and seed groups are kept, an "
                          f"unfinished run leaves nothing behind")
        raise typer.Exit(130) from None
    failed = [record for record in records if not record.ok]
    isolation = sandbox_isolation()
    console.print(f"claims: {_closing_tally(records, out, len(seed_list) > 1)}"
                  + (f"; {len(failed)} of {len(records)} runs failed" if failed else "")
                  + ("; generated code ran with WEAK isolation (ICLR24_SANDBOX=weak): the host was in its reach"
                     if isolation == "weak" else "; generated code sandbox: strong isolation"), highlight=False,
                  soft_wrap=True)
    if report:
        path = build_report(out, report_dir, list_experiments())
        console.print(f"report: {path}")
    if failed:
        for record in failed:
            err_console.print(f"\n{record.name} failed ({record.run_dir}):", style="bold red")
            err_console.print(record.result.get("traceback", ""), markup=False, highlight=False)
        which = ", ".join(f"{r.name} (seed {r.result.get('seed')})" for r in failed)
        err_console.print(f"{len(failed)} of {len(records)} runs failed: {which}")
        raise typer.Exit(1)


def _confirm(plan_path: Path, name: str, experiments: list[Experiment], seeds: Optional[str], out: Path,
             report_dir: Optional[Path], executor: str, address: Optional[str], quiet: bool, threads: int,
             processes: int) -> None:
    """``run --confirm``: check the plan, run what is missing of it, judge and show pilot beside confirmation."""
    from iclr24.core.confirm import check_plan, confirm
    from iclr24.core.plan import PlanError, load_plan

    try:
        plan = load_plan(plan_path)
    except PlanError as err:
        raise _user_error(str(err)) from None
    names = [e.name for e in experiments]
    if name == "all":
        names = [n for n in names if plan["methods"].get(n, {}).get("confirm_runs")]
    chosen = None
    if seeds is not None:
        if len(names) != 1:
            raise _user_error("--seeds with --confirm chooses one method's fresh seeds; name the method")
        try:
            chosen = {names[0]: parse_seeds(seeds)}
        except ValueError as err:
            raise _user_error(str(err)) from None
    try:
        check_plan(plan, names, out, chosen)
    except PlanError as err:
        raise _user_error(str(err)) from None

    def on_record(record: RunRecord) -> None:
        if not quiet or not record.ok:
            console.print(f"{record.name} seed {record.result.get('seed')}: "
                          f"{'done' if record.ok else 'FAILED'} in {run_time(record.result)}", highlight=False)

    try:
        paths = confirm(plan, names, out, seeds=chosen, executor=executor, address=address, quiet=quiet,
                        threads=threads, processes=processes, on_record=on_record)
    except (ValueError, PlanError) as err:
        raise _user_error(str(err)) from None
    except KeyboardInterrupt as err:
        err_console.print(f"interrupted ({str(err) or 'Ctrl-C'}); the finished runs are kept: the same command "
                          "resumes the confirmation without running them again")
        raise typer.Exit(130) from None
    verdicts = []
    for n, path in paths.items():
        record = json.loads(path.read_text(encoding="utf-8"))
        if not quiet:
            _print_confirmation(record, path)
        verdicts += [c["verdict"] for c in record["claims"]]
    from iclr24.core.evidence import tally

    console.print(f"confirmed claims: {tally(verdicts)}", highlight=False)
    if report_dir is not None:
        console.print(f"report: {build_report(out, report_dir, list_experiments())}")


def _print_confirmation(record: dict, path: Path | None = None) -> None:
    where = f" -> {path.parent}" if path is not None else ""
    table = Table(title=f"{record['name']}: confirmation on fresh seeds {record['seeds']} ({record['preset']}, "
                  f"CPU {record['cpu_s']:.0f} s){where}")
    for column in ("claim", "pilot", "plan", "confirmation (these runs only)"):
        table.add_column(column, overflow="fold")
    for c in record["claims"]:
        table.add_row(_short(c["statement"], 70), f"{_styled(c['pilot_verdict'])}: {c['pilot_summary']}",
                      f"{c['planned_n']} {c.get('unit', 'units')} in {c['planned_runs']} runs, aiming at {c['side']}",
                      f"{_styled(c['verdict'])}: {c['summary']}")
    console.print(table)


def _closing_tally(records: list[RunRecord], runs_dir: Path, grouped: bool) -> str:
    """"paper claims: k hold, m fail, j inconclusive, r not run; stand-ins: ..." over the claims of this
    command's runs (a seed group's pooled verdicts when several seeds ran), each re-derived from its samples."""
    claims = []
    if grouped:
        for name in dict.fromkeys(r.name for r in records):
            group = latest_seed_group(runs_dir, name) or {}
            record = next((r for r in records if r.name == name and r.ok), None)
            stored = {c.get("statement"): c for c in (record.result.get("claims", []) if record else [])}
            claims += [read_claim({**stored.get(s, {"statement": s}), "verdict": c.get("verdict"),
                                   "evidence": c.get("evidence")}) for s, c in group.get("claims", {}).items()]
    else:
        claims = [read_claim(c) for r in records if r.ok for c in r.result.get("claims", [])]
    return claims_tally(claims)


def _print_group(path: Path) -> None:
    group = json.loads(path.read_text(encoding="utf-8"))
    table = Table(title=f"{group['name']} over seeds {group['seeds']} (replicates pooled) -> {path.parent}")
    for column in ("claim", "verdict", "effect [95% interval], n", "each seed"):
        table.add_column(column)
    for statement, c in group["claims"].items():
        table.add_row(statement, _styled(c["verdict"]), (c.get("evidence") or {}).get("summary", c.get("reason", "")),
                      ", ".join(f"{k}: {v}" for k, v in c.get("per_seed", {}).items()))
    console.print(table)
    if group["failed_seeds"]:
        err_console.print(f"{group['name']}: seeds {group['failed_seeds']} failed")


_STYLES = {"holds": "green", "fails": "red", "inconclusive": "yellow", "not run": "dim", DAMAGED: "bold red"}


def _styled(verdict: str) -> str:
    return f"[{_STYLES[verdict]}]{verdict}[/]" if verdict in _STYLES else verdict


def _print_record(record: RunRecord) -> None:
    r = record.result
    if not record.ok:
        console.print(f"[bold red]{record.name}: failed[/] {r.get('error', '')} -> {record.run_dir}", highlight=False)
        return
    table = Table(title=f"{record.name} ({r['preset']}, {r['wall_time_s']:.1f}s) -> {record.run_dir}")
    for column in ("claim", "paper", "measured here", "verdict", "effect [95% interval], n, vs threshold"):
        table.add_column(column)
    for stored in (read_claim(c) for c in r["claims"]):
        notes = []
        if stored.subject == "stand-in":
            notes.append(f"stand-in: {stored.stand_in}")
        if stored.provenance == "revised":
            notes.append(f"margin revised: {stored.revision}")
        if stored.original is not None:
            notes.append(f"under the first definition: {stored.original.verdict}")
        statement = stored.statement + "".join(f"\n[dim]({note})[/]" for note in notes)
        if stored.verdict == DAMAGED:
            evidence = f"damaged record: {stored.problem}"
        elif stored.evidence is not None and stored.evidence.kind in ("all_of", "given"):
            evidence = stored.evidence.summary()
        else:
            evidence = stored.evidence.summary() if stored.evidence is not None else ""
        table.add_row(statement, stored.paper, stored.measured, _styled(stored.verdict), evidence)
    console.print(table)
    failed_checks = [c["statement"] for c in r.get("checks", []) if not c.get("passed")]
    if failed_checks:
        err_console.print(f"{record.name}: sanity checks FAILED: {failed_checks}")


@app.command("plan")
def plan_command(
    name: str = typer.Argument(..., help="A method name, or 'all'."),
    runs: Path = typer.Option(Path("runs"), "--runs", help="Folder of run folders (the pilots)."),
    preset: str = typer.Option("quick", "--preset", "-p", help="The pilots' preset: the latest run of it (or the "
                               "seed group it belongs to)."),
    out: Path = typer.Option(Path("plan.json"), "--out", help="Where the plan is written."),
    power: float = typer.Option(0.8, "--power", help="Power to decide each claim, in [0.5, 1)."),
    budget: Optional[str] = typer.Option(None, "--budget", help="CPU time for the whole confirmation, e.g. 2h: "
                                         "the cheapest claims that fit."),
    max_claim: Optional[str] = typer.Option(None, "--max-claim", help="CPU time one claim may take, e.g. 15m."),
    workers: int = typer.Option(1, "--workers", help="Ray workers (1 CPU each) to quote the wall time for."),
) -> None:
    """Plan a confirmation: the fresh runs that would decide each inconclusive claim at --power, and their CPU cost.

    The pilot (the latest run) estimates each claim's effect and spread; `iclr24 run NAME --confirm plan.json`
    then runs exactly the planned seeds and judges each claim on them alone."""
    from iclr24.core.plan import MAX_UNITS, PlanError, build_plan, parse_duration, pilot, write_plan

    if not 0.5 <= power < 1:
        raise _user_error(f"--power must be in [0.5, 1), got {power}")
    if not 1 <= workers <= MAX_THREADS:
        raise _user_error(f"--workers must be in [1, {MAX_THREADS}], got {workers}")
    if preset not in PRESETS:
        raise _user_error(f"unknown preset {preset!r}; expected one of {', '.join(PRESETS)}")
    try:
        budget_s = parse_duration(budget) if budget is not None else None
        claim_s = parse_duration(max_claim) if max_claim is not None else None
    except ValueError as err:
        raise _user_error(f"--budget/--max-claim: {err}") from None
    if not _is_folder(runs):
        raise _user_error(f"no runs folder at {str(runs)[:80]!r}; run `iclr24 run {name}` first (the pilot)")
    experiments = _resolve(name)
    pilots = {}
    for exp in experiments:
        try:
            pilots[exp.name] = pilot(runs, exp, preset)
        except PlanError as err:
            if name != "all":
                raise _user_error(str(err)) from None
            err_console.print(f"skipped: {err}", markup=False, highlight=False)
    if not pilots:
        raise _user_error(f"no pilot to plan from under {str(runs)!r}; run `iclr24 run {name} -p {preset}` first")
    plan = build_plan(pilots, power=power, max_units=MAX_UNITS, budget_cpu_s=budget_s, max_claim_cpu_s=claim_s)
    _check_writable_folder("--out", out.parent if str(out.parent) else Path("."))
    write_plan(plan, out)
    _print_plan(plan, workers)
    console.print(f"plan: {out} ({_hms(plan['cpu_s'])} of CPU; about {_hms(_wall_on(plan, workers))} on {workers} "
                  f"worker{'s' if workers > 1 else ''}); confirm with `iclr24 run {name} --confirm {out}`",
                  highlight=False, soft_wrap=True)


def _hms(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min" if seconds >= 3600 else \
        f"{seconds // 60} min {seconds % 60:02d} s"


def _wall_on(plan: dict, workers: int) -> float:
    """The confirmation's wall time on ``workers`` one-CPU workers: runs placed longest first (each run takes its
    pilot's wall time)."""
    import heapq

    runs = sorted((m["pilot"]["wall_s_per_run"] or m["pilot"]["cpu_s_per_run"] for m in plan["methods"].values()
                   for _ in range(m["confirm_runs"])), reverse=True)
    finish = [0.0] * workers
    for wall in runs:
        heapq.heappush(finish, heapq.heappop(finish) + wall)
    return max(finish)


def _print_plan(plan: dict, workers: int) -> None:
    table = Table(title=f"plan at {plan['power']:.0%} power: fresh runs that would decide each inconclusive claim")
    for column in ("method", "claim", "pilot", "plan: n, runs, CPU", "or why not"):
        table.add_column(column, overflow="fold")
    for name, method in plan["methods"].items():
        for c in method["claims"]:
            unit = next((p["unit"] for p in c["parts"] if p.get("n") == c["n"]), "units")
            planned = f"{c['n']} {unit}, {c['runs']} runs, {_hms(c['cpu_s'])} -> {c['side']}?" if c["n"] else "-"
            status = {"planned": "[green]planned[/]", "over budget": "[yellow]over budget[/]"}.get(
                c["status"], "[dim]cannot decide[/]")
            before = f" (confirmed before: {c['confirmed_before']})" if c.get("confirmed_before") else ""
            table.add_row(name, _short(c["statement"], 70), c["pilot_summary"][:60] + ("..." if len(
                c["pilot_summary"]) > 60 else ""), planned, f"{status} {c['reason']}{before}".strip())
    console.print(table)


@app.command("report")
def report_command(
    runs: Path = typer.Option(Path("runs"), "--runs", help="Folder of run folders."),
    out: str = typer.Option("report", "--out", help="Where index.html and README.md are written."),
) -> None:
    """Rebuild report/index.html and report/README.md from the latest run of each method."""
    if not _is_folder(runs):
        raise _user_error(f"no runs folder at {str(runs)[:80]!r}; run `iclr24 run all` first or pass --runs")
    out = _check_writable_folder("--out", out)
    console.print(f"report: {build_report(runs, out, list_experiments())}")


@app.command("show")
def show_command(
    name: str = typer.Argument(..., help="A method name."),
    runs: Path = typer.Option(Path("runs"), "--runs", help="Folder of run folders."),
) -> None:
    """Show the latest result of one method as a table."""
    exp = _resolve(name)[0] if name != "all" else None
    if exp is None:
        raise _user_error("show takes one method name, not 'all'")
    record = latest_run(runs, exp.name)
    if record is None:
        raise _user_error(f"no run of {exp.name!r} under {str(runs)!r}; run `iclr24 run {exp.name}` first")
    _print_record(record)
    from iclr24.core.confirm import latest_confirmation

    confirmation = latest_confirmation(runs, exp.name)
    if confirmation is not None:
        _print_confirmation(confirmation)
    r = record.result
    for title in ("metrics", "timings"):
        values = r.get(title) or {}
        if values:
            table = Table(title=title)
            table.add_column("name")
            table.add_column("value", justify="right")
            for key, value in values.items():
                table.add_row(key, f"{value:.4g}")
            console.print(table)


def main() -> None:
    app(prog_name="iclr24")


if __name__ == "__main__":
    sys.exit(main())
