"""The fixed non-negative orthogonal classifier, arc-mixup, and the masked softmax (Kim & Kim, ICLR 2024).

The classifier is a fixed matrix ``W`` (num_classes, in_features): a random permutation of the
feature dimensions is cut into one block per class (the leftover dimensions go one each to distinct random classes),
``W[c, block_c] = 1`` and each row is L2-normalised. It is non-negative with disjoint supports,
so its rows are orthonormal, and it is never trained. With non-negative features (a ReLU before
it) training drives the *raw* class means to be orthogonal and to live in their own class's
block: zero-mean neural collapse, where each class owns its feature dimensions.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from iclr24.core.checks import check_int, check_tensor

__all__ = ["ARC_MIXINGS", "FixedNonNegativeOrthogonalClassifier", "LearnableClassifier", "SimplexETFClassifier",
           "arc_mixup", "arc_mixup_loss", "class_balanced_pairs", "masked_cross_entropy"]


class FixedNonNegativeOrthogonalClassifier(nn.Module):
    """``logits = scale * h @ W.T`` with ``W`` fixed, non-negative, rows orthonormal on disjoint supports.

    Args:
        in_features: feature dimension D (>= num_classes: every class needs a dimension).
        num_classes: C.
        scale: the logit scale (fixed rows of unit norm give logits of the features' size).
        generator: seeds the permutation of the dimensions.

    Shapes:
        h: ``(..., in_features)``, non-negative for the geometry to hold; output ``(..., num_classes)``.
    """

    def __init__(self, in_features: int, num_classes: int, *, scale: float = 1.0,
                 generator: torch.Generator | None = None) -> None:
        super().__init__()
        check_int("num_classes", num_classes, minimum=1)
        check_int("in_features", in_features, minimum=1)
        if in_features < num_classes:
            raise ValueError(f"in_features must be >= num_classes so every class owns a dimension, got "
                             f"in_features={in_features}, num_classes={num_classes}")
        if isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating)) or not 0 < scale < math.inf:
            raise ValueError(f"scale must be a positive number, got {scale!r}")
        self.in_features, self.num_classes, self.scale = in_features, num_classes, float(scale)
        order = torch.randperm(in_features, generator=generator)
        per_class = in_features // num_classes
        owner = torch.empty(in_features, dtype=torch.long)
        owner[order[:per_class * num_classes]] = torch.arange(num_classes).repeat_interleave(per_class)
        # The D mod C leftover dimensions go one each to distinct random classes (as the official OrthLinear does),
        # so block sizes differ by at most one.
        leftover = order[per_class * num_classes:]
        owner[leftover] = torch.randperm(num_classes, generator=generator)[:len(leftover)]
        W = F.one_hot(owner, num_classes).T.float()  # (C, D): W[c, d] = 1 where class c owns d
        self.register_buffer("weight", W / W.sum(1, keepdim=True).sqrt())
        self.register_buffer("owner", owner)

    def forward(self, h: Tensor) -> Tensor:
        return self.scale * h @ self.weight.T

    def feature_mask(self, classes) -> Tensor:
        """Bool mask ``(in_features,)`` of the dimensions the given classes own."""
        classes = torch.as_tensor(classes).flatten()
        return torch.isin(self.owner, classes.to(self.owner.device))

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, num_classes={self.num_classes}, scale={self.scale:g}"


class SimplexETFClassifier(nn.Module):
    """A fixed simplex equiangular tight frame: ``sqrt(C / (C - 1)) U (I - 11^T / C)`` with ``U`` random
    orthonormal ``(D, C)`` (Papyan et al.'s neural-collapse geometry, fixed as in Yang et al. 2022)."""

    def __init__(self, in_features: int, num_classes: int, *, scale: float = 1.0,
                 generator: torch.Generator | None = None) -> None:
        super().__init__()
        if in_features < num_classes or num_classes < 2:
            raise ValueError(f"need in_features >= num_classes >= 2, got {in_features}, {num_classes}")
        U, _ = torch.linalg.qr(torch.randn(in_features, num_classes, generator=generator))
        centred = torch.eye(num_classes) - torch.full((num_classes, num_classes), 1.0 / num_classes)
        self.register_buffer("weight", (math.sqrt(num_classes / (num_classes - 1)) * U @ centred).T)
        self.in_features, self.num_classes, self.scale = in_features, num_classes, float(scale)

    def forward(self, h: Tensor) -> Tensor:
        return self.scale * h @ self.weight.T


class LearnableClassifier(nn.Linear):
    """The usual trained linear classifier, with the fixed classifiers' API (``weight``, ``num_classes``)."""

    def __init__(self, in_features: int, num_classes: int, *, bias: bool = True, **_) -> None:
        super().__init__(in_features, num_classes, bias=bias)
        self.num_classes = num_classes


def masked_cross_entropy(logits: Tensor, targets: Tensor, classes: Tensor | None = None) -> Tensor:
    """Cross-entropy over only ``classes`` (default: the classes present in ``targets``): the masked
    softmax of continual learning, which never pushes down classes absent from the batch."""
    check_tensor("logits", logits, min_ndim=1, finite=False)
    if not isinstance(targets, Tensor) or targets.is_floating_point() or targets.is_complex() \
            or targets.dtype == torch.bool:
        got = str(targets.dtype).replace("torch.", "") if isinstance(targets, Tensor) else type(targets).__name__
        raise TypeError(f"targets must be an integer tensor of class indices, got {got}")
    if targets.shape != logits.shape[:-1]:
        raise ValueError(f"targets must have one class index per row of logits {tuple(logits.shape[:-1])}, got "
                         f"shape {tuple(targets.shape)}")
    classes = targets.unique() if classes is None else torch.as_tensor(classes, device=logits.device).flatten()
    n = logits.shape[-1]
    if len(classes) and (int(classes.min()) < 0 or int(classes.max()) >= n):
        raise ValueError(f"classes must lie in [0, {n}), got {classes.tolist()}")
    if not torch.isin(targets, classes).all():
        raise ValueError(f"every target must be among the classes kept: targets {targets.unique().tolist()}, "
                         f"classes {classes.tolist()}")
    mask = torch.zeros(n, dtype=torch.bool, device=logits.device)
    mask[classes] = True
    return F.cross_entropy(logits.masked_fill(~mask, float("-inf")), targets)


ARC_MIXINGS = ("arc", "convex")


def arc_mixup(x_a: Tensor, x_b: Tensor, alpha: float = 1.0, *, mixing: str = "arc", per_sample: bool = False,
              generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """Arc-mixup's inputs and arc weight: ``lam ~ Beta(alpha, alpha)``, ``a = sin(pi lam / 2)``.

    The target is always ``a w_{y_a} + sqrt(1 - a^2) w_{y_b}`` (:func:`arc_mixup_loss`); the inputs are mixed by

    - ``mixing="arc"``: ``a x_a + sqrt(1 - a^2) x_b``, the weights on the unit circle (the official ``mask``
      trainer, ``arc_mixup_cls_cbs_sync_data``, which every official long-tailed FNO config uses);
    - ``mixing="convex"``: ``n x_a + (1 - n) x_b`` with ``n = a / (a + sqrt(1 - a^2))``, the arc weights rescaled
      to sum to one (the official ``arc_mixup_cls`` and ``arc_mixup_cls_cbs``).

    One ``lam`` for the whole batch, as the official code draws it; ``per_sample=True`` draws one per row (this
    package's first reading). Returns ``(mixed, a)``, ``a`` of shape ``(batch,)`` either way.
    """
    if x_a.shape != x_b.shape:
        raise ValueError(f"x_a and x_b must have the same shape, got {tuple(x_a.shape)} and {tuple(x_b.shape)}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating)) or not 0 < alpha < math.inf:
        raise ValueError(f"alpha must be a finite number > 0, got {alpha!r}")
    if mixing not in ARC_MIXINGS:
        raise ValueError(f"mixing must be one of {ARC_MIXINGS}, got {mixing!r}")
    n = x_a.shape[0]
    lam = _beta_icdf(alpha, torch.rand(n if per_sample else 1, generator=generator)).expand(n)
    a = torch.sin(math.pi * lam / 2).to(x_a.dtype)
    b = (1 - a ** 2).clamp_min(0).sqrt()
    weight_a, weight_b = (a, b) if mixing == "arc" else (a / (a + b), b / (a + b))
    shape = (-1,) + (1,) * (x_a.dim() - 1)
    return weight_a.view(shape) * x_a + weight_b.view(shape) * x_b, a


def _beta_icdf(alpha: float, u: Tensor) -> Tensor:
    """Quantiles of ``Beta(alpha, alpha)`` at uniform draws (scipy's inverse regularised incomplete beta): the
    draws stay seeded by the caller's generator."""
    from scipy.special import betaincinv

    return torch.as_tensor(betaincinv(float(alpha), float(alpha), u.double().numpy()), dtype=torch.float32)


def class_balanced_pairs(labels: Tensor, *, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """Row indices ``(a, b)`` into a batch for arc-mixup, as the official ``get_indices_balancely`` draws them.

    ``a`` resamples the batch with replacement, each class present equally likely (a row of class c has
    probability ``1 / (K n_c)``, K classes in the batch); each ``b`` is drawn the same way from the rows of the
    *other* classes, so a pair never shares a class. Needs at least two classes in ``labels``.
    """
    check_tensor("labels", labels, ndim=1, finite=False)
    classes, inverse, counts = labels.unique(return_inverse=True, return_counts=True)
    if len(classes) < 2:
        raise ValueError(f"class_balanced_pairs needs at least two classes in labels to pair across classes, got "
                         f"only class {classes.tolist()}")
    n = len(labels)
    a = torch.multinomial(1.0 / counts[inverse].double(), n, replacement=True, generator=generator)
    b = torch.empty(n, dtype=torch.long)
    for k in range(len(classes)):
        rows = torch.nonzero(inverse[a] == k).flatten()
        if len(rows) == 0:
            continue
        others = inverse != k
        counts_without = torch.bincount(inverse[others], minlength=len(classes))
        weights = torch.where(others, 1.0 / counts_without[inverse].clamp_min(1).double(), 0.0)
        b[rows] = torch.multinomial(weights, len(rows), replacement=True, generator=generator)
    return a, b


def arc_mixup_loss(features: Tensor, classifier: FixedNonNegativeOrthogonalClassifier, y_a: Tensor, y_b: Tensor,
                   a: Tensor, *, classes: Tensor | None = None, eps: float = 1e-6) -> Tensor:
    """``-log <f~, m>``: the features masked to the blocks of ``classes`` (default: those in ``y_a`` and ``y_b``;
    the official ``mask`` trainer keeps the blocks of every class in the batch) and L2-normalised, against the
    target ``m = a w_{y_a} + sqrt(1 - a^2) w_{y_b}``."""
    check_tensor("features", features, ndim=2, shape_doc="(batch, in_features)", finite=False)
    n = features.shape[0]
    for name, value in (("y_a", y_a), ("y_b", y_b), ("a", a)):
        check_tensor(name, value, ndim=1, finite=False)
        if value.shape[0] != n:
            raise ValueError(f"{name} must have one entry per row of features ({n}), got shape {tuple(value.shape)}")
    if not a.is_floating_point() or bool(((a < 0) | (a > 1) | a.isnan()).any()):
        raise ValueError(f"a must hold mixing weights in [0, 1] (arc_mixup's second output), got {a.tolist()}")
    if bool((features < 0).any()):  # -log of a negative similarity is NaN: the method assumes post-ReLU features
        raise ValueError(f"features must be non-negative (the encoder's output after its ReLU, as the paper's "
                         f"non-negative classifier assumes), got a minimum of {float(features.min()):.4g}; add a "
                         "ReLU at the end of the encoder")
    kept = torch.cat([y_a, y_b]).unique() if classes is None else torch.as_tensor(classes).flatten()
    if not torch.isin(torch.cat([y_a, y_b]), kept).all():
        raise ValueError(f"classes must include every class in y_a and y_b, got classes {kept.tolist()} for pairs "
                         f"of classes {torch.cat([y_a, y_b]).unique().tolist()}")
    mask = classifier.feature_mask(kept).to(features.dtype)
    f = F.normalize(features * mask, dim=-1)
    W = classifier.weight
    m = a[:, None] * W[y_a] + (1 - a ** 2).clamp_min(0).sqrt()[:, None] * W[y_b]
    return -torch.log((f * m).sum(-1) + eps).mean()  # no clamp: a clamp would stop the gradient at 0
