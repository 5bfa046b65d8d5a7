"""Answer extraction, normalisation and grading on hand-written cases."""

import pytest

from iclr24.tora.answers import extract_answer, find_boxed, is_equivalent, normalize_answer, to_number


@pytest.mark.parametrize("text, expected", [
    (r"so $\boxed{42}$.", "42"),
    (r"first \boxed{1} then \boxed{\frac{1}{2}}", r"\frac{1}{2}"),  # the last one
    (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),  # nested braces
    (r"\fbox{7}", "7"),
    (r"\boxed 5$ done", "5"),
    (r"\boxed{3", None),  # cut off mid-answer
    ("no box here", None),
])
def test_find_boxed(text, expected):
    assert find_boxed(text) == expected


def test_official_extraction_reads_the_answer_as_tora_does():
    """mode="official" follows ToRA's extract_answer, checked on its released GSM8K outputs (2638 of 2638 the
    same after clean-up; strict mode differs on 6): the last output block before the last number, and the bare
    word "boxed" anywhere."""
    text = "print(cars)\n```\n```output\n5\n```\n5 cars drove through in the first 15 minutes."
    assert extract_answer(text, mode="official") == "5" and extract_answer(text) == "15"
    failed = "```output\nNameError: name 'x' is not defined\n```\nSo 12 is left."
    assert extract_answer(failed, mode="official") == "NameError: name 'x' is not defined"
    question = '"""He dumped a lego boxed set with 500 pieces on the floor."""\nprint(total)\n```'
    assert extract_answer(question, mode="official") == 'set with 500 pieces on the floor."""'
    assert extract_answer(question) == "500"
    assert extract_answer(r"so $\boxed{\frac{1}{2}}$.", mode="official") == r"\frac{1}{2}"
    assert extract_answer("The answer is: 7.\nmore", mode="official") == " 7"  # its clean-up strips later
    assert extract_answer("1,234 apples", mode="official") == "1234" and extract_answer("none", mode="official") is None
    for mode in ("tora", "strict"):  # "strict" was the extraction that fell back on a program's output
        with pytest.raises(ValueError, match=f"mode must be one of \\('model_text', 'official'\\), got '{mode}'"):
            extract_answer("1", mode=mode)
    with pytest.raises(TypeError, match="text must be a str"):
        extract_answer(None)


def test_model_text_extraction_order_boxed_then_sentence_then_last_number():
    assert extract_answer(r"The answer is 5. Actually $\boxed{6}$") == "6"
    assert extract_answer("So the answer is $12$.\n") == "12"
    assert extract_answer("3 apples and 4 pears, 7 in all") == "7"
    assert extract_answer("nothing numeric") is None
    assert extract_answer("a lego boxed set with 500 pieces") == "500"  # the word is no box; official mode takes it


def test_only_the_official_extraction_reads_a_boxed_answer_out_of_a_program_output():
    """Issue #59: a program that prints ``\\boxed{999}`` decides ToRA's official extraction, whatever the model
    says after it; the model-text extraction reads the model's words (the solver hands it only those)."""
    solution = "```python\nprint(r'\\boxed{999}')\n```\n```output\n\\boxed{999}\n```\nSo the answer is 408."
    assert extract_answer(solution, mode="official") == "999"
    assert extract_answer("So the answer is 408.") == "408"


@pytest.mark.parametrize("raw, expected", [
    (r"\dfrac{3}{4}", r"\frac{3}{4}"),
    (r"\frac12", r"\frac{1}{2}"),
    (r"\sqrt2", r"\sqrt{2}"),
    ("x = 5", "5"),
    ("1,234,567", "1234567"),
    (r"10\text{ cm}", "10"),
    (r"90^\circ", "90"),
    (r"\$18.50", "18.5"),
    ("3/4", r"\frac{3}{4}"),
    ("0.500", "0.5"),
    (".5", "0.5"),
    (r"\left( 1, 2 \right)", "(1,2)"),
    ("{7}", "7"),
])
def test_normalize_answer(raw, expected):
    assert normalize_answer(raw) == expected


@pytest.mark.parametrize("pred, ref", [
    ("0.75", r"\frac{3}{4}"),
    ("1,234", "1234.0"),
    ("50%", "0.5"),
    (r"50\%", "50"),
    (r"2\sqrt{2}", r"\sqrt{8}"),
    ("x^2+2x+1", "(x+1)^2"),
    (r"\pi/2", r"\frac{\pi}{2}"),
    ("(1, 2)", "(1,2.0)"),
    ("-.5", "-1/2"),
])
def test_equivalent(pred, ref):
    assert is_equivalent(pred, ref)


@pytest.mark.parametrize("pred, ref", [
    ("3", "4"),
    ("0.333", "1/3"),  # outside the 1e-4 relative tolerance
    ("(1, 2)", "[1, 2]"),  # open and closed intervals differ
    ("(1, 2)", "(1, 2, 3)"),
    (None, "1"),
    ("x+1", "x+2"),
    ("NameError: name 'x' is not defined", "5"),
])
def test_not_equivalent(pred, ref):
    assert not is_equivalent(pred, ref)


def test_symbolic_off_skips_sympy():
    assert not is_equivalent("x^2+2x+1", "(x+1)^2", symbolic=False)


def test_to_number():
    assert to_number("1,234") == 1234
    assert to_number(r"\frac{3}{4}") == 0.75
    assert to_number("25%") == 0.25
    assert to_number("x+1") is None
    assert to_number("inf") is None
