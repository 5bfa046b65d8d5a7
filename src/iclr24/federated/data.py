"""Client data: the paper's signal-noise model, and a Dirichlet label split of a bundled dataset.

The data model (Section 3 of the paper): a sample of client k is two patches, ``x = [y * mu_k, xi]``, with
``y`` a Rademacher label, ``mu_k`` the client's signal and ``xi ~ N(0, sigma_p^2 (I - P))`` noise drawn
orthogonal to the signals (``P`` projects onto their span). Heterogeneity is in the signals: every client
shares one ``mu`` (homogeneous), half the clients see ``-mu`` (opposite: the same input means the other
label), or the two halves see orthogonal signals.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from iclr24.core import check_int, check_number, check_tensor

__all__ = ["HETEROGENEITY", "ClientData", "FederatedData", "client_signals", "digits_clients",
           "dirichlet_partition", "signal_noise_clients"]

HETEROGENEITY = ("homogeneous", "opposite", "orthogonal")


@dataclass(frozen=True)
class ClientData:
    """One client's training and test samples (the test samples follow the client's own distribution)."""

    x: Tensor
    y: Tensor
    x_test: Tensor
    y_test: Tensor

    def __post_init__(self) -> None:
        for xs, ys, split in ((self.x, self.y, "train"), (self.x_test, self.y_test, "test")):
            names = ("x", "y") if split == "train" else ("x_test", "y_test")
            for name, t in zip(names, (xs, ys)):
                if not isinstance(t, Tensor):
                    raise TypeError(f"ClientData.{name} must be a torch.Tensor, got {type(t).__name__}")
            check_tensor(f"ClientData.{names[0]}", xs, min_ndim=2, shape_doc="(n, ...)")
            check_tensor(f"ClientData.{names[1]}", ys, ndim=1, shape_doc="(n,)")
            if xs.shape[0] != ys.shape[0] or xs.shape[0] == 0:
                raise ValueError(f"ClientData {split} split needs one label per sample and at least one sample, "
                                 f"got {xs.shape[0]} samples and {ys.shape[0]} labels")
            if ys.is_floating_point() and not bool(((ys == 1) | (ys == -1)).all()):
                raise ValueError(f"ClientData.{names[1]}: float labels must be +-1 (use integer class indices for "
                                 f"classes), got values {sorted(set(ys.unique().tolist()))[:5]}")

    @property
    def num_examples(self) -> int:
        return int(self.y.shape[0])


@dataclass(frozen=True)
class FederatedData:
    """The clients of one federation; ``signals[k]`` is client k's ``mu_k`` (synthetic data only)."""

    clients: list[ClientData]
    signals: Tensor | None = None

    def __len__(self) -> int:
        return len(self.clients)

    def __getitem__(self, k: int) -> ClientData:
        return self.clients[k]

    def __iter__(self):
        return iter(self.clients)


def client_signals(n_clients: int, d: int, signal_norm: float, heterogeneity: str) -> Tensor:
    """``(n_clients, d)`` signals ``mu_k`` of norm ``signal_norm`` along the first coordinate axes.

    ``homogeneous``: all ``mu``; ``opposite``: the first half ``mu``, the rest ``-mu``; ``orthogonal``: the
    first half ``mu_1``, the rest ``mu_2`` with ``mu_1 _|_ mu_2``.
    """
    n_clients = check_int("n_clients", n_clients, minimum=1)
    d = check_int("d", d, minimum=2)
    signal_norm = check_number("signal_norm", signal_norm, minimum=0.0, exclusive=True)
    if heterogeneity not in HETEROGENEITY:
        raise ValueError(f"heterogeneity must be one of {HETEROGENEITY}, got {heterogeneity!r}")
    if heterogeneity != "homogeneous" and n_clients < 2:
        raise ValueError(f"heterogeneity={heterogeneity!r} splits the clients in two groups: n_clients must be >= 2, "
                         f"got {n_clients}")
    if heterogeneity == "orthogonal" and d < 3:
        raise ValueError(f"orthogonal signals use two axes and the noise needs a third: d must be >= 3, got {d}")
    signals = torch.zeros(n_clients, d)
    second_half = torch.arange(n_clients) >= (n_clients + 1) // 2
    if heterogeneity == "orthogonal":
        signals[~second_half, 0] = signal_norm
        signals[second_half, 1] = signal_norm
    else:
        signals[:, 0] = signal_norm
        if heterogeneity == "opposite":
            signals[second_half] *= -1
    return signals


