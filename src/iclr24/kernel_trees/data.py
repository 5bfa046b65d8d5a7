"""Data sets of the reproduction: generated, bundled with scikit-learn, or from a local path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine, make_circles, make_moons

__all__ = ["BUNDLED", "GENERATED", "SHAPE_SETS", "load_dataset", "load_shape_set"]

#: Drawn anew from each seed: every draw is a data set of its own.
GENERATED = ("circles", "moons")
#: Bundled with scikit-learn (no download), and their loaders: the same data whatever the seed.
BUNDLED = {"iris": load_iris, "wine": load_wine, "cancer": load_breast_cancer, "digits": load_digits}
#: The paper's 2-D shape sets (Fränti & Sieranoja's clustering benchmarks) and their k.
SHAPE_SETS = {"pathbased": 3, "aggregation": 7, "flame": 2}


def load_dataset(name: str, seed: int = 0, n_samples: int = 300,
                 max_bundled: int | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """``(X, y, k)`` for ``circles``, ``moons`` (``n_samples`` points drawn with ``seed``), or ``iris``, ``wine``,
    ``cancer``, ``digits`` (bundled with scikit-learn; the first ``max_bundled`` rows, all if None)."""
    if name == "circles":
        X, y = make_circles(n_samples, factor=0.4, noise=0.04, random_state=seed)
        return X, y, 2
    if name == "moons":
        X, y = make_moons(n_samples, noise=0.05, random_state=seed)
        return X, y, 2
    if name in BUNDLED:
        data = BUNDLED[name]()
        X, y = data.data[:max_bundled], data.target[:max_bundled]
        return X, y, len(np.unique(y))
    raise ValueError(f"unknown dataset {name!r}; expected one of {[*GENERATED, *BUNDLED]} or {list(SHAPE_SETS)}")


def load_shape_set(name: str, directory: str | Path) -> tuple[np.ndarray, np.ndarray, int]:
    """Pathbased, Aggregation or Flame from ``directory/<Name>.txt`` (rows: ``x y label``).

    The files are not bundled: fetch ``Pathbased.txt``, ``Aggregation.txt`` and ``flame.txt``
    from the clustering benchmark page of Fränti & Sieranoja
    (https://cs.joensuu.fi/sipu/datasets/, "Shape sets") into ``directory``.
    """
    if name not in SHAPE_SETS:
        raise ValueError(f"unknown shape set {name!r}; expected one of {list(SHAPE_SETS)}")
    directory = Path(directory)
    candidates = [directory / f"{stem}.txt" for stem in (name, name.capitalize(), name.upper())]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        raise FileNotFoundError(
            f"{name}: none of {[p.name for p in candidates]} in {str(directory)!r}. Fetch the 'Shape sets' "
            "files (Pathbased.txt, Aggregation.txt, flame.txt) from https://cs.joensuu.fi/sipu/datasets/ "
            "into that folder."
        )
    table = np.loadtxt(path)
    if table.ndim != 2 or table.shape[1] < 3:
        raise ValueError(f"{path} must have rows 'x y label', got an array of shape {table.shape}")
    labels = np.unique(table[:, 2], return_inverse=True)[1]
    return table[:, :2], labels, SHAPE_SETS[name]
