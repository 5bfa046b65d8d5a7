"""Environment steps per second: the torch-vectorised games vs a plain Python loop over games.

A plain loop (one game at a time, Python lists and ints) is what a user writes first; the vectorised
envs step a whole batch of games with a few tensor ops. Both play uniformly random actions; one thread.

    python benchmarks/loqa.py
    python benchmarks/loqa.py --batch 64 1024 --steps 200
"""

from __future__ import annotations

import argparse
import random
import time

import torch

from iclr24.loqa import CoinGame, IteratedPrisonersDilemma

PAYOFF = {(0, 0): (-1, -1), (0, 1): (-3, 0), (1, 0): (0, -3), (1, 1): (-2, -2)}
MOVES = [(0, 1), (0, -1), (1, 0), (-1, 0)]


def python_ipd(batch: int, steps: int) -> float:
    rng = random.Random(0)
    start = time.perf_counter()
    for _ in range(batch):
        last = None
        for _ in range(steps):
            a, b = rng.randrange(2), rng.randrange(2)
            reward = PAYOFF[a, b]
            last = ((a, b), reward)
    assert last is not None
    return batch * steps / (time.perf_counter() - start)


def python_coin(batch: int, steps: int, grid: int = 3) -> float:
    rng = random.Random(0)
    start = time.perf_counter()
    for _ in range(batch):
        players = [(rng.randrange(grid), rng.randrange(grid)) for _ in range(2)]
        free = [(r, c) for r in range(grid) for c in range(grid) if (r, c) not in players]
        coin, owner = rng.choice(free), rng.randrange(2)
        for _ in range(steps):
            players = [((r + MOVES[m][0]) % grid, (c + MOVES[m][1]) % grid)
                       for (r, c), m in zip(players, (rng.randrange(4), rng.randrange(4)))]
            picked = [p == coin for p in players]
            rewards = [float(x) for x in picked]
            for me in (0, 1):
                if owner == me and picked[1 - me]:
                    rewards[me] -= 2.0
            if any(picked):
                owner = 1 - owner
                free = [(r, c) for r in range(grid) for c in range(grid) if (r, c) not in players]
                coin = rng.choice(free)
    return batch * steps / (time.perf_counter() - start)


def torch_env(env, steps: int) -> float:
    g = torch.Generator().manual_seed(0)
    env.reset(seed=0)
    start = time.perf_counter()
    done = 0
    while done < steps:
        if env.t >= env.horizon:
            env.reset()
        env.step({a: torch.randint(env.num_actions, (env.batch_size,), generator=g) for a in env.agents})
        done += 1
    return env.batch_size * steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, nargs="+", default=[64, 1024, 8192])
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{'game':>5} {'batch':>6} {'torch steps/s':>14} {'python steps/s':>15} {'ratio':>7}")
    for batch in args.batch:
        python_games = max(1, min(batch, 512))  # the loop's rate does not depend on the batch
        for name, env, loop in (("IPD", IteratedPrisonersDilemma(batch, horizon=10), python_ipd),
                                ("coin", CoinGame(batch, horizon=50), python_coin)):
            ours = torch_env(env, args.steps)
            theirs = loop(python_games, args.steps)
            print(f"{name:>5} {batch:>6} {ours:>14,.0f} {theirs:>15,.0f} {ours / theirs:>7.1f}", flush=True)


if __name__ == "__main__":
    main()
