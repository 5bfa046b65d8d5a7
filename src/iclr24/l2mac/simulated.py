"""A simulated coder: a stand-in language model that knows a task's reference code and makes mistakes.

SIMULATED, not a language model: it exercises L2MAC's control loop at a scale where real models
cannot write the code. It reads only the messages it is sent (the step, the file list, test
output), answers with JSON tool calls as a model would, and writes each function with its bug at
``bug_rate`` (a fresh draw each time it writes a module from scratch). It fixes a function only
when a failing test names it (``test_<function>``), as a model shown pytest's output would. Its
replies are cut at ``max_tokens`` like any backend's, so a reply that does not fit breaks.
"""

from __future__ import annotations

import ast
import random
import re
import zlib
from collections.abc import Sequence

from iclr24.l2mac import prompts
from iclr24.l2mac.tasks import CodingTask, Module
from iclr24.l2mac.tools import tool_call_text
from iclr24.llm.base import Capabilities, Completion, check_generate_args, with_system

__all__ = ["SimulatedCoder", "render_module", "render_tests"]

_TOKEN = re.compile(r"\w+|[^\w\s]")


def render_module(module: Module, buggy: set[str] = frozenset()) -> str:
    """The module's file: docstring, imports, then each function (with its bug where named in ``buggy``)."""
    parts = [f.source.replace(*f.bug) if f.name in buggy else f.source for f in module.functions]
    head = f'"""{module.doc}"""\n' + (f"\n{module.imports}" if module.imports else "")
    return head + "\n\n" + "\n\n".join(parts)


def render_tests(module: Module) -> str:
    """The coder's own tests for the module: one ``test_<function>`` each."""
    names = ", ".join(f.name for f in module.functions)
    return (f"import pytest\n\nfrom {module.name[:-3]} import {names}\n\n\n" +
            "\n\n".join(f.tests for f in module.functions))


