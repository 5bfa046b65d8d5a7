"""Problem generators and loaders."""

import json
import re

import pytest

from iclr24.tora.data import TEMPLATES, gsm_problems, load_champ, load_gsm8k, load_math


def test_generator_is_seeded_and_varied():
    a, b = gsm_problems(12, seed=3), gsm_problems(12, seed=3)
    assert a == b
    assert a != gsm_problems(12, seed=4)
    assert len({p.question for p in a}) == 12


def test_answers_are_exact_integers_recomputed_from_the_question():
    for p in gsm_problems(40, seed=1, steps=(1,)):
        numbers = [int(x) for x in re.findall(r"\d+", p.question)]
        kind = p.source.split("/")[1]
        expected = {"bakery": lambda a, b: a * b, "distance": lambda a, b: a + b, "spent": lambda a, b: a - b,
                    "crates": lambda a, b: a // b}[kind](*numbers)
        assert p.answer == str(expected)
        if kind == "crates":
            assert numbers[0] % numbers[1] == 0


def test_steps_choose_the_templates_and_digits_the_size():
    kinds = {p.source.split("/")[1] for p in gsm_problems(16, seed=0, steps=(2,))}
    assert kinds == {t.__name__[1:] for t in TEMPLATES[2]}
    big = max(int(x) for x in re.findall(r"\d+", gsm_problems(1, seed=0, steps=(1,), digits=6)[0].question))
    assert 10**5 <= big < 10**6


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
