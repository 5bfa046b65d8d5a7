"""The sae reproduction's claim-building helpers, on hand-made curves and values (fast)."""
import math

import pytest

from iclr24.sae.experiment import KL_TARGET, _features_needed, _groups, _patching_group, patching_evidence, toy_evidence


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
    evidence = patching_evidence([group] * 4, "prompt groups")
    assert evidence.verdict == "fails"


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
