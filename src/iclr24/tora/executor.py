"""Running the programs a model writes, and turning what they print into the text the model reads next.

Every program runs through :mod:`iclr24.sandbox` (the official ToRA code ``exec``-s them in a
process pool, which is not a sandbox). What goes back into the prompt is, by default, what ToRA's
inference code sends (``feedback="official"``): everything the program printed, stripped and cut
to its first and last 200 characters when longer than 400; ``Done`` when it printed nothing; on
an error only the last line of the traceback (``NameError: name 'x' is not defined``), and
``Timeout Error`` past the time limit. ``feedback="last_line"`` sends only the last line printed,
cut to 50 + 50 characters: a shorter prompt for a small model. A program that cannot be written as UTF-8 (a
lone surrogate, which a served model's JSON can carry) is a failed run like any other, its error line
``UnicodeEncodeError: ... surrogates not allowed`` as Python gives it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from iclr24.core.checks import check_int

__all__ = ["Executor", "SandboxExecutor", "ToolOutput", "extract_program", "truncate_output"]


@dataclass(frozen=True)
class ToolOutput:
    """What one program run gives back: the ``text`` the model sees and whether the run succeeded.

    ``isolation`` is the sandbox's account of how the program was contained (``ExecResult.isolation``).
    """

    text: str
    ok: bool
    timed_out: bool = False
    duration_s: float = 0.0
    isolation: str = ""


#: Anything that runs a program and reports back; :class:`SandboxExecutor` is the default.
Executor = Callable[[str], ToolOutput]


def extract_program(text: str, language: str = "python") -> str | None:
    """The last closed ``` ```python``` block in ``text``, or None.

    >>> extract_program("Let me compute.\\n```python\\nprint(2 + 3)\\n```\\n")
    'print(2 + 3)'
    """
    blocks = re.findall(rf"```{language}[ \t]*\n(.*?)```", text, flags=re.DOTALL)
    return blocks[-1].strip("\n") if blocks else None


def truncate_output(text: str, limit: int = 100, keep: int = 50) -> str:
    """``text`` as is when at most ``limit`` characters, else its first and last ``keep`` joined by ``...``.

    >>> truncate_output("x" * 60 + "y" * 60)[48:55]
    'xx...yy'
    """
    check_int("limit", limit, minimum=0)
    check_int("keep", keep, minimum=0)
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return text if len(text) <= limit else f"{text[:keep]}...{text[-keep:]}"


class SandboxExecutor:
    """Runs a program in :func:`iclr24.sandbox.run_python` and returns what the model reads back.

    Args:
        timeout_s: wall-clock limit per program (ToRA: 5 s).
        memory_mb: address-space limit (sympy and numpy need a few hundred MB).
        feedback: ``"official"`` (ToRA's inference code: the whole output, ``Done`` when empty) or
            ``"last_line"`` (the last line printed).
        max_chars: longer feedback is cut to its first and last ``max_chars // 2`` characters
            (default 400 for ``"official"``, 100 for ``"last_line"``).
    """

    FEEDBACK = ("official", "last_line")

    def __init__(self, *, timeout_s: float = 5.0, memory_mb: int = 1024, feedback: str = "official",
                 max_chars: int | None = None) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        if feedback not in self.FEEDBACK:
            raise ValueError(f"feedback must be one of {self.FEEDBACK}, got {feedback!r}")
        max_chars = (400 if feedback == "official" else 100) if max_chars is None else max_chars
        check_int("max_chars", max_chars, minimum=2)
        self.timeout_s, self.memory_mb, self.feedback, self.max_chars = timeout_s, memory_mb, feedback, max_chars

    def __call__(self, program: str) -> ToolOutput:
        from iclr24.sandbox import run_python

        try:
            program.encode("utf-8")
        except UnicodeEncodeError as err:  # a lone surrogate: no file can hold the program, so it never runs
            # a failed run (issue #59), reported as Python reports it when ToRA's code exec-s such a program
            return self._feedback(f"UnicodeEncodeError: {err}", ok=False)
        result = run_python(program, timeout_s=self.timeout_s, memory_mb=self.memory_mb, max_output_bytes=20_000)
        if result.timed_out:
            text, ok = "Timeout Error", False
        elif result.exit_code != 0:
            text = _last_line(result.stderr) or f"the program exited with status {result.exit_code}"
            ok = False
        elif self.feedback == "official":
            text, ok = result.stdout.strip() or "Done", True
        else:
            text, ok = _last_line(result.stdout), True
        return self._feedback(text, ok=ok, timed_out=result.timed_out, duration_s=result.duration,
                              isolation=result.isolation)

    def _feedback(self, text: str, **run) -> ToolOutput:
        """What the model reads back: ``text`` cut to ``max_chars``, with the run's account."""
        return ToolOutput(truncate_output(text, self.max_chars, self.max_chars // 2), **run)

    def __repr__(self) -> str:
        return (f"SandboxExecutor(timeout_s={self.timeout_s:g}, memory_mb={self.memory_mb}, "
                f"feedback={self.feedback!r}, max_chars={self.max_chars})")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
