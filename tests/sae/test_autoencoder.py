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


def test_untied_training_keeps_decoder_rows_unit_and_leaves_the_encoder_free():
    data, _ = toy_superposition(2000, d=8, n_features=16, seed=0)
    sae = train_sae(data, SAETrainingConfig(d_sae=16, steps=20, batch_size=64, tied=False))
    torch.testing.assert_close(sae.dictionary.norm(dim=-1), torch.ones(16))
    assert (sae.W_enc.norm(dim=0) - 1).abs().max() > 1e-2  # the paper's untied encoder is not normalised
    legacy = train_sae(data, SAETrainingConfig(d_sae=16, steps=20, batch_size=64, tied=False, normalize_encoder=True))
    torch.testing.assert_close(legacy.W_enc.norm(dim=0), torch.ones(16))
    with pytest.raises(ValueError, match="normalize_encoder applies to untied SAEs only"):
        SparseAutoencoder(4, 8, tied=True, normalize_encoder=True)


def _saelens_codes(folder, x):
    """SAELens's standard SAE, written out: codes = ReLU((x - b_dec) W_enc + b_enc), x^ = codes W_dec + b_dec."""
    from safetensors.torch import load_file

    w = load_file(str(folder / "sae_weights.safetensors"))
    codes = torch.relu((x - w["b_dec"]) @ w["W_enc"] + w["b_enc"])
    return codes, codes @ w["W_dec"] + w["b_dec"]


@pytest.mark.parametrize("tied", [True, False])
def test_saved_weights_give_our_codes_by_saelens_formula(tmp_path, tied):
    pytest.importorskip("safetensors")
    torch.manual_seed(0)
    sae = SparseAutoencoder(6, 12, tied=tied, centring=torch.randn(6))
    with torch.no_grad():
        sae.dictionary.mul_(3.0)  # raw rows of norm != 1: the saved W_dec must be the normalised one used
        sae.b_enc.uniform_(-0.5, 0.5)
    x = torch.randn(20, 6)
    codes, reconstruction = _saelens_codes(sae.save(tmp_path / "sae"), x)
    torch.testing.assert_close(codes, sae.encode(x), rtol=0, atol=1e-6)
    torch.testing.assert_close(reconstruction, sae(x)[0], rtol=0, atol=1e-6)
    assert (codes > 0).any()


def test_cfg_has_every_field_saelens_6_reads(tmp_path):
    pytest.importorskip("safetensors")
    sae = SparseAutoencoder(6, 12, hook_name="blocks.3.hook_resid_pre", model_name="SmolLM2-135M-Instruct")
    cfg = json.loads((sae.save(tmp_path / "sae") / "cfg.json").read_text())
    assert {k: cfg[k] for k in ("architecture", "d_in", "d_sae", "dtype", "device", "apply_b_dec_to_input",
                                "normalize_activations", "reshape_activations")} == {
        "architecture": "standard", "d_in": 6, "d_sae": 12, "dtype": "float32", "device": "cpu",
        "apply_b_dec_to_input": True, "normalize_activations": "none", "reshape_activations": "none"}
    meta = cfg["metadata"]
    assert int(meta["sae_lens_version"].split(".")[0]) >= 6  # else SAELens runs its pre-6.0 conversion
    assert (meta["hook_name"], meta["model_name"]) == ("blocks.3.hook_resid_pre", "SmolLM2-135M-Instruct")
    assert SparseAutoencoder.load(tmp_path / "sae").hook_name == "blocks.3.hook_resid_pre"


def test_a_foreign_sae_loads_with_its_raw_weights(tmp_path):
    """A SAELens SAE with a free encoder and decoder rows of norm 2 must not be re-normalised."""
    safetensors = pytest.importorskip("safetensors.torch")
    g = torch.Generator().manual_seed(0)
    weights = {"W_enc": torch.randn(6, 12, generator=g), "W_dec": 2 * torch.nn.functional.normalize(
        torch.randn(12, 6, generator=g), dim=-1), "b_enc": torch.randn(12, generator=g) * 0.1,
        "b_dec": torch.randn(6, generator=g)}
    folder = tmp_path / "foreign"
    folder.mkdir()
    safetensors.save_file(weights, str(folder / "sae_weights.safetensors"))
    (folder / "cfg.json").write_text(json.dumps({"architecture": "standard", "d_in": 6, "d_sae": 12,
                                                 "dtype": "float32", "metadata": {"sae_lens_version": "6.5.0"}}))
    sae = SparseAutoencoder.load(folder)
    x = torch.randn(30, 6, generator=g)
    codes, reconstruction = _saelens_codes(folder, x)
    torch.testing.assert_close(sae.encode(x), codes, rtol=0, atol=1e-6)
    torch.testing.assert_close(sae(x)[0], reconstruction, rtol=0, atol=1e-6)
    (folder / "cfg.json").write_text(json.dumps({"architecture": "jumprelu", "d_in": 6, "d_sae": 12}))
    with pytest.raises(ValueError, match="cannot load a 'jumprelu' SAE"):
        SparseAutoencoder.load(folder)


