"""The one progress API that training loops and sweeps use.

    from iclr24.core.progress import progress, track

    for batch in track(loader, "epoch 1"):
        ...
    with progress("training", total=steps) as bar:
        for step in range(steps):
            ...
            bar.advance(loss=loss.item())

Bars are drawn with rich on stderr when it is a terminal and quiet mode is off
(``iclr24 run --quiet`` or :func:`set_quiet`). Nested bars share one live display.

A library function that runs for long takes ``progress: bool = False`` and opens its bar with
``progress(description, total, enabled=progress)``: off by default when called from Python, on when an experiment
passes its run's setting (``progress=not ctx.quiet``), as ``iclr24 run`` does. A disabled bar only counts.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

__all__ = ["ProgressBar", "is_enabled", "progress", "set_quiet", "track"]

T = TypeVar("T")

_quiet = False
_live: Any = None  # the shared rich.progress.Progress while any bar is open
_open_bars = 0


def set_quiet(quiet: bool) -> bool:
    """Turn bars off (True) or on (False); returns the previous setting."""
    global _quiet
    previous, _quiet = _quiet, bool(quiet)
    return previous


def is_enabled() -> bool:
    """Whether bars are drawn: not quiet, and stderr is a terminal."""
    return not _quiet and sys.stderr.isatty()


class ProgressBar:
    """Handle on one bar. Without a display it only counts, so loops run the same either way."""

    def __init__(self, description: str, total: int | None, task_id: Any = None) -> None:
        self.description = description
        self.total = total
        self.completed = 0
        self.fields: dict[str, Any] = {}
        self._task_id = task_id

    def advance(self, n: int = 1, **fields: Any) -> None:
        """Count ``n`` more steps; keyword fields (``loss=0.3``) are shown beside the bar."""
        self.completed += n
        self.fields.update(fields)
        if self._task_id is not None and _live is not None:
            _live.update(self._task_id, advance=n, description=self._label())

    def _label(self) -> str:
        shown = " ".join(f"{k}={_fmt(v)}" for k, v in self.fields.items())
        return f"{self.description} {shown}".rstrip()


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


@contextmanager
def progress(description: str, total: int | None = None, *, enabled: bool = True) -> Iterator[ProgressBar]:
    """A progress bar for a loop of ``total`` steps (``None``: unknown length).

    ``enabled=False`` (a library call's default) draws nothing whatever the quiet setting: the bar only counts.
    """
    global _live, _open_bars
    if not enabled or not is_enabled():
        yield ProgressBar(description, total)
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if _live is None:
        _live = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        _live.start()
    _open_bars += 1
    task_id = _live.add_task(description, total=total)
    try:
        yield ProgressBar(description, total, task_id)
    finally:
        _live.remove_task(task_id)
        _open_bars -= 1
        if _open_bars == 0:
            _live.stop()
            _live = None


def track(iterable: Iterable[T], description: str, total: int | None = None, *,
          enabled: bool = True) -> Iterator[T]:
    """Iterate over ``iterable`` with a progress bar (``enabled=False``: none drawn)."""
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    with progress(description, total=total, enabled=enabled) as bar:
        for item in iterable:
            yield item
            bar.advance()
