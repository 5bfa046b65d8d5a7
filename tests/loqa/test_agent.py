import pytest
import torch

from iclr24.loqa import (
    LOQA,
    FixedMemoryOne,
    MemoryOnePolicy,
    Population,
    Rollout,
    TabularCritic,
    dice_objective,
    loaded_dice_returns,
    magic_box,
    memory_one_policy,
    score_against,
)
from iclr24.loqa.agent import memory_one_state
from iclr24.loqa.training import STRATEGIES, EpisodeBuffer, is_reciprocal

torch.set_num_threads(1)
STATE_OBS = torch.tensor([[0, 0, 0, 0], [1, 0, 1, 0], [1, 0, 0, 1], [0, 1, 1, 0], [0, 1, 0, 1]], dtype=torch.float32)


def test_memory_one_states_follow_own_move_first():
    assert memory_one_state(STATE_OBS).tolist() == [0, 1, 2, 3, 4]
    tft = FixedMemoryOne(STRATEGIES["tit_for_tat"])
    assert memory_one_policy(tft) == pytest.approx({"start": 1, "CC": 1, "CD": 0, "DC": 1, "DD": 0})
    assert is_reciprocal(memory_one_policy(tft)) and not is_reciprocal(memory_one_policy(
        FixedMemoryOne(STRATEGIES["always_cooperate"])))


def test_score_against_known_strategies():
    tft, ad = FixedMemoryOne(STRATEGIES["tit_for_tat"]), FixedMemoryOne(STRATEGIES["always_defect"])
    # TFT is exploited once, then both defect: (-3 + 9 * -2) / 10 and (0 + 9 * -2) / 10
    assert score_against(tft, ad, episodes=8) == pytest.approx((-2.1, -1.8))
    assert score_against(tft, tft, episodes=8) == pytest.approx((-1.0, -1.0))


def test_magic_box_is_one_with_the_gradient_of_its_argument():
    z = torch.tensor([0.3, -1.2], requires_grad=True)
    box = magic_box(z)
    assert box.tolist() == [1.0, 1.0]
    (box * torch.tensor([2.0, 5.0])).sum().backward()
    assert z.grad.tolist() == [2.0, 5.0]


def test_loaded_dice_returns_have_the_value_of_the_return_and_the_derived_gradient():
    gamma, lam = 0.9, 0.5
    logps = torch.tensor([[-0.3], [-0.7]], requires_grad=True)  # (T=2, B=1): log pi_i(a_0), log pi_i(a_1)
    rewards, values = torch.tensor([[1.0], [2.0]]), torch.tensor([[0.5], [0.25]])
    returns = loaded_dice_returns(rewards, values, logps, gamma, lam)
    G0, G1 = 1.0 + gamma * 2.0, 2.0
    assert returns[:, 0].tolist() == pytest.approx([G0, G1])
    # R~_0 = G_0 + a_0, a_0 = (G_0 - V_0) dice_0 + gamma lam a_1, a_1 = (G_1 - V_1) dice_1, dice_t -> grad l_t
    grad = torch.autograd.grad(returns[0, 0], logps)[0][:, 0]
    assert grad.tolist() == pytest.approx([G0 - 0.5, gamma * lam * (G1 - 0.25)])
    grad1 = torch.autograd.grad(loaded_dice_returns(rewards, values, logps, gamma, lam)[1, 0], logps)[0][:, 0]
    assert grad1.tolist() == pytest.approx([0.0, G1 - 0.25])  # the future does not depend on the past's actions


