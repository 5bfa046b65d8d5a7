"""Math word problems: a seeded generator of GSM-style problems with exact answers, and loaders for local
GSM8K / MATH JSONL files and the CHAMP dataset (extra ``champ``).

Nothing is downloaded. GSM8K and MATH are read from a path you give; CHAMP ships in the
``champ-dataset`` wheel (MIT licence) and is read from the installed package.

>>> problems = gsm_problems(3, seed=0)
>>> len(problems), problems[0].answer == str(int(problems[0].answer))
(3, True)
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from iclr24.core.checks import check_int
from iclr24.tora.answers import find_boxed

__all__ = ["Problem", "gsm_problems", "load_champ", "load_gsm8k", "load_jsonl", "load_math"]


@dataclass(frozen=True)
class Problem:
    """A question, its reference ``answer`` (a string: numbers, fractions or LaTeX) and where it came from."""

    question: str
    answer: str
    source: str = ""
    id: str = ""


_NAMES = ("Ava", "Ben", "Chloe", "David", "Emma", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Kira", "Liam")
_Draw = Callable[[], int]


# One-step problems: a single operation on a large number.
def _bakery(r: random.Random, big: _Draw, small: _Draw):
    per_day, days = big(), small()
    return f"A bakery bakes {per_day} loaves of bread every day. How many loaves does it bake in {days} days?", \
        per_day * days


def _distance(r: random.Random, big: _Draw, small: _Draw):
    monday, tuesday = big(), big()
    return (f"A truck drives {monday} kilometers on Monday and {tuesday} kilometers on Tuesday. How many kilometers "
            f"does it drive on the two days?", monday + tuesday)


def _spent(r: random.Random, big: _Draw, small: _Draw):
    name, spent = r.choice(_NAMES), big()
    budget = spent + big()
    return f"{name} has {budget} dollars and spends {spent} dollars on a bike. How many dollars are left?", \
        budget - spent


def _crates(r: random.Random, big: _Draw, small: _Draw):
    per_crate, crates = small(), big() // 10 + 10
    return (f"A warehouse packs {per_crate * crates} apples into crates of {per_crate} apples. How many crates does "
            f"it fill?", crates)


# Two- and three-step problems.
def _bought(r: random.Random, big: _Draw, small: _Draw):
    name, count, price = r.choice(_NAMES), small(), r.randint(12, 99)
    budget = count * price + big()
    return (f"{name} has {budget} dollars and buys {count} books that cost {price} dollars each. How many dollars "
            f"does {name} have left?", budget - count * price)


def _factory(r: random.Random, big: _Draw, small: _Draw):
    per_hour, hours = big(), small()
    broken = r.randint(1, per_hour * hours // 10)
    return (f"A factory makes {per_hour} toys every hour. It works for {hours} hours, and {broken} of the toys are "
            f"broken. How many toys are not broken?", per_hour * hours - broken)


def _boxes(r: random.Random, big: _Draw, small: _Draw):
    per_box, boxes, price = r.randint(6, 24), big() // 10 + 10, r.randint(2, 9)
    return (f"A farm packs {per_box * boxes} eggs into boxes of {per_box} eggs and sells each box for {price} "
            f"dollars. How many dollars does the farm get?", boxes * price)


def _school(r: random.Random, big: _Draw, small: _Draw):
    classes, per_class, left = small(), r.randint(21, 35), r.randint(2, 19)
    return (f"A school has {classes * per_class + left} students. It puts them into {classes} equal classes, and "
            f"{left} students are left over. How many students are in each class?", per_class)


def _marbles(r: random.Random, big: _Draw, small: _Draw):
    name, start = r.choice(_NAMES), big()
    given, packs, per_pack = r.randint(10, start // 2), small(), r.randint(12, 48)
    return (f"{name} has {start} marbles, gives {given} marbles to a friend, and then buys {packs} packs of "
            f"{per_pack} marbles. How many marbles does {name} have now?", start - given + packs * per_pack)


#: Templates by the number of arithmetic steps their answer takes.
TEMPLATES: dict[int, tuple[Callable, ...]] = {
    1: (_bakery, _distance, _spent, _crates),
    2: (_bought, _factory, _boxes, _school),
    3: (_marbles,),
}


def gsm_problems(n: int, *, seed: int = 0, digits: int = 4, steps: tuple[int, ...] = (1, 2, 3)) -> list[Problem]:
    """``n`` word problems with integer answers; the same arguments give the same problems.

    Args:
        n: how many.
        seed: the random seed.
        digits: how many digits the large quantities have (4: the arithmetic small models get wrong).
        steps: which problems to draw, by the number of operations the answer takes (1, 2 or 3);
            the templates of these kinds take turns.
    """
    check_int("n", n, minimum=0)
    if check_int("digits", digits) < 2 or digits > 9:
        raise ValueError(f"digits must be an int in [2, 9], got {digits!r}")
    if not steps or any(k not in TEMPLATES for k in steps):
        raise ValueError(f"steps must be a non-empty tuple of {sorted(TEMPLATES)}, got {steps!r}")
    r = random.Random(seed)
    templates = [t for k in sorted(set(steps)) for t in TEMPLATES[k]]

    def big() -> int:
        return r.randint(10 ** (digits - 1), 10**digits - 1)

    def small() -> int:
        return r.randint(12, 89)

    problems = []
    for i in range(n):
        template = templates[i % len(templates)]
        question, answer = template(r, big, small)
        problems.append(Problem(question, str(answer), source=f"gsm-synthetic/{template.__name__[1:]}",
                                id=f"synthetic-{seed}-{i}"))
    return problems


def load_jsonl(path: str | os.PathLike, *, question_key: str, answer: Callable[[dict], str],
               source: str = "", limit: int | None = None) -> list[Problem]:
    """Problems from a JSONL file: one object a line, with ``question_key`` and what ``answer(record)`` reads."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such file {str(path)!r}: pass the path of a local JSONL copy (nothing is "
                                f"downloaded)")
    problems = []
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            record = json.loads(line)
            if question_key not in record:
                raise KeyError(f"{path}:{line_no} has no {question_key!r} field; fields: {sorted(record)}")
            problems.append(Problem(record[question_key], answer(record), source or path.stem,
                                    str(record.get("idx", record.get("unique_id", line_no)))))
            if limit is not None and len(problems) >= limit:
                break
    return problems


