import pytest
import torch

pytest.importorskip("torch_geometric")

from iclr24.holonets.data import cyclic_dsbm, flow_dsbm, load_real_dataset, subdivide_edges, syn_dir  # noqa: E402


@pytest.mark.parametrize("make", [lambda: syn_dir(500, p=0.01), lambda: flow_dsbm(300), lambda: cyclic_dsbm(300)])
def test_generators_give_disjoint_masks_covering_all_nodes(make):
    data = make()
    masks = torch.stack([data.train_mask, data.val_mask, data.test_mask]).int()
    assert (masks.sum(0) == 1).all()
    assert data.edge_index.max() < data.num_nodes and (data.edge_index[0] != data.edge_index[1]).all()


def test_syn_dir_labels_compare_out_and_in_neighbour_means():
    data = syn_dir(300, p=0.02, seed=1)
    i = int(torch.nonzero(torch.bincount(data.edge_index[0], minlength=300) > 0)[0])
    out_mean = data.x[data.edge_index[1][data.edge_index[0] == i], 0].mean()
    ins = data.edge_index[0][data.edge_index[1] == i]
    in_mean = data.x[ins, 0].mean() if ins.numel() else torch.tensor(0.0)
    assert data.y[i].item() == int(out_mean > in_mean)


def test_flow_dsbm_points_low_to_high_classes():
    data = flow_dsbm(1000, flow=0.9, seed=2)
    a, b = data.y[data.edge_index[0]], data.y[data.edge_index[1]]
    cross = a != b
    assert (a[cross] < b[cross]).float().mean() == pytest.approx(0.9, abs=0.03)
    assert (data.x == 1).all()


def test_subdivide_edges_keeps_the_original_nodes():
    data = flow_dsbm(300, seed=0)
    finer = subdivide_edges(data, 0.5, seed=0)
    added = finer.num_nodes - data.num_nodes
    assert finer.edge_index.size(1) == data.edge_index.size(1) + added
    assert torch.equal(finer.y[: data.num_nodes], data.y) and (finer.y[data.num_nodes:] == -1).all()
    assert torch.equal(finer.test_mask[: data.num_nodes], data.test_mask) and not finer.test_mask[data.num_nodes:].any()
    with pytest.raises(ValueError, match=r"fraction must lie in \[0, 1\]"):
        subdivide_edges(data, 1.5)


def test_real_datasets_load_from_a_local_path_only(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing is downloaded"):
        load_real_dataset("chameleon", tmp_path)
    with pytest.raises(ValueError, match="unknown dataset 'cora'"):
        load_real_dataset("cora", tmp_path)
