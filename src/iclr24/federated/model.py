"""The paper's two-layer CNN and its feature-learning lens: signal learning vs noise memorisation."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from iclr24.core import check_int, check_number, check_tensor

__all__ = ["TwoLayerCNN", "cnn_logits", "noise_memorisation", "signal_learning"]


def cnn_logits(weight: Tensor, x: Tensor, power: float = 1.0) -> Tensor:
    """:class:`TwoLayerCNN`'s forward pass as a pure function of its filters, without input checks, so that
    ``torch.func.vmap`` can run many clients' models at once.

    Shapes:
        weight: ``(2, m, d)``; x: ``(n, patches, d)``; output: ``(n,)``.
    """
    pre = torch.einsum("npd,jrd->njrp", x.to(weight.dtype), weight)
    act = torch.relu(pre)
    if power != 1.0:
        act = act.pow(power)
    per_sign = act.sum(dim=(2, 3)) / weight.shape[1]   # (n, 2): F_{+1}, F_{-1}
    return per_sign[:, 0] - per_sign[:, 1]


class TwoLayerCNN(nn.Module):
    """``f(W, x) = F_{+1}(W_{+1}, x) - F_{-1}(W_{-1}, x)``, ``F_j = (1/m) sum_r sum_p sigma(<w_{j,r}, x^(p)>)``.

    ``m`` filters per output sign, shared over the patches; the second layer is fixed at ``+-1/m`` as in
    the paper, so only ``weight`` (shape ``(2, m, d)``: index 0 is ``j = +1``, 1 is ``j = -1``) is trained.
    ``sigma`` is ReLU raised to ``power`` (1: ReLU; the theory of Cao et al. uses ``power > 2``). The
    filters start at ``N(0, init_std^2)``, drawn from ``generator`` when one is given (``init_std=0`` gives
    zero filters, which gradient descent cannot move: ReLU's gradient at 0 is 0).

    Shapes:
        x: ``(n, patches, d)``; output: ``(n,)`` logits, positive for ``y = +1``.
    """

    def __init__(self, d: int, m: int = 10, *, init_std: float = 0.01, power: float = 1.0,
                 generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.d = check_int("d", d, minimum=1)
        self.m = check_int("m", m, minimum=1)
        self.power = check_number("power", power, minimum=1.0)
        self.init_std = check_number("init_std", init_std, minimum=0.0)
        self.weight = nn.Parameter(torch.empty(2, m, d))
        self.reset_parameters(generator)

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        with torch.no_grad():
            if self.init_std > 0:
                self.weight.normal_(0.0, self.init_std, generator=generator)
            else:
                self.weight.zero_()

    def forward(self, x: Tensor) -> Tensor:
        check_tensor("x", x, ndim=3, shape_doc="(n, patches, d)")
        if x.shape[-1] != self.d:
            raise ValueError(f"x must have d={self.d} features per patch, got shape {tuple(x.shape)}")
        if not x.is_floating_point():
            raise TypeError(f"x must be a floating-point tensor, got {str(x.dtype).replace('torch.', '')}")
        return cnn_logits(self.weight, x, self.power)

    def extra_repr(self) -> str:
        return f"d={self.d}, m={self.m}, power={self.power:g}, init_std={self.init_std:g}"


def _check_cnn(model) -> None:
    if not isinstance(model, TwoLayerCNN):
        raise TypeError(f"model must be a TwoLayerCNN (the coefficients are defined for its filters), "
                        f"got {type(model).__name__}")


def signal_learning(model: TwoLayerCNN, mu: Tensor) -> Tensor:
    """``max_r <w_{j,r}, j * mu>`` for ``j = +1, -1``: how much each sign's filters have learned the signal.

    The paper's signal coefficient ``gamma_{j,r}`` (the weight's component along ``mu``, times ``||mu||^2``);
    both entries grow when the network learns the feature. Returns shape ``(2,)``.
    """
    _check_cnn(model)
    mu = check_tensor("mu", mu, ndim=1, shape_doc="(d,)")
    if mu.shape[0] != model.d:
        raise ValueError(f"mu must have the model's d={model.d} entries, got {mu.shape[0]}")
    signs = torch.tensor([1.0, -1.0], dtype=model.weight.dtype)
    return (model.weight.detach() @ mu.to(model.weight.dtype) * signs[:, None]).amax(dim=1)


def noise_memorisation(model: TwoLayerCNN, noise: Tensor, y: Tensor) -> Tensor:
    """``max_r <w_{y_i,r}, xi_i>`` per training sample: how much the filters of the sample's own label have
    memorised its noise patch (the paper's ``rho_{y_i,r,i}``). ``noise`` ``(n, d)``, ``y`` +-1 ``(n,)``;
    returns ``(n,)``."""
    _check_cnn(model)
    noise = check_tensor("noise", noise, ndim=2, shape_doc="(n, d)")
    if noise.shape[1] != model.d:
        raise ValueError(f"noise must have the model's d={model.d} columns, got shape {tuple(noise.shape)}")
    y = check_tensor("y", y, ndim=1, shape_doc="(n,)")
    if y.shape[0] != noise.shape[0] or not bool(((y == 1) | (y == -1)).all()):
        raise ValueError(f"y must hold one +-1 label per noise row ({noise.shape[0]}), got {y.shape[0]} labels "
                         f"with values {sorted(set(y.unique().tolist()))[:5]}")
    inner = torch.einsum("jrd,nd->njr", model.weight.detach(), noise.to(model.weight.dtype))
    own = torch.where((y > 0)[:, None], inner[:, 0], inner[:, 1])      # filters of the sample's label
    return own.amax(dim=1)
