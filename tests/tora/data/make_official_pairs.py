"""Build ``official_pairs.jsonl``: (prediction, reference, verdict of ToRA's own grader) triples.

Provenance, so anyone can rebuild the file and check it::

    git clone https://github.com/microsoft/ToRA            # read at commit 213c1c9 (main, Feb 2024)
    python -m venv venv && venv/bin/pip install sympy==1.12 antlr4-python3-runtime==4.11.1
    venv/bin/python tests/tora/data/make_official_pairs.py ToRA > tests/tora/data/official_pairs.jsonl

The environment is the one ToRA's ``requirements.txt`` pins (sympy 1.12 with the ANTLR 4.11 LaTeX
parser). The verdict is the official evaluation pipeline, run here and not re-implemented:
``math_equal(strip_string(extract(pred)), strip_string(extract(ref)), timeout=True)`` with
``src/eval/grader.py`` and ``src/utils/parser.py`` imported from the checkout; ``extract`` is the
clean-up ``extract_answer`` applies to a boxed answer (first line, a leading ``:``, a trailing ``.``
or ``/``), then ``strip_string`` as ``run_execute`` applies it a second time.

Pairs come from four places, sampled with a fixed seed:

- ``gsm8k-70b`` / ``gsm8k-code34b``: the released GSM8K outputs of ToRA-70B and ToRA-Code-34B
  (``src/outputs/llm-agents/*/gsm8k``): the boxed answer each model wrote against the reference.
- ``math-variant``: MATH test reference answers (``src/data/math/test.jsonl``) against rewritings
  of themselves (``\\dfrac``, spacing, units, ``x =``, decimals, signs, other brackets).
- ``math-other``: a MATH reference against another reference of the same shape (words, intervals,
  tuples, roots, expressions), which should mostly be unequal.
- ``hard``: hand-written cases for the classes where graders disagree.

A second argument changes the sampling seed (the checked-in file uses 0). Pairs whose official
verdict took 0.9 s or longer (the grader's sympy timeout is 1 s, so its verdict there
depends on the machine) are left out.
"""

from __future__ import annotations

import json
import random
import re
import sys
import time
from pathlib import Path

