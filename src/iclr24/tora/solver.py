"""ToRA's tool-integrated reasoning loop (Gou et al., ICLR 2024, Sec. 2.2 and Fig. 2), and its baselines.

A trajectory interleaves rationale r_i, program a_i and program output o_i:

    tau = r_1 a_1 o_1 ... r_{n-1} a_{n-1} o_{n-1} r_n

Each round the model continues the prompt plus the trajectory so far until it either states
an answer (``\\boxed{}``), or closes a program, which is run and whose output is appended in
a ```` ```output ```` block before the next round. After ``max_tool_rounds`` rounds the loop
stops with "Reach max function call limit.". The graded answer is read from what the model wrote after
its last program output (``extraction="model_text"``), never from what a program printed;
``extraction="official"`` reads the whole solution as ToRA's evaluation does. The baselines share the class and
the API:
:class:`PALSolver` (one program, its output is the answer), :class:`CoTSolver` (rationale
only) and :class:`DirectSolver` (the answer alone).

    from iclr24.llm import get_model
    from iclr24.tora import ToRASolver
    solver = ToRASolver(get_model(), prompt="gsm")
    trajectory = solver.solve("A crate holds 1296 apples. How many apples are in 37 crates?")
    trajectory.answer, trajectory.programs, trajectory.outputs
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from iclr24.core.checks import check_int
from iclr24.llm.base import format_chat, generate_batch
from iclr24.tora.answers import EXTRACTION_MODES, extract_answer, find_boxed, is_equivalent
from iclr24.tora.executor import Executor, SandboxExecutor, ToolOutput, extract_program
from iclr24.tora.prompts import WorkedExample, build_messages, build_prompt, output_block

__all__ = ["CoTSolver", "DirectSolver", "PALSolver", "Round", "ToRASolver", "Trajectory", "Vote", "majority_vote",
           "with_output"]

#: ToRA's stop strings: end of sequence, the example separator, and the start of a program's output.
STOP = ("</s>", "---", "```output")
#: Chain of thought also stops at a blank line, as in ToRA's vLLM inference script.
COT_STOP = (*STOP, "\n\n")
LIMIT_NOTE = "\nReach max function call limit."

PromptSpec = str | tuple[WorkedExample, ...] | Callable[[str], str]


@dataclass(frozen=True)
class Round:
    """One generation: the ``text`` the model wrote, the ``program`` it closed with (if run) and its ``output``."""

    text: str
    program: str | None = None
    output: ToolOutput | None = None
    finish_reason: str = "stop"
    completion_tokens: int = 0


@dataclass
class Trajectory:
    """A solved question: every round, the solution text the model saw, and the answer read from it.

    ``finish`` is ``"answer"`` (an answer was stated or no program was written), ``"length"``
    (the token limit cut a round short) or ``"max_rounds"`` (the tool-call limit was reached).
    ``extraction`` is how ``answer`` was read (:data:`~iclr24.tora.answers.EXTRACTION_MODES`).
    """

    question: str
    method: str
    rounds: list[Round] = field(default_factory=list)
    solution: str = ""
    answer: str | None = None
    finish: str = "answer"
    extraction: str = "model_text"

    @property
    def final_text(self) -> str:
        """What the model wrote after its last program output: the last round's text when that round ran no
        program, else ``""`` (a trajectory that ended on a program run, at the tool-call limit, states nothing
        after it; the limit note is not the model's)."""
        if not self.rounds or self.rounds[-1].output is not None:
            return ""
        return self.rounds[-1].text

    @property
    def programs(self) -> list[str]:
        return [r.program for r in self.rounds if r.program is not None]

    @property
    def outputs(self) -> list[ToolOutput]:
        return [r.output for r in self.rounds if r.output is not None]

    @property
    def completion_tokens(self) -> int:
        return sum(r.completion_tokens for r in self.rounds)

    def is_correct(self, reference: str, *, mode: str = "strict") -> bool:
        """Whether the answer grades as ``reference``; ``mode="official"`` grades as ToRA's own grader."""
        return is_equivalent(self.answer, reference, mode=mode)

    def to_dict(self) -> dict:
        return {"question": self.question, "method": self.method, "answer": self.answer, "finish": self.finish,
                "extraction": self.extraction, "solution": self.solution, "completion_tokens": self.completion_tokens,
                "rounds": [{"text": r.text, "program": r.program, "finish_reason": r.finish_reason,
                            "output": None if r.output is None else r.output.text,
                            "output_ok": None if r.output is None else r.output.ok,
                            "isolation": None if r.output is None else r.output.isolation} for r in self.rounds]}


@dataclass(frozen=True)
class Vote:
    """Self-consistency: the ``answer`` most samples agree on, its share of the votes, and the samples."""

    question: str
    answer: str | None
    agreement: float
    trajectories: list[Trajectory]


class ToRASolver:
    """Tool-integrated reasoning: rationale, program, output, repeated until an answer (ToRA's inference loop).

    Args:
        llm: any :class:`iclr24.llm.LanguageModel`; batches decode together where the backend can.
        prompt: ``"gsm"`` or ``"math"`` (the bundled worked examples), a tuple of
            :class:`~iclr24.tora.prompts.WorkedExample`, or a function from question to prompt text.
        max_tool_rounds: generation rounds that may end in a program (ToRA: 4).
        max_tokens: new tokens per round (ToRA: 1024; a few hundred suffice for GSM-style problems).
        executor: runs a program and returns a :class:`~iclr24.tora.executor.ToolOutput`; default a
            :class:`~iclr24.tora.executor.SandboxExecutor` (5 s, no network, memory-limited).
        chat: lay the examples out as chat turns (True), as plain text (False), or chat where the backend
            takes it (None, the default). A local model renders its template and continues the text; a
            chat server (``capabilities.chat_template`` without ``format_chat``, e.g. the openai backend)
            gets messages, each program's output coming back as a user turn.
        extraction: how the graded answer is read. ``"model_text"`` (the default): from what the model wrote
            after its last program output (:attr:`Trajectory.final_text`), never from what a program printed.
            ``"official"``: from the whole solution as ToRA's evaluation reads it, so a program's output decides
            when the model states no answer of its own, and a program printing ``\\boxed{999}`` decides even
            then (issue #59).

    Example:
        >>> from iclr24.llm import get_model
        >>> llm = get_model("scripted", outputs=["Multiply.\\n```python\\nprint(12 * 34)\\n```\\n",
        ...                                      "So it is $\\\\boxed{408}$."])
        >>> ToRASolver(llm).solve("What is 12 * 34?").answer
        '408'
    """

    method = "tora"
    style = "tora"
    default_stop = STOP
    runs_programs = True
    default_rounds = 4
    limit_note = LIMIT_NOTE
    exhausted_finish = "max_rounds"

    def __init__(self, llm, *, prompt: PromptSpec = "gsm", max_tool_rounds: int | None = None,
                 max_tokens: int = 512, executor: Executor | None = None, stop: Sequence[str] | None = None,
                 chat: bool | None = None, extraction: str = "model_text") -> None:
        if not callable(getattr(llm, "generate", None)):
            raise TypeError(f"llm must be a LanguageModel with a generate method, got {type(llm).__name__}")
        rounds = self.default_rounds if max_tool_rounds is None else max_tool_rounds
        check_int("max_tool_rounds", rounds, minimum=1)
        check_int("max_tokens", max_tokens, minimum=1)
        if not (callable(prompt) or isinstance(prompt, (str, tuple))):
            raise TypeError(f"prompt must be 'gsm', 'math', a tuple of WorkedExample or a function, got {prompt!r}")
        if isinstance(prompt, str):
            build_prompt(self.style, prompt, "")  # rejects an unknown example set now, not mid-run
        if extraction not in EXTRACTION_MODES:
            raise ValueError(f"extraction must be one of {EXTRACTION_MODES}, got {extraction!r}")
        self.extraction = extraction
        self.llm, self.prompt, self.max_tool_rounds, self.max_tokens = llm, prompt, rounds, max_tokens
        self.executor = executor if executor is not None else SandboxExecutor()
        self.stop = tuple(self.default_stop if stop is None else stop)
        renders = not callable(prompt) and format_chat(llm, build_messages(self.style, prompt, "?")) is not None
        takes_messages = bool(getattr(getattr(llm, "capabilities", None), "chat_template", False)) \
            and not callable(getattr(llm, "format_chat", None))
        if chat and not callable(prompt) and not (renders or takes_messages):
            raise ValueError(f"chat=True needs a backend that renders chat templates or takes chat messages; "
                             f"{getattr(llm, 'name', llm)!r} does neither: pass chat=False")
        self.chat = chat
        #: "text" (continued as written), "rendered" (a local chat template, continued as text) or "messages"
        self.layout = "text" if chat is False or callable(prompt) else \
            "rendered" if renders else "messages" if takes_messages else "text"

    def prompt_for(self, question: str) -> str | list[dict[str, str]]:
        """What the model continues for ``question``: text, or chat messages when ``layout`` is ``"messages"``."""
        if callable(self.prompt):
            return self.prompt(question)
        if self.layout == "messages":
            return build_messages(self.style, self.prompt, question, tool_turns=True)
        if self.layout == "rendered":
            return format_chat(self.llm, build_messages(self.style, self.prompt, question))
        return build_prompt(self.style, self.prompt, question)

    def _round_prompt(self, base, trajectory: Trajectory):
        """The prompt of the next round: the text so far, or the chat with each program's output as a user turn."""
        if self.layout != "messages":
            return base + trajectory.solution
        messages = list(base)
        for r in trajectory.rounds:
            messages.append({"role": "assistant", "content": r.text.rstrip()})
            if r.output is not None:
                messages.append({"role": "user", "content": output_block(r.output.text)})
        return messages

    def solve(self, question: str, *, temperature: float = 0.0, seed: int | None = None) -> Trajectory:
        """One trajectory for ``question``."""
        return self.solve_batch([question], temperature=temperature, seed=seed)[0]

    def solve_batch(self, questions: Sequence[str], *, temperature: float = 0.0, seed: int | None = None,
                    prefixes: Sequence[str] | None = None) -> list[Trajectory]:
        """One trajectory per question; the questions still going decode together each round.

        ``prefixes``: a partial solution per question to continue from (output space shaping lets a
        teacher complete the prefix of a policy's invalid trajectory); the rounds are counted afresh.
        """
        questions = _check_questions(questions)
        if prefixes is not None and len(prefixes) != len(questions):
            raise ValueError(f"prefixes must hold one string per question ({len(questions)}), got {len(prefixes)}")
        if prefixes is not None and self.layout == "messages":
            raise ValueError("prefixes continue a partial solution as text; a chat server cannot continue an "
                             "assistant message: build the solver with chat=False")
        trajectories = [Trajectory(q, self.method, solution=prefixes[i] if prefixes else "")
                        for i, q in enumerate(questions)]
        prompts = [self.prompt_for(q) for q in questions]
        active = list(range(len(questions)))
        for round_index in range(self.max_tool_rounds):
            if not active:
                break
            completions = generate_batch(
                self.llm, [self._round_prompt(prompts[i], trajectories[i]) for i in active],
                max_tokens=self.max_tokens, stop=self.stop, temperature=temperature,
                seed=None if seed is None else seed + 1000 * round_index)
            still_active = []
            for i, completion in zip(active, completions):
                t, text = trajectories[i], completion.text
                program = self._program_to_run(text, completion.finish_reason)
                if program is None:
                    t.rounds.append(Round(text, None, None, completion.finish_reason, completion.completion_tokens))
                    t.solution += text
                    t.finish = "length" if completion.finish_reason == "length" else "answer"
                    continue
                output = self.executor(program)  # the last program in this round's text
                t.rounds.append(Round(text, program, output, completion.finish_reason, completion.completion_tokens))
                t.solution += with_output(text, output)
                still_active.append(i)
            active = still_active
        for i in active:  # rounds exhausted while still calling tools
            trajectories[i].finish = self.exhausted_finish
            trajectories[i].solution += self.limit_note
        for t in trajectories:
            t.answer, t.extraction = self.read_answer(t), self.extraction
        return trajectories

    def read_answer(self, trajectory: Trajectory, extraction: str | None = None) -> str | None:
        """The answer ``trajectory`` states, read in ``extraction`` mode (default: this solver's)."""
        extraction = self.extraction if extraction is None else extraction
        if extraction not in EXTRACTION_MODES:
            raise ValueError(f"extraction must be one of {EXTRACTION_MODES}, got {extraction!r}")
        if extraction == "official":
            return extract_answer(trajectory.solution, mode="official")
        return extract_answer(trajectory.final_text)

    def solve_many(self, questions: Sequence[str], *, n_samples: int = 1, temperature: float | None = None,
                   seed: int = 0, vote: str | Callable[[list[str | None]], tuple[str | None, int]] = "majority",
                   ) -> list[Vote]:
        """Self-consistency: ``n_samples`` trajectories per question and the answer they vote for.

        ``temperature`` defaults to 0 for one sample and 0.6 for several (greedy samples would all agree).
        ``vote``: ``"majority"`` (:func:`majority_vote`) or a function from the samples' answers to
        ``(answer, votes)``.
        """
        if vote == "majority":
            vote = majority_vote
        elif not callable(vote):
            raise ValueError(f"vote must be 'majority' or a function of the answers, got {vote!r}")
        check_int("n_samples", n_samples, minimum=1)
        temperature = (0.0 if n_samples == 1 else 0.6) if temperature is None else temperature
        if n_samples > 1 and temperature == 0:
            raise ValueError("n_samples > 1 needs temperature > 0: greedy samples are identical")
        questions = _check_questions(questions)
        flat = self.solve_batch([q for q in questions for _ in range(n_samples)], temperature=temperature, seed=seed)
        votes = []
        for k, question in enumerate(questions):
            samples = flat[k * n_samples:(k + 1) * n_samples]
            answer, count = vote([t.answer for t in samples])
            votes.append(Vote(question, answer, count / n_samples, samples))
        return votes

    def _program_to_run(self, text: str, finish_reason: str) -> str | None:
        """The program to run after this round, or None when the round ends the trajectory: it states a boxed
        answer, was cut by the token limit, or does not end with a closed program (ToRA's rule)."""
        if not self.runs_programs or finish_reason == "length" or find_boxed(text) is not None:
            return None
        if not text.rstrip().endswith("```"):
            return None
        return extract_program(text)

    def __repr__(self) -> str:
        prompt = self.prompt if isinstance(self.prompt, str) else "custom"
        return (f"{type(self).__name__}(llm={getattr(self.llm, 'name', '?')!r}, prompt={prompt!r}, "
                f"max_tool_rounds={self.max_tool_rounds}, max_tokens={self.max_tokens}, "
                f"extraction={self.extraction!r})")


class PALSolver(ToRASolver):
    """Program-aided language model (Gao et al., 2023): one program, whose printed output is the answer.

    In either extraction mode the answer is what the program printed (None when it failed or never ran), as
    ToRA's evaluation of PAL takes what the executed program returns: the program is how PAL states its answer.
    """

    method = style = "pal"
    default_rounds = 1
    limit_note = ""  # the program's output is the answer: running it is how PAL ends
    exhausted_finish = "answer"

    def read_answer(self, trajectory: Trajectory, extraction: str | None = None) -> str | None:
        if extraction is not None and extraction not in EXTRACTION_MODES:
            raise ValueError(f"extraction must be one of {EXTRACTION_MODES}, got {extraction!r}")
        last = trajectory.outputs[-1] if trajectory.outputs else None
        if last is None or not last.ok:  # an error message is no answer
            return None
        return last.text.strip() or None


class CoTSolver(ToRASolver):
    """Chain of thought: a rationale in words ending in ``\\boxed{}``; no program is ever run."""

    method = style = "cot"
    default_stop = COT_STOP
    runs_programs = False
    default_rounds = 1


class DirectSolver(CoTSolver):
    """The answer alone, with no reasoning: stops at the end of the line."""

    method = style = "direct"

    default_stop = (*STOP, "\n")

    def __init__(self, llm, *, prompt: PromptSpec = "gsm", max_tokens: int = 24, **kwargs) -> None:
        super().__init__(llm, prompt=prompt, max_tokens=max_tokens, **kwargs)


def with_output(text: str, output: ToolOutput) -> str:
    """A round's text followed by its program's output block, as the next round reads it."""
    return text.rstrip() + "\n" + output_block(output.text) + "\n"


def majority_vote(answers: Sequence[str | None]) -> tuple[str | None, int]:
    """The answer most entries agree with (grouped by :func:`is_equivalent`; ties go to the first seen) and its
    count; ``(None, 0)`` when none states an answer.

    >>> majority_vote(["1/2", "0.5", "3", None])
    ('1/2', 2)
    """
    if isinstance(answers, str):
        raise TypeError("answers must be a sequence of answers (str or None), got a single string")
    groups: list[list[str]] = []
    for answer in answers:
        if answer is None:
            continue
        for group in groups:
            if is_equivalent(answer, group[0], symbolic=False):
                group.append(answer)
                break
        else:
            groups.append([answer])
    if not groups:
        return None, 0
    best = max(groups, key=len)  # max keeps the first of equal lengths
    return best[0], len(best)


def _check_questions(questions: Sequence[str]) -> list[str]:
    if isinstance(questions, str):
        raise TypeError("questions must be a sequence of strings, got a single string; use solve() for one")
    questions = list(questions)
    for i, q in enumerate(questions):
        if not isinstance(q, str) or not q.strip():
            raise ValueError(f"questions[{i}] must be a non-empty string, got {q!r}")
    return questions
