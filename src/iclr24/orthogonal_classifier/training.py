"""Training loops the reproduction shares: plain supervised, experience replay for continual learning, and the
three imbalanced-learning variants (none, mixup, arc-mixup with masking). Small MLPs on digits, CPU."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from iclr24.core.checks import check_int
from iclr24.orthogonal_classifier.classifier import (
    FixedNonNegativeOrthogonalClassifier,
    _beta_icdf,
    arc_mixup,
    arc_mixup_loss,
    class_balanced_pairs,
    masked_cross_entropy,
)

__all__ = ["ARC_VARIANTS", "Net", "ReservoirBuffer", "continual_er", "evaluate", "train_classifier",
           "train_imbalanced"]

#: How arc-mixup pairs and mixes (``train_imbalanced(..., arc_variant=)``):
#: ``"mask"``: the official ``mask`` trainer, which every official long-tailed FNO config uses: one lambda a batch,
#: class-balanced in-batch pairs from different classes (``class_balanced_pairs``), inputs mixed with the arc
#: weights, features masked to the blocks of the batch's classes;
#: ``"cls_cbs"``: the official ``arc_mixup_cls_cbs``: the same pairs and lambda, inputs mixed convexly with
#: ``a / (a + sqrt(1 - a^2))``, the arc weights only in the target;
#: ``"per_sample"``: this package's first reading: a lambda per sample and a partner drawn class-balanced from the
#: whole training set (possibly of the same class), inputs mixed with the arc weights.
ARC_VARIANTS = ("mask", "cls_cbs", "per_sample")


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


class ReservoirBuffer:
    """A replay buffer of at most ``capacity`` samples that holds a uniform sample of the stream it has seen
    (reservoir sampling, Vitter's algorithm R): the n-th sample offered replaces a random slot with probability
    ``capacity / n``."""

    def __init__(self, capacity: int, *, generator: torch.Generator | None = None) -> None:
        check_int("capacity", capacity, minimum=0)
        self.capacity, self.generator = capacity, generator
        self.x: list[Tensor] = []
        self.y: list[Tensor] = []
        self.seen = 0

    def __len__(self) -> int:
        return len(self.x)

    def add(self, x: Tensor, y: Tensor) -> None:
        """Offer one sample ``(x, y)`` from the stream."""
        self.seen += 1
        if len(self.x) < self.capacity:
            self.x.append(x)
            self.y.append(y)
            return
        slot = int(torch.randint(self.seen, (1,), generator=self.generator))
        if slot < self.capacity:
            self.x[slot], self.y[slot] = x, y

    def sample(self, n: int) -> tuple[Tensor, Tensor]:
        """``n`` samples drawn uniformly with replacement: ``(x (n, ...), y (n,))``."""
        if not self.x:
            raise ValueError("cannot sample from an empty ReservoirBuffer")
        rows = torch.randint(len(self.x), (n,), generator=self.generator).tolist()
        return torch.stack([self.x[i] for i in rows]), torch.stack([self.y[i] for i in rows])


def continual_er(net: Net, tasks: list[tuple[Tensor, Tensor]], *, epochs: int, buffer_size: int, lr: float = 0.05,
                 batch_size: int = 32, generator: torch.Generator | None = None, masked: bool = True,
                 buffer: ReservoirBuffer | None = None):
    """Experience replay over ``tasks`` (class-incremental), yielding ``net`` after each task so the caller can
    evaluate it. Each step trains on a batch of the current task plus a batch drawn from a reservoir buffer of
    ``buffer_size`` past samples, with the softmax masked to the classes in the combined batch (``masked``). A task's
    samples enter the buffer after the task (``buffer``: pass one to inspect it; it replaces ``buffer_size``)."""
    if buffer is None:
        buffer = ReservoirBuffer(buffer_size, generator=generator)
    for X, y in tasks:
        steps = epochs * math.ceil(len(y) / batch_size)
        optimizer, schedule = _optimizer(net, lr, steps)
        for _ in range(epochs):
            net.train()
            for batch in torch.randperm(len(y), generator=generator).split(batch_size):
                xb, yb = X[batch], y[batch]
                if len(buffer):
                    replay_x, replay_y = buffer.sample(batch_size)
                    xb, yb = torch.cat([xb, replay_x]), torch.cat([yb, replay_y])
                logits = net(xb)
                loss = masked_cross_entropy(logits, yb) if masked else F.cross_entropy(logits, yb)
                _update(optimizer, schedule, loss)
        for xi, yi in zip(X, y):  # the task's samples stream into the reservoir
            buffer.add(xi, yi)
        yield net.eval()


def train_imbalanced(net: Net, X: Tensor, y: Tensor, *, method: str, epochs: int, alpha: float = 1.0,
                     arc_variant: str = "mask", lr: float = 0.05, batch_size: int = 128,
                     generator: torch.Generator | None = None) -> Net:
    """``method``: ``"none"`` (cross-entropy), ``"mixup"`` (linear mixup with soft targets, a lambda and a
    class-balanced partner from the training set per sample) or ``"arc_mixup"`` (features masked to the batch's
    classes, loss ``-log <f~, m>``; needs the fixed orthogonal classifier; ``arc_variant`` picks the official
    ``"mask"`` trainer (default), the official ``"cls_cbs"`` convex input mix, or ``"per_sample"``: see
    :data:`ARC_VARIANTS`)."""
    if method not in ("none", "mixup", "arc_mixup"):
        raise ValueError(f"method must be 'none', 'mixup' or 'arc_mixup', got {method!r}")
    if arc_variant not in ARC_VARIANTS:
        raise ValueError(f"arc_variant must be one of {ARC_VARIANTS}, got {arc_variant!r}")
    if method == "arc_mixup" and not isinstance(net.head, FixedNonNegativeOrthogonalClassifier):
        raise ValueError("arc_mixup needs a FixedNonNegativeOrthogonalClassifier head")
    present = y.unique().tolist()  # training-set partners come from the classes that have samples
    by_class = [torch.nonzero(y == c).flatten() for c in present]

    def training_set_partners(n: int) -> Tensor:  # a uniform class, then a uniform member
        classes = torch.randint(len(present), (n,), generator=generator)
        return torch.stack([by_class[c][torch.randint(len(by_class[c]), (1,), generator=generator)][0]
                            for c in classes.tolist()])

    steps = epochs * math.ceil(len(y) / batch_size)
    optimizer, schedule = _optimizer(net, lr, steps)
    for _ in range(epochs):
        net.train()
        for batch in torch.randperm(len(y), generator=generator).split(batch_size):
            if method == "none":
                loss = F.cross_entropy(net(X[batch]), y[batch])
            elif method == "mixup":
                xa, ya = X[batch], y[batch]
                partner = training_set_partners(len(batch))
                xb, yb = X[partner], y[partner]
                lam = _beta_icdf(alpha, torch.rand(len(batch), generator=generator))
                logp = F.log_softmax(net(lam[:, None] * xa + (1 - lam[:, None]) * xb), -1)
                loss = -(lam * logp.gather(1, ya[:, None])[:, 0] + (1 - lam) * logp.gather(1, yb[:, None])[:, 0]).mean()
            elif arc_variant == "per_sample":
                xa, ya = X[batch], y[batch]
                partner = training_set_partners(len(batch))
                mixed, a = arc_mixup(xa, X[partner], alpha, mixing="arc", per_sample=True, generator=generator)
                loss = arc_mixup_loss(net.encoder(mixed), net.head, ya, y[partner], a)
            else:
                loss = _official_arc_mixup_step(net, X[batch], y[batch], alpha, arc_variant, generator)
            _update(optimizer, schedule, loss)
    return net.eval()


def _official_arc_mixup_step(net: Net, x: Tensor, y: Tensor, alpha: float, arc_variant: str,
                             generator: torch.Generator | None) -> Tensor:
    """One batch of the official arc-mixup: class-balanced pairs from different classes of the batch, one lambda,
    features masked to the blocks of every class in the batch. A batch of a single class has no partner: it trains
    on its own samples against its own rows (``a = 1``), where the official sampler would fail."""
    classes = y.unique()
    if len(classes) < 2:
        a = torch.ones(len(y))
        return arc_mixup_loss(net.encoder(x), net.head, y, y, a, classes=classes)
    rows_a, rows_b = class_balanced_pairs(y, generator=generator)
    mixed, a = arc_mixup(x[rows_a], x[rows_b], alpha, mixing="arc" if arc_variant == "mask" else "convex",
                         generator=generator)
    return arc_mixup_loss(net.encoder(mixed), net.head, y[rows_a], y[rows_b], a, classes=classes)
