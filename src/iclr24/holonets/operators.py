"""Characteristic operators of a directed graph and the frequency response of Faber filters.

Pure torch: no PyTorch Geometric needed. ``A[i, j]`` is the weight of the edge ``i -> j``
(``edge_index[:, e] = (i, j)``). The characteristic operator is

    T = D_out^e A D_in^e,   D_out = diag(A 1),  D_in = diag(1^T A),  e = -1/4,

and ``T'`` is built the same way from ``A^T``. ``(T x)_i`` sums over i's out-neighbours,
``(T' x)_i`` over its in-neighbours.
"""

from __future__ import annotations

import torch
from torch import Tensor

from iclr24.core.checks import check_int, check_tensor

__all__ = ["characteristic_operator", "dense_characteristic_operator", "faber_response", "spectrum"]


def check_graph(edge_index: Tensor, num_nodes: int, edge_weight: Tensor | None = None) -> None:
    """Clear errors for a malformed ``edge_index`` / ``edge_weight`` at the public boundary."""
    check_int("num_nodes", num_nodes, minimum=1)
    if not isinstance(edge_index, Tensor) or edge_index.dim() != 2 or edge_index.size(0) != 2:
        shape = tuple(edge_index.shape) if isinstance(edge_index, Tensor) else type(edge_index).__name__
        raise ValueError(f"edge_index must be a (2, num_edges) tensor, got {shape}")
    if edge_index.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"edge_index must hold integers, got {edge_index.dtype}")
    if edge_index.numel() and (edge_index.min() < 0 or edge_index.max() >= num_nodes):
        raise ValueError(f"edge_index holds node ids in [{int(edge_index.min())}, {int(edge_index.max())}], "
                         f"expected [0, {num_nodes - 1}] for {num_nodes} nodes")
    if edge_weight is not None:
        check_tensor("edge_weight", edge_weight, ndim=1)
        if edge_weight.numel() != edge_index.size(1):
            raise ValueError(f"edge_weight must have one entry per edge ({edge_index.size(1)}), "
                             f"got {edge_weight.numel()}")
        if (edge_weight < 0).any():
            raise ValueError("edge_weight must be non-negative")


def characteristic_operator(
    edge_index: Tensor, num_nodes: int, edge_weight: Tensor | None = None, *, exponent: float = -0.25,
    reverse: bool = False,
) -> tuple[Tensor, Tensor]:
    """The non-zeros of ``T`` (or ``T'`` with ``reverse=True``) in message-passing orientation.

    Returns ``(index, weight)`` such that ``out[index[1]] += weight * x[index[0]]`` computes
    ``T x``: the layout ``torch_geometric``'s ``MessagePassing.propagate`` expects.
    """
    src, dst = edge_index[0], edge_index[1]
    if reverse:  # A^T: the edge i -> j read as j -> i
        src, dst = dst, src
    w = torch.ones(src.numel(), device=edge_index.device) if edge_weight is None else edge_weight.float()
    d_out = torch.zeros(num_nodes, device=w.device).index_add_(0, src, w)
    d_in = torch.zeros(num_nodes, device=w.device).index_add_(0, dst, w)
    # An edge of weight 0 is no edge, but its end nodes may have degree 0: power a safe 1 there, so the entry
    # is 0 * 1 and neither the value nor its gradient is 0 * inf = NaN.
    d_out, d_in = (torch.where(d > 0, d, torch.ones_like(d)) for d in (d_out, d_in))
    norm = d_out[src].pow(exponent) * w * d_in[dst].pow(exponent)
    return torch.stack([dst, src]), norm  # node src aggregates from its out-neighbour dst


def dense_characteristic_operator(
    edge_index: Tensor, num_nodes: int, edge_weight: Tensor | None = None, *, exponent: float = -0.25,
    reverse: bool = False,
) -> Tensor:
    """``T`` (or ``T'``) as a dense ``(num_nodes, num_nodes)`` matrix, for small graphs."""
    index, weight = characteristic_operator(edge_index, num_nodes, edge_weight, exponent=exponent, reverse=reverse)
    T = torch.zeros(num_nodes, num_nodes, dtype=weight.dtype)
    return T.index_put_((index[1], index[0]), weight, accumulate=True)


def spectrum(T: Tensor) -> Tensor:
    """Eigenvalues of a (generally non-normal) operator: complex, unsorted."""
    return torch.linalg.eigvals(T.double())


def faber_response(coefficients: Tensor, eigenvalues: Tensor) -> Tensor:
    """Response of ``f(z) = sum_{k=1..K} 2^{-(k-1)} c_k z^k`` at each eigenvalue.

    ``coefficients`` is ``(K,)`` for a scalar filter or ``(K, ...)`` for channel blocks; the
    result is ``(n_eig, ...)``. A FaberNet branch acts on the eigenvector of ``T`` for ``z`` by
    this factor: the holomorphic functional calculus that replaces a graph Fourier transform.
    """
    K = coefficients.shape[0]
    powers = eigenvalues.to(torch.complex128)[:, None] ** torch.arange(1, K + 1)  # (n_eig, K)
    decay = 2.0 ** -torch.arange(K, dtype=torch.float64)
    weighted = coefficients.to(torch.complex128) * decay.reshape(K, *([1] * (coefficients.dim() - 1)))
    return torch.tensordot(powers, weighted, dims=([1], [0]))
