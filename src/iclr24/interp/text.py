"""English text that ships with Python: paragraphs of the standard library's docstrings.

Activations for an SAE need varied text, and nothing may be downloaded at run time. The
standard library's documentation is prose written by people, on every machine that runs
Python; its exact content moves a little between Python versions.
"""

from __future__ import annotations

import importlib
import inspect
import random
import re

from iclr24.core.checks import check_int

__all__ = ["english_paragraphs"]

_MODULES = ("argparse", "bisect", "calendar", "collections", "csv", "dataclasses", "datetime", "decimal", "difflib",
            "email.message", "fractions", "functools", "heapq", "http.client", "json", "logging", "pathlib", "pickle",
            "queue", "random", "shutil", "statistics", "string", "subprocess", "tarfile", "textwrap", "threading",
            "unittest", "urllib.parse", "zipfile")
_PROSE = re.compile(r"^[A-Z][A-Za-z ,.;:'()\-]+$")


def english_paragraphs(n: int, *, seed: int = 0, min_words: int = 8, max_words: int = 48) -> list[str]:
    """``n`` prose paragraphs of ``min_words``-``max_words`` words (no code) from stdlib docstrings,
    shuffled by ``seed``."""
    check_int("n", n, minimum=1)
    found: dict[str, None] = {}
    for name in _MODULES:
        module = importlib.import_module(name)
        objects = [module, *(obj for _, obj in sorted(vars(module).items())
                             if (inspect.isclass(obj) or inspect.isfunction(obj))
                             and getattr(obj, "__module__", None) == module.__name__)]
        objects += [member for cls in objects if inspect.isclass(cls) for _, member in sorted(vars(cls).items())
                    if inspect.isfunction(member)]
        for obj in objects:
            for paragraph in (inspect.getdoc(obj) or "").split("\n\n"):
                text = " ".join(paragraph.split())
                words = len(text.split())
                if min_words <= words <= max_words and _PROSE.match(text):
                    found[text] = None
    paragraphs = list(found)
    if len(paragraphs) < n:
        raise ValueError(f"the standard library's docstrings hold {len(paragraphs)} such paragraphs, fewer than n={n}")
    random.Random(seed).shuffle(paragraphs)
    return paragraphs[:n]
