import math

import pytest
import torch

from iclr24.dats import (
    DifficultyAwareTaskSampler,
    SelfPacedTaskSampler,
    UniformTaskSampler,
    allocate_points,
    gradient_alignment,
    normalized_scores,
)

# A 3-task case worked by hand. Unit validation directions v = (1,0), (0,1), (-1,0); training directions
# (1,0), (0,1), (1,1)/sqrt2. cos(g_i, v_j) = [[1,0,-1],[0,1,0],[1,1,-1]/sqrt2];
# sqrt(L_i^train L_j^val) = [[1,1,2],[2,2,4],[.5,.5,1]]; row sums of the products: s = [-1, 2, 0].
TRAIN_LOSSES = torch.tensor([1.0, 4.0, 0.25])
VAL_LOSSES = torch.tensor([1.0, 1.0, 4.0])
TRAIN_GRADS = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
VAL_GRADS = torch.tensor([[1.0, 0.0], [0.0, 2.0], [-1.0, 0.0]])
S = [-1.0, 2.0, 0.0]


def _softmax(v):
    e = [math.exp(x) for x in v]
    return [x / sum(e) for x in e]


def test_gradient_alignment_on_the_hand_computed_case():
    s = gradient_alignment(TRAIN_LOSSES, VAL_LOSSES, TRAIN_GRADS, VAL_GRADS)
    assert s.tolist() == pytest.approx(S, abs=1e-12)


def test_gradient_alignment_uses_train_and_validation_losses_asymmetrically():
    swapped = gradient_alignment(VAL_LOSSES, TRAIN_LOSSES, TRAIN_GRADS, VAL_GRADS)
    assert swapped.tolist() != pytest.approx(S, abs=1e-6)


def test_a_zero_gradient_aligns_with_nothing():
    grads = TRAIN_GRADS.clone()
    grads[1] = 0
    s = gradient_alignment(TRAIN_LOSSES, VAL_LOSSES, grads, VAL_GRADS)
    assert s[1].item() == 0.0 and torch.isfinite(s).all()


def test_dats_update_is_q_times_exp_eta_s():
    sampler = DifficultyAwareTaskSampler(3, eta=0.5)
    p = sampler.update(TRAIN_LOSSES, VAL_LOSSES, TRAIN_GRADS, VAL_GRADS)
    assert p.tolist() == pytest.approx(_softmax([0.5 * s for s in S]), abs=1e-12)
    # consecutive KL: q is the previous p, so a second identical update compounds
    p2 = sampler.update(TRAIN_LOSSES, VAL_LOSSES, TRAIN_GRADS, VAL_GRADS)
    assert p2.tolist() == pytest.approx(_softmax([1.0 * s for s in S]), abs=1e-12)


def test_normalized_scores_divide_by_the_root_of_the_summed_losses():
    # sum L^train = 5.25, sum L^val = 6: s / sqrt(31.5)
    s = normalized_scores(torch.tensor(S, dtype=torch.float64), TRAIN_LOSSES, VAL_LOSSES)
    assert s.tolist() == pytest.approx([v / math.sqrt(31.5) for v in S], abs=1e-12)
    assert normalized_scores(torch.tensor(S), torch.zeros(3), VAL_LOSSES).tolist() == [0.0] * 3


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_normalized_dats_gives_one_eta_the_same_tilt_at_any_loss_scale(scale, dtype):
    sampler = DifficultyAwareTaskSampler(3, eta=0.5, normalize_scores=True)
    p = sampler.update((TRAIN_LOSSES * scale).to(dtype), (VAL_LOSSES * scale).to(dtype), TRAIN_GRADS.to(dtype),
                       VAL_GRADS.to(dtype))
    assert p.tolist() == pytest.approx(_softmax([0.5 * v / math.sqrt(31.5) for v in S]), abs=1e-6)
    assert sampler.last_scores.tolist() == pytest.approx([v / math.sqrt(31.5) for v in S], abs=1e-6)


def test_raw_dats_scores_carry_the_loss_scale():
    # the review's finding: eta 0.5 on another loss scale put nearly all the probability on one task
    grads = torch.ones(3, 4, dtype=torch.float64)
    losses = torch.tensor([10.0, 2.0, 1.0], dtype=torch.float64)
    raw = [DifficultyAwareTaskSampler(3, eta=0.5).update(c * losses, c * losses, grads, grads).max().item()
           for c in (0.01, 1.0)]
    assert raw[0] < 0.4 and raw[1] > 0.95
    normalized = [DifficultyAwareTaskSampler(3, eta=0.5, normalize_scores=True).update(c * losses, c * losses, grads,
                                                                                       grads).max().item()
                  for c in (0.01, 1.0, 100.0)]
    assert normalized == pytest.approx([normalized[0]] * 3, abs=1e-12) and 0.4 < normalized[0] < 0.45


def test_dats_uniform_kl_restarts_from_uniform_each_update():
    sampler = DifficultyAwareTaskSampler(3, eta=0.5, kl="uniform")
    for _ in range(3):
        p = sampler.update(TRAIN_LOSSES, VAL_LOSSES, TRAIN_GRADS, VAL_GRADS)
    assert p.tolist() == pytest.approx(_softmax([0.5 * s for s in S]), abs=1e-12)


def test_floor_mixes_with_uniform_and_bounds_every_probability():
    sampler = DifficultyAwareTaskSampler(3, eta=50.0, floor=0.1)
    p = sampler.update(TRAIN_LOSSES, VAL_LOSSES, TRAIN_GRADS, VAL_GRADS)
    expected = [0.1 + 0.7 * v for v in _softmax([50.0 * s for s in S])]
    assert p.tolist() == pytest.approx(expected, abs=1e-12)
    assert p.sum().item() == pytest.approx(1.0, abs=1e-12) and p.min().item() >= 0.1


