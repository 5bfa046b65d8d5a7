"""The claims' evidence on hand-made per-seed regrets (no BO runs)."""

from iclr24.core import get_experiment
from iclr24.meta_vbo.experiment import (
    CLAIM_HELPFUL,
    CLAIM_NO_REGRET,
    CLAIM_REAL,
    CLAIM_ROBUST,
    FIRST_ROBUST_FACTOR,
    HELPFUL_FACTOR,
    ROBUST_MARGIN,
    Config,
    _claims,
)

CFG = Config(problems=("1d",), iterations=4, early=2, invariance_iterations=2)


def record(regret_at_end: dict[str, float], early: dict[str, float] | None = None, within=(True,) * 10):
    """One seed: a regret curve per method (``early`` at T=early, ``regret_at_end`` from then on)."""
    early = early or regret_at_end
    curves = {m: [early[m]] * CFG.early + [v] * (CFG.iterations - CFG.early) for m, v in regret_at_end.items()}
    return {"regret": curves, "checks": {"within_bound": list(within), "in_set": [True] * len(within),
                                         "vucb_within_bound": list(within)}}


def seeds(n=4, vucb=0.05, helpful=0.01, harmful=0.05, majority=0.05, spread=0.002, **extra):
    methods = {"vucb": vucb, "random": 0.2, "meta_vbo/helpful": helpful, "meta_vbo/harmful": harmful,
               "meta_vbo/majority": majority, **extra}
    return [record({m: v + spread * (s - n / 2) * (m != "vucb") for m, v in methods.items()}) for s in range(n)]


def claims(per_seed, svm=None):
    svm = svm if svm is not None else seeds(n=len(per_seed), **{"meta_vbo/datasets": 0.03})
    return {c.statement: c for c in _claims(CFG, {"1d": per_seed}, svm)}


def test_facts_true_by_construction_are_checks_not_claims():
    # review finding: "every query in Q_t" and the invariance hold by construction
    statements = get_experiment("meta_vbo").claims
    assert not any("invariant" in s or "lies in the no-regret" in s for s in statements)
    assert list(claims(seeds())) == list(statements)


def test_the_svm_claim_is_inconclusive_on_a_tie():
    # review finding: 0.0849 <= 0.0849 used to hold
    tie = [record({"vucb": 0.0849, "random": 0.2, "meta_vbo/datasets": 0.0849}) for _ in range(8)]
    assert claims(seeds(n=8), svm=tie)[CLAIM_REAL].verdict == "inconclusive"
    ahead = [record({"vucb": 0.08 + 0.01 * s, "random": 0.2, "meta_vbo/datasets": 0.05 + 0.013 * s})
             for s in range(8)]
    evidence = claims(seeds(n=8), svm=ahead)[CLAIM_REAL].evidence
    assert (evidence.verdict, evidence.better, evidence.threshold, evidence.n) == ("holds", "lower", 0.0, 8)


def test_helpful_priors_are_judged_paired_over_seeds():
    # review finding: the verdict flipped with 2 vs 8 seeds; now the seeds are replicates of one comparison
    evidence = claims(seeds(n=8))[CLAIM_HELPFUL].evidence
    assert evidence.verdict == "holds"
    # an all_of has no n of its own: each problem is one part, over the seeds (CFG has the 1-D problem only)
    (part,) = evidence.parts
    assert (part.unit, part.n, part.paired) == ("seeds", 8, True)
    assert part.label == f"1d: regret at T={CFG.early}, Meta-VBO - {HELPFUL_FACTOR:g} x V-UCB"
    # Meta-VBO 2x worse than V-UCB in two seeds, better in two: no verdict either way
    mixed = [record({"vucb": 0.05, "random": 0.2, "meta_vbo/helpful": h, "meta_vbo/harmful": 0.05,
                     "meta_vbo/majority": 0.05}) for h in (0.1, 0.01, 0.1, 0.005)]
    assert claims(mixed)[CLAIM_HELPFUL].verdict == "inconclusive"
    # better than V-UCB, but not by the spec's factor 0.7
    assert claims(seeds(helpful=0.045))[CLAIM_HELPFUL].verdict == "fails"
    assert HELPFUL_FACTOR == 0.7
    assert claims(seeds(n=2))[CLAIM_HELPFUL].verdict == "inconclusive"  # two seeds decide nothing


