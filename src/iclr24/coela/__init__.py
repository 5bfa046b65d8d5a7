"""CoELA: cooperative embodied agents built modularly with large language models.

Hongxin Zhang, Weihua Du, Jiaming Shan, Qinhong Zhou, Yilun Du, Joshua B. Tenenbaum, Tianmin Shu, Chuang Gan.
"Building Cooperative Embodied Agents Modularly with Large Language Models". ICLR 2024.
https://arxiv.org/abs/2307.02485

    from iclr24.llm import get_model
    from iclr24.coela import TransportEnv, CoELAAgent, HeuristicPlanner, run_episode
    env = TransportEnv(n_agents=2, n_rooms=6, n_objects=6, n_containers=2)
    agents = [CoELAAgent(get_model(), communicate=True, name=a) for a in env.possible_agents]
    episode = run_episode(env, agents, seed=0)       # steps, transport_rate, parse_counts, transcript

TDW-MAT and C-WAH need Unity binaries; ``TransportEnv`` is a text world with the same task, partial
observability, containers and costly messages, on PettingZoo's parallel API.
"""

from iclr24.coela.agent import (
    CoELAAgent,
    HeuristicPlanner,
    Memory,
    Plan,
    RandomPlanner,
    build_menu,
    parse_choice,
)
from iclr24.coela.env import TransportEnv, render_observation
from iclr24.coela.episode import Episode, run_episode

__all__ = ["CoELAAgent", "Episode", "HeuristicPlanner", "Memory", "Plan", "RandomPlanner", "TransportEnv",
           "build_menu", "parse_choice", "render_observation", "run_episode"]
