"""Subspace activation patching, the rowspace/nullspace split, and the metrics of the paper.

Makelov, Lange, Nanda (ICLR 2024), section 2: patching activation ``w`` (base run) toward
``u`` (source run) along a direction ``v`` replaces the component of ``w`` along ``v`` by that
of ``u``,

    w' = w + ((u - w) . v / ||v||^2) v                                        (the 1-d patch)

and along a subspace with orthonormal basis ``Q``, ``w' = w + Q Q^T (u - w)``. For a direction
``v`` in an MLP's hidden space, whose output is ``W_out h``, the paper splits
``v = v_row + v_null`` with ``v_row`` in the rowspace of ``W_out`` and ``W_out v_null = 0``:
the nullspace part cannot change the MLP's output by itself, and when it carries a patch's
effect the effect is an illusion (section 3).
"""

from __future__ import annotations

import torch
from torch import Tensor

from iclr24.core.checks import check_tensor

__all__ = ["dormancy_statistics", "fldd", "interchange_accuracy", "patch_direction", "patch_subspace",
           "rowspace_nullspace_split"]


_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _check_pair(base: Tensor, source: Tensor) -> None:
    check_tensor("base", base, min_ndim=1, dtypes=_FLOATS)
    check_tensor("source", source, min_ndim=1, dtypes=_FLOATS)
    if base.shape != source.shape:
        raise ValueError(f"source must have base's shape {tuple(base.shape)}, got {tuple(source.shape)}")


def patch_direction(base: Tensor, source: Tensor, v: Tensor) -> Tensor:
    """``base`` with its component along ``v`` taken from ``source``: ``w + ((u - w).v / |v|^2) v``.

    Shapes: ``base``, ``source`` ``(..., d)``; ``v`` ``(d,)``, non-zero.
    """
    _check_pair(base, source)
    check_tensor("v", v, ndim=1)
    if v.shape[0] != base.shape[-1]:
        raise ValueError(f"v must have {base.shape[-1]} entries (the activations' last dimension), got {v.shape[0]}")
    v = v.to(base.dtype)
    norm2 = v.pow(2).sum()
    if not norm2 > 0:
        raise ValueError("v must be a non-zero direction")
    return base + (((source - base) @ v) / norm2)[..., None] * v


def patch_subspace(base: Tensor, source: Tensor, basis: Tensor) -> Tensor:
    """``base`` with its component in ``span(basis)`` taken from ``source``: ``w + Q Q^T (u - w)``.

    ``basis`` is ``(d, k)``, any full-rank spanning set (orthonormalised here by QR).
    """
    _check_pair(base, source)
    check_tensor("basis", basis, ndim=2, shape_doc="(d, k)")
    if basis.shape[0] != base.shape[-1]:
        raise ValueError(f"basis must be (d, k) with d={base.shape[-1]}, got {tuple(basis.shape)}")
    if basis.shape[1] > basis.shape[0]:
        raise ValueError(f"basis must have linearly independent columns: {basis.shape[1]} columns in "
                         f"{basis.shape[0]} dimensions cannot be")
    q, r = torch.linalg.qr(basis.to(base.dtype))
    tolerance = 10 * max(basis.shape) * torch.finfo(r.dtype).eps * r.diagonal().abs().max().clamp_min(1e-30)
    if bool((r.diagonal().abs() <= tolerance).any()):
        raise ValueError("basis must have linearly independent columns")
    return base + (source - base) @ q @ q.T


def rowspace_nullspace_split(v: Tensor, W_out: Tensor) -> tuple[Tensor, Tensor]:  # noqa: N803 (the paper's name)
    """Split an MLP-hidden direction ``v`` into ``(v_row, v_null)``, ``v = v_row + v_null``.

    ``W_out`` is ``(d_model, d_mlp)`` (the MLP's output map, ``out = W_out h``); ``v_row`` is
    the projection of ``v`` on the rowspace of ``W_out`` and ``W_out v_null = 0``.
    """
    check_tensor("v", v, ndim=1)
    check_tensor("W_out", W_out, ndim=2, shape_doc="(d_model, d_mlp)")
    if W_out.shape[1] != v.shape[0]:
        raise ValueError(f"W_out must be (d_model, d_mlp) with d_mlp = len(v) = {v.shape[0]}, "
                         f"got {tuple(W_out.shape)}")
    # the rowspace of W_out is the column space of W_out^T; an SVD handles rank deficiency, with the
    # cut-off of W_out's own precision (a float32 matrix has float32 rounding in its small singular values)
    u, s, _ = torch.linalg.svd(W_out.T.double(), full_matrices=False)
    eps = torch.finfo(W_out.dtype if W_out.is_floating_point() else torch.float64).eps
    q = u[:, s > s.max() * max(W_out.shape) * eps]
    v_row = (q @ (q.T @ v.double())).to(v.dtype)
    return v_row, v - v_row


