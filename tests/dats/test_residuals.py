import pytest
import torch

from iclr24.dats import rad_probabilities, select_by_residual


def test_rad_density_on_hand_computed_cases():
    # k = 1, c = 1: |r| / mean|r| + 1 = (1.5, 2, 2.5), normalised by 6
    assert rad_probabilities(torch.tensor([1.0, -2.0, 3.0])).tolist() == pytest.approx([0.25, 1 / 3, 2.5 / 6])
    # k = 2: r^2 / mean(r^2) + 1 with mean 14/3 -> (17, 26, 41) / 14, normalised by 84/14
    assert rad_probabilities(torch.tensor([1.0, 2.0, 3.0]), k=2.0).tolist() == pytest.approx(
        [17 / 84, 26 / 84, 41 / 84])
    # c = 0, all zero residuals: nothing to prefer
    assert rad_probabilities(torch.zeros(4), c=0.0).tolist() == [0.25] * 4


def test_select_by_residual_topk_and_sampling():
    r = torch.tensor([0.1, 5.0, -3.0, 0.2, 4.0])
    assert sorted(select_by_residual(r, 3).tolist()) == [1, 2, 4]
    g = torch.Generator().manual_seed(0)
    picks = select_by_residual(r, 5, strategy="sample", generator=g)
    assert sorted(picks.tolist()) == [0, 1, 2, 3, 4]  # without replacement
    counts = torch.zeros(5)
    for _ in range(400):
        counts[select_by_residual(r, 1, strategy="sample", generator=g)] += 1
    assert counts[1] > counts[0] and counts[0] > 0  # RAD favours large residuals but keeps every point possible


@pytest.mark.parametrize("call,match", [
    (lambda: select_by_residual(torch.ones(3), 4), "n must be <= the number of candidates"),
    (lambda: select_by_residual(torch.ones(3), 1, strategy="greedy"), "strategy must be 'topk' or 'sample'"),
    (lambda: rad_probabilities(torch.ones(3), k=-1.0), "k must be >= 0"),
    (lambda: rad_probabilities(torch.ones(2, 2)), "residuals must have 1 dimensions"),
])
def test_bad_input_is_named(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()
