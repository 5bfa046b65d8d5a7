"""Problem generators and loaders."""

import ast
import contextlib
import io
import json
import operator
import re

import pytest

from iclr24.llm import get_model
from iclr24.tora import PALSolver, ToRASolver
from iclr24.tora.data import TEMPLATES, gsm_problems, load_champ, load_gsm8k, load_math, template_name
from iclr24.tora.prompts import OUTPUT_OPEN

#: Each one-step template's answer from the numbers of its question, in their order: an oracle written apart from
#: the templates' own expressions (a unit factor the question leaves unsaid, 60 minutes an hour, is written here).
ONE_STEP_ANSWERS = {
    "bakery": operator.mul, "distance": operator.add, "spent": operator.sub, "crates": operator.floordiv,
    "field_area": operator.mul, "town_population": operator.add, "change": lambda price, paid: paid - price,
    "sharing": operator.floordiv, "train_speed": operator.mul, "tower_height": operator.add,
    "pages_left": operator.sub, "print_time": lambda per_minute, pages: pages // per_minute,
    "hours_to_minutes": lambda hours: hours * 60, "combined_weight": operator.add,
    "points_difference": operator.sub, "minutes_to_hours": lambda minutes: minutes // 60,
    "stadium_seats": operator.mul, "anniversary_year": operator.add, "sibling_age": operator.sub,
    "unit_price": lambda chairs, cost: cost // chairs, "times_as_many": operator.mul,
    "raffle_tickets": operator.add, "fewer_ducks": operator.sub, "average_speed": operator.floordiv,
}
ALL_TEMPLATES = [(k, t) for k in sorted(TEMPLATES) for t in TEMPLATES[k]]


def _numbers(text):
    return [int(x) for x in re.findall(r"\d+", text)]


def _printed(program):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(program, {})  # our own generated program: assignments, arithmetic and one print
    return out.getvalue().strip()


def test_generator_is_seeded_and_varied():
    a, b = gsm_problems(12, seed=3), gsm_problems(12, seed=3)
    assert a == b and all(p.program for p in a)
    assert a != gsm_problems(12, seed=4)
    assert len({p.question for p in a}) == 12
    # the seed draws numbers and names, never the templates
    assert [p.source for p in a] == [p.source for p in gsm_problems(12, seed=4)]


def test_at_least_twenty_one_step_templates_each_labelled_by_its_own_name():
    assert len(TEMPLATES[1]) >= 20 and set(ONE_STEP_ANSWERS) == {template_name(t) for t in TEMPLATES[1]}
    names = [template_name(t) for _, t in ALL_TEMPLATES]
    assert len(set(names)) == len(names) == 35
    problems = gsm_problems(2 * len(names), seed=0)
    assert [p.source for p in problems] == [f"gsm-synthetic/{n}" for n in names] * 2   # in turn, by steps
    assert len({p.id for p in problems}) == len(problems)


@pytest.mark.parametrize("steps, template", ALL_TEMPLATES, ids=[template_name(t) for _, t in ALL_TEMPLATES])
def test_every_templates_reference_program_prints_its_answer_in_its_number_of_steps(steps, template):
    """Over 200 seeds and digits 2-9: a positive integer answer, printed by the problem's own program, which
    writes down every number of the question (only a unit factor may go unsaid) and takes ``steps`` operations;
    a one-step answer is also recomputed from the question's numbers by an oracle of its own."""
    name = template_name(template)
    index = TEMPLATES[steps].index(template)
    for seed in range(200):
        digits = 2 + seed % 8
        p = gsm_problems(index + 1, seed=seed, digits=digits, steps=(steps,))[index]
        assert p.source == f"gsm-synthetic/{name}"
        assert int(p.answer) > 0 and _printed(p.program) == p.answer
        quantities = {line.split(" = ")[0]: int(line.split(" = ")[1]) for line in p.program.splitlines()[:-2]}
        assert set(_numbers(p.question)) <= set(quantities.values())
        assert set(quantities.values()) - set(_numbers(p.question)) <= {60}
        answer_line = p.program.splitlines()[-2]
        assert sum(isinstance(node, ast.BinOp) for node in ast.walk(ast.parse(answer_line))) == steps
        if steps == 1:   # the claims' problems: one operation on a number of `digits` digits
            assert max(len(str(x)) for x in _numbers(p.question)) >= digits
            assert p.answer == str(ONE_STEP_ANSWERS[name](*_numbers(p.question))), p.question