def signal_noise_clients(
    n_clients: int = 10,
    n_train: int = 8,
    *,
    n_test: int = 500,
    d: int = 1000,
    signal_norm: float = 3.0,
    noise_std: float = 1.0,
    heterogeneity: str = "homogeneous",
    seed: int = 0,
) -> FederatedData:
    """The paper's two-patch data for ``n_clients`` clients; ``x`` has shape ``(n, 2, d)``, ``y`` is +-1.

    Patch 0 is the signal ``y * mu_k``, patch 1 the noise ``xi``, orthogonal to every client's signal.
    """
    n_train = check_int("n_train", n_train, minimum=1)
    seed = check_int("seed", seed)
    n_test = check_int("n_test", n_test, minimum=1)
    noise_std = check_number("noise_std", noise_std, minimum=0.0, exclusive=True)
    signals = client_signals(n_clients, d, signal_norm, heterogeneity)
    u, singular, _ = torch.linalg.svd(signals.T.double(), full_matrices=False)
    basis = u[:, singular > singular.max() * 1e-9].float()        # an orthonormal basis of the signals' span
    generator = torch.Generator().manual_seed(seed)

    def sample(mu: Tensor, n: int) -> tuple[Tensor, Tensor]:
        y = torch.randint(0, 2, (n,), generator=generator).float() * 2 - 1
        xi = torch.randn(n, d, generator=generator) * noise_std
        xi = xi - (xi @ basis) @ basis.T
        return torch.stack([y[:, None] * mu, xi], dim=1), y

    clients = []
    for mu in signals:
        x, y = sample(mu, n_train)
        x_test, y_test = sample(mu, n_test)
        clients.append(ClientData(x, y, x_test, y_test))
    return FederatedData(clients, signals)


def dirichlet_partition(labels, n_clients: int, alpha: float, *, seed: int = 0,
                        min_size: int = 2) -> list[np.ndarray]:
    """Split sample indices across clients with class proportions drawn from ``Dirichlet(alpha)``.

    The usual non-IID split of FL benchmarks: for each class, its samples are dealt to the clients in
    proportions ``p ~ Dir(alpha * 1)``; small ``alpha`` gives each client few classes. Redraws until every
    client holds at least ``min_size`` samples.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0:
        raise ValueError(f"labels must be a non-empty 1-D array, got shape {labels.shape}")
    if labels.dtype.kind == "f" and not np.isfinite(labels).all():
        raise ValueError("labels must be finite, found NaN/inf entries")
    seed = check_int("seed", seed)
    n_clients = check_int("n_clients", n_clients, minimum=1)
    alpha = check_number("alpha", alpha, minimum=0.0, exclusive=True)
    min_size = check_int("min_size", min_size, minimum=0)
    if n_clients * min_size > labels.size:
        raise ValueError(f"n_clients * min_size = {n_clients * min_size} exceeds the {labels.size} samples")
    rng = np.random.default_rng(seed)
    for _ in range(1000):
        parts: list[list[int]] = [[] for _ in range(n_clients)]
        for c in np.unique(labels):
            members = rng.permutation(np.flatnonzero(labels == c))
            cuts = (np.cumsum(rng.dirichlet(np.full(n_clients, alpha))) * members.size).astype(int)[:-1]
            for k, chunk in enumerate(np.split(members, cuts)):
                parts[k].extend(chunk.tolist())
        if min(len(p) for p in parts) >= min_size:
            return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]
    raise ValueError(f"could not give every client {min_size} samples with alpha={alpha} in 1000 draws")


def digits_clients(n_clients: int = 10, alpha: float = 0.5, *, test_fraction: float = 0.3,
                   seed: int = 0) -> FederatedData:
    """scikit-learn's bundled digits (1797 8x8 images, pixels scaled to [0, 1]) split by Dirichlet label skew.

    Each client's own samples are split into its train and test sets, so a client is tested on its own
    label mix (the personalised evaluation of the paper's Tables 1-2).
    """
    from sklearn.datasets import load_digits

    test_fraction = check_number("test_fraction", test_fraction, minimum=0.0, exclusive=True, maximum=0.9)
    seed = check_int("seed", seed)
    digits = load_digits()
    x = torch.as_tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.as_tensor(digits.target, dtype=torch.long)
    rng = np.random.default_rng(seed + 1)
    clients = []
    for part in dirichlet_partition(digits.target, n_clients, alpha, seed=seed, min_size=4):
        part = rng.permutation(part)
        n_test = min(max(1, int(round(test_fraction * part.size))), part.size - 1)   # keep a training sample
        test, train = torch.as_tensor(part[:n_test]), torch.as_tensor(part[n_test:])
        clients.append(ClientData(x[train], y[train], x[test], y[test]))
    return FederatedData(clients)
