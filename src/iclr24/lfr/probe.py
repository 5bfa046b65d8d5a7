"""Linear-probe evaluation: a logistic regression on frozen representations (the paper's protocol)."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from iclr24.core.checks import check_number


def linear_probe(Z_train: torch.Tensor | np.ndarray, y_train: np.ndarray, Z_test: torch.Tensor | np.ndarray,
                 y_test: np.ndarray, C: float = 1.0) -> float:
    """Test accuracy of a standardised L2 logistic regression fitted on ``Z_train``.

    Shapes: ``Z_train`` ``(n_train, d)``, ``y_train`` ``(n_train,)`` with at least two classes; ``Z_test``
    ``(n_test, d)``, ``y_test`` ``(n_test,)``; ``C`` > 0.
    """
    check_number("C", C, minimum=0.0, exclusive=True)
    Z_train, Z_test = (_features(name, z) for name, z in (("Z_train", Z_train), ("Z_test", Z_test)))
    y_train, y_test = (_labels(name, y, len(z)) for name, y, z in (("y_train", y_train, Z_train),
                                                                    ("y_test", y_test, Z_test)))
    if Z_train.shape[1] != Z_test.shape[1]:
        raise ValueError(f"Z_test must have Z_train's width {Z_train.shape[1]}, got {Z_test.shape[1]}")
    if len(np.unique(y_train)) < 2:
        raise ValueError(f"y_train must hold at least two classes to fit a probe, got {np.unique(y_train).tolist()}")
    probe = make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=5000))
    # One BLAS thread, as torch runs with one: the problem is small (hundreds of rows by at most 256 features), and
    # OpenBLAS's worker threads spin on a shared machine, costing 50x the CPU time of one thread for the same fit.
    with threadpool_limits(limits=1, user_api="blas"):
        return float(probe.fit(Z_train, y_train).score(Z_test, y_test))


def _features(name: str, Z) -> np.ndarray:
    try:
        Z = np.asarray(Z.detach().cpu() if isinstance(Z, torch.Tensor) else Z, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a (n, d) array or tensor of numbers, got {type(Z).__name__}") from None
    if Z.ndim != 2 or len(Z) == 0:
        raise ValueError(f"{name} must be a non-empty (n, d) array, got shape {Z.shape}")
    if not np.isfinite(Z).all():
        raise ValueError(f"{name} must be finite, found {int((~np.isfinite(Z)).sum())} NaN/inf entries")
    return Z


def _labels(name: str, y, n: int) -> np.ndarray:
    y = np.asarray(y.detach().cpu() if isinstance(y, torch.Tensor) else y)
    if y.ndim != 1 or len(y) != n:
        raise ValueError(f"{name} must hold one label per row ({n}), got shape {y.shape}")
    return y