def load_gsm8k(path: str | os.PathLike, *, limit: int | None = None) -> list[Problem]:
    """GSM8K from its JSONL (``test.jsonl`` of openai/grade-school-math): the answer follows ``####``."""
    def answer(record: dict) -> str:
        return record["answer"].split("####")[-1].strip().replace(",", "")

    return load_jsonl(path, question_key="question", answer=answer, source="gsm8k", limit=limit)


def load_math(path: str | os.PathLike, *, limit: int | None = None) -> list[Problem]:
    """MATH from a JSONL of ``{"problem", "solution"}`` (or ``"answer"``) records: the answer is the solution's
    last ``\\boxed{}`` (e.g. the MATH-500 split)."""
    def answer(record: dict) -> str:
        if "answer" in record:
            return str(record["answer"])
        boxed = find_boxed(record["solution"])
        if boxed is None:
            raise ValueError(f"a MATH record has no \\boxed{{}} answer in its solution: {record['solution'][:80]!r}")
        return boxed

    return load_jsonl(path, question_key="problem", answer=answer, source="math", limit=limit)


def load_champ(*, limit: int | None = None, categories: tuple[str, ...] | None = None) -> list[Problem]:
    """The 270 competition problems of CHAMP (Mao et al., 2024) from the ``champ-dataset`` package.

    Install with ``pip install 'iclr24[champ]'`` (the package is MIT-licensed; 72 MB).
    ``categories``: any of Combinatorics, Inequality, Number-Theory, Polynomial, Sequence.
    """
    spec = importlib.util.find_spec("champ_dataset")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("CHAMP ships in the champ-dataset package: pip install 'iclr24[champ]'")
    data_file = Path(spec.submodule_search_locations[0]) / "dataset_files" / "v0.json"
    with data_file.open(encoding="utf-8") as f:
        records = json.load(f)["problems"]
    problems = []
    for key, record in records.items():
        if categories is not None and record["category"] not in categories:
            continue
        problems.append(Problem(record["_text"], record["_answer"], "champ", key))
        if limit is not None and len(problems) >= limit:
            break
    return problems
