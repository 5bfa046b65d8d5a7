"""Reading a final answer out of a solution, normalising it, and grading it against a reference.

Two extractions (issue #59). ``mode="model_text"`` (the default, the reproduction's) reads only text the
model wrote: a brace-matched ``\\boxed{...}``, then "the answer is ...", then the last number. ``mode="official"``
reads a whole solution as ToRA's evaluation does, program outputs included, so a program that prints
``\\boxed{999}`` decides the answer there, as it does in the official code. Grading compares normalised strings,
then numbers (with a relative tolerance, and 50% = 0.5), then tuples element by element, then symbolic equality
through sympy.

Two graders (:func:`is_equivalent`): ``mode="strict"`` (the default, written for this library) and ``mode="official"``,
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

import re
import signal
import threading
from fractions import Fraction

from iclr24.core.checks import check_number

__all__ = ["EXTRACTION_MODES", "extract_answer", "find_boxed", "is_equivalent", "latex_to_sympy", "normalize_answer",
           "to_number"]

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")


def find_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``, ``\\boxed 5``), braces matched; None if absent."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
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


#: How a final answer is read: from the model's own text only, or as ToRA's evaluation reads a whole solution.
EXTRACTION_MODES = ("model_text", "official")


def extract_answer(text: str, *, mode: str = "model_text") -> str | None:
    """The final answer a text states, or None when it states none.

    Parameters
    ----------
    text : str
        ``"model_text"``: text the model wrote, and nothing a program printed (a trajectory's
        :attr:`~iclr24.tora.solver.Trajectory.final_text`); ``"official"``: a whole solution, output blocks included.
    mode : {"model_text", "official"}
        ``"model_text"`` takes the last brace-matched ``\\boxed{...}`` (or ``\\fbox``), then the last "the answer
        is ...", then the last number. ``"official"`` reads the answer as ToRA's evaluation does (``extract_answer``
        in its ``src/utils/parser.py``), for :func:`is_equivalent`'s official mode: the word ``boxed`` anywhere (also
        unescaped, as in a question's "a boxed set with 500 pieces", and also inside a program's output), then "he
        answer is", then the last ```` ```output ```` block (error messages included), then the last number; its
        first line, without a leading ``:`` or a trailing ``.`` or ``/``.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if mode == "official":
        return _official_extract(text)
    if mode != "model_text":
        raise ValueError(f"mode must be one of {EXTRACTION_MODES}, got {mode!r}")
    boxed = find_boxed(text)
    if boxed:
        return boxed
    said = re.findall(r"he answer is[:\s]*(.+)", text, flags=re.IGNORECASE)
    if said:
        answer = said[-1].strip()
        answer = re.sub(r"\.\s*$|\.\s+.*$", "", answer).strip().strip("$").strip()
        if answer:
            return answer
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None