def test_resampling_revives_dead_latents():
    # inputs along one direction u: latents whose row points away from u never fire, and get no gradient
    u = torch.nn.functional.normalize(torch.randn(8, generator=torch.Generator().manual_seed(1)), dim=0)
    data = torch.rand(512, 1, generator=torch.Generator().manual_seed(2)) * u
    cfg = SAETrainingConfig(d_sae=16, steps=10, batch_size=64, l1_coefficient=1e-3)
    dead_without = dead_latents(train_sae(data, cfg).encode(data))
    resampled = train_sae(data, SAETrainingConfig(**{**cfg.__dict__, "resample_dead_every": 5}))
    assert dead_without >= 4 and dead_latents(resampled.encode(data)) < dead_without // 2


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
    torch.testing.assert_close(loaded.encode(x), sae.encode(x))
    assert (loaded.tied, loaded.l1_coefficient) == (tied, 0.01)


def test_metrics_known_values():
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    assert fvu(x, x) == 0.0 and fvu(x, x.mean(0).expand(2, 2)) == pytest.approx(1.0)
    # FVU of a constant target is undefined (0 / 0 or r / 0): a clear error, not inf or NaN (issue #59).
    # 0.1 x 7 rows: the mean rounds, sum((x - mean)^2) is 1e-15 rather than 0, so a check of the denominator alone
    # would miss it (the ratio would be 0 or 1e16)
    constant = torch.full((7, 3), 0.1)
    for rec in (constant, constant + 1.0):
        with pytest.raises(ValueError, match=r"fvu is undefined for a constant x \(all 7 rows equal"):
            fvu(constant, rec)
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


@pytest.mark.parametrize("tied", [True, False])
def test_round_trip_through_saelens(tmp_path, tied):
    """Ours -> SAELens's SAE.load_from_disk -> its save_model -> ours, with equal codes at each step."""
    pytest.importorskip("sae_lens", reason="sae-lens is not installed (a peer, kept out of the extras: "
                                           "resolved with our pins it pulls a CUDA torch)")
    from sae_lens import SAE

    torch.manual_seed(0)
    ours = SparseAutoencoder(6, 12, tied=tied, centring=torch.randn(6), hook_name="blocks.1.hook_resid_pre")
    with torch.no_grad():
        ours.b_enc.uniform_(-0.5, 0.5)
    x = torch.randn(20, 6)
    theirs = SAE.load_from_disk(str(ours.save(tmp_path / "ours")))
    with torch.no_grad():
        torch.testing.assert_close(theirs.encode(x), ours.encode(x), rtol=0, atol=1e-6)
        torch.testing.assert_close(theirs.decode(theirs.encode(x)), ours(x)[0], rtol=0, atol=1e-6)
    assert theirs.cfg.metadata.hook_name == "blocks.1.hook_resid_pre"
    theirs.save_model(tmp_path / "theirs")
    back = SparseAutoencoder.load(tmp_path / "theirs")
    with torch.no_grad():
        torch.testing.assert_close(back.encode(x), ours.encode(x), rtol=0, atol=1e-6)
        torch.testing.assert_close(back(x)[0], ours(x)[0], rtol=0, atol=1e-6)


def test_load_refuses_mismatched_shapes_and_bad_cfg(tmp_path):
    safetensors = pytest.importorskip("safetensors.torch")
    folder = SparseAutoencoder(4, 8, tied=False).save(tmp_path / "sae")
    weights = safetensors.load_file(str(folder / "sae_weights.safetensors"))
    safetensors.save_file({**weights, "b_enc": torch.zeros(1)}, str(folder / "sae_weights.safetensors"))
    with pytest.raises(ValueError, match=r"b_enc must have shape \[8\]"):
        SparseAutoencoder.load(folder)
    safetensors.save_file(weights, str(folder / "sae_weights.safetensors"))
    (folder / "cfg.json").write_text("{not json")
    with pytest.raises(ValueError, match="cfg.json' is not valid JSON"):
        SparseAutoencoder.load(folder)
    (folder / "cfg.json").write_text(json.dumps({"iclr24": {"tied": True}, "metadata": None}))
    assert SparseAutoencoder.load(folder).tied is False  # stored weights are untied: used as stored


