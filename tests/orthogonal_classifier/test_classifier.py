"""The fixed classifiers' geometry, arc-mixup, the masked softmax, and the neural-collapse metrics on known cases."""

import math

import pytest
import torch
import torch.nn.functional as F

from iclr24.orthogonal_classifier import (
    FixedNonNegativeOrthogonalClassifier,
    SimplexETFClassifier,
    arc_mixup,
    arc_mixup_loss,
    masked_cross_entropy,
    nc1,
    nc2_equiangular,
    nc2_equinorm,
    nc3_self_duality,
    own_block_energy,
    raw_mean_cosine,
)
from iclr24.orthogonal_classifier.training import Net, train_classifier


def fno(d=25, c=10, seed=0, **kwargs):
    return FixedNonNegativeOrthogonalClassifier(d, c, generator=torch.Generator().manual_seed(seed), **kwargs)


def test_weight_is_non_negative_with_disjoint_blocks_covering_every_dimension_and_orthonormal_rows():
    head = fno(25, 10)  # 2 dimensions a class, 5 left over to random classes
    W = head.weight
    assert W.shape == (10, 25) and (W >= 0).all()
    assert ((W > 0).sum(0) == 1).all()  # every dimension belongs to exactly one class
    assert ((W > 0).sum(1) >= 2).all() and (W > 0).sum() == 25
    torch.testing.assert_close(W @ W.T, torch.eye(10))
    for c in range(10):  # a row is uniform on its block
        block = W[c][W[c] > 0]
        torch.testing.assert_close(block, torch.full_like(block, 1 / math.sqrt(len(block))))
    assert torch.equal(head.feature_mask([3]), W[3] > 0)
    assert torch.equal(head.feature_mask([1, 4]), (W[1] > 0) | (W[4] > 0))


def test_weight_is_a_fixed_buffer_seeded_and_never_trained():
    head = fno(12, 3, scale=5.0)
    assert not list(head.parameters()) and "weight" in dict(head.named_buffers())
    assert torch.equal(head.weight, fno(12, 3).weight) and not torch.equal(head.weight, fno(12, 3, seed=1).weight)
    h = torch.rand(4, 12)
    torch.testing.assert_close(head(h), 5.0 * h @ head.weight.T)
    net = Net(6, (12,), head)
    before = head.weight.clone()
    train_classifier(net, torch.rand(30, 6), torch.randint(3, (30,)), epochs=3)
    assert torch.equal(head.weight, before)


