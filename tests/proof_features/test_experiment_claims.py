"""The proof_features reproduction's claims over proofs (test images), on hand-made per-proof values (fast)."""
from iclr24.core import get_experiment
from iclr24.proof_features.experiment import _claims


def stats_for(n, *, final=2, initial=20, priority=2, random=8, gradient=3, profit=1.0, rnd=0.0, grad=0.0,
              shares=(0.2, 0.05, 0.001)):
    out = {}
    for kind, share in zip(("standard", "pgd", "ibp"), shares):
        per = {"initial": [initial + i % 3 for i in range(n)], "final": [final + i % 2 for i in range(n)],
               "order_priority": [priority + i % 2 for i in range(n)],
               "order_random": [random + i % 3 for i in range(n)],
               "order_weight_abs": [gradient + i % 2 for i in range(n)],
               "spurious_share": [share * (1 + 0.1 * (i % 3)) for i in range(n)],
               "top5_profit": [profit] * n, "top5_random": [float(i % 4 == 0) * rnd for i in range(n)],
               "top5_gradient": [float(i % 4 == 0) * grad for i in range(n)]}
        mean = lambda v: sum(v) / len(v) if v else float("nan")  # noqa: E731
        out[kind] = {"n_proofs": n, "per_proof": per, "initial_mean": mean(per["initial"]),
                     "final_mean": mean(per["final"]), "final_median": 2.0,
                     **{f"order_{o}": mean(per[f"order_{o}"]) for o in ("priority", "random", "weight_abs")},
                     "topk_profit": [profit], "topk_random": [rnd], "topk_gradient": [grad],
                     "spurious_share": share}
    return out


CFG = get_experiment("proof_features").config("smoke", {"top_k": (5,)})


def test_clear_effects_hold_over_proofs():
    claims = _claims(stats_for(30), CFG)
    assert [c.verdict for c in claims] == ["holds"] * 4
    assert claims[0].evidence.parts[0].parts[0].unit == "proofs (test images)"
    assert claims[0].evidence.parts[0].parts[0].n == 30


def test_a_tie_with_gradient_is_not_a_win():
    claims = _claims(stats_for(30, priority=3, gradient=3), CFG)
    assert claims[1].verdict != "holds"


def test_a_net_without_proofs_is_not_run_not_failed():
    stats = stats_for(30)
    stats["ibp"]["n_proofs"] = 0
    stats["ibp"]["per_proof"] = {k: [] for k in stats["ibp"]["per_proof"]}
    claims = _claims(stats, CFG)
    assert all(c.verdict == "inconclusive" for c in claims[:3])
    assert claims[3].verdict == "not run"


def test_two_proofs_decide_nothing():
    assert all(c.verdict == "inconclusive" for c in _claims(stats_for(2), CFG))