def _rollout(T=3, B=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    obs = torch.nn.functional.one_hot(torch.randint(2, (T + 1, B, 2), generator=g), 2).flatten(-2).float()
    obs[0] = 0
    acts = torch.randint(2, (T, B), generator=g)
    return Rollout(obs, acts, torch.randn(T, B, generator=g), obs[:, :, [2, 3, 0, 1]],
                   torch.randint(2, (T, B), generator=g), torch.randn(T, B, generator=g))


def _agent(shaping=1.0, T=3):
    torch.manual_seed(0)
    agent = LOQA(MemoryOnePolicy(), TabularCritic(T), shaping_weight=shaping, gamma=0.9, tau=0.5, dice_lambda=0.8)
    with torch.no_grad():
        agent.policy.logits.normal_()
        agent.critic.table.normal_()
        agent.target_critic.table.normal_()
    return agent


def test_actor_loss_is_the_td0_policy_gradient():
    agent, r = _agent(), _rollout()
    losses = agent.actor_losses(r, _agent())
    logp = torch.log_softmax(agent.policy(r.obs[:-1]), -1).gather(-1, r.actions[..., None])[..., 0]
    probs = torch.softmax(agent.policy(r.obs), -1)
    t = torch.arange(4)[:, None]
    V = (probs * agent.critic(r.obs, t)).sum(-1)
    advantage = r.rewards + 0.9 * V[1:] - V[:-1]
    torch.testing.assert_close(losses["agent"], -(logp * advantage.detach()).mean())


def test_shaping_loss_models_the_opponent_by_its_q_values_with_the_loaded_return():
    agent, opponent, r = _agent(), _agent(), _rollout()
    with torch.no_grad():
        opponent.critic.table.normal_(generator=torch.Generator().manual_seed(1))
    losses = agent.actor_losses(r, opponent)
    # reference: the opponent's Q with the taken entry replaced by r^j_t + gamma R~_{t+1}
    logp = torch.log_softmax(agent.policy(r.obs[:-1]), -1).gather(-1, r.actions[..., None])[..., 0]
    t = torch.arange(4)[:, None]
    q_opp = opponent.critic(r.opp_obs, t).detach()
    v_opp = (torch.softmax(opponent.policy(r.opp_obs), -1) * q_opp).sum(-1).detach()
    loaded = loaded_dice_returns(r.opp_rewards, v_opp[:-1], logp, 0.9, 0.8)
    q_taken = torch.cat([r.opp_rewards[:-1] + 0.9 * loaded[1:], r.opp_rewards[-1:]])
    modelled = q_opp[:-1].scatter(-1, r.opp_actions[..., None], q_taken[..., None])
    opp_logp = torch.log_softmax(modelled / 0.5, -1).gather(-1, r.opp_actions[..., None])[..., 0]
    V = (torch.softmax(agent.policy(r.obs), -1) * agent.critic(r.obs, t)).sum(-1).detach()
    advantage = r.rewards + 0.9 * V[1:] - V[:-1]
    expected = -(opp_logp * advantage).mean()
    torch.testing.assert_close(losses["shaping"], expected)
    (g_ours,) = torch.autograd.grad(losses["shaping"], agent.policy.logits)
    (g_ref,) = torch.autograd.grad(expected, agent.policy.logits)
    torch.testing.assert_close(g_ours, g_ref)
    assert g_ours.abs().sum() > 0  # the opponent model carries a gradient to the agent's own policy
    assert "shaping" not in _agent(shaping=0.0).actor_losses(r, opponent)


def test_critic_loss_uses_the_target_network_and_max():
    agent, r = _agent(), _rollout()
    t = torch.arange(4)[:, None]
    q = agent.critic(r.obs[:-1], t[:-1]).gather(-1, r.actions[..., None])[..., 0]
    target = r.rewards + 0.9 * agent.target_critic(r.obs[1:], t[1:]).amax(-1)
    torch.testing.assert_close(agent.critic_loss(r), torch.nn.functional.huber_loss(q, target.detach()))
    before = agent.target_critic.table.clone()
    agent.update_critic(r)
    torch.testing.assert_close(agent.target_critic.table, 0.99 * before + 0.01 * agent.critic.table.detach())


def test_population_applies_each_member_to_its_slice():
    members = [_agent().policy, MemoryOnePolicy()]
    with torch.no_grad():
        members[1].logits.fill_(2.0)
    obs = _rollout(B=4).obs  # (T+1, 4, 4)
    out = Population(members)(obs)
    torch.testing.assert_close(out[:, :2], members[0](obs[:, :2]))
    torch.testing.assert_close(out[:, 2:], members[1](obs[:, 2:]))
    critics = [TabularCritic(3), TabularCritic(3)]
    with torch.no_grad():
        critics[1].table.fill_(1.0)
    q = Population(critics)(obs, torch.arange(4)[:, None])
    assert (q[:, :2] == 0).all() and (q[:, 2:] == 1).all()


def test_episode_buffer_keeps_the_latest_episodes():
    buffer = EpisodeBuffer(6)
    for seed in range(3):
        buffer.push(_rollout(B=4, seed=seed))
    assert buffer.size == 6
    sample = buffer.sample(100, torch.Generator().manual_seed(0))
    kept = torch.cat([_rollout(B=4, seed=1).rewards[:, 2:], _rollout(B=4, seed=2).rewards], 1)
    assert all(any(torch.equal(sample.rewards[:, i], kept[:, j]) for j in range(6)) for i in range(100))


def test_dice_objective_gives_the_reinforce_gradient_with_baseline():
    l_self = torch.tensor([[-0.2, -0.9]], requires_grad=True)  # T=1, B=2
    l_other = torch.tensor([[-0.5, -0.1]])
    rewards = torch.tensor([[1.0, 3.0]])
    objective = dice_objective(l_self, l_other, rewards, 0.96)
    assert float(objective.detach()) == pytest.approx(2.0)  # the mean return
    (grad,) = torch.autograd.grad(objective, l_self)
    assert grad[0].tolist() == pytest.approx([(1.0 - 2.0) / 2, (3.0 - 2.0) / 2])


def test_bad_hyperparameters_are_refused():
    with pytest.raises(ValueError, match=r"gamma must lie in \[0.0, 1.0\]"):
        LOQA(MemoryOnePolicy(), TabularCritic(3), gamma=1.5)
    with pytest.raises(ValueError, match="tau must be > 0"):
        LOQA(MemoryOnePolicy(), TabularCritic(3), tau=0.0)
    with pytest.raises(ValueError, match="shaping_weight must be >= 0"):
        LOQA(MemoryOnePolicy(), TabularCritic(3), shaping_weight=-1.0)
    with pytest.raises(ValueError, match="p_cooperate must be 5 probabilities"):
        FixedMemoryOne([0.5, 1.2, 0, 0, 0])


def test_more_bad_input_is_refused_with_the_argument_named():
    with pytest.raises(ValueError, match="grad_clip must be > 0"):
        LOQA(MemoryOnePolicy(), TabularCritic(3), grad_clip=-1.0)
    with pytest.raises(ValueError, match=r"t must lie in \[0, 3\]"):
        TabularCritic(3)(STATE_OBS, torch.tensor(4))
    with pytest.raises(ValueError, match="p_cooperate must be 5 probabilities"):
        FixedMemoryOne([float("nan")] * 5)
    with pytest.raises(ValueError, match="Population needs at least one module"):
        Population([])
    with pytest.raises(ValueError, match="episodes must be >= 1"):
        score_against(MemoryOnePolicy(), MemoryOnePolicy(), episodes=0)
    from iclr24.loqa import IPDConfig

    with pytest.raises(ValueError, match="gamma must be <= 1"):
        IPDConfig(gamma=2.0)
    with pytest.raises(ValueError, match="actor_lr must be > 0"):
        IPDConfig(actor_lr=-1.0)
