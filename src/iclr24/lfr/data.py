"""The three modalities of the reproduction, all offline: scikit-learn's bundled tables, a generated time-series
classification set, and the 8x8 digits as images."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.datasets import load_breast_cancer, load_digits, load_wine
from sklearn.model_selection import train_test_split

TABLES = {"digits": load_digits, "wine": load_wine, "breast_cancer": load_breast_cancer}


@dataclass(frozen=True)
class Split:
    """Unlabelled training rows for pretraining, labels for the linear probe, held-out rows to score it."""

    name: str
    X_train: torch.Tensor
    y_train: np.ndarray
    X_test: torch.Tensor
    y_test: np.ndarray

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.X_train.shape[1:])


def _split(name: str, X: np.ndarray, y: np.ndarray, seed: int, test_size: float) -> Split:
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=test_size, stratify=y, random_state=seed)
    # Standardise per feature with training statistics (what any tabular pipeline does first).
    axes = (0,) if X.ndim == 2 else tuple(i for i in range(X.ndim) if i != 1)
    mean, std = X_train.mean(axis=axes, keepdims=True), X_train.std(axis=axes, keepdims=True) + 1e-6
    def as_tensor(a):
        return torch.tensor((a - mean) / std, dtype=torch.float32)
    return Split(name, as_tensor(X_train), y_train, as_tensor(X_test), y_test)


def load_table(name: str, seed: int = 0, test_size: float = 0.3) -> Split:
    """One of scikit-learn's bundled tables, standardised, split 70/30 stratified."""
    if name not in TABLES:
        raise ValueError(f"table must be one of {sorted(TABLES)}, got {name!r}")
    data = TABLES[name]()
    return _split(f"table: {name}", data.data.astype(np.float64), data.target, seed, test_size)


def digit_images(seed: int = 0, test_size: float = 0.3, canvas: int = 16, noise: float = 0.3) -> Split:
    """The 1797 8x8 digits as one-channel images ``(n, 1, canvas, canvas)``: each placed at a random offset on
    a blank canvas, with Gaussian pixel noise of std ``noise`` (pixels in [0, 1]); standardised with one mean and
    scale.

    On the bare 8x8 digits a random CNN already scores ~98% under a linear probe, leaving nothing to learn;
    random placement makes the probe need features that do not depend on where the digit is.
    """
    if canvas < 8:
        raise ValueError(f"canvas must be >= 8 (the digits are 8x8), got {canvas}")
    data = load_digits()
    rng = np.random.default_rng(seed)
    X = np.zeros((len(data.images), 1, canvas, canvas))
    offsets = rng.integers(0, canvas - 7, size=(len(X), 2))
    for i, (dy, dx) in enumerate(offsets):
        X[i, 0, dy:dy + 8, dx:dx + 8] = data.images[i] / 16.0
    X += noise * rng.standard_normal(X.shape)
    return _split(f"images: digits on a {canvas}x{canvas} canvas", X, data.target, seed, test_size)


def synthetic_series(n: int = 1500, length: int = 128, n_classes: int = 6, noise: float = 0.8, seed: int = 0,
                     test_size: float = 0.3) -> Split:
    """A multi-class time-series set: each class is a pair of frequencies out of four and a second wave's shape.

    A series is ``a1 sin(2 pi f1 t + p1) + a2 shape(2 pi f2 t + p2)`` with the class's (f1, f2, shape), random
    phases, amplitudes in [0.5, 1.5], a random linear trend, and Gaussian noise of std ``noise``; classes share
    frequencies, so telling them apart takes both components and the waveform, not one spectral peak.
    """
    frequencies = [3.0, 5.0, 8.0, 13.0]
    # A class is (sine frequency, second frequency, second wave's shape). Two sines commute, so sine classes
    # take unordered pairs (6) and square-wave classes ordered pairs (12): every class differs from the others.
    sine_pairs = [(a, b) for a in range(4) for b in range(a + 1, 4)]
    square_pairs = [(a, b) for a in range(4) for b in range(4) if a != b]
    if not 2 <= n_classes <= 2 * len(sine_pairs):
        raise ValueError(f"n_classes must be in [2, {2 * len(sine_pairs)}], got {n_classes}")
    if length < 16:
        raise ValueError(f"length must be >= 16, got {length}")
    if n < 4 * n_classes:
        raise ValueError(f"n must be >= 4 * n_classes = {4 * n_classes} (a stratified split), got {n}")
    if not (np.isfinite(noise) and noise >= 0):
        raise ValueError(f"noise must be finite and >= 0, got {noise}")
    classes = [(sine_pairs[c // 2], "sine") if c % 2 == 0 else (square_pairs[(5 * (c // 2) + 1) % 12], "square")
               for c in range(n_classes)]
    rng = np.random.default_rng(seed)
    t = np.linspace(0.0, 1.0, length)
    y = rng.integers(0, n_classes, n)
    X = np.empty((n, 1, length))
    for i, label in enumerate(y):
        (f1, f2), shape = classes[label]
        p1, p2 = rng.uniform(0, 2 * np.pi, 2)
        a1, a2 = rng.uniform(0.5, 1.5, 2)
        second = np.sin(2 * np.pi * frequencies[f2] * t + p2)
        if shape == "square":
            second = np.sign(second)
        trend = rng.normal(0, 0.5) * (t - 0.5)
        X[i, 0] = a1 * np.sin(2 * np.pi * frequencies[f1] * t + p1) + a2 * second + trend
    X += noise * rng.standard_normal(X.shape)
    return _split("time series: synthetic", X, y, seed, test_size)
