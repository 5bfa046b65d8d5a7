"""The generated instruction benchmark: conflicting tasks, a held-out split that needs composition."""

import pytest
import torch

from iclr24.moe_peft.tasks import SkillTasks, accuracy, fit, mlp_base


def test_a_shift_relabels_every_example_of_its_skill():
    family = SkillTasks(n_features=5, n_skills=3, n_classes=4, seed=1)
    X0, y0, t0 = family.sample([(2, 0)], 50, torch.Generator().manual_seed(0))
    X2, y2, t2 = family.sample([(2, 2)], 50, torch.Generator().manual_seed(0))
    assert torch.equal(X0[:, :5], X2[:, :5])  # same inputs, different instruction
    assert torch.equal(y2, (y0 + 2) % 4) and bool((y0 != y2).all())  # the tasks disagree everywhere
    assert torch.equal(y0, (X0[:, :5] @ family.skill_weights[2].T).argmax(1))
    assert X0[0, 5:].tolist() == [0, 0, 1, 1, 0, 0, 0] and X2[0, 5:].tolist() == [0, 0, 1, 0, 0, 1, 0]
    assert family.input_dim == 5 + 3 + 4 and t0.unique().tolist() == [0]


def test_held_out_tasks_pair_a_trained_skill_with_a_trained_shift():
    family = SkillTasks(n_skills=8, n_classes=4)
    train, held_out = family.adaptation_split()
    assert len(train) == 16 and len(held_out) == 8 and not set(train) & set(held_out)
    assert {j for _, j in train} == {1, 2, 3} == {j for _, j in held_out}
    for k, j in held_out:
        assert any(s == k for s, _ in train) and any(t == j for _, t in train)
    assert all(j == 0 for _, j in family.pretraining_tasks())


def test_the_same_seed_draws_the_same_family():
    assert torch.equal(SkillTasks(seed=3).skill_weights, SkillTasks(seed=3).skill_weights)
    assert not torch.equal(SkillTasks(seed=3).skill_weights, SkillTasks(seed=4).skill_weights)


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="n_classes must be >= 2"):
        SkillTasks(n_classes=1)
    with pytest.raises(ValueError, match=r"task \(0, 5\) is outside 8 skills x 4 shifts"):
        SkillTasks().sample([(0, 5)], 3, torch.Generator())
    with pytest.raises(ValueError, match="n_per_task must be >= 1"):
        SkillTasks().sample([(0, 1)], 0, torch.Generator())


def test_pretraining_learns_the_skills():
    family = SkillTasks(n_features=4, n_skills=2, n_classes=3, seed=0)
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    base = mlp_base(family.input_dim, 32, 3, depth=2)
    assert [i for i, m in enumerate(base) if isinstance(m, torch.nn.Linear)] == [0, 2, 4]
    X, y, _ = family.sample(family.pretraining_tasks(), 400, g)
    Xt, yt, _ = family.sample(family.pretraining_tasks(), 200, g)
    chance = accuracy(base, Xt, yt)
    losses = fit(base, X, y, epochs=15, lr=3e-3, generator=g)
    assert losses[-1] < 0.5 * losses[0] and accuracy(base, Xt, yt) > max(0.8, chance + 0.3)


def _reference_fit(model, X, y, *, epochs, lr, batch_size, generator):
    """The training loop before Trainer: a gather of each batch from the epoch's permutation."""
    optimiser = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    for _ in range(epochs):
        model.train()
        order = torch.randperm(len(X), generator=generator)
        for start in range(0, len(X), batch_size):
            batch = order[start:start + batch_size]
            loss = torch.nn.functional.cross_entropy(model(X[batch]), y[batch]) + model.auxiliary_loss()
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()


def test_a_stopped_and_continued_fit_is_the_full_fit_bit_for_bit():
    """The sweep screens rates on a short horizon and continues the best: the continued model must be the one
    a full-length fit trains (the same Adam state and batch order, evaluation in between changing nothing)."""
    from iclr24.moe_peft import MoVConfig, get_moe_model
    from iclr24.moe_peft.tasks import Trainer

    family = SkillTasks(n_features=4, n_skills=2, n_classes=3, seed=0)
    X, y, _ = family.sample([(0, 1), (1, 2)], 100, torch.Generator().manual_seed(0))

    def mov():
        torch.manual_seed(0)
        return get_moe_model(mlp_base(family.input_dim, 16, 3), MoVConfig(4, ["2", "4"], ["2", "4"]))

    whole, reference, parts = mov(), mov(), mov()
    fit(whole, X, y, epochs=5, lr=3e-2, batch_size=32, generator=torch.Generator().manual_seed(1))
    _reference_fit(reference, X, y, epochs=5, lr=3e-2, batch_size=32, generator=torch.Generator().manual_seed(1))
    trainer = Trainer(parts, lr=3e-2, generator=torch.Generator().manual_seed(1))
    trainer.run(X, y, epochs=2, batch_size=32)
    accuracy(parts, X, y)
    trainer.run(X, y, epochs=3, batch_size=32)
    assert trainer.epochs_done == 5
    for a, b, c in zip(whole.parameters(), reference.parameters(), parts.parameters()):
        assert torch.equal(a, b) and torch.equal(a, c)
    assert not torch.equal(whole.base_model[2].mov_scaling, torch.ones_like(whole.base_model[2].mov_scaling))
