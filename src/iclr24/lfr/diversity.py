"""Choosing K diverse random projectors out of many candidates (the paper's diversity encouragement).

Two projectors are similar when they arrange a batch alike: each candidate's in-batch cosine-similarity matrix is
flattened and normalised, and the kernel between candidates is the cosine of those vectors. A determinantal point
process prefers sets whose kernel submatrix has a large determinant, i.e. candidates that arrange the data
differently; its MAP set is approximated greedily (Chen, Zhang & Zhou, NeurIPS 2018), as in the official code.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from iclr24.core import check_int

DIVERSITY = ("dpp", "greedy", None)


def projector_kernel(projectors: Sequence[nn.Module], sample: torch.Tensor, max_rows: int = 1000,
                     block_rows: int = 128, generator: torch.Generator | None = None) -> torch.Tensor:
    """``(N, N)`` cosine similarity between the candidates' in-batch similarity matrices on ``sample``."""
    if not isinstance(sample, torch.Tensor) or sample.dim() < 2 or len(sample) < 2:
        raise ValueError(f"sample must be a tensor of >= 2 rows (similarities compare rows), got "
                         f"{tuple(sample.shape) if isinstance(sample, torch.Tensor) else type(sample).__name__}")
    if not torch.isfinite(sample).all():
        raise ValueError("sample contains NaN or infinite values")
    if len(sample) > max_rows:
        sample = sample[torch.randperm(len(sample), generator=generator)[:max_rows]]
    with torch.no_grad():
        Z = torch.stack([F.normalize(projector(sample), dim=1) for projector in projectors])  # (N, n, d)
        # <S_a, S_b> summed over blocks of rows of S = Z Z^T: never holds all N (n x n) matrices at once.
        gram = torch.zeros(len(projectors), len(projectors), dtype=torch.float64)
        for start in range(0, Z.shape[1], block_rows):
            S = torch.einsum("aid,ajd->aij", Z[:, start:start + block_rows], Z).flatten(1)
            gram += (S @ S.T).double()
        norms = gram.diagonal().clamp_min(1e-300).sqrt()
        return gram / norms[:, None] / norms[None, :]


def greedy_dpp(kernel: torch.Tensor, k: int, eps: float = 1e-10, tol: float = 1e-6) -> list[int]:
    """Greedy MAP inference for a DPP with PSD ``kernel``: ``k`` indices, each maximising the determinant gain.

    The gain of item j given the chosen set S is its squared residual after projecting onto S in the kernel's
    feature space, d_j^2 = L_jj - |c_j|^2, updated by one Cholesky row a step. Once every gain is below ``eps``
    (the kernel has rank < k) the remaining slots take the unchosen items in index order, so k distinct items
    always come back.

    ``kernel`` must be symmetric positive semi-definite (a DPP's L-ensemble: every principal minor, the
    unnormalised probability of a set, >= 0); otherwise the gains are not squared residuals and the choice means
    nothing. A ValueError refuses a kernel whose smallest eigenvalue is below ``-tol`` times its largest absolute
    eigenvalue (``tol`` leaves room for rounding: :func:`projector_kernel` sums float32 products).
    """
    L = _check_kernel(kernel, k)
    _check_psd(L, tol)
    n = len(L)
    gains = torch.diagonal(L).clone()
    rows = torch.zeros(k, n, dtype=L.dtype)
    chosen: list[int] = []
    while len(chosen) < k:
        j = int(torch.argmax(gains))
        if gains[j] < eps:
            break
        chosen.append(j)
        t = len(chosen) - 1
        e = (L[j] - rows[:t].T @ rows[:t, j]) / gains[j].sqrt()
        rows[t] = e
        gains -= e ** 2
        gains[chosen] = -torch.inf
    chosen += [i for i in range(n) if i not in chosen][:k - len(chosen)]
    return chosen


def max_min_selection(kernel: torch.Tensor, k: int) -> list[int]:
    """Farthest-point selection: start from item 0, then add the item least similar to its nearest chosen one."""
    kernel = _check_kernel(kernel, k)
    chosen = [0]
    nearest = kernel[0].clone()
    while len(chosen) < k:
        nearest[chosen] = torch.inf
        j = int(torch.argmin(nearest))
        chosen.append(j)
        nearest = torch.maximum(nearest, kernel[j])
    return chosen


def _check_kernel(kernel, k: int) -> torch.Tensor:
    """``kernel`` as a float64 tensor after checking it is a finite symmetric square matrix and 1 <= k <= n."""
    L = torch.as_tensor(kernel, dtype=torch.float64)
    if L.dim() != 2 or L.shape[0] != L.shape[1] or len(L) == 0:
        raise ValueError(f"kernel must be a non-empty square matrix, got shape {tuple(L.shape)}")
    if not torch.isfinite(L).all():
        raise ValueError("kernel contains NaN or infinite values")
    if not torch.allclose(L, L.T, atol=1e-8, rtol=1e-6):
        raise ValueError("kernel must be symmetric")
    check_int("k", k, minimum=1)
    if k > len(L):
        raise ValueError(f"k must be in [1, {len(L)}] (the number of candidates), got {k}")
    return L


def _check_psd(L: torch.Tensor, tol: float) -> None:
    """A ValueError unless the symmetric ``L`` has no eigenvalue below ``-tol * max |eigenvalue|``."""
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 <= tol < 1:
        raise ValueError(f"tol must be a number in [0, 1), got {tol!r}")
    eigenvalues = torch.linalg.eigvalsh((L + L.T) / 2)
    smallest, scale = float(eigenvalues[0]), float(eigenvalues.abs().max())
    if smallest < -tol * scale:
        raise ValueError(f"kernel must be positive semi-definite (a DPP kernel): its smallest eigenvalue is "
                         f"{smallest:.4g}, below -tol * max |eigenvalue| = {-tol * scale:.4g}; use a PSD kernel such "
                         f"as a Gram matrix (projector_kernel), or the max-min selection for a plain similarity")


def select_diverse(projectors: Sequence[nn.Module], k: int, sample: torch.Tensor, method: str | None = "dpp",
                   generator: torch.Generator | None = None) -> list[int]:
    """Indices of ``k`` of ``projectors``: by DPP, farthest-point ("greedy"), or the first ``k`` (``None``)."""
    if method not in DIVERSITY:
        raise ValueError(f"diversity must be one of {DIVERSITY}, got {method!r}")
    if method is None:
        check_int("k", k, minimum=1)
        if k > len(projectors):
            raise ValueError(f"k must be in [1, {len(projectors)}] (the number of projectors), got {k}")
        return list(range(k))
    kernel = projector_kernel(projectors, sample, generator=generator)
    return greedy_dpp(kernel, k) if method == "dpp" else max_min_selection(kernel, k)
