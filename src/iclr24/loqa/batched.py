"""Several independent learners trained as one batched computation (the reproduction's fast path).

A run of the reproduction trains many small learners that never interact: LOQA and the naive learner over
several seeds, LOLA-DiCE over several seeds, and the same for the Coin Game. Each one is a long sequence of
tiny updates, so its cost is per-operation overhead, not arithmetic. Here R runs share every operation:
their parameters carry a leading run dimension (tables ``(R, ...)``, MLP weights ``(R, out, in)``), each
run's loss is its own mean and the total is their sum (so each run's gradient is exactly its own), and Adam,
being elementwise, steps every run as its own optimiser would.

Each run keeps its own random streams, drawn in the same order as the one-run trainers in
:mod:`iclr24.loqa.training` and :mod:`iclr24.loqa.lola` (Python's ``random`` for the past-agent draws; a
``torch.Generator`` for the actions, the replay and the Coin Game's board). ``torch.multinomial`` draws one
sample as ``argmax(p / q)`` with ``q ~ Exp(1)`` from its generator, and the CPU generator fills a tensor in
order, so one ``exponential_`` call for a whole episode gives the same actions as one call per step. A batched
run therefore follows the same trajectory as the one-run trainer with the same seed, up to floating-point
summation order (the tests pin this on short runs); over thousands of updates a rounding difference can flip a
sampled action, after which the trajectories are different draws of the same process.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from iclr24.core.progress import track
from iclr24.loqa.agent import LOQA, MemoryOnePolicy, MLPCritic, MLPPolicy, TabularCritic, magic_box
from iclr24.loqa.envs import CoinGame, IteratedPrisonersDilemma
from iclr24.loqa.lola import LOLAConfig
from iclr24.loqa.training import CoinConfig, IPDConfig, IPDHistory

__all__ = ["train_coin_game_batch", "train_ipd_batch", "train_lola_dice_batch"]

PAYOFF = IteratedPrisonersDilemma.PAYOFF  # PAYOFF[a_0, a_1] = (reward of player 0, reward of player 1)


def _noise(generators: Sequence[torch.Generator], *shape: int) -> Tensor:
    """``Exp(1)`` noise ``(*shape[:2], R, *shape[2:])``: what ``torch.multinomial`` would draw from each run's
    generator, step by step and player by player (``shape = (steps, players, batch, actions)``)."""
    return torch.stack([torch.empty(shape).exponential_(1, generator=g) for g in generators], 2)


def _sample(probs: Tensor, noise: Tensor) -> Tensor:
    """One ``torch.multinomial(probs, 1)`` draw, given the exponential noise it would have drawn: the
    ``argmax`` of ``probs / noise`` (the first on ties)."""
    scores = probs / noise
    if scores.size(-1) == 2:  # the same argmax, without a reduction over a dim of two
        return (scores[..., 1] > scores[..., 0]).long()
    return scores.argmax(-1)


#: the other player's memory-one state given player 0's: CD and DC swap
SWAP = torch.tensor([0, 1, 3, 2, 4])


def _play_tabular(p_0: Tensor, p_1: Tensor, noise: Tensor) -> tuple[Tensor, ...]:
    """IPD episodes of tabular memory-one players, in states rather than observations.

    ``p_0`` ``(R, B, 5, 2)`` (or ``(R, 1, 5, 2)``, shared by the batch): player 0's action probabilities per
    memory-one state; ``p_1`` the same for player 1; ``noise`` ``(T, 2, R, B, 2)``. Returns each player's
    states ``(T+1, R, B)`` (0..4: start, CC, CD, DC, DD, own move first), actions and rewards ``(T, R, B)``.

    Player 1's state is player 0's with CD and DC swapped, so the game's state is player 0's alone, and
    every step's actions are a function of it fixed by the noise: both are tabulated for all five states at
    once, and the loop only follows the chain.
    """
    T, _, R, B, _ = noise.shape
    act_0 = _sample(p_0.unsqueeze(0), noise[:, 0, :, :, None, :])  # (T, R, B, 5): player 0's action in each state
    act_1 = _sample(p_1.unsqueeze(0), noise[:, 1, :, :, None, :])[..., SWAP]  # player 1's, by player 0's state
    following = 1 + 2 * act_0 + act_1  # (T, R, B, 5): player 0's next state
    s = torch.zeros(R, B, 1, dtype=torch.long)
    chain = [s]
    for t in range(T):
        s = following[t].gather(-1, s)
        chain.append(s)
    states = torch.stack(chain)  # (T+1, R, B, 1)
    a_0, a_1 = act_0.gather(-1, states[:-1]).squeeze(-1), act_1.gather(-1, states[:-1]).squeeze(-1)
    states = states.squeeze(-1)
    payoff = PAYOFF[a_0, a_1]
    return states, a_0, payoff[..., 0], SWAP[states], a_1, payoff[..., 1]


def _discounting(T: int, rate: float) -> Tensor:
    """``D[t, k] = rate^(k - t)`` for ``k >= t``, else 0: ``D @ x`` sums ``x`` discounted from each step on."""
    k = torch.arange(T)
    power = (k[None, :] - k[:, None]).clamp_min(0).double()
    return torch.where(k[None, :] >= k[:, None], rate ** power, 0.0).float()


def _loaded_dice_returns(opp_rewards: Tensor, opp_values: Tensor, own_logps: Tensor, returns_matrix: Tensor,
                         loaded_matrix: Tensor) -> Tensor:
    """:func:`~iclr24.loqa.agent.loaded_dice_returns` with its two backward recursions as products with the
    discount matrices ``_discounting(T, gamma)`` and ``_discounting(T, gamma * lambda)``: the same sums, in
    one operation each (``(T, ...)`` inputs)."""
    T = opp_rewards.size(0)
    cumulative = torch.cumsum(own_logps, 0)
    boxed = magic_box(torch.cat([torch.zeros_like(cumulative[:1]), cumulative]))
    dice = boxed[1:] - boxed[:-1]
    returns = (returns_matrix @ opp_rewards.reshape(T, -1)).reshape(opp_rewards.shape)
    advantage = (returns - opp_values) * dice
    return returns + (loaded_matrix @ advantage.reshape(T, -1)).reshape(advantage.shape)


def _lookup(table: Tensor, *index: Tensor) -> Tensor:
    """``table[index]`` for a table ``(R, ...)`` whose trailing dims are indexed by ``index`` ``(T, R, B)``
    tensors (leading run index implied), via ``gather`` (whose backward is a cheap ``scatter_add``)."""
    R = table.size(0)
    flat = index[0]
    for size, i in zip(table.shape[2:], index[1:]):
        flat = flat * size + i
    T, _, B = flat.shape
    rows = table.reshape(R, -1).gather(1, flat.permute(1, 0, 2).reshape(R, T * B))  # (R, T*B)
    return rows.reshape(R, T, B).permute(1, 0, 2)


def _self_play_scores(probs: Tensor, episodes: int, horizon: int, seed: int) -> Tensor:
    """Each run's mean reward per step when its policy ``probs`` ``(R, 5, 2)`` plays itself: ``score_against``
    (``policy``, ``policy``, ``seed``) for every run at once (the runs share the generator seeded ``seed``)."""
    R = probs.size(0)
    noise = torch.empty(horizon, 2, 1, episodes, 2).exponential_(1, generator=torch.Generator().manual_seed(seed))
    rewards = _play_tabular(probs[:, None], probs[:, None], noise.expand(-1, -1, R, -1, -1))[2]
    return rewards.mean((0, 2))


def _runs(seeds, shaping_weights, config, caller: str) -> tuple[list, list[float]]:
    """The runs' seeds and shaping weights (default: ``config.shaping_weight`` each), checked."""
    seeds = list(seeds)
    if not seeds:
        raise ValueError(f"{caller} needs at least one seed")
    weights = [config.shaping_weight] * len(seeds) if shaping_weights is None else [float(w) for w in shaping_weights]
    if len(weights) != len(seeds) or min(weights) < 0:
        raise ValueError(f"shaping_weights must give one weight >= 0 per seed ({len(seeds)}), got {shaping_weights}")
    return seeds, weights


