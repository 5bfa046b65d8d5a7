"""Issue #61: the long sae calls draw a bar only when asked (``progress=True``, what the experiment passes under
``iclr24 run``), none by default even on a terminal, and the bar changes nothing they compute."""
import numpy as np
import torch

from iclr24.interp import HookedTinyTransformer, ioi_dataset
from iclr24.sae import (
    SAETrainingConfig,
    baseline_decompositions,
    feature_patching_curve,
    feature_patching_curve_sets,
    feature_patching_curves,
    sweep_sae,
    toy_superposition,
    train_sae,
    train_saes,
)
from tests.progress_probe import bars


def _same_sae(a, b) -> None:
    for name in ("dictionary", "b_enc", "b_dec"):
        torch.testing.assert_close(getattr(a, name), getattr(b, name), rtol=0, atol=0)


def test_train_sae_and_the_sweep_report_each_step_when_asked(monkeypatch):
    recorder = bars(monkeypatch)
    data, _ = toy_superposition(500, d=8, n_features=16, seed=0)
    cfg = SAETrainingConfig(d_sae=16, steps=5, batch_size=32)
    quiet = train_sae(data, cfg)
    sweep_sae(data, [1e-3], [1, 2], cfg, n_eval=100)
    assert recorder.added == []  # the default: no bar, even on a terminal
    loud = train_sae(data, cfg, progress=True)
    assert recorder.added == [("training SAE", 5)] and recorder.advanced == {"training SAE": 5}
    _same_sae(quiet, loud)
    sweep_sae(data, [1e-3], [1, 2], cfg, n_eval=100, progress=True)  # one bar per SAE of the sweep
    assert recorder.added == [("training SAE", 5)] * 3 and recorder.advanced == {"training SAE": 15}


def test_train_saes_reports_each_batched_group_and_each_sae_trained_alone_when_asked(monkeypatch):
    recorder = bars(monkeypatch)
    data, _ = toy_superposition(500, d=8, n_features=16, seed=0)
    cfgs = [SAETrainingConfig(d_sae=16, steps=4, batch_size=32, seed=s) for s in (0, 1)]
    cfgs.append(SAETrainingConfig(d_sae=16, steps=3, batch_size=32, resample_dead_every=2))  # trained alone
    quiet = train_saes(data, cfgs)
    assert recorder.added == []
    loud = train_saes(data, cfgs, progress=True)
    assert recorder.added == [("training SAE", 3), ("training 2 SAEs", 4)]
    assert recorder.advanced == {"training SAE": 3, "training 2 SAEs": 4}
    for a, b in zip(quiet, loud):
        _same_sae(a, b)


def test_feature_patching_reports_each_pass_when_asked(monkeypatch):
    recorder = bars(monkeypatch)
    torch.manual_seed(0)
    data = ioi_dataset(templates=[0])
    model = HookedTinyTransformer(len(data.vocab), data.clean.shape[1], d_model=16, n_layers=2, n_heads=2, d_mlp=32)
    hook = "blocks.1.hook_resid_pre"
    with torch.no_grad():
        acts = model.run_with_cache(data.clean[:40], [hook])[1][hook].flatten(0, 1)
    bases = baseline_decompositions(acts)
    decompositions = {"PCA": bases["PCA"], "neurons": bases["neurons"]}
    thresholds = np.array([1e-4, 1e-2, 1e9])
    sets = [(data.clean[i:i + 4], data.counterfactual[i:i + 4], None, i) for i in (0, 8)]

    quiet = feature_patching_curve_sets(model, hook, decompositions, sets, thresholds)
    feature_patching_curve(model, hook, bases["PCA"], *sets[0][:2], thresholds)
    feature_patching_curves(model, hook, decompositions, *sets[0][:2], thresholds)
    assert recorder.added == []
    loud = feature_patching_curve_sets(model, hook, decompositions, sets, thresholds, progress=True)
    assert loud == quiet  # the bars change nothing else
    # one bar per (prompt set, decomposition) pass, each counting every threshold
    assert len(recorder.added) == 4 and all(d.startswith("feature patching (") for d, _ in recorder.added)
    assert [total for _, total in recorder.added] == [3] * 4 and sum(recorder.advanced.values()) == 4 * 3
    feature_patching_curve(model, hook, bases["PCA"], *sets[0][:2], thresholds, progress=True)
    feature_patching_curves(model, hook, decompositions, *sets[0][:2], thresholds, progress=True)
    assert len(recorder.added) == 4 + 1 + 2  # the one-set and one-decomposition forms pass the setting on
