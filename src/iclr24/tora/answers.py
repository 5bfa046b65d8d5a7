"""Reading a final answer out of a solution, normalising it, and grading it against a reference.

The order of extraction follows ToRA's evaluation: a brace-matched ``\\boxed{...}``, then
"the answer is ...", then the last program output, then the last number in the text. Grading
compares normalised strings, then numbers (with a relative tolerance, and 50% = 0.5), then
tuples element by element, then symbolic equality through sympy.

>>> extract_answer(r"So the area is $\\boxed{\\frac{3}{4}}$.")
'\\\\frac{3}{4}'
>>> is_equivalent(r"\\dfrac{3}{4}", "0.75")
True
>>> is_equivalent("1,234", "1234.0")
True
"""

from __future__ import annotations

import math
import re

__all__ = ["extract_answer", "find_boxed", "is_equivalent", "normalize_answer", "to_number"]

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")


def find_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``, ``\\boxed 5``), braces matched; None if absent."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    rest = text[start:].split("box", 1)[1]
    if rest.startswith("ed"):
        rest = rest[2:]
    if rest.startswith(" ") and not rest.lstrip().startswith("{"):
        # ``\boxed 5``: the argument runs to the next space or dollar sign
        return re.split(r"[\s$]", rest.lstrip(), maxsplit=1)[0] or None
    if not rest.startswith("{"):
        return None
    depth = 0
    for i, ch in enumerate(rest):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth == 0:
            return rest[1:i].strip()
    return None  # unbalanced: the model stopped mid-answer


def extract_answer(text: str, *, program_output: str | None = None) -> str | None:
    """The final answer a solution states, or None when it states none.

    Parameters
    ----------
    text : str
        What the model wrote (tool outputs included).
    program_output : str, optional
        The last program's output; used when the text states no answer of its own.
    """
    boxed = find_boxed(text)
    if boxed:
        return boxed
    said = re.findall(r"he answer is[:\s]*(.+)", text, flags=re.IGNORECASE)
    if said:
        answer = said[-1].strip()
        answer = re.sub(r"\.\s*$|\.\s+.*$", "", answer).strip().strip("$").strip()
        if answer:
            return answer
    if program_output is not None and program_output.strip():
        return program_output.strip()
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None


