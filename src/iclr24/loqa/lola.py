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

from iclr24.core.checks import check_int
from iclr24.loqa.agent import magic_box, memory_one_state
from iclr24.loqa.envs import IteratedPrisonersDilemma
from iclr24.loqa.training import IPDHistory

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


def _logps(theta: Tensor, obs: Tensor, actions: Tensor) -> Tensor:
    return torch.log_softmax(theta[memory_one_state(obs)], -1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)


def _episodes(theta_0: Tensor, theta_1: Tensor, env, generator):
    observations = env.reset()
    obs, actions, rewards = ([], []), ([], []), ([], [])
    with torch.no_grad():
        for _ in range(env.horizon):
            step = {}
            for i, (agent, theta) in enumerate(zip(env.agents, (theta_0, theta_1))):
                probs = torch.softmax(theta[memory_one_state(observations[agent])], -1)
                step[agent] = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
                obs[i].append(observations[agent])
                actions[i].append(step[agent])
            observations, reward, _, _, _ = env.step(step)
            for i, agent in enumerate(env.agents):
                rewards[i].append(reward[agent])
    return [torch.stack(o) for o in obs], [torch.stack(a) for a in actions], [torch.stack(r) for r in rewards]


def dice_objective(logps_self: Tensor, logps_other: Tensor, rewards: Tensor, gamma: float) -> Tensor:
    """DiCE: ``mean_b sum_t gamma^t r_t MB(sum_{k<=t} log pi_self + log pi_other)``, whose gradients of any
    order are the score-function estimators; with the DiCE baseline ``(1 - MB(log pi_t)) b_t``
    (``b_t`` the batch mean of the discounted reward) to reduce variance."""
    discount = gamma ** torch.arange(rewards.size(0), dtype=rewards.dtype).unsqueeze(-1)
    dependencies = torch.cumsum(logps_self + logps_other, 0)
    discounted = discount * rewards
    baseline = discounted.mean(1, keepdim=True)
    return ((magic_box(dependencies) * discounted).sum(0)
            + ((1 - magic_box(logps_self + logps_other)) * baseline).sum(0)).mean()


def train_lola_dice(config: LOLAConfig = LOLAConfig(), *, seed: int = 0) -> tuple[list[Tensor], IPDHistory]:
    """Two LOLA-DiCE agents in the IPD; the history follows agent 0 (its reward in their play)."""
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    env = IteratedPrisonersDilemma(config.batch_size, config.horizon)
    thetas = [torch.zeros(5, 2, requires_grad=True) for _ in range(2)]
    history = IPDHistory()
    steps, start = 0, time.perf_counter()
    for it in range(config.iterations):
        updates = []
        for i in (0, 1):
            j = 1 - i
            # look-ahead: the opponent's naive step, differentiable in theta_i
            (o_i, o_j), (a_i, a_j), (_, r_j) = _ordered(_episodes(*_pair(thetas, i), env, generator), i)
            objective_j = dice_objective(_logps(thetas[j], o_j, a_j), _logps(thetas[i], o_i, a_i), r_j, config.gamma)
            grad_j = torch.autograd.grad(objective_j, thetas[j], create_graph=True)[0]
            theta_j = thetas[j] + config.inner_lr * grad_j
            # own step against the looked-ahead opponent, in fresh episodes
            pair = (thetas[i], theta_j) if i == 0 else (theta_j, thetas[i])
            (o_i, o_j), (a_i, a_j), (r_i, _) = _ordered(_episodes(*(p.detach() for p in pair), env, generator), i)
            objective_i = dice_objective(_logps(thetas[i], o_i, a_i), _logps(theta_j, o_j, a_j), r_i, config.gamma)
            updates.append(torch.autograd.grad(objective_i, thetas[i])[0])
            steps += 2 * config.batch_size * config.horizon
        with torch.no_grad():
            for theta, grad in zip(thetas, updates):
                theta += config.outer_lr * grad
        if (it + 1) % config.eval_every == 0 or it + 1 == config.iterations:
            (_, _), (_, _), (r, _) = _episodes(thetas[0].detach(), thetas[1].detach(), env, generator)
            with torch.no_grad():
                p = torch.softmax(thetas[0], -1)[:, 0]
            history.iteration.append(it + 1)
            history.seconds.append(time.perf_counter() - start)
            history.env_steps.append(steps)
            history.policy.append(dict(zip(("start", "CC", "CD", "DC", "DD"), (float(v) for v in p))))
            history.reward.append(float(r.mean()))  # the two LOLA agents' play: their self-play
            if config.stop_at_reciprocity and history.reached(len(history.iteration) - 1):
                break
    return [theta.detach() for theta in thetas], history


def _pair(thetas, i):
    return thetas[0].detach(), thetas[1].detach()


def _ordered(episodes, i):
    """Reorder ``(obs, actions, rewards)`` of players (0, 1) as (i, j)."""
    return tuple((part[i], part[1 - i]) for part in episodes)
