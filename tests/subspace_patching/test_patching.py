import math

import pytest
import torch

from iclr24.subspace_patching import (
    DistributedAlignmentSearch,
    PlantedDormantMLP,
    dormancy_statistics,
    fldd,
    interchange_accuracy,
    patch_direction,
    patch_subspace,
    rowspace_nullspace_split,
    toy_patches,
)


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)


def test_one_direction_patch_formula_by_hand():
    w, u, v = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([4.0, 0.0, -1.0]), torch.tensor([0.0, 2.0, 0.0])
    # the component along e2 is taken from u, the rest kept: (1, 0, 3)
    torch.testing.assert_close(patch_direction(w, u, v), torch.tensor([1.0, 0.0, 3.0]))
    v = torch.tensor([1.0, 1.0, 0.0])  # ((u - w).v / |v|^2) v = (3 - 2)/2 (1, 1, 0)
    torch.testing.assert_close(patch_direction(w, u, v), torch.tensor([1.5, 2.5, 3.0]))


def test_a_direction_orthogonal_to_the_readout_changes_nothing_read():
    g = torch.Generator().manual_seed(0)
    readout = torch.randn(5, generator=g)
    w, u = torch.randn(10, 5, generator=g), torch.randn(10, 5, generator=g)
    v = torch.randn(5, generator=g)
    v = v - (v @ readout) / (readout @ readout) * readout
    torch.testing.assert_close(patch_direction(w, u, v) @ readout, w @ readout)
    assert not torch.allclose(patch_direction(w, u, v), w)


def test_subspace_patch_of_everything_is_the_source_and_of_one_direction_the_direction_patch():
    g = torch.Generator().manual_seed(1)
    w, u = torch.randn(4, 6, generator=g), torch.randn(4, 6, generator=g)
    torch.testing.assert_close(patch_subspace(w, u, torch.randn(6, 6, generator=g)), u)
    v = torch.randn(6, generator=g)
    torch.testing.assert_close(patch_subspace(w, u, 3 * v[:, None]), patch_direction(w, u, v))
    with pytest.raises(ValueError, match="linearly independent"):
        patch_subspace(w, u, torch.stack([v, 2 * v], 1))


def test_split_parts_sum_to_v_and_the_null_part_is_invisible_to_w_out():
    g = torch.Generator().manual_seed(2)
    W_out = torch.randn(4, 9, generator=g, dtype=torch.float64)  # rank 4 in a 9-d hidden space
    v = torch.randn(9, generator=g, dtype=torch.float64)
    v_row, v_null = rowspace_nullspace_split(v, W_out)
    torch.testing.assert_close(v_row + v_null, v)
    torch.testing.assert_close(W_out @ v_null, torch.zeros(4, dtype=torch.float64), atol=1e-12, rtol=0)
    assert abs(float(v_row @ v_null)) < 1e-12
    torch.testing.assert_close(W_out @ v_row, W_out @ v)
    with pytest.raises(ValueError, match="d_mlp = len"):
        rowspace_nullspace_split(v[:5], W_out)


def test_the_papers_toy():
    out = toy_patches(torch.tensor([1.0, -2.0], dtype=torch.float64), torch.tensor([3.0, 0.5], dtype=torch.float64))
    torch.testing.assert_close(out["(e2 + e3)/sqrt2 (illusory)"], out["source"])
    torch.testing.assert_close(out["e1 (the feature)"], out["source"])
    for nothing in ("e2 (disconnected)", "e3 (dormant)", "span{e2, e3}"):
        torch.testing.assert_close(out[nothing], out["none"])


def test_the_planted_dormant_neuron_shows_the_illusion():
    model = PlantedDormantMLP()
    x_base, x_source = torch.tensor([1.0, 2.0]), torch.tensor([0.0, 0.5])  # features are non-negative
    hb, hs = model.hidden(x_base), model.hidden(x_source)
    torch.testing.assert_close(model.output_from_hidden(x_base, hs), model(x_base))  # the whole MLP: nothing
    v = torch.tensor([1.0, 1.0]) / math.sqrt(2)
    torch.testing.assert_close(model.output_from_hidden(x_base, patch_direction(hb, hs, v)), model(x_source))
    v_row, v_null = rowspace_nullspace_split(v, model.W_out)
    for part in (v_row, v_null):  # each part alone does nothing: the effect needs both
        torch.testing.assert_close(model.output_from_hidden(x_base, patch_direction(hb, hs, part)), model(x_base))


