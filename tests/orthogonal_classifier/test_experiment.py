"""The orthogonal classifier's claims, from hand-made per-seed values."""

from iclr24.orthogonal_classifier.experiment import MAX_RAW_MEAN_COS, _claims


def seeds(v, spread=0.005):
    return [v - spread, v, v + spread]


def claims(raw_cos=(0.06, 0.05), energy=0.95, nc1=(0.2, 0.5), accuracy=(0.98, 0.975), continual=(0.85, 0.80),
           arc=0.9, mixup=0.85, none=0.8):
    head = {"raw_cos_mid": seeds(raw_cos[0]), "raw_cos": seeds(raw_cos[1]), "nc1": seeds(nc1[0]),
            "accuracy": seeds(accuracy[0]), "own_block_energy": seeds(energy)}
    other = {"raw_cos_mid": seeds(0.65), "raw_cos": seeds(0.65), "nc1": seeds(nc1[1]), "accuracy": seeds(accuracy[1])}
    imbalance = {(r, m): seeds(v) for r in (10, 100) for m, v in (("arc_mixup", arc), ("mixup", mixup), ("none", none))}
    return _claims({"fno": head, "learnable": other, "etf": other},
                   {"fno": seeds(continual[0]), "learnable": seeds(continual[1])}, imbalance)


def test_claims_follow_their_margins():
    assert [c.verdict for c in claims()] == ["holds"] * 4
    assert claims(accuracy=(0.96, 0.975))[1].verdict == "fails"  # 1.5 points below: past the 1-point margin
    assert claims(continual=(0.80, 0.80))[2].verdict == "inconclusive"  # a tie
    assert claims(arc=0.85)[3].verdict == "inconclusive"  # arc-mixup ties plain mixup
    assert claims(mixup=0.95)[3].verdict == "fails"  # plain mixup beats arc-mixup


def test_collapse_needs_orthogonal_raw_means_not_merely_a_falling_cosine():
    """Review finding: |cos| 0.351 -> 0.340 (below 0.5 and falling) was called zero-mean collapse; the paper's claim
    is orthogonal raw class means."""
    assert MAX_RAW_MEAN_COS <= 0.1
    assert claims(raw_cos=(0.351, 0.340), energy=0.759)[0].verdict == "fails"
    assert claims(raw_cos=(0.07, 0.05), energy=0.80)[0].verdict == "fails"  # orthogonal but off its blocks
    assert claims(raw_cos=(0.05, 0.06))[0].verdict == "fails"  # no longer converging
    assert claims(nc1=(0.5, 0.5))[0].verdict == "inconclusive"  # NC1 ties the learnable head's