def test_training_config_and_activations_are_checked():
    from iclr24.sae import SAETrainingConfig, train_sae

    for kwargs, message in (({"steps": 0}, "steps must be >= 1"), ({"batch_size": 0}, "batch_size must be >= 1"),
                            ({"resample_dead_every": -1}, "resample_dead_every must be >= 0"),
                            ({"lr": float("nan")}, "lr must be finite")):
        with pytest.raises(ValueError, match=message):
            SAETrainingConfig(**kwargs)
    with pytest.raises(ValueError, match="at least one row"):
        train_sae(torch.zeros(0, 4), SAETrainingConfig(steps=1))


@pytest.mark.parametrize("tied", [True, False])
def test_batched_training_gives_the_saes_trained_one_at_a_time(tied):
    """train_saes stacks SAEs (shared or separate data, several seeds, centred or not): same SAEs as train_sae."""
    from iclr24.sae import train_saes

    d0, _ = toy_superposition(2000, d=8, n_features=16, seed=0)
    d1, _ = toy_superposition(2000, d=8, n_features=16, seed=1)
    cfgs = [SAETrainingConfig(d_sae=16, l1_coefficient=l1, tied=tied, steps=30, batch_size=64, seed=seed, centre=c)
            for seed in (0, 1) for l1 in (1e-3, 1e-2) for c in (False, True)]
    data = [d0 if c.seed == 0 else d1 for c in cfgs]
    for cfg, x, batched in zip(cfgs, data, train_saes(data, cfgs)):
        alone = train_sae(x, cfg)
        torch.testing.assert_close(batched.dictionary, alone.dictionary, rtol=0, atol=1e-6)
        torch.testing.assert_close(batched.b_enc, alone.b_enc, rtol=0, atol=1e-6)
        torch.testing.assert_close(batched.b_dec, alone.b_dec)
        if not tied:
            torch.testing.assert_close(batched.encoder, alone.encoder, rtol=0, atol=1e-6)
    shared = train_saes(d0, cfgs[:2])  # one tensor for all
    torch.testing.assert_close(shared[1].dictionary, train_sae(d0, cfgs[1]).dictionary, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="one tensor or one per config"):
        train_saes([d0], cfgs[:2])


def test_training_config_names_the_hook_and_model_in_every_trained_sae(tmp_path):
    """SAELens reads where an SAE belongs from its metadata: train_sae and train_saes both carry it over."""
    from iclr24.sae import train_saes

    pytest.importorskip("safetensors")
    data, _ = toy_superposition(500, d=8, n_features=16, seed=0)
    where = {"hook_name": "blocks.15.hook_resid_pre", "model_name": "SmolLM2-135M-Instruct"}
    alone = train_sae(data, SAETrainingConfig(d_sae=16, steps=2, batch_size=32, **where))
    batched = train_saes(data, [SAETrainingConfig(d_sae=16, steps=2, batch_size=32, seed=s, **where) for s in (0, 1)])
    for sae in (alone, *batched):
        assert (sae.hook_name, sae.model_name) == (where["hook_name"], where["model_name"])
        meta = json.loads((sae.save(tmp_path / "sae") / "cfg.json").read_text())["metadata"]
        assert (meta["hook_name"], meta["model_name"]) == (where["hook_name"], where["model_name"])
    with pytest.raises(ValueError, match="hook_name must be None or a non-empty string"):
        SAETrainingConfig(hook_name="")


@pytest.mark.parametrize("tied", [True, False])
def test_an_sae_on_scaled_activations_folds_the_scale_into_its_weights(tied):
    """Trained on x / s, saved for x: the codes of s x are the codes of x, the reconstruction s times."""
    torch.manual_seed(0)
    sae = SparseAutoencoder(6, 12, tied=tied, centring=torch.randn(6), hook_name="blocks.2.hook_resid_pre")
    with torch.no_grad():
        sae.b_enc.uniform_(-0.5, 0.5)
    x, scale = torch.randn(20, 6), 7.5
    state = torch.get_rng_state()
    raw = sae.for_inputs_scaled_by(scale)
    assert torch.equal(torch.get_rng_state(), state)  # saving an SAE inside a run must not move the run's draws
    with torch.no_grad():
        reconstruction, codes = sae(x)
        torch.testing.assert_close(raw.encode(scale * x), codes, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(raw(scale * x)[0], scale * reconstruction, rtol=1e-5, atol=1e-5)
    assert codes.gt(0).any() and raw.hook_name == "blocks.2.hook_resid_pre" and not raw.tied
    for bad in (0, -1.0, float("inf"), float("nan"), True):
        with pytest.raises(ValueError, match="scale must be a positive finite number"):
            sae.for_inputs_scaled_by(bad)