def test_a_division_with_a_remainder_is_refused_not_rounded():
    from iclr24.tora.data import _Story

    assert _Story("?", {"eggs": 36, "per_box": 12}, "eggs // per_box").answer == 3
    with pytest.raises(ValueError, match="leaves a remainder"):
        _ = _Story("?", {"eggs": 37, "per_box": 12}, "eggs // per_box").answer
    with pytest.raises(ValueError, match="may use names, integers"):
        _ = _Story("?", {"x": 2}, "x ** 2").answer


def _reference_model(problems, style):
    """A scripted model that answers each question with its problem's reference program; ToRA's then reads the
    program's output block and boxes it."""
    programs = {p.question: p.program for p in problems}

    def respond(prompt, _):
        if prompt.rstrip().endswith("```"):   # ToRA's next round: the output of the program just run
            return f"So the answer is $\\boxed{{{prompt.rstrip()[:-3].split(OUTPUT_OPEN)[-1].strip()}}}$."
        question = prompt.rsplit("Question: ", 1)[1].split("\nSolution:")[0]
        return f"{'I write down each number.' if style == 'tora' else ''}\n```python\n{programs[question]}\n```\n"

    return get_model("scripted", outputs=respond)


def test_the_solvers_solve_each_template_with_its_reference_program_in_the_sandbox():
    """One problem of every template through the experiment's machinery: PAL runs the program and answers with
    its output; ToRA runs it, reads the output and states it in its own text (the graded answer)."""
    problems = gsm_problems(len(ALL_TEMPLATES), seed=11)
    for solver in (PALSolver(_reference_model(problems, "pal"), max_tokens=1000),
                   ToRASolver(_reference_model(problems, "tora"), max_tokens=1000, extraction="model_text")):
        trajectories = solver.solve_batch([p.question for p in problems])
        assert [t.answer for t in trajectories] == [p.answer for p in problems]
        assert all(t.outputs[-1].ok and t.is_correct(p.answer) for t, p in zip(trajectories, problems))


@pytest.mark.parametrize("kwargs, match", [
    ({"n": -1}, "n must be"), ({"n": 2, "digits": 1}, "digits must be"), ({"n": 2, "steps": (4,)}, "steps must be"),
])
def test_generator_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gsm_problems(**kwargs)


def test_load_gsm8k_and_math(tmp_path):
    gsm = tmp_path / "test.jsonl"
    gsm.write_text(json.dumps({"question": "2+2?", "answer": "Two and two.\n#### 1,004"}) + "\n\n")
    assert [(p.question, p.answer) for p in load_gsm8k(gsm)] == [("2+2?", "1004")]
    math = tmp_path / "math.jsonl"
    math.write_text(json.dumps({"problem": "Half?", "solution": r"It is $\boxed{\frac{1}{2}}$."}) + "\n"
                    + json.dumps({"problem": "One?", "answer": "1"}) + "\n")
    assert [p.answer for p in load_math(math, limit=5)] == [r"\frac{1}{2}", "1"]
    assert len(load_math(math, limit=1)) == 1


def test_loaders_name_what_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing is downloaded"):
        load_gsm8k(tmp_path / "absent.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"q": "?"}) + "\n")
    with pytest.raises(KeyError, match="no 'question' field"):
        load_gsm8k(bad)


def test_champ_is_an_optional_extra():
    try:
        problems = load_champ(limit=3)
    except ImportError as err:
        assert "iclr24[champ]" in str(err)
    else:
        assert len(problems) == 3 and all(p.answer and p.question for p in problems)
