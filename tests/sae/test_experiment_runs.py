"""The sae reproduction through the runner, smoke preset (~20 s a run): what a run reports and what it keeps."""
import pytest
import torch

from iclr24.core import get_experiment, run
from iclr24.sae import SparseAutoencoder
from iclr24.sae.experiment import (
    CLAIM_INTERP,
    CLAIM_LM_FRONTIER,
    CLAIM_LM_INTERP,
    CLAIM_LM_PATCH,
    CLAIM_PATCH,
    CLAIM_TOY,
)
from tests.progress_probe import bars

LM_CLAIMS = (CLAIM_LM_FRONTIER, CLAIM_LM_INTERP, CLAIM_LM_PATCH)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The smoke run as ``iclr24 run`` makes it on a terminal (quiet off), with the bars it opens recorded."""
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as monkeypatch:
        recorder = bars(monkeypatch)
        record = run("sae", preset="smoke", runs_dir=tmp_path_factory.mktemp("runs"), quiet=False)
    assert record.ok, record.result.get("traceback")
    return record, recorder


@pytest.fixture(scope="module")
def smoke_run(smoke):
    return smoke[0]


def test_the_run_shows_the_library_calls_progress(smoke):
    # issue #61: the experiment passes progress=not ctx.quiet to train_sae, train_saes and the feature patching
    recorder = smoke[1]
    shown = {description.split(" (")[0] for description, _ in recorder.added}
    assert {"training SAE", "feature patching"} <= shown
    assert any(d.startswith("training ") and d.endswith(" SAEs") for d in shown)  # the toy and LM batches
    for description in {d for d, _ in recorder.added}:  # every bar counted to its end
        assert recorder.advanced[description] == sum(t for d, t in recorder.added if d == description)


def test_lm_none_skips_the_real_lm_and_reports_its_claims_as_not_run(tmp_path, monkeypatch):
    # "skip" used to crash after all the work: the run did not report its declared claims
    torch.set_num_threads(1)
    recorder = bars(monkeypatch)
    record = run("sae", preset="smoke", overrides=["lm=none"], runs_dir=tmp_path, quiet=True)
    assert record.ok, record.result.get("traceback")
    assert recorder.added == []  # --quiet: the library calls are told to draw nothing, even on a terminal
    claims = {c["statement"]: c for c in record.result["claims"]}
    assert list(claims) == list(get_experiment("sae").claims)
    for statement in LM_CLAIMS:
        assert claims[statement]["verdict"] == "not run"
        assert claims[statement]["evidence"]["kind"] == "not run"
        assert "lm=none" in claims[statement]["evidence"]["reason"]
        assert claims[statement]["provenance"] == "revised" and claims[statement]["revision"]
    assert all(c["verdict"] != "not run" for s, c in claims.items() if s not in LM_CLAIMS)
    assert not any(k.startswith("lm_") for k in record.result["metrics"])
    assert not (record.run_dir / "artifacts").exists()


def _saved_saes(record):
    folders = sorted((record.run_dir / "artifacts").glob("lm_sae_l1_*"))
    sweep = get_experiment("sae").config("smoke").lm_l1_sweep
    assert [f.name for f in folders] == [f"lm_sae_l1_{l1:g}" for l1 in sweep]
    return folders


def test_the_run_keeps_its_real_lm_saes_naming_their_hook_and_model(smoke_run):
    hook = f"blocks.{int(smoke_run.result['metrics']['lm_layer'])}.hook_resid_pre"
    for folder in _saved_saes(smoke_run):
        sae = SparseAutoencoder.load(folder)
        assert (sae.hook_name, sae.model_name) == (hook, "random-tiny-llama")
        assert sae.d_sae == get_experiment("sae").config("smoke").lm_ratio * sae.d_in


def test_saelens_loads_the_runs_sae(smoke_run):
    pytest.importorskip("sae_lens", reason="sae-lens is not installed (a peer, kept out of the extras: "
                                           "resolved with our pins it pulls a CUDA torch)")
    from sae_lens import SAE

    x = torch.randn(16, SparseAutoencoder.load(_saved_saes(smoke_run)[0]).d_in)
    for folder in _saved_saes(smoke_run):
        ours, theirs = SparseAutoencoder.load(folder), SAE.load_from_disk(str(folder))
        assert theirs.cfg.metadata.hook_name == ours.hook_name and theirs.cfg.metadata.hook_name is not None
        assert theirs.cfg.metadata.model_name == "random-tiny-llama"
        with torch.no_grad():
            torch.testing.assert_close(theirs.encode(x), ours.encode(x), rtol=0, atol=1e-5)


def test_the_interpretability_claims_report_random_directions_beside_every_method(smoke_run):
    claims = {c["statement"]: c for c in smoke_run.result["claims"]}
    metrics = smoke_run.result["metrics"]
    for prefix in ("ioi_interp_", "lm_interp_"):
        assert {k[len(prefix):] for k in metrics if k.startswith(prefix)} == {"SAE", "PCA", "ICA", "neurons", "random"}
    for statement in (CLAIM_INTERP, CLAIM_LM_INTERP):
        assert "random" in claims[statement]["measured"]
        labels = [p["label"] for p in claims[statement]["evidence"]["parts"]]
        assert labels == [f"token-simulation score, SAE - {b}" for b in ("PCA", "ICA", "neurons", "random")]


def test_the_real_lm_patching_claim_is_judged_over_seeds_of_prompts_drawn_over_the_templates(smoke_run):
    cfg = get_experiment("sae").config("smoke")
    claim = {c["statement"]: c for c in smoke_run.result["claims"]}[CLAIM_LM_PATCH]
    evidence = claim["evidence"]
    assert evidence["kind"] == "compare" and evidence["label"] == "features at the KL target, SAE - PCA"
    assert evidence["n"] == cfg.lm_patch_seeds >= 3
    assert evidence["unit"] == f"seeds (each {cfg.lm_patch_prompts} IOI prompt pairs drawn over the templates)"
    assert f"{cfg.lm_patch_seeds} seeds x {cfg.lm_patch_prompts} IOI prompt pairs" in claim["measured"]
    assert "the SAE and PCA are fitted once" in claim["measured"]


def test_every_claim_records_its_provenance_subject_and_first_definition(smoke_run):
    cfg = get_experiment("sae").config("smoke")
    claims = {c["statement"]: c for c in smoke_run.result["claims"]}
    # only the toy claim's thresholds are the spec's; the others were defined or changed with results in view
    assert {s: c["provenance"] for s, c in claims.items()} == {s: "spec" if s == CLAIM_TOY else "revised"
                                                                for s in get_experiment("sae").claims}
    assert all(c["revision"] for s, c in claims.items() if s != CLAIM_TOY)
    assert "f2f1d95" in claims[CLAIM_LM_INTERP]["revision"] and "f4afd30" in claims[CLAIM_LM_PATCH]["revision"]
    # the tiny IOI model stands in for Pythia; in smoke the random Llama stands in for SmolLM2 as well
    assert {s for s, c in claims.items() if c["subject"] == "stand-in"} == set(claims) - {CLAIM_TOY}
    assert "Pythia" in claims[CLAIM_PATCH]["stand_in"] and "random 2-layer Llama" in claims[CLAIM_LM_PATCH]["stand_in"]
    # both interpretability claims show their first definition beside the verdict: best AUROC against PCA, ICA and
    # neurons (not random), any margin, over the same groups as the verdict
    for statement, groups in ((CLAIM_INTERP, cfg.score_groups), (CLAIM_LM_INTERP, cfg.lm_interp_groups)):
        original, evidence = claims[statement]["original"], claims[statement]["evidence"]
        assert [p["label"] for p in original["parts"]] == [f"best-AUROC score, SAE - {b}"
                                                           for b in ("PCA", "ICA", "neurons")]
        assert all(p["threshold"] == 0.0 and p["n"] == groups and p["unit"] == evidence["parts"][0]["unit"]
                   for p in original["parts"])
        assert "first definition, mean best AUROC" in claims[statement]["measured"]
    assert {k for k in smoke_run.result["metrics"] if k.startswith("lm_auroc_")} == {
        f"lm_auroc_{b}" for b in ("SAE", "PCA", "ICA", "neurons")}
    # the patching claims' statistic did not change: no first definition to show
    assert claims[CLAIM_PATCH]["original"] is None and claims[CLAIM_LM_PATCH]["original"] is None
