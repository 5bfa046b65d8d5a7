import json

import pytest
import torch

from iclr24.sae import (
    SAETrainingConfig,
    SparseAutoencoder,
    baseline_decompositions,
    dead_latents,
    fvu,
    l0,
    matched_similarity,
    mmcs,
    toy_superposition,
    train_sae,
)


def test_tied_decoder_is_the_encoders_transpose_with_unit_rows():
    sae = SparseAutoencoder(8, 16)
    torch.testing.assert_close(sae.W_dec, sae.W_enc.T)
    torch.testing.assert_close(sae.W_dec.norm(dim=-1), torch.ones(16))
    assert sae.W_enc.shape == (8, 16) and sae.W_dec.shape == (16, 8)
    assert sae.b_enc.shape == (16,) and sae.b_dec.shape == (8,)


def test_zero_input_gives_zero_codes_without_bias():
    sae = SparseAutoencoder(8, 16)
    assert torch.equal(sae.encode(torch.zeros(3, 8)), torch.zeros(3, 16))


def test_loss_matches_a_hand_computation():
    sae = SparseAutoencoder(2, 2, l1_coefficient=0.5)
    with torch.no_grad():
        sae.dictionary.copy_(torch.eye(2))
    x = torch.tensor([[1.0, -2.0]])
    # codes = relu(x) = [1, 0]; reconstruction = [1, 0]; mse = (0 + 4) / 2 = 2; l1 = 1
    loss, parts = sae.loss(x)
    assert parts == {"mse": 2.0, "l1": 1.0} and loss.item() == pytest.approx(2.5)


def test_rows_stay_unit_norm_after_every_step():
    data, _ = toy_superposition(2000, d=8, n_features=16, seed=0)
    sae = train_sae(data, SAETrainingConfig(d_sae=16, steps=5, batch_size=64, tied=False))
    torch.testing.assert_close(sae.dictionary.norm(dim=-1), torch.ones(16))
    torch.testing.assert_close(sae.decoder.norm(dim=-1), torch.ones(16))


@pytest.mark.parametrize("tied", [True, False])
def test_save_load_round_trip_in_saelens_layout(tmp_path, tied):
    pytest.importorskip("safetensors")
    from safetensors.torch import load_file

    sae = SparseAutoencoder(6, 12, tied=tied, l1_coefficient=0.01, centring=torch.arange(6.0))
    folder = sae.save(tmp_path / "sae")
    tensors = load_file(str(folder / "sae_weights.safetensors"))
    assert {k: tuple(v.shape) for k, v in tensors.items()} == {"W_enc": (6, 12), "W_dec": (12, 6), "b_enc": (12,),
                                                               "b_dec": (6,)}
    assert json.loads((folder / "cfg.json").read_text())["d_sae"] == 12
    loaded = SparseAutoencoder.load(folder)
    x = torch.randn(5, 6)
    torch.testing.assert_close(loaded(x)[0], sae(x)[0])
    assert loaded.tied == tied


def test_metrics_known_values():
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    assert fvu(x, x) == 0.0 and fvu(x, x.mean(0).expand(2, 2)) == pytest.approx(1.0)
    codes = torch.tensor([[1.0, 0.0, 0.0], [2.0, 3.0, 0.0]])
    assert l0(codes) == 1.5 and dead_latents(codes) == 1
    truth = torch.eye(3)
    assert mmcs(truth, truth) == pytest.approx(1.0)
    # one atom matching two truths: MMCS counts it twice, the one-to-one matching does not
    learned = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, -1.0]])
    assert mmcs(learned, truth) > matched_similarity(learned, truth)


def test_baselines_reconstruct_exactly_and_share_the_interface():
    data, _ = toy_superposition(500, d=8, n_features=16, seed=1)
    for name, dec in baseline_decompositions(data).items():
        recon = dec.decode(dec.encode(data))
        torch.testing.assert_close(recon.float(), data, atol=1e-4, rtol=1e-4, msg=name)
        torch.testing.assert_close(dec.atoms.norm(dim=-1), torch.ones(len(dec.atoms), dtype=dec.atoms.dtype))


def test_sae_beats_pca_on_superposition():
    data, truth = toy_superposition(20000, d=16, n_features=32, active=3, seed=0)
    sae = train_sae(data, SAETrainingConfig(d_sae=64, l1_coefficient=1e-2, tied=False, steps=1000, batch_size=256))
    pca = baseline_decompositions(data[:5000])["PCA"]
    assert mmcs(sae.atoms, truth) > mmcs(pca.atoms, truth) + 0.15


def test_bad_arguments():
    with pytest.raises(ValueError, match="d_sae must be >= 1, got 0"):
        SparseAutoencoder(4, 0)
    with pytest.raises(ValueError, match="centring must have d_in=4 entries, got 3"):
        SparseAutoencoder(4, 8, centring=torch.zeros(3))
    with pytest.raises(ValueError, match="activations must have 2 dimensions"):
        train_sae(torch.zeros(3, 4, 5))
    with pytest.raises(FileNotFoundError, match="no sae_weights.safetensors"):
        SparseAutoencoder.load("/nonexistent")


def test_sweep_reports_every_ratio_and_coefficient():
    from iclr24.sae import sweep_sae

    data, truth = toy_superposition(3000, d=8, n_features=16, seed=0)
    rows = sweep_sae(data, [1e-3, 1e-2], [1, 2], SAETrainingConfig(steps=20, batch_size=128), truth=truth)
    assert [(r["ratio"], r["l1"]) for r in rows] == [(1, 1e-3), (1, 1e-2), (2, 1e-3), (2, 1e-2)]
    assert all({"fvu", "l0", "dead", "mmcs", "matched"} <= set(r) for r in rows)


def test_train_from_an_activation_source():
    calls = []

    def source(size):
        calls.append(size)
        return torch.randn(size, 8)

    sae = train_sae(source, SAETrainingConfig(d_sae=16, steps=3, batch_size=32))
    assert sae.d_in == 8 and calls == [32, 32, 32, 32]  # one batch to size the SAE, then one per step