class SimulatedCoder:
    """A scripted "model" for a :class:`CodingTask` (see the module docstring); labelled simulated in results."""

    def __init__(self, task: CodingTask, *, bug_rate: float = 0.3, seed: int = 0) -> None:
        if not 0.0 <= bug_rate <= 1.0:
            raise ValueError(f"bug_rate must be in [0, 1], got {bug_rate}")
        if not task.modules:
            raise ValueError(f"task {task.name!r} has no reference modules to simulate")
        self.task, self.bug_rate, self.seed = task, bug_rate, seed
        self.name = f"simulated-coder(bug_rate={bug_rate:g})"
        self.capabilities = Capabilities(full_logits=False, top_logprobs_k=0, chat_template=True, grammar=False)
        self.buggy: dict[str, set[str]] = {}
        self.bugs_injected = 0
        self.bugs_fixed = 0
        self._writes = 0

    # --- the LanguageModel protocol ---------------------------------------------------------------
    def generate(self, prompt, *, max_tokens: int = 256, stop: Sequence[str] = (), temperature: float = 0.0,
                 top_p: float = 1.0, seed: int | None = None, n: int = 1, system: str | None = None,
                 logprobs: bool = False) -> list[Completion]:
        """A scripted reply; ``logprobs`` is not available from a simulation (``Completion.logprobs`` is None)."""
        check_generate_args(max_tokens, temperature, n, top_p)
        if isinstance(prompt, str):
            prompt = [{"role": "user", "content": prompt}]
        prompt = with_system(prompt, system)
        text = self._reply(list(prompt))
        tokens = list(_TOKEN.finditer(text))
        finish = "stop"
        if len(tokens) > max_tokens:  # cut where a real backend would stop
            text, finish = text[:tokens[max_tokens].start()], "length"
        prompt_tokens = sum(len(self.tokenize(m["content"])) for m in prompt)
        return [Completion(text, finish, prompt_tokens, min(len(tokens), max_tokens), 0.0)] * n

    def tokenize(self, text: str) -> list[int]:
        return [zlib.crc32(t.encode()) % 50_000 for t in _TOKEN.findall(text)]

    def detokenize(self, token_ids: Sequence[int]) -> str:
        raise NotImplementedError("the simulated coder's tokens are hashes of words")

    def next_token_logprobs(self, token_ids):
        raise NotImplementedError("the simulated coder has no next-token distribution")

    # --- behaviour ---------------------------------------------------------------------------------
    def _reply(self, messages: list[dict]) -> str:
        last = messages[-1]["content"]
        if len(messages) <= 2:  # a new run: forget the last one's bugs
            self.buggy, self.bugs_injected, self.bugs_fixed, self._writes = {}, 0, 0, 0
        if "with write_plan" in last:
            return tool_call_text("write_plan", steps=[
                f"Write {m.name} with {', '.join(f.name for f in m.functions)}, and its tests in {m.test_file}."
                for m in self.task.modules])
        module = self._module(messages)
        if prompts.SUMMARISE in last:
            return f"Wrote {module.name} ({', '.join(f.name for f in module.functions)}) and its tests; checks pass."
        if prompts.OVERFLOW in last:  # what a model would carry over: the step, and the tests still failing
            failing = sorted(_still_failing(messages))
            return (f"Working on {module.name}." + (f" Failing tests: {', '.join(failing)}." if failing else "") +
                    " Next: finish it and call step_complete.")
        files = _listed_files(last)
        failing = set(re.findall(r"test_\w+\.py::test_(\w+)", last))  # a failed check, or a summary naming them
        if failing:
            for candidate in self.task.modules:  # the first module with a function a failing test names
                named = failing & {f.name for f in candidate.functions}
                if named:  # rewritten whole, those functions correct (whether or not an earlier fix landed)
                    buggy = self.buggy.get(candidate.name, set())
                    self.bugs_fixed += len(buggy & named)
                    self.buggy[candidate.name] = buggy - named
                    return tool_call_text("write_files", files=[{
                        "path": candidate.name, "contents": render_module(candidate, self.buggy[candidate.name])}])
        if module.name not in files or re.search(rf"SyntaxError in {re.escape(module.name)}", last):
            return self._write_module(module)
        if module.test_file not in files:
            return tool_call_text("write_files", files=[{"path": module.test_file, "contents": render_tests(module)}])
        return tool_call_text("step_complete")

    def _write_module(self, module: Module) -> str:
        self._writes += 1
        rng = random.Random(f"{self.seed}:{module.name}:{self._writes}")
        self.buggy[module.name] = {f.name for f in module.functions if rng.random() < self.bug_rate}
        self.bugs_injected += len(self.buggy[module.name])
        return tool_call_text("write_files", files=[{"path": module.name,
                                                     "contents": render_module(module, self.buggy[module.name])}])

    def _module(self, messages: list[dict]) -> Module:
        """The module the current step (L2MAC) or the next unwritten one (one conversation) is about."""
        text = " ".join(m["content"] for m in messages if m["role"] == "user")
        step = re.search(r"Do this step: (.*)", text)
        if step:
            for module in self.task.modules:
                if module.name in step.group(1):
                    return module
        files = _listed_files(messages[-1]["content"])
        unfinished = [m for m in self.task.modules if m.name not in files or m.test_file not in files]
        return unfinished[0] if unfinished else self.task.modules[-1]


def _still_failing(messages: list[dict]) -> set[str]:
    """The failing tests the conversation last reported, less those of files rewritten since."""
    failing: set[str] = set()
    for message in messages:
        text = message["content"]
        written = re.findall(r'"path": "([^"]+)"', text) if message["role"] == "assistant" else \
            [p for line in re.findall(r"^wrote (.+)$", text, flags=re.MULTILINE) for p in line.split(", ")]
        if written:
            failing = {t for t in failing if t.split("::")[0] not in {f"test_{p}" for p in written}}
        elif "All checks passed" in text:
            failing = set()
        else:
            failing |= set(re.findall(r"test_\w+\.py::test_\w+", text))
    return failing


def _listed_files(text: str) -> list[str]:
    found = re.findall(r"Files(?: so far)?: (\[[^\]]*\])", text)
    if not found:
        return []
    try:
        return list(ast.literal_eval(found[-1]))
    except (ValueError, SyntaxError):
        return []
