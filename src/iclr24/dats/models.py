"""Meta-PINNs: one network for a whole family of PDE configurations.

Both take points ``coords`` (M, 2) = (t, x) and each point's configuration ``params`` (M, n_params), and
return u (M,). They are pointwise (each output depends on its own row only), so derivatives of the
summed output with respect to ``coords`` are the per-point derivatives the residual needs.

- :class:`ParametricPINN`: an MLP on (t, x, lambda), the configuration as an extra input.
- :class:`HyperPINN` (de Avila Belbute-Peres et al., 2021): a hypernetwork maps lambda to the weights
  of a small target MLP on (t, x).

Inputs are rescaled to [-1, 1] from the bounds given (the paper's code does this for t and x).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from iclr24.core.checks import check_int, check_tensor

__all__ = ["HyperPINN", "ParametricPINN"]

Bounds = Sequence[tuple[float, float]]


class _Rescale(nn.Module):
    """Affine map of each column from [lo, hi] to [-1, 1]."""

    def __init__(self, bounds: Bounds, name: str, count: int | None = None) -> None:
        super().__init__()
        bounds = [tuple(map(float, b)) for b in bounds]
        if any(len(b) != 2 or not b[1] >= b[0] or not all(map(math.isfinite, b)) for b in bounds) \
                or not bounds or (count is not None and len(bounds) != count):
            expected = f"{count} " if count is not None else ""
            raise ValueError(f"{name} must be {expected}finite (lo, hi) pairs with hi >= lo, got {bounds}")
        lo = torch.tensor([b[0] for b in bounds])
        half = torch.tensor([(b[1] - b[0]) / 2 or 1.0 for b in bounds])  # a single value maps to -1
        self.register_buffer("lo", lo)
        self.register_buffer("half_width", half)

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        return (v - self.lo) / self.half_width - 1


def _check_inputs(model: nn.Module, coords: torch.Tensor, params: torch.Tensor, n_params: int) -> None:
    check_tensor("coords", coords, ndim=2, shape_doc="(M, 2)")
    check_tensor("params", params, ndim=2, shape_doc="(M, n_params)")
    if coords.shape[1] != 2 or params.shape != (coords.shape[0], n_params):
        raise ValueError(f"coords must be (M, 2) and params (M, {n_params}); got {tuple(coords.shape)} and "
                         f"{tuple(params.shape)}")
    dtype = next(model.parameters()).dtype
    if coords.dtype != dtype or params.dtype != dtype:
        raise TypeError(f"coords and params must have the model's dtype {dtype} (convert them, or the model with "
                        f".to(dtype)), got {coords.dtype} and {params.dtype}")


class _MetaPINN(nn.Module):
    """What both meta-PINNs share: the input rescaling and the input checks."""

    def __init__(self, coord_bounds: Bounds, param_bounds: Bounds) -> None:
        super().__init__()
        self.n_params = len(param_bounds)
        self.coords_in = _Rescale(coord_bounds, "coord_bounds", count=2)
        self.params_in = _Rescale(param_bounds, "param_bounds")

    def _inputs(self, coords: torch.Tensor, params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Checked inputs, rescaled to [-1, 1]."""
        _check_inputs(self, coords, params, self.n_params)
        return self.coords_in(coords), self.params_in(params)


class ParametricPINN(_MetaPINN):
    """u(t, x; lambda) = MLP([t, x, lambda]) with tanh activations.

    Parameters
    ----------
    coord_bounds : [(t_min, t_max), (x_min, x_max)]
    param_bounds : one (lo, hi) per PDE parameter (the training configurations' range).
    hidden, depth : width and number of hidden layers.
    """

    def __init__(self, coord_bounds: Bounds, param_bounds: Bounds, hidden: int = 48, depth: int = 3) -> None:
        super().__init__(coord_bounds, param_bounds)
        check_int("hidden", hidden, minimum=1)
        check_int("depth", depth, minimum=1)
        layers: list[nn.Module] = []
        width = 2 + self.n_params
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.Tanh()]
            width = hidden
        layers.append(nn.Linear(width, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, coords: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat(self._inputs(coords, params), dim=1)).squeeze(1)


class HyperPINN(_MetaPINN):
    """A hypernetwork lambda -> weights of a target MLP on (t, x) (tanh), as in the paper's HyperPINN.

    Parameters
    ----------
    coord_bounds, param_bounds : as for :class:`ParametricPINN`.
    target_hidden, target_layers : the target MLP (the paper's convection config: 8 wide, 7 linear layers).
    hyper_hidden : hidden widths of the hypernetwork (ReLU), the paper's (32, 32, 32, 16).
    """

    def __init__(self, coord_bounds: Bounds, param_bounds: Bounds, target_hidden: int = 8, target_layers: int = 7,
                 hyper_hidden: Sequence[int] = (32, 32, 32, 16)) -> None:
        super().__init__(coord_bounds, param_bounds)
        check_int("target_hidden", target_hidden, minimum=1)
        check_int("target_layers", target_layers, minimum=2)
        widths = [2] + [target_hidden] * (target_layers - 1) + [1]
        self.shapes = list(zip(widths[1:], widths[:-1]))  # (out, in) of each target layer
        n_out = sum(o * i + o for o, i in self.shapes)
        layers: list[nn.Module] = []
        width = self.n_params
        for h in hyper_hidden:
            layers += [nn.Linear(width, check_int("hyper_hidden", h, minimum=1)), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, n_out))
        self.hyper = nn.Sequential(*layers)

    def target_weights(self, params: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The target network's (weight, bias) per layer for each configuration: (C, out, in), (C, out)."""
        flat = self.hyper(self.params_in(params))
        out, start = [], 0
        for o, i in self.shapes:
            w = flat[:, start:start + o * i].reshape(-1, o, i)
            b = flat[:, start + o * i:start + o * i + o]
            out.append((w, b))
            start += o * i + o
        return out

    def forward(self, coords: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
        h, _ = self._inputs(coords, params)
        # One hypernetwork pass per distinct configuration, then each point uses its configuration's weights.
        # The configurations are gathered from ``params`` itself, so gradients with respect to it flow.
        distinct, which = torch.unique(params.detach(), dim=0, return_inverse=True)
        first = torch.full((len(distinct),), len(params), dtype=torch.long, device=params.device)
        first = first.scatter_reduce(0, which, torch.arange(len(params), device=params.device), reduce="amin")
        configs = params[first]
        layers = self.target_weights(configs)
        for k, (w, b) in enumerate(layers):
            h = torch.einsum("moi,mi->mo", w[which], h) + b[which]
            if k < len(layers) - 1:
                h = torch.tanh(h)
        return h.squeeze(1)
