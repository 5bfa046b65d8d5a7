"""L2MAC's control loop (Holt et al., ICLR 2024, Section 3 and Algorithm 1), and the single-context baseline.

1. The instruction registry: the model writes the plan (``write_plan``), a list of steps.
2. Each step runs in a fresh context: the system message, the task, and the control unit's
   message with the step, the files so far and the previous step's summary.
3. The model answers with tool calls on the file store (:mod:`iclr24.l2mac.tools`); after each,
   the control unit asks whether the step is done.
4. ``step_complete`` triggers the check (syntax of every file, every test, in the sandbox): a pass
   asks for a one-or-two sentence summary, which the next step receives; a failure feeds the
   errors back to be fixed.
5. Context overflow: drop the step's oldest exchanges until the reply fits, ask for a two-sentence
   summary, and restart the step with it (at most ``max_retries_per_step`` times).
6. Cycle detection: when the last messages repeat, the temperature rises by 0.4 (at most 1) and
   then anneals by 0.1 a call.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import asdict, dataclass, field
from typing import Literal

from iclr24.core.checks import check_int
from iclr24.core.progress import progress as progress_bar
from iclr24.l2mac import prompts
from iclr24.l2mac.filestore import FileStore
from iclr24.l2mac.tools import STEP_TOOLS, TOOLS, CheckResult, Toolbox, ToolCallError, parse_tool_call, tool_signatures

__all__ = ["CallKind", "L2MAC", "Codebase", "SingleContext", "StepLog", "StepStatus", "detect_cycle",
           "tool_call_format"]

#: How a step ended: ``complete`` (its check passed and it was summarised), ``gave_up`` (its overflow retries spent,
#: or its opening alone overflows), ``call_limit`` (its calls spent), ``context_full`` (the single-context baseline's
#: conversation no longer fits); ``running`` until then.
StepStatus = Literal["running", "complete", "gave_up", "call_limit", "context_full"]
#: What a model call was for, in ``Codebase.trace``: the plan, a step's work, its summary, or the summary that
#: restarts a step after an overflow.
CallKind = Literal["plan", "step", "summary", "overflow"]


def tool_call_format(names) -> dict:
    """The ``response_format`` of one call to one of the tools ``names``: ``{"tool": NAME, "arguments": {...}}``
    with the tool's own argument schema, the text :func:`~iclr24.l2mac.tools.parse_tool_call` reads."""
    calls = [{"type": "object", "properties": {"tool": {"const": name}, "arguments": _closed(TOOLS[name][1])},
              "required": ["tool", "arguments"], "additionalProperties": False} for name in names]
    return {"type": "json_schema", "json_schema": {"name": "tool_call", "schema": {"anyOf": calls}}}


