"""LOLA-DiCE on the IPD (Foerster et al. 2018): the opponent-shaping baseline LOQA is compared with.

Two tabular memory-one agents. Each update, agent i looks one naive gradient step ahead for its
opponent, ``theta_j' = theta_j + eta_in grad_j J_j``, with ``J`` the DiCE objective
``sum_t gamma^t r_t MB(sum_{k<=t} log pi_i(a_k) + log pi_j(b_k))`` (plus the DiCE baseline term), then
ascends its own DiCE objective in episodes played against ``theta_j'``, differentiating through the
look-ahead. Every update needs fresh episodes for the look-ahead player, which is where its cost lies.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import Tensor

from iclr24.core.checks import check_int, check_number, check_same_shape
from iclr24.core.progress import track
from iclr24.loqa.agent import Rollout, magic_box, memory_one_state
from iclr24.loqa.envs import IteratedPrisonersDilemma
from iclr24.loqa.training import IPDHistory, memory_one_policy, play

__all__ = ["LOLAConfig", "dice_objective", "train_lola_dice"]


@dataclass(frozen=True)
class LOLAConfig:
    iterations: int = 500
    batch_size: int = 128
    horizon: int = 10
    gamma: float = 0.96
    outer_lr: float = 0.2
    inner_lr: float = 0.3
    eval_every: int = 10
    stop_at_reciprocity: bool = False

    def __post_init__(self) -> None:
        for name in ("iterations", "batch_size", "horizon", "eval_every"):
            check_int(name, getattr(self, name), minimum=1)


class _Tabular:
    """Memory-one logits ``theta`` (5, 2) as a policy ``obs -> logits``, for :func:`play`."""

    def __init__(self, theta: Tensor) -> None:
        self.theta = theta

    def __call__(self, obs: Tensor) -> Tensor:
        return self.theta[memory_one_state(obs)]


def _logps(theta: Tensor, obs: Tensor, actions: Tensor) -> Tensor:
    """``log pi_theta(a_t | s_t)`` for ``obs`` ``(T+1, B, 4)`` (the last one unused) and ``actions`` ``(T, B)``."""
    return torch.log_softmax(_Tabular(theta)(obs[:-1]), -1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)


def _episodes(theta_0: Tensor, theta_1: Tensor, env, generator, i: int) -> Rollout:
    """Episodes of the two tabular players, seen by player ``i``."""
    rollout = play(env, _Tabular(theta_0.detach()), _Tabular(theta_1.detach()), generator)
    return rollout if i == 0 else rollout.swap()


def dice_objective(logps_self: Tensor, logps_other: Tensor, rewards: Tensor, gamma: float) -> Tensor:
    """DiCE: ``mean_b sum_t gamma^t r_t MB(sum_{k<=t} log pi_self + log pi_other)``, whose gradients of any
    order are the score-function estimators; with the DiCE baseline ``(1 - MB(log pi_t)) b_t``
    (``b_t`` the batch mean of the discounted reward) to reduce variance."""
    gamma = check_number("gamma", gamma, minimum=0.0, maximum=1.0)
    check_same_shape("(T, B)", ndim=2, logps_self=logps_self, logps_other=logps_other, rewards=rewards)
    discount = gamma ** torch.arange(rewards.size(0), dtype=rewards.dtype).unsqueeze(-1)
    dependencies = torch.cumsum(logps_self + logps_other, 0)
    discounted = discount * rewards
    baseline = discounted.mean(1, keepdim=True)
    return ((magic_box(dependencies) * discounted).sum(0)
            + ((1 - magic_box(logps_self + logps_other)) * baseline).sum(0)).mean()


def train_lola_dice(config: LOLAConfig = LOLAConfig(), *, seed: int = 0,
                    progress: bool = False) -> tuple[list[Tensor], IPDHistory]:
    """Two LOLA-DiCE agents in the IPD; the history follows agent 0 (its reward in their play).
    ``progress=True`` draws a bar of the updates (:mod:`iclr24.core.progress`; off by default)."""
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    env = IteratedPrisonersDilemma(config.batch_size, config.horizon)
    thetas = [torch.zeros(5, 2, requires_grad=True) for _ in range(2)]
    history = IPDHistory()
    steps, start = 0, time.perf_counter()
    for it in track(range(config.iterations), "LOLA-DiCE (IPD)", enabled=progress):
        updates = []
        for i in (0, 1):
            j = 1 - i
            # look-ahead: the opponent's naive step, differentiable in theta_i
            r = _episodes(thetas[0], thetas[1], env, generator, i)
            objective_j = dice_objective(_logps(thetas[j], r.opp_obs, r.opp_actions),
                                         _logps(thetas[i], r.obs, r.actions), r.opp_rewards, config.gamma)
            grad_j = torch.autograd.grad(objective_j, thetas[j], create_graph=True)[0]
            theta_j = thetas[j] + config.inner_lr * grad_j
            # own step against the looked-ahead opponent, in fresh episodes
            pair = (thetas[i], theta_j) if i == 0 else (theta_j, thetas[i])
            r = _episodes(*pair, env, generator, i)
            objective_i = dice_objective(_logps(thetas[i], r.obs, r.actions), _logps(theta_j, r.opp_obs, r.opp_actions),
                                         r.rewards, config.gamma)
            updates.append(torch.autograd.grad(objective_i, thetas[i])[0])
            steps += 2 * config.batch_size * config.horizon
        with torch.no_grad():
            for theta, grad in zip(thetas, updates):
                theta += config.outer_lr * grad
        if (it + 1) % config.eval_every == 0 or it + 1 == config.iterations:
            r = _episodes(thetas[0], thetas[1], env, generator, 0)
            history.iteration.append(it + 1)
            history.seconds.append(time.perf_counter() - start)
            history.env_steps.append(steps)
            history.policy.append(memory_one_policy(_Tabular(thetas[0].detach())))
            history.reward.append(float(r.rewards.mean()))  # the two LOLA agents' play: their self-play
            if config.stop_at_reciprocity and history.reached(len(history.iteration) - 1):
                break
    return [theta.detach() for theta in thetas], history

