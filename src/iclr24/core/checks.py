"""Input checks for the public boundary: each error names the argument, its value and what was expected."""

from __future__ import annotations

import math
import numbers
from collections.abc import Collection
from typing import Any

import numpy as np
import torch

__all__ = ["check_finite", "check_int", "check_number", "check_same_shape", "check_tensor"]


def check_int(
    name: str, value: Any, *, minimum: int | None = None, power_of_two: bool = False
) -> int:
    """``value`` as an int, or a ValueError/TypeError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if power_of_two and (value < 1 or value & (value - 1)):
        raise ValueError(f"{name} must be a power of two, got {value}")
    return value


def check_number(name: str, value: Any, *, minimum: float | None = None, exclusive: bool = False,
                 maximum: float | None = None) -> float:
    """``value`` (a Python, numpy or 0-d tensor real number) as a finite float within the bounds, or a
    TypeError/ValueError naming ``name``."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.dtype.is_complex \
            and value.dtype != torch.bool:
        value = value.item()
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if minimum is not None and (value <= minimum if exclusive else value < minimum):
        raise ValueError(f"{name} must be {'>' if exclusive else '>='} {minimum:g}, got {value:g}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum:g}, got {value:g}")
    return value


def check_finite(name: str, x: torch.Tensor) -> torch.Tensor:
    """Reject NaN/inf rather than let them propagate."""
    if x.is_floating_point() and not bool(torch.isfinite(x).all()):
        bad = int((~torch.isfinite(x)).sum())
        raise ValueError(f"{name} must be finite, found {bad} NaN/inf entries")
    return x


def check_tensor(
    name: str,
    x: Any,
    *,
    ndim: int | None = None,
    min_ndim: int | None = None,
    dtypes: Collection[torch.dtype] | None = None,
    finite: bool = True,
    shape_doc: str = "",
) -> torch.Tensor:
    """Check a tensor argument's type, rank, dtype and values.

    ``shape_doc`` (e.g. ``"(batch, heads, n, d)"``) is quoted in rank errors.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    expected = f" {shape_doc}" if shape_doc else ""
    if ndim is not None and x.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions{expected}, got shape {tuple(x.shape)}")
    if min_ndim is not None and x.dim() < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimensions{expected}, got shape {tuple(x.shape)}")
    if dtypes is not None and x.dtype not in dtypes:
        names = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"{name} must have dtype in ({names}), got {str(x.dtype).replace('torch.', '')}")
    if finite:
        check_finite(name, x)
    return x


def check_same_shape(shape_doc: str, *, ndim: int | None = None, min_ndim: int | None = None,
                     **tensors: Any) -> None:
    """Tensors that must share one shape (e.g. a rollout's ``(T, B)`` rewards and log-probabilities): each is
    checked with :func:`check_tensor` (NaN allowed), then their shapes against each other."""
    for name, x in tensors.items():
        check_tensor(name, x, ndim=ndim, min_ndim=min_ndim, finite=False, shape_doc=shape_doc)
    shapes = {name: tuple(x.shape) for name, x in tensors.items()}
    if len(set(shapes.values())) > 1:
        raise ValueError(f"{_listed(shapes)} must share one {shape_doc} shape, got "
                         f"{_listed([str(s) for s in shapes.values()])}")


def _listed(items) -> str:
    """``"a, b and c"``."""
    items = list(items)
    return ", ".join(items[:-1]) + f" and {items[-1]}" if len(items) > 1 else "".join(items)
