"""Self-play training of LOQA (and the naive baseline) on the IPD, and the memory-one analysis."""

from __future__ import annotations

import copy
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from iclr24.core.checks import check_int, check_number
from iclr24.core.progress import track
from iclr24.loqa.agent import LOQA, MemoryOnePolicy, Rollout, TabularCritic
from iclr24.loqa.envs import IteratedPrisonersDilemma

__all__ = ["STRATEGIES", "CoinConfig", "EpisodeBuffer", "FixedMemoryOne", "GreedyCoinPolicy", "IPDConfig", "IPDHistory",
           "Opponent", "Population", "coin_pickups", "is_reciprocal", "memory_one_policy", "play", "score_against",
           "train_coin_game", "train_ipd"]

#: P(cooperate) at start, CC, CD, DC, DD (own move first) for classic memory-one strategies
STRATEGIES = {
    "always_cooperate": (1.0, 1.0, 1.0, 1.0, 1.0),
    "always_defect": (0.0, 0.0, 0.0, 0.0, 0.0),
    "tit_for_tat": (1.0, 1.0, 0.0, 1.0, 0.0),
    "random": (0.5, 0.5, 0.5, 0.5, 0.5),
    "grim_like_pavlov": (1.0, 1.0, 0.0, 0.0, 1.0),  # win-stay lose-shift
}


class FixedMemoryOne(nn.Module):
    """A fixed memory-one IPD strategy from its five cooperation probabilities."""

    def __init__(self, p_cooperate) -> None:
        super().__init__()
        p = torch.as_tensor(p_cooperate, dtype=torch.float32)
        if p.shape != (5,) or not ((p >= 0) & (p <= 1)).all():
            raise ValueError(f"p_cooperate must be 5 probabilities (start, CC, CD, DC, DD), got {p_cooperate}")
        probs = torch.stack([p, 1 - p], -1)
        self.register_buffer("log_probs", torch.log(probs.clamp_min(1e-12)))

    def forward(self, obs: Tensor) -> Tensor:
        from iclr24.loqa.agent import memory_one_state

        return self.log_probs[memory_one_state(obs)]


def play(env, policy_0: nn.Module, policy_1: nn.Module, generator: torch.Generator) -> Rollout:
    """One batch of episodes; the rollout is seen by player 0 (``.swap()`` for player 1)."""
    observations = env.reset()
    obs = {a: [observations[a]] for a in env.agents}
    actions = {a: [] for a in env.agents}
    rewards = {a: [] for a in env.agents}
    with torch.no_grad():
        for _ in range(env.horizon):
            step = {}
            for agent, policy in zip(env.agents, (policy_0, policy_1)):
                probs = torch.softmax(policy(observations[agent]), -1)
                step[agent] = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
            observations, reward, _, _, _ = env.step(step)
            for a in env.agents:
                obs[a].append(observations[a])
                actions[a].append(step[a])
                rewards[a].append(reward[a])
    p0, p1 = env.agents
    stack = torch.stack
    return Rollout(stack(obs[p0]), stack(actions[p0]), stack(rewards[p0]),
                   stack(obs[p1]), stack(actions[p1]), stack(rewards[p1]))


def memory_one_policy(policy: nn.Module) -> dict[str, float]:
    """P(cooperate) of an IPD policy in each memory-one state: start, CC, CD, DC, DD (own move first)."""
    obs = torch.tensor([[0, 0, 0, 0], [1, 0, 1, 0], [1, 0, 0, 1], [0, 1, 1, 0], [0, 1, 0, 1]], dtype=torch.float32)
    with torch.no_grad():
        p = torch.softmax(policy(obs), -1)[:, 0]
    return dict(zip(MemoryOnePolicy.STATES, (float(v) for v in p)))


def score_against(policy: nn.Module, opponent: nn.Module, *, episodes: int = 512, horizon: int = 10,
                  seed: int = 0) -> tuple[float, float]:
    """Mean reward per step of ``policy`` and of ``opponent`` when they play the IPD."""
    check_int("episodes", episodes, minimum=1)
    check_int("horizon", horizon, minimum=1)
    rollout = play(IteratedPrisonersDilemma(episodes, horizon), policy, opponent, torch.Generator().manual_seed(seed))
    return float(rollout.rewards.mean()), float(rollout.opp_rewards.mean())


