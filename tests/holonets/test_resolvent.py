"""Dir-ResolvNet's resolvent filters and the collapse of heavy clusters."""

import warnings

import pytest
import torch

from iclr24.holonets import CollapsedGraph, ResolventConv, UnbalancedClusterWarning, collapse_clusters, dense_laplacian

UNBALANCED = pytest.warns(UnbalancedClusterWarning, match="not balanced")

torch.set_num_threads(1)


def laplacian_by_hand(edges, weights, n, node_weight=None, reverse=False):
    """M^-1 (D - A) from an edge list, entry by entry."""
    L = torch.zeros(n, n, dtype=torch.float64)
    for (i, j), w in zip(edges, weights):
        if reverse:
            i, j = j, i
        L[i, j] -= w
        L[i, i] += w
    if node_weight is not None:
        L = L / torch.as_tensor(node_weight, dtype=torch.float64)[:, None]
    return L


EDGES = [(0, 1), (1, 0), (1, 2), (2, 3), (3, 0), (3, 4)]
WEIGHTS = [2.0, 1.0, 3.0, 1.0, 0.5, 1.5]
EDGE_INDEX = torch.tensor(EDGES).T


def test_dense_laplacian_matches_the_definition():
    mu = torch.tensor([1.0, 2.0, 0.5, 1.0, 3.0])
    for reverse in (False, True):
        expected = laplacian_by_hand(EDGES, WEIGHTS, 5, mu, reverse)
        got = dense_laplacian(EDGE_INDEX, 5, torch.tensor(WEIGHTS, dtype=torch.float64), node_weight=mu,
                              reverse=reverse)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(got.sum(1), torch.zeros(5, dtype=torch.float64))  # constants in the kernel


@pytest.mark.parametrize("alpha", [1.0, 0.0, 0.3])
def test_resolvent_conv_equals_the_dense_formula(alpha):
    torch.manual_seed(0)
    conv = ResolventConv(3, 4, K=3, omega=0.7, alpha=alpha).double()
    torch.nn.init.normal_(conv.bias)
    x = torch.randn(5, 3, dtype=torch.float64)
    mu = torch.tensor([1.0, 2.0, 0.5, 1.0, 3.0], dtype=torch.float64)
    w = torch.tensor(WEIGHTS, dtype=torch.float64)
    expected = conv.bias.detach().clone()
    for weight, lins, reverse in ((alpha, conv.lins_fwd, False), (1 - alpha, conv.lins_bwd, True)):
        L = laplacian_by_hand(EDGES, WEIGHTS, 5, mu, reverse)
        R = torch.linalg.inv(0.7 * torch.eye(5, dtype=torch.float64) + L)
        for k in range(3):
            expected = expected + weight * torch.linalg.matrix_power(R, k + 1) @ x @ lins[k].weight.T
    torch.testing.assert_close(conv(x, EDGE_INDEX, w, node_weight=mu), expected)


def test_a_batch_equals_its_graphs_one_at_a_time():
    torch.manual_seed(1)
    conv = ResolventConv(2, 3, K=2, root_weight=True)
    x1, x2 = torch.randn(5, 2), torch.randn(3, 2)
    e2 = torch.tensor([[0, 1, 2], [1, 2, 0]])
    w1, w2 = torch.tensor(WEIGHTS), torch.tensor([1.0, 2.0, 0.5])
    mu1, mu2 = torch.rand(5) + 0.5, torch.rand(3) + 0.5
    batched = conv(torch.cat([x1, x2]), torch.cat([EDGE_INDEX, e2 + 5], dim=1), torch.cat([w1, w2]),
                   batch=torch.tensor([0] * 5 + [1] * 3), node_weight=torch.cat([mu1, mu2]))
    torch.testing.assert_close(batched, torch.cat([conv(x1, EDGE_INDEX, w1, node_weight=mu1),
                                                   conv(x2, e2, w2, node_weight=mu2)]), rtol=1e-5, atol=1e-6)


