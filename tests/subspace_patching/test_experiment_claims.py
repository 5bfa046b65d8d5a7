"""The subspace_patching reproduction's claims, on hand-made per-replicate values (fast)."""
from iclr24.core import get_experiment
from iclr24.subspace_patching.experiment import (
    CLAIM_MLP,
    CLAIM_NAME_MOVERS,
    CLAIM_RESID,
    DORMANT_SD,
    OUTSIDE_SHARE,
    first_mlp_evidence,
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


def test_each_part_of_the_mlp_claim_is_labelled():
    # the report shows every part of an all_of; the two sides of "the full MLP patch does nothing" are told apart
    labels = [p.label for p in mlp_illusion_evidence(DAS, FULL, DORMANT, OUTSIDE).parts]
    assert len(set(labels)) == len(labels) == 5 and all(labels)


def test_patches_along_a_das_direction_are_clustered_by_the_direction_they_were_judged_with():
    # six groups judged with three directions: the parts along a direction count 3 units, the full patch 6 groups
    directions = ["das-seed0", "das-seed1", "das-seed2"] * 2
    das, full = [44.0, 46.0, 41.0, 45.0, 43.0, 47.0], [-1.0, 0.5, -2.0, 1.0, 0.0, -0.5]
    parts = mlp_illusion_evidence(das, full, DORMANT + DORMANT[:2], OUTSIDE + OUTSIDE[:2], directions=directions).parts
    assert [p.n for p in parts] == [3, 6, 6, 3, 3]
    assert parts[0].effect == sum(das) / 6 and parts[0].clusters == tuple(directions)
    assert name_mover_evidence([138.0] * 6, [126.0, 128, 120, 125, 127, 121], [13.0, 15, 10, 14, 12, 11],
                               directions=directions).parts[0].n == 3


def test_the_first_definition_of_the_mlp_claim_is_rowspace_below_half_the_das_effect():
    # the first experiment.py's third part: shown beside the revised claim (Claim.original), never deciding it
    assert first_mlp_evidence(DAS, FULL, [10.0, 12.0, 9.0, 11.0]).verdict == "holds"
    assert first_mlp_evidence(DAS, FULL, [30.0, 31.0, 29.0, 32.0]).verdict == "fails"
    # the review's SmolLM2 case: about half of the effect in the rowspace part decides nothing under it
    assert first_mlp_evidence(DAS, FULL, [22.0, 24.0, 20.0, 23.5]).verdict == "inconclusive"


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
