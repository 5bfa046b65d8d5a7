"""A stand-in for the terminal progress display, to test that long library calls report progress.

``bars(monkeypatch)`` makes :func:`iclr24.core.progress.is_enabled` true (as on a terminal, quiet off) and
replaces rich's ``Progress`` with a recorder: ``added`` lists each bar's (description, total) as it is opened,
``advanced`` the steps counted per description. Nothing is drawn.
"""

from __future__ import annotations

from collections import Counter


class Recorder:
    def __init__(self) -> None:
        self.added: list[tuple[str, int | None]] = []
        self.advanced: Counter = Counter()
        self._names: dict[int, str] = {}

    def progress_class(self):
        recorder = self

        class FakeProgress:
            def __init__(self, *columns, **kwargs) -> None:
                pass

            def start(self) -> None:
                pass

            def stop(self) -> None:
                pass

            def add_task(self, description, total=None):
                task_id = len(recorder.added)
                recorder.added.append((description, total))
                recorder._names[task_id] = description
                return task_id

            def update(self, task_id, advance=0, description=None):
                recorder.advanced[recorder._names[task_id]] += advance

            def remove_task(self, task_id) -> None:
                pass

        return FakeProgress


def bars(monkeypatch) -> Recorder:
    import rich.progress

    from iclr24.core import progress

    recorder = Recorder()
    monkeypatch.setattr(progress, "is_enabled", lambda: True)
    monkeypatch.setattr(rich.progress, "Progress", recorder.progress_class())
    return recorder