class Population(nn.Module):
    """Several frozen modules of one architecture, each applied to its own slice of the batch.

    The batch (dim -2 of the input) is split into ``len(modules)`` equal groups; group g goes through
    ``modules[g]`` (vectorised with ``torch.func``). Lets one batch of games face several past agents.
    """

    def __init__(self, modules: list[nn.Module]) -> None:
        super().__init__()
        from torch.func import stack_module_state

        if not modules:
            raise ValueError("Population needs at least one module")
        if len({type(m) for m in modules}) > 1:
            names = sorted({type(m).__name__ for m in modules})
            raise TypeError(f"Population's modules must share one class, got {names}")
        self.params, self.buffers_ = stack_module_state(modules)
        self.base = copy.deepcopy(modules[0]).to("meta")
        self.groups = len(modules)

    def forward(self, x: Tensor, *args: Tensor) -> Tensor:
        from torch.func import functional_call, vmap

        G = self.groups
        if x.dim() < 2:
            raise ValueError("Population's input must have a batch dimension (..., batch, features), "
                             f"got {tuple(x.shape)}")
        lead, B = x.shape[:-2], x.shape[-2]
        if B % G:
            raise ValueError(f"the batch ({B}) must split evenly into {G} groups")
        grouped = x.reshape(*lead, G, B // G, x.shape[-1]).movedim(-3, 0)

        def one(params, buffers, xs):  # extra arguments (the critic's time steps) broadcast as they are
            return functional_call(self.base, (params, buffers), (xs, *args))

        out = vmap(one)(self.params, self.buffers_, grouped)  # (G, *lead, B/G, out)
        return out.movedim(0, -3).reshape(*lead, B, out.shape[-1])


class EpisodeBuffer:
    """A ring buffer of episodes (the critic's replay), sampled uniformly with replacement."""

    def __init__(self, capacity: int) -> None:
        check_int("capacity", capacity, minimum=1)
        self.capacity, self.size, self.cursor = capacity, 0, 0
        self.store: dict[str, Tensor] | None = None

    def push(self, rollout: Rollout) -> None:
        fields = vars(rollout)
        if self.store is None:
            self.store = {k: v.new_zeros(v.shape[0], self.capacity, *v.shape[2:]) for k, v in fields.items()}
        B = rollout.actions.size(1)
        index = (self.cursor + torch.arange(B)) % self.capacity
        for k, v in fields.items():
            self.store[k][:, index] = v
        self.cursor = (self.cursor + B) % self.capacity
        self.size = min(self.size + B, self.capacity)

    def sample(self, batch_size: int, generator: torch.Generator) -> Rollout:
        if self.store is None:
            raise RuntimeError("the buffer is empty")
        index = torch.randint(self.size, (batch_size,), generator=generator)
        return Rollout(**{k: v[:, index] for k, v in self.store.items()})


@dataclass(frozen=True)
class IPDConfig:
    """Self-play on the IPD with a tabular memory-one actor and a tabular ``Q(s, t, a)`` critic."""

    iterations: int = 8000
    batch_size: int = 64
    horizon: int = 10
    gamma: float = 0.96
    tau: float = 1.0
    dice_lambda: float = 0.9
    actor_lr: float = 2e-3
    critic_lr: float = 5e-2
    target_ema: float = 0.99
    shaping_weight: float = 1.0
    opponent_replay: int = 1000  # past agents kept as opponents
    opponent_replay_every: int = 10
    opponents_per_batch: int = 8  # the batch's games are split among this many sampled past agents
    episode_replay: int = 1000  # episodes kept for the critic
    eval_every: int = 100
    stop_at_reciprocity: bool = False  # stop once is_reciprocal holds at an evaluation

    def __post_init__(self) -> None:
        for name in ("iterations", "batch_size", "horizon", "opponent_replay", "opponent_replay_every",
                     "episode_replay", "eval_every", "opponents_per_batch"):
            check_int(name, getattr(self, name), minimum=1)
        if self.batch_size % self.opponents_per_batch:
            raise ValueError(f"batch_size ({self.batch_size}) must be a multiple of opponents_per_batch "
                             f"({self.opponents_per_batch})")
        _check_learning(self)


def _check_learning(config) -> None:
    """The learner's numbers, checked when the config is made rather than when training starts."""
    for name in ("gamma", "target_ema", "dice_lambda"):
        if hasattr(config, name):
            check_number(name, getattr(config, name), minimum=0.0, maximum=1.0)
    for name in ("actor_lr", "critic_lr", "tau"):
        if hasattr(config, name):
            check_number(name, getattr(config, name), minimum=0.0, exclusive=True)
    for name in ("shaping_weight", "entropy_weight"):
        if hasattr(config, name):
            check_number(name, getattr(config, name), minimum=0.0)


@dataclass
class IPDHistory:
    """Per evaluation: iteration, seconds, environment steps so far, the memory-one policy, and its mean
    self-play reward per step (256 fresh games)."""

    iteration: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    env_steps: list[int] = field(default_factory=list)
    policy: list[dict] = field(default_factory=list)
    reward: list[float] = field(default_factory=list)

    def reached(self, index: int) -> bool:
        """Reciprocity at evaluation ``index``: tit-for-tat-like and cooperating in self-play."""
        return is_reciprocal(self.policy[index]) and self.reward[index] >= SELF_PLAY_BAR

    def first_reciprocal(self) -> int | None:
        """Index of the first evaluation that reached reciprocity, or None."""
        return next((i for i in range(len(self.policy)) if self.reached(i)), None)


@dataclass
class Opponent:
    """What LOQA needs of its opponent: a policy and a critic (e.g. a :class:`Population` of past agents)."""

    policy: nn.Module
    critic: nn.Module


SELF_PLAY_BAR = -1.2  # mean reward per step in self-play (mutual cooperation: -1, mutual defection: -2)


def is_reciprocal(p: dict[str, float]) -> bool:
    """Tit-for-tat-like: cooperates after CC, defects after DD and mostly after being exploited (CD)."""
    missing = [s for s in ("CC", "CD", "DD") if s not in p]
    if missing:
        raise ValueError(f"p must map the memory-one states to P(cooperate) (memory_one_policy's output), missing "
                         f"{missing}")
    return p["CC"] >= 0.9 and p["DD"] <= 0.1 and p["CD"] <= 0.4


def _self_play_update(agent: LOQA, env, past: list, buffer: EpisodeBuffer, config, i: int, rng: random.Random,
                      generator: torch.Generator) -> Rollout:
    """One update of self-play against past versions: snapshot every ``opponent_replay_every`` updates,
    split the batch among ``opponents_per_batch`` drawn snapshots, play, step the actor against them and
    the critic on replayed episodes."""
    if i % config.opponent_replay_every == 0:
        past.append(agent.snapshot())
        del past[:-config.opponent_replay]
    drawn = [rng.choice(past) for _ in range(config.opponents_per_batch)]
    opponent = Opponent(Population([o.policy for o in drawn]), Population([o.critic for o in drawn]))
    rollout = play(env, agent.policy, opponent.policy, generator)
    agent.update_actor(rollout, opponent)
    buffer.push(rollout)
    agent.update_critic(buffer.sample(config.batch_size, generator))
    return rollout


def train_ipd(config: IPDConfig = IPDConfig(), *, seed: int = 0,
              on_eval: Callable[[int, IPDHistory, LOQA], None] | None = None,
              progress: bool = False) -> tuple[LOQA, IPDHistory]:
    """Train one LOQA agent by self-play against itself and its past versions (``shaping_weight=0``:
    the naive actor-critic). Returns the agent and its history; ``on_eval(iteration, history, agent)``
    is called at every evaluation. ``progress=True`` draws a bar of the updates (:mod:`iclr24.core.progress`;
    off by default: 12,000 updates take minutes)."""
    torch.manual_seed(seed)
    rng = random.Random(seed)
    generator = torch.Generator().manual_seed(seed)
    env = IteratedPrisonersDilemma(config.batch_size, config.horizon)
    agent = LOQA(MemoryOnePolicy(), TabularCritic(config.horizon), gamma=config.gamma, tau=config.tau,
                 dice_lambda=config.dice_lambda, shaping_weight=config.shaping_weight, actor_lr=config.actor_lr,
                 critic_lr=config.critic_lr, target_ema=config.target_ema)
    past: list[LOQA] = []
    buffer = EpisodeBuffer(config.episode_replay)
    history = IPDHistory()
    start = time.perf_counter()
    for i in track(range(config.iterations), "LOQA self-play (IPD)", enabled=progress):
        _self_play_update(agent, env, past, buffer, config, i, rng, generator)
        if (i + 1) % config.eval_every == 0 or i + 1 == config.iterations:
            history.iteration.append(i + 1)
            history.seconds.append(time.perf_counter() - start)
            history.env_steps.append((i + 1) * config.batch_size * config.horizon)
            history.policy.append(memory_one_policy(agent.policy))
            history.reward.append(score_against(agent.policy, agent.policy, episodes=256, horizon=config.horizon,
                                                seed=i)[0])
            if on_eval is not None:
                on_eval(i + 1, history, agent)
            if config.stop_at_reciprocity and history.reached(len(history.iteration) - 1):
                break
    return agent, history


# --- the Coin Game -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CoinConfig:
    """Self-play on the Coin Game with MLP actor and critic (the paper uses a GRU and batch 8192 on a GPU)."""

    iterations: int = 2000
    batch_size: int = 128
    grid: int = 3
    horizon: int = 50
    gamma: float = 0.96
    actor_lr: float = 3e-3
    critic_lr: float = 1e-2
    entropy_weight: float = 0.05
    shaping_weight: float = 1.0
    hidden: int = 64
    opponent_replay: int = 200
    opponent_replay_every: int = 10
    opponents_per_batch: int = 4
    episode_replay: int = 4096

    def __post_init__(self) -> None:
        for name in ("iterations", "batch_size", "horizon", "hidden", "opponent_replay", "opponent_replay_every",
                     "opponents_per_batch", "episode_replay"):
            check_int(name, getattr(self, name), minimum=1)
        if self.batch_size % self.opponents_per_batch:
            raise ValueError(f"batch_size ({self.batch_size}) must be a multiple of opponents_per_batch "
                             f"({self.opponents_per_batch})")
        check_int("grid", self.grid, minimum=2)
        _check_learning(self)


class GreedyCoinPolicy(nn.Module):
    """The Coin Game's Always-Defect: step towards the coin, whatever its colour (ties: the first move)."""

    def __init__(self, grid: int = 3) -> None:
        super().__init__()
        check_int("grid", grid, minimum=2)
        self.grid = grid

    def forward(self, obs: Tensor) -> Tensor:
        from iclr24.loqa.envs import CoinGame

        g = self.grid
        planes = obs.reshape(*obs.shape[:-1], 4, g * g)
        me = planes[..., 0, :].argmax(-1)
        coin = (planes[..., 2, :] + planes[..., 3, :]).argmax(-1)
        rows, cols = me // g, me % g
        moves = CoinGame.MOVES.to(obs.device)
        new_rows, new_cols = (rows[..., None] + moves[:, 0]) % g, (cols[..., None] + moves[:, 1]) % g

        def torus(a, b):
            d = (a - b).abs()
            return torch.minimum(d, g - d)

        distance = torus(new_rows, (coin // g)[..., None]) + torus(new_cols, (coin % g)[..., None])
        return -10.0 * distance.float()


def coin_pickups(policy_0: nn.Module, policy_1: nn.Module, *, episodes: int = 256, grid: int = 3, horizon: int = 50,
                 seed: int = 0) -> dict[str, float]:
    """Play the Coin Game; per player 0: coins picked per step, the fraction of its pickups that were its
    own colour, and its reward per step; and player 1's reward per step (``opponent_reward``)."""
    from iclr24.loqa.envs import CoinGame

    env = CoinGame(episodes, grid, horizon)
    generator = torch.Generator().manual_seed(seed)
    observations = env.reset(seed)
    picked = own = reward = opponent_reward = 0.0
    with torch.no_grad():
        for _ in range(horizon):
            actions = {a: torch.multinomial(torch.softmax(p(observations[a]), -1), 1, generator=generator).squeeze(-1)
                       for a, p in zip(env.agents, (policy_0, policy_1))}
            observations, rewards, _, _, infos = env.step(actions)
            picked += float(infos["player_0"]["picked"].float().sum())
            own += float(infos["player_0"]["picked_own"].float().sum())
            reward += float(rewards["player_0"].sum())
            opponent_reward += float(rewards["player_1"].sum())
    steps = episodes * horizon
    return {"pickups_per_step": picked / steps, "own_fraction": own / max(picked, 1.0), "reward": reward / steps,
            "opponent_reward": opponent_reward / steps}


def train_coin_game(config: CoinConfig = CoinConfig(), *, seed: int = 0,
                    on_eval: Callable[[int, LOQA], None] | None = None, eval_every: int = 100,
                    progress: bool = False) -> LOQA:
    """Self-play LOQA (or the naive learner with ``shaping_weight=0``) on the Coin Game.

    The agents see only the board (an MLP, no memory), so they can learn whose coin to take but not to
    retaliate; the paper's agents are GRUs. ``progress=True`` draws a bar of the updates (off by default)."""
    check_int("eval_every", eval_every, minimum=1)
    from iclr24.loqa.agent import MLPCritic, MLPPolicy
    from iclr24.loqa.envs import CoinGame

    torch.manual_seed(seed)
    rng = random.Random(seed)
    generator = torch.Generator().manual_seed(seed)
    env = CoinGame(config.batch_size, config.grid, config.horizon)
    env.reset(seed)
    size = env.observation_size
    agent = LOQA(MLPPolicy(size, 4, config.hidden), MLPCritic(size, 4, config.horizon, config.hidden),
                 gamma=config.gamma, shaping_weight=config.shaping_weight, entropy_weight=config.entropy_weight,
                 actor_lr=config.actor_lr, critic_lr=config.critic_lr, grad_clip=1.0)
    past: list[LOQA] = []
    buffer = EpisodeBuffer(config.episode_replay)
    for i in track(range(config.iterations), "LOQA self-play (Coin Game)", enabled=progress):
        _self_play_update(agent, env, past, buffer, config, i, rng, generator)
        if on_eval is not None and ((i + 1) % eval_every == 0 or i + 1 == config.iterations):
            on_eval(i + 1, agent)
    return agent