def test_collapse_known_values():
    # cluster {0, 1}: 0 -> 1 weight 2, 1 -> 0 weight 1 (heavy). rho^T (D - A) = 0 gives rho = (1/3, 2/3);
    # node weights (1, 2) make pi = mu rho / sum = (0.2, 0.8).
    heavy = torch.tensor([True, True, False, False, False, False])
    w = torch.tensor(WEIGHTS)
    with pytest.warns(UnbalancedClusterWarning, match=r"the clusters of nodes \[\[0, 1\]\]"):
        plain = collapse_clusters(EDGE_INDEX, 5, w, heavy=heavy)
    torch.testing.assert_close(plain.pi[:2], torch.tensor([1 / 3, 2 / 3], dtype=torch.float64))
    with pytest.warns(UnbalancedClusterWarning):
        weighted = collapse_clusters(EDGE_INDEX, 5, w, heavy=heavy,
                                     node_weight=torch.tensor([1.0, 2.0, 1.0, 1.0, 4.0]))
    assert weighted.num_clusters == 4 and weighted.cluster[0] == weighted.cluster[1]
    torch.testing.assert_close(weighted.pi[:2], torch.tensor([0.2, 0.8], dtype=torch.float64))
    c = weighted.cluster
    reduced = {(int(a), int(b)): float(v) for (a, b), v in zip(weighted.edge_index.T, weighted.edge_weight)}
    # the light edge 1 -> 2 (weight 3) becomes mu_c pi_1 / mu_1 * 3 = 3 * 0.8 / 2 * 3 = 3.6; singletons keep theirs
    assert reduced == pytest.approx({(int(c[1]), int(c[2])): 3.6, (int(c[2]), int(c[3])): 1.0,
                                     (int(c[3]), int(c[0])): 0.5, (int(c[3]), int(c[4])): 1.5})
    assert weighted.node_weight[c[0]] == 3.0
    y = torch.randn(4, 2, dtype=torch.float64)
    torch.testing.assert_close(weighted.project(weighted.lift(y)), y)


def _directed_clusters(seed):
    """A graph of 6 clusters with directed heavy cycles and chords, light edges between them."""
    g = torch.Generator().manual_seed(seed)
    sizes, edges, weights, heavy = [1, 3, 2, 4, 1, 3], [], [], []
    starts = torch.tensor([0, *torch.tensor(sizes).cumsum(0)[:-1].tolist()])
    for start, size in zip(starts.tolist(), sizes):
        for a in range(size if size > 1 else 0):
            edges += [(start + a, start + (a + 1) % size), (start + a, start + (a + 2) % size)]
            weights += (0.5 + 1.5 * torch.rand(2, generator=g)).tolist()
            heavy += [True, True]
    edges = [e for e in edges if e[0] != e[1]]
    weights, heavy = weights[: len(edges)], heavy[: len(edges)]
    for _ in range(12):
        c, d = torch.randint(6, (2,), generator=g).tolist()
        if c != d:
            edges.append((int(starts[c]) + int(torch.randint(sizes[c], (1,), generator=g)),
                          int(starts[d]) + int(torch.randint(sizes[d], (1,), generator=g))))
            weights.append(0.2 + float(torch.rand(1, generator=g)))
            heavy.append(False)
    n = sum(sizes)
    return torch.tensor(edges).T, torch.tensor(weights, dtype=torch.float64), torch.tensor(heavy), n


