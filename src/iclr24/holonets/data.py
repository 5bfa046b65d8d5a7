"""Directed graphs for node classification: generators, a refinement perturbation, local loaders.

Generators return ``torch_geometric.data.Data`` with ``x``, ``edge_index`` (``i -> j``), ``y``
and seeded ``train_mask`` / ``val_mask`` / ``test_mask`` (50 / 25 / 25).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

__all__ = ["REAL_DATASETS", "cyclic_dsbm", "flow_dsbm", "load_real_dataset", "subdivide_edges", "syn_dir"]

#: The paper's real data sets and the files ``load_real_dataset`` expects under ``root/<name>/``.
REAL_DATASETS = ("chameleon", "squirrel", "arxiv-year", "snap-patents", "roman-empire")


def _data(x: Tensor, edge_index: Tensor, y: Tensor, generator: torch.Generator):
    from torch_geometric.data import Data

    n = y.numel()
    order = torch.randperm(n, generator=generator)
    masks = [torch.zeros(n, dtype=torch.bool) for _ in range(3)]
    masks[0][order[: n // 2]] = True
    masks[1][order[n // 2: 3 * n // 4]] = True
    masks[2][order[3 * n // 4:]] = True
    return Data(x=x, edge_index=edge_index, y=y, train_mask=masks[0], val_mask=masks[1], test_mask=masks[2])


def _random_pairs(n: int, m: int, generator: torch.Generator) -> Tensor:
    """``m`` distinct ordered pairs ``(i, j)``, ``i != j``, uniformly at random."""
    pairs = torch.randint(n, (2, int(1.2 * m) + 16), generator=generator)
    pairs = pairs[:, pairs[0] != pairs[1]]
    pairs = torch.unique(pairs, dim=1)
    return pairs[:, torch.randperm(pairs.size(1), generator=generator)[:m]]


def syn_dir(num_nodes: int = 5000, p: float = 0.001, seed: int = 0):
    """Dir-GNN's synthetic directional task: a directed Erdős-Rényi graph, one Gaussian feature
    per node, label 1 when the mean feature of the out-neighbours exceeds that of the in-neighbours.

    Undirected models see the union of both neighbourhoods and cannot tell them apart.
    """
    g = torch.Generator().manual_seed(seed)
    edge_index = _random_pairs(num_nodes, int(p * num_nodes * (num_nodes - 1)), g)
    x = torch.randn(num_nodes, 1, generator=g)
    src, dst = edge_index

    def neighbour_mean(at: Tensor, of: Tensor) -> Tensor:
        total = torch.zeros(num_nodes).index_add_(0, at, x[of, 0])
        count = torch.zeros(num_nodes).index_add_(0, at, torch.ones(at.numel()))
        return total / count.clamp_min(1)

    y = (neighbour_mean(src, dst) > neighbour_mean(dst, src)).long()
    return _data(x, edge_index, y, g)


def flow_dsbm(num_nodes: int = 2500, num_classes: int = 5, avg_degree: float = 10.0, flow: float = 0.9, seed: int = 0):
    """A directed stochastic block model whose classes differ only in edge direction.

    Edges fall uniformly between all node pairs (same density within and between classes);
    an edge between classes ``a < b`` points ``a -> b`` with probability ``flow`` (else
    ``b -> a``); within a class the direction is random. Features are constant, so without
    direction every class looks the same.
    """
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(num_nodes) % num_classes
    y = y[torch.randperm(num_nodes, generator=g)]
    pairs = _random_pairs(num_nodes, int(avg_degree * num_nodes / 2), g)
    a, b = y[pairs[0]], y[pairs[1]]
    low_to_high = torch.rand(pairs.size(1), generator=g) < flow
    forward = torch.where(a < b, low_to_high, torch.where(a > b, ~low_to_high, torch.rand(pairs.size(1),
                                                                                              generator=g) < 0.5))
    edge_index = torch.where(forward, pairs, pairs.flip(0))
    edge_index = torch.unique(edge_index, dim=1)
    return _data(torch.ones(num_nodes, 1), edge_index, y, g)


def cyclic_dsbm(num_nodes: int = 2500, num_classes: int = 5, avg_degree: float = 10.0, noise: float = 2.0,
                feature_dim: int = 8, seed: int = 0):
    """A heterophilic control: edges run mostly from class ``a`` to ``a + 1 (mod C)``, and features
    are noisy class centroids, so neighbourhood aggregation solves it with or without direction."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(num_nodes) % num_classes
    y = y[torch.randperm(num_nodes, generator=g)]
    m = int(avg_degree * num_nodes / 2)
    src = torch.randint(num_nodes, (m,), generator=g)
    # a target in the next class for 90% of edges, anywhere for the rest
    members = torch.argsort(y, stable=True)  # nodes grouped by class
    counts = torch.bincount(y, minlength=num_classes)
    starts = torch.cumsum(counts, 0) - counts
    nxt = (y[src] + 1) % num_classes
    dst = members[starts[nxt] + torch.randint(num_nodes, (m,), generator=g) % counts[nxt]]
    noisy = torch.rand(m, generator=g) < 0.1
    dst = torch.where(noisy, torch.randint(num_nodes, (m,), generator=g), dst)
    edge_index = torch.stack([src, dst])
    edge_index = torch.unique(edge_index[:, edge_index[0] != edge_index[1]], dim=1)
    centroids = torch.randn(num_classes, feature_dim, generator=g)
    x = centroids[y] + noise * torch.randn(num_nodes, feature_dim, generator=g)
    return _data(x, edge_index, y, g)


