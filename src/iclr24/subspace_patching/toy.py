"""The paper's toy example (section 3) and a planted dormant-neuron MLP, where the illusion is certain.

Toy: ``x`` in R, hidden ``h = (x, x, 0)``, output ``y = h1 + 2 h3``. Dimension 1 carries the
feature and is read; dimension 2 moves with the feature but is never read (disconnected);
dimension 3 is read but always 0 (dormant). Patching along ``v = (e2 + e3)/sqrt(2)`` moves
``y`` exactly to the source's value, although e2 alone, e3 alone and both dimensions patched
fully do nothing: the patch activates the dormant dimension with the disconnected one's
variation.

Planted MLP: the same in an MLP with a residual stream. Neuron ``a`` copies the feature
(``W_out`` column 0: disconnected); neuron ``d`` has a very negative bias (always 0) and
writes the feature direction. The model's output does not depend on the MLP at all, yet a
1-d patch of the MLP's hidden activation along ``(e_a + e_d)/sqrt(2)`` moves it to the source.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from iclr24.subspace_patching.patching import patch_direction, patch_subspace

__all__ = ["PlantedDormantMLP", "toy_hidden", "toy_output", "toy_patches"]


def toy_hidden(x: Tensor) -> Tensor:
    """``h = (x, x, 0)``, ``(n, 3)``."""
    return torch.stack([x, x, torch.zeros_like(x)], -1)


def toy_output(h: Tensor) -> Tensor:
    """``y = h1 + 2 h3``."""
    return h[..., 0] + 2 * h[..., 2]


def toy_patches(x_base: Tensor, x_source: Tensor) -> dict[str, Tensor]:
    """The toy's output after each patch of the source's hidden state into the base's."""
    hb, hs = toy_hidden(x_base), toy_hidden(x_source)
    e = torch.eye(3, dtype=hb.dtype)
    return {
        "none": toy_output(hb),
        "e1 (the feature)": toy_output(patch_direction(hb, hs, e[0])),
        "(e2 + e3)/sqrt2 (illusory)": toy_output(patch_direction(hb, hs, (e[1] + e[2]) / math.sqrt(2))),
        "e2 (disconnected)": toy_output(patch_direction(hb, hs, e[1])),
        "e3 (dormant)": toy_output(patch_direction(hb, hs, e[2])),
        "span{e2, e3}": toy_output(patch_subspace(hb, hs, e[:, 1:])),
        "source": toy_output(hs),
    }


class PlantedDormantMLP(nn.Module):
    """``y = r . (resid + W_out ReLU(W_in resid + b))`` with ``resid = x r``, a feature ``x >= 0``:
    the MLP never matters.

    Hidden neurons: ``a`` (reads the feature, ``W_out`` column 0) and ``d`` (bias ``-10``,
    ``W_out`` column ``2 r``). ``hidden(x)`` and ``output_from_hidden(x, h)`` let a test patch
    the hidden activation.
    """

    def __init__(self) -> None:
        super().__init__()
        r = torch.tensor([0.6, 0.8])
        self.register_buffer("r", r)
        self.register_buffer("W_in", torch.stack([r, torch.zeros(2)]))  # (d_mlp, d_model)
        self.register_buffer("b_in", torch.tensor([0.0, -10.0]))
        self.register_buffer("W_out", torch.stack([torch.zeros(2), 2 * r], 1))  # (d_model, d_mlp)

    def hidden(self, x: Tensor) -> Tensor:
        return torch.relu((x[:, None] * self.r) @ self.W_in.T + self.b_in)

    def output_from_hidden(self, x: Tensor, h: Tensor) -> Tensor:
        return (x[:, None] * self.r + h @ self.W_out.T) @ self.r

    def forward(self, x: Tensor) -> Tensor:
        return self.output_from_hidden(x, self.hidden(x))
