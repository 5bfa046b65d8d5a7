"""The proof_features reproduction's claims over trained networks, on hand-made per-proof values (fast).

A network's proofs are one cluster: n counts networks, never test images (review of #58)."""
import pytest

from iclr24.core import get_experiment
from iclr24.core.evidence import pool
from iclr24.proof_features.experiment import (
    CLAIM_ORDER,
    CLAIM_SMALL,
    CLAIM_SPURIOUS,
    CLAIM_TOPK,
    _claims,
    network_name,
)

KINDS = ("standard", "pgd", "ibp")
CFG = get_experiment("proof_features").config("smoke", {"top_k": (2, 5)})


def network(kind, seed, n, *, final=2, initial=20, priority=2, random=8, gradient=3, profit=1.0, rnd=0.0, grad=0.0,
            share=0.1, gradient_ties=False):
    """One trained network's per-proof values (what ``_interpret`` returns), with a little spread over proofs and
    between networks (``seed``). ``gradient_ties``: Gradient's top-k preserves exactly ProFIt's proofs."""
    j = seed % 3
    per = {"initial": [initial + j + i % 3 for i in range(n)],
           "final": [final + (i + j) % 2 + 2 * (i % (7 + j) == 0) for i in range(n)],
           "order_priority": [priority + (i + j) % 2 for i in range(n)],
           "order_random": [random + j + i % 3 for i in range(n)],
           "order_weight_abs": [gradient + 0.2 * j + (i + j) % 2 for i in range(n)],
           "spurious_share": [share * (1 + 0.1 * (i % 3)) for i in range(n)]}
    for k in CFG.top_k:
        hits = [0.0 if i % (5 + j) == 0 else profit for i in range(n)]
        per.update({f"top{k}_profit": hits, f"top{k}_random": [float(i % 4 == 0) * rnd for i in range(n)],
                    f"top{k}_gradient": hits if gradient_ties else [float(i % 4 == 0) * grad for i in range(n)]})

    def mean(key):
        return sum(per[key]) / n if n else float("nan")

    return {"kind": kind, "seed": seed, "network": network_name(kind, seed), "accuracy": 0.95, "n_proofs": n,
            "search_differs": 0, "per_proof": per, "initial_mean": mean("initial"), "final_mean": mean("final"),
            "final_binary_mean": mean("final"), "final_median": 2.0, "kept_proves": 1.0, "share_le5": 1.0,
            "spurious_share": mean("spurious_share"), **{f"order_{o}": mean(f"order_{o}") for o in
                                                          ("priority", "random", "weight_abs")},
            **{f"topk_{m}": [mean(f"top{k}_{m}") for k in CFG.top_k] for m in ("profit", "random", "gradient")}}


def nets_for(seeds=(0, 1, 2), n=30, shares=None, **values):
    """Three kinds per replicate seed; ``shares[kind]`` gives each seed's spurious share (default: a clear order)."""
    shares = shares or {"standard": [0.20, 0.22, 0.19], "pgd": [0.05, 0.06, 0.05], "ibp": [0.001, 0.002, 0.0015]}
    return [network(kind, seed, n, share=shares[kind][i % len(shares[kind])], **values)
            for i, seed in enumerate(seeds) for kind in KINDS]


def by_statement(claims):
    return {c.statement: c for c in claims}


def test_clear_effects_hold_and_n_counts_networks_not_proofs():
    claims = _claims(nets_for(n=30), CFG)
    assert [c.verdict for c in claims] == ["holds"] * 4
    for claim in claims:
        for part in claim.evidence.parts:
            assert part.n == 3  # three networks (or replicates of three networks), not 30 x 3 proofs
            assert part.label
    small = claims[0].evidence.parts[0]
    assert small.unit == "trained networks" and len(small.samples[0]) == 90
    assert set(small.clusters) == {"standard-net-seed0", "standard-net-seed1", "standard-net-seed2"}


