"""The subspace_patching reproduction's claims, on hand-made per-replicate values (fast)."""
from iclr24.core import get_experiment
from iclr24.subspace_patching.experiment import (
    CLAIM_MLP,
    CLAIM_NAME_MOVERS,
    CLAIM_RESID,
    DORMANT_SD,
    OUTSIDE_SHARE,
    mlp_illusion_evidence,
    name_mover_evidence,
)

DAS, FULL = [44.0, 46.0, 41.0, 45.0], [-1.0, 0.5, -2.0, 1.0]
DORMANT, OUTSIDE = [0.2, 0.4, 0.1, 0.3], [0.9, 0.8, 0.95, 0.85]  # the paper's picture: barely apart, pushed out


def test_identities_are_checks_not_claims():
    # the toy's exact outcomes and the nullspace part's 0% hold by construction: they are Result.checks
    assert list(get_experiment("subspace_patching").claims) == [CLAIM_MLP, CLAIM_RESID, CLAIM_NAME_MOVERS]


def test_mlp_illusion_holds_on_a_clear_case():
    assert mlp_illusion_evidence(DAS, FULL, DORMANT, OUTSIDE).verdict == "holds"


def test_the_margins_are_the_ones_fixed_before_the_run():
    assert (DORMANT_SD, OUTSIDE_SHARE) == (1.0, 0.5)


def test_mlp_illusion_fails_when_base_and_source_separate_along_the_rowspace_part():
    # the review's SmolLM2 numbers: 1.8 sd apart along v_row is real signal, not a dormant direction
    assert mlp_illusion_evidence(DAS, FULL, [1.8, 1.9, 1.7, 1.85], OUTSIDE).verdict == "fails"


def test_mlp_illusion_fails_when_the_patch_stays_inside_the_clean_range():
    assert mlp_illusion_evidence(DAS, FULL, DORMANT, [0.1, 0.05, 0.2, 0.1]).verdict == "fails"


def test_mlp_illusion_fails_when_the_full_mlp_patch_does_something():
    assert mlp_illusion_evidence(DAS, [30.0, 28.0, 33.0, 31.0], DORMANT, OUTSIDE).verdict == "fails"


def test_two_prompt_groups_decide_nothing():
    assert mlp_illusion_evidence(DAS[:2], FULL[:2], DORMANT[:2], OUTSIDE[:2]).verdict == "inconclusive"


def test_name_mover_claim_holds_when_their_part_carries_the_effect_and_fails_otherwise():
    das = [138.0, 140.0, 135.0, 139.0]
    assert name_mover_evidence(das, [126.0, 128.0, 120.0, 125.0], [13.0, 15.0, 10.0, 14.0]).verdict == "holds"
    # the effect in the rest of the direction (the paper's warning sign): fails
    assert name_mover_evidence(das, [13.0, 15.0, 10.0, 14.0], [126.0, 128.0, 120.0, 125.0]).verdict == "fails"


def test_pairs_are_oriented_by_which_name_comes_first():
    # ABB (the IO, 7, named first) -> +1; BAB (S, 8, first) -> -1: without it, half the pairs cancel the others
    import torch

    from iclr24.subspace_patching import PatchingPairs
    from iclr24.subspace_patching.experiment import pattern_sign

    base = torch.tensor([[1, 7, 2, 8, 3, 8, 4], [1, 8, 2, 7, 3, 8, 4]])
    source = torch.tensor([[1, 8, 2, 7, 3, 8, 4], [1, 7, 2, 8, 3, 8, 4]])
    pairs = PatchingPairs(base, source, torch.tensor([7, 7]), torch.tensor([7, 7]), torch.tensor([8, 8]))
    assert pattern_sign(pairs).tolist() == [1.0, -1.0]
