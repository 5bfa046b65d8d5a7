"""The file store: L2MAC's external memory, whole files by relative path (Section 3, "file store D")."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterator, Mapping
from pathlib import Path

from iclr24.core.io import write_text_atomic

__all__ = ["FileStore"]


class FileStore(Mapping[str, str]):
    """Text files by normalised relative path; read, write whole files, delete, list, snapshot to a folder.

    Paths follow the sandbox's rules (relative, no ``..``), so a store can always be run there.

    >>> store = FileStore({"app.py": "x = 1\\n"})
    >>> store.write("pkg/./util.py", "y = 2\\n")
    >>> store.list()
    ['app.py', 'pkg/util.py']
    """

    def __init__(self, files: Mapping[str, str] | None = None) -> None:
        self._files: dict[str, str] = {}
        for path, text in (files or {}).items():
            self.write(path, text)

    @staticmethod
    def normalise(path: str) -> str:
        if not isinstance(path, str) or not path.strip():
            raise ValueError(f"file path must be a non-empty str, got {path!r}")
        norm = posixpath.normpath(path.strip())
        if norm.startswith("/") or norm in (".", "..") or norm.startswith("../") or "\0" in norm:
            raise ValueError(f"file path {path!r} must be relative and stay inside the project")
        return norm

    def write(self, path: str, text: str) -> None:
        """Write the whole file (L2MAC never patches: a write replaces the file)."""
        if not isinstance(text, str):
            raise TypeError(f"contents of {path!r} must be a str, got {type(text).__name__}")
        norm = self.normalise(path)
        for other in self._files:  # a path cannot be both a file and a folder
            if other.startswith(norm + "/") or norm.startswith(other + "/"):
                raise ValueError(f"file path {path!r} clashes with the existing {other!r} (file vs folder)")
        self._files[norm] = text

    def read(self, path: str) -> str:
        norm = self.normalise(path)
        if norm not in self._files:
            raise KeyError(f"no file {path!r} in the store; it has {self.list()}")
        return self._files[norm]

    def delete(self, path: str) -> None:
        self.read(path)
        del self._files[self.normalise(path)]

    def list(self) -> list[str]:
        return sorted(self._files)

    def copy(self) -> FileStore:
        return FileStore(self._files)

    def size_chars(self) -> int:
        return sum(len(text) for text in self._files.values())

    def snapshot(self, folder: str | os.PathLike) -> Path:
        """Write every file under ``folder`` (each atomically); returns the folder."""
        root = Path(folder)
        for path, text in self._files.items():
            target = root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(target, text)
        return root

    def __getitem__(self, path: str) -> str:
        return self.read(path)

    def __iter__(self) -> Iterator[str]:
        return iter(self.list())

    def __len__(self) -> int:
        return len(self._files)

    def __repr__(self) -> str:
        return f"FileStore({len(self)} files, {self.size_chars()} characters)"
