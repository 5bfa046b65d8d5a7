"""The layers take a sparse adjacency in PyG's adj_t convention, as PyG's own layers do."""

import pytest
import torch

from iclr24.holonets import ResolventConv, as_edge_index


def _graph():
    edge_index = torch.tensor([[0, 1, 2, 3, 0], [1, 2, 3, 0, 2]])
    weight = torch.tensor([1.0, 2.0, 0.5, 1.0, 3.0])
    return edge_index, weight


def _adj_t(edge_index, weight, n=4):
    # adj_t[i, j] holds the edge j -> i
    return torch.sparse_coo_tensor(edge_index.flip(0), weight, (n, n))


def test_a_sparse_adj_t_becomes_the_same_edges_and_weights():
    edge_index, weight = _graph()
    index, values = as_edge_index(_adj_t(edge_index, weight))
    got = {(int(s), int(d)): float(w) for (s, d), w in zip(index.t(), values)}
    assert got == {(int(s), int(d)): float(w) for (s, d), w in zip(edge_index.t(), weight)}
    index, values = as_edge_index(_adj_t(edge_index, torch.ones(5)).to_sparse_csr())
    assert values is None and sorted(map(tuple, index.t().tolist())) == sorted(map(tuple, edge_index.t().tolist()))


def test_resolvent_conv_gives_the_same_output_for_sparse_and_index_input():
    torch.manual_seed(0)
    edge_index, weight = _graph()
    conv = ResolventConv(3, 2)
    x = torch.randn(4, 3)
    torch.testing.assert_close(conv(x, _adj_t(edge_index, weight)), conv(x, edge_index, weight))


def test_faber_conv_gives_the_same_output_for_sparse_and_index_input():
    pytest.importorskip("torch_geometric")
    from iclr24.holonets import FaberConv

    torch.manual_seed(0)
    edge_index, weight = _graph()
    conv = FaberConv(3, 2, K=2)
    x = torch.randn(4, 3)
    torch.testing.assert_close(conv(x, _adj_t(edge_index, weight)), conv(x, edge_index, weight))


def test_weights_given_twice_are_refused():
    edge_index, weight = _graph()
    with pytest.raises(ValueError, match="edge_weight must be None when edge_index is a sparse adjacency"):
        as_edge_index(_adj_t(edge_index, weight), weight)
