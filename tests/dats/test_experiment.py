import pytest

from iclr24.core.experiment import get_experiment
from iclr24.core.runner import run
from iclr24.dats.experiment import LABELS, PRESETS, QUICK_STEPS_REVISION, TRAIN_BETAS, Config, _claims, _provenance

SPEC = {"provenance": "spec"}


def test_smoke_run_reports_every_claim_and_the_paired_table(tmp_path):
    record = run("dats", preset="smoke", runs_dir=tmp_path, quiet=True)
    assert record.ok, record.result.get("traceback")
    result = record.result
    assert [c["statement"] for c in result["claims"]] == list(get_experiment("dats").claims)
    assert {c["provenance"] for c in result["claims"]} == {"spec"}   # smoke's budget was never revised
    assert sorted(result["figures"]) == ["error_per_configuration.png", "evidence.png", "task_probabilities.png"]
    assert len(result["tables"]["per_seed"]) == 3 * 6 and len(result["tables"]["per_configuration"]) == 9
    dats_rp_points = [r["final residual points"] for r in result["tables"]["per_seed"]
                      if r["sampler"].startswith("DATS-rp")]
    assert all(sum(p) == 5 * 10 for p in dats_rp_points)  # half of 20 per configuration, moved around
    metrics = result["metrics"]
    for name in ("uniform", "uniform_half", "uniform_rad_half", "self_paced", "dats_w", "dats_rp"):
        assert 0 < metrics[f"{name}_worst_l2"] < 10 and metrics[f"{name}_mean_l2"] <= metrics[f"{name}_worst_l2"]
    assert -1 <= metrics["dats_tilt_spearman"] <= 1
    sweep = result["tables"]["step_size_sweep"]
    assert len(sweep) == 3 * 2  # three adaptive samplers, two step sizes, on the first seed
    for name in ("self_paced", "dats_w", "dats_rp"):
        rows = [r for r in sweep if r["sampler"] == LABELS[name]]
        best = min(rows, key=lambda r: r["summed validation loss"])
        assert metrics[f"{name}_eta"] == best["eta"]


def _per_seed(dats_worst, uniform_worst, dats_std=(0.1, 0.1, 0.1), rp_mean=(0.1, 0.1, 0.1)):
    base = {"worst": list(uniform_worst), "mean": [0.1] * 3, "std": [0.1] * 3}
    return {"uniform": base, "uniform_half": base, "uniform_rad_half": base, "self_paced": base,
            "dats_w": {"worst": list(dats_worst), "mean": [0.1] * 3, "std": list(dats_std)},
            "dats_rp": {"worst": [0.2] * 3, "mean": list(rp_mean), "std": [0.1] * 3}}


def test_claims_hold_on_clear_paired_gains_and_fail_on_clear_losses():
    verdicts = [c.verdict for c in _claims(_per_seed((0.20, 0.31, 0.29), (0.30, 0.40, 0.40), (0.05, 0.06, 0.04),
                                                     (0.05, 0.06, 0.07)), [0.9, 0.8, 0.85], SPEC)]
    assert verdicts == ["holds"] * 4
    verdicts = [c.verdict for c in _claims(_per_seed((0.40, 0.52, 0.49), (0.30, 0.40, 0.40), (0.20, 0.21, 0.19),
                                                     (0.20, 0.21, 0.22)), [0.1, 0.0, 0.05], SPEC)]
    assert verdicts == ["fails"] * 4


def test_a_tie_or_a_split_decides_nothing():
    # the review's case: claim 1 "held" on a median paired difference of -0.0000 (0.203 vs 0.203), lower in 2 of 3
    tie = _claims(_per_seed((0.203, 0.2, 0.3), (0.203, 0.2, 0.3)), [0.5, 0.5, 0.5], SPEC)
    assert tie[0].verdict == "inconclusive" and tie[0].evidence.effect == 0
    split = _claims(_per_seed((0.20299, 0.15, 0.35), (0.203, 0.2, 0.3)), [0.9, -0.6, 0.1], SPEC)  # lower in 2 of 3
    assert split[0].verdict == "inconclusive"
    assert split[3].verdict == "inconclusive"  # tilt mean 0.13, but the seeds disagree
    assert all(c.evidence.n == 3 and c.evidence.unit == "seeds" for c in split)


def test_presets_and_config_checks():
    assert PRESETS["paper"].seeds >= 8 and PRESETS["quick"].residual_points == 100 and len(TRAIN_BETAS) == 5
    with pytest.raises(ValueError, match="residual_points must be >= 20"):
        Config(residual_points=10)
    with pytest.raises(ValueError, match="model must be 'parametric' or 'hyper'"):
        Config(model="mad")
    with pytest.raises(ValueError, match="etas must be a non-empty grid"):
        Config(etas=())


def test_normalize_scores_reaches_both_dats_samplers_and_is_off_by_default():
    from iclr24.dats.experiment import _sampler

    for name in ("dats_w", "dats_rp"):
        assert _sampler(name, Config(normalize_scores=True), 5, 0.5).normalize_scores
        assert not _sampler(name, Config(), 5, 0.5).normalize_scores  # the paper's raw scores


def test_quick_judges_its_claims_on_a_budget_revised_with_the_verdicts_in_view():
    """The margins are the spec's in every preset; quick's 1200 steps (1500 at first) were chosen with the
    verdicts in view, so a run at that budget says so on every claim."""
    quick = _provenance(PRESETS["quick"])
    assert quick == {"provenance": "revised", "revision": QUICK_STEPS_REVISION} and "1500 -> 1200" in quick["revision"]
    assert _provenance(PRESETS["smoke"]) == _provenance(PRESETS["paper"]) == _provenance(Config(steps=1500)) == SPEC
    per_seed = {n: {"worst": [0.3, 0.2, 0.25], "mean": [0.1, 0.12, 0.11], "std": [0.05, 0.04, 0.06]} for n in LABELS}
    claims = _claims(per_seed, [0.1, 0.2, 0.3], quick)
    assert {(c.provenance, c.revision, c.subject) for c in claims} == {("revised", QUICK_STEPS_REVISION, "paper")}
    assert [c.verdict for c in claims] == ["inconclusive"] * 3 + ["fails"]   # identical samplers: no spread
