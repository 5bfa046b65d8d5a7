"""Directed graphs: node-classification generators, a refinement perturbation, local loaders, and
weighted graphs with heavy clusters for the collapse experiment.

Node-classification generators return ``torch_geometric.data.Data`` with ``x``, ``edge_index``
(``i -> j``), ``y`` and seeded ``train_mask`` / ``val_mask`` / ``test_mask`` (50 / 25 / 25).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import Tensor

from iclr24.holonets.operators import UnbalancedClusterWarning

__all__ = ["REAL_DATASETS", "clustered_digraphs", "collapse_graph", "cyclic_dsbm", "flow_dsbm", "load_real_dataset",
           "scale_heavy_edges", "subdivide_edges", "syn_dir", "syn_dir_labels"]

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
    return _data(x, edge_index, syn_dir_labels(edge_index, x), g)


def syn_dir_labels(edge_index: Tensor, x: Tensor) -> Tensor:
    """:func:`syn_dir`'s labels: 1 where the mean of ``x[:, 0]`` over a node's out-neighbours exceeds that over
    its in-neighbours (an empty neighbourhood's mean is 0).

    Reversing every edge keeps the undirected graph and flips every label whose two means differ; the generator
    draws a graph and its reverse with the same probability, so without direction the label is a coin flip."""
    n = x.size(0)
    src, dst = edge_index

    def neighbour_mean(at: Tensor, of: Tensor) -> Tensor:
        total = torch.zeros(n, dtype=x.dtype).index_add_(0, at, x[of, 0])
        count = torch.zeros(n, dtype=x.dtype).index_add_(0, at, torch.ones(at.numel(), dtype=x.dtype))
        return total / count.clamp_min(1)

    return (neighbour_mean(src, dst) > neighbour_mean(dst, src)).long()


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
    """A heterophilic DSBM: edges run mostly from class ``a`` to ``a + 1 (mod C)``, and features are noisy
    class centroids.

    With 5 classes (the control) every class has its own pair of neighbouring classes, so neighbourhood
    aggregation solves it with or without direction. With 4, class ``a`` and the opposite class ``a + 2`` have
    the same neighbours (``a + 1`` and ``a - 1``) once direction is dropped: an undirected model sees the pair
    ``{a, a + 2}`` in the graph and must tell its two classes apart from a node's own noisy features, while
    direction (out-neighbours in ``a + 1``, in-neighbours in ``a - 1``) tells them apart."""
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


# --- weighted graphs whose heavy clusters collapse -------------------------------------------------------


def clustered_digraphs(num_graphs: int, *, min_clusters: int = 5, max_clusters: int = 10, max_cluster_size: int = 4,
                       feature_dim: int = 4, out_degree: float = 1.5, directed_clusters: bool = False,
                       seed: int = 0, return_collapsed: bool = False) -> list | tuple[list, list]:
    """Small weighted directed graphs, molecule-like: clusters of 1..``max_cluster_size`` nodes bound by
    heavy edges, and light edges between clusters.

    Inside a cluster the heavy edges are a cycle plus random chords, with weights drawn from
    [0.5, 2], so the cluster is strongly connected. They are bonds, each edge with a twin of the same
    weight the other way, unless ``directed_clusters`` (then each cluster's left kernel vector is not
    uniform and only a forward-only resolvent filter converges to the collapsed graph).
    Each ordered pair of clusters is linked with probability ``out_degree / (clusters - 1)`` by one
    or two light edges (weights in [0.2, 1]) between random members. Node features are standard
    normal; every node has ``node_weight`` 1 (a collapsed cluster's is its size, like a mass).

    The regression target is a function of the collapsed graph (:func:`collapse_graph`), the object
    both resolutions describe: with ``s = x[:, 0]`` and ``u = x[:, 1]`` of the coarse nodes,
    ``y = sum_c mu_c (tanh(sum_{c->d} w_cd s_d - sum_{d->c} w_dc s_d) + u_c / 2)``, out-neighbours
    minus in-neighbours, so direction matters. Each ``Data`` has ``x``, ``edge_index``,
    ``edge_weight`` (heavy edges at scale 1), ``heavy`` (bool per edge), ``node_weight`` and ``y`` (1,).
    With ``return_collapsed`` the collapsed graphs the targets were computed from come too, as
    ``(graphs, collapsed)``: each is ``collapse_graph(graphs[i])``, ``y`` included, computed once.
    """
    from torch_geometric.data import Data

    from iclr24.core.checks import check_int

    check_int("num_graphs", num_graphs, minimum=1)
    check_int("min_clusters", min_clusters, minimum=2)
    check_int("max_clusters", max_clusters, minimum=min_clusters)
    check_int("max_cluster_size", max_cluster_size, minimum=1)
    check_int("feature_dim", feature_dim, minimum=2)
    g = torch.Generator().manual_seed(seed)
    graphs, collapsed = [], []
    for _ in range(num_graphs):
        n_clusters = int(torch.randint(min_clusters, max_clusters + 1, (1,), generator=g))
        sizes = torch.randint(1, max_cluster_size + 1, (n_clusters,), generator=g)
        starts = torch.cumsum(sizes, 0) - sizes
        edges, weights, heavy = [], [], []
        for start, size in zip(starts.tolist(), sizes.tolist()):
            if size == 1:
                continue
            order = start + torch.randperm(size, generator=g)
            chords = torch.randint(size, (2, size), generator=g)
            chords = start + chords[:, chords[0] != chords[1]]
            inside = torch.cat([torch.stack([order, order.roll(-1)]), chords], dim=1)
            bond = 0.5 + 1.5 * torch.rand(inside.size(1), generator=g)
            if not directed_clusters:
                inside, bond = torch.cat([inside, inside.flip(0)], dim=1), torch.cat([bond, bond])
            edges.append(inside)
            weights.append(bond)
            heavy.append(torch.ones(inside.size(1), dtype=torch.bool))
        linked = torch.rand(n_clusters, n_clusters, generator=g) < out_degree / (n_clusters - 1)
        linked.fill_diagonal_(False)
        for c, d in linked.nonzero().tolist():
            count = int(torch.randint(1, 3, (1,), generator=g))
            ends = torch.stack([starts[c] + torch.randint(int(sizes[c]), (count,), generator=g),
                                starts[d] + torch.randint(int(sizes[d]), (count,), generator=g)])
            edges.append(ends)
            weights.append(0.2 + 0.8 * torch.rand(count, generator=g))
            heavy.append(torch.zeros(count, dtype=torch.bool))
        n = int(sizes.sum())
        edge_index = torch.cat(edges, dim=1) if edges else torch.zeros(2, 0, dtype=torch.long)
        data = Data(x=torch.randn(n, feature_dim, generator=g), edge_index=edge_index,
                    edge_weight=torch.cat(weights) if weights else torch.zeros(0),
                    heavy=torch.cat(heavy) if heavy else torch.zeros(0, dtype=torch.bool),
                    node_weight=torch.ones(n))
        with warnings.catch_warnings():
            if directed_clusters:  # asked for: the docstring says only a forward-only filter converges here
                warnings.simplefilter("ignore", UnbalancedClusterWarning)
            coarse = collapse_graph(data)
        data.y = coarse.y = _collapsed_target(coarse)
        graphs.append(data)
        collapsed.append(coarse)
    return (graphs, collapsed) if return_collapsed else graphs


def _collapsed_target(coarse) -> Tensor:
    s, u = coarse.x[:, 0], coarse.x[:, 1]
    src, dst = coarse.edge_index
    w = coarse.edge_weight
    flow = (torch.zeros(coarse.num_nodes, dtype=w.dtype).index_add_(0, src, w * s[dst])
            - torch.zeros(coarse.num_nodes, dtype=w.dtype).index_add_(0, dst, w * s[src]))
    return (coarse.node_weight * (torch.tanh(flow) + 0.5 * u)).sum().reshape(1).float()


def scale_heavy_edges(data, scale: float):
    """A copy of ``data`` with its ``heavy`` edges' weights multiplied by ``scale`` (> 0)."""
    if not (isinstance(scale, (int, float)) and 0 < scale < float("inf")):
        raise ValueError(f"scale must be a finite number > 0, got {scale}")
    out = data.clone()
    out.edge_weight = torch.where(data.heavy, data.edge_weight * scale, data.edge_weight)
    return out


def collapse_graph(data):
    """The graph ``data``'s heavy clusters collapse to (:func:`~iclr24.holonets.collapse_clusters`):
    features projected with the clusters' left kernel weights, node weights summed, ``y`` kept."""
    from torch_geometric.data import Data

    from iclr24.holonets.operators import collapse_clusters

    collapsed = collapse_clusters(data.edge_index, data.num_nodes, data.edge_weight, heavy=data.heavy,
                                  node_weight=data.node_weight)
    node_weight = collapsed.node_weight.to(data.node_weight.dtype)
    x = collapsed.project(data.x.double()).to(data.x.dtype)
    coarse = Data(x=x, edge_index=collapsed.edge_index, edge_weight=collapsed.edge_weight.to(data.x.dtype),
                  heavy=torch.zeros(collapsed.edge_index.size(1), dtype=torch.bool), node_weight=node_weight)
    if "y" in data:
        coarse.y = data.y
    return coarse