def test_dats_without_floor_collapses_and_large_eta_does_not_overflow():
    sampler = DifficultyAwareTaskSampler(3, eta=1e4)
    p = sampler.update(TRAIN_LOSSES, VAL_LOSSES, TRAIN_GRADS, VAL_GRADS)
    assert torch.isfinite(p).all() and p[1].item() == pytest.approx(1.0)


def test_self_paced_tilts_toward_the_largest_training_loss():
    sampler = SelfPacedTaskSampler(3, eta=0.5)
    p = sampler.update(TRAIN_LOSSES)
    assert p.tolist() == pytest.approx(_softmax([0.5, 2.0, 0.125]), abs=1e-12)


def test_uniform_sampler_stays_uniform():
    sampler = UniformTaskSampler(4)
    assert sampler.update(torch.tensor([1.0, 9.0, 0.0, 3.0])).tolist() == [0.25] * 4
    assert sampler.allocate(100).tolist() == [25] * 4


def test_due_every_period():
    sampler = UniformTaskSampler(2, period=5)
    assert [s for s in range(16) if sampler.due(s)] == [0, 5, 10, 15]


@pytest.mark.parametrize("p,total,minimum,expected", [
    ([0.7, 0.2, 0.1], 100, 10, [70, 20, 10]),
    ([0.5, 0.3, 0.2], 101, 10, [51, 30, 20]),  # largest remainder gets the odd point
    ([0.94, 0.04, 0.02], 100, 10, [80, 10, 10]),  # two tasks pinned at the minimum
    ([0.6, 0.3, 0.1], 60, 15, [30, 15, 15]),  # pinning one task pushes another to the minimum exactly
    ([1.0, 0.0, 0.0], 30, 10, [10, 10, 10]),
])
def test_allocate_points(p, total, minimum, expected):
    counts = allocate_points(torch.tensor(p), total, minimum)
    assert counts.tolist() == expected and counts.dtype == torch.int64


def test_allocate_sums_to_the_budget_and_respects_the_minimum_for_random_probabilities():
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        n = int(torch.randint(1, 8, (1,), generator=g))
        p = torch.rand(n, generator=g) ** 4
        minimum = int(torch.randint(0, 20, (1,), generator=g))
        total = n * minimum + int(torch.randint(0, 500, (1,), generator=g))
        counts = allocate_points(p, total, minimum)
        assert int(counts.sum()) == total and int(counts.min()) >= minimum


@pytest.mark.parametrize("call,match", [
    (lambda: DifficultyAwareTaskSampler(0, eta=1.0), "n_tasks must be >= 1"),
    (lambda: DifficultyAwareTaskSampler(3, eta=-1.0), "eta must be >= 0"),
    (lambda: DifficultyAwareTaskSampler(3, eta=1.0, kl="forward"), "kl must be 'consecutive' or 'uniform'"),
    (lambda: DifficultyAwareTaskSampler(3, eta=1.0, normalize_scores="yes"), "normalize_scores must be a bool"),
    (lambda: DifficultyAwareTaskSampler(4, eta=1.0, floor=0.3), "floor must be <= 0.25"),
    (lambda: DifficultyAwareTaskSampler(3, eta=1.0).update(TRAIN_LOSSES), "needs val_losses"),
    (lambda: DifficultyAwareTaskSampler(3, eta=1.0).update(TRAIN_LOSSES[:2], VAL_LOSSES, TRAIN_GRADS, VAL_GRADS),
     "train_losses must have 3 entries"),
    (lambda: DifficultyAwareTaskSampler(3, eta=1.0).update(-TRAIN_LOSSES, VAL_LOSSES, TRAIN_GRADS, VAL_GRADS),
     "train_losses must be non-negative"),
    (lambda: DifficultyAwareTaskSampler(3, eta=1.0).update(TRAIN_LOSSES, VAL_LOSSES, TRAIN_GRADS, VAL_GRADS[:, :1]),
     "must have the same shape"),
    (lambda: SelfPacedTaskSampler(2, eta=1.0).update(torch.tensor([1.0, float("nan")])), "must be finite"),
    (lambda: allocate_points(torch.tensor([0.5, 0.5]), 15, 10), "total_points must be >= n_tasks \\* minimum = 20"),
    (lambda: allocate_points(torch.tensor([0.0, 0.0]), 30, 10), "positive sum"),
])
def test_bad_input_is_named(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


def test_tiny_gradients_keep_their_direction():
    s = gradient_alignment(torch.ones(1), torch.ones(1), torch.tensor([[1e-30, 0.0]]), torch.tensor([[1.0, 0.0]]))
    assert s.item() == pytest.approx(1.0)


def test_overflowing_step_is_an_error_not_nan():
    sampler = DifficultyAwareTaskSampler(3, eta=1e308)
    with pytest.raises(ValueError, match="overflowed.*smaller eta"):
        sampler.update(TRAIN_LOSSES, VAL_LOSSES, TRAIN_GRADS, VAL_GRADS)
    assert sampler.probabilities.tolist() == [1 / 3] * 3  # unchanged


def test_gradient_alignment_checks_its_inputs():
    with pytest.raises(ValueError, match="train_losses must be non-negative"):
        gradient_alignment(-TRAIN_LOSSES, VAL_LOSSES, TRAIN_GRADS, VAL_GRADS)
    with pytest.raises(ValueError, match="of one n_tasks and n_params"):
        gradient_alignment(TRAIN_LOSSES, VAL_LOSSES, TRAIN_GRADS, VAL_GRADS[:2])
