"""Output space shaping end to end with scripted policy and teacher."""

import json

import pytest

from iclr24.llm import get_model
from iclr24.tora import Problem, ToRASolver, is_valid, shape_outputs


def test_sample_validate_correct_dedupe_cap(tmp_path):
    problems = [Problem("What is 6 * 7?", "42", id="a"), Problem("What is 2 + 2?", "4", id="b")]

    def policy_output(prompt, i):
        if "6 * 7" in prompt:
            return "Multiply.\n```python\nprint(6 * 7)\n```\n" if "```output" not in prompt else r"$\boxed{42}$"
        if "```output" in prompt:
            return r"$\boxed{5}$"  # wrong after a correct program
        return "Add.\n```python\nprint(2 + 2)\n```\n"

    def teacher_output(prompt, i):
        return r"So $\boxed{4}$." if "```output\n4" in prompt else "Add.\n```python\nprint(2 + 2)\n```\n"

    def bare(question):  # no worked examples, so the scripts see only this question's trajectory
        return f"Question: {question}\nSolution:"

    policy = ToRASolver(get_model("scripted", outputs=policy_output), prompt=bare)
    teacher = ToRASolver(get_model("scripted", outputs=teacher_output), prompt=bare)
    path = tmp_path / "corpus.jsonl"
    report = shape_outputs(problems, policy, teacher, n_samples=3, max_per_question=2, path=path)
    assert report.sampled == 6 and report.valid == 3
    assert report.tried == 6  # 3 invalid trajectories x 2 rounds each
    assert report.corrected == 6
    assert report.duplicates > 0  # identical sampled and corrected solutions collapse
    assert report.kept == 2 and report.questions_covered == 2
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert {r["origin"] for r in lines} == {"policy", "teacher"} and lines == report.records
    assert all(r["solution"] for r in lines)


def test_validity_needs_a_correct_answer_and_clean_programs():
    llm = get_model("scripted", outputs=["```python\nprint(x)\n```\n", r"$\boxed{4}$"])
    t = ToRASolver(llm).solve("?")
    assert t.is_correct("4") and not is_valid(t, "4")  # the program failed


@pytest.mark.parametrize("kwargs, match", [
    ({"n_samples": 0}, "n_samples"), ({"max_per_question": 0}, "max_per_question"), ({"temperature": 0}, "temperature"),
])
def test_shaping_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        shape_outputs([Problem("?", "1")], ToRASolver(get_model("scripted", outputs=[])), **kwargs)
