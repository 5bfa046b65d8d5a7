"""Two-player games vectorised in torch, with a PettingZoo-parallel-style API.

``reset(seed)`` returns ``{agent: observation}``; ``step({agent: actions})`` returns
``(observations, rewards, terminations, truncations, infos)``, each a dict over ``agents``; every
value holds a batch of independent games. Episodes have a fixed length, so ``truncations`` turns
true for the whole batch at the last step and ``terminations`` never does.
"""

from __future__ import annotations

import torch
from torch import Tensor

from iclr24.core.checks import check_int

__all__ = ["AGENTS", "CoinGame", "IteratedPrisonersDilemma"]

AGENTS = ("player_0", "player_1")


class _BatchedGame:
    agents = AGENTS
    num_actions: int
    observation_size: int

    def __init__(self, batch_size: int, horizon: int) -> None:
        check_int("batch_size", batch_size, minimum=1)
        check_int("horizon", horizon, minimum=1)
        self.batch_size, self.horizon = batch_size, horizon
        self.t, self._started = 0, False
        self.generator = torch.Generator()

    def _actions(self, actions: dict) -> tuple[Tensor, Tensor]:
        if set(actions) != set(self.agents):
            raise ValueError(f"actions must have one entry per agent {self.agents}, got {sorted(actions)}")
        out = []
        for agent in self.agents:
            a = torch.as_tensor(actions[agent])
            if a.shape != (self.batch_size,) or a.dtype.is_floating_point or a.dtype == torch.bool:
                raise ValueError(f"actions[{agent!r}] must be an integer tensor of shape ({self.batch_size},), "
                                 f"got {a.dtype} {tuple(a.shape)}")
            if ((a < 0) | (a >= self.num_actions)).any():
                raise ValueError(f"actions[{agent!r}] must lie in [0, {self.num_actions - 1}]")
            out.append(a.long())
        if self.t >= self.horizon:
            raise RuntimeError(f"the episode ended after {self.horizon} steps: call reset() first")
        if not self._started:
            raise RuntimeError("call reset() before step()")
        return out[0], out[1]

    def _seed(self, seed: int | None) -> None:
        if seed is not None:
            check_int("seed", seed, minimum=0)
            self.generator.manual_seed(seed)
        self.t, self._started = 0, True

    def _done(self) -> tuple[dict, dict]:
        self.t += 1
        last = torch.full((self.batch_size,), self.t >= self.horizon)
        never = torch.zeros(self.batch_size, dtype=torch.bool)
        return {a: never for a in self.agents}, {a: last for a in self.agents}


class IteratedPrisonersDilemma(_BatchedGame):
    """The iterated prisoner's dilemma. Action 0 cooperates, 1 defects.

    Rewards per step (row player, column player): CC (-1, -1), CD (-3, 0), DC (0, -3), DD (-2, -2).
    Each player observes ``[own C, own D, other C, other D]`` of the last round, all zeros at the start:
    the memory-one state of the game.
    """

    num_actions = 2
    observation_size = 4
    #: PAYOFF[a_0, a_1] = (reward of player 0, reward of player 1)
    PAYOFF = torch.tensor([[[-1.0, -1.0], [-3.0, 0.0]], [[0.0, -3.0], [-2.0, -2.0]]])

    def __init__(self, batch_size: int, horizon: int = 10) -> None:
        super().__init__(batch_size, horizon)

    def reset(self, seed: int | None = None) -> dict:
        self._seed(seed)
        start = torch.zeros(self.batch_size, 4)
        return {a: start.clone() for a in self.agents}

    def step(self, actions: dict):
        a0, a1 = self._actions(actions)
        payoff = self.PAYOFF[a0, a1]
        one_hot = [torch.nn.functional.one_hot(a, 2).float() for a in (a0, a1)]
        observations = {"player_0": torch.cat([one_hot[0], one_hot[1]], -1),
                        "player_1": torch.cat([one_hot[1], one_hot[0]], -1)}
        rewards = {"player_0": payoff[:, 0], "player_1": payoff[:, 1]}
        terminations, truncations = self._done()
        return observations, rewards, terminations, truncations, {a: {} for a in self.agents}


