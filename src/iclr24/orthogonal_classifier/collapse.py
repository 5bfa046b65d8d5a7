"""Neural-collapse metrics (Papyan et al., 2020) and the zero-mean variants the paper measures.

All take features ``(n, d)`` and integer labels ``(n,)``; classes are those present in ``labels``.
The classical metrics centre the class means on the global mean; zero-mean collapse is about the
*raw* class means, which become orthogonal and align with the fixed classifier's rows.
"""

from __future__ import annotations

import torch
from torch import Tensor

from iclr24.core.checks import check_tensor

__all__ = ["class_means", "nc1", "nc2_equiangular", "nc2_equinorm", "nc3_self_duality", "own_block_energy",
           "raw_mean_cosine", "zero_mean_collapse"]


def class_means(features: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """``(classes, means)``: the sorted classes present and each class's mean feature ``(C, d)``."""
    features, labels = _check(features, labels)
    classes = labels.unique()
    return classes, torch.stack([features[labels == c].mean(0) for c in classes])


def nc1(features: Tensor, labels: Tensor) -> float:
    """Within-class variability relative to between-class: ``tr(S_W S_B^+) / C`` (0 at perfect collapse)."""
    features, labels = _check(features, labels)
    classes, means = class_means(features, labels)
    centred = means - features.mean(0)
    between = centred.T @ centred / len(classes)
    within = torch.zeros_like(between)
    for c, mu in zip(classes, means):
        deviation = features[labels == c] - mu
        within += deviation.T @ deviation
    within /= len(features)
    return float(torch.trace(within @ torch.linalg.pinv(between)) / len(classes))


def nc2_equinorm(features: Tensor, labels: Tensor) -> float:
    """Coefficient of variation of the centred class means' norms (0: equal norms)."""
    _, means = class_means(features, labels)
    norms = (means - features.double().mean(0)).norm(dim=1)
    return float(norms.std(unbiased=False) / norms.mean())


def nc2_equiangular(features: Tensor, labels: Tensor) -> float:
    """Mean ``|cos(mu_c, mu_c') + 1 / (C - 1)|`` over pairs of centred means (0: a simplex ETF)."""
    _, means = class_means(features, labels)
    cos = _cosines(means - features.double().mean(0))
    C = len(means)
    off = ~torch.eye(C, dtype=torch.bool)
    return float((cos[off] + 1.0 / (C - 1)).abs().mean())


def nc3_self_duality(features: Tensor, labels: Tensor, weight: Tensor, *, centred: bool = True) -> float:
    """``|| W / ||W|| - M / ||M|| ||_F``: how far the classifier's rows are from the class means (centred, or raw
    for zero-mean collapse). ``weight`` has one row per class id (row c for class c); the rows of the classes
    present in ``labels`` are compared."""
    classes, means = class_means(features, labels)
    weight = check_tensor("weight", torch.as_tensor(weight), ndim=2, shape_doc="(num_classes, d)")
    if weight.shape[1] != means.shape[1] or weight.shape[0] <= int(classes.max()):
        raise ValueError(f"weight must be (num_classes > {int(classes.max())}, d={means.shape[1]}): one row per class "
                         f"id in labels, got shape {tuple(weight.shape)}")
    if centred:
        means = means - features.double().mean(0)
    W = weight.double()[classes]
    return float((W / W.norm() - means / means.norm()).norm())


def raw_mean_cosine(features: Tensor, labels: Tensor) -> float:
    """Mean ``|cos|`` between the raw (uncentred) class means: 0 when they are orthogonal (zero-mean collapse)."""
    _, means = class_means(features, labels)
    cos = _cosines(means)
    off = ~torch.eye(len(means), dtype=torch.bool)
    return float(cos[off].abs().mean())


def own_block_energy(features: Tensor, labels: Tensor, owner: Tensor) -> float:
    """Mean over classes of the share of ``||mu_c||^2`` on the dimensions class c owns (``owner[d]`` is the
    class of dimension d, as :class:`FixedNonNegativeOrthogonalClassifier` has it)."""
    classes, means = class_means(features, labels)
    owner = torch.as_tensor(owner)
    if owner.shape != means.shape[1:]:
        raise ValueError(f"owner must hold one class id per feature dimension ({means.shape[1]},), got shape "
                         f"{tuple(owner.shape)}")
    shares = [float((mu[owner == c] ** 2).sum() / (mu ** 2).sum().clamp_min(1e-30)) for c, mu in zip(classes, means)]
    return sum(shares) / len(shares)


def zero_mean_collapse(features: Tensor, labels: Tensor, weight: Tensor) -> dict[str, float]:
    """The paper's zero-mean neural-collapse measures: Papyan et al.'s NC1-NC4 with the global mean set to 0, as
    the official code (``znc_utils.py``) computes them; each is 0 at zero-mean collapse.

    - ``znc1``: ``tr(S_W S_B^+) / C`` with ``S_W`` the mean over classes of each class's covariance and
      ``S_B = mean_c mu_c mu_c^T`` (raw means);
    - ``znc2_equinorm``: std / mean of the raw means' norms (unbiased std);
    - ``znc2_equiangularity``: std of the cosines between raw means over pairs (unbiased);
    - ``znc2_max_angle``: mean cosine between raw means over pairs (0: orthogonal means, the maximal angle in the
      non-negative orthant);
    - ``znc3``: ``|| W / ||W|| - M / ||M|| ||_F^2`` between the rows of ``weight`` and the raw means (squared, as
      the official ``class_mean_convergence``; ``2 - 2 cos(W, M)``);
    - ``znc4_ncc``: the share of samples whose nearest class mean is not their class's.

    ``weight`` has one row per class id; the rows of the classes present in ``labels`` are compared.
    """
    classes, means = class_means(features, labels)
    features, means = features.double(), means.double()
    weight = check_tensor("weight", torch.as_tensor(weight), ndim=2, shape_doc="(num_classes, d)").double()
    if weight.shape[1] != means.shape[1] or weight.shape[0] <= int(classes.max()):
        raise ValueError(f"weight must be (num_classes > {int(classes.max())}, d={means.shape[1]}): one row per class "
                         f"id in labels, got shape {tuple(weight.shape)}")
    C = len(classes)
    within = torch.zeros(means.shape[1], means.shape[1], dtype=torch.float64)
    for c, mu in zip(classes, means):
        deviation = features[labels == c] - mu
        within += deviation.T @ deviation / len(deviation)
    within /= C
    between = means.T @ means / C
    norms = means.norm(dim=1)
    pairs = torch.triu(torch.ones(C, C, dtype=torch.bool), diagonal=1)
    cosines = _cosines(means)[pairs]
    W = weight[classes]
    nearest = classes[torch.cdist(features, means).argmin(1)]
    return {"znc1": float(torch.trace(within @ torch.linalg.pinv(between)) / C),
            "znc2_equinorm": float(norms.std() / norms.mean()),
            "znc2_equiangularity": float(cosines.std()) if len(cosines) > 1 else 0.0,
            "znc2_max_angle": float(cosines.mean()),
            "znc3": float((W / W.norm() - means / means.norm()).norm() ** 2),
            "znc4_ncc": float((nearest != labels).double().mean())}


def _cosines(vectors: Tensor) -> Tensor:
    unit = vectors / vectors.norm(dim=1, keepdim=True).clamp_min(1e-30)
    return unit @ unit.T


def _check(features: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    features, labels = torch.as_tensor(features).double(), torch.as_tensor(labels)
    if features.dim() != 2 or labels.shape != features.shape[:1]:
        raise ValueError(f"features must be (n, d) and labels (n,), got {tuple(features.shape)} and "
                         f"{tuple(labels.shape)}")
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise TypeError(f"labels must be integer class indices, got dtype {str(labels.dtype).replace('torch.', '')}")
    if len(labels) and int(labels.min()) < 0:
        raise ValueError(f"labels must be class indices >= 0, got {int(labels.min())}")
    if not bool(torch.isfinite(features).all()):
        raise ValueError(f"features must be finite, found {int((~torch.isfinite(features)).sum())} NaN/inf entries")
    if len(labels.unique()) < 2:
        raise ValueError("neural-collapse metrics need at least two classes in labels")
    return features, labels
