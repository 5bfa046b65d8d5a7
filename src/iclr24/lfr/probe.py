"""Linear-probe evaluation: a logistic regression on frozen representations (the paper's protocol)."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler


def linear_probe(Z_train: torch.Tensor | np.ndarray, y_train: np.ndarray, Z_test: torch.Tensor | np.ndarray,
                 y_test: np.ndarray, C: float = 1.0) -> float:
    """Test accuracy of a standardised L2 logistic regression fitted on ``Z_train``."""
    Z_train, Z_test = (np.asarray(z.detach() if isinstance(z, torch.Tensor) else z, dtype=np.float64)
                       for z in (Z_train, Z_test))
    probe = make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=5000))
    return float(probe.fit(Z_train, y_train).score(Z_test, y_test))