@pytest.mark.parametrize("kwargs, match", [
    ({"in_features": 5, "num_classes": 10}, "in_features must be >= num_classes so every class owns a dimension"),
    ({"in_features": 10, "num_classes": 0}, "num_classes must be"),
    ({"in_features": 10, "num_classes": 2, "scale": 0.0}, "scale must be a positive number"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FixedNonNegativeOrthogonalClassifier(**kwargs)


def test_simplex_etf_is_equiangular_with_unit_rows():
    W = SimplexETFClassifier(20, 5, generator=torch.Generator().manual_seed(0)).weight
    gram = W @ W.T
    torch.testing.assert_close(torch.diag(gram), torch.ones(5))
    off = gram[~torch.eye(5, dtype=torch.bool)]
    torch.testing.assert_close(off, torch.full_like(off, -1 / 4))


def test_masked_softmax_ignores_absent_classes():
    logits = torch.tensor([[2.0, 0.5, 9.0, 1.0]], requires_grad=True)
    target = torch.tensor([0])
    loss = masked_cross_entropy(logits, target, classes=torch.tensor([0, 1]))
    torch.testing.assert_close(loss, F.cross_entropy(logits[:, :2], target))  # class 2's large logit is ignored
    loss.backward()
    assert logits.grad[0, 2] == 0 and logits.grad[0, 3] == 0
    # by default the classes are those in the batch's targets
    torch.testing.assert_close(masked_cross_entropy(logits, torch.tensor([1])),
                               F.cross_entropy(logits[:, 1:2], torch.tensor([0])))


def test_masked_softmax_refuses_targets_outside_the_kept_classes():
    logits = torch.zeros(2, 4)
    with pytest.raises(ValueError, match="every target must be among the classes kept"):
        masked_cross_entropy(logits, torch.tensor([0, 1]), classes=[0, 2])
    with pytest.raises(ValueError, match=r"classes must lie in \[0, 4\)"):
        masked_cross_entropy(logits, torch.tensor([0, 1]), classes=[0, 1, 7])


def test_imbalanced_training_with_an_absent_class_pairs_only_present_classes():
    from iclr24.orthogonal_classifier.training import train_imbalanced

    X, y = torch.rand(20, 6), torch.tensor([0, 2] * 10)  # class 1 has no samples
    for method in ("mixup", "arc_mixup"):
        net = Net(6, (12,), fno(12, 3))
        train_imbalanced(net, X, y, method=method, epochs=2, generator=torch.Generator().manual_seed(0))


def test_arc_mixup_weights_lie_on_the_unit_circle():
    xa, xb = torch.eye(2)[:1].repeat(20000, 1), torch.eye(2)[1:].repeat(20000, 1)
    mixed, a = arc_mixup(xa, xb, alpha=1.0, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(mixed.norm(dim=1), torch.ones(20000))  # a^2 + (1 - a^2) = 1
    assert ((a >= 0) & (a <= 1)).all()
    assert abs(float(a.mean()) - 2 / math.pi) < 0.01  # lam ~ U(0, 1) at alpha = 1: E sin(pi lam / 2) = 2 / pi
    again, _ = arc_mixup(xa, xb, alpha=1.0, generator=torch.Generator().manual_seed(0))
    assert torch.equal(mixed, again)
    with pytest.raises(ValueError, match="same shape"):
        arc_mixup(xa, xb[:3])
    with pytest.raises(ValueError, match="alpha must be a finite number > 0"):
        arc_mixup(xa, xb, alpha=0.0)
    with pytest.raises(ValueError, match="alpha must be a finite number > 0"):
        arc_mixup(xa, xb, alpha=float("inf"))


def test_arc_mixup_loss_is_zero_on_the_target_and_ignores_other_classes_blocks():
    head = fno(20, 4)
    ya, yb, a = torch.tensor([0, 1]), torch.tensor([1, 2]), torch.tensor([0.6, 0.8])
    W = head.weight
    target = a[:, None] * W[ya] + (1 - a ** 2).sqrt()[:, None] * W[yb]
    assert float(arc_mixup_loss(target * 3.0, head, ya, yb, a)) == pytest.approx(0.0, abs=1e-5)  # scale-free
    noise = torch.rand(2, 20) * head.feature_mask([3])  # class 3 is not in the batch: its block is masked
    assert float(arc_mixup_loss(target + noise, head, ya, yb, a)) == pytest.approx(0.0, abs=1e-5)
    assert float(arc_mixup_loss(W[[2, 3]], head, ya, yb, a)) > 1.0  # features of the wrong classes


# --- neural-collapse metrics -------------------------------------------------------------------------------------

def test_perfect_collapse_onto_the_fixed_rows():
    head = fno(20, 4)
    labels = torch.arange(4).repeat(5)
    features = 3.0 * head.weight[labels]  # every sample sits on its class's row
    assert nc1(features, labels) == pytest.approx(0.0, abs=1e-12)
    assert raw_mean_cosine(features, labels) == pytest.approx(0.0, abs=1e-12)
    assert own_block_energy(features, labels, head.owner) == pytest.approx(1.0)
    assert nc3_self_duality(features, labels, head.weight, centred=False) == pytest.approx(0.0, abs=1e-7)
    assert nc2_equinorm(features, labels) == pytest.approx(0.0, abs=1e-7)


def test_known_values():
    # classes at -1 and +1 on a line, each spread by +-0.5: S_W = 0.25, S_B = 1, NC1 = 0.25 / 2
    features = torch.tensor([[-1.5], [-0.5], [0.5], [1.5]])
    labels = torch.tensor([0, 0, 1, 1])
    assert nc1(features, labels) == pytest.approx(0.125)
    # raw means (1, 1) and (1, 0): cos 1 / sqrt(2)
    assert raw_mean_cosine(torch.tensor([[1.0, 1.0], [1.0, 0.0]]), torch.tensor([0, 1])) == pytest.approx(
        1 / math.sqrt(2))
    etf = SimplexETFClassifier(6, 3, generator=torch.Generator().manual_seed(0)).weight
    assert nc2_equiangular(etf, torch.arange(3)) == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="at least two classes"):
        nc1(features, torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"features must be \(n, d\)"):
        nc1(features, labels[:3])
