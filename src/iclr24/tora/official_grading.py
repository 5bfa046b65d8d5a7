"""ToRA's own grader, written afresh, so a score here can be set beside a published ToRA number.

The official evaluation (microsoft/ToRA ``src/utils/parser.py`` ``strip_string`` and
``src/eval/grader.py`` ``math_equal``) cleans both answers and then tries, in order:

1. numbers: both read as floats (commas dropped); the prediction matches ``r``, ``r/100`` or
   ``100 r`` within a relative 1e-4 (a percent without its sign);
2. strings: brackets dropped, then equal;
3. tuples: both in ``[..]`` or both in ``(..)``, equal item by item;
4. sympy: both parsed (LaTeX first, then a plain expression), equal when ``simplify(a - b)`` is 0
   or their values agree within a relative 1e-3.

Its quirks are kept, since the point is the same verdict: ``(1,2)`` equals ``(1,2]``, ``2500``
equals ``25``, every ``and`` is deleted. Two things differ on purpose. Model output never
reaches ``eval`` (the official grader hands raw strings to sympy's ``parse_expr``); text that
:func:`iclr24.tora.answers.latex_to_sympy` refuses is not parsed, which changes verdicts only on
strings no MATH answer looks like. And where sympy's ANTLR LaTeX parser is not installed
(it needs ``antlr4-python3-runtime==4.11``, as ToRA pins), :func:`latex_to_sympy` stands in for
it. ``tests/tora/data/official_pairs.jsonl`` holds verdicts of the official code to check both
paths against.
"""

from __future__ import annotations

import functools
import math
import re

from iclr24.tora.answers import _ReadsOtherwise, latex_to_sympy, within_time

__all__ = ["official_equal", "official_normalize"]


def official_normalize(answer: str) -> str:
    """ToRA's clean-up of an answer as its evaluation applies it (``extract_answer``, then ``strip_string`` twice)."""
    s = str(answer).split("\n")[0]
    s = s[1:] if s.startswith(":") else s
    s = s[:-1] if s.endswith((".", "/")) else s
    return _strip(_strip(s))


def _strip(s: str) -> str:
    s = str(s).strip().replace("\n", "").rstrip(".")
    s = s.replace("\\!", "").replace("\\ ", "")
    s = s.replace("\\\\", "\\").replace("\\\\", "\\")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\left", "").replace("\\right", "")
    without_unit = re.sub(r"\\text{.*?}$", "", s).strip()  # from the first \text{ to the end
    s = without_unit if without_unit else s
    s = s.replace("^{\\circ}", "").replace("^\\circ", "")
    s = s.replace("\\$", "").replace("$", "")
    s = s.replace("\\text", "").replace("x\\in", "")
    s = s.replace("\\%", "").replace("%", "")
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    s = s.replace("\\cdot", "")
    s = s.replace("infinity", "\\infty")
    if "\\infty" not in s:
        s = s.replace("inf", "\\infty")
    s = s.replace("and", "").replace("\\mathbf", "")
    s = re.sub(r"\\mbox{.*?}", "", s)
    if "j" in s and "i" not in s:
        s = s.replace("j", "i")
    s = re.sub(r"(\d+)\.0+([^\d])", r"\1\2", s)
    s = re.sub(r"(\d+)\.0+$", r"\1", s)
    if not s:
        return s
    s = "0" + s if s[0] == "." else s
    sides = s.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:  # "k = 4", "y=" ...
        s = sides[1]
    s = re.sub(r"\\sqrt(\w+)", r"\\sqrt{\1}", s)
    s = s.replace(" ", "")
    return _slash_to_frac(_brace_fracs(s))


def _brace_fracs(s: str) -> str:
    r"""``\frac12`` -> ``\frac{1}{2}``, ``\frac1{7}`` -> ``\frac{1}{7}``; unchanged if a ``\frac`` has < 2 chars."""
    head, *parts = s.split("\\frac")
    out = head
    for part in parts:
        out += "\\frac"
        if part.startswith("{"):
            out += part
        elif len(part) < 2:
            return s
        elif part[1] == "{":
            out += "{" + part[0] + "}" + part[1:]
        else:
            out += "{" + part[0] + "}{" + part[1] + "}" + part[2:]
    return out