def test_many_proofs_of_two_networks_decide_nothing():
    # 2 x 200 proofs: as proofs these would hold by far; as networks there are two
    claims = _claims(nets_for(seeds=(0, 1), n=200), CFG)
    assert all(c.verdict == "inconclusive" for c in claims)
    assert all(p.n == 2 for c in claims for p in c.evidence.parts)


def test_networks_that_disagree_leave_the_spurious_order_open_however_many_proofs():
    # within each network the shares are tight, so 100 proofs per net gave an interval of +-0.006 before; between
    # networks standard - PGD is +0.15, -0.02, +0.12: the trained network is the unit, and this is inconclusive
    shares = {"standard": [0.20, 0.04, 0.18], "pgd": [0.05, 0.06, 0.06], "ibp": [0.001, 0.002, 0.0015]}
    spurious = by_statement(_claims(nets_for(n=100, shares=shares), CFG))[CLAIM_SPURIOUS].evidence
    standard_vs_pgd = spurious.parts[0]
    assert standard_vs_pgd.label == "spurious share, standard - PGD"
    assert standard_vs_pgd.n == 3 and standard_vs_pgd.verdict == "inconclusive"
    assert spurious.verdict == "inconclusive"


def test_network_names_carry_the_replicate_seed_so_a_seed_group_pools_networks():
    # run seed 0 trains replicate seeds 0-2, run seed 1 seeds 3-5: six networks per kind, never merged
    first, second = (by_statement(_claims(nets_for(seeds=s, n=10), CFG))[CLAIM_SMALL].evidence
                     for s in ((0, 1, 2), (3, 4, 5)))
    pooled = pool([first, second])
    assert [p.n for p in pooled.parts if p.kind != "not run"] == [6] * 6
    assert network_name("pgd", 4) == "pgd-net-seed4" != network_name("pgd", 1)


def test_a_tie_with_gradient_is_not_a_win():
    claims = by_statement(_claims(nets_for(priority=3, gradient=3), CFG))
    assert claims[CLAIM_ORDER].verdict != "holds"


def test_a_kind_without_proofs_is_not_run_not_failed():
    nets = [n if n["kind"] != "ibp" else network("ibp", n["seed"], 0) for n in nets_for()]
    claims = by_statement(_claims(nets, CFG))
    for statement in (CLAIM_SMALL, CLAIM_ORDER, CLAIM_TOPK):
        assert claims[statement].verdict == "inconclusive"
        assert claims[statement].evidence.parts[-1].verdict == "not run"
    assert claims[CLAIM_SPURIOUS].verdict == "not run"


def test_every_claim_records_its_provenance_and_the_top_k_claim_its_first_definition():
    claims = by_statement(_claims(nets_for(), CFG))
    assert {s: c.provenance for s, c in claims.items()} == {
        CLAIM_SMALL: "spec", CLAIM_ORDER: "revised", CLAIM_TOPK: "revised", CLAIM_SPURIOUS: "spec"}
    assert "81b56b5" in claims[CLAIM_ORDER].revision and "k = 5" in claims[CLAIM_TOPK].revision
    original = claims[CLAIM_TOPK].original  # the spec's rule: top-2 ProFIt >= random + 0.30, every kind
    assert [p.label for p in original.parts] == [f"{k}: top-2 preserved, ProFIt - random"
                                                 for k in ("standard", "PGD", "certified (IBP)")]
    assert {p.threshold for p in original.parts} == {0.30} and original.verdict == "holds"
    # ProFIt no better than Gradient: the revised claim cannot hold, the first definition still does
    tie = by_statement(_claims(nets_for(gradient_ties=True), CFG))[CLAIM_TOPK]
    assert tie.verdict != "holds" and tie.original.verdict == "holds"
    without_k2 = get_experiment("proof_features").config("smoke", {"top_k": (1, 5)})
    assert _claims(nets_for(), without_k2)[2].original.verdict == "not run"


@pytest.mark.parametrize("bad", ["networks=0", "n_proofs=0"])
def test_a_config_without_networks_or_proofs_is_refused(bad):
    with pytest.raises(ValueError, match="networks|n_proofs"):
        get_experiment("proof_features").config("smoke", [bad])
