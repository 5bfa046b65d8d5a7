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
    class_balanced_pairs,
    masked_cross_entropy,
    nc1,
    nc2_equiangular,
    nc2_equinorm,
    nc3_self_duality,
    own_block_energy,
    raw_mean_cosine,
    zero_mean_collapse,
)
from iclr24.orthogonal_classifier.training import Net, ReservoirBuffer, continual_er, train_classifier, train_imbalanced


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


def test_leftover_dimensions_go_one_each_to_distinct_classes():
    """The official OrthLinear gives the D mod C leftover dimensions to distinct random classes, so block sizes differ
    by at most one (random classes with replacement gave some class two leftovers)."""
    classes_with_a_leftover = torch.zeros(10)
    for seed in range(50):
        sizes = (fno(25, 10, seed=seed).weight > 0).sum(1)  # 2 dimensions a class and 5 leftovers
        assert sorted(sizes.tolist()) == [2] * 5 + [3] * 5
        classes_with_a_leftover += sizes == 3
    assert (classes_with_a_leftover > 0).all()  # the leftovers go to random classes, not always the same ones


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
    X, y = torch.rand(20, 6), torch.tensor([0, 2] * 10)  # class 1 has no samples
    for method, variant in (("mixup", "mask"), ("arc_mixup", "mask"), ("arc_mixup", "cls_cbs"),
                            ("arc_mixup", "per_sample")):
        net = Net(6, (12,), fno(12, 3))
        train_imbalanced(net, X, y, method=method, arc_variant=variant, epochs=2,
                         generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="arc_variant must be one of"):
        train_imbalanced(Net(6, (12,), fno(12, 3)), X, y, method="arc_mixup", arc_variant="sync", epochs=1)


def test_official_arc_mixup_survives_a_batch_of_one_class():
    X, y = torch.rand(8, 6), torch.zeros(8, dtype=torch.long)
    net = train_imbalanced(Net(6, (12,), fno(12, 3)), X, y, method="arc_mixup", epochs=2)
    assert all(torch.isfinite(p).all() for p in net.parameters())


