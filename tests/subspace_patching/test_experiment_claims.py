"""The subspace_patching reproduction's claims, on hand-made per-group FLDDs (fast)."""
from iclr24.core import get_experiment
from iclr24.subspace_patching.experiment import CLAIM_MLP, CLAIM_RESID, mlp_illusion_evidence


def test_identities_are_checks_not_claims():
    # the toy's exact outcomes and the nullspace part's 0% hold by construction: they are Result.checks
    assert list(get_experiment("subspace_patching").claims) == [CLAIM_MLP, CLAIM_RESID]


def test_mlp_illusion_holds_on_a_clear_case():
    das, full, row = [44.0, 46.0, 41.0, 45.0], [-1.0, 0.5, -2.0, 1.0], [10.0, 12.0, 9.0, 11.0]
    assert mlp_illusion_evidence(das, full, row).verdict == "holds"


def test_mlp_illusion_fails_when_the_rowspace_part_does_as_much_as_the_direction():
    das, full, row = [44.0, 46.0, 41.0, 45.0], [-1.0, 0.5, -2.0, 1.0], [40.0, 44.0, 39.0, 43.0]
    assert mlp_illusion_evidence(das, full, row).verdict == "fails"


def test_mlp_illusion_fails_when_the_full_mlp_patch_does_something():
    das, full, row = [44.0, 46.0, 41.0, 45.0], [30.0, 28.0, 33.0, 31.0], [10.0, 12.0, 9.0, 11.0]
    assert mlp_illusion_evidence(das, full, row).verdict == "fails"


def test_two_prompt_groups_decide_nothing():
    assert mlp_illusion_evidence([44.0, 46.0], [0.0, 1.0], [10.0, 12.0]).verdict == "inconclusive"
