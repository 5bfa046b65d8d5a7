"""A generated instruction-following benchmark for parameter-efficient multi-task adaptation, and its
training loop.

No pretrained T5 or P3 mixture exists offline, so the paper's setting is rebuilt in miniature:

* *Skills*: ``n_skills`` random linear classifiers of a feature vector ``x``, ``f_k(x) = argmax_c
  (W_k x)_c`` over ``n_classes`` classes.
* *Instructions*: a one-hot skill ``k`` and a one-hot label shift ``j``, appended to ``x``; the task
  ``(k, j)`` asks for ``(f_k(x) + j) mod C``. Tasks with the same skill and different shifts
  disagree on every input, so one set of adapter weights cannot serve them all: the conflicting
  mixture the paper's routers are meant to resolve.
* *Pretraining*: the base model learns every skill with shift 0 (one task family), then is frozen.
* *Multi-task adaptation*: a mixture of ``(k, j)`` tasks with ``j >= 1``; *held-out tasks* are the
  remaining pairs, each with a skill and a shift seen in training but never together (the
  zero-shot generalisation the paper measures on held-out P3 tasks).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from iclr24.core import check_int

__all__ = ["SkillTasks", "Trainer", "accuracy", "fit", "mlp_base"]


@dataclass(frozen=True)
class SkillTasks:
    """The task family: skill weights drawn from ``seed``; tasks are ``(skill, shift)`` pairs."""

    n_features: int = 16
    n_skills: int = 8
    n_classes: int = 4
    seed: int = 0

    def __post_init__(self) -> None:
        check_int("n_features", self.n_features, minimum=1)
        check_int("n_skills", self.n_skills, minimum=1)
        check_int("n_classes", self.n_classes, minimum=2)
        g = torch.Generator().manual_seed(self.seed)
        object.__setattr__(self, "skill_weights",
                           torch.randn(self.n_skills, self.n_classes, self.n_features, generator=g))

    @property
    def input_dim(self) -> int:
        return self.n_features + self.n_skills + self.n_classes

    def pretraining_tasks(self) -> list[tuple[int, int]]:
        return [(k, 0) for k in range(self.n_skills)]

    def adaptation_split(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """(training tasks, held-out tasks): skill k's held-out shift is ``1 + k mod (C - 1)``, so every
        shift is held out for some skills and trained with the others."""
        held_out = [(k, 1 + k % (self.n_classes - 1)) for k in range(self.n_skills)]
        train = [(k, j) for k in range(self.n_skills) for j in range(1, self.n_classes) if (k, j) not in held_out]
        return train, held_out

    def sample(self, tasks: list[tuple[int, int]], n_per_task: int,
               generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(X, y, task)``: ``n_per_task`` examples of each task; ``task`` indexes ``tasks``.

        Shapes: X ``(n, input_dim)``, y and task ``(n,)`` with ``n = len(tasks) * n_per_task``.
        """
        check_int("n_per_task", n_per_task, minimum=1)
        X, y, index = [], [], []
        for t, (k, j) in enumerate(tasks):
            if not (0 <= k < self.n_skills and 0 <= j < self.n_classes):
                raise ValueError(f"task {(k, j)} is outside {self.n_skills} skills x {self.n_classes} shifts")
            x = torch.randn(n_per_task, self.n_features, generator=generator)
            instruction = torch.zeros(n_per_task, self.n_skills + self.n_classes)
            instruction[:, k] = 1.0
            instruction[:, self.n_skills + j] = 1.0
            X.append(torch.cat([x, instruction], dim=1))
            y.append((x @ self.skill_weights[k].T).argmax(dim=1).add(j).remainder(self.n_classes))
            index.append(torch.full((n_per_task,), t))
        return torch.cat(X), torch.cat(y), torch.cat(index)


def mlp_base(input_dim: int, hidden: int, n_classes: int, depth: int = 3) -> nn.Sequential:
    """``depth`` hidden GELU layers of width ``hidden``: Linear modules at even indices ``0, 2, ...``;
    the inputs of ``2, 4, ..., 2 depth`` are the hidden activations (the FFN-intermediate sites)."""
    layers: list[nn.Module] = []
    for i in range(depth):
        layers += [nn.Linear(input_dim if i == 0 else hidden, hidden), nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(hidden, n_classes))


def fit(model: nn.Module, X: torch.Tensor, y: torch.Tensor, *, epochs: int, lr: float, batch_size: int = 128,
        generator: torch.Generator) -> list[float]:
    """Adam on the model's trainable parameters with cross-entropy plus the model's ``auxiliary_loss()``
    when it has one (MoV/MoLoRA load balancing). Returns the mean loss of each epoch."""
    return Trainer(model, lr=lr, generator=generator).run(X, y, epochs=epochs, batch_size=batch_size)


class Trainer:
    """:func:`fit` that can stop and go on: ``run(X, y, epochs=a)`` then ``run(X, y, epochs=b)`` trains the
    model that ``run(X, y, epochs=a + b)`` trains, bit for bit (the Adam state and the batch-order generator
    carry over; evaluating the model in between changes neither). It lets a learning-rate sweep screen
    every rate on a short horizon and continue only the best to the full length.
    """

    def __init__(self, model: nn.Module, *, lr: float, generator: torch.Generator) -> None:
        self.model = model
        self.generator = generator
        self.optimiser = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
        self.epochs_done = 0

    def run(self, X: torch.Tensor, y: torch.Tensor, *, epochs: int, batch_size: int = 128) -> list[float]:
        """Train ``epochs`` more epochs on ``(X, y)``; the mean loss of each."""
        model, optimiser = self.model, self.optimiser
        auxiliary = getattr(model, "auxiliary_loss", None)
        history = []
        for _ in range(epochs):
            model.train()
            order = torch.randperm(len(X), generator=self.generator)
            X_epoch, y_epoch = X[order], y[order]  # one gather an epoch; the batches are views of it
            total = 0.0
            for start in range(0, len(X), batch_size):
                xb, yb = X_epoch[start:start + batch_size], y_epoch[start:start + batch_size]
                loss = F.cross_entropy(model(xb), yb)
                if auxiliary is not None:
                    loss = loss + auxiliary()
                optimiser.zero_grad(set_to_none=True)
                loss.backward()
                optimiser.step()
                total += float(loss.detach()) * len(yb)
            history.append(total / len(X))
            self.epochs_done += 1
        return history


@torch.no_grad()
def accuracy(model: nn.Module, X: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    return float((model(X).argmax(dim=-1) == y).float().mean())