def test_arc_mixup_weights_lie_on_the_unit_circle():
    xa, xb = torch.eye(2)[:1].repeat(20000, 1), torch.eye(2)[1:].repeat(20000, 1)
    mixed, a = arc_mixup(xa, xb, alpha=1.0, per_sample=True, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(mixed.norm(dim=1), torch.ones(20000))  # a^2 + (1 - a^2) = 1
    assert ((a >= 0) & (a <= 1)).all()
    assert abs(float(a.mean()) - 2 / math.pi) < 0.01  # lam ~ U(0, 1) at alpha = 1: E sin(pi lam / 2) = 2 / pi
    again, _ = arc_mixup(xa, xb, alpha=1.0, per_sample=True, generator=torch.Generator().manual_seed(0))
    assert torch.equal(mixed, again)
    with pytest.raises(ValueError, match="same shape"):
        arc_mixup(xa, xb[:3])
    with pytest.raises(ValueError, match="alpha must be a finite number > 0"):
        arc_mixup(xa, xb, alpha=0.0)
    with pytest.raises(ValueError, match="alpha must be a finite number > 0"):
        arc_mixup(xa, xb, alpha=float("inf"))
    with pytest.raises(ValueError, match="mixing must be one of"):
        arc_mixup(xa, xb, mixing="linear")


def test_official_arc_mixup_draws_one_lambda_a_batch_and_mixes_inputs_convexly_or_on_the_arc():
    """The official arc_mixup_cls(_cbs): inputs mixed by n = a / (a + sqrt(1 - a^2)) and 1 - n, the arc weight a
    kept for the target; the mask trainer: inputs mixed by a and sqrt(1 - a^2). One lambda for the batch."""
    xa, xb = torch.eye(2)[:1].repeat(64, 1), torch.eye(2)[1:].repeat(64, 1)
    for seed in range(5):
        mixed, a = arc_mixup(xa, xb, mixing="convex", generator=torch.Generator().manual_seed(seed))
        assert (a == a[0]).all()  # one lambda
        b = (1 - a ** 2).sqrt()
        torch.testing.assert_close(mixed[:, 0], a / (a + b))
        torch.testing.assert_close(mixed.sum(1), torch.ones(64))  # convex
        on_arc, a_arc = arc_mixup(xa, xb, mixing="arc", generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(a_arc, a)  # the same draw, mixed the other way
        torch.testing.assert_close(on_arc, torch.stack([a, b], 1))
    # at alpha = 1 lambda is the uniform draw itself: a = sin(pi u / 2)
    generator = torch.Generator().manual_seed(0)
    u = float(torch.rand(1, generator=torch.Generator().manual_seed(0)))
    mixed, a = arc_mixup(xa[:1], xb[:1], mixing="convex", generator=generator)
    expected_a = math.sin(math.pi * u / 2)
    assert float(a) == pytest.approx(expected_a, rel=1e-5)
    assert float(mixed[0, 0]) == pytest.approx(expected_a / (expected_a + math.sqrt(1 - expected_a ** 2)), rel=1e-5)


def test_class_balanced_pairs_never_share_a_class_and_balance_the_classes():
    labels = torch.tensor([0] * 60 + [1] * 30 + [2] * 8 + [3] * 2)  # a long-tailed batch
    generator = torch.Generator().manual_seed(0)
    count_a, count_b = torch.zeros(4), torch.zeros(4)
    for _ in range(200):
        a, b = class_balanced_pairs(labels, generator=generator)
        assert (labels[a] != labels[b]).all()  # the partner is always from another class
        count_a += torch.bincount(labels[a], minlength=4)
        count_b += torch.bincount(labels[b], minlength=4)
    torch.testing.assert_close(count_a / count_a.sum(), torch.full((4,), 0.25), atol=0.01, rtol=0)
    torch.testing.assert_close(count_b / count_b.sum(), torch.full((4,), 0.25), atol=0.01, rtol=0)
    with pytest.raises(ValueError, match="at least two classes"):
        class_balanced_pairs(torch.zeros(5, dtype=torch.long))


def test_arc_mixup_loss_is_zero_on_the_target_and_ignores_other_classes_blocks():
    head = fno(20, 4)
    ya, yb, a = torch.tensor([0, 1]), torch.tensor([1, 2]), torch.tensor([0.6, 0.8])
    W = head.weight
    target = a[:, None] * W[ya] + (1 - a ** 2).sqrt()[:, None] * W[yb]
    assert float(arc_mixup_loss(target * 3.0, head, ya, yb, a)) == pytest.approx(0.0, abs=1e-5)  # scale-free
    noise = torch.rand(2, 20) * head.feature_mask([3])  # class 3 is not in the batch: its block is masked
    assert float(arc_mixup_loss(target + noise, head, ya, yb, a)) == pytest.approx(0.0, abs=1e-5)
    assert float(arc_mixup_loss(W[[2, 3]], head, ya, yb, a)) > 1.0  # features of the wrong classes
    # the official mask trainer keeps the blocks of every class in the batch: class 3's block then counts
    assert float(arc_mixup_loss(target + noise, head, ya, yb, a, classes=[0, 1, 2, 3])) > 0.01
    with pytest.raises(ValueError, match="classes must include every class in y_a and y_b"):
        arc_mixup_loss(target, head, ya, yb, a, classes=[0, 1])
    # pre-ReLU features would give -log of a negative similarity, NaN: refused, naming the fix
    with pytest.raises(ValueError, match="features must be non-negative .* add a ReLU at the end of the encoder"):
        arc_mixup_loss(target - 1.0, head, ya, yb, a)


# --- experience replay ---------------------------------------------------------------------------------------------

def test_reservoir_keeps_a_uniform_sample_of_the_stream():
    """Each of 50 streamed items ends in a 5-slot reservoir with probability 5 / 50 (a buffer that never replaces
    keeps items 0-4 with probability 1)."""
    generator = torch.Generator().manual_seed(0)
    kept = torch.zeros(50)
    trials = 1000
    for _ in range(trials):
        buffer = ReservoirBuffer(5, generator=generator)
        for i in range(50):
            buffer.add(torch.tensor([float(i)]), torch.tensor(i))
        assert len(buffer) == 5 and buffer.seen == 50
        kept[torch.stack(buffer.y)] += 1
    torch.testing.assert_close(kept / trials, torch.full((50,), 0.1), atol=0.04, rtol=0)  # 4 binomial sds


def test_experience_replay_buffer_holds_samples_of_later_tasks():
    X = torch.rand(80, 6)
    y = torch.tensor([0, 1] * 20 + [2, 3] * 20)
    tasks = [(X[:40], y[:40]), (X[40:], y[40:])]
    buffer = ReservoirBuffer(10, generator=torch.Generator().manual_seed(0))
    for _ in continual_er(Net(6, (12,), fno(12, 4)), tasks, epochs=1, buffer_size=10, buffer=buffer):
        pass
    labels = torch.stack(buffer.y)
    assert len(buffer) == 10 and buffer.seen == 80
    assert (labels >= 2).any() and (labels < 2).any()  # the second task replaced some of the first task's slots
    with pytest.raises(ValueError, match="capacity must be"):
        ReservoirBuffer(-1)
    with pytest.raises(ValueError, match="empty ReservoirBuffer"):
        ReservoirBuffer(3).sample(2)


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
    for name, value in zero_mean_collapse(features, labels, head.weight).items():
        assert value == pytest.approx(0.0, abs=1e-7), name


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
    # zero-mean measures: raw means (1, 0) and (1, 1), no spread, against W = I
    features = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]])
    measured = zero_mean_collapse(features, labels, torch.eye(2))
    assert measured["znc1"] == pytest.approx(0.0, abs=1e-12)
    assert measured["znc2_equinorm"] == pytest.approx((math.sqrt(2) - 1) / math.sqrt(2) / ((1 + math.sqrt(2)) / 2))
    assert measured["znc2_max_angle"] == pytest.approx(1 / math.sqrt(2))
    assert measured["znc3"] == pytest.approx(2 - 4 / math.sqrt(6))  # 2 - 2 <I, M> / (||I|| ||M||), squared norm
    assert measured["znc4_ncc"] == 0.0
    with pytest.raises(ValueError, match="weight must be"):
        zero_mean_collapse(features, labels, torch.eye(3))
    with pytest.raises(ValueError, match=r"features must be \(n, d\)"):
        nc1(features, labels[:3])