class CoinGame(_BatchedGame):
    """The symmetric Coin Game (Lerer & Peysakhovich 2017, in the version the LOQA paper uses).

    Two players and one coin on a ``grid x grid`` torus; the coin has an owner's colour. Moving onto
    the coin picks it up: +1 to whoever picks it up, and -2 to the owner when the other player takes
    it. Both may take it at once (each gets +1, and the owner pays 2 for the other's pickup). A new
    coin appears at a free cell (never under a player) in the other player's colour. Actions 0..3 move
    right, left, down, up on the torus (the authors' code numbers them left, right, up, down).
    ``infos[agent]`` has ``picked`` and ``picked_own`` per game.

    Observation per player, from its own point of view: four ``grid x grid`` planes, flattened
    (own position, other's position, coin of own colour, coin of the other's colour).
    """

    num_actions = 4
    MOVES = torch.tensor([[0, 1], [0, -1], [1, 0], [-1, 0]])

    def __init__(self, batch_size: int, grid: int = 3, horizon: int = 50) -> None:
        super().__init__(batch_size, horizon)
        check_int("grid", grid, minimum=2)
        self.grid = grid
        self.observation_size = 4 * grid * grid

    def reset(self, seed: int | None = None) -> dict:
        self._seed(seed)
        # players anywhere (they may share a cell, as in the authors' game), the coin on a free cell
        self.positions = torch.randint(self.grid * self.grid, (self.batch_size, 2), generator=self.generator)
        self.coin_owner = torch.randint(2, (self.batch_size,), generator=self.generator)
        self.coin = self._free_cell(torch.ones(self.batch_size, dtype=torch.bool))
        return self._observations()

    def _free_cell(self, where: Tensor) -> Tensor:
        """A uniformly random cell not occupied by either player, for the games in ``where``."""
        cells = self.grid * self.grid
        scores = torch.rand(self.batch_size, cells, generator=self.generator)
        scores.scatter_(1, self.positions, -1.0)  # never under a player
        fresh = scores.argmax(1)
        return torch.where(where, fresh, getattr(self, "coin", fresh))

    def _observations(self) -> dict:
        cells = self.grid * self.grid
        planes = torch.zeros(self.batch_size, 2, 4, cells)
        rows = torch.arange(self.batch_size)
        for me, other in ((0, 1), (1, 0)):
            planes[rows, me, 0, self.positions[:, me]] = 1.0
            planes[rows, me, 1, self.positions[:, other]] = 1.0
            own = self.coin_owner == me
            planes[rows, me, 2, self.coin] = own.float()
            planes[rows, me, 3, self.coin] = (~own).float()
        return {a: planes[:, i].reshape(self.batch_size, -1) for i, a in enumerate(self.agents)}

    def step(self, actions: dict):
        a0, a1 = self._actions(actions)
        g = self.grid
        rows, cols = self.positions // g, self.positions % g
        move = self.MOVES[torch.stack([a0, a1], 1)]  # (B, 2, 2)
        rows, cols = (rows + move[..., 0]) % g, (cols + move[..., 1]) % g
        self.positions = rows * g + cols
        picked = self.positions == self.coin[:, None]  # (B, 2)
        rewards = picked.float()  # +1 for any pickup
        for me, other in ((0, 1), (1, 0)):
            # the owner pays 2 when the other player takes its coin
            rewards[:, me] -= 2.0 * ((self.coin_owner == me) & picked[:, other]).float()
        infos = {a: {"picked": picked[:, i], "picked_own": picked[:, i] & (self.coin_owner == i)}
                 for i, a in enumerate(self.agents)}
        taken = picked.any(1)
        self.coin_owner = torch.where(taken, 1 - self.coin_owner, self.coin_owner)  # colours alternate
        self.coin = self._free_cell(taken)
        terminations, truncations = self._done()
        return (self._observations(), {a: rewards[:, i] for i, a in enumerate(self.agents)}, terminations,
                truncations, infos)
