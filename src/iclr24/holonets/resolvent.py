"""ResolventConv: Dir-ResolvNet's resolvent filters, insensitive to collapsing heavy clusters.

Koke & Cremers, "HoloNets: Spectral Convolutions do Extend to Directed Graphs", ICLR 2024.
https://arxiv.org/abs/2310.02232

Pure torch: the layer takes PyG's ``(x, edge_index, edge_weight, batch)`` but needs no PyG.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from iclr24.core.checks import check_int, check_number, check_tensor
from iclr24.holonets.operators import GraphCache, as_edge_index, check_graph, check_node_weight

__all__ = ["ResolventConv"]


class ResolventConv(nn.Module):
    r"""The resolvent filter layer of Dir-ResolvNet, from `"HoloNets: Spectral Convolutions do Extend
    to Directed Graphs" <https://arxiv.org/abs/2310.02232>`_ (ICLR 2024).

    .. math::
        \mathbf{X}' = \alpha \sum_{k=1}^{K} R^k \mathbf{X} \mathbf{W}_k
        + (1 - \alpha) \sum_{k=1}^{K} R'^k \mathbf{X} \mathbf{W}'_k + \mathbf{b},
        \qquad R = (\omega I + L)^{-1},\; L = M^{-1}(D_{out} - A),

    and :math:`R'` the same for :math:`A^\top` (``L' = M^-1 (D_in - A^T)``), with node weights
    :math:`M = \mathrm{diag}(\mu)` (default 1; a collapsed cluster weighs the sum of its members).
    A resolvent is holomorphic away from the spectrum of :math:`L`, so this is a HoloNet filter;
    unlike powers of FaberNet's :math:`T` it stays bounded when edge weights grow. As the edges
    inside clusters grow heavy, :math:`R` converges to :math:`J_\uparrow R_{red} J_\downarrow` on the collapsed graph
    (:func:`~iclr24.holonets.collapse_clusters`), so the layer's output on the fine graph converges
    to the lifted output on the coarse one: the paper's scale-insensitivity. ``root_weight`` (a term
    :math:`X W_0`) is offered but off by default, because it breaks that limit unless the features are
    constant on each cluster.

    The resolvent is a global linear solve, not a local message, so the layer is a plain module:
    each graph of a batch is solved densely (one LU factorisation per graph and branch, reused by
    all K powers), which suits molecules and small graphs, not million-node ones. The solve runs in
    float64 whatever the input's dtype: heavy edges make ``omega + L`` ill-conditioned (its condition
    number grows with the weights), and float32 loses the ``omega`` beside a weight of 1e7.

    Args:
        in_channels (int): Size of each input sample.
        out_channels (int): Size of each output sample.
        K (int, optional): Number of resolvent powers per branch. (default: :obj:`2`)
        omega (float, optional): The resolvent's point :math:`z = -\omega`, :math:`\omega > 0`. (default: :obj:`1.0`)
        alpha (float, optional): Weight of the forward (out-degree) branch, in [0, 1]. (default: :obj:`0.5`)
        root_weight (bool, optional): Add :math:`X W_0`. (default: :obj:`False`)
        bias (bool, optional): Add a learnable bias. (default: :obj:`True`)

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F_{in})`, edge indices :math:`(2, |\mathcal{E}|)`,
          edge weights :math:`(|\mathcal{E}|)` *(optional)*, batch vector :math:`(|\mathcal{V}|)` *(optional,
          sorted as PyG's ``Batch`` sorts it)*, node weights :math:`(|\mathcal{V}|)` *(optional, positive)*
        - **output:** node features :math:`(|\mathcal{V}|, F_{out})`
    """

    def __init__(self, in_channels: int, out_channels: int, K: int = 2, omega: float = 1.0, alpha: float = 0.5,
                 root_weight: bool = False, bias: bool = True) -> None:
        super().__init__()
        check_int("in_channels", in_channels, minimum=1)
        check_int("out_channels", out_channels, minimum=1)
        check_int("K", K, minimum=1)
        omega = check_number("omega", omega, minimum=0.0, exclusive=True)  # the resolvent's point z = -omega
        alpha = check_number("alpha", alpha, minimum=0.0, maximum=1.0)
        self.in_channels, self.out_channels, self.K = in_channels, out_channels, K
        self.omega, self.alpha = omega, alpha
        self.lins_fwd = nn.ModuleList(nn.Linear(in_channels, out_channels, bias=False) for _ in range(K))
        self.lins_bwd = nn.ModuleList(nn.Linear(in_channels, out_channels, bias=False) for _ in range(K))
        self.lin_root = nn.Linear(in_channels, out_channels, bias=False) if root_weight else None
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        self._factors = GraphCache()  # the resolvents' LU factors of the graphs seen last
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in [*self.lins_fwd, *self.lins_bwd, *([self.lin_root] if self.lin_root is not None else [])]:
            lin.reset_parameters()
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None,
                batch: Tensor | None = None, node_weight: Tensor | None = None) -> Tensor:
        edge_index, edge_weight = as_edge_index(edge_index, edge_weight)  # a sparse adj_t is accepted, as in PyG
        check_tensor("x", x, ndim=2, shape_doc="(num_nodes, in_channels)",
                     dtypes=(torch.float16, torch.bfloat16, torch.float32, torch.float64))
        if x.size(0) == 0:
            raise ValueError("x has no nodes: ResolventConv needs at least one node")
        if x.size(1) != self.in_channels:
            raise ValueError(f"x has {x.size(1)} channels, this layer expects in_channels={self.in_channels}")
        n = x.size(0)
        mask, factors = self._factors((edge_index, edge_weight, batch, node_weight, n, self.omega),
                                      lambda: self._factorise(edge_index, n, edge_weight, batch, node_weight))
        features = torch.zeros(*mask.shape, x.size(1), dtype=torch.float64, device=x.device)
        features[mask] = x.to(torch.float64)
        out = self.lin_root(x) if self.lin_root is not None else 0
        for weight, lins, (LU, pivots) in ((self.alpha, self.lins_fwd, factors[0]),
                                           (1.0 - self.alpha, self.lins_bwd, factors[1])):
            if weight == 0.0:
                continue
            z = features
            for k in range(self.K):  # R z, R^2 z, ..., R^K z
                z = torch.linalg.lu_solve(LU, pivots, z)
                out = out + weight * lins[k](z[mask].to(x.dtype))
        return out + self.bias if self.bias is not None else out

    def _factorise(self, edge_index: Tensor, n: int, edge_weight: Tensor | None, batch: Tensor | None,
                   node_weight: Tensor | None) -> tuple[Tensor, tuple]:
        """The real-node mask and, for ``A`` and ``A^T``, the LU factors of ``omega + M^-1 (D_out - A)``, the
        inverse of the resolvent ``R``, per graph of the batch (float64)."""
        check_graph(edge_index, n, edge_weight)
        check_node_weight(node_weight, n)
        if edge_weight is not None and edge_weight.is_complex():
            raise TypeError("edge_weight must be real")
        solve = torch.float64
        adjacency, mask = _dense_batch_adjacency(edge_index, n, edge_weight, batch, solve)
        mu = torch.ones(mask.shape, dtype=solve, device=edge_index.device)  # padding nodes weigh 1
        if node_weight is not None:
            mu[mask] = node_weight.to(solve)
        eye = torch.eye(adjacency.size(-1), dtype=solve, device=edge_index.device)
        factors = []
        for A in (adjacency, adjacency.transpose(1, 2)):
            system = self.omega * eye + (torch.diag_embed(A.sum(-1)) - A) / mu[..., None]
            factors.append(torch.linalg.lu_factor(system))
        return mask, tuple(factors)

    def __repr__(self) -> str:
        root = ", root_weight=True" if self.lin_root is not None else ""
        return (f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, K={self.K}, "
                f"omega={self.omega}, alpha={self.alpha}{root})")


def _dense_batch_adjacency(edge_index: Tensor, num_nodes: int, edge_weight: Tensor | None, batch: Tensor | None,
                           dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """Per-graph dense adjacency ``(B, n_max, n_max)`` and the ``(B, n_max)`` mask of real nodes.

    Padding rows are zero, so a padded node's resolvent row is ``1/omega`` times the identity and
    never mixes with real nodes.
    """
    device = edge_index.device
    if batch is None:
        batch = torch.zeros(num_nodes, dtype=torch.long, device=device)
    else:
        check_tensor("batch", batch, ndim=1)
        if batch.numel() != num_nodes or batch.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"batch must be an integer vector with one entry per node ({num_nodes}), "
                             f"got {batch.dtype} of shape {tuple(batch.shape)}")
        if num_nodes and (batch.min() < 0 or (batch[1:] < batch[:-1]).any()):
            raise ValueError("batch must be non-negative and sorted, as torch_geometric's Batch lays out nodes")
        batch = batch.long()
    counts = torch.bincount(batch) if num_nodes else torch.zeros(1, dtype=torch.long, device=device)
    starts = torch.cumsum(counts, 0) - counts
    position = torch.arange(num_nodes, device=device) - starts[batch]
    src, dst = edge_index.long()
    if (batch[src] != batch[dst]).any():
        raise ValueError("edge_index has an edge between two graphs of the batch")
    n_max = int(counts.max()) if num_nodes else 0
    A = torch.zeros(counts.numel(), n_max, n_max, dtype=dtype, device=device)
    w = torch.ones(src.numel(), dtype=dtype, device=device) if edge_weight is None else edge_weight.to(dtype)
    A = A.index_put((batch[src], position[src], position[dst]), w, accumulate=True)
    mask = torch.zeros(counts.numel(), n_max, dtype=torch.bool, device=device)
    mask[batch, position] = True
    return A, mask
