"""Math word problems: a seeded generator of GSM-style problems with exact answers, and loaders for local
GSM8K / MATH JSONL files and the CHAMP dataset (extra ``champ``).

Nothing is downloaded. GSM8K and MATH are read from a path you give; CHAMP ships in the
``champ-dataset`` wheel (MIT licence) and is read from the installed package.

>>> problems = gsm_problems(3, seed=0)
>>> len(problems), problems[0].answer == str(int(problems[0].answer))
(3, True)
"""

from __future__ import annotations

import ast
import importlib.util
import json
import operator
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from iclr24.core.checks import check_int
from iclr24.tora.answers import find_boxed

__all__ = ["TEMPLATES", "Problem", "gsm_problems", "load_champ", "load_gsm8k", "load_jsonl", "load_math",
           "template_name"]


@dataclass(frozen=True)
class Problem:
    """A question, its reference ``answer`` (a string: numbers, fractions or LaTeX) and where it came from.

    ``program``: for a generated problem, the reference program of thought, in the worked examples' style (each
    number of the question named, then the computation, then ``print``), whose output is ``answer``; "" for a
    problem read from a file.
    """

    question: str
    answer: str
    source: str = ""
    id: str = ""
    program: str = ""


def _exact_division(a: int, b: int) -> int:
    if b == 0 or a % b:
        raise ValueError(f"a template divided {a} by {b}, which leaves a remainder: its problem has no integer answer")
    return a // b


_OPERATIONS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: _exact_division}


def _evaluate(node: ast.AST, quantities: dict[str, int]) -> int:
    """The value of an arithmetic expression over named integer quantities (+, -, *, exact //)."""
    if isinstance(node, ast.Name):
        return quantities[node.id]
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATIONS:
        return _OPERATIONS[type(node.op)](_evaluate(node.left, quantities), _evaluate(node.right, quantities))
    raise ValueError(f"a template's expression may use names, integers, +, -, * and //; got {ast.dump(node)}")


@dataclass(frozen=True)
class _Story:
    """What a template draws: the question, the quantities a solver writes down (by name, in the question's
    order; a unit factor such as ``minutes_per_hour = 60`` may go unsaid) and the expression of the answer."""

    question: str
    quantities: dict[str, int]
    expression: str

    @property
    def answer(self) -> int:
        return _evaluate(ast.parse(self.expression, mode="eval").body, self.quantities)

    @property
    def program(self) -> str:
        lines = [f"{name} = {value}" for name, value in self.quantities.items()]
        return "\n".join([*lines, f"answer = {self.expression}", "print(answer)"])


