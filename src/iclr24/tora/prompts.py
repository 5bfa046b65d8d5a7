"""Few-shot prompts in ToRA's format, and the same worked examples as direct, chain-of-thought and PAL prompts.

Every style solves the same example questions, so the four methods differ only in how they
answer. Two layouts: plain text (``Question: ... Solution: ...``, for base models and HTTP
completion endpoints) and chat messages (one user/assistant turn per example, rendered by an
instruction model's own template, on which SmolLM2-135M-Instruct solved 44% of a development
set against 25% from plain text). Examples are separated by ``---``, which is also a stop string: a model that starts a
new example has finished its solution. The examples are written for this project (ToRA's own
prompts are longer GPT-4 solutions, MATH-level for ``math``).

>>> "```python" in build_prompt("tora", "gsm", "What is 2 + 2?")
True
>>> build_prompt("direct", "gsm", "What is 2 + 2?").endswith("Question: What is 2 + 2?\\nAnswer:")
True
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EXAMPLES", "STYLES", "WorkedExample", "build_messages", "build_prompt", "few_shot_prefix",
           "output_block", "tora_model_prompt"]

STYLES = ("direct", "cot", "pal", "tora")


@dataclass(frozen=True)
class WorkedExample:
    """One example, solved four ways: ``cot`` in words, ``program`` (prints the answer), ``rationale`` before the
    program and ``conclusion`` after its ``output`` (ToRA), and the ``answer``."""

    question: str
    cot: str
    rationale: str
    program: str
    output: str
    conclusion: str
    answer: str

    def solution(self, style: str) -> str:
        if style == "direct":
            return f" {self.answer}"
        if style == "cot":
            return f" {self.cot} The answer is $\\boxed{{{self.answer}}}$."
        code = f"```python\n{self.program}\n```\n"
        if style == "pal":
            return f"\n{code}"
        return f" {self.rationale}\n{code}{output_block(self.output)}\n{self.conclusion}"


EXAMPLES: dict[str, tuple[WorkedExample, ...]] = {
    "gsm": (
        WorkedExample(
            question="A bakery bakes 1245 loaves of bread a day. How many loaves does it bake in 36 days?",
            cot="It bakes 1245 loaves each day for 36 days, so 1245 * 36 = 44820 loaves.",
            rationale="I write down each number from the question and multiply.",
            program="loaves_per_day = 1245\ndays = 36\ntotal = loaves_per_day * days\nprint(total)",
            output="44820",
            conclusion="The bakery bakes $\\boxed{44820}$ loaves in 36 days.",
            answer="44820",
        ),
        WorkedExample(
            question="Maria has 3250 dollars. She buys 14 chairs that cost 85 dollars each. How much money does "
                     "she have left?",
            cot="The chairs cost 14 * 85 = 1190 dollars, so she has 3250 - 1190 = 2060 dollars left.",
            rationale="I write down each number from the question, then subtract the cost of the chairs.",
            program="money = 3250\nchairs = 14\nprice = 85\nleft = money - chairs * price\nprint(left)",
            output="2060",
            conclusion="Maria has $\\boxed{2060}$ dollars left.",
            answer="2060",
        ),
        WorkedExample(
            question="A farm packs 4536 eggs into boxes of 12 eggs. It sells each box for 3 dollars. How many "
                     "dollars does it get for all the boxes?",
            cot="There are 4536 / 12 = 378 boxes, and they sell for 378 * 3 = 1134 dollars.",
            rationale="I write down each number from the question, find the number of boxes, then the money.",
            program="eggs = 4536\nper_box = 12\nprice = 3\nboxes = eggs // per_box\nmoney = boxes * price\n"
                    "print(money)",
            output="1134",
            conclusion="The farm gets $\\boxed{1134}$ dollars.",
            answer="1134",
        ),
        WorkedExample(
            question="A library has 2370 books. It gives away 415 books and then buys 18 boxes of 25 books. How "
                     "many books does the library have now?",
            cot="After giving books away it has 2370 - 415 = 1955 books. It buys 18 * 25 = 450 books, so it has "
                "1955 + 450 = 2405 books.",
            rationale="I write down each number from the question, subtract the books given away and add the "
                      "books bought.",
            program="books = 2370\ngiven = 415\nboxes = 18\nper_box = 25\nnow = books - given + boxes * per_box\n"
                    "print(now)",
            output="2405",
            conclusion="The library has $\\boxed{2405}$ books now.",
            answer="2405",
        ),
    ),
    "math": (
        WorkedExample(
            question="Solve for $x$: $3x - 7 = 2x + 5$.",
            cot="Subtracting $2x$ from both sides gives $x - 7 = 5$, so $x = 12$.",
            rationale="I solve the linear equation with sympy.",
            program="from sympy import symbols, solve\nx = symbols('x')\nprint(solve(3*x - 7 - (2*x + 5), x))",
            output="[12]",
            conclusion="The solution is $x = \\boxed{12}$.",
            answer="12",
        ),
        WorkedExample(
            question="What is $\\frac{3}{8} + \\frac{5}{12}$? Express your answer as a common fraction.",
            cot="With the common denominator 24, $\\frac{9}{24} + \\frac{10}{24} = \\frac{19}{24}$.",
            rationale="I add the fractions exactly with sympy's Rational.",
            program="from sympy import Rational\nprint(Rational(3, 8) + Rational(5, 12))",
            output="19/24",
            conclusion="The sum is $\\boxed{\\frac{19}{24}}$.",
            answer="\\frac{19}{24}",
        ),
        WorkedExample(
            question="How many positive divisors does 360 have?",
            cot="$360 = 2^3 \\cdot 3^2 \\cdot 5$, so it has $(3+1)(2+1)(1+1) = 24$ divisors.",
            rationale="I count the divisors with sympy.",
            program="from sympy import divisor_count\nprint(divisor_count(360))",
            output="24",
            conclusion="360 has $\\boxed{24}$ positive divisors.",
            answer="24",
        ),
    ),
}

_INSTRUCTIONS = {
    "direct": "Answer each question with the final number only.",
    "cot": "Solve each question step by step and put the final answer in \\boxed{}.",
    "pal": "Solve each question with a Python program that prints the answer.",
    "tora": "Solve each question by reasoning and Python code together: write a short rationale, a Python program "
            "that prints the result, read its output, and state the final answer in \\boxed{}.",
}


def _resolve(style: str, examples: str | tuple[WorkedExample, ...]) -> tuple[WorkedExample, ...]:
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}, got {style!r}")
    if isinstance(examples, str):
        if examples not in EXAMPLES:
            raise ValueError(f"examples must be one of {sorted(EXAMPLES)} or a tuple of WorkedExample, "
                             f"got {examples!r}")
        return EXAMPLES[examples]
    if not all(isinstance(ex, WorkedExample) for ex in examples):
        raise TypeError("examples must be a tuple of WorkedExample")
    return examples


def few_shot_prefix(style: str, examples: str | tuple[WorkedExample, ...] = "gsm") -> str:
    """The instructions and worked examples of ``style`` as plain text, ending where the next question starts."""
    label = "Answer:" if style == "direct" else "Solution:"
    shots = [f"Question: {ex.question}\n{label}{ex.solution(style)}" for ex in _resolve(style, examples)]
    return _INSTRUCTIONS[style] + "\n\n" + "".join(f"{shot}\n\n---\n\n" for shot in shots)


def build_prompt(style: str, examples: str | tuple[WorkedExample, ...], question: str) -> str:
    """The plain-text prompt for ``question``: :func:`few_shot_prefix`, then ``Question: ...`` and the label."""
    label = "Answer:" if style == "direct" else "Solution:"
    return f"{few_shot_prefix(style, examples)}Question: {question.strip()}\n{label}"


def build_messages(style: str, examples: str | tuple[WorkedExample, ...], question: str, *,
                   tool_turns: bool = False) -> list[dict[str, str]]:
    """The chat prompt for ``question``: the instructions as the system message, each example as a user turn
    and an assistant turn, then the question.

    ``tool_turns``: a program's output comes back as a user turn of its own (assistant: rationale and
    program; user: the output block; assistant: the rest), the layout of a chat server that cannot
    continue an assistant message, where :class:`~iclr24.tora.ToRASolver` sends each output that way.
    """
    shots = _resolve(style, examples)
    messages = [{"role": "system", "content": _INSTRUCTIONS[style]}]
    for ex in shots:
        messages.append({"role": "user", "content": ex.question})
        solution = ex.solution(style).strip()
        if tool_turns and OUTPUT_OPEN in solution:
            before, rest = solution.split(OUTPUT_OPEN, 1)
            output, after = rest.split("```", 1)
            messages += [{"role": "assistant", "content": before.rstrip()},
                         {"role": "user", "content": output_block(output.strip("\n"))}]
            solution = after.strip()
        messages.append({"role": "assistant", "content": solution})
    return messages + [{"role": "user", "content": question.strip()}]


OUTPUT_OPEN = "```output"


def output_block(text: str) -> str:
    """A program's output as the model reads it: ToRA's ```` ```output ```` block."""
    return f"{OUTPUT_OPEN}\n{text}\n```"


def tora_model_prompt(question: str) -> str:
    """The zero-shot format the released ToRA models were trained on, for ``ToRASolver(prompt=tora_model_prompt)``
    with a ToRA checkpoint (``--llm hf:/models/tora-code-7b``).

    >>> tora_model_prompt("What is 2 + 2?")
    '<|user|>\\nWhat is 2 + 2?\\n<|assistant|>\\n'
    """
    return f"<|user|>\n{question.strip()}\n<|assistant|>\n"