def train_ipd_batch(config: IPDConfig, seeds: Sequence[int], *, shaping_weights: Sequence[float] | None = None,
                    on_eval: Callable[[int, list[IPDHistory], list[MemoryOnePolicy]], None] | None = None,
                    progress: bool = False) -> tuple[list[LOQA], list[IPDHistory]]:
    """:func:`~iclr24.loqa.training.train_ipd` for several runs at once, as one batched computation.

    Run r trains with ``seeds[r]`` and ``shaping_weights[r]`` (default: ``config.shaping_weight`` for all; 0 is
    the naive learner), everything else from ``config``. ``on_eval(iteration, histories, policies)`` is called
    at every evaluation with each run's current policy. Returns each run's agent (its policy, critic and
    target critic; fresh optimisers) and history. A history's ``seconds`` are the batched loop's, shared by
    all its runs. ``stop_at_reciprocity`` is not supported (runs stop together): use ``train_ipd``.
    ``progress=True`` draws a bar of the updates (:mod:`iclr24.core.progress`; off by default).
    """
    if config.stop_at_reciprocity:
        raise ValueError("train_ipd_batch trains its runs to the end: use train_ipd for stop_at_reciprocity")
    seeds, weights = _runs(seeds, shaping_weights, config, "train_ipd_batch")
    R = len(seeds)
    T, B, G = config.horizon, config.batch_size, config.opponents_per_batch
    gamma, capacity = config.gamma, config.opponent_replay
    rngs = [random.Random(s) for s in seeds]
    generators = [torch.Generator().manual_seed(s) for s in seeds]
    shaping = torch.tensor(weights)

    logits = torch.zeros(R, 5, 2, requires_grad=True)  # MemoryOnePolicy, per run
    table = torch.zeros(R, T + 1, 5, 2, requires_grad=True)  # TabularCritic, per run
    target = table.detach().clone()
    actor_optimizer = torch.optim.Adam([logits], lr=config.actor_lr)
    critic_optimizer = torch.optim.Adam([table], lr=config.critic_lr)
    past_logits = torch.zeros(R, capacity, 5, 2)  # a ring of snapshots; slot n % capacity holds snapshot n
    past_tables = torch.zeros(R, capacity, T + 1, 5, 2)
    snapshots = 0
    E = config.episode_replay
    replay = {"states": torch.zeros(T + 1, R, E, dtype=torch.long), "actions": torch.zeros(T, R, E, dtype=torch.long),
              "rewards": torch.zeros(T, R, E)}
    cursor = stored = 0

    runs = torch.arange(R)
    tt = torch.arange(T + 1)[:, None, None]  # (T+1, 1, 1): the time step
    group = (torch.arange(B) // (B // G))[None, None, :]  # (1, 1, B): which drawn past agent plays game b
    returns_matrix, loaded_matrix = _discounting(T, gamma), _discounting(T, gamma * config.dice_lambda)
    histories = [IPDHistory() for _ in range(R)]
    start = time.perf_counter()
    for i in track(range(config.iterations), f"LOQA self-play (IPD), {R} runs", enabled=progress):
        if i % config.opponent_replay_every == 0:
            past_logits[:, snapshots % capacity] = logits.detach()
            past_tables[:, snapshots % capacity] = table.detach()
            snapshots += 1
        kept = min(snapshots, capacity)
        oldest = snapshots - kept
        drawn = torch.tensor([[(oldest + rng.choice(range(kept))) % capacity for _ in range(G)] for rng in rngs])
        opp_logits, opp_tables = past_logits[runs[:, None], drawn], past_tables[runs[:, None], drawn]  # (R, G, ...)

        # play: the agent against the drawn past agents, each on its group of B / G games
        noise = _noise(generators, T, 2, B, 2)
        opp_probs = torch.softmax(opp_logits, -1).repeat_interleave(B // G, 1)  # (R, B, 5, 2)
        states, actions, rewards, opp_states, opp_actions, opp_rewards = _play_tabular(
            torch.softmax(logits.detach(), -1)[:, None], opp_probs, noise)
        time_steps = tt.expand(T + 1, R, B)

        # the actor (LOQA.actor_losses, per run)
        logps = _lookup(torch.log_softmax(logits, -1), states[:-1], actions)  # (T, R, B)
        with torch.no_grad():
            values = _lookup((torch.softmax(logits, -1)[:, None] * table).sum(-1), time_steps, states)  # (T+1, R, B)
        advantage = rewards + gamma * values[1:] - values[:-1]
        loss = -(logps * advantage).mean((0, 2))  # (R,)
        if max(weights) > 0:
            with torch.no_grad():
                opp_value_table = (torch.softmax(opp_logits, -1)[:, :, None] * opp_tables).sum(-1)  # (R, G, T+1, 5)
                games = group.expand(T + 1, R, B)
                opp_values = _lookup(opp_value_table, games, time_steps, opp_states)[:-1]
                opp_q = torch.stack([_lookup(opp_tables[..., k], games[:-1], time_steps[:-1], opp_states[:-1])
                                     for k in range(2)], -1)  # (T, R, B, 2)
            loaded = _loaded_dice_returns(opp_rewards, opp_values, logps, returns_matrix, loaded_matrix)
            q_taken = torch.cat([opp_rewards[:-1] + gamma * loaded[1:], opp_rewards[-1:]])
            taken = F.one_hot(opp_actions, 2).bool()
            modelled = torch.where(taken, q_taken.unsqueeze(-1), opp_q)
            opp_logps = torch.log_softmax(modelled / config.tau, -1).gather(-1, opp_actions.unsqueeze(-1)).squeeze(-1)
            loss = loss + shaping * -(opp_logps * advantage).mean((0, 2))
        actor_optimizer.zero_grad()
        loss.sum().backward()
        actor_optimizer.step()

        # the critic on replayed episodes (EpisodeBuffer and LOQA.update_critic, per run)
        index = (cursor + torch.arange(B)) % E
        for key, value in (("states", states), ("actions", actions), ("rewards", rewards)):
            replay[key][:, :, index] = value
        cursor, stored = (cursor + B) % E, min(stored + B, E)
        sample = torch.stack([torch.randint(stored, (B,), generator=g) for g in generators])  # (R, B)
        s, a, r = (replay[key][:, runs[:, None], sample] for key in ("states", "actions", "rewards"))
        q = _lookup(table, time_steps[:-1], s[:-1], a)
        with torch.no_grad():
            bootstrap = r + gamma * _lookup(target.amax(-1), time_steps[1:], s[1:])
        critic_loss = F.huber_loss(q, bootstrap, reduction="none").mean((0, 2)).sum()
        critic_optimizer.zero_grad()
        critic_loss.backward()
        critic_optimizer.step()
        with torch.no_grad():
            target.lerp_(table, 1.0 - config.target_ema)

        if (i + 1) % config.eval_every == 0 or i + 1 == config.iterations:
            seconds = time.perf_counter() - start
            with torch.no_grad():
                probs = torch.softmax(logits, -1)
                rewards_eval = _self_play_scores(probs, 256, T, seed=i)
            for h, p, reward in zip(histories, probs[:, :, 0].tolist(), rewards_eval.tolist()):
                h.iteration.append(i + 1)
                h.seconds.append(seconds)
                h.env_steps.append((i + 1) * B * T)
                h.policy.append(dict(zip(MemoryOnePolicy.STATES, p)))
                h.reward.append(reward)
            if on_eval is not None:
                on_eval(i + 1, histories, _policies(logits))
    return [_agent(config, w, p, c, t) for w, p, c, t in zip(weights, _policies(logits), table.detach(), target)
            ], histories


def _policies(logits: Tensor) -> list[MemoryOnePolicy]:
    """Each run's policy as a :class:`MemoryOnePolicy` (a copy)."""
    out = []
    for run in logits.detach():
        policy = MemoryOnePolicy()
        with torch.no_grad():
            policy.logits.copy_(run)
        out.append(policy)
    return out


def _agent(config: IPDConfig, shaping_weight: float, policy: MemoryOnePolicy, table: Tensor, target: Tensor) -> LOQA:
    critic = TabularCritic(config.horizon)
    with torch.no_grad():
        critic.table.copy_(table)
    agent = LOQA(policy, critic, gamma=config.gamma, tau=config.tau, dice_lambda=config.dice_lambda,
                 shaping_weight=shaping_weight, actor_lr=config.actor_lr, critic_lr=config.critic_lr,
                 target_ema=config.target_ema)
    with torch.no_grad():
        agent.target_critic.table.copy_(target)
    return agent


# --- the Coin Game ------------------------------------------------------------------------------------------


def _stacked(modules: list[nn.Module]) -> list[Tensor]:
    """The parameters of same-shaped MLPs (``nn.Sequential`` of ``Linear`` and ``ReLU`` in ``.net``), stacked
    over runs: ``[W_1, b_1, W_2, b_2, ...]`` with ``W_k`` ``(R, out, in)`` and ``b_k`` ``(R, out)``."""
    return [torch.stack([p.detach() for p in ps]).requires_grad_() for ps in zip(*(m.net.parameters()
                                                                                      for m in modules))]


def _mlp(params: Sequence[Tensor], x: Tensor) -> Tensor:
    """Run-batched MLP: ``x`` ``(R, N, in)`` through run r's weights -> ``(R, N, out)`` (ReLU between layers)."""
    for k in range(0, len(params), 2):
        x = torch.baddbmm(params[k + 1].unsqueeze(1), x, params[k].transpose(1, 2))
        if k + 2 < len(params):
            x = torch.relu_(x)
    return x


def _mlp_over(params: Sequence[Tensor], x: Tensor, groups: int = 1) -> Tensor:
    """:func:`_mlp` on ``x`` ``(..., R, B, in)``; with ``groups`` G the weights are ``(R * G, ...)`` and
    group g of run r (games ``g B/G`` to ``(g+1) B/G``) goes through weights ``r G + g``."""
    *lead, R, B, F = x.shape
    grouped = x.reshape(-1, R * groups, B // groups, F).movedim(0, 1)  # (R G, lead, B/G, F)
    out = _mlp(params, grouped.reshape(R * groups, -1, F))
    return out.reshape(R * groups, -1, B // groups, out.size(-1)).movedim(0, 1).reshape(*lead, R, B, out.size(-1))


def _with_time(obs: Tensor, horizon: int) -> Tensor:
    """``MLPCritic``'s input: the observation ``(T+1, R, B, F)`` and its time step over the horizon."""
    t = torch.arange(obs.size(0)).reshape(-1, 1, 1, 1)
    return torch.cat([obs, (t.float() / horizon).expand(*obs.shape[:-1], 1)], -1)


class _CoinBoards:
    """The Coin Game (:class:`~iclr24.loqa.envs.CoinGame`) for R runs of B games, each run with its own
    generator, drawn in the same order as ``CoinGame``: ``reset`` draws the players, the coin's owner and the
    T+1 boards' uniform scores for free cells (the CPU generator fills a tensor in order)."""

    def __init__(self, generators: Sequence[torch.Generator], batch_size: int, grid: int, horizon: int) -> None:
        self.generators, self.B, self.grid, self.horizon = list(generators), batch_size, grid, horizon

    def reset(self) -> tuple[Tensor, Tensor]:
        B, cells = self.B, self.grid * self.grid
        draws = [(torch.randint(cells, (B, 2), generator=g), torch.randint(2, (B,), generator=g),
                  torch.rand(self.horizon + 1, B, cells, generator=g)) for g in self.generators]
        self.positions, self.owner = torch.stack([d[0] for d in draws]), torch.stack([d[1] for d in draws])
        self.scores = torch.stack([d[2] for d in draws], 1)  # (T+1, R, B, cells)
        self.t = 0
        self.coin = self._free_cell()
        return self._observations()

    def _free_cell(self) -> Tensor:
        scores = self.scores[self.t].scatter(-1, self.positions, -1.0)  # never under a player
        return scores.argmax(-1)

    def _observations(self) -> tuple[Tensor, Tensor]:
        cells = self.grid * self.grid
        players = F.one_hot(self.positions, cells).float()  # (R, B, 2, cells)
        coin = F.one_hot(self.coin, cells).float()
        mine = (self.owner == 0).float().unsqueeze(-1)
        obs_0 = torch.cat([players[..., 0, :], players[..., 1, :], coin * mine, coin * (1 - mine)], -1)
        obs_1 = torch.cat([players[..., 1, :], players[..., 0, :], coin * (1 - mine), coin * mine], -1)
        return obs_0, obs_1

    def step(self, a_0: Tensor, a_1: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        g = self.grid
        move = CoinGame.MOVES[torch.stack([a_0, a_1], -1)]  # (R, B, 2, 2)
        rows = (self.positions // g + move[..., 0]) % g
        cols = (self.positions % g + move[..., 1]) % g
        self.positions = rows * g + cols
        picked = self.positions == self.coin.unsqueeze(-1)  # (R, B, 2)
        rewards = picked.float()
        rewards[..., 0] -= 2.0 * ((self.owner == 0) & picked[..., 1]).float()
        rewards[..., 1] -= 2.0 * ((self.owner == 1) & picked[..., 0]).float()
        taken = picked.any(-1)
        self.owner = torch.where(taken, 1 - self.owner, self.owner)
        self.t += 1
        self.coin = torch.where(taken, self._free_cell(), self.coin)
        return (*self._observations(), rewards[..., 0], rewards[..., 1])


def train_coin_game_batch(config: CoinConfig, seeds: Sequence[int], *,
                          shaping_weights: Sequence[float] | None = None, progress: bool = False) -> list[LOQA]:
    """:func:`~iclr24.loqa.training.train_coin_game` for several runs at once, as one batched computation.

    Run r trains with ``seeds[r]`` and ``shaping_weights[r]`` (default: ``config.shaping_weight``). Returns each
    run's agent (policy, critic and target critic; fresh optimisers). ``progress=True`` draws a bar of the updates
    (off by default)."""
    seeds, weights = _runs(seeds, shaping_weights, config, "train_coin_game_batch")
    R = len(seeds)
    T, B, G, A = config.horizon, config.batch_size, config.opponents_per_batch, CoinGame.num_actions
    gamma, capacity, E = config.gamma, config.opponent_replay, config.episode_replay
    size = 4 * config.grid * config.grid
    rngs = [random.Random(s) for s in seeds]
    generators = [torch.Generator().manual_seed(s) for s in seeds]
    env_generators = [torch.Generator() for _ in seeds]
    agents = []
    for s, g in zip(seeds, env_generators):  # as train_coin_game: the modules from the global seed, a first reset
        torch.manual_seed(s)
        agents.append(LOQA(MLPPolicy(size, A, config.hidden), MLPCritic(size, A, T, config.hidden), gamma=gamma,
                           shaping_weight=0.0, entropy_weight=config.entropy_weight, actor_lr=config.actor_lr,
                           critic_lr=config.critic_lr, grad_clip=1.0))
        g.manual_seed(s)
        cells = config.grid * config.grid
        torch.randint(cells, (B, 2), generator=g), torch.randint(2, (B,), generator=g)
        torch.rand(B, cells, generator=g)
    tau, dice_lambda, target_ema = agents[0].tau, agents[0].dice_lambda, agents[0].target_ema
    policy, critic = _stacked([a.policy for a in agents]), _stacked([a.critic for a in agents])
    target = [p.detach().clone() for p in critic]
    actor_optimizer = torch.optim.Adam(policy, lr=config.actor_lr)
    critic_optimizer = torch.optim.Adam(critic, lr=config.critic_lr)
    past_policy = [torch.zeros(R, capacity, *p.shape[1:]) for p in policy]
    past_critic = [torch.zeros(R, capacity, *p.shape[1:]) for p in critic]
    snapshots = 0
    replay = {"obs": torch.zeros(T + 1, R, E, size, dtype=torch.uint8),
              "actions": torch.zeros(T, R, E, dtype=torch.long), "rewards": torch.zeros(T, R, E)}
    cursor = stored = 0
    shaping = torch.tensor(weights)
    runs = torch.arange(R)
    boards = _CoinBoards(env_generators, B, config.grid, T)
    returns_matrix, loaded_matrix = _discounting(T, gamma), _discounting(T, gamma * dice_lambda)
    for i in track(range(config.iterations), f"LOQA self-play (Coin Game), {R} runs", enabled=progress):
        if i % config.opponent_replay_every == 0:
            for past, now in zip(past_policy + past_critic, policy + critic):
                past[:, snapshots % capacity] = now.detach()
            snapshots += 1
        kept = min(snapshots, capacity)
        drawn = torch.tensor([[(snapshots - kept + rng.choice(range(kept))) % capacity for _ in range(G)]
                              for rng in rngs])
        opp_policy = [p[runs[:, None], drawn].flatten(0, 1) for p in past_policy]  # (R G, ...)
        opp_critic = [p[runs[:, None], drawn].flatten(0, 1) for p in past_critic]

        # play; the agent's logits keep their graph for the actor's loss, the opponents' probabilities are kept
        noise = _noise(generators, T, 2, B, A)  # (T, 2, R, B, A)
        obs_0, obs_1 = boards.reset()
        trajectory = [[obs_0], [], [], [obs_1], [], []]
        own_logits, opp_probs = [], []
        for t in range(T):
            own_logits.append(_mlp(policy, obs_0))
            with torch.no_grad():
                opp_probs.append(torch.softmax(_mlp_over(opp_policy, obs_1, G), -1))
                a_0 = _sample(torch.softmax(own_logits[-1].detach(), -1), noise[t, 0])
                a_1 = _sample(opp_probs[-1], noise[t, 1])
                obs_0, obs_1, r_0, r_1 = boards.step(a_0, a_1)
            for k, v in enumerate((obs_0, a_0, r_0, obs_1, a_1, r_1)):
                trajectory[k].append(v)
        obs, actions, rewards, opp_obs, opp_actions, opp_rewards = (torch.stack(v) for v in trajectory)

        # the actor (LOQA.actor_losses and update_actor, per run)
        logps_all = torch.log_softmax(torch.stack(own_logits), -1)  # (T, R, B, A)
        logps = logps_all.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            probs = torch.cat([logps_all.exp(), torch.softmax(_mlp(policy, obs_0), -1).unsqueeze(0)])
            values = (probs * _mlp_over(critic, _with_time(obs, T))).sum(-1)  # (T+1, R, B)
        advantage = rewards + gamma * values[1:] - values[:-1]
        loss = (-(logps * advantage).mean((0, 2))
                + config.entropy_weight * (logps_all.exp() * logps_all).sum(-1).mean((0, 2)))
        if max(weights) > 0:
            with torch.no_grad():
                opp_q = _mlp_over(opp_critic, _with_time(opp_obs, T)[:-1], G)  # (T, R, B, A)
                opp_values = (torch.stack(opp_probs) * opp_q).sum(-1)
            loaded = _loaded_dice_returns(opp_rewards, opp_values, logps, returns_matrix, loaded_matrix)
            q_taken = torch.cat([opp_rewards[:-1] + gamma * loaded[1:], opp_rewards[-1:]])
            taken = F.one_hot(opp_actions, A).bool()
            modelled = torch.where(taken, q_taken.unsqueeze(-1), opp_q)
            opp_logps = torch.log_softmax(modelled / tau, -1).gather(-1, opp_actions.unsqueeze(-1)).squeeze(-1)
            loss = loss + shaping * -(opp_logps * advantage).mean((0, 2))
        actor_optimizer.zero_grad()
        loss.sum().backward()
        with torch.no_grad():  # clip_grad_norm_(1.0), per run
            norm = torch.stack([p.grad.flatten(1).norm(dim=1) for p in policy]).norm(dim=0)
            clip = (1.0 / (norm + 1e-6)).clamp(max=1.0)
            for p in policy:
                p.grad.mul_(clip.reshape(-1, *([1] * (p.dim() - 1))))
        actor_optimizer.step()

        # the critic on replayed episodes
        index = (cursor + torch.arange(B)) % E
        replay["obs"][:, :, index] = obs.to(torch.uint8)
        replay["actions"][:, :, index] = actions
        replay["rewards"][:, :, index] = rewards
        cursor, stored = (cursor + B) % E, min(stored + B, E)
        sample = torch.stack([torch.randint(stored, (B,), generator=g) for g in generators])  # (R, B)
        o, a, r = (replay[k][:, runs[:, None], sample] for k in ("obs", "actions", "rewards"))
        o = _with_time(o.float(), T)
        q = _mlp_over(critic, o[:-1]).gather(-1, a.unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            bootstrap = r + gamma * _mlp_over(target, o[1:]).amax(-1)
        critic_loss = F.huber_loss(q, bootstrap, reduction="none").mean((0, 2)).sum()
        critic_optimizer.zero_grad()
        critic_loss.backward()
        critic_optimizer.step()
        with torch.no_grad():
            for tgt, online in zip(target, critic):
                tgt.lerp_(online, 1.0 - target_ema)

    for r, (agent, w) in enumerate(zip(agents, weights)):
        agent.shaping_weight = w
        with torch.no_grad():
            for module, stacked in ((agent.policy, policy), (agent.critic, critic), (agent.target_critic, target)):
                for p, value in zip(module.net.parameters(), stacked):
                    p.copy_(value[r])
    return agents


# --- LOLA-DiCE ----------------------------------------------------------------------------------------------


def _dice_objectives(logps_self: Tensor, logps_other: Tensor, rewards: Tensor, gamma: float) -> Tensor:
    """:func:`~iclr24.loqa.lola.dice_objective` of each run: inputs ``(T, R, B)``, output ``(R,)``."""
    discount = gamma ** torch.arange(rewards.size(0), dtype=rewards.dtype).reshape(-1, 1, 1)
    dependencies = torch.cumsum(logps_self + logps_other, 0)
    discounted = discount * rewards
    baseline = discounted.mean(2, keepdim=True)
    return ((magic_box(dependencies) * discounted).sum(0)
            + ((1 - magic_box(logps_self + logps_other)) * baseline).sum(0)).mean(1)


def train_lola_dice_batch(config: LOLAConfig, seeds: Sequence[int], *,
                          progress: bool = False) -> tuple[list[list[Tensor]], list[IPDHistory]]:
    """:func:`~iclr24.loqa.lola.train_lola_dice` for several seeds at once, as one batched computation.
    Returns each run's two agents' logits and its history (``seconds``: the batched loop's). ``progress=True``
    draws a bar of the updates (off by default)."""
    if config.stop_at_reciprocity:
        raise ValueError("train_lola_dice_batch trains its runs to the end: use train_lola_dice")
    seeds = list(seeds)
    R = len(seeds)
    if R == 0:
        raise ValueError("train_lola_dice_batch needs at least one seed")
    T, B, gamma = config.horizon, config.batch_size, config.gamma
    generators = [torch.Generator().manual_seed(s) for s in seeds]
    thetas = [torch.zeros(R, 5, 2, requires_grad=True) for _ in range(2)]

    def episodes(theta_0: Tensor, theta_1: Tensor, i: int) -> tuple[Tensor, ...]:
        """Episodes of the two players, seen by player ``i``: states, actions, rewards, then the other's."""
        played = _play_tabular(torch.softmax(theta_0.detach(), -1)[:, None],
                               torch.softmax(theta_1.detach(), -1)[:, None], _noise(generators, T, 2, B, 2))
        return played if i == 0 else played[3:] + played[:3]

    def logps(theta: Tensor, states: Tensor, actions: Tensor) -> Tensor:
        return _lookup(torch.log_softmax(theta, -1), states[:-1], actions)

    histories = [IPDHistory() for _ in range(R)]
    steps, start = 0, time.perf_counter()
    for it in track(range(config.iterations), f"LOLA-DiCE (IPD), {R} runs", enabled=progress):
        updates = []
        for i in (0, 1):
            j = 1 - i
            s, a, r, opp_s, opp_a, opp_r = episodes(thetas[0], thetas[1], i)
            objective_j = _dice_objectives(logps(thetas[j], opp_s, opp_a), logps(thetas[i], s, a), opp_r, gamma)
            grad_j = torch.autograd.grad(objective_j.sum(), thetas[j], create_graph=True)[0]
            theta_j = thetas[j] + config.inner_lr * grad_j
            pair = (thetas[i], theta_j) if i == 0 else (theta_j, thetas[i])
            s, a, r, opp_s, opp_a, opp_r = episodes(*pair, i)
            objective_i = _dice_objectives(logps(thetas[i], s, a), logps(theta_j, opp_s, opp_a), r, gamma)
            updates.append(torch.autograd.grad(objective_i.sum(), thetas[i])[0])
            steps += 2 * B * T
        with torch.no_grad():
            for theta, grad in zip(thetas, updates):
                theta += config.outer_lr * grad
        if (it + 1) % config.eval_every == 0 or it + 1 == config.iterations:
            rewards = episodes(thetas[0], thetas[1], 0)[2].mean((0, 2))
            seconds = time.perf_counter() - start
            probs = torch.softmax(thetas[0].detach(), -1)[:, :, 0]
            for h, p, reward in zip(histories, probs.tolist(), rewards.tolist()):
                h.iteration.append(it + 1)
                h.seconds.append(seconds)
                h.env_steps.append(steps)
                h.policy.append(dict(zip(MemoryOnePolicy.STATES, p)))
                h.reward.append(reward)
    return [[theta.detach()[r] for theta in thetas] for r in range(R)], histories
