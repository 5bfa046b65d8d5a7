"""The sae reproduction's claim-building helpers, on hand-made curves and values (fast)."""
import math

import pytest

from iclr24.sae.experiment import (
    FIRST_INTERP_MARGIN,
    KL_TARGET,
    _features_needed,
    _groups,
    _patching_group,
    auroc_evidence,
    patching_evidence,
    toy_evidence,
)


def curve(n_features, kl, kl_clean=4.0):
    return {"n_features": n_features, "kl": kl, "edit": [0.1 * n for n in n_features], "kl_clean": kl_clean}


def test_features_needed_is_infinite_when_the_curve_never_reaches_the_target():
    # the curve starts with 11 features patched (all that differ) but never gets below the target of 1.0:
    # the old helper returned 11, the curve's first count, and the patching claim "held" on it
    never = curve([11, 6, 2, 0], [2.0, 2.5, 3.0, 4.0])
    n, edit = _features_needed(never, KL_TARGET * 4.0)
    assert n == math.inf and math.isnan(edit)
    assert _features_needed(curve([40, 20, 5, 0], [0.1, 0.8, 2.0, 4.0]), 1.0) == (20, 2.0)


def test_a_curve_that_never_reaches_the_target_cannot_win_the_comparison():
    group = _patching_group({"SAE": curve([11, 6, 0], [2.0, 3.0, 4.0]), "PCA": curve([64, 40, 0], [0.0, 0.9, 4.0])})
    assert group["reached"] == {"SAE": False, "PCA": True}
    assert group["needed"]["SAE"] == 65 > group["needed"]["PCA"] == 40  # one more than any curve tried
    # over groups whose PCA curves differ (identical groups have no spread and decide nothing)
    groups = [_patching_group({"SAE": curve([11, 6, 0], [2.0, 3.0, 4.0]), "PCA": curve([64, m, 0], [0.0, 0.9, 4.0])})
              for m in (40, 37, 43, 41)]
    assert [g["needed"]["SAE"] for g in groups] == [65] * 4
    evidence = patching_evidence(groups, "prompt groups")
    assert evidence.verdict == "fails" and evidence.n == 4


def test_two_curves_that_never_reach_the_target_tie_and_decide_nothing():
    group = _patching_group({"SAE": curve([11, 0], [2.0, 4.0]), "PCA": curve([64, 0], [3.0, 4.0])})
    assert group["needed"]["SAE"] == group["needed"]["PCA"]
    assert patching_evidence([group] * 5, "prompt groups").verdict == "inconclusive"


def test_patching_holds_only_when_the_sae_reaches_the_target_with_fewer_features():
    groups = [_patching_group({"SAE": curve([30, n, 0], [0.0, 0.5, 4.0]), "PCA": curve([64, m, 0], [0.0, 0.5, 4.0])})
              for n, m in ((10, 40), (12, 38), (9, 41), (11, 44))]
    evidence = patching_evidence(groups, "prompt groups")
    assert evidence.verdict == "holds" and evidence.n == 4 and evidence.unit == "prompt groups"


def test_toy_evidence_needs_both_the_bar_and_the_margin_over_seeds():
    assert toy_evidence([0.95, 0.96, 0.94], [0.40, 0.45, 0.42]).verdict == "holds"
    assert toy_evidence([0.95, 0.96, 0.94], [0.80, 0.85, 0.82]).verdict == "fails"  # not 0.3 above the baselines
    assert toy_evidence([0.95, 0.96], [0.40, 0.45]).verdict == "inconclusive"  # two seeds decide nothing


@pytest.mark.parametrize("n, k", [(50, 5), (6, 3), (7, 3)])
def test_groups_are_disjoint_and_cover_every_row(n, k):
    groups = _groups(n, k)
    rows = sorted(int(r) for g in groups for r in g)
    assert len(groups) == k and rows == list(range(n))


def test_the_first_interpretability_definition_compares_with_pca_ica_and_neurons_by_any_margin():
    # the score shown beside the interpretability verdicts: best AUROC, SAE above each baseline, margin 0, no random
    groups = {"SAE": [0.81, 0.80, 0.82], "PCA": [0.79, 0.77, 0.80], "ICA": [0.70, 0.71, 0.69],
              "neurons": [0.60, 0.62, 0.61], "random": [0.99, 0.99, 0.98]}
    evidence = auroc_evidence(groups, "held-out text groups")
    assert evidence.verdict == "holds"
    assert [p.label for p in evidence.parts] == [f"best-AUROC score, SAE - {b}" for b in ("PCA", "ICA", "neurons")]
    assert {p.threshold for p in evidence.parts} == {FIRST_INTERP_MARGIN} == {0.0}
    worse = auroc_evidence({**groups, "PCA": [0.90, 0.91, 0.92]}, "held-out text groups")
    assert worse.verdict == "fails" and worse.parts[0].verdict == "fails"


def test_the_real_lm_auroc_score_reads_token_identity_of_the_frequent_tokens_and_position(monkeypatch):
    import torch

    from iclr24.sae import experiment
    from iclr24.sae.training import Decomposition

    monkeypatch.setattr(experiment, "AUROC_TOKENS", 2)
    g = torch.Generator().manual_seed(0)
    # 40 texts of 10 positions; tokens 1 and 2 frequent, token 9 rare (one position of each odd-numbered text)
    tokens = torch.randint(1, 3, (40, 10), generator=g)
    tokens[1::2, 5] = 9
    position = torch.arange(10).repeat(40)
    context = torch.arange(40).repeat_interleave(10)
    tokens = tokens.flatten()
    # feature 0 fires on token 1, feature 1 on the rare token 9, feature 2 at position 3
    acts = torch.stack([(tokens == 1).double(), (tokens == 9).double(), (position == 3).double()], 1)
    identity = Decomposition("id", torch.eye(3), lambda x: x, lambda c: c)
    groups = [torch.arange(0, 40, 4), torch.arange(1, 40, 4), torch.arange(2, 40, 4)]
    scores = experiment._auroc_scores({"SAE": identity}, acts, tokens, position, context, groups)["SAE"]
    # features 0 and 2 are perfectly explained (AUROC 1); the rare token is no variable, so feature 1 is explained
    # only as far as position 5 covers it: in the odd texts' groups it fires at every position 5 (AUROC 1 again)
    assert scores[0] == pytest.approx(1.0)  # group 0 (even texts): feature 1 never varies and is left out
    assert scores[1] == pytest.approx(1.0)
    single = experiment._auroc_scores({"SAE": Decomposition("f1", torch.eye(1), lambda x: x[:, 1:2], lambda c: c)},
                                      acts, tokens, torch.zeros_like(position), context, groups[1:2])["SAE"]
    assert single[0] < 1.0  # without position, the rare token's feature has no variable of its own
