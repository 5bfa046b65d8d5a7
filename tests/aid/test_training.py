import pytest
import torch

from iclr24.aid import SARNetwork, sar_task
from iclr24.aid.training import (
    binding_selectivity,
    recall_accuracy,
    retrieval_selectivity,
    train_sar,
    train_sar_together,
)


def _one_hot(*rows):
    return torch.eye(4)[list(rows)]


def test_selectivity_is_one_for_matching_orthogonal_keys_and_chance_for_blind_ones():
    roles = torch.stack([_one_hot(0, 1, 2), _one_hot(0, 1, 2)], dim=1)[None]  # (1, 3, 2, 4)
    own = torch.eye(3)[None]
    assert torch.allclose(binding_selectivity(roles, roles, own), torch.ones(1, 3))
    blind = torch.full((1, 3, 2, 4), 0.5)  # the same key for every query
    assert torch.allclose(binding_selectivity(roles, blind, own), torch.full((1, 3), 1 / 3))
    swapped = roles[:, [1, 0, 2]]  # queries 0 and 1 read each other's pair
    assert torch.allclose(binding_selectivity(roles, swapped, own), torch.tensor([[0.0, 0.0, 1.0]]))


def test_selectivity_needs_both_roles_to_match():
    # Role 1 matches for every pair (the same r1): only role 2 tells them apart.
    r1 = _one_hot(0, 0, 0)
    roles = torch.stack([r1, _one_hot(1, 2, 3)], dim=1)[None]  # (1, 3, 2, 4)
    own = torch.eye(3)[None]
    assert torch.allclose(binding_selectivity(roles, roles, own), torch.ones(1, 3))
    keys = torch.stack([r1, torch.full((3, 4), 0.5)], dim=1)[None]  # role-2 keys blind
    assert torch.allclose(binding_selectivity(roles, keys, own), torch.full((1, 3), 1 / 3))


def test_training_learns_a_tiny_sar_and_records_history():
    torch.manual_seed(0)
    task = sar_task(n_words=3, n_pairs=2, ratio=1.0, seed=0)
    model = SARNetwork(task.vocab_size, 8, decomposition="aid", hidden=16, component_dim=8, input_proj_dim=8,
                       mlp_hidden=16)
    held_out = task.sample(64, torch.Generator().manual_seed(1))
    before = recall_accuracy(model, held_out)
    history = train_sar(model, task, 150, batch_size=32, lr=3e-3, eval_every=50, evaluate_on={"seen": held_out},
                        generator=torch.Generator().manual_seed(0))
    assert history.steps == [50, 100, 150] and len(history.train_loss) == 3
    assert history.accuracy["seen"][-1] == recall_accuracy(model, held_out)
    assert history.accuracy["seen"][-1] > max(before, 0.5)  # chance among the 6 y's is 1/6
    assert model.training  # recall_accuracy restores the mode
    s = retrieval_selectivity(model, held_out)
    assert 0 < s <= 1


def test_training_arguments_are_checked():
    task = sar_task(n_words=3, n_pairs=2)
    model = SARNetwork(task.vocab_size, 4, hidden=4, component_dim=4)
    with pytest.raises(ValueError, match="steps must be >= 1"):
        train_sar(model, task, 0)
    with pytest.raises(ValueError, match="lr must be > 0"):
        train_sar(model, task, 1, lr=0.0)
    with pytest.raises(ValueError, match="n_reads=1"):
        retrieval_selectivity(SARNetwork(task.vocab_size, 4, hidden=4, component_dim=4, n_reads=2),
                              task.sample(2))


def _tiny_sar(seed, decomposition, n_pairs=2, n_reads=1):
    task = sar_task(n_words=4, n_pairs=n_pairs, ratio=0.5, seed=seed)
    torch.manual_seed(seed)
    model = SARNetwork(task.vocab_size, 6, decomposition=decomposition, hidden=8, component_dim=4, input_proj_dim=6,
                       mlp_hidden=8, n_reads=n_reads)  # dropout 0.5: the random streams must match too
    return task, model


def test_training_together_equals_training_one_by_one():
    # Two seeds x both decompositions, plus a model of another length and number of reads (its own memory batch).
    specs = [(0, "mlp", 2, 1), (0, "aid", 2, 1), (1, "mlp", 2, 1), (1, "aid", 2, 1), (2, "aid", 3, 2)]
    alone, together, tasks, generators, states, held = [], [], [], [], [], []
    for seed, decomposition, n_pairs, n_reads in specs:
        task, model = _tiny_sar(seed, decomposition, n_pairs, n_reads)
        evaluate_on = {"seen": task.sample(16, torch.Generator().manual_seed(9))}
        history = train_sar(model, task, 7, batch_size=8, lr=3e-3, eval_every=3, evaluate_on=evaluate_on,
                            generator=torch.Generator().manual_seed(seed))
        alone.append((model, history))
        _, model = _tiny_sar(seed, decomposition, n_pairs, n_reads)
        together.append(model)
        states.append(torch.get_rng_state())
        if not tasks or seed != specs[len(tasks) - 1][0]:  # one task and one generator object per seed: both
            shared = task, torch.Generator().manual_seed(seed)  # variants of a seed train on the same batches
        tasks.append(shared[0])
        generators.append(shared[1])
        held.append(evaluate_on)
    torch.manual_seed(123)
    histories = train_sar_together(together, tasks, 7, batch_size=8, lr=3e-3, eval_every=3, evaluate_on=held,
                                   generators=generators, rng_states=states)
    for (model, history), twin, history_twin in zip(alone, together, histories):
        assert history_twin.steps == history.steps == [3, 6, 7]
        assert history_twin.train_loss == pytest.approx(history.train_loss, rel=1e-6, abs=0)
        assert history_twin.accuracy == history.accuracy
        for p, q in zip(model.parameters(), twin.parameters()):
            torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)
    # A different dropout stream gives different weights: the streams are what makes the two runs equal.
    task, model = _tiny_sar(0, "aid")
    train_sar_together([model], [task], 7, batch_size=8, lr=3e-3, generators=[torch.Generator().manual_seed(0)],
                       rng_states=[torch.Generator().manual_seed(5).get_state()])
    assert not torch.equal(model.fwm.classifier.weight, alone[1][0].fwm.classifier.weight)


def test_training_together_checks_its_arguments():
    task, model = _tiny_sar(0, "mlp")
    with pytest.raises(ValueError, match="one per model"):
        train_sar_together([model], [task, task], 1)
    with pytest.raises(ValueError, match="distinct"):
        train_sar_together([model, model], [task, task], 1)
    with pytest.raises(ValueError, match="one entry per model"):
        train_sar_together([model], [task], 1, generators=[])
    with pytest.raises(ValueError, match="steps must be >= 1"):
        train_sar_together([model], [task], 0)