_NAMES = ("Ava", "Ben", "Chloe", "David", "Emma", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Kira", "Liam")
_Draw = Callable[[], int]
_Template = Callable[[random.Random, _Draw, _Draw], _Story]

# Templates: each a story structure and the operations its answer takes. ``big()`` draws a number of `digits`
# digits, ``small()`` one in [12, 89]; a divided total is drawn as a product, so every division is exact.


# One-step problems: a single operation on a large number; they take turns: *, +, -, //.
def _bakery(r, big, small):
    per_day, days = big(), small()
    return _Story(f"A bakery bakes {per_day} loaves of bread every day. How many loaves does it bake in {days} days?",
                  {"loaves_per_day": per_day, "days": days}, "loaves_per_day * days")


def _distance(r, big, small):
    monday, tuesday = big(), big()
    return _Story(f"A truck drives {monday} kilometers on Monday and {tuesday} kilometers on Tuesday. How many "
                  f"kilometers does it drive on the two days?", {"monday_km": monday, "tuesday_km": tuesday},
                  "monday_km + tuesday_km")


def _spent(r, big, small):
    name, spent = r.choice(_NAMES), big()
    budget = spent + big()
    return _Story(f"{name} has {budget} dollars and spends {spent} dollars on a bike. How many dollars are left?",
                  {"budget": budget, "spent": spent}, "budget - spent")


def _crates(r, big, small):
    per_crate, crates = small(), big() // 10 + 10
    return _Story(f"A warehouse packs {per_crate * crates} apples into crates of {per_crate} apples. How many crates "
                  f"does it fill?", {"apples": per_crate * crates, "per_crate": per_crate}, "apples // per_crate")


def _field_area(r, big, small):
    length, width = big(), small()
    return _Story(f"A rectangular field is {length} meters long and {width} meters wide. What is its area in square "
                  f"meters?", {"length": length, "width": width}, "length * width")


def _town_population(r, big, small):
    people, arrived = big(), big()
    return _Story(f"A town had {people} people. This year {arrived} more people moved in. How many people live in "
                  f"the town now?", {"people": people, "arrived": arrived}, "people + arrived")


def _change(r, big, small):
    name, price = r.choice(_NAMES), big()
    note = 10 ** (len(str(price)) - 1)
    paid = (price // note + 1) * note  # the next round amount above the price
    return _Story(f"{name} buys a laptop for {price} dollars and pays with {paid} dollars. How many dollars of "
                  f"change does {name} get back?", {"price": price, "paid": paid}, "paid - price")


def _sharing(r, big, small):
    name, friends, each = r.choice(_NAMES), small(), big() // 10 + 10
    return _Story(f"{name} shares {friends * each} stickers equally among {friends} friends. How many stickers does "
                  f"each friend get?", {"stickers": friends * each, "friends": friends}, "stickers // friends")


def _train_speed(r, big, small):
    speed, minutes = big(), small()
    return _Story(f"A train travels {speed} meters every minute. How many meters does it travel in {minutes} "
                  f"minutes?", {"meters_per_minute": speed, "minutes": minutes}, "meters_per_minute * minutes")


def _tower_height(r, big, small):
    tower, antenna = big(), small()
    return _Story(f"A tower is {tower} centimeters tall. An antenna {antenna} centimeters long is put on its top. How "
                  f"many centimeters tall is the tower with the antenna?", {"tower": tower, "antenna": antenna},
                  "tower + antenna")


def _pages_left(r, big, small):
    name, pages = r.choice(_NAMES), big()
    read = r.randint(pages // 10, pages - 1)
    return _Story(f"A book has {pages} pages. {name} has read {read} of them. How many pages are left to read?",
                  {"pages": pages, "read": read}, "pages - read")


def _print_time(r, big, small):
    per_minute, minutes = small(), big() // 10 + 10
    return _Story(f"A printer prints {per_minute} pages every minute. How many minutes does it take to print "
                  f"{per_minute * minutes} pages?", {"pages_per_minute": per_minute, "pages": per_minute * minutes},
                  "pages // pages_per_minute")


def _hours_to_minutes(r, big, small):
    hours = big()
    return _Story(f"A machine runs for {hours} hours without stopping. How many minutes does it run?",
                  {"hours": hours, "minutes_per_hour": 60}, "hours * minutes_per_hour")


def _combined_weight(r, big, small):
    truck, sand = big(), big()
    return _Story(f"An empty truck weighs {truck} kilograms. It is loaded with {sand} kilograms of sand. How many "
                  f"kilograms do the truck and the sand weigh together?", {"truck": truck, "sand": sand},
                  "truck + sand")


def _points_difference(r, big, small):
    blue = big()
    red = blue + r.randint(10, blue)
    return _Story(f"The red team scored {red} points this season and the blue team scored {blue} points. How many "
                  f"more points did the red team score?", {"red": red, "blue": blue}, "red - blue")


def _minutes_to_hours(r, big, small):
    hours = big() // 10 + 10
    return _Story(f"A music festival lasts {60 * hours} minutes. How many hours does it last?",
                  {"minutes": 60 * hours, "minutes_per_hour": 60}, "minutes // minutes_per_hour")


def _stadium_seats(r, big, small):
    sections, seats = small(), big()
    return _Story(f"A stadium has {sections} sections with {seats} seats in each section. How many seats does the "
                  f"stadium have?", {"sections": sections, "seats_per_section": seats}, "sections * seats_per_section")


def _anniversary_year(r, big, small):
    year, years = big(), small()
    return _Story(f"A bridge was finished in the year {year}. In which year will the bridge be {years} years old?",
                  {"year_finished": year, "years": years}, "year_finished + years")


def _sibling_age(r, big, small):
    name, age = r.choice(_NAMES), big()
    younger = r.randint(age // 10, age - 1)
    return _Story(f"{name} is {age} days old. {name}'s cousin is {younger} days younger. How many days old is the "
                  f"cousin?", {"age": age, "younger_by": younger}, "age - younger_by")


def _unit_price(r, big, small):
    chairs, price = small(), big() // 10 + 10
    return _Story(f"{chairs} identical chairs cost {chairs * price} dollars in all. How many dollars does one chair "
                  f"cost?", {"chairs": chairs, "total_cost": chairs * price}, "total_cost // chairs")


def _times_as_many(r, big, small):
    books, times = big(), r.randint(3, 12)
    return _Story(f"A small library has {books} books. The city library has {times} times as many books. How many "
                  f"books does the city library have?", {"books": books, "times": times}, "books * times")


def _raffle_tickets(r, big, small):
    last_year = big()
    more = r.randint(10, last_year)
    return _Story(f"Last year a school sold {last_year} raffle tickets. This year it sold {more} more tickets than "
                  f"last year. How many tickets did it sell this year?", {"last_year": last_year, "more": more},
                  "last_year + more")


def _fewer_ducks(r, big, small):
    chickens = big()
    fewer = r.randint(chickens // 10, chickens - 1)
    return _Story(f"A farm has {chickens} chickens. It has {fewer} fewer ducks than chickens. How many ducks does the "
                  f"farm have?", {"chickens": chickens, "fewer": fewer}, "chickens - fewer")


def _average_speed(r, big, small):
    hours, speed = small(), big() // 10 + 10
    return _Story(f"A ship sails {hours * speed} kilometers in {hours} hours at a steady speed. How many kilometers "
                  f"does it sail each hour?", {"distance_km": hours * speed, "hours": hours}, "distance_km // hours")


# Two-step problems.
def _bought(r, big, small):
    name, count, price = r.choice(_NAMES), small(), r.randint(12, 99)
    budget = count * price + big()
    return _Story(f"{name} has {budget} dollars and buys {count} books that cost {price} dollars each. How many "
                  f"dollars does {name} have left?", {"money": budget, "books": count, "price": price},
                  "money - books * price")


def _factory(r, big, small):
    per_hour, hours = big(), small()
    broken = r.randint(1, per_hour * hours // 10)
    return _Story(f"A factory makes {per_hour} toys every hour. It works for {hours} hours, and {broken} of the toys "
                  f"are broken. How many toys are not broken?", {"toys_per_hour": per_hour, "hours": hours,
                                                                 "broken": broken}, "toys_per_hour * hours - broken")


def _boxes(r, big, small):
    per_box, boxes, price = r.randint(6, 24), big() // 10 + 10, r.randint(2, 9)
    return _Story(f"A farm packs {per_box * boxes} eggs into boxes of {per_box} eggs and sells each box for {price} "
                  f"dollars. How many dollars does the farm get?", {"eggs": per_box * boxes, "per_box": per_box,
                                                                    "price": price}, "eggs // per_box * price")


def _school(r, big, small):
    classes, per_class, left = small(), r.randint(21, 35), r.randint(2, 19)
    return _Story(f"A school has {classes * per_class + left} students. It puts them into {classes} equal classes, "
                  f"and {left} students are left over. How many students are in each class?",
                  {"students": classes * per_class + left, "classes": classes, "left_over": left},
                  "(students - left_over) // classes")


def _percent_sold(r, big, small):
    shirts, percent = (big() // 20 + 1) * 20, 5 * r.randint(1, 19)  # a multiple of 20 times one of 5: exact
    return _Story(f"A shop has {shirts} shirts and sells {percent} percent of them. How many shirts does it sell?",
                  {"shirts": shirts, "percent": percent}, "shirts * percent // 100")


def _pool_time(r, big, small):
    per_minute, minutes, setup = small(), big() // 10 + 10, r.randint(5, 45)
    return _Story(f"A pump fills a {per_minute * minutes}-liter pool with {per_minute} liters every minute, after "
                  f"{setup} minutes of setting up. How many minutes does the whole job take?",
                  {"liters": per_minute * minutes, "liters_per_minute": per_minute, "setup_minutes": setup},
                  "liters // liters_per_minute + setup_minutes")


def _garden_left(r, big, small):
    length, width = big(), small()
    shed = r.randint(1, length * width // 10)
    return _Story(f"A garden is {length} meters long and {width} meters wide. A shed covers {shed} square meters of "
                  f"it. How many square meters of the garden are not covered?",
                  {"length": length, "width": width, "shed_area": shed}, "length * width - shed_area")


def _average_run(r, big, small):
    name, average = r.choice(_NAMES), big()
    gap = r.randint(1, average // 2)
    return _Story(f"{name} runs {average + gap} meters on Monday and {average - gap} meters on Tuesday. How many "
                  f"meters does {name} run per day on average over the 2 days?",
                  {"monday": average + gap, "tuesday": average - gap, "days": 2}, "(monday + tuesday) // days")


# Three-step problems.
def _marbles(r, big, small):
    name, start = r.choice(_NAMES), big()
    given, packs, per_pack = r.randint(start // 10, start // 2), small(), r.randint(12, 48)
    return _Story(f"{name} has {start} marbles, gives {given} marbles to a friend, and then buys {packs} packs of "
                  f"{per_pack} marbles. How many marbles does {name} have now?",
                  {"marbles": start, "given": given, "packs": packs, "per_pack": per_pack},
                  "marbles - given + packs * per_pack")


def _shopping(r, big, small):
    name, chairs, chair_price = r.choice(_NAMES), small(), r.randint(12, 99)
    tables, table_price = r.randint(2, 9), big()
    return _Story(f"{name} buys {chairs} chairs at {chair_price} dollars each and {tables} tables at {table_price} "
                  f"dollars each. How many dollars does {name} spend?",
                  {"chairs": chairs, "chair_price": chair_price, "tables": tables, "table_price": table_price},
                  "chairs * chair_price + tables * table_price")


def _payroll(r, big, small):
    salary, workers, months, bonus = big(), r.randint(3, 9), r.randint(2, 12), big()
    return _Story(f"A company pays {salary} dollars a month to each of its {workers} workers. After {months} months "
                  f"it also pays a bonus of {bonus} dollars in all. How many dollars has it paid?",
                  {"salary": salary, "workers": workers, "months": months, "bonus": bonus},
                  "salary * workers * months + bonus")


#: Templates by the number of arithmetic steps their answer takes. A problem's template (``Problem.source``,
#: ``gsm-synthetic/<name>``) is its independent unit: problems of one template share their wording and operation.
TEMPLATES: dict[int, tuple[_Template, ...]] = {
    1: (_bakery, _distance, _spent, _crates, _field_area, _town_population, _change, _sharing,
        _train_speed, _tower_height, _pages_left, _print_time, _hours_to_minutes, _combined_weight,
        _points_difference, _minutes_to_hours, _stadium_seats, _anniversary_year, _sibling_age, _unit_price,
        _times_as_many, _raffle_tickets, _fewer_ducks, _average_speed),
    2: (_bought, _factory, _boxes, _school, _percent_sold, _pool_time, _garden_left, _average_run),
    3: (_marbles, _shopping, _payroll),
}


def template_name(template: _Template) -> str:
    """A template's label: its function's name, e.g. ``"bakery"`` (``Problem.source`` is ``gsm-synthetic/bakery``)."""
    return template.__name__.removeprefix("_")


def gsm_problems(n: int, *, seed: int = 0, digits: int = 4, steps: tuple[int, ...] = (1, 2, 3)) -> list[Problem]:
    """``n`` word problems with integer answers, each with the reference program that computes its answer; the
    same arguments give the same problems.

    Args:
        n: how many.
        seed: the random seed. It draws the numbers and names, never the templates: problem ``i`` comes from the
            ``i``-th of the chosen templates in turn (so ``n`` >= their number covers every one).
        digits: how many digits the large quantities have (4: the arithmetic small models get wrong).
        steps: which problems to draw, by the number of operations the answer takes (1: 24 templates, 2: 8,
            3: 3); the templates of these kinds take turns.
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
        story = template(r, big, small)
        problems.append(Problem(story.question, str(story.answer), source=f"gsm-synthetic/{template_name(template)}",
                                id=f"synthetic-{seed}-{i}", program=story.program))
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