def _slash_to_frac(s: str) -> str:
    """``a/b`` of integers (or of roots) -> ``\\frac{a}{b}`` when the integers are written canonically."""
    parts = s.split("/")
    if len(parts) != 2:
        return s
    try:
        a, b = (p if "sqrt" in p else str(int(p)) for p in parts)
    except ValueError:
        return s
    return f"\\frac{{{a}}}{{{b}}}" if f"{a}/{b}" == s else s


def _float(s) -> float | None:
    try:
        return float(str(s).replace(",", ""))
    except ValueError:
        return None


def official_equal(prediction: str, reference: str, *, clean: bool = True) -> bool:
    """ToRA's ``math_equal`` verdict on two answers, cleaned first by :func:`official_normalize` (``clean``)."""
    pred, ref = (official_normalize(prediction), official_normalize(reference)) if clean else (prediction, reference)
    p, r = _float(pred), _float(ref)
    if p is not None and r is not None:
        return any(math.isclose(p, target, rel_tol=1e-4) for target in (r / 100, r, r * 100))
    if not pred:
        return False
    pred, ref = str(pred).strip(), str(ref).strip()
    pred_flat, ref_flat = pred, ref
    if ((pred[:1] == "[" and pred[-1:] == "]" and not ref.startswith("("))
            or (pred[:1] == "(" and pred[-1:] == ")" and not ref.startswith("["))):
        pred_flat, ref_flat = pred_flat.strip("[]()"), ref_flat.strip("[]()")
    pred_flat, ref_flat = re.sub(r"[{}()]", "", pred_flat), re.sub(r"[{}()]", "", ref_flat)
    if pred_flat == ref_flat:
        return True
    same_brackets = any(pred[:1] == ref[:1] == o and pred[-1:] == ref[-1:] == c for o, c in ("[]", "()"))
    if same_brackets:
        pred_items, ref_items = pred[1:-1].split(","), ref[1:-1].split(",")
        if len(pred_items) == len(ref_items) and all(
                official_equal(a, b, clean=False) for a, b in zip(pred_items, ref_items)):
            return True
    return _symbolic_equal(pred, ref)


def _symbolic_equal(a: str, b: str) -> bool:
    """sympy's verdict, given 1 s as the official grader gives it (a timeout there is "not equal")."""
    import sympy

    def compare():
        x, y = _parse(a), _parse(b)
        if x is None or y is None:
            return False
        try:
            if sympy.simplify(x - y) == 0:
                return True
        except TimeoutError:
            raise
        except Exception:  # noqa: BLE001  the official grader treats every failure as "not equal"
            pass
        return math.isclose(sympy.N(x), sympy.N(y), rel_tol=1e-3)

    return bool(within_time(compare, 1.0, default=False))


def _parse(s: str):
    latex = _antlr_parse_latex()
    for parse in (latex or functools.partial(latex_to_sympy, latex_only=True),
                  functools.partial(latex_to_sympy, python_only=True)):  # ToRA's parse_latex, then parse_expr
        try:
            return parse(s)
        except _ReadsOtherwise:  # the ANTLR parser reads it, as something our reader cannot reproduce
            return None
        except TimeoutError:
            raise
        except Exception:  # noqa: BLE001, PERF203  the next parser may read it
            continue
    return None


@functools.cache
def _antlr_parse_latex():
    """sympy's ANTLR LaTeX parser when it works here (it needs antlr4-python3-runtime 4.11), else None."""
    try:
        from sympy.parsing.latex import parse_latex

        parse_latex("1")
    except Exception:  # noqa: BLE001  ImportError, or a runtime of the wrong version
        return None
    return parse_latex