def test_robustness_is_non_inferiority_within_a_fixed_margin():
    # review finding: "<= max(1.1 x V-UCB, 0.01)" was a bar built from the run's own data
    evidence = claims(seeds())[CLAIM_ROBUST].evidence
    assert evidence.verdict == "holds"  # equal regret: within the margin
    assert all((p.kind, p.better, p.threshold) == ("compare", "lower", ROBUST_MARGIN) for p in evidence.parts)
    assert claims(seeds(harmful=0.05 + ROBUST_MARGIN / 2))[CLAIM_ROBUST].verdict == "holds"
    assert claims(seeds(harmful=0.05 + 3 * ROBUST_MARGIN))[CLAIM_ROBUST].verdict == "fails"
    # the margin does not scale with V-UCB's regret
    assert claims(seeds(vucb=0.5, harmful=0.5 + 3 * ROBUST_MARGIN))[CLAIM_ROBUST].verdict == "fails"


def test_the_regret_bound_claim_is_judged_on_per_seed_shares():
    within = [(True,) * 99 + (False,), (True,) * 98 + (False,) * 2, (True,) * 100, (True,) * 99 + (False,)]
    per_seed = [record({"vucb": 0.05, "random": 0.2, "meta_vbo/helpful": 0.01, "meta_vbo/harmful": 0.05,
                        "meta_vbo/majority": 0.05}, within=w) for w in within]
    evidence = claims(per_seed)[CLAIM_NO_REGRET].evidence
    assert (evidence.verdict, evidence.n, evidence.threshold) == ("holds", 4, 0.95)
    assert evidence.effect == sum(sum(w) / len(w) for w in within) / len(within)


def test_every_claim_records_where_its_margin_came_from():
    by_statement = claims(seeds())
    assert {s: c.provenance for s, c in by_statement.items()} == {
        CLAIM_HELPFUL: "spec", CLAIM_ROBUST: "revised", CLAIM_NO_REGRET: "spec", CLAIM_REAL: "spec"}
    assert all(c.subject == "paper" for c in by_statement.values())
    robust = by_statement[CLAIM_ROBUST]
    assert "1.1 x V-UCB" in robust.revision and robust.original is not None
    assert [p.label for p in robust.evidence.parts] == [
        f"1d, {prior} priors: regret at T={CFG.iterations}, Meta-VBO - V-UCB" for prior in ("harmful", "majority")]


def test_the_revised_robustness_margin_is_looser_than_the_first_definition_where_v_ucb_regret_is_large():
    # review finding: the margin went from "<= max(1.1 x V-UCB, 0.01)" to "within 0.01 of V-UCB" with the 2-D
    # harmful regret (1.46x V-UCB's) in view. 0.008 above a V-UCB regret of 0.05 is within 0.01, yet above 1.1x.
    robust = claims(seeds(harmful=0.058, majority=0.058, spread=0.0005))[CLAIM_ROBUST]
    assert robust.verdict == "holds"
    assert robust.original.verdict == "fails"
    # the first definition's bar is per seed: max(1.1 x V-UCB, 0.01) - a V-UCB regret near 0 gets the 0.01 floor
    first = robust.original.parts[0]
    assert first.samples[1] == tuple([max(FIRST_ROBUST_FACTOR * 0.05, 0.01)] * 4)
    near_zero = claims(seeds(vucb=0.0002, harmful=0.005, majority=0.005, spread=0.0005))[CLAIM_ROBUST]
    assert near_zero.original.parts[0].samples[1] == (0.01,) * 4
    assert (near_zero.verdict, near_zero.original.verdict) == ("holds", "holds")


def test_the_risk_measure_is_one_of_its_two_names():
    import pytest

    with pytest.raises(ValueError, match=r"expected one of \['var', 'cvar'\]"):
        get_experiment("meta_vbo").config("quick", ["measure=mean"])
