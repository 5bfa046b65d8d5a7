"""Reading a final answer out of a solution, normalising it, and grading it against a reference.

The order of extraction follows ToRA's evaluation: a brace-matched ``\\boxed{...}``, then
"the answer is ...", then the last program output, then the last number in the text. Grading
compares normalised strings, then numbers (with a relative tolerance, and 50% = 0.5), then
tuples element by element, then symbolic equality through sympy.

Two graders: ``mode="strict"`` (the default, written for this library) and ``mode="official"``,
which reproduces the verdicts of ToRA's own grader (:mod:`iclr24.tora.official_grading`) so a
score can be set beside a published one like for like. The official grader is more lenient: a
number matches 100x or 1/100x of itself without a percent sign, symbolic values match within a
relative 1e-3, and a prediction's brackets are dropped before comparing, so ``(1,2)`` equals
``(1,2]`` and ``[1,2]`` equals ``[1,2)``.

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

__all__ = ["extract_answer", "find_boxed", "is_equivalent", "latex_to_sympy", "normalize_answer", "to_number"]

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


_SPACING = re.compile(r"(?<!\\)\\(?:[,;:! ]|quad|qquad)")  # not the line break \\
_TEXT = r"\\(?:text|textbf|textrm|textit|mbox|mathrm|mathbf|operatorname)"
_UNIT = re.compile(_TEXT + r"\{\s*[a-zA-Z][a-zA-Z\s.]*\}\s*(?:\^\{?\d\}?)?$")
_INFINITY = re.compile(r"\\infty|(?<![a-zA-Z\\])(?:infinity|inf|oo)(?![a-zA-Z])|∞")
_COMPLEX_J = re.compile(r"[-+]?[\d.]*(?:[-+][\d.]*j|j)|[-+]?[\d.]+[-+][\d.]*j")


def normalize_answer(answer: str) -> str:
    """A canonical string form of a LaTeX or plain answer (in the spirit of ToRA's ``strip_string``).

    Removes spacing commands (``\\,`` ``\\ `` ``\\quad``), ``\\left``/``\\right``, dollar signs,
    degree and percent marks, thousands separators and a leading ``x =`` or ``x \\in``; removes
    a unit in ``\\text{...}`` only after a number (``10\\text{ cm}`` -> ``10``) and otherwise
    unwraps the word (``\\text{even}`` -> ``even``); writes infinity as ``\\infty`` (``inf``,
    ``oo``, ``∞``), a Python complex ``1+2j`` as ``1+2i``, ``\\dfrac``/``\\tfrac``/``\\frac12``/
    ``\\sqrt2`` as ``\\frac{1}{2}``/``\\sqrt{2}``, ``a/b`` of integers as ``\\frac{a}{b}``, ``0.50``
    as ``0.5``; and drops brackets around a single value (``[12]`` -> ``12``).

    >>> normalize_answer(r" $x = \\dfrac12$ ")
    '\\\\frac{1}{2}'
    >>> normalize_answer(r"\\text{Tuesday}"), normalize_answer(r"10\\ \\text{cm}")
    ('Tuesday', '10')
    """
    s = str(answer).strip().replace("\n", " ")
    s = s.replace("\\$", "").replace("$", "").strip().rstrip(".").strip()
    s = _SPACING.sub(" ", s)
    s = s.replace("\\left", "").replace("\\right", "").replace("\\displaystyle", "")
    s = s.replace("dfrac", "frac").replace("tfrac", "frac")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "").replace("°", "")
    s = s.replace("\\%", "").replace("%", "").strip()
    without_unit = _UNIT.sub("", s).strip()
    if without_unit != s and re.search(r"[\d})]|\\pi$", without_unit):  # a unit only follows a quantity
        s = without_unit
    s = re.sub(_TEXT + r"\{([^{}]*)\}", r"\1", s)
    s = _INFINITY.sub(r"\\infty", s)
    s = re.sub(r"^(?:[a-zA-Z]\s*=|x\s*\\in)\s*", "", s)
    s = re.sub(r"(?<=\d),(?=\d{3}(?![\d.]))|(?<=\d),(?=\d{3}\.\d)", "", s)  # 1,234,567 -> 1234567; "1, 234" stays
    s = s.replace(" ", "")
    if _COMPLEX_J.fullmatch(s):  # Python writes the imaginary unit j
        s = s.replace("j", "i")
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
    while len(s) > 2 and (s[0], s[-1]) in (("{", "}"), ("(", ")"), ("[", "]")) and _single_group(s):
        s = s[1:-1]  # {7}, [12], (C): one value in brackets is that value; (1,2) and [1,2) keep theirs
    return s


def to_number(answer: str) -> float | None:
    """The value of a numeric answer (``"1,234"``, ``"-3.5"``, ``"\\frac{3}{4}"``, ``"25%"`` -> 0.25), else None."""
    value = _plain_number(normalize_answer(answer))
    return None if value is None else value / 100 if "%" in str(answer) else value


def is_equivalent(prediction: str | None, reference: str, *, rel_tol: float = 1e-4, symbolic: bool = True,
                  mode: str = "strict") -> bool:
    """Whether ``prediction`` states the same answer as ``reference``.

    ``mode="strict"``: equal normalised strings; or numbers within ``rel_tol`` (where either side
    has a percent sign, 50% matches both 0.5 and 50); or tuples and intervals of the same brackets
    equal element by element (a bare ``1, 2`` is the tuple ``(1,2)``); or, with ``symbolic``,
    expressions sympy shows equal, where constants must agree within ``rel_tol`` and an infinity
    only equals the same infinity.

    ``mode="official"``: the verdict of ToRA's grader (``strip_string`` then ``math_equal``; see
    :mod:`iclr24.tora.official_grading`); ``rel_tol`` and ``symbolic`` do not apply.
    """
    if mode == "official":
        from iclr24.tora.official_grading import official_equal

        return prediction is not None and official_equal(prediction, reference)
    if mode != "strict":
        raise ValueError(f"mode must be 'strict' or 'official', got {mode!r}")
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
    pred_tuple, ref_tuple = _split_tuple(pred), _split_tuple(ref)
    if pred_tuple is not None and ref_tuple is not None:
        (p_open, p_items, p_close), (r_open, r_items, r_close) = pred_tuple, ref_tuple
        return (p_open == r_open and p_close == r_close and len(p_items) == len(r_items)
                and all(is_equivalent(a, b, rel_tol=rel_tol, symbolic=symbolic) for a, b in zip(p_items, r_items)))
    return symbolic and _sympy_equal(pred, ref, rel_tol)


def _plain_number(s: str) -> float | None:
    """A normalised answer's value when it is a number or a fraction of numbers."""
    frac = re.fullmatch(r"(-?)\\frac\{(-?\d+(?:\.\d+)?)\}\{(-?\d+(?:\.\d+)?)\}", s)
    if not frac and not re.fullmatch(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?", s):
        return None  # float() would also read "nan", "inf" and "1_000"
    try:
        value = float(frac.group(2)) / float(frac.group(3)) * (-1 if frac.group(1) else 1) if frac else float(s)
    except (ValueError, ZeroDivisionError):
        return None
    return value if math.isfinite(value) else None


def _depths(s: str):
    """``(index, character, depth after it)`` over ``s``, counting (), [] and {} together."""
    depth = 0
    for i, ch in enumerate(s):
        depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(ch, 0)
        yield i, ch, depth


def _single_group(s: str) -> bool:
    """Whether ``s``'s first bracket closes at its last character and nothing at depth 1 separates items."""
    for i, ch, depth in _depths(s):
        if depth == 0 and i < len(s) - 1:
            return False
        if ch == "," and depth == 1:
            return False
    return True


def _split_tuple(s: str) -> tuple[str, list[str], str] | None:
    """``(opening, items, closing)`` of ``(a,b)``, ``[a,b)`` or a bare ``a,b`` (read as ``(a,b)``); else None."""
    bracketed = len(s) >= 3 and s[0] in "([" and s[-1] in ")]"
    inner = s[1:-1] if bracketed else s
    items, current, level = [], "", 0
    for _, ch, depth in _depths(inner):
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
        level = min(level, depth)
    items.append(current)
    if len(items) < 2 or level < 0 or not all(items):
        return None
    return (s[0], items, s[-1]) if bracketed else ("(", items, ")")


#: Names the expression reader passes to sympy; any other run of letters is a product of variables.
_FUNCTIONS = {"sqrt", "sin", "cos", "tan", "cot", "sec", "csc", "asin", "acos", "atan", "sinh", "cosh",
              "tanh", "log", "ln", "exp", "pi", "oo", "I"}
_COMMANDS = "sqrt|sinh|cosh|tanh|sin|cos|tan|cot|sec|csc|log|ln|exp"
_SAFE_EXPRESSION = re.compile(r"[0-9a-zA-Z+\-*/^().,\s]*")


def latex_to_sympy(s: str, *, latex_only: bool = False):
    """Parse a normalised LaTeX answer into a sympy expression (fractions, roots, powers, pi, products).

    ``latex_only`` reads as sympy's ANTLR LaTeX parser does, which ToRA's grader uses: a function
    must be written as a command (bare ``sqrt`` is ``s*q*r*t``), ``\\pi`` is a variable named pi,
    and text after an unmatched closing bracket is ignored (``-2)\\cup(3`` reads as -2).

    The text is model output, and sympy's parser evaluates Python, so only digits, letters,
    operators and parentheses reach it; letters outside a few function names are read as single
    variables (``ab`` is ``a*b``, never a call), ``i`` is the imaginary unit and ``e`` a variable
    (``e`` alone is not taken for 2.71828), and power towers are refused before they are evaluated.
    """
    import sympy
    from sympy.parsing.sympy_parser import (
        convert_xor,
        implicit_multiplication_application,
        parse_expr,
        standard_transformations,
    )

    text = s
    if latex_only:
        text = _balanced_prefix(text)
        text = re.sub(rf"(?<![\\a-zA-Z])({_COMMANDS}|pi)", lambda m: " ".join(m[0]), text)  # bare: letters
    for _ in range(8):  # innermost first; nested fractions need several passes
        text = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"((\1)/(\2))", text)
        text = re.sub(r"\\sqrt\[([^\]]*)\]\{([^{}]*)\}", r"((\2)**(1/(\1)))", text)
        text = re.sub(r"\\sqrt\{([^{}]*)\}", r"sqrt(\1)", text)
    text = text.replace("\\pi", " pi ").replace("\\cdot", "*").replace("\\times", "*").replace("\\infty", " oo ")
    text = re.sub(rf"\\({_COMMANDS})\b", r" \1 ", text)
    text = re.sub(r"\^\{([^{}]*)\}", r"^(\1)", text)
    text = text.replace("{", "(").replace("}", ")").replace("**", "^")
    if len(text) > 200 or not _SAFE_EXPRESSION.fullmatch(text):
        raise ValueError(f"cannot read {s!r} as an expression")
    for exponent in _exponents(text):
        if "^" in exponent or any(len(n) > 4 for n in re.findall(r"\d+", exponent)):
            raise ValueError(f"{s!r} has a power tower or an exponent over 9999")
    text = re.sub(r"[A-Za-z]+", lambda m: m[0] if m[0] in _FUNCTIONS else " ".join(m[0]), text)
    transformations = standard_transformations + (implicit_multiplication_application, convert_xor)
    names = {name: sympy.Symbol(name) for name in ("e", "E", "S", "N", "O", "Q")}
    names |= {"oo": sympy.oo, "I": sympy.I, "pi": sympy.Symbol("pi") if latex_only else sympy.pi,
              "i": sympy.Symbol("i") if latex_only else sympy.I}
    return parse_expr(text, transformations=transformations, local_dict=names)


