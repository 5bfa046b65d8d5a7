"""LOQA: an actor-critic agent that shapes its opponent through the opponent's Q-values.

Aghajohari, Duque, Cooijmans, Courville. "LOQA: Learning with Opponent Q-Learning Awareness". ICLR 2024.
https://arxiv.org/abs/2405.01035

Per update, for the agent i playing opponent j over a batch of episodes of length T:

1. Actor: ``-mean(log pi_i(a_t|s_t) A_t)`` with the TD(0) advantage ``A_t = r_t + gamma V_{t+1} - V_t`` and
   ``V = sum_a pi_i Q_i``.
2. Opponent model: j is assumed to act by ``softmax(Q_j(s_t, .) / tau)``. The entry of the action j took is
   replaced by a return that depends differentiably on i's policy (a "loaded DiCE" REINFORCE estimator):
   ``R~_t = G^j_t + a_t``, ``a_t = (G^j_t - V^j_t) dice_t + gamma lambda a_{t+1}``,
   ``dice_t = MB(sum_{k<=t} log pi_i) - MB(sum_{k<t} log pi_i)``, ``MB(z) = exp(z - stopgrad(z))``, and
   ``q~_t = r^j_t + gamma R~_{t+1}`` (``r^j_T`` at the last step). Value of ``a_t``: 0; gradient: how j's
   return moves with i's policy.
3. Shaping: ``-mean(log pi^_j(b_t|s_t) A_t)``: i raises the modelled probability of the opponent actions
   that are good for i, which it can only do through its own policy's effect on j's Q-values.
4. Critic: Huber loss of ``Q_i(s_t, a_t)`` against ``r_t + gamma max_a Q_target(s_{t+1}, a)``; the target
   network follows by an exponential moving average.

``shaping_weight=0`` gives the naive actor-critic baseline: the same learner without opponent awareness.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from iclr24.core.checks import check_int, check_number, check_same_shape

__all__ = ["LOQA", "MemoryOnePolicy", "MLPCritic", "MLPPolicy", "Rollout", "TabularCritic", "loaded_dice_returns",
           "magic_box"]


# --- policies and critics ------------------------------------------------------------------------------------


def memory_one_state(obs: Tensor) -> Tensor:
    """IPD observation ``[own C, own D, other C, other D]`` -> state 0..4: start, CC, CD, DC, DD."""
    start = obs.sum(-1) == 0
    return torch.where(start, 0, 1 + 2 * obs[..., 1].long() + obs[..., 3].long())


class MemoryOnePolicy(nn.Module):
    """A tabular memory-one IPD policy: two logits for each of start, CC, CD, DC, DD (own move first)."""

    STATES = ("start", "CC", "CD", "DC", "DD")

    def __init__(self) -> None:
        super().__init__()
        self.logits = nn.Parameter(torch.zeros(5, 2))

    def forward(self, obs: Tensor) -> Tensor:
        return self.logits[memory_one_state(obs)]


class TabularCritic(nn.Module):
    """``Q(s, t, a)`` for the IPD: one entry per memory-one state, time step and action."""

    def __init__(self, horizon: int) -> None:
        super().__init__()
        check_int("horizon", horizon, minimum=1)
        self.horizon = horizon
        self.table = nn.Parameter(torch.zeros(horizon + 1, 5, 2))

    def forward(self, obs: Tensor, t: Tensor) -> Tensor:
        if (t < 0).any() or (t > self.horizon).any():
            raise ValueError(f"t must lie in [0, {self.horizon}] (the critic's horizon), got {t.min()}..{t.max()}")
        return self.table[t, memory_one_state(obs)]


class MLPPolicy(nn.Module):
    """Logits from an MLP of the observation (the Coin Game's agents)."""

    def __init__(self, observation_size: int, num_actions: int, hidden: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(observation_size, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, num_actions))

    def forward(self, obs: Tensor) -> Tensor:
        return self.net(obs)


class MLPCritic(nn.Module):
    """``Q(s, t, .)`` from an MLP of the observation and the time step scaled to [0, 1]."""

    def __init__(self, observation_size: int, num_actions: int, horizon: int, hidden: int = 64) -> None:
        super().__init__()
        check_int("horizon", horizon, minimum=1)
        self.horizon = horizon
        self.net = nn.Sequential(nn.Linear(observation_size + 1, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                                 nn.ReLU(), nn.Linear(hidden, num_actions))

    def forward(self, obs: Tensor, t: Tensor) -> Tensor:
        time = (t.float() / self.horizon).expand(obs.shape[:-1]).unsqueeze(-1)
        return self.net(torch.cat([obs, time], -1))


# --- episodes ------------------------------------------------------------------------------------------------


@dataclass
class Rollout:
    """A batch of episodes seen by one player: ``obs`` ``(T+1, B, obs_size)`` (the last is after the
    last step), ``actions`` and ``rewards`` ``(T, B)``; ``opp_*`` the same for the other player."""

    obs: Tensor
    actions: Tensor
    rewards: Tensor
    opp_obs: Tensor
    opp_actions: Tensor
    opp_rewards: Tensor

    def swap(self) -> Rollout:
        """The same episodes from the other player's side."""
        return Rollout(self.opp_obs, self.opp_actions, self.opp_rewards, self.obs, self.actions, self.rewards)

    @property
    def horizon(self) -> int:
        return self.actions.size(0)


# --- the estimator -------------------------------------------------------------------------------------------


def magic_box(z: Tensor) -> Tensor:
    """DiCE's MagicBox: value 1, gradient ``grad z``."""
    return torch.exp(z - z.detach())


def discounted_returns(rewards: Tensor, gamma: float) -> Tensor:
    """``G_t = sum_{k>=t} gamma^(k-t) r_k`` along dim 0."""
    out, running = torch.empty_like(rewards), torch.zeros_like(rewards[0])
    for t in range(rewards.size(0) - 1, -1, -1):
        running = rewards[t] + gamma * running
        out[t] = running
    return out


def loaded_dice_returns(opp_rewards: Tensor, opp_values: Tensor, own_logps: Tensor, gamma: float,
                        dice_lambda: float) -> Tensor:
    """The opponent's return made differentiable in the agent's policy: ``R~_t = G^j_t + a_t``.

    ``opp_rewards``, ``own_logps`` ``(T, B)``; ``opp_values`` ``(T, B)`` (the opponent's values at its
    states). ``a_t = (G^j_t - V^j_t) dice_t + gamma * dice_lambda * a_{t+1}``; its value is 0, so
    ``R~`` equals ``G^j`` in value and carries the gradient
    ``sum_{k>=t} (gamma lambda)^(k-t) (G^j_k - V^j_k) grad log pi_i(a_k)``.
    """
    gamma = check_number("gamma", gamma, minimum=0.0, maximum=1.0)
    dice_lambda = check_number("dice_lambda", dice_lambda, minimum=0.0, maximum=1.0)
    check_same_shape("(T, B)", min_ndim=1, opp_rewards=opp_rewards, opp_values=opp_values, own_logps=own_logps)
    cumulative = torch.cumsum(own_logps, 0)
    boxed = magic_box(torch.cat([torch.zeros_like(cumulative[:1]), cumulative]))
    dice = boxed[1:] - boxed[:-1]
    returns = discounted_returns(opp_rewards, gamma)
    advantage = (returns - opp_values) * dice
    loaded, running = torch.empty_like(advantage), torch.zeros_like(advantage[0])
    for t in range(advantage.size(0) - 1, -1, -1):
        running = advantage[t] + gamma * dice_lambda * running
        loaded[t] = running
    return returns + loaded


def state_values(policy: nn.Module, critic: nn.Module, obs: Tensor) -> Tensor:
    """``V(s_t) = sum_a pi(a|s_t) Q(s_t, t, a)`` for ``obs`` ``(T+1, B, ...)``, without gradient."""
    with torch.no_grad():
        t = torch.arange(obs.size(0)).reshape(-1, *([1] * (obs.dim() - 2)))
        return (torch.softmax(policy(obs), -1) * critic(obs, t)).sum(-1)


# --- the agent -----------------------------------------------------------------------------------------------


class LOQA:
    """A LOQA agent: actor, critic, target critic and their optimisers.

    Args:
        policy: ``obs -> logits``.
        critic: ``(obs, t) -> Q`` over actions.
        gamma: discount. tau: temperature of the opponent model ``softmax(Q_j / tau)``.
        dice_lambda: the loaded-DiCE estimator's lambda.
        shaping_weight: weight of the opponent-shaping loss (0: the naive actor-critic baseline).
        entropy_weight: weight of an entropy bonus.
        actor_lr, critic_lr: Adam step sizes. target_ema: the target critic's moving-average rate.
        grad_clip: clip the actor's gradient norm (None: no clipping).
    """

    def __init__(self, policy: nn.Module, critic: nn.Module, *, gamma: float = 0.96, tau: float = 1.0,
                 dice_lambda: float = 0.9, shaping_weight: float = 1.0, entropy_weight: float = 0.0,
                 actor_lr: float = 2e-3, critic_lr: float = 5e-2, target_ema: float = 0.99,
                 grad_clip: float | None = None) -> None:
        for name, value, low, high in (("gamma", gamma, 0.0, 1.0), ("dice_lambda", dice_lambda, 0.0, 1.0),
                                       ("target_ema", target_ema, 0.0, 1.0)):
            check_number(name, value)
            if not low <= value <= high:
                raise ValueError(f"{name} must lie in [{low}, {high}], got {value}")
        for name, value in (("tau", tau), ("actor_lr", actor_lr), ("critic_lr", critic_lr)):
            check_number(name, value)
            if value <= 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        for name, value in (("shaping_weight", shaping_weight), ("entropy_weight", entropy_weight)):
            check_number(name, value)
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        if grad_clip is not None:
            grad_clip = check_number("grad_clip", grad_clip, minimum=0.0, exclusive=True)
        self.policy, self.critic = policy, critic
        self.target_critic = copy.deepcopy(critic).requires_grad_(False)
        self.gamma, self.tau, self.dice_lambda = gamma, tau, dice_lambda
        self.shaping_weight, self.entropy_weight, self.target_ema, self.grad_clip = (
            shaping_weight, entropy_weight, target_ema, grad_clip)
        self.actor_optimizer = torch.optim.Adam(policy.parameters(), lr=actor_lr)
        self.critic_optimizer = torch.optim.Adam(critic.parameters(), lr=critic_lr)

    # acting

    @torch.no_grad()
    def act(self, obs: Tensor, generator: torch.Generator | None = None) -> Tensor:
        probs = torch.softmax(self.policy(obs), -1)
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)

    def values(self, obs: Tensor) -> Tensor:
        return state_values(self.policy, self.critic, obs)

    # losses

    def actor_losses(self, rollout: Rollout, opponent) -> dict[str, Tensor]:
        """The actor's loss terms for episodes against ``opponent`` (anything with a ``policy`` and a
        ``critic``; its critic models its play)."""
        T = rollout.horizon
        logps_all = torch.log_softmax(self.policy(rollout.obs[:-1]), -1)  # (T, B, A)
        logps = logps_all.gather(-1, rollout.actions.unsqueeze(-1)).squeeze(-1)
        values = self.values(rollout.obs)  # (T+1, B)
        advantage = rollout.rewards + self.gamma * values[1:] - values[:-1]
        losses = {"agent": -(logps * advantage).mean(),
                  "entropy": (logps_all.exp() * logps_all).sum(-1).mean()}  # negative entropy
        if self.shaping_weight > 0:
            t = torch.arange(T + 1).reshape(-1, *([1] * (rollout.opp_obs.dim() - 2)))
            with torch.no_grad():
                opp_q = opponent.critic(rollout.opp_obs[:-1], t[:-1])  # (T, B, A_j)
                opp_values = state_values(opponent.policy, opponent.critic, rollout.opp_obs)[:-1]
            loaded = loaded_dice_returns(rollout.opp_rewards, opp_values, logps, self.gamma, self.dice_lambda)
            q_taken = torch.cat([rollout.opp_rewards[:-1] + self.gamma * loaded[1:], rollout.opp_rewards[-1:]])
            taken = F.one_hot(rollout.opp_actions, opp_q.size(-1)).bool()
            modelled = torch.where(taken, q_taken.unsqueeze(-1), opp_q)
            opp_logps = torch.log_softmax(modelled / self.tau, -1).gather(
                -1, rollout.opp_actions.unsqueeze(-1)).squeeze(-1)
            losses["shaping"] = -(opp_logps * advantage).mean()
        return losses

    def critic_loss(self, rollout: Rollout) -> Tensor:
        t = torch.arange(rollout.horizon + 1).reshape(-1, *([1] * (rollout.obs.dim() - 2)))
        q = self.critic(rollout.obs[:-1], t[:-1]).gather(-1, rollout.actions.unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            target = rollout.rewards + self.gamma * self.target_critic(rollout.obs[1:], t[1:]).amax(-1)
        return F.huber_loss(q, target)

    # updates

    def update_actor(self, rollout: Rollout, opponent) -> dict[str, float]:
        losses = self.actor_losses(rollout, opponent)
        total = losses["agent"] + self.entropy_weight * losses["entropy"]
        if "shaping" in losses:
            total = total + self.shaping_weight * losses["shaping"]
        self.actor_optimizer.zero_grad()
        total.backward()
        if self.grad_clip is not None:
            nn.utils.clip_grad_norm_(self.policy.parameters(), self.grad_clip)
        self.actor_optimizer.step()
        return {k: float(v.detach()) for k, v in losses.items()}

    def update_critic(self, rollout: Rollout) -> float:
        loss = self.critic_loss(rollout)
        self.critic_optimizer.zero_grad()
        loss.backward()
        self.critic_optimizer.step()
        with torch.no_grad():
            for target, online in zip(self.target_critic.parameters(), self.critic.parameters()):
                target.lerp_(online, 1.0 - self.target_ema)
        return float(loss.detach())

    def snapshot(self) -> LOQA:
        """A frozen copy (policy and critic) to keep as a past opponent."""
        twin = copy.copy(self)
        twin.policy, twin.critic = copy.deepcopy(self.policy), copy.deepcopy(self.critic)
        twin.actor_optimizer = twin.critic_optimizer = None
        return twin
