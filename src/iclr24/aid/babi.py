"""bAbI from a local copy, with the sys-bAbI test split (systematic difference in names).

sys-bAbI (used by the AID paper and the TPR-RNN / FWM line of work) is bAbI v1.2 ``en-valid-10k`` in which
the test stories of some tasks use names that the task's training stories never show in those roles:
daniel -> bill, john -> fred, sandra -> julie in tasks 1, 2, 3, 6, 7, 8, 9, 11, 12, 13, and the reverse in
tasks 5, 10, 14 (the mapping of the paper's code). Nothing is downloaded here.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from iclr24.core.checks import check_int

__all__ = ["BabiSample", "SYSTEMATIC_NAMES", "load_babi"]

FETCH = ("bAbI v1.2 is not there. Fetch http://www.thespermwhale.com/jaseweston/babi/tasks_1-20_v1-2.tar.gz, "
         "extract it and pass the folder that holds en-valid-10k (or en-valid-10k itself)")
_NAMES = {"daniel": "bill", "john": "fred", "sandra": "julie"}
SYSTEMATIC_NAMES: dict[int, dict[str, str]] = {
    **{t: _NAMES for t in (1, 2, 3, 6, 7, 8, 9, 11, 12, 13)},
    **{t: {v: k for k, v in _NAMES.items()} for t in (5, 10, 14)},
}
SPLITS = ("train", "valid", "test")


@dataclass(frozen=True)
class BabiSample:
    """One question: the story's sentences before it (each a tuple of lower-case tokens, '.' kept), the
    question's tokens ('?' kept) and the answer (comma-separated when it has several words)."""

    story: tuple[tuple[str, ...], ...]
    question: tuple[str, ...]
    answer: str


def _tokens(text: str) -> tuple[str, ...]:
    return tuple(re.sub(r"([.?])", r" \1", text.lower()).split())


def _task_file(root: Path, task: int, split: str) -> Path:
    folders = [root, root / "en-valid-10k", root / "tasks_1-20_v1-2" / "en-valid-10k"]
    for folder in folders:
        if not folder.is_dir():
            continue
        if (folder / f"qa{task}_{split}.txt").is_file():  # en-valid-10k's names
            return folder / f"qa{task}_{split}.txt"
        found = sorted(folder.glob(f"qa{task}_*_{split}.txt"))  # en-10k's names: qa1_single-supporting-fact_...
        if len(found) > 1:
            raise ValueError(f"several files for task {task}, split {split} in {folder}: {[f.name for f in found]}")
        if found:
            return found[0]
    raise FileNotFoundError(f"no qa{task}_{split}.txt (or qa{task}_*_{split}.txt) under {root}. {FETCH}")


def load_babi(root: str | os.PathLike, task: int, split: str = "train", systematic: bool = True) -> list[BabiSample]:
    """The questions of bAbI task ``task`` (1..20), ``split`` in train/valid/test, from a local copy.

    With ``systematic`` the test split gets the sys-bAbI name swap (train and valid are unchanged).
    Raises FileNotFoundError naming what to fetch when the files are missing.
    """
    if not isinstance(root, (str, os.PathLike)):
        raise TypeError(f"root must be a path to the bAbI folder, got {root!r}")
    check_int("task", task, minimum=1)
    if task > 20:
        raise ValueError(f"task must be in 1..20, got {task}")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    path = _task_file(Path(root), task, split)
    swap = SYSTEMATIC_NAMES.get(task, {}) if systematic and split == "test" else {}

    def rename(tokens: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(swap.get(w, w) for w in tokens)

    samples: list[BabiSample] = []
    story: list[tuple[str, ...]] = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        number, _, text = line.strip().partition(" ")
        if not number.isdigit():
            raise ValueError(f"{path}:{lineno}: expected a line number first, got {line!r}")
        if number == "1":
            story = []
        if "?" in text and "\t" not in text:
            raise ValueError(f"{path}:{lineno}: a question needs a tab and its answer, got {line!r}")
        if "\t" in text:
            question, answer, *_ = text.split("\t")
            if not answer.strip():
                raise ValueError(f"{path}:{lineno}: empty answer in {line!r}")
            samples.append(BabiSample(tuple(story), rename(_tokens(question)), ",".join(
                rename(tuple(answer.lower().split(","))))))
        elif text.strip():
            story.append(rename(_tokens(text)))
    return samples