def _official_extract(text: str) -> str | None:
    """ToRA's answer extraction, in its order (see :func:`extract_answer`); None where it finds nothing."""
    if "boxed" in text:
        rest = text.rsplit("boxed", 1)[1]
        if rest.startswith("{"):  # braces matched; an unclosed box runs to the end of the text
            depth, end = 0, len(rest)
            for i, ch in enumerate(rest):
                depth += {"{": 1, "}": -1}.get(ch, 0)
                if depth == 0:
                    end = i
                    break
            answer = rest[1:end]
        else:
            answer = rest.split("$")[0].strip()
    elif "he answer is" in text:
        answer = text.rsplit("he answer is", 1)[1].strip()
    elif "```output" in text and text.rsplit("```output", 1)[1].split("```")[0].strip():
        answer = text.rsplit("```output", 1)[1].split("```")[0].strip()
    else:
        numbers = re.findall(r"-?\d*\.?\d+", text.replace(",", ""))
        answer = numbers[-1] if numbers else ""
    answer = answer.split("\n")[0]
    answer = answer[1:] if answer.startswith(":") else answer
    answer = answer[:-1] if answer.endswith(".") else answer
    answer = answer[:-1] if answer.endswith("/") else answer
    return answer or None


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
    s = s.replace("\u2212", "-").replace("\u00d7", "\\times ").replace("\u00b7", "\\cdot ")
    s = s.replace("\\$", "").replace("$", "").strip().rstrip(".").strip()
    s = _SPACING.sub(" ", s)
    s = re.sub(r"\s*,?\s*" + _TEXT + r"\{\s*(?:and|or)\s*\}\s*|(?<=[\d}])\s*,?\s+(?:and|or)\s+(?=[-\d\\])", ",", s)
    s = s.replace("\\div", "/")
    s = s.replace("\\left", "").replace("\\right", "").replace("\\displaystyle", "")
    s = s.replace("dfrac", "frac").replace("tfrac", "frac")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "").replace("°", "")
    s = s.replace("\\%", "").replace("%", "").strip()
    if _unit(s):  # a unit only follows a quantity; "5 hundred" keeps its word
        s = _UNIT.sub("", s).strip()
    s = re.sub(_TEXT + r"\{([^{}]*)\}", r"\1", s)
    s = _INFINITY.sub(r"\\infty", s)
    s = re.sub(r"^(?:[a-zA-Z]\s*=|x\s*\\in)\s*", "", s)
    s = re.sub(r"(?<=\d),(?=\d{3}(?![\d.]))|(?<=\d),(?=\d{3}\.\d)", "", s)  # 1,234,567 -> 1234567; "1, 234" stays
    s = re.sub(r"(?<=\d)\s+(?=\d{3}(?!\d))", "", s)  # "1 000" and "1\,000": digit groups
    s = re.sub(rf"\\({_COMMANDS})\s+([A-Za-z0-9.]+)", r"\\\1(\2)", s)  # \sin x -> \sin(x), before spaces go
    if re.fullmatch(r"[-+\d\s.,]+", s):  # numbers side by side are two answers, never "23"
        s = re.sub(r"(?<=\d)\s+(?=[-+]?\d)", ",", s)
    s = s.replace(" ", "")
    if _COMPLEX_J.fullmatch(s):  # Python writes the imaginary unit j
        s = s.replace("j", "i")
    s = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac\{([^{}]*)\}(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac(\d)\{", r"\\frac{\1}{", s)
    s = re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", s)
    mixed = re.fullmatch(r"(-?)(\d+)\\frac\{(\d+)\}\{(\d+)\}", s)
    if mixed and int(mixed[3]) < int(mixed[4]):  # 2\frac{1}{2}: a mixed number, 5/2
        s = f"{mixed[1]}\\frac{{{int(mixed[2]) * int(mixed[4]) + int(mixed[3])}}}{{{mixed[4]}}}"
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


#: Words that scale a number rather than name its unit: "5 hundred" is not 5.
_SCALE_WORDS = {"hundred", "hundreds", "thousand", "thousands", "million", "millions", "billion", "billions",
                "trillion", "dozen", "dozens", "percent"}


def _unit(answer: str) -> str:
    """The unit a quantity ends with (``10\\text{ cm}^2`` -> ``cm^2``), singular and lower-case; else ``""``."""
    match = _UNIT.search(answer)
    if not match or not re.search(r"[\d})]|\\pi$", answer[:match.start()].strip()):
        return ""
    words = re.sub(r"^" + _TEXT + r"\{|\}", "", match[0]).strip().lower().split()
    if not words or words[0] in _SCALE_WORDS:
        return ""
    unit = " ".join(w[:-2] if w.endswith("es") and len(w) > 4 else w[:-1] if w.endswith("s") and len(w) > 2 else w
                    for w in words)
    return unit.replace(" ", "")


def to_number(answer: str) -> float | None:
    """The value of a numeric answer (``"1,234"``, ``"-3.5"``, ``"\\frac{3}{4}"``, ``"25%"`` -> 0.25), else None."""
    value = _number(normalize_answer(answer))
    return None if value is None else float(value / 100 if "%" in str(answer) else value)


#: Longer answers are compared as plain strings: normalising and parsing them is not bounded in time.
MAX_ANSWER_CHARS = 1000


def is_equivalent(prediction: str | None, reference: str, *, rel_tol: float = 1e-4, symbolic: bool = True,
                  mode: str = "strict") -> bool:
    """Whether ``prediction`` states the same answer as ``reference``.

    ``mode="strict"``: equal normalised strings; or equal numbers (integers and fractions exactly;
    within ``rel_tol`` where one side is a decimal, an approximation; with a percent sign on one
    side only, 50% matches 0.5 and 50); or tuples and intervals of the same brackets equal
    element by element (a bare ``1, 2`` is the tuple ``(1,2)``); or, with ``symbolic``,
    expressions sympy shows equal (exactly, unless a decimal is involved; an infinity only equals
    the same infinity; at most 2 s). Two different units are unequal (``10 cm``, ``10 m``); words
    are compared as words (``\\text{odd}`` is not ``\\text{dod}``).

    ``mode="official"``: the verdict of ToRA's grader (``strip_string`` then ``math_equal``; see
    :mod:`iclr24.tora.official_grading`); ``rel_tol`` and ``symbolic`` do not apply.

    Answers longer than :data:`MAX_ANSWER_CHARS` are equal only when their stripped texts are.
    """
    if mode not in ("strict", "official"):
        raise ValueError(f"mode must be 'strict' or 'official', got {mode!r}")
    check_number("rel_tol", rel_tol, minimum=0.0)
    if prediction is None:
        return False
    if max(len(str(prediction)), len(str(reference))) > MAX_ANSWER_CHARS:
        return str(prediction).strip() == str(reference).strip()
    if mode == "official":
        from iclr24.tora.official_grading import official_equal

        return official_equal(prediction, reference)
    pred, ref = normalize_answer(prediction), normalize_answer(reference)
    pred_unit, ref_unit = _unit(str(prediction)), _unit(str(reference))
    if pred_unit and ref_unit and pred_unit != ref_unit:
        return False
    if pred == ref:
        return True
    p, r = _number(pred), _number(ref)
    if p is not None and r is not None:
        pairs = [(p, r)]
        if "%" in prediction and "%" not in reference:
            pairs.append((p / 100, r))
        if "%" in reference and "%" not in prediction:
            pairs.append((p, r / 100))
        approximate = _is_decimal(pred) or _is_decimal(ref)
        tolerance = Fraction(rel_tol)  # exact: 1e400 overflows a float
        return any(a == b or (approximate and abs(a - b) <= tolerance * max(abs(a), abs(b))) for a, b in pairs)
    pred_tuple, ref_tuple = _split_tuple(pred), _split_tuple(ref)
    if pred_tuple is not None and ref_tuple is not None:
        (p_open, p_items, p_close), (r_open, r_items, r_close) = pred_tuple, ref_tuple
        return (p_open == r_open and p_close == r_close and len(p_items) == len(r_items)
                and all(is_equivalent(a, b, rel_tol=rel_tol, symbolic=symbolic) for a, b in zip(p_items, r_items)))
    if _is_word(prediction, pred) or _is_word(reference, ref):  # never a product of letters
        return pred.casefold() == ref.casefold()
    return symbolic and _sympy_equal(pred, ref, rel_tol)


_DECIMAL = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d{1,3})?")


def _number(s: str) -> Fraction | None:
    """A normalised answer's exact value when it is a number (``12``, ``-3.5``, ``2e5``) or a fraction of them."""
    frac = re.fullmatch(r"(-?)\\frac\{(-?\d+(?:\.\d+)?)\}\{(-?\d+(?:\.\d+)?)\}", s)
    try:
        if frac:
            value = Fraction(frac[2]) / Fraction(frac[3])
            return -value if frac[1] else value
        return Fraction(s) if _DECIMAL.fullmatch(s) else None  # not "nan", "inf", "1_000" or 1e999999
    except (ValueError, ZeroDivisionError):
        return None


def _is_decimal(s: str) -> bool:
    """Whether a number is written with decimals or an exponent: a rounded value, compared within a tolerance."""
    return bool(_DECIMAL.fullmatch(s)) and bool(re.search(r"\.\d|e", s))


def _is_word(raw: str, normalized: str) -> bool:
    """A word answer (``\\text{even}``, ``Tuesday``): letters only, and written as text or longer than a product."""
    return bool(re.fullmatch(r"[A-Za-z]{2,}", normalized)) and (bool(re.search(_TEXT, str(raw)))
                                                                 or len(normalized) > 3)


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


def latex_to_sympy(s: str, *, latex_only: bool = False, python_only: bool = False):
    """Parse a normalised LaTeX answer into a sympy expression (fractions, roots, powers, pi, products).

    ``latex_only`` reads as sympy's ANTLR LaTeX parser does, which ToRA's grader uses: a function
    must be written as a command (bare ``sqrt`` is ``s*q*r*t``), ``\\pi`` is a variable named pi,
    and text after an unmatched closing bracket is ignored (``-2)\\cup(3`` reads as -2).
    ``python_only`` reads as sympy's ``parse_expr`` with its default transformations does, which ToRA's
    grader tries when the LaTeX parser fails: Python syntax only (no LaTeX, no implicit products, so
    ``4x`` fails), ``**`` for powers (``^`` is refused: Python's exclusive or), a run of letters one
    variable (``ab``), ``pi`` and ``E`` the constants.

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
    if python_only:
        if re.search(r"[\\{}^]", text):
            raise ValueError(f"{s!r} is not a Python expression")
    elif latex_only:
        if re.search(r"(?<![a-zA-Z\\])oo(?![a-zA-Z])", text):
            raise _ReadsOtherwise(s)
        text = re.sub(r"\\[,;:! ]", "", _balanced_prefix(text)).replace("\\{", "{").replace("\\}", "}")
        text = re.sub(r"\{\}.*", "", text)  # ANTLR stops at an empty group: "X{}Y" reads as X
        text = _antlr_prefix(text)
        text = re.sub(rf"(?<![\\a-zA-Z])({_COMMANDS}|pi)", lambda m: " ".join(m[0]), text)  # bare: letters
    text = text.replace("\\div", "/").replace("\\ln", "\\log")
    for _ in range(8):  # innermost first; nested groups need several passes
        text = re.sub(r"\^\{([^{}]*)\}", r"^(\1)", text)
        text = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"((\1)/(\2))", text)
        # one digit needs no braces: \frac{360}7, \frac1{7}, \frac12 (and \frac{360}75 is 360/7 times 5)
        text = re.sub(r"\\frac(?:\{([^{}]*)\}|(\d))(?:\{([^{}]*)\}|(\d))",
                      lambda m: f"(({m[1] or m[2]})/({m[3] or m[4]}))", text)
        text = re.sub(r"\\sqrt\[([^\]]*)\]\{([^{}]*)\}", r"((\2)**(1/(\1)))", text)
        text = re.sub(r"\\sqrt\{([^{}]*)\}", r" sqrt(\1)", text)
    text = text.replace("\\pi", " pi ").replace("\\cdot", "*").replace("\\times", "*").replace("\\infty", " oo ")
    text = re.sub(rf"\\({_COMMANDS})(?![a-zA-Z])", r" \1 ", text)
    text = text.replace("{", "(").replace("}", ")").replace("**", "^")
    checked = text
    if latex_only or python_only:  # both of ToRA's parsers read n! as a factorial: up to 9999!, computed at once
        checked = re.sub(r"(?<![\d.])(\d{1,4})!", r"\1", text)
    if len(text) > 200 or not _SAFE_EXPRESSION.fullmatch(checked):
        raise ValueError(f"cannot read {s!r} as an expression")
    if re.search(r"\d\.?[eE][-+]?\d{4,}", text):  # Python reads 1e999999 as a float literal: minutes in sympy
        raise ValueError(f"{s!r} has an exponent over 999")
    for exponent in _exponents(text):
        if "^" in exponent or any(len(n) > 3 for n in re.findall(r"\d+", exponent)):
            raise ValueError(f"{s!r} has a power tower or an exponent over 999")
    if python_only:  # each name is bound here, so none reaches Python's builtins (exit, eval)
        names = {name: sympy.Symbol(name) for name in re.findall(r"[A-Za-z]\w*", text)}
        names |= {"pi": sympy.pi, "E": sympy.E, "I": sympy.I, "oo": sympy.oo}
        names |= {name: getattr(sympy, name) for name in _FUNCTIONS - {"pi", "oo", "I", "ln"}}
        return parse_expr(text, transformations=standard_transformations + (convert_xor,), local_dict=names)
    text = re.sub(r"[A-Za-z]+", lambda m: m[0] if m[0] in _FUNCTIONS else " ".join(m[0]), text)
    if latex_only:
        text = _antlr_division(text)
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


def _antlr_prefix(s: str) -> str:
    """What sympy's ANTLR LaTeX parser reads of ``s``: the longest leading expression it accepts.

    Its number token takes thousands groups (``1,000,000``; ``1,2345`` is ``1,234`` times 5). The grammar has no
    ``**`` and no comma (outside a function's arguments), and its start rule need not reach the end of the text,
    so it stops before either: ``60**circ`` reads as 60 and ``6,-2`` as 6. Where the stop falls inside a bracket,
    or the text ends inside one, it gives up that whole group and stops before it (``2+(x**2)``, ``2+(3`` and
    ``10{,}000`` read as 2, 2 and 10); with nothing left the parse fails (``(h**2)/(m)``), and ToRA's grader then
    tries sympy's Python parser.
    """
    s = re.sub(r"(?<=\d),(\d{3})(?=\d)", r"\1*", s)
    s = re.sub(r"(?<=\d),(?=\d{3})", "", s)

    def stop(end: int) -> str:
        head = re.sub(r"(?:[-+*/=^_,\s]|\\cdot|\\times)+$", "", s[:end])
        if not head:
            raise ValueError(f"the LaTeX grammar reads nothing of {s!r}")
        return head

    depth, opened = 0, 0
    for i, ch in enumerate(s):
        if s.startswith("**", i) or ch == ",":
            return stop(i if depth == 0 else opened)
        if ch in "([{":
            opened = i if depth == 0 else opened
            depth += 1
        elif ch in ")]}":
            depth -= 1
    return stop(opened) if depth > 0 else s  # a group left open: "2+(3" reads as 2


def _antlr_division(text: str) -> str:
    """``a/b c`` as the ANTLR grammar reads it, ``a/(b c)``: an implicit product after ``/`` is its divisor.

    ``(3)/(5)i`` is 3/(5i) there, and ``1/2x`` is 1/(2x); an explicit ``*`` or ``/`` ends the divisor (``1/2*x`` is
    x/2). ``text`` is the reader's own expression syntax, with ``^`` for powers.
    """
    out, i = [], 0
    while i < len(text):
        out.append(text[i])
        if text[i] != "/":
            i += 1
            continue
        j = i + 1
        while j < len(text) and text[j] == " ":
            j += 1
        j += text[j:j + 1] in ("-", "+")  # a sign starts the divisor
        depth, end = 0, j
        while end < len(text):
            ch = text[end]
            if ch in "([":
                depth += 1
            elif ch in ")]":
                if depth == 0:
                    break
                depth -= 1
            elif depth == 0 and ch in "+-*/=," and text[end - 1:end] != "^":
                break
            end += 1
        divisor = text[i + 1:end]
        out.append(f"({divisor})" if divisor.strip() else divisor)
        i = end
    return "".join(out)


def _balanced_prefix(s: str) -> str:
    """``s`` up to its first closing bracket that closes nothing."""
    depth = 0
    for i, ch in enumerate(s):
        depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(ch, 0)
        if depth < 0:
            return s[:i]
    return s


class _ReadsOtherwise(ValueError):
    """Text sympy's ANTLR LaTeX parser reads as something else than a power or an infinity (``**``, ``oo``)."""


def _sympy_equal(pred: str, ref: str, rel_tol: float) -> bool:
    """Whether sympy shows the two equal: exactly when neither holds a decimal, else within ``rel_tol``."""
    import sympy

    def compare():
        a, b = latex_to_sympy(pred), latex_to_sympy(ref)
        if a.has(sympy.oo, -sympy.oo, sympy.zoo, sympy.nan) or b.has(sympy.oo, -sympy.oo, sympy.zoo, sympy.nan):
            return a == b  # -oo - oo is -oo, whose size is "within tolerance" of anything infinite
        difference = sympy.simplify(a - b)
        if difference == 0:
            return True
        if difference.free_symbols:
            return False
        gap = sympy.N(sympy.Abs(difference), 60)  # sympy's numbers: 3^2007 overflows a float
        if a.has(sympy.Float) or b.has(sympy.Float):  # a decimal is a rounded value
            return bool(gap <= rel_tol * sympy.Max(sympy.N(sympy.Abs(b), 60), sympy.Float(1e-9)))
        return bool(gap < 1e-40)  # exact forms simplify missed, equal to 60 digits; never 355/113 and pi

    return bool(within_time(compare, 2.0, default=False))


def within_time(fn, seconds: float, *, default=None):
    """``fn()``, or ``default`` when it fails or runs past ``seconds`` (enforced with a timer signal in the main
    thread; elsewhere ``fn`` runs unbounded). sympy can spend minutes on ``(x + 1)^999``; ToRA's grader gives it 1 s."""
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGALRM) if in_main else None
    live = [True]

    def expire(signum, frame):
        if live[0]:
            raise TimeoutError

    try:
        if in_main and previous in (signal.SIG_DFL, signal.SIG_IGN, None):
            signal.signal(signal.SIGALRM, expire)
            # the timer keeps firing every 50 ms after the deadline: a TimeoutError raised while a gc callback
            # runs (hypothesis installs one) is printed and dropped, and sympy would then run on unbounded
            signal.setitimer(signal.ITIMER_REAL, seconds, 0.05)
        else:
            in_main = False
        try:
            return fn()
        except Exception:  # noqa: BLE001  a parse or evaluation failure, or the time limit: not shown equal
            return default
        finally:
            live[0] = False
    except TimeoutError:  # the timer fired again between fn's end and disarming
        return default
    finally:
        if in_main:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
