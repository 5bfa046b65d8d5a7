import pytest
import torch

from iclr24.loqa import CoinGame, IteratedPrisonersDilemma


def test_ipd_payoffs_and_observations_for_every_action_pair():
    env = IteratedPrisonersDilemma(4, horizon=3)
    start = env.reset(seed=0)
    assert all(torch.equal(o, torch.zeros(4, 4)) for o in start.values())
    a0, a1 = torch.tensor([0, 0, 1, 1]), torch.tensor([0, 1, 0, 1])  # CC, CD, DC, DD
    obs, rewards, terminations, truncations, infos = env.step({"player_0": a0, "player_1": a1})
    assert rewards["player_0"].tolist() == [-1.0, -3.0, 0.0, -2.0]
    assert rewards["player_1"].tolist() == [-1.0, 0.0, -3.0, -2.0]
    # [own C, own D, other C, other D]
    assert obs["player_0"][1].tolist() == [1, 0, 0, 1] and obs["player_1"][1].tolist() == [0, 1, 1, 0]
    assert not truncations["player_0"].any() and not terminations["player_0"].any()
    env.step({"player_0": a0, "player_1": a1})
    _, _, _, truncations, _ = env.step({"player_0": a0, "player_1": a1})
    assert truncations["player_0"].all() and truncations["player_1"].all()
    with pytest.raises(RuntimeError, match="call reset"):
        env.step({"player_0": a0, "player_1": a1})


def test_bad_actions_are_refused():
    env = IteratedPrisonersDilemma(2)
    env.reset()
    with pytest.raises(ValueError, match="one entry per agent"):
        env.step({"player_0": torch.zeros(2, dtype=torch.long)})
    with pytest.raises(ValueError, match=r"actions\['player_1'\] must lie in \[0, 1\]"):
        env.step({"player_0": torch.zeros(2, dtype=torch.long), "player_1": torch.tensor([0, 2])})
    with pytest.raises(ValueError, match=r"must be an integer tensor of shape \(2,\)"):
        env.step({"player_0": torch.zeros(2), "player_1": torch.zeros(2, dtype=torch.long)})
    with pytest.raises(ValueError, match="batch_size must be"):
        IteratedPrisonersDilemma(0)


def _place(env, p0, p1, coin, owner):
    g = env.grid
    env.positions = torch.tensor([[p0[0] * g + p0[1], p1[0] * g + p1[1]]])
    env.coin = torch.tensor([coin[0] * g + coin[1]])
    env.coin_owner = torch.tensor([owner])


def _step(env, a0, a1):
    return env.step({"player_0": torch.tensor([a0]), "player_1": torch.tensor([a1])})


def test_coin_game_moves_wrap_around_the_torus():
    env = CoinGame(1, grid=3)
    env.reset(seed=0)
    for action, expected in ((0, (1, 2)), (1, (1, 0)), (2, (2, 1)), (3, (0, 1))):
        _place(env, (1, 1), (0, 0), (2, 2), 0)
        _step(env, action, 0)
        assert divmod(int(env.positions[0, 0]), 3) == expected
    _place(env, (0, 2), (0, 0), (2, 2), 0)
    _step(env, 0, 0)  # right from the last column wraps to the first
    assert divmod(int(env.positions[0, 0]), 3) == (0, 0)


@pytest.mark.parametrize("owner, picker, expected", [
    (0, "player_0", (1.0, 0.0)),    # own coin: +1, nobody pays
    (1, "player_0", (1.0, -2.0)),   # the other's coin: +1, its owner pays 2
    (0, "both", (-1.0, 1.0)),       # both take player 0's coin: each +1, and player 0 pays 2 for player 1's pickup
])
def test_coin_game_pickup_rewards(owner, picker, expected):
    env = CoinGame(1, grid=3)
    env.reset(seed=0)
    # the coin at (1, 1); player 0 steps right onto it from (1, 0); player 1 steps onto it from (0, 1) or away
    _place(env, (1, 0), (0, 1) if picker == "both" else (0, 0), (1, 1), owner)
    _, rewards, _, _, infos = _step(env, 0, 2 if picker == "both" else 3)
    assert (float(rewards["player_0"]), float(rewards["player_1"])) == expected
    assert bool(infos["player_0"]["picked_own"]) == (owner == 0)
    assert int(env.coin_owner) == 1 - owner  # colours alternate after a pickup


def test_coins_never_respawn_under_a_player_and_observations_are_egocentric():
    env = CoinGame(256, grid=3, horizon=50)
    obs = env.reset(seed=1)
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        assert not (env.positions == env.coin[:, None]).any()
        own = obs["player_0"].reshape(256, 4, 9)
        other = obs["player_1"].reshape(256, 4, 9)
        assert torch.equal(own[:, 0], other[:, 1]) and torch.equal(own[:, 2], other[:, 3])
        assert (own[:, 2:].sum((1, 2)) == 1).all()  # one coin, in one colour
        obs, *_ = env.step({a: torch.randint(4, (256,), generator=g) for a in env.agents})


def test_step_before_reset_and_bad_seeds_are_refused():
    env = CoinGame(2)
    with pytest.raises(RuntimeError, match=r"call reset\(\) before step\(\)"):
        env.step({"player_0": torch.zeros(2, dtype=torch.long), "player_1": torch.zeros(2, dtype=torch.long)})
    with pytest.raises(TypeError, match="seed must be an int, got 1.5"):
        env.reset(seed=1.5)