def test_the_resolvent_converges_to_the_collapsed_graphs_at_rate_one_over_scale():
    edge_index, w, heavy, n = _directed_clusters(0)
    mu = torch.linspace(0.5, 2.0, n, dtype=torch.float64)
    with pytest.warns(UnbalancedClusterWarning):
        collapsed = collapse_clusters(edge_index, n, w, heavy=heavy, node_weight=mu)
    members = collapsed.cluster == collapsed.cluster[1]
    assert (collapsed.pi[members] - mu[members] / mu[members].sum()).abs().max() > 0.05  # pi is not the plain mean
    C = collapsed.num_clusters
    eye = torch.eye(C, dtype=torch.float64)
    R_red = torch.linalg.inv(eye + dense_laplacian(collapsed.edge_index, C, collapsed.edge_weight,
                                                   node_weight=collapsed.node_weight))
    lift = eye[collapsed.cluster]  # J_up, (n, C)
    project = collapsed.project(torch.eye(n, dtype=torch.float64))  # J_down, (C, n)
    limit = lift @ R_red @ project
    errors = []
    for scale in (1e2, 1e3, 1e4):
        L = dense_laplacian(edge_index, n, torch.where(heavy, scale * w, w), node_weight=mu)
        errors.append(float(torch.linalg.matrix_norm(torch.linalg.inv(torch.eye(n, dtype=torch.float64) + L) - limit,
                                                     ord=2)))
    assert errors[2] < 1e-3
    assert errors[0] / errors[1] == pytest.approx(10, rel=0.1) and errors[1] / errors[2] == pytest.approx(10, rel=0.1)


def _network(conv1, conv2, x, edge_index, w, mu):
    h = torch.relu(conv1(x, edge_index, w, node_weight=mu))
    return conv2(h, edge_index, w, node_weight=mu)


@pytest.mark.parametrize("directed", [False, True])
def test_a_resolvent_network_on_fine_graphs_converges_to_the_lifted_coarse_network(directed):
    from iclr24.holonets.data import clustered_digraphs

    torch.manual_seed(2)
    data = clustered_digraphs(1, directed_clusters=directed, seed=3)[0]
    w, x, mu = data.edge_weight.double(), data.x.double(), data.node_weight.double()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        collapsed = collapse_clusters(data.edge_index, data.num_nodes, w, heavy=data.heavy, node_weight=mu)
    assert [w.category for w in caught] == ([UnbalancedClusterWarning] if directed else [])
    # with directed heavy edges only the forward branch has this limit (the reverse one has its own pi')
    alpha = 1.0 if directed else 0.5
    convs = [ResolventConv(4, 8, alpha=alpha).double(), ResolventConv(8, 3, alpha=alpha).double()]
    coarse = collapsed.lift(_network(*convs, collapsed.project(x), collapsed.edge_index, collapsed.edge_weight,
                                     collapsed.node_weight))
    gaps = [float((_network(*convs, x, data.edge_index, torch.where(data.heavy, s * w, w), mu) - coarse).abs().max())
            for s in (1e1, 1e3)]
    assert gaps[1] < 1e-3 * coarse.abs().max() and gaps[1] < gaps[0] / 50


def test_with_directed_clusters_the_reverse_branch_has_another_limit():
    from iclr24.holonets.data import clustered_digraphs

    torch.manual_seed(2)
    data = clustered_digraphs(1, directed_clusters=True, seed=3)[0]
    w, x, mu = data.edge_weight.double(), data.x.double(), data.node_weight.double()
    with UNBALANCED:
        collapsed = collapse_clusters(data.edge_index, data.num_nodes, w, heavy=data.heavy, node_weight=mu)
    conv = ResolventConv(4, 3, alpha=0.0).double()
    coarse = collapsed.lift(conv(collapsed.project(x), collapsed.edge_index, collapsed.edge_weight,
                                 node_weight=collapsed.node_weight))
    fine = conv(x, data.edge_index, torch.where(data.heavy, 1e4 * w, w), node_weight=mu)
    assert (fine - coarse).abs().max() > 1e-2 * coarse.abs().max()


def _relative_gaps(conv, collapsed, x, edge_index, w, heavy, mu, scales):
    """max |fine output - lifted coarse output| / max |coarse output| at each heavy-edge scale."""
    with torch.no_grad():
        coarse = collapsed.lift(conv(collapsed.project(x), collapsed.edge_index, collapsed.edge_weight,
                                     node_weight=collapsed.node_weight))
        return [float((conv(x, edge_index, torch.where(heavy, s * w, w), node_weight=mu) - coarse).abs().max()
                      / coarse.abs().max()) for s in scales]