def _closed(schema):
    """``schema`` with no properties beyond those it names, at every level: the parser refuses unknown arguments,
    where JSON Schema's default would let a model invent them."""
    if isinstance(schema, list):
        return [_closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    closed = {key: _closed(value) for key, value in schema.items()}
    if closed.get("type") == "object":
        closed.setdefault("additionalProperties", False)
    return closed


@dataclass
class StepLog:
    """What happened in one step; ``status`` says how it ended (:data:`StepStatus`)."""

    index: int
    instruction: str
    status: StepStatus = "running"
    calls: int = 0
    tool_calls: dict[str, int] = field(default_factory=dict)
    parse_failures: int = 0  # finished replies with no valid tool call
    cut_replies: int = 0  # replies cut at their token limit before the call was complete
    overflows: int = 0
    failed_checks: int = 0
    summary: str = ""


@dataclass
class Codebase:
    """The result of a run: the files, the plan, the step log, a trace per model call, the final check."""

    files: FileStore
    plan: list[str]
    steps: list[StepLog]
    trace: list[dict] = field(default_factory=list)  # per call: step, kind, context tokens, file-store size
    final_check: CheckResult | None = None
    isolation: str = ""

    @property
    def llm_calls(self) -> int:
        return len(self.trace)

    @property
    def steps_completed(self) -> int:
        return sum(s.status == "complete" for s in self.steps)

    def to_dict(self) -> dict:
        return {"files": dict(self.files), "plan": self.plan, "steps": [asdict(s) for s in self.steps],
                "trace": self.trace, "isolation": self.isolation,
                "final_check": None if self.final_check is None else asdict(self.final_check)}


_UNCHECKED = CheckResult(True, 0, 0, 0, "All checks passed: the step is complete (tests disabled).")


@dataclass(frozen=True)
class InvalidCall:
    """A native tool call the server sent malformed (arguments that are not JSON, a tool not offered): it counts
    as a failed call and the model is asked to repair it; its text is empty, so nothing re-parses it."""

    error: str
    text: str = ""
    finish_reason: str = "invalid_tool_call"
    completion_tokens: int | None = None


def detect_cycle(messages: list[str], lengths=(2, 3, 4)) -> bool:
    """Whether the last ``k`` messages repeat the ``k`` before them, for some ``k`` in ``lengths``."""
    if isinstance(messages, str):
        raise TypeError("messages must be a list of messages, got a single string")
    if isinstance(lengths, int):
        raise TypeError(f"lengths must be a sequence of cycle lengths, got the int {lengths}")
    lengths = [check_int(f"lengths[{i}]", k, minimum=1) for i, k in enumerate(lengths)]
    return any(len(messages) >= 2 * k and messages[-k:] == messages[-2 * k:-k] for k in lengths)


class _Agent:
    """What L2MAC and the baseline share: generation within the budget, token counts, the trace."""

    #: a context with less room than this for the reply has overflowed
    min_reply_tokens = 64
    #: the run's progress bar while one is open (:meth:`_counting_calls`): every model call counts on it
    _bar = None

    def __init__(self, llm, *, context_tokens: int, reply_tokens: int, timeout_s: float,
                 constrain: bool = True) -> None:
        check_int("context_tokens", context_tokens, minimum=256)
        check_int("reply_tokens", reply_tokens, minimum=self.min_reply_tokens)
        if not 0 < timeout_s < float("inf"):
            raise ValueError(f"timeout_s must be finite and > 0, got {timeout_s!r}")
        if not isinstance(constrain, bool):
            raise TypeError(f"constrain must be a bool, got {constrain!r}")
        self.llm, self.context_tokens, self.reply_tokens, self.timeout_s = llm, context_tokens, reply_tokens, timeout_s
        self.constrain = constrain

    def tokens(self, messages: list[dict]) -> int:
        """The messages' length in the model's tokens (4 more a message: role and separators); over HTTP,
        where there is no tokenizer, an estimate of 4 characters a token."""
        try:
            return sum(len(self.llm.tokenize(m["content"])) + 4 for m in messages)
        except NotImplementedError:
            return sum(len(m["content"]) // 4 + 5 for m in messages)

    def overflowed(self, messages: list[dict]) -> bool:
        return self.context_tokens - self.tokens(messages) < self.min_reply_tokens

    def _generate(self, messages: list[dict], codebase: Codebase, step: int, kind: CallKind,
                  temperature: float = 0.0, max_tokens: int | None = None, tools: tuple[str, ...] = (),
                  force: str | None = None):
        """One call; the reply gets the room left in the context, at most ``reply_tokens``. Where the backend
        has native tool calls (``generate_with_tools``: the openai one) ``tools`` go there; else the prompt
        lists them and the call is JSON in the reply's text."""
        used = self.tokens(messages)
        codebase.trace.append({"step": step, "kind": kind, "context_tokens": used,
                               "store_chars": codebase.files.size_chars()})
        room = max(1, min(max_tokens or self.reply_tokens, self.context_tokens - used))
        native = getattr(self.llm, "generate_with_tools", None) if tools else None
        if native is not None:
            from iclr24.llm.openai_backend import InvalidToolCallError

            try:
                completion = native(list(messages), {name: TOOLS[name] for name in tools}, max_tokens=room,
                                    temperature=temperature, seed=len(codebase.trace), force=force)
            except InvalidToolCallError as error:  # a malformed call is a failed call, never text to re-parse
                completion = InvalidCall(str(error))
        else:
            # a backend that constrains its output writes only well-formed calls to the offered tools
            constrained = {"response_format": tool_call_format((force,) if force else tools)} \
                if tools and self._constrained() else {}
            completion = self.llm.generate(list(messages), max_tokens=room, temperature=temperature,
                                           seed=len(codebase.trace), **constrained)[0]
        codebase.trace[-1]["reply_tokens"] = getattr(completion, "completion_tokens", None)
        if self._bar is not None:
            self._bar.advance()
        return completion

    @contextlib.contextmanager
    def _counting_calls(self, description: str, total: int | None, enabled: bool):
        """A progress bar (:mod:`iclr24.core.progress`; nothing drawn unless ``enabled``) that counts this run's
        model calls."""
        with progress_bar(description, total=total, enabled=enabled) as bar:
            self._bar = bar
            try:
                yield bar
            finally:
                self._bar = None

    def _parse(self, completion, log: StepLog, messages: list[dict]):
        """The tool call of a reply, or None after telling the model what was wrong. A reply cut at the
        context limit is not repaired into a call (that would write truncated files)."""
        try:
            if isinstance(completion, InvalidCall):
                raise ToolCallError(completion.error)
            call = parse_tool_call(completion.text)
            if call.repaired and completion.finish_reason == "length":
                raise ToolCallError("the reply was cut at the end of the context window; write less per call")
        except ToolCallError as error:
            # under a grammar a reply cut at its token limit is a valid prefix: unfinished, not malformed (a free
            # reply cut there may be anything, and counts as a parse failure)
            if completion.finish_reason == "length" and self._constrained():
                log.cut_replies += 1
            else:
                log.parse_failures += 1
            messages.append({"role": "user", "content": prompts.REPAIR.format(error=error)})
            return None
        log.tool_calls[call.name] = log.tool_calls.get(call.name, 0) + 1
        return call

    def _constrained(self) -> bool:
        """Whether tool-call replies are forced into their schemas (a grammar, not native tool calls)."""
        return self.constrain and self.llm.capabilities.grammar and \
            getattr(self.llm, "generate_with_tools", None) is None

    def _check_step(self, toolbox: Toolbox, log: StepLog, messages: list[dict],
                    enabled: bool = True) -> CheckResult:
        """Step 4's check on ``step_complete``; a failure goes back to the model with a request to fix it."""
        check = toolbox.check() if enabled else _UNCHECKED
        if not check.passed:
            log.failed_checks += 1
            messages.append({"role": "user", "content": prompts.FIX.format(report=check.report,
                                                                           files=toolbox.store.list())})
        return check

    def _system(self, tools) -> dict:
        return {"role": "system", "content": prompts.SYSTEM.format(tools=tool_signatures(tools))}


class L2MAC(_Agent):
    """LLM automatic computer: a plan of steps, each run by a fresh agent over a shared file store.

    Args:
        llm: any :class:`iclr24.llm.LanguageModel`; chat messages go to ``generate``.
        context_tokens: the context window the control unit manages (counted with ``llm.tokenize``).
        max_steps: the most steps the plan may have.
        max_retries_per_step: overflow restarts allowed per step (the paper: 30).
        max_calls_per_step: model calls allowed per attempt at a step (counted afresh after each overflow
            restart; the official loop has no such limit, only the retries).
        reply_tokens: the most tokens one reply may take; a reply gets the room left in the context up to this,
            and a context with under 64 tokens of room has overflowed.
        timeout_s: limit of each sandboxed run (tests, programs).
        enable_tests: run the checks after each write and on ``step_complete`` (the official flag); False
            accepts every step unchecked, which isolates the error-correction loop. The final check always runs.
        constrain: on a backend that constrains its output (``capabilities.grammar``), force every tool call into
            the offered tools' schemas; False leaves the model free (to measure how often it writes no valid call).

    Example::

        from iclr24.l2mac import L2MAC, SimulatedCoder, BOOKSHOP
        codebase = L2MAC(SimulatedCoder(BOOKSHOP), context_tokens=1280).run(BOOKSHOP.spec)
        codebase.steps_completed, len(codebase.files), codebase.final_check.passed   # (8, 16, True)
    """

    def __init__(self, llm, *, context_tokens: int = 4096, max_steps: int = 10, max_retries_per_step: int = 30,
                 max_calls_per_step: int = 24, reply_tokens: int = 768, timeout_s: float = 30.0,
                 enable_tests: bool = True, constrain: bool = True) -> None:
        super().__init__(llm, context_tokens=context_tokens, reply_tokens=reply_tokens, timeout_s=timeout_s,
                         constrain=constrain)
        self.enable_tests = bool(enable_tests)
        self.max_steps = check_int("max_steps", max_steps, minimum=1)
        self.max_retries_per_step = check_int("max_retries_per_step", max_retries_per_step, minimum=0)
        self.max_calls_per_step = check_int("max_calls_per_step", max_calls_per_step, minimum=1)

    def run(self, task: str, *, progress: bool = False) -> Codebase:
        """Plan, then run every step. ``progress=True`` draws a bar of the model calls (their number is not known
        ahead), showing the step under way (:mod:`iclr24.core.progress`; off by default: with a real model a step
        takes minutes)."""
        if not isinstance(task, str) or not task.strip():
            raise ValueError("task must be a non-empty str")
        codebase = Codebase(FileStore(), plan=[], steps=[])
        toolbox = Toolbox(codebase.files, timeout_s=self.timeout_s, enable_tests=self.enable_tests)
        self.temperature = 0.0  # one value for the whole run, as officially: it carries across steps
        first = {"role": "user", "content": prompts.FIRST.format(task=task)}
        with self._counting_calls("L2MAC model calls", None, progress) as bar:
            bar.advance(0, step="plan")
            codebase.plan = self._plan(first, codebase)
            base = [self._system(STEP_TOOLS), first]
            summary = ""
            for index, instruction in enumerate(codebase.plan):
                bar.advance(0, step=f"{index + 1}/{len(codebase.plan)}")
                log = StepLog(index, instruction)
                codebase.steps.append(log)
                summary = self._step(base, log, summary, toolbox, codebase)
        final = Toolbox(codebase.files, timeout_s=self.timeout_s)
        codebase.final_check, codebase.isolation = final.check(), final.isolation
        return codebase

    def _plan(self, first: dict, codebase: Codebase) -> list[str]:
        """Step 1: the instruction registry. One repair request; else the task itself is the one step."""
        messages = [self._system(("write_plan",)),
                    {"role": "user", "content": first["content"] + "\n" + prompts.PLAN.format(
                        max_steps=self.max_steps)}]
        for _ in range(2):
            reply = self._generate(messages, codebase, step=-1, kind="plan", tools=("write_plan",),
                                   force="write_plan").text
            try:
                steps = [s.strip() for s in parse_tool_call(reply, ("write_plan",)).arguments["steps"] if s.strip()]
                if steps:
                    return steps[: self.max_steps]
                error = ToolCallError("the plan has no steps")
            except ToolCallError as e:
                error = e
            messages += [{"role": "assistant", "content": reply},
                         {"role": "user", "content": prompts.REPAIR.format(error=error)}]
        return [first["content"]]

    def _step(self, base: list[dict], log: StepLog, summary: str, toolbox: Toolbox, codebase: Codebase) -> str:
        """Steps 2-6 for one instruction; returns the summary handed to the next step."""
        files = codebase.files

        def opening(previous: str) -> list[dict]:
            return [*base, {"role": "user", "content": prompts.STEP.format(
                step=log.instruction, files=files.list(), summary=previous or "(none)")}]

        messages, finishing, attempt_calls = opening(summary), False, 0
        while attempt_calls < self.max_calls_per_step:
            if self.overflowed(messages):  # step 5
                log.overflows += 1
                if log.overflows > self.max_retries_per_step or len(messages) <= 3:  # or the opening alone is too big
                    log.status = "gave_up"
                    return summary
                messages = self._shrink(messages)
                messages.append({"role": "user", "content": prompts.OVERFLOW})
                log.calls += 1
                restart = self._generate(messages, codebase, log.index, "overflow", max_tokens=128).text.strip()
                if finishing:  # the check had passed: the step is done, and this is its summary
                    log.status, log.summary = "complete", restart
                    return restart
                messages, attempt_calls = opening(restart), 0
                continue
            self.temperature = self._next_temperature(messages, self.temperature)  # step 6
            log.calls += 1
            attempt_calls += 1
            reply = self._generate(messages, codebase, log.index, "summary" if finishing else "step",
                                   self.temperature, tools=() if finishing else STEP_TOOLS)
            messages.append({"role": "assistant", "content": reply.text})
            if finishing:  # step 4: the summary the next step receives
                log.status, log.summary = "complete", reply.text.strip()
                return log.summary
            call = self._parse(reply, log, messages)
            if call is None:
                continue
            if call.name == "step_complete":  # step 4: the check
                check = self._check_step(toolbox, log, messages, self.enable_tests)
                if check.passed:
                    messages.append({"role": "user", "content": check.report + "\n" + prompts.SUMMARISE})
                    finishing = True
                continue
            result = toolbox(call)  # step 3 (a write reports the checks' result, as officially)
            messages.append({"role": "user", "content": f"Result of {call.name}:\n{result}\n" +
                             prompts.CHECK.format(step=log.instruction, files=files.list())})
        log.status = "call_limit"
        return summary

    def _shrink(self, messages: list[dict]) -> list[dict]:
        """Drop exchanges after the step's opening (index 3 on), oldest first, until a summary request and
        its reply fit; the latest failed check is dropped last, so the summary can say what still fails."""
        messages = list(messages)
        failures = [i for i, m in enumerate(messages) if m["role"] == "user" and m["content"].startswith(
            "The step is not complete")]
        keep = messages[failures[-1]] if failures else None
        while len(messages) > 3 and self.context_tokens - self.tokens(messages) < 256:
            index = 4 if messages[3] is keep and len(messages) > 4 else 3
            messages.pop(index)
        return messages

    @staticmethod
    def _next_temperature(messages: list[dict], temperature: float) -> float:
        texts = [re.sub(r"/tmp/[^/\s]+", "", m["content"]) for m in messages]
        if detect_cycle(texts):
            return min(1.0, temperature + 0.4)
        return max(0.0, round(temperature - 0.1, 10))


class SingleContext(_Agent):
    """The baseline: one conversation writes the whole codebase, with the same tools, until the budget is spent.

    No plan, no fresh contexts, no summaries: the conversation stops (is truncated) when the next
    reply no longer fits in ``context_tokens``.
    """

    def __init__(self, llm, *, context_tokens: int = 4096, max_calls: int = 60, reply_tokens: int = 768,
                 timeout_s: float = 30.0, constrain: bool = True) -> None:
        super().__init__(llm, context_tokens=context_tokens, reply_tokens=reply_tokens, timeout_s=timeout_s,
                         constrain=constrain)
        self.max_calls = check_int("max_calls", max_calls, minimum=1)

    def run(self, task: str, *, progress: bool = False) -> Codebase:
        """One conversation until the task is complete, the context is full or ``max_calls`` are spent.
        ``progress=True`` draws a bar of the model calls against ``max_calls`` (:mod:`iclr24.core.progress`; off by
        default)."""
        if not isinstance(task, str) or not task.strip():
            raise ValueError("task must be a non-empty str")
        codebase = Codebase(FileStore(), plan=[task], steps=[StepLog(0, task)])
        log, toolbox = codebase.steps[0], Toolbox(codebase.files, timeout_s=self.timeout_s)
        messages = [self._system(STEP_TOOLS),
                    {"role": "user", "content": prompts.FIRST.format(task=task) + "\n" + prompts.SINGLE}]
        log.status = "call_limit"
        with self._counting_calls("single-context model calls", self.max_calls, progress):
            while log.calls < self.max_calls:
                if self.overflowed(messages):
                    log.status = "context_full"
                    break
                log.calls += 1
                reply = self._generate(messages, codebase, 0, "step", tools=STEP_TOOLS)
                messages.append({"role": "assistant", "content": reply.text})
                call = self._parse(reply, log, messages)
                if call is None:
                    continue
                if call.name == "step_complete":
                    if self._check_step(toolbox, log, messages).passed:
                        log.status = "complete"
                        break
                    continue
                messages.append({"role": "user", "content": f"Result of {call.name}:\n{toolbox(call)}\n"
                                                            f"Files: {codebase.files.list()}."})
        codebase.final_check = toolbox.check()
        codebase.isolation = toolbox.isolation
        return codebase