def test_das_keeps_its_basis_orthonormal_and_patches_it():
    das = DistributedAlignmentSearch(6, k=2, seed=0)
    opt = torch.optim.Adam(das.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(0)
    w, u = torch.randn(8, 6, generator=g), torch.randn(8, 6, generator=g)
    for _ in range(5):
        loss = das(w, u).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    B = das.basis.detach()
    torch.testing.assert_close(B.T @ B, torch.eye(2), atol=1e-5, rtol=0)
    assert not torch.allclose(B, DistributedAlignmentSearch(6, k=2, seed=0).basis.detach())  # training moved it
    with torch.no_grad():
        torch.testing.assert_close(das(w, u), patch_subspace(w, u, das.basis), atol=1e-5, rtol=0)
    assert das.basis.shape == (6, 2)
    with pytest.raises(ValueError, match="k must be <= dim=6"):
        DistributedAlignmentSearch(6, k=7)


def test_metrics():
    clean = torch.tensor([2.0, 4.0])
    assert fldd(clean, clean) == 0.0 and fldd(torch.zeros(2), clean) == 100.0 and fldd(-clean, clean) == 200.0
    # asymmetric: the patch made 3 of 4 prompts prefer the source's answer (LD < 0); a flipped sign gives 0.25
    assert interchange_accuracy(torch.tensor([-1.0, -0.5, -0.1, 2.0])) == 0.75
    assert interchange_accuracy(torch.tensor([0.0, 1.0])) == 0.0  # a tie is not a flip
    with pytest.raises(ValueError, match="clean logit difference is 0"):
        fldd(clean, torch.zeros(2))


def test_bad_arguments_name_the_argument():
    w = torch.zeros(3, 4)
    with pytest.raises(ValueError, match="source must have base's shape"):
        patch_direction(w, torch.zeros(3, 5), torch.ones(4))
    with pytest.raises(ValueError, match="v must have 4 entries"):
        patch_direction(w, w, torch.ones(5))
    with pytest.raises(ValueError, match="non-zero direction"):
        patch_direction(w, w, torch.zeros(4))


def test_split_of_a_rank_deficient_float32_w_out():
    g = torch.Generator().manual_seed(3)
    W_out = torch.randn(8, 3, generator=g) @ torch.randn(3, 12, generator=g)  # rank 3, float32
    null = torch.linalg.svd(W_out.double())[2][-1].float()  # a direction W_out maps to ~0
    v_row, v_null = rowspace_nullspace_split(null, W_out)
    assert v_row.norm() < 1e-3 and (v_null.norm() - 1).abs() < 1e-3


def test_mixed_precision_patches_follow_the_activations():
    w, u = torch.zeros(2, 3, dtype=torch.float64), torch.ones(2, 3, dtype=torch.float64)
    out = patch_direction(w, u, torch.tensor([1.0, 0.0, 0.0]))
    assert out.dtype == torch.float64 and out[0].tolist() == [1.0, 0.0, 0.0]
    assert patch_subspace(w, u, torch.eye(3)[:, :1]).dtype == torch.float64
    with pytest.raises(ValueError, match="4 columns in 3 dimensions"):
        patch_subspace(w, u, torch.randn(3, 4))


def test_end_patcher_names_bad_pairs():
    from iclr24.interp import HookedTinyTransformer
    from iclr24.subspace_patching import EndPatcher, PatchingPairs

    model = HookedTinyTransformer(10, 6, d_model=8, n_layers=2, n_heads=2, d_mlp=16)
    tokens = torch.randint(10, (3, 6))
    ok = dict(base=tokens, source=tokens, lengths=torch.tensor([6, 5, 6]), answer=torch.tensor([1, 2, 3]),
              other=torch.tensor([4, 5, 6]))
    for change, message in ((dict(lengths=torch.tensor([7, 5, 6])), r"pairs.lengths must lie in \[1, 6\]"),
                            (dict(answer=torch.tensor([1, 2])), r"pairs.answer must be an integer tensor of shape"),
                            (dict(source=tokens[:, :5]), "pairs.source must have pairs.base's shape")):
        with pytest.raises(ValueError, match=message):
            EndPatcher(model, "blocks.1.hook_resid_pre", PatchingPairs(**{**ok, **change}))
    with pytest.raises(ValueError, match="pairs is empty"):
        EndPatcher(model, "blocks.1.hook_resid_pre", PatchingPairs(**ok).subset(torch.tensor([], dtype=torch.long)))


def test_dormancy_statistics_by_hand():
    # dim 0 (the part W_out reads) varies with the prompt but not between base and source: dormant for the
    # feature; dim 1 (disconnected) carries it. v = (e0 + e1)/sqrt2 moves dim 0 by (u - w).v v_0 = 1.
    a = torch.tensor([-1.0, 1.0, -1.0, 1.0])
    base = torch.stack([a, -torch.ones(4)], dim=1)
    source = torch.stack([a, torch.ones(4)], dim=1)
    v = torch.tensor([1.0, 1.0]) / math.sqrt(2)
    sd = math.sqrt(8 / 7)  # the 8 clean values +-1 along either axis
    row = dormancy_statistics(base, source, v, torch.tensor([1.0, 0.0]))
    assert row["separation"] == pytest.approx(0.0)
    assert row["patch_shift"] == pytest.approx(1 / sd)  # patched dim 0: a + 1 = (0, 2, 0, 2)
    assert row["patched_distance"] == pytest.approx(1 / sd)
    assert row["outside_range"] == pytest.approx(0.5) and row["outside_central"] == pytest.approx(0.5)
    null = dormancy_statistics(base, source, v, torch.tensor([0.0, 3.0]))  # any scale of the part
    assert null["separation"] == pytest.approx(2 / sd)
    # a reference with a wider spread: the same shifts in its (larger) sd, nothing outside its range
    wide = dormancy_statistics(base, source, v, torch.tensor([1.0, 0.0]), reference=torch.cat([base, source]) * 3)
    assert wide["patch_shift"] == pytest.approx(1 / (3 * sd)) and wide["outside_range"] == 0.0


def test_dormancy_statistics_name_bad_arguments():
    base, source = torch.randn(4, 3), torch.randn(4, 3)
    with pytest.raises(ValueError, match="part must have 3 entries"):
        dormancy_statistics(base, source, torch.ones(3), torch.ones(2))
    with pytest.raises(ValueError, match="v must be a non-zero direction"):
        dormancy_statistics(base, source, torch.zeros(3), torch.ones(3))
    with pytest.raises(ValueError, match="central must be in"):
        dormancy_statistics(base, source, torch.ones(3), torch.ones(3), central=1.0)
    with pytest.raises(ValueError, match="do not vary along part"):
        dormancy_statistics(torch.zeros(4, 3), torch.zeros(4, 3), torch.ones(3), torch.ones(3))


def test_dormancy_statistics_orient_pairs_that_change_the_feature_the_other_way():
    # half the pairs go ABB -> BAB, half BAB -> ABB: unsigned, their separations cancel; signed, they add up
    a = torch.tensor([-1.0, 1.0, -1.0, 1.0])
    base = torch.stack([a, torch.tensor([-1.0, -1.0, 1.0, 1.0])], dim=1)
    source = torch.stack([a, torch.tensor([1.0, 1.0, -1.0, -1.0])], dim=1)
    v, null = torch.tensor([1.0, 1.0]) / math.sqrt(2), torch.tensor([0.0, 1.0])
    sign = torch.tensor([1.0, 1.0, -1.0, -1.0])
    assert dormancy_statistics(base, source, v, null)["separation"] == pytest.approx(0.0)
    assert dormancy_statistics(base, source, v, null, sign=sign)["separation"] == pytest.approx(2 / math.sqrt(8 / 7))
    with pytest.raises(ValueError, match="sign must hold 4 values, each"):
        dormancy_statistics(base, source, v, null, sign=torch.tensor([1.0, 0.0, 1.0, 1.0]))