def test_bonds_with_unequal_twin_weights_warn_and_only_the_forward_filter_converges():
    """Issue #51: every heavy edge has a twin, but of another weight. The clusters are then not balanced, the
    reverse operator L' collapses to another graph, and a filter with alpha < 1 stops at a fixed error (0.18
    here) however heavy the bonds grow; the forward-only filter still converges as 1/s."""
    from iclr24.holonets.data import clustered_digraphs

    data = clustered_digraphs(1, seed=3)[0]
    w, x, mu = data.edge_weight.double(), data.x.double(), data.node_weight.double()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnbalancedClusterWarning)  # equal twins: balanced, no warning
        collapse_clusters(data.edge_index, data.num_nodes, w, heavy=data.heavy, node_weight=mu)
    factor = 0.5 + torch.rand(w.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    unequal = torch.where(data.heavy, w * factor, w)
    with UNBALANCED:
        collapsed = collapse_clusters(data.edge_index, data.num_nodes, unequal, heavy=data.heavy, node_weight=mu)
    torch.manual_seed(1)
    for alpha in (1.0, 0.5):
        conv = ResolventConv(4, 3, alpha=alpha).double()
        gaps = _relative_gaps(conv, collapsed, x, data.edge_index, unequal, data.heavy, mu, (1e3, 1e5))
        if alpha == 1.0:
            assert gaps[1] < 1e-5 and gaps[0] / gaps[1] == pytest.approx(100, rel=0.1)
        else:
            assert gaps[1] > 5e-2 and gaps[1] == pytest.approx(gaps[0], rel=0.1)


def test_a_balanced_directed_cycle_collapses_for_both_branches_without_a_warning():
    # heavy 0 -> 1 -> 2 -> 0, equal weights, no twins: every member's out-weight equals its in-weight, so pi is
    # the node-weighted mean for L and L' alike and a two-branch filter converges too
    edge_index = torch.tensor([[0, 1, 2, 2, 3, 3, 4], [1, 2, 0, 3, 0, 4, 1]])
    w = torch.tensor([1.5, 1.5, 1.5, 0.7, 0.4, 1.0, 0.3], dtype=torch.float64)
    heavy = torch.tensor([True, True, True, False, False, False, False])
    mu = torch.tensor([1.0, 2.0, 0.5, 1.0, 1.5], dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnbalancedClusterWarning)
        collapsed = collapse_clusters(edge_index, 5, w, heavy=heavy, node_weight=mu)
    torch.testing.assert_close(collapsed.pi[:3], mu[:3] / 3.5)
    x = torch.randn(5, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(1)
    gaps = _relative_gaps(ResolventConv(2, 3, alpha=0.5).double(), collapsed, x, edge_index, w, heavy, mu, (1e3, 1e5))
    assert gaps[1] < 1e-4 and gaps[0] / gaps[1] == pytest.approx(100, rel=0.1)


def test_faber_conv_grows_with_the_heavy_edges_where_the_resolvent_stays_bounded():
    from iclr24.holonets import FaberConv
    from iclr24.holonets.data import clustered_digraphs

    torch.manual_seed(4)
    data = clustered_digraphs(1, seed=5)[0]
    faber, resolvent = FaberConv(4, 4, K=2).double(), ResolventConv(4, 4).double()
    x, w = data.x.double(), data.edge_weight.double()
    norms = {name: [float(conv(x, data.edge_index, torch.where(data.heavy, s * w, w)).norm()) for s in (1.0, 1e4)]
             for name, conv in (("faber", faber), ("resolvent", resolvent))}
    assert norms["faber"][1] > 20 * norms["faber"][0]  # T grows like s^(1/2): x100 at s = 1e4
    assert norms["resolvent"][1] < 2 * norms["resolvent"][0]


def test_gradients_reach_weights_edges_and_features():
    conv = ResolventConv(3, 2, K=2, root_weight=True)
    x = torch.randn(5, 3, requires_grad=True)
    w = torch.tensor(WEIGHTS, requires_grad=True)
    conv(x, EDGE_INDEX, w).square().sum().backward()
    for grad in (x.grad, w.grad, *(p.grad for p in conv.parameters())):
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0


def test_repr_and_bad_arguments():
    assert repr(ResolventConv(3, 2, K=2, omega=0.5)) == "ResolventConv(3, 2, K=2, omega=0.5, alpha=0.5)"
    with pytest.raises(ValueError, match="omega must be > 0, got 0"):
        ResolventConv(3, 2, omega=0.0)
    with pytest.raises(ValueError, match="alpha must be <= 1, got 1.5"):
        ResolventConv(3, 2, alpha=1.5)
    with pytest.raises(ValueError, match="K must be"):
        ResolventConv(3, 2, K=0)
    conv, x = ResolventConv(3, 2), torch.randn(5, 3)
    with pytest.raises(ValueError, match="x has 2 channels, this layer expects in_channels=3"):
        conv(torch.randn(5, 2), EDGE_INDEX)
    with pytest.raises(ValueError, match="batch must be non-negative and sorted"):
        conv(x, EDGE_INDEX, batch=torch.tensor([0, 1, 0, 1, 1]))
    with pytest.raises(ValueError, match="an edge between two graphs"):
        conv(x, EDGE_INDEX, batch=torch.tensor([0, 0, 0, 1, 1]))
    with pytest.raises(ValueError, match=r"batch must be an integer vector with one entry per node \(5\)"):
        conv(x, EDGE_INDEX, batch=torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"node_weight must have one entry per node \(5\)"):
        conv(x, EDGE_INDEX, node_weight=torch.ones(3))
    with pytest.raises(ValueError, match="node_weight must be positive"):
        conv(x, EDGE_INDEX, node_weight=torch.tensor([1.0, 0.0, 1.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match="edge_weight must be non-negative"):
        conv(x, EDGE_INDEX, torch.tensor([1.0, -1.0, 1.0, 1.0, 1.0, 1.0]))


def test_collapse_needs_one_terminal_part_per_cluster():
    # heavy 0 -> 1 -> 2, no way back: one terminal part ({2}), so the three collapse onto node 2's value
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 3]])
    with UNBALANCED:
        chain = collapse_clusters(edge_index, 4, heavy=torch.tensor([True, True, False]))
    assert chain.num_clusters == 2 and chain.pi[:3].tolist() == pytest.approx([0.0, 0.0, 1.0], abs=1e-12)
    # heavy 0 -> 1 and 0 -> 2: two terminal parts, no single collapsed node
    with pytest.raises(ValueError, match="has 2 terminal strongly connected parts"):
        collapse_clusters(torch.tensor([[0, 0, 1], [1, 2, 3]]), 4, heavy=torch.tensor([True, True, False]))
    with pytest.raises(ValueError, match=r"heavy must be a boolean mask with one entry per edge \(3\)"):
        collapse_clusters(edge_index, 4, heavy=torch.tensor([1, 1, 0]))
    light_only = collapse_clusters(edge_index, 4, heavy=torch.zeros(3, dtype=torch.bool))
    assert isinstance(light_only, CollapsedGraph) and light_only.num_clusters == 4
    assert light_only.edge_weight.tolist() == [1.0, 1.0, 1.0]


def test_a_one_way_heavy_edge_converges_to_its_target_node():
    # heavy 0 -> 1 (weight s), light 1 -> 2 and 2 -> 0: node 0 follows node 1, pi = (0, 1)
    edge_index, w = torch.tensor([[0, 1, 2], [1, 2, 0]]), torch.tensor([1.0, 1.0, 0.5], dtype=torch.float64)
    heavy = torch.tensor([True, False, False])
    with UNBALANCED:
        collapsed = collapse_clusters(edge_index, 3, w, heavy=heavy)
    assert collapsed.pi.tolist() == pytest.approx([0.0, 1.0, 1.0], abs=1e-12)
    eye = torch.eye(collapsed.num_clusters, dtype=torch.float64)
    R_red = torch.linalg.inv(eye + dense_laplacian(collapsed.edge_index, collapsed.num_clusters,
                                                   collapsed.edge_weight, node_weight=collapsed.node_weight))
    limit = eye[collapsed.cluster] @ R_red @ collapsed.project(torch.eye(3, dtype=torch.float64))
    eye3 = torch.eye(3, dtype=torch.float64)
    errors = [float(torch.linalg.matrix_norm(
        torch.linalg.inv(eye3 + dense_laplacian(edge_index, 3, torch.where(heavy, s * w, w))) - limit, ord=2))
        for s in (1e2, 1e4)]
    assert errors[1] < 1e-3 and errors[0] / errors[1] == pytest.approx(100, rel=0.1)


def test_float32_inputs_are_solved_in_float64():
    torch.manual_seed(3)
    conv = ResolventConv(2, 2)
    x, edge_index = torch.randn(3, 2), torch.tensor([[0, 1, 1], [1, 0, 2]])
    heavy = torch.tensor([1e8, 1e8, 1.0])
    out = conv(x, edge_index, heavy)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, conv.double()(x.double(), edge_index, heavy.double()).float())
    with pytest.raises(TypeError, match="x must have dtype in"):
        conv(x.to(torch.complex64), edge_index)
    with pytest.raises(ValueError, match="x has no nodes"):
        conv(torch.zeros(0, 2), torch.zeros(2, 0, dtype=torch.long))
    with pytest.raises(TypeError, match="omega must be a real number"):
        ResolventConv(2, 2, omega=True)
    assert ResolventConv(2, 2, omega=torch.tensor(0.5)).omega == 0.5


