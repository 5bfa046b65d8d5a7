"""The three kinds of network the paper compares: standard, PGD-adversarial and certified (IBP) training."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from iclr24.core.checks import check_int, check_number, check_tensor

__all__ = ["TRAINING_KINDS", "ibp_logit_bounds", "make_mlp", "pgd_attack", "train"]

TRAINING_KINDS = ("standard", "pgd", "ibp")


def make_mlp(n_inputs: int = 64, hidden: tuple[int, ...] = (64, 64, 32), n_classes: int = 10) -> nn.Sequential:
    """A ReLU MLP as an ``nn.Sequential`` the verifiers read."""
    check_int("n_inputs", n_inputs, minimum=1)
    check_int("n_classes", n_classes, minimum=2)
    for i, h in enumerate(hidden):
        check_int(f"hidden[{i}]", h, minimum=1)
    layers, width = [], n_inputs
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    return nn.Sequential(*layers, nn.Linear(width, n_classes))


def pgd_attack(model: nn.Module, x: Tensor, y: Tensor, eps: float, steps: int = 10, clip=(0.0, 1.0)) -> Tensor:
    """L-inf PGD (Madry et al.) from a random start, step ``eps / 4``; inputs stay in ``clip``."""
    eps = check_number("eps", eps, minimum=0.0, exclusive=True)
    check_int("steps", steps, minimum=0)
    check_tensor("x", x, min_ndim=1, dtypes=(torch.float16, torch.bfloat16, torch.float32, torch.float64),
                 finite=False)
    if not isinstance(y, Tensor) or y.is_floating_point() or y.dtype == torch.bool:
        got = str(y.dtype).replace("torch.", "") if isinstance(y, Tensor) else type(y).__name__
        raise TypeError(f"y must be an integer tensor of class indices, got {got}")
    if y.shape != x.shape[:1]:
        raise ValueError(f"y must hold one class index per row of x ({x.shape[0]},), got shape {tuple(y.shape)}")
    step = eps / 4
    delta = (torch.rand_like(x) * 2 - 1) * eps
    for _ in range(steps):
        delta.requires_grad_(True)
        loss = F.cross_entropy(model((x + delta).clamp(*clip)), y)
        (grad,) = torch.autograd.grad(loss, delta)
        delta = (delta.detach() + step * grad.sign()).clamp(-eps, eps)
    return (x + delta).clamp(*clip).detach()


def ibp_logit_bounds(model: nn.Sequential, x: Tensor, eps: float, clip=(0.0, 1.0)) -> tuple[Tensor, Tensor]:
    """Differentiable interval bounds of the logits over the L-inf ball (Gowal et al., 2018)."""
    lo, hi = (x - eps).clamp(*clip), (x + eps).clamp(*clip)
    for layer in model:
        if isinstance(layer, nn.Linear):
            mid, rad = (hi + lo) / 2, (hi - lo) / 2
            mid, rad = layer(mid), rad @ layer.weight.abs().T
            lo, hi = mid - rad, mid + rad
        elif isinstance(layer, nn.ReLU):
            lo, hi = lo.clamp_min(0), hi.clamp_min(0)
        elif not isinstance(layer, nn.Flatten):
            raise ValueError(f"ibp_logit_bounds supports Linear, ReLU and Flatten, got {type(layer).__name__}")
    return lo, hi


def _worst_case_logits(model, x, y, eps):
    lo, hi = ibp_logit_bounds(model, x, eps)
    true = F.one_hot(y, lo.shape[-1]).bool()
    return torch.where(true, lo, hi)  # the true class at its lowest, every other at its highest


def train(model: nn.Sequential, X: Tensor, y: Tensor, kind: str = "standard", *, eps: float = 0.02, epochs: int = 20,
          lr: float = 1e-3, batch_size: int = 64, generator: torch.Generator | None = None,
          progress=None) -> nn.Sequential:
    """Train ``model`` on ``(X, y)``.

    ``kind``: ``"standard"`` (cross-entropy), ``"pgd"`` (on PGD examples at ``eps``) or
    ``"ibp"`` (certified: cross-entropy mixed with the IBP worst case, ``eps`` and the mix
    ramped up over the first half of training, as in Gowal et al.).
    """
    if kind not in TRAINING_KINDS:
        raise ValueError(f"unknown training kind {kind!r}; expected one of {TRAINING_KINDS}")
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    n = X.shape[0]
    for epoch in range(epochs):
        ramp = min(1.0, (epoch + 1) / max(1, epochs // 2))
        order = torch.randperm(n, generator=generator)
        for start in range(0, n, batch_size):
            idx = order[start:start + batch_size]
            xb, yb = X[idx], y[idx]
            if kind == "pgd":
                loss = F.cross_entropy(model(pgd_attack(model, xb, yb, eps)), yb)
            elif kind == "ibp":
                mix = 0.5 * ramp
                loss = ((1 - mix) * F.cross_entropy(model(xb), yb)
                        + mix * F.cross_entropy(_worst_case_logits(model, xb, yb, eps * ramp), yb))
            else:
                loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
        if progress is not None:
            progress.advance(loss=loss.item())
    return model