def subdivide_edges(data, fraction: float, seed: int = 0):
    """A finer-resolution copy of ``data``: a ``fraction`` of its edges ``u -> v`` become
    ``u -> m -> v`` through a new node ``m`` (features: the mean of ``u`` and ``v``; label -1,
    in no mask). The original nodes keep their ids, labels and masks."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must lie in [0, 1], got {fraction}")
    g = torch.Generator().manual_seed(seed)
    n, E = data.num_nodes, data.edge_index.size(1)
    chosen = torch.rand(E, generator=g) < fraction
    u, v = data.edge_index[:, chosen]
    mids = torch.arange(n, n + u.numel())
    edge_index = torch.cat([data.edge_index[:, ~chosen], torch.stack([u, mids]), torch.stack([mids, v])], dim=1)
    x = torch.cat([data.x, 0.5 * (data.x[u] + data.x[v])])
    pad = torch.zeros(u.numel(), dtype=torch.bool)
    out = data.clone()
    out.x, out.edge_index = x, edge_index
    out.y = torch.cat([data.y, torch.full((u.numel(),), -1, dtype=data.y.dtype)])
    for name in ("train_mask", "val_mask", "test_mask"):
        out[name] = torch.cat([data[name], pad])
    return out


def load_real_dataset(name: str, root: str | Path):
    """One of the paper's real data sets from ``root/<name>/<name>.pt``: a saved
    ``torch_geometric.data.Data`` with ``x``, directed ``edge_index``, ``y`` and masks.

    Nothing is downloaded. Save the graph once where you have network access, e.g. for
    Chameleon and Squirrel from PyG's ``WikipediaNetwork(root, name, geom_gcn_preprocess=False)``
    (the directed version Dir-GNN uses), arXiv-year and snap-patents from the LINKX
    repository, Roman-empire from ``HeterophilousGraphDataset``; then ``torch.save(data, path)``.
    """
    if name not in REAL_DATASETS:
        raise ValueError(f"unknown dataset {name!r}; expected one of {REAL_DATASETS}")
    path = Path(root) / name / f"{name}.pt"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found. Save the directed {name} graph there as a torch_geometric Data object "
            f"(see iclr24.holonets.data.load_real_dataset's docstring for the sources); nothing is downloaded."
        )
    return torch.load(path, weights_only=False)