def test_project_averages_integer_signals_as_reals():
    collapsed = collapse_clusters(torch.tensor([[0, 1], [1, 0]]), 3, heavy=torch.tensor([True, True]))
    assert collapsed.project(torch.tensor([1, 2, 5])).tolist() == pytest.approx([1.5, 5.0])


def test_the_graph_cache_reuses_factors_only_for_the_same_unmodified_graph():
    """The LU factors are cached per graph: a second pass equals a fresh layer's, and a changed graph (another
    tensor, or the same one edited in place) is factorised anew."""
    from iclr24.holonets import GraphCache

    torch.manual_seed(0)
    conv = ResolventConv(3, 4, K=2, omega=0.7).double()
    fresh = ResolventConv(3, 4, K=2, omega=0.7).double()
    fresh.load_state_dict(conv.state_dict())
    x = torch.randn(5, 3, dtype=torch.float64)
    w = torch.tensor(WEIGHTS, dtype=torch.float64)
    first = conv(x, EDGE_INDEX, w)
    assert torch.equal(conv(x, EDGE_INDEX, w), first)
    w.mul_(3.0)                                               # in place: the version counter moves
    assert torch.equal(conv(x, EDGE_INDEX, w), fresh(x, EDGE_INDEX, w))
    assert not torch.allclose(conv(x, EDGE_INDEX, w), first)
    other = w.clone() / 3.0                                   # another tensor with the first values
    torch.testing.assert_close(conv(x, EDGE_INDEX, other), first, rtol=0, atol=1e-12)
    learned = torch.tensor(WEIGHTS, dtype=torch.float64, requires_grad=True)
    conv(x, EDGE_INDEX, learned).sum().backward()             # learned weights bypass the cache: gradients flow
    assert learned.grad is not None and learned.grad.abs().sum() > 0

    cache, calls = GraphCache(size=2), []
    graphs = [torch.tensor([[0], [i]]) for i in range(3)]
    for g in graphs + graphs[:1]:                             # size 2: the first graph was evicted
        cache((g, 5000), lambda: calls.append(1))
    cache((graphs[0], 5000), lambda: calls.append(1))         # a hit, with an int that is not interned
    assert len(calls) == 4
