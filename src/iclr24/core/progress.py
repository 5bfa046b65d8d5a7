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
def progress(description: str, total: int | None = None) -> Iterator[ProgressBar]:
    """A progress bar for a loop of ``total`` steps (``None``: unknown length)."""
    global _live, _open_bars
    if not is_enabled():
        yield ProgressBar(description, total)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if _live is None:
        _live = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
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


def track(iterable: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate over ``iterable`` with a progress bar."""
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    with progress(description, total=total) as bar:
        for item in iterable:
            yield item
            bar.advance()
