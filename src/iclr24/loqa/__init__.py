"""LOQA: Learning with Opponent Q-Learning Awareness.

Milad Aghajohari, Juan Agustin Duque, Tim Cooijmans, Aaron Courville. ICLR 2024.
https://arxiv.org/abs/2405.01035

    from iclr24.loqa import LOQA, MemoryOnePolicy, TabularCritic, IteratedPrisonersDilemma, train_ipd
    agent, history = train_ipd(IPDConfig(iterations=12000), seed=0)     # self-play with past versions
    memory_one_policy(agent.policy)     # P(cooperate | start, CC, CD, DC, DD)

The environments follow PettingZoo's parallel API over a batch of games (``reset(seed)``, ``step(actions)``).
``LOQA(policy, critic, ...)`` works with any torch policy and critic; ``shaping_weight=0`` is the naive
actor-critic. ``train_lola_dice`` is the LOLA-DiCE baseline; ``axelrod_tournament`` (extra ``games``) scores
a learned memory-one policy against the axelrod library's strategies.
"""

from iclr24.loqa.agent import (
    LOQA,
    MemoryOnePolicy,
    MLPCritic,
    MLPPolicy,
    Rollout,
    TabularCritic,
    loaded_dice_returns,
    magic_box,
)
from iclr24.loqa.envs import AGENTS, CoinGame, IteratedPrisonersDilemma
from iclr24.loqa.games import axelrod_tournament
from iclr24.loqa.lola import LOLAConfig, dice_objective, train_lola_dice
from iclr24.loqa.training import (
    STRATEGIES,
    CoinConfig,
    EpisodeBuffer,
    FixedMemoryOne,
    GreedyCoinPolicy,
    IPDConfig,
    IPDHistory,
    Opponent,
    Population,
    coin_pickups,
    is_reciprocal,
    memory_one_policy,
    play,
    score_against,
    train_coin_game,
    train_ipd,
)

__all__ = [
    "AGENTS",
    "LOQA",
    "STRATEGIES",
    "CoinConfig",
    "CoinGame",
    "EpisodeBuffer",
    "FixedMemoryOne",
    "GreedyCoinPolicy",
    "IPDConfig",
    "IPDHistory",
    "IteratedPrisonersDilemma",
    "LOLAConfig",
    "MLPCritic",
    "MLPPolicy",
    "MemoryOnePolicy",
    "Opponent",
    "Population",
    "Rollout",
    "TabularCritic",
    "axelrod_tournament",
    "coin_pickups",
    "dice_objective",
    "is_reciprocal",
    "loaded_dice_returns",
    "magic_box",
    "memory_one_policy",
    "play",
    "score_against",
    "train_coin_game",
    "train_ipd",
    "train_lola_dice",
]
