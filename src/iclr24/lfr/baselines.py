"""The baselines the paper compares against, with LFR's training API (:class:`SelfSupervised`).

- :class:`RandomInit`: the encoder as initialised (the floor any pretraining must clear).
- :class:`Autoencoder`: reconstruct the input from the representation (MSE).
- :class:`SCARF` (Bahri et al., ICLR 2022): contrast each row with a copy whose features are partly replaced by
  the same features of random other rows; the tabular state of the art that needs no image-style augmentation.
- :class:`SimCLR` (Chen et al., ICML 2020): contrast two augmented views; the augmentations must be designed for
  the modality (:func:`image_augment`, :func:`series_augment`), which is what LFR avoids.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from iclr24.core.checks import check_number, check_tensor
from iclr24.lfr.networks import output_dim
from iclr24.lfr.training import Phase, SelfSupervised

Augment = Callable[[torch.Tensor, "torch.Generator | None"], torch.Tensor]


def nt_xent(z1: torch.Tensor, z2: torch.Tensor, temperature: float) -> torch.Tensor:
    """Normalised-temperature cross-entropy: row i of ``z1`` and of ``z2`` are positives, the other 2n - 2 rows
    of the pair of batches negatives (SimCLR's loss; SCARF's InfoNCE made symmetric).

    Shapes: ``z1``, ``z2`` ``(n, d)`` with n >= 2 (a row needs a negative); ``temperature`` > 0.
    """
    check_number("temperature", temperature, minimum=0.0, exclusive=True)
    for name, z in (("z1", z1), ("z2", z2)):
        check_tensor(name, z, ndim=2, dtypes=(torch.float16, torch.bfloat16, torch.float32, torch.float64),
                     shape_doc="(n, d)")
    if z1.shape != z2.shape:
        raise ValueError(f"z1 and z2 must be paired views of one batch (the same shape), got {tuple(z1.shape)} and "
                         f"{tuple(z2.shape)}")
    if len(z1) < 2:
        raise ValueError(f"nt_xent needs a batch of at least 2 rows (each row's negatives are the others), got "
                         f"{len(z1)}")
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    logits = z @ z.T / temperature
    logits.fill_diagonal_(-torch.inf)
    n = len(z1)
    positives = torch.cat([torch.arange(n, 2 * n), torch.arange(n)]).to(z.device)
    return F.cross_entropy(logits, positives)


def _projection_head(dim: int, out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, out))


class RandomInit(SelfSupervised):
    """No training: ``fit`` leaves the encoder as initialised."""

    def phases(self) -> list[Phase]:
        return []

    def loss(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros((), requires_grad=True)


class Autoencoder(SelfSupervised):
    """Encoder plus an MLP decoder (dim -> hidden -> flattened input) trained to reconstruct the input."""

    def __init__(self, encoder: nn.Module, input_shape: int | Sequence[int], hidden: int = 256) -> None:
        super().__init__(encoder, input_shape)
        shape = self.input_shape
        dim = output_dim(encoder, torch.zeros(1, *shape))
        self.decoder = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, math.prod(shape)))

    def loss(self, x: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(self.decoder(self.encode(x)), x.flatten(1))


class SCARF(SelfSupervised):
    """Contrast each row with a corrupted copy: a ``corruption_rate`` fraction of its features (chosen per row)
    replaced by the values of those features in random rows of the training set (their empirical marginals)."""

    def __init__(self, encoder: nn.Module, input_shape: int | Sequence[int], corruption_rate: float = 0.6,
                 temperature: float = 1.0, head_dim: int = 128) -> None:
        super().__init__(encoder, input_shape)
        if not 0 < corruption_rate < 1:
            raise ValueError(f"corruption_rate must be in (0, 1), got {corruption_rate}")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.corruption_rate, self.temperature = corruption_rate, temperature
        self.head = _projection_head(output_dim(encoder, torch.zeros(1, *self.input_shape)), head_dim)
        self._pool: torch.Tensor | None = None

    def prepare(self, X: torch.Tensor) -> None:
        self._pool = X.flatten(1)

    def corrupt(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` with round(rate * d) features of each row drawn from the training set's marginals."""
        if self._pool is None:
            raise RuntimeError("SCARF draws corruptions from the training data: call fit(X) first")
        flat = x.flatten(1)
        n, d = flat.shape
        n_corrupt = max(1, round(self.corruption_rate * d))
        scores = torch.rand(n, d, generator=self._rng)  # drawn on the CPU generator, then moved
        mask = scores.argsort(dim=1)[:, :n_corrupt].to(x.device)
        donors = torch.randint(len(self._pool), (n, n_corrupt), generator=self._rng).to(x.device)
        corrupted = flat.clone()
        corrupted.scatter_(1, mask, self._pool[donors, mask])
        return corrupted.view_as(x)

    def loss(self, x: torch.Tensor) -> torch.Tensor:
        return nt_xent(self.head(self.encode(x)), self.head(self.encode(self.corrupt(x))), self.temperature)