HARD = [
    # words
    (r"\text{even}", r"\text{odd}"), (r"\text{Tuesday}", r"\text{Saturday}"), (r"\text{Monday}", "Monday"),
    (r"\text{(C)}", "C"), (r"\text{(A)}", r"\text{(B)}"), ("yes", r"\text{yes}"), (r"\text{no}", r"\text{yes}"),
    (r"\text{neither}", r"\text{odd}"), (r"\textbf{(E)}", "E"), (r"\text{Devon}", r"\text{Devon}"),
    # infinity
    (r"-\infty", r"\infty"), (r"(-\infty,3)", r"(\infty,3)"), (r"(-\infty,3)", "(-inf,3)"), ("-inf", r"-\infty"),
    ("inf", r"\infty"), (r"(-\infty, 3]", r"(-\infty,3]"),
    (r"(-\infty,-2)\cup(3,\infty)", r"(-\infty,-2)\cup(3,\infty)"),
    (r"(-\infty,-2)\cup(3,\infty)", r"(-\infty,-2)\cup(4,\infty)"), (r"[2,\infty)", r"(2,\infty)"),
    # brackets around one value, bare lists
    ("[12]", "12"), ("(12)", "12"), ("1, 2", "(1,2)"), ("1,2", "(1, 2)"), ("2, 5", "5, 2"), (r"\{1, 2\}", "1, 2"),
    ("(1,2)", "[1,2]"), ("(1,2)", "(1,3)"), ("(3, -1)", r"\left(3,-1\right)"), ("(0, 1, 2)", "(0,1,2)"),
    # units and spacing
    (r"10\ \text{cm}", "10"), (r"10\text{ cm}^2", "10"), (r"5 \text{ dollars}", "5"), (r"\$5.00", "5"),
    (r"12\text{ inches}", "13"), (r"3\ \text{hours}", "3"), (r"90^\circ", "90"), (r"90^{\circ}", "89"),
    # imaginary unit
    ("1+2j", "1+2i"), ("1+2i", "2i+1"), ("1-2i", "1+2i"), ("3i", "3j"), ("i", "-i"),
    # Euler's number and constants
    ("e", "2.71828"), ("e", "e"), (r"\sqrt{2}", r"\sqrt{3}"), (r"\sqrt2", r"\sqrt{2}"), ("1.41421", r"\sqrt{2}"),
    ("1.414", r"\sqrt{2}"), ("1.4", r"\sqrt{2}"), (r"\pi", "3.14159"), (r"\pi", "3.14"), (r"2\pi", r"\pi"),
    (r"\frac{\pi}{2}", "1.5708"), (r"\frac{\pi}{3}", r"\frac{\pi}{4}"), (r"\sqrt{5}", r"\sqrt{6}"),
    (r"\log 2", r"\log 3"), (r"2\sqrt{3}", r"\sqrt{12}"), (r"3\sqrt{2}", r"2\sqrt{3}"),
    # percent
    ("50", "0.5"), ("50%", "0.5"), (r"50\%", "50"), ("0.25", "25"), ("25", "25%"), ("2500", "25"),
    # tolerance
    ("0.3333", r"\frac{1}{3}"), ("0.333", r"\frac{1}{3}"), ("0.33", r"\frac{1}{3}"), ("1000.05", "1000"),
    ("1000.5", "1000"), ("3.14159", "3.1416"), ("100001", "100000"),
    # fractions and expressions
    ("3/4", r"\frac{3}{4}"), (r"\dfrac{3}{4}", "0.75"), (r"\frac34", r"\frac{3}{4}"), ("-3/4", r"-\frac{3}{4}"),
    (r"\frac{x+2}{7}", r"\frac{x}{7}+\frac{2}{7}"), ("x^2+2x+1", "(x+1)^2"), ("x+1", "x+2"), ("2x", "x2"),
    ("y=2x+3", "2x+3"), ("k = 4", "4"), (r"x \in [1,2]", "[1,2]"), ("a+b", "b+a"), ("ab", "ba"),
    # numbers written oddly
    ("1,234", "1234"), ("1,234.5", "1234.5"), ("1 234", "1234"), ("0.50", "0.5"), (".5", "0.5"), ("5.", "5"),
    ("-0", "0"), ("007", "7"), ("1e3", "1000"), (r"1 \times 10^3", "1000"), (r"10^{3}", "1000"),
    ("two", "2"), ("", "0"), ("0", ""), ("None", "0"),
    # matrices and sets
    (r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", r"\begin{pmatrix}1\\2\end{pmatrix}"),
    (r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", r"\begin{pmatrix} 2 \\ 1 \end{pmatrix}"),
    (r"\{1,2,3\}", r"\{3,2,1\}"),
]


def boxed(text: str) -> str | None:
    """The raw content of the last ``\\boxed{...}`` in ``text``, braces matched."""
    start = text.rfind("boxed")
    if start < 0:
        return None
    rest, depth = text[start + 5:], 0
    if not rest.startswith("{"):
        return rest.split("$")[0].strip()
    for i, ch in enumerate(rest):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth == 0:
            return rest[1:i]
    return None


def variants(ref: str) -> list[str]:
    """Rewritings of a MATH reference answer, some equal to it and some not."""
    out = [ref.replace(r"\frac", r"\dfrac"), " ".join(ref), f"${ref}$", f"x = {ref}", f"-{ref}", f"{ref}."]
    if re.fullmatch(r"-?\d+(\.\d+)?", ref):
        out += [rf"{ref}\text{{ cm}}", rf"{ref}^\circ", rf"{ref}\%", str(float(ref) / 100), str(float(ref) + 1)]
    frac = re.fullmatch(r"(-?)\\frac\{(\d+)\}\{(\d+)\}", ref)
    if frac:
        value = int(frac.group(2)) / int(frac.group(3)) * (-1 if frac.group(1) else 1)
        out += [f"{value:.6f}", f"{value:.2f}", f"{frac.group(1)}{frac.group(2)}/{frac.group(3)}"]
    if ref.startswith("(") and ref.endswith(")"):
        out += ["[" + ref[1:-1] + "]", ref[1:-1], "(" + ",".join(reversed(ref[1:-1].split(","))) + ")"]
    if ref.startswith(r"\text{"):
        out += [ref[6:-1], ref.replace(r"\text", r"\textbf")]
    return out


def main(tora: Path, seed: int = 0) -> None:
    sys.path[:0] = [str(tora / "src" / "eval"), str(tora / "src" / "utils")]
    from grader import math_equal  # noqa: PLC0415  the official grader, from the user's checkout
    from parser import strip_string  # noqa: PLC0415

    def official(pred: str, ref: str) -> tuple[bool, float]:
        def clean(s: str) -> str:
            s = s.split("\n")[0]
            s = s[1:] if s.startswith(":") else s
            s = s[:-1] if s.endswith((".", "/")) else s
            return strip_string(strip_string(s))

        start = time.perf_counter()
        verdict = bool(math_equal(clean(pred), clean(ref), timeout=True))
        return verdict, time.perf_counter() - start

    rng = random.Random(seed)
    pairs: list[tuple[str, str, str]] = []
    for name, source in (("gsm8k-70b", "tora-70b-v1.0"), ("gsm8k-code34b", "tora-code-34b-v1.0")):
        path = tora / "src/outputs/llm-agents" / source / "gsm8k/test_tora_-1_seed0_t0.0_s0_e1319.jsonl"
        rows = [json.loads(line) for line in path.open()]
        wrong = [r for r in rows if str(r["pred"][0]) != str(r["gt"])]
        for row in rng.sample(wrong, 40) + rng.sample(rows, 20):
            pred = boxed(row["code"][0]) or str(row["pred"][0])
            pairs.append((pred, str(row["gt"]), name))
    references = [boxed(json.loads(line)["solution"]) for line in (tora / "src/data/math/test.jsonl").open()]
    references = sorted({r for r in references if r})
    shaped = [r for r in references if not re.fullmatch(r"-?\d+", r)]
    for ref in rng.sample(shaped, 70):
        for variant in rng.sample(variants(ref), 3):
            pairs.append((variant, ref, "math-variant"))
    buckets: dict[str, list[str]] = {}
    for ref in shaped:
        key = ("text" if ref.startswith(r"\text") else "interval" if ref[:1] in "([" else
               "sqrt" if "sqrt" in ref else "pi" if "pi" in ref else "expr" if re.search("[a-z]", ref) else "num")
        buckets.setdefault(key, []).append(ref)
    for key, refs in sorted(buckets.items()):
        for _ in range(15):
            a, b = rng.sample(refs, 2)
            pairs.append((a, b, "math-other"))
    pairs += [(p, r, "hard") for p, r in HARD]

    seen = set()
    for pred, ref, source in pairs:
        if (pred, ref) in seen:
            continue
        seen.add((pred, ref))
        verdict, seconds = official(pred, ref)
        if seconds < 0.9:
            print(json.dumps({"prediction": pred, "reference": ref, "official": verdict, "source": source}))


if __name__ == "__main__":
    main(Path(sys.argv[1]), *map(int, sys.argv[2:3]))
