"""Encoders to train and random networks to project with, for tables, time series and images.

The official code pairs each dataset with an encoder and a smaller target ("projector") of the same family:
a 4-layer MLP encoder with 2-layer MLP targets for tables (``Simple4LayerMLP`` / ``Simple2LayerMLP``), 1-D CNNs
for time series, 2-D CNNs for images. Any ``nn.Module`` mapping a batch to ``(batch, dim)`` works as either.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import nn

ProjectorFactory = Callable[[], nn.Module]


def as_shape(input_shape: int | Sequence[int]) -> tuple[int, ...]:
    """One input row's shape as a tuple of positive ints (an int is a number of features)."""
    shape = (input_shape,) if isinstance(input_shape, int) else tuple(input_shape)
    if not shape or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in shape):
        raise ValueError(f"input_shape must be a positive int or a tuple of them, got {input_shape!r}")
    return shape


def _flat_size(shape: Sequence[int]) -> int:
    return math.prod(int(s) for s in shape)


def mlp_encoder(input_shape: Sequence[int] | int, dim: int = 256, hidden: int = 256, depth: int = 4) -> nn.Sequential:
    """``depth`` linear layers with ReLU between them, flattening the input (the paper's tabular encoder)."""
    shape = as_shape(input_shape)
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    widths = [_flat_size(shape)] + [hidden] * (depth - 1) + [dim]
    layers: list[nn.Module] = [nn.Flatten()]
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        layers.append(nn.Linear(a, b))
        if i < depth - 1:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def conv1d_encoder(in_channels: int, length: int, dim: int | None = None, width: int = 32) -> nn.Sequential:
    """Three conv-BN-ReLU-pool blocks, flattened (the TS-TCC encoder the paper uses for HAR), for
    ``(batch, channels, length)`` series; a linear map to ``dim`` when given, else the flattened maps.

    Flattening keeps where in the series a pattern occurs, as the random conv projectors do; a global pool
    would make the encoder unable to express its own targets.
    """
    blocks: list[nn.Module] = []
    channels = [in_channels, width, 2 * width, 4 * width]
    for a, b in zip(channels[:-1], channels[1:]):
        blocks += [nn.Conv1d(a, b, kernel_size=8, padding=4, bias=False), nn.BatchNorm1d(b), nn.ReLU(),
                   nn.MaxPool1d(2, 2, padding=1)]
    conv = nn.Sequential(*blocks, nn.Flatten())
    with torch.no_grad():
        flat = conv.eval()(torch.zeros(1, in_channels, length)).shape[1]
    return nn.Sequential(*conv, nn.Linear(flat, dim)) if dim else conv.train()


def conv2d_encoder(in_channels: int, dim: int = 128, width: int = 32) -> nn.Sequential:
    """Two conv-BN-ReLU blocks (the second pooled) and a global average pool, for small ``(batch, c, h, w)`` images."""
    return nn.Sequential(
        nn.Conv2d(in_channels, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
        nn.Conv2d(width, 2 * width, 3, padding=1, bias=False), nn.BatchNorm2d(2 * width), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(2 * width, 4 * width, 3, padding=1, bias=False), nn.BatchNorm2d(4 * width), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * width, dim),
    )


def mlp_projector(input_shape: Sequence[int] | int, dim: int = 256, hidden: int = 256) -> ProjectorFactory:
    """Factory of random 2-layer MLPs (the official tabular target); works on any input by flattening it."""
    return lambda: mlp_encoder(input_shape, dim=dim, hidden=hidden, depth=2)


def conv1d_projector(in_channels: int, length: int, dim: int = 256, width: int = 16) -> ProjectorFactory:
    """Factory of random two-block 1-D CNNs followed by two linear maps (the shape of the official HAR target)."""
    def build() -> nn.Module:
        conv = nn.Sequential(
            nn.Conv1d(in_channels, width, 8, padding=4, bias=False), nn.ReLU(), nn.MaxPool1d(2, 2, padding=1),
            nn.Conv1d(width, 2 * width, 8, padding=4, bias=False), nn.ReLU(), nn.MaxPool1d(2, 2, padding=1),
            nn.Flatten())
        with torch.no_grad():
            flat = conv(torch.zeros(1, in_channels, length)).shape[1]
        return nn.Sequential(conv, nn.Linear(flat, 256), nn.Linear(256, dim))
    return build


def conv2d_projector(in_channels: int, size: int, dim: int = 256, width: int = 8) -> ProjectorFactory:
    """Factory of random two-conv, one-pool 2-D CNNs with a linear read-out (the official Kvasir target, one block)."""
    def build() -> nn.Module:
        conv = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1), nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, 2), nn.Flatten())
        with torch.no_grad():
            flat = conv(torch.zeros(1, in_channels, size, size)).shape[1]
        return nn.Sequential(conv, nn.Linear(flat, dim))
    return build


def output_dim(module: nn.Module, example: torch.Tensor) -> int:
    """Width of ``module``'s output on one example (run in eval mode, without gradients)."""
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            out = module(example[:1])
    finally:
        module.train(was_training)
    if out.dim() != 2:
        raise ValueError(f"a representation must be (batch, dim); {type(module).__name__} gave shape "
                         f"{tuple(out.shape)}")
    return int(out.shape[1])
