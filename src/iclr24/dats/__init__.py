"""DATS: a difficulty-aware task sampler for meta-learning physics-informed neural networks.

Maryam Toloubidokhti, Yubo Ye, Ryan Missel, Xiajun Jiang, Nilesh Kumar, Ruby Shrestha, Linwei Wang.
"DATS: Difficulty-Aware Task Sampler for Meta-Learning Physics-Informed Neural Networks". ICLR 2024.
https://openreview.net/forum?id=EvyYFSxdgB

    from iclr24.dats import Convection, DifficultyAwareTaskSampler, ParametricPINN, meta_train, relative_l2
    pde, betas = Convection(), [1, 3, 5, 7, 9]
    model = ParametricPINN([(0, 1), pde.x_range], [(1, 9)])
    sampler = DifficultyAwareTaskSampler(len(betas), eta=0.1, floor=0.02)
    history = meta_train(model, pde, betas, sampler, steps=2000)        # DATS-w
    relative_l2(model, pde, betas)

The sampler takes losses and flat gradients, so it drives any multi-task torch training loop:
``sampler.update(train_losses, val_losses, train_grads, val_grads)`` every ``sampler.period`` steps,
then ``sampler.weights()`` (DATS-w) or ``sampler.allocate(budget)`` (DATS-rp).
"""

from iclr24.dats.models import HyperPINN, ParametricPINN
from iclr24.dats.pdes import Burgers, Convection, ParametricPDE, ReactionDiffusion, derivatives
from iclr24.dats.residuals import rad_probabilities, select_by_residual
from iclr24.dats.sampler import (
    DifficultyAwareTaskSampler,
    SelfPacedTaskSampler,
    TaskSampler,
    UniformTaskSampler,
    allocate_points,
    gradient_alignment,
    normalized_scores,
)
from iclr24.dats.training import MetaTrainingHistory, PointSet, meta_train, relative_l2, task_losses

__all__ = [
    "Burgers",
    "Convection",
    "DifficultyAwareTaskSampler",
    "HyperPINN",
    "MetaTrainingHistory",
    "ParametricPDE",
    "ParametricPINN",
    "PointSet",
    "ReactionDiffusion",
    "SelfPacedTaskSampler",
    "TaskSampler",
    "UniformTaskSampler",
    "allocate_points",
    "derivatives",
    "gradient_alignment",
    "meta_train",
    "normalized_scores",
    "rad_probabilities",
    "relative_l2",
    "select_by_residual",
    "task_losses",
]
