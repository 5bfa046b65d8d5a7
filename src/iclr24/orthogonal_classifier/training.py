"""Training loops the reproduction shares: plain supervised, experience replay for continual learning, and the
three imbalanced-learning variants (none, mixup, arc-mixup with masking). Small MLPs on digits, CPU."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from iclr24.orthogonal_classifier.classifier import (
    FixedNonNegativeOrthogonalClassifier,
    _beta_icdf,
    arc_mixup,
    arc_mixup_loss,
    masked_cross_entropy,
)

__all__ = ["Net", "continual_er", "evaluate", "train_classifier", "train_imbalanced"]


class Net(nn.Module):
    """An MLP encoder with ReLU features (non-negative, as the fixed classifier needs) and a classifier head."""

    def __init__(self, in_features: int, hidden: tuple[int, ...], head: nn.Module) -> None:
        super().__init__()
        layers, width = [], in_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        self.encoder, self.head = nn.Sequential(*layers), head

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.encoder(x))


def _optimizer(net: nn.Module, lr: float, steps: int):
    optimizer = torch.optim.SGD([p for p in net.parameters() if p.requires_grad], lr=lr, momentum=0.9,
                                weight_decay=5e-4)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * s / steps)))


def _update(optimizer, schedule, loss: Tensor) -> None:
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    schedule.step()


def train_classifier(net: Net, X: Tensor, y: Tensor, *, epochs: int, lr: float = 0.05, batch_size: int = 128,
                     generator: torch.Generator | None = None,
                     checkpoint: Callable[[int], None] | None = None) -> Net:
    """Cross-entropy with SGD (momentum 0.9, weight decay 5e-4, cosine schedule); ``checkpoint(epoch)`` after
    each epoch."""
    steps = epochs * math.ceil(len(y) / batch_size)
    optimizer, schedule = _optimizer(net, lr, steps)
    for epoch in range(epochs):
        net.train()
        for batch in torch.randperm(len(y), generator=generator).split(batch_size):
            loss = F.cross_entropy(net(X[batch]), y[batch])
            _update(optimizer, schedule, loss)
        if checkpoint is not None:
            checkpoint(epoch + 1)
    return net.eval()


@torch.no_grad()
def evaluate(net: Net, X: Tensor, y: Tensor, num_classes: int) -> tuple[float, float]:
    """``(accuracy, balanced accuracy)`` (the mean of per-class recalls)."""
    net.eval()
    pred = net(X).argmax(1)
    recalls = [float((pred[y == c] == c).float().mean()) for c in range(num_classes) if (y == c).any()]
    return float((pred == y).float().mean()), sum(recalls) / len(recalls)


def continual_er(net: Net, tasks: list[tuple[Tensor, Tensor]], *, epochs: int, buffer_size: int, lr: float = 0.05,
                 batch_size: int = 32, generator: torch.Generator | None = None, masked: bool = True):
    """Experience replay over ``tasks`` (class-incremental), yielding ``net`` after each task so the caller can
    evaluate it. Each step trains on a batch of the current task plus a batch drawn from a reservoir buffer of
    ``buffer_size`` past samples, with the softmax masked to the classes in the combined batch (``masked``)."""
    buffer_x, buffer_y, seen = [], [], 0
    for X, y in tasks:
        steps = epochs * math.ceil(len(y) / batch_size)
        optimizer, schedule = _optimizer(net, lr, steps)
        for _ in range(epochs):
            net.train()
            for batch in torch.randperm(len(y), generator=generator).split(batch_size):
                xb, yb = X[batch], y[batch]
                if buffer_x:
                    replay = torch.randint(len(buffer_x), (batch_size,), generator=generator)
                    xb = torch.cat([xb, torch.stack([buffer_x[i] for i in replay])])
                    yb = torch.cat([yb, torch.stack([buffer_y[i] for i in replay])])
                logits = net(xb)
                loss = masked_cross_entropy(logits, yb) if masked else F.cross_entropy(logits, yb)
                _update(optimizer, schedule, loss)
        for xi, yi in zip(X, y):  # reservoir sampling over the stream
            seen += 1
            if len(buffer_x) < buffer_size:
                buffer_x.append(xi)
                buffer_y.append(yi)
            else:
                j = int(torch.randint(seen, (1,), generator=generator))
                if j < buffer_size:
                    buffer_x[j], buffer_y[j] = xi, yi
        yield net.eval()


def train_imbalanced(net: Net, X: Tensor, y: Tensor, *, method: str, epochs: int, alpha: float = 1.0,
                     lr: float = 0.05, batch_size: int = 128, generator: torch.Generator | None = None) -> Net:
    """``method``: ``"none"`` (cross-entropy), ``"mixup"`` (linear mixup with soft targets) or ``"arc_mixup"``
    (features masked to the batch's classes, loss ``-log <f~, m>``; needs the fixed orthogonal classifier).
    Both mixups pair each sample with a class-balanced partner, so they differ only in how they mix."""
    if method not in ("none", "mixup", "arc_mixup"):
        raise ValueError(f"method must be 'none', 'mixup' or 'arc_mixup', got {method!r}")
    if method == "arc_mixup" and not isinstance(net.head, FixedNonNegativeOrthogonalClassifier):
        raise ValueError("arc_mixup needs a FixedNonNegativeOrthogonalClassifier head")
    present = y.unique().tolist()  # partners come from the classes that have samples
    by_class = [torch.nonzero(y == c).flatten() for c in present]
    steps = epochs * math.ceil(len(y) / batch_size)
    optimizer, schedule = _optimizer(net, lr, steps)
    for _ in range(epochs):
        net.train()
        for batch in torch.randperm(len(y), generator=generator).split(batch_size):
            xa, ya = X[batch], y[batch]
            if method == "none":
                loss = F.cross_entropy(net(xa), ya)
            else:  # a class-balanced partner for each sample (both mixups): a uniform class, then a uniform member
                classes = torch.randint(len(present), (len(batch),), generator=generator)
                partner = torch.stack([by_class[c][torch.randint(len(by_class[c]), (1,), generator=generator)][0]
                                       for c in classes.tolist()])
                xb, yb = X[partner], y[partner]
                if method == "mixup":
                    lam = _beta_icdf(torch.distributions.Beta(float(alpha), float(alpha)),
                                     torch.rand(len(batch), generator=generator))
                    mixed = lam[:, None] * xa + (1 - lam[:, None]) * xb
                    logp = F.log_softmax(net(mixed), -1)
                    loss = -(lam * logp.gather(1, ya[:, None])[:, 0]
                             + (1 - lam) * logp.gather(1, yb[:, None])[:, 0]).mean()
                else:
                    mixed, a = arc_mixup(xa, xb, alpha, generator=generator)
                    loss = arc_mixup_loss(net.encoder(mixed), net.head, ya, yb, a)
            _update(optimizer, schedule, loss)
    return net.eval()