class SimCLR(SelfSupervised):
    """Contrast two views of each row made by ``augment(x, generator)``."""

    def __init__(self, encoder: nn.Module, input_shape: int | Sequence[int], augment: Augment,
                 temperature: float = 0.5, head_dim: int = 128) -> None:
        super().__init__(encoder, input_shape)
        if not callable(augment):
            raise TypeError(f"augment must be a callable (x, generator) -> x, got {type(augment).__name__}")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.augment, self.temperature = augment, temperature
        self.head = _projection_head(output_dim(encoder, torch.zeros(1, *self.input_shape)), head_dim)

    def loss(self, x: torch.Tensor) -> torch.Tensor:
        views = [self.head(self.encode(self.augment(x, self._rng))) for _ in range(2)]
        return nt_xent(*views, self.temperature)


def _roll_last(x: torch.Tensor, shifts: torch.Tensor) -> torch.Tensor:
    """Roll each row of ``x`` by its own shift along the last dimension (a gather, no loop over rows)."""
    size = x.shape[-1]
    index = (torch.arange(size) - shifts.view(-1, 1)) % size
    return x.gather(-1, index.view(len(x), *([1] * (x.dim() - 2)), size).expand_as(x))


def image_augment(x: torch.Tensor, generator: torch.Generator | None = None, max_shift: int = 1,
                  noise: float = 0.1, erase: int = 3) -> torch.Tensor:
    """Views of small ``(n, c, h, w)`` images: a random shift of up to ``max_shift`` pixels each way (zero
    fill), Gaussian noise, and an ``erase`` x ``erase`` patch set to zero."""
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        raise ValueError(f"image_augment takes (n, channels, height, width) images, got "
                         f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
    n, _, h, w = x.shape
    if not 0 <= max_shift < min(h, w) or not 0 <= erase <= min(h, w) or not noise >= 0:
        raise ValueError(f"need 0 <= max_shift < {min(h, w)}, 0 <= erase <= {min(h, w)} and noise >= 0, got "
                         f"max_shift={max_shift}, erase={erase}, noise={noise}")
    padded = F.pad(x, (max_shift,) * 4)
    dy = torch.randint(0, 2 * max_shift + 1, (n,), generator=generator)
    dx = torch.randint(0, 2 * max_shift + 1, (n,), generator=generator)
    rows = (dy.view(n, 1) + torch.arange(h)).view(n, 1, h, 1).expand(n, x.shape[1], h, w + 2 * max_shift)
    out = padded.gather(2, rows)
    cols = (dx.view(n, 1) + torch.arange(w)).view(n, 1, 1, w).expand(n, x.shape[1], h, w)
    out = out.gather(3, cols)
    out = out + noise * torch.randn(out.shape, generator=generator)
    top = torch.randint(0, h - erase + 1, (n,), generator=generator)
    left = torch.randint(0, w - erase + 1, (n,), generator=generator)
    ys, xs = torch.arange(h).view(1, h, 1), torch.arange(w).view(1, 1, w)
    inside = ((ys >= top.view(n, 1, 1)) & (ys < top.view(n, 1, 1) + erase)
              & (xs >= left.view(n, 1, 1)) & (xs < left.view(n, 1, 1) + erase))
    return out.masked_fill(inside.unsqueeze(1), 0.0)


def series_augment(x: torch.Tensor, generator: torch.Generator | None = None, jitter: float = 0.1,
                   scale: float = 0.2, max_shift: int = 8) -> torch.Tensor:
    """Views of ``(n, c, length)`` series: random circular time shift, per-channel scaling, Gaussian jitter
    (the usual weak time-series augmentations of TS-TCC and the paper's SimCLR baseline)."""
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        raise ValueError(f"series_augment takes (n, channels, length) series, got "
                         f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
    if min(jitter, scale, max_shift) < 0:
        raise ValueError(f"jitter, scale and max_shift must be >= 0, got {jitter}, {scale}, {max_shift}")
    n, c, _ = x.shape
    shifts = torch.randint(-max_shift, max_shift + 1, (n,), generator=generator)
    out = _roll_last(x, shifts)
    out = out * (1 + scale * torch.randn(n, c, 1, generator=generator))
    return out + jitter * torch.randn(out.shape, generator=generator)