def normalize_answer(answer: str) -> str:
    """A canonical string form of a LaTeX or plain answer (ToRA's ``strip_string``, written afresh).

    Removes spacing commands, ``\\left``/``\\right``, dollar signs, degree and percent marks,
    units in ``\\text{...}``, thousands separators and a leading ``x =``; rewrites ``\\dfrac``,
    ``\\tfrac``, ``\\frac12`` and ``\\sqrt2`` into ``\\frac{1}{2}`` and ``\\sqrt{2}``, ``a/b`` of
    integers into ``\\frac{a}{b}``, and ``0.50`` into ``0.5``.

    >>> normalize_answer(r" $x = \\dfrac12$ ")
    '\\\\frac{1}{2}'
    """
    s = str(answer).strip().replace("\n", "")
    s = s.rstrip(".").strip()
    s = re.sub(r"\\(?:[,;:!]|quad|qquad)", "", s)
    s = s.replace("\\left", "").replace("\\right", "").replace("\\displaystyle", "")
    s = s.replace("dfrac", "frac").replace("tfrac", "frac")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "").replace("°", "")
    s = s.replace("\\$", "").replace("$", "").replace("\\%", "").replace("%", "")
    s = re.sub(r"\\(?:text|textbf|mbox|mathrm)\{\s*[a-zA-Z][a-zA-Z\s.]*\}\s*(\^\{?\d\}?)?$", "", s).strip()  # units
    s = re.sub(r"\\(?:text|textbf|mbox|mathrm)\{(.*?)\}", r"\1", s)
    s = re.sub(r"^[a-zA-Z]\s*=\s*", "", s)  # "x = 5" -> "5"
    s = s.replace(" ", "")
    s = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", s)  # 1,234,567 -> 1234567
    s = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac\{([^{}]*)\}(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac(\d)\{", r"\\frac{\1}{", s)
    s = re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", s)
    if re.fullmatch(r"-?\d+/\d+", s):
        sign, (num, den) = ("-" if s.startswith("-") else ""), s.lstrip("-").split("/")
        s = f"{sign}\\frac{{{num}}}{{{den}}}"
    if re.fullmatch(r"-?\d*\.\d+", s):
        s = s.rstrip("0").rstrip(".") if "." in s else s
        s = "0" if s in ("", "-") else s
        s = ("0" + s) if s.startswith(".") else s.replace("-.", "-0.")
    if s.startswith("{") and s.endswith("}") and _balanced(s[1:-1]):
        s = s[1:-1]
    return s


def to_number(answer: str) -> float | None:
    """The value of a numeric answer (``"1,234"``, ``"-3.5"``, ``"\\frac{3}{4}"``, ``"25%"`` -> 0.25), else None."""
    value = _plain_number(normalize_answer(answer))
    return None if value is None else value / 100 if "%" in str(answer) else value


def is_equivalent(prediction: str | None, reference: str, *, rel_tol: float = 1e-4, symbolic: bool = True) -> bool:
    """Whether ``prediction`` states the same answer as ``reference``.

    Equal normalised strings; or numbers within ``rel_tol`` (where either side has a percent
    sign, 50% matches both 0.5 and 50); or tuples/intervals equal element by element; or, with
    ``symbolic``, expressions whose difference sympy simplifies to zero.
    """
    if prediction is None:
        return False
    pred, ref = normalize_answer(prediction), normalize_answer(reference)
    if pred == ref:
        return True
    p, r = _plain_number(pred), _plain_number(ref)
    if p is not None and r is not None:
        pairs = [(p, r)]
        if "%" in prediction or "%" in reference:
            pairs += [(p / 100, r), (p, r / 100)]
        return any(math.isclose(a, b, rel_tol=rel_tol, abs_tol=1e-9) for a, b in pairs)
    pred_items, ref_items = _split_tuple(pred), _split_tuple(ref)
    if pred_items is not None and ref_items is not None:
        return (pred[0] == ref[0] and pred[-1] == ref[-1] and len(pred_items) == len(ref_items)
                and all(is_equivalent(a, b, rel_tol=rel_tol, symbolic=symbolic) for a, b in zip(pred_items, ref_items)))
    return symbolic and _sympy_equal(pred, ref, rel_tol)


def _plain_number(s: str) -> float | None:
    """A normalised answer's value when it is a number or a fraction of numbers."""
    frac = re.fullmatch(r"(-?)\\frac\{(-?\d+(?:\.\d+)?)\}\{(-?\d+(?:\.\d+)?)\}", s)
    try:
        value = float(frac.group(2)) / float(frac.group(3)) * (-1 if frac.group(1) else 1) if frac else float(s)
    except (ValueError, ZeroDivisionError):
        return None
    return value if math.isfinite(value) else None


def _balanced(s: str) -> bool:
    depth = 0
    for ch in s:
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


def _split_tuple(s: str) -> list[str] | None:
    """The items of ``(a,b)`` / ``[a,b)`` / ``\\{a,b\\}``-free tuples and intervals at brace depth 0, else None."""
    if len(s) < 3 or s[0] not in "([" or s[-1] not in ")]":
        return None
    items, depth, current = [], 0, ""
    for ch in s[1:-1]:
        depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    items.append(current)
    return items if len(items) > 1 else None


def latex_to_sympy(s: str):
    """Parse a normalised LaTeX answer into a sympy expression (fractions, roots, powers, pi, products)."""
    import sympy
    from sympy.parsing.sympy_parser import (
        convert_xor,
        implicit_multiplication_application,
        parse_expr,
        standard_transformations,
    )

    text = s
    for _ in range(8):  # innermost first; nested fractions need several passes
        text = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"((\1)/(\2))", text)
        text = re.sub(r"\\sqrt\[([^\]]*)\]\{([^{}]*)\}", r"((\2)**(1/(\1)))", text)
        text = re.sub(r"\\sqrt\{([^{}]*)\}", r"sqrt(\1)", text)
    text = text.replace("\\pi", "pi").replace("\\cdot", "*").replace("\\times", "*").replace("\\infty", "oo")
    text = re.sub(r"\^\{([^{}]*)\}", r"**(\1)", text)
    text = text.replace("{", "(").replace("}", ")")
    if "\\" in text or "=" in text or len(text) > 200:
        raise ValueError(f"cannot read {s!r} as an expression")
    transformations = standard_transformations + (implicit_multiplication_application, convert_xor)
    return parse_expr(text, transformations=transformations, local_dict={"pi": sympy.pi, "e": sympy.E})


def _sympy_equal(pred: str, ref: str, rel_tol: float) -> bool:
    import sympy

    try:
        a, b = latex_to_sympy(pred), latex_to_sympy(ref)
        difference = sympy.simplify(a - b)
        if difference == 0:
            return True
        if not difference.free_symbols:
            value, scale = complex(sympy.N(difference)), abs(complex(sympy.N(b)))
            return abs(value) <= rel_tol * max(scale, 1e-9)
    except Exception:  # noqa: BLE001  any parse or evaluation failure means "not shown equal"
        return False
    return False
