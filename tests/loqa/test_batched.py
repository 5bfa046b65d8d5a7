"""The batched trainers (the reproduction's fast path) against the one-run trainers they stand for."""

import pytest
import torch

from iclr24.loqa import CoinConfig, IPDConfig, LOLAConfig, loaded_dice_returns, train_coin_game, train_ipd
from iclr24.loqa.batched import (
    _discounting,
    _loaded_dice_returns,
    _sample,
    train_coin_game_batch,
    train_ipd_batch,
    train_lola_dice_batch,
)
from iclr24.loqa.lola import train_lola_dice

torch.set_num_threads(1)


@pytest.mark.parametrize("actions", [2, 4])
def test_sample_is_torch_multinomial_given_its_noise(actions):
    probs = torch.softmax(torch.randn(3, 50, actions), -1)
    drawn = torch.multinomial(probs.reshape(-1, actions), 1, generator=torch.Generator().manual_seed(7))
    noise = torch.empty(probs.shape).exponential_(1, generator=torch.Generator().manual_seed(7))
    assert torch.equal(_sample(probs, noise), drawn.reshape(3, 50))


def test_loaded_dice_returns_by_discount_matrices_match_the_recursion():
    T, B = 6, 5
    rewards, values = torch.randn(T, B, dtype=torch.float64), torch.randn(T, B, dtype=torch.float64)
    logps = torch.randn(T, B, dtype=torch.float64, requires_grad=True)
    ref = loaded_dice_returns(rewards, values, logps, 0.96, 0.9)
    out = _loaded_dice_returns(rewards, values, logps, _discounting(T, 0.96).double(),
                               _discounting(T, 0.96 * 0.9).double())
    torch.testing.assert_close(out, ref)
    weights = torch.randn(T, B, dtype=torch.float64)
    (g_ref,) = torch.autograd.grad((ref * weights).sum(), logps)
    (g_out,) = torch.autograd.grad((out * weights).sum(), logps)
    torch.testing.assert_close(g_out, g_ref)


def test_batched_ipd_runs_follow_their_one_run_trajectories():
    cfg = IPDConfig(iterations=40, batch_size=16, eval_every=20, opponents_per_batch=4, opponent_replay=3)
    seeds, weights = [3, 4, 3], [1.0, 1.0, 0.0]  # the replay of 3 past agents wraps around
    agents, histories = train_ipd_batch(cfg, seeds, shaping_weights=weights)
    for seed, weight, agent, history in zip(seeds, weights, agents, histories):
        ref, ref_history = train_ipd(IPDConfig(**{**cfg.__dict__, "shaping_weight": weight}), seed=seed)
        torch.testing.assert_close(agent.policy.logits, ref.policy.logits, atol=1e-5, rtol=0)
        torch.testing.assert_close(agent.critic.table, ref.critic.table, atol=1e-5, rtol=0)
        torch.testing.assert_close(agent.target_critic.table, ref.target_critic.table, atol=1e-5, rtol=0)
        assert history.reward == ref_history.reward and history.env_steps == ref_history.env_steps
        for p, q in zip(history.policy, ref_history.policy):
            assert p == pytest.approx(q, abs=1e-5)
        assert agent.shaping_weight == weight


def test_batched_lola_dice_runs_follow_their_one_run_trajectories():
    cfg = LOLAConfig(iterations=3, batch_size=16, eval_every=1)
    thetas, histories = train_lola_dice_batch(cfg, [0, 1])
    for seed in (0, 1):
        ref, ref_history = train_lola_dice(cfg, seed=seed)
        for a, b in zip(thetas[seed], ref):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
        assert histories[seed].reward == ref_history.reward
        assert histories[seed].env_steps == ref_history.env_steps


def test_batched_coin_game_runs_follow_their_one_run_trajectories():
    cfg = CoinConfig(iterations=3, batch_size=8, horizon=6, hidden=8, episode_replay=20, opponent_replay_every=2)
    seeds, weights = [0, 1], [1.0, 0.0]
    agents = train_coin_game_batch(cfg, seeds, shaping_weights=weights)
    for seed, weight, agent in zip(seeds, weights, agents):
        ref = train_coin_game(CoinConfig(**{**cfg.__dict__, "shaping_weight": weight}), seed=seed)
        for module in ("policy", "critic", "target_critic"):
            for a, b in zip(getattr(agent, module).parameters(), getattr(ref, module).parameters()):
                torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_batched_trainers_check_their_runs():
    with pytest.raises(ValueError, match="one weight >= 0 per seed"):
        train_ipd_batch(IPDConfig(iterations=1), [0, 1], shaping_weights=[1.0])
    with pytest.raises(ValueError, match="at least one seed"):
        train_coin_game_batch(CoinConfig(iterations=1), [])
    with pytest.raises(ValueError, match="use train_ipd"):
        train_ipd_batch(IPDConfig(iterations=1, stop_at_reciprocity=True), [0])
