import pytest
import torch

from iclr24.aid import LinearTransformerLM, SARNetwork
from iclr24.aid.experiment import (
    CLAIM_BOUND,
    CLAIM_FIT,
    CLAIM_UNSEEN,
    LABELS,
    PRESETS,
    VARIANTS,
    Config,
    _claims,
    _lm_claim,
    _paired,
    train_variant,
    train_variants,
)
from iclr24.aid.training import recall_accuracy
from iclr24.core.experiment import get_experiment
from iclr24.core.runner import run


def test_smoke_run_reports_every_claim_figure_and_paired_row(tmp_path):
    record = run("aid", preset="smoke", runs_dir=tmp_path, quiet=True)
    assert record.ok, record.result.get("traceback")
    result = record.result
    assert [c["statement"] for c in result["claims"]] == list(get_experiment("aid").claims)
    assert sorted(result["figures"]) == ["aid_attention.png", "evidence.png", "unseen_accuracy.png"]
    rows = result["tables"]["per_seed"]
    assert len(rows) == 3 * 2 and {r["model"] for r in rows} == set(LABELS.values())
    for key in ("seen", "unseen", "selectivity"):
        for v in ("mlp", "aid"):
            assert 0 <= result["metrics"][f"{v}_{key}_p0.5"] <= 1
    lm = result["tables"]["language_model"]
    assert len(lm) == 3 * 2 and all(r["perplexity (queried values)"] >= 1 for r in lm)
    assert result["metrics"]["aid_lm_recall_perplexity"] >= 1


def _measured(seen=(0.99, 0.995, 0.99), unseen_aid=(0.9, 0.9, 0.92), unseen_mlp=(0.5, 0.52, 0.51),
              sel_aid=(0.5, 0.6, 0.55), sel_mlp=(0.4, 0.5, 0.44)):
    return {("aid", 0.5): {"seen": list(seen), "unseen": list(unseen_aid), "selectivity": list(sel_aid)},
            ("mlp", 0.5): {"seen": list(seen), "unseen": list(unseen_mlp), "selectivity": list(sel_mlp)}}


def test_claims_hold_on_clear_measurements_and_can_fail():
    cfg = Config()
    claims = {c.statement: c.verdict for c in _claims(_measured(), cfg)}
    # unseen gap about 0.4; selectivity about +0.1
    assert claims == {CLAIM_FIT: "holds", CLAIM_UNSEEN: "holds", CLAIM_BOUND: "holds"}
    failed = {c.statement: c.verdict for c in _claims(_measured(seen=(0.9, 0.91, 0.89), unseen_mlp=(0.85, 0.88, 0.9),
                                                                 sel_aid=(0.35, 0.45, 0.39)), cfg)}
    # seen 0.90 < 0.95; gap about +0.03 < 0.15; selectivity -0.05
    assert failed == {CLAIM_FIT: "fails", CLAIM_UNSEEN: "fails", CLAIM_BOUND: "fails"}


def test_claims_are_paired_over_seeds_and_a_tie_or_a_split_is_inconclusive():
    cfg = Config()
    tie = {c.statement: c for c in _claims(_measured(sel_aid=(0.4, 0.5, 0.44)), cfg)}
    assert tie[CLAIM_BOUND].verdict == "inconclusive" and tie[CLAIM_BOUND].evidence.effect == 0
    # the old sign test held on "higher in 2 of 3" (+0.006, +0.018, -0.007): no longer enough
    split = {c.statement: c for c in _claims(_measured(sel_aid=(0.406, 0.518, 0.433)), cfg)}
    assert split[CLAIM_BOUND].verdict == "inconclusive"
    assert split[CLAIM_BOUND].evidence.n == 3 and split[CLAIM_BOUND].evidence.unit == "seeds"


def test_lm_claim_is_a_paired_comparison_over_seeds():
    cfg = Config()
    assert _lm_claim({"aid": [3.0, 4.0, 2.0], "mlp": [3.5, 4.4, 2.6]}, cfg).verdict == "holds"  # -0.5, -0.4, -0.6
    assert _lm_claim({"aid": [3.0, 4.0, 2.0], "mlp": [2.5, 3.5, 1.4]}, cfg).verdict == "fails"
    # the old median held on -0.5, +0.1, -0.5; a paired interval over 3 seeds does not
    assert _lm_claim({"aid": [3.0, 4.0, 2.0], "mlp": [3.5, 3.9, 2.5]}, cfg).verdict == "inconclusive"
    assert _lm_claim({"aid": [3.0, 4.0], "mlp": [3.5, 4.5]}, cfg).verdict == "inconclusive"  # two seeds


def test_the_variants_start_from_the_same_shared_weights():
    for build in (lambda d: SARNetwork(13, 5, decomposition=d, hidden=8, component_dim=4),
                  lambda d: LinearTransformerLM(8, 8, d_model=8, n_heads=2, d_head=4, decomposition=d)):
        plain, aid = _paired(3, "mlp", build).state_dict(), _paired(3, "aid", build).state_dict()
        assert set(plain) < set(aid)
        assert all(torch.equal(plain[k], aid[k]) for k in plain)


def test_the_variants_trained_together_equal_the_variants_one_by_one():
    cfg = PRESETS["smoke"]
    together = train_variants(0.5, cfg, [0, 1, 2])
    alone = [train_variant(v, 0.5, cfg, seed) for seed in (0, 1, 2) for v in VARIANTS]
    for (model, history, held), (twin, history_twin, held_twin) in zip(alone, together):
        assert model.fwm.decomposition == twin.fwm.decomposition
        assert torch.equal(held["unseen"].roles, held_twin["unseen"].roles)
        assert history_twin.accuracy == history.accuracy
        assert history_twin.train_loss == pytest.approx(history.train_loss, rel=1e-6, abs=0)
        for p, q in zip(model.parameters(), twin.parameters()):
            torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)
        # the claims read the trained model's accuracies from the history's last evaluation (at the last step)
        assert history_twin.steps[-1] == cfg.steps
        for split in ("seen", "unseen"):
            assert history_twin.accuracy[split][-1] == recall_accuracy(twin, held_twin[split])


def test_config_errors():
    with pytest.raises(ValueError, match="ratios must be"):
        Config(ratios=(1.5,))
    with pytest.raises(ValueError, match="n_pairs must be <= n_words"):
        Config(n_words=5, n_pairs=6)