def dormancy_statistics(base: Tensor, source: Tensor, v: Tensor, part: Tensor, *, sign: Tensor | None = None,
                        reference: Tensor | None = None, central: float = 0.99) -> dict[str, float]:
    """How a 1-d patch along ``v`` moves the activations along ``part`` (e.g. ``v``'s rowspace part), in units
    of the clean activations' standard deviation along ``part`` (the paper's dormancy picture, Fig. 3).

    ``base``, ``source``: ``(n, d)`` clean activations of paired prompts; the patch is
    :func:`patch_direction` ``(base, source, v)``. Along the unit vector ``p = part / |part|``:

    - ``separation``: ``|mean sign (source - base) . p| / sd``, how far base and source sit apart naturally
      (a dormant direction: barely; the direction that carries the feature: far);
    - ``patch_shift``: ``|mean sign (patched - base) . p| / sd``, how far the patch moves them; the patch moves
      ``(source - base) . v / |v|^2 (v . p)`` along ``p``, which for ``p`` a part of ``v`` exceeds the natural
      separation when the other part of ``v`` carries the difference;
    - ``patched_distance``: ``mean |patched . p - m| / sd``, the patched values' distance from the clean mean;
    - ``outside_central``: the fraction of patched values outside the clean values' central ``central``
      interval; ``outside_range``: outside their [min, max].

    ``sign`` ``(n,)``, +-1, orients each pair: pairs that change the feature one way (ABB -> BAB) and the other
    (BAB -> ABB) move activations in opposite directions, and would cancel in a plain mean (default: all +1).
    The clean values (``sd``, ``m``, the range) are those of ``reference`` ``(m, d)`` (default: base and
    source together) projected on ``p``.
    """
    _check_pair(base, source)
    check_tensor("base", base, ndim=2, shape_doc="(n, d)")
    for name, vec in (("v", v), ("part", part)):
        check_tensor(name, vec, ndim=1)
        if vec.shape[0] != base.shape[1]:
            raise ValueError(f"{name} must have {base.shape[1]} entries (the activations' last dimension), "
                             f"got {vec.shape[0]}")
        if not float(vec.norm()) > 0:
            raise ValueError(f"{name} must be a non-zero direction")
    if not 0 < central < 1:
        raise ValueError(f"central must be in (0, 1), got {central}")
    reference = torch.cat([base, source]) if reference is None else reference
    check_tensor("reference", reference, ndim=2, shape_doc="(m, d)")
    if reference.shape[1] != base.shape[1] or len(reference) < 2:
        raise ValueError(f"reference must be (m >= 2, {base.shape[1]}), got {tuple(reference.shape)}")
    unit = (part / part.norm()).double()
    clean = reference.double() @ unit
    sd, mean = float(clean.std()), float(clean.mean())
    if not sd > 0:
        raise ValueError("the clean activations do not vary along part: the standard deviation is 0")
    low, high = torch.quantile(clean, torch.tensor([(1 - central) / 2, (1 + central) / 2], dtype=clean.dtype))
    if sign is None:
        sign = torch.ones(len(base))
    check_tensor("sign", sign, ndim=1)
    if sign.shape[0] != len(base) or not bool((sign.abs() == 1).all()):
        raise ValueError(f"sign must hold {len(base)} values, each +1 or -1, got {sign.tolist()[:8]}")
    sign = sign.double()
    at_base, at_source = base.double() @ unit, source.double() @ unit
    patched = patch_direction(base.double(), source.double(), v.double()) @ unit
    return {
        "separation": abs(float((sign * (at_source - at_base)).mean())) / sd,
        "patch_shift": abs(float((sign * (patched - at_base)).mean())) / sd,
        "patched_distance": float((patched - mean).abs().mean()) / sd,
        "outside_central": float(((patched < low) | (patched > high)).double().mean()),
        "outside_range": float(((patched < clean.min()) | (patched > clean.max())).double().mean()),
    }


def fldd(ld_patched: Tensor, ld_clean: Tensor) -> float:
    """Fractional logit difference decrease, in %: ``100 (1 - mean LD_patched / mean LD_clean)``.

    0: the patch did nothing; 100: it erased the logit difference; above 100: the answer flipped.
    Shapes: ``ld_patched``, ``ld_clean`` ``(prompts,)``, paired by prompt.
    """
    _check_logit_differences("ld_patched", ld_patched)
    _check_logit_differences("ld_clean", ld_clean)
    if ld_patched.shape != ld_clean.shape:
        raise ValueError(f"ld_patched and ld_clean must be paired by prompt (the same shape), got "
                         f"{tuple(ld_patched.shape)} and {tuple(ld_clean.shape)}")
    clean = float(ld_clean.mean())
    if clean == 0:
        raise ValueError("the clean logit difference is 0: FLDD is undefined")
    return 100.0 * (1.0 - float(ld_patched.mean()) / clean)


def interchange_accuracy(ld_patched: Tensor) -> float:
    """Fraction of prompts where the patch made the model prefer the source's answer (LD < 0)."""
    _check_logit_differences("ld_patched", ld_patched)
    return float((ld_patched < 0).float().mean())


def _check_logit_differences(name: str, values: Tensor) -> None:
    check_tensor(name, values, ndim=1, dtypes=_FLOATS, shape_doc="(prompts,)")
    if values.numel() == 0:
        raise ValueError(f"{name} is empty: one logit difference per prompt is needed")