def _exponents(text: str):
    """The operand of each ``^`` in ``text``: a parenthesised group, a number or a letter."""
    for match in re.finditer(r"\^\s*", text):
        start = match.end()
        if text[start:start + 1] == "(":
            depth = 0
            for end in range(start, len(text)):
                depth += {"(": 1, ")": -1}.get(text[end], 0)
                if depth == 0:
                    break
            yield text[start:end + 1]
        else:  # a number or one letter; a "^" right after it makes a tower (9^9^9)
            yield re.match(r"(?:\d+(?:\.\d*)?|[A-Za-z]?)\s*\^?", text[start:])[0]


def _balanced_prefix(s: str) -> str:
    """``s`` up to its first closing bracket that closes nothing."""
    depth = 0
    for i, ch in enumerate(s):
        depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(ch, 0)
        if depth < 0:
            return s[:i]
    return s


def _sympy_equal(pred: str, ref: str, rel_tol: float) -> bool:
    import sympy

    try:
        a, b = latex_to_sympy(pred), latex_to_sympy(ref)
        if a.has(sympy.oo, -sympy.oo, sympy.zoo, sympy.nan) or b.has(sympy.oo, -sympy.oo, sympy.zoo, sympy.nan):
            return a == b  # -oo - oo is -oo, whose size is "within tolerance" of anything infinite
        difference = sympy.simplify(a - b)
        if difference == 0:
            return True
        if not difference.free_symbols:  # in sympy's numbers: 3^2007 overflows a float
            gap, scale = sympy.N(sympy.Abs(difference)), sympy.N(sympy.Abs(b))
            return bool(gap <= rel_tol * sympy.Max(scale, sympy.Float(1e-9)))
    except Exception:  # noqa: BLE001  any parse or evaluation failure means "not shown equal"
        return False
    return False
