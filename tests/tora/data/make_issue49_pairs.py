"""Build issue #49's comparison: 13,138 (prediction, reference) pairs from ToRA's data files, with official verdicts.

Provenance, so anyone can rebuild it (the output is not checked in; the pairs we got wrong before the fixes are,
in ``official_pairs_review.jsonl`` under the sources ``issue49-*``)::

    git clone https://github.com/microsoft/ToRA            # read at commit 213c1c9
    python -m venv venv && venv/bin/pip install sympy==1.12 antlr4-python3-runtime==4.11.1
    venv/bin/python tests/tora/data/make_issue49_pairs.py ToRA 0 pairs.jsonl texts.jsonl

Pairs: every released GSM8K output of ToRA-70B and ToRA-Code-34B (the boxed answer against the reference;
the MATH outputs are not in every copy of the repository), and for each MATH test reference one Python-syntax
rewriting (as a program prints it: ``60^\\circ`` becomes ``60**circ``) and one LaTeX rewriting chosen with the
seed, plus 500 pairs of two references. Each distinct pair is graded once by the official pipeline
(``math_equal(strip_string(...), strip_string(...), timeout=True)`` after ``extract_answer``'s clean-up) and
written with ``count``, how often it occurs. ``texts.jsonl`` holds the GSM8K solutions with ToRA's own
``extract_answer`` of each, to compare extraction.
"""

from __future__ import annotations

import json
import random
import re
import sys
from collections import Counter
from pathlib import Path

# run as a script, this folder is on sys.path: the official answers' \boxed{} reader is shared
from make_official_pairs import boxed  # noqa: E402


def python_syntax(ref: str) -> str:
    """A reference as a Python program prints it: ``**`` powers, ``(a)/(b)``, ``sqrt(x)``, ``pi``, no backslashes."""
    s = ref
    for _ in range(6):
        s = re.sub(r"\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}", r"(\1)/(\2)", s)
        s = re.sub(r"\\sqrt\{([^{}]*)\}", r"sqrt(\1)", s)
        s = re.sub(r"\^\{([^{}]*)\}", r"**(\1)", s)
    s = s.replace("^", "**").replace("\\pi", "pi").replace("\\infty", "oo").replace("\\cdot", "*")
    return s.replace("\\left", "").replace("\\right", "").replace("\\", "").replace("{", "(").replace("}", ")")


def variants(ref: str) -> list[str]:
    """LaTeX rewritings of a reference, some equal to it and some not."""
    out = [ref.replace(r"\frac", r"\dfrac"), " ".join(ref), f"${ref}$", f"x = {ref}", f"-{ref}", f"{ref}.",
           re.sub(r"\\frac\{(\d+)\}\{(\d+)\}", r"\\frac{\1}\2", ref),
           re.sub(r"\\frac\{(\d+)\}\{(\d)\}", r"\\frac\1\2", ref), ref.replace(" ", ""), ref.replace(",", ", ")]
    if re.fullmatch(r"-?\d+(\.\d+)?", ref):
        out += [rf"{ref}\text{{ cm}}", rf"{ref}^\circ", rf"{ref}\%", str(float(ref) / 100), str(float(ref) + 1),
                f"[{ref}]"]
    if "," in ref:
        out += [ref.split(",")[0].strip("([ "), "[" + ref + "]", "(" + ref + ")"]
    return [v for v in out if v != ref] or [ref + "1"]


def main(tora: Path, seed: int, pairs_out: Path, texts_out: Path) -> None:
    sys.path[:0] = [str(tora / "src" / "eval"), str(tora / "src" / "utils")]
    from grader import math_equal  # noqa: PLC0415  the official grader, from the user's checkout
    from parser import extract_answer, strip_string  # noqa: PLC0415

    def clean(s: str) -> str:
        s = s.split("\n")[0]
        s = s[1:] if s.startswith(":") else s
        s = s[:-1] if s.endswith((".", "/")) else s
        return strip_string(strip_string(s))

    rng = random.Random(seed)
    pairs, texts = [], []
    for name, source in (("gsm8k-70b", "tora-70b-v1.0"), ("gsm8k-code34b", "tora-code-34b-v1.0")):
        path = next((tora / "src/outputs/llm-agents" / source / "gsm8k").glob("*.jsonl"))
        for row in map(json.loads, path.open()):
            code = row["code"][0]
            pairs.append((boxed(code) if "boxed" in code else str(row["pred"][0]), str(row["gt"]), name))
            texts.append({"text": code, "official_extract": extract_answer(code), "source": name})
    solutions = (json.loads(line)["solution"] for line in (tora / "src/data/math/test.jsonl").open())
    refs = [r for r in map(boxed, solutions) if r]
    for ref in refs:
        pairs += [(python_syntax(ref), ref, "math-python"), (rng.choice(variants(ref)), ref, "math-variant")]
    distinct = sorted(set(refs))
    pairs += [(*rng.sample(distinct, 2), "math-other") for _ in range(500)]
    counts = Counter((p, r) for p, r, _ in pairs)
    seen = set()
    with pairs_out.open("w") as out:
        for pred, ref, source in pairs:
            if (pred, ref) not in seen:
                seen.add((pred, ref))
                verdict = bool(math_equal(clean(pred), clean(ref), timeout=True))
                out.write(json.dumps({"prediction": pred, "reference": ref, "official": verdict, "source": source,
                                      "count": counts[(pred, ref)]}) + "\n")
    with texts_out.open("w") as out:
        out.writelines(json.dumps(t) + "\n" for t in texts)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
