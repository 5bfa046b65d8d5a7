import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from iclr24.core import get_experiment, run
from iclr24.core.evidence import compare, pool
from iclr24.kernel_trees.data import BUNDLED, GENERATED, load_dataset, load_shape_set
from iclr24.kernel_trees.experiment import (
    CHECK_INPUT,
    CLAIM_IMM,
    CLAIM_PRICE,
    CLAIM_RECOVER,
    CLAIM_REGRESSION,
    MAX_LEAVES,
    NONLINEAR,
    PRESETS,
    TABULAR,
    _claims,
)

SEEDS = [0, 1, 2]


def _part_ns(evidence: dict) -> list[int]:
    return [p["n"] for p in evidence["parts"]] if evidence.get("parts") else [evidence["n"]]


def test_smoke_run_reports_every_claim(tmp_path):
    record = run("kernel_trees", preset="smoke", runs_dir=tmp_path, quiet=True)
    assert record.ok, record.result.get("traceback")
    result = record.result
    assert [c["statement"] for c in result["claims"]] == list(get_experiment("kernel_trees").claims)
    # smoke: circles and iris, 3 seeds each. Each circles draw is a data set of its own; iris is one data set
    # however many seeds fit it, so the iris-only claim has n = 1 and the claim over both n = 3 + 1
    claims = {c["statement"]: c for c in result["claims"]}
    assert {s: _part_ns(c["evidence"]) for s, c in claims.items()} == {
        CLAIM_IMM: [3, 3], CLAIM_RECOVER: [3, 3], CLAIM_REGRESSION: [1], CLAIM_PRICE: [4, 4]}
    regression = claims[CLAIM_REGRESSION]["evidence"]
    assert regression["fixed"] and set(regression["clusters"]) == {"iris"} and regression["verdict"] == "inconclusive"
    assert claims[CLAIM_IMM]["evidence"]["parts"][0]["clusters"] == ["circles-seed0", "circles-seed1", "circles-seed2"]
    assert all(c["provenance"] == "revised" and c["revision"] for c in result["claims"])
    assert [(c["statement"], c["passed"]) for c in result["checks"]] == [(CHECK_INPUT, True)]
    assert {r["seed"] for r in result["tables"]["results"]} == {0, 1, 2}
    assert result["figures"] == ["partitions.png", "evidence.png"]
    assert {r["method"] for r in result["tables"]["results"]} == {
        "kernel k-means", "IMM", "Kernel IMM", "Kernel ExKMC", "Kernel Expand"}


def test_bundled_and_generated_data():
    X, y, k = load_dataset("iris")
    assert X.shape == (150, 4) and k == 3
    X, y, k = load_dataset("moons", n_samples=50)
    assert X.shape == (50, 2) and set(y) == {0, 1}
    assert load_dataset("wine")[0].shape == (178, 13) and load_dataset("wine")[2] == 3
    X, y, k = load_dataset("digits", max_bundled=600)
    assert X.shape == (600, 64) and k == 10 and np.bincount(y).min() >= 50  # the first rows hold every digit
    assert load_dataset("cancer", max_bundled=600)[0].shape == (569, 30)  # only longer sets are cut
    np.testing.assert_array_equal(load_dataset("wine", seed=0)[0], load_dataset("wine", seed=5)[0])  # fixed
    assert not np.array_equal(load_dataset("moons", seed=0)[0], load_dataset("moons", seed=5)[0])  # drawn
    with pytest.raises(ValueError, match="unknown dataset 'mnist'"):
        load_dataset("mnist")


def test_every_data_set_has_its_leaves_and_a_kind():
    assert set(TABULAR) == set(BUNDLED) and set(NONLINEAR) == set(GENERATED)
    assert all(name in MAX_LEAVES for name in (*TABULAR, *NONLINEAR))
    # the paper's rules: 2k leaves for k <= 3 (iris 6, cancer 4, wine 6), k + 3 for larger k (digits' 10)
    assert [MAX_LEAVES[d] for d in ("iris", "cancer", "wine", "digits")] == [6, 4, 6, 13]
    assert set(TABULAR) <= set(PRESETS["quick"].datasets) and PRESETS["paper"].max_bundled is None
    with pytest.raises(ValueError, match="max_bundled must be None or >= 100"):
        get_experiment("kernel_trees").config("quick", ["max_bundled=10"])


def test_shape_sets_come_from_a_local_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="Fetch the 'Shape sets' files"):
        load_shape_set("flame", tmp_path)
    np.savetxt(tmp_path / "flame.txt", [[0.0, 1.0, 1], [2.0, 3.0, 2]])
    X, y, k = load_shape_set("flame", tmp_path)
    assert X.shape == (2, 2) and list(y) == [0, 1] and k == 2


def test_unknown_dataset_in_config_is_a_clear_error():
    with pytest.raises(ValueError, match=r"unknown datasets \['mnist'\]"):
        get_experiment("kernel_trees").config("quick", ["datasets=circles,mnist"])


def test_features_are_chosen_by_kernel_imm_price_and_kernels_by_ari():
    from sklearn.datasets import make_circles

    from iclr24.kernel_trees import KernelIMM, KernelKMeans
    from iclr24.kernel_trees.experiment import PRESETS, _kernel_imm_by_price, _kernel_kmeans_by_ari

    X, y = make_circles(120, factor=0.4, noise=0.04, random_state=0)
    kkm = KernelKMeans(2, gamma=5.0, random_state=0).fit(X)
    tree, features = _kernel_imm_by_price(X, 2, "rbf", 5.0, kkm, "auto")
    prices = {f: KernelIMM(2, gamma=5.0, features=f, kernel_kmeans=kkm).fit(X).price_
              for f in ("kernel_matrix", "taylor")}
    assert features == min(prices, key=prices.get) and tree.price_ == pytest.approx(min(prices.values()))
    laplace = KernelKMeans(2, kernel="laplace", gamma=5.0, random_state=0).fit(X)
    assert _kernel_imm_by_price(X, 2, "laplace", 5.0, laplace, "auto")[1] == "kernel_matrix"
    model, kernel, gamma = _kernel_kmeans_by_ari(X, y, 2, PRESETS["smoke"], seed=0)
    assert kernel in ("rbf", "laplace") and model.kernel == kernel and model.gamma == gamma


def test_taylor_features_need_the_gaussian_kernel_alone():
    with pytest.raises(ValueError, match=r"features='taylor' needs the Gaussian kernel alone"):
        get_experiment("kernel_trees").config("quick", ["features=taylor"])
    assert get_experiment("kernel_trees").config("quick", ["features=taylor", "kernels=rbf"]).kernels == ("rbf",)


def _replicates(datasets, seeds=3, **values):
    """Hand-made ``replicates[dataset, method][key]``: ``values[method] = (agreement, ari_truth, gain_lost)``, a number
    (given each data set and seed a small deterministic jitter, so that replicates differ) or a list, one value
    per seed, used as given. (Not all 0 and 1: ``against`` would read them as pass/fail outcomes.)"""
    base = {"kernel k-means": (1.0, 0.7, 0.0), "IMM": (0.5, 0.5, 0.3), "Kernel IMM": (0.9, 0.6, 0.2),
            "Kernel ExKMC": (0.98, 0.6, 0.01), "Kernel Expand": (0.98, 0.6, 0.01)}
    base.update(values)
    rng = np.random.default_rng(0)
    out = {}
    for d in datasets:
        for method, triple in base.items():
            per_seed = [list(v) if isinstance(v, list) else list(v + 0.01 * rng.uniform(-1, 1, seeds)) for v in triple]
            out[d, method] = {"agreement": per_seed[0], "ari_truth": per_seed[1], "gain_lost": per_seed[2],
                              "price": list(1.0 + 0.01 * rng.uniform(0, 1, seeds))}
    return out


def _verdicts(replicates, seeds=SEEDS):
    return {c.statement: c.verdict for c in _claims(replicates, seeds)}


ALL = ["circles", "moons", "iris", "wine", "cancer", "digits"]


def test_a_draw_of_a_generated_set_is_a_unit_and_a_bundled_set_is_one_whatever_the_seeds():
    claims = {c.statement: c for c in _claims(_replicates(ALL), SEEDS)}
    assert {c.verdict for c in claims.values()} == {"holds"}
    n = {s: [p.n for p in c.evidence.deciding] for s, c in claims.items()}
    # circles and moons: 3 draws each; iris, wine, cancer, digits: one unit each, averaged over their 3 seeds
    assert n == {CLAIM_IMM: [6, 6], CLAIM_RECOVER: [6, 6], CLAIM_REGRESSION: [4], CLAIM_PRICE: [10, 10]}
    regression = claims[CLAIM_REGRESSION].evidence
    assert regression.fixed and sorted(set(regression.clusters)) == sorted(TABULAR) and regression.unit == "data sets"
    imm = claims[CLAIM_IMM].evidence.parts[0]
    assert not imm.fixed and imm.clusters[:4] == ("circles-seed0", "circles-seed1", "circles-seed2", "moons-seed0")
    price = claims[CLAIM_PRICE].evidence.parts[0]
    assert not price.fixed and "iris" in price.clusters and "moons-seed2" in price.clusters


def test_two_bundled_sets_decide_nothing_however_many_seeds_fit_them():
    # the review's case (#58): IMM's ARI is the same on every seed of a bundled set, ExKMC's moves a little;
    # ten seeds of iris and cancer are still two data sets
    seeds = list(range(10))
    replicates = _replicates(["iris", "cancer"], seeds=10, IMM=(0.5, [0.5] * 10, 0.3))
    claim = {c.statement: c for c in _claims(replicates, seeds)}[CLAIM_REGRESSION]
    assert claim.evidence.n == 2 and claim.verdict == "inconclusive"
    # counted as (data set, seed) pairs, as before, the same numbers would have held
    a = [v for d in ("iris", "cancer") for v in replicates[d, "Kernel ExKMC"]["ari_truth"]]
    b = [v for d in ("iris", "cancer") for v in replicates[d, "IMM"]["ari_truth"]]
    assert compare(a, b, margin=-0.05).verdict == "holds"


def test_the_regression_claim_shows_its_first_definition_beside_the_verdict():
    claim = {c.statement: c for c in _claims(_replicates(ALL), SEEDS)}[CLAIM_REGRESSION]
    assert claim.verdict == "holds" and claim.provenance == "revised" and "wine and digits added" in claim.revision
    assert claim.original.n == 2 and set(claim.original.clusters) == {"iris", "cancer"}
    assert claim.original.verdict == "inconclusive"


def test_every_claim_records_why_it_was_revised_and_the_price_claim_its_first_criterion():
    claims = {c.statement: c for c in _claims(_replicates(ALL), SEEDS)}
    assert all(c.provenance == "revised" and "width grid" in c.revision for c in claims.values())
    first = claims[CLAIM_PRICE].original
    assert [p.label for p in first.parts] == ["as first defined: ExKMC's price",
                                             "as first defined: price, Kernel ExKMC - Kernel IMM"]
    assert first.parts[0].threshold == 1.05 and first.parts[0].better == "lower"


def test_seed_groups_pool_new_draws_but_count_a_bundled_set_once():
    first = {c.statement: c.evidence for c in _claims(_replicates(ALL), [0, 1, 2])}
    second = {c.statement: c.evidence for c in _claims(_replicates(ALL), [3, 4, 5])}
    pooled = {s: pool([first[s], second[s]]) for s in first}
    assert [p.n for p in pooled[CLAIM_IMM].parts] == [12, 12]   # six new draws of circles and moons
    assert pooled[CLAIM_REGRESSION].n == 4                        # still the same four data sets
    assert [p.n for p in pooled[CLAIM_PRICE].parts] == [16, 16]


def test_a_tie_with_imm_is_not_clearly_better_and_one_seed_decides_nothing():
    tie = _replicates(["circles", "moons"], **{"Kernel IMM": (0.5, 0.5, 0.3)})
    assert _verdicts(tie)[CLAIM_IMM] == "fails"                  # 0.1 better was claimed; the tie is 0 better
    one_seed = _replicates(["circles", "iris"], seeds=1)
    assert set(_verdicts(one_seed, seeds=[0]).values()) == {"inconclusive"}   # n = 1 or 2 < 3


def test_no_loss_claim_is_non_inferiority_within_the_stated_tolerance():
    tabular = ["iris", "wine", "cancer", "digits"]
    same = _replicates(tabular, IMM=(0.5, 0.6, 0.3))
    assert _verdicts(same)[CLAIM_REGRESSION] == "holds"          # equal ARI: no loss
    worse = _replicates(tabular, IMM=(0.5, 0.7, 0.3))
    assert _verdicts(worse)[CLAIM_REGRESSION] == "fails"         # 0.1 below IMM, past the 0.05 tolerance


def test_claims_about_the_kernel_kmeans_partition_state_its_ari_against_the_truth():
    # issue #51: on moons kernel k-means reached ARI 0.45 against the truth, so agreeing with it says little; the
    # two claims judged against its partition say how good that reference is
    replicates = _replicates(["circles", "moons"], **{"kernel k-means": (1.0, [1.0, 1.0, 1.0], 0.0)})
    replicates["moons", "kernel k-means"]["ari_truth"] = [0.95, 0.52, 0.64]
    claims = {c.statement: c for c in _claims(replicates, SEEDS)}
    for statement in (CLAIM_IMM, CLAIM_RECOVER):
        assert claims[statement].measured.endswith(
            "the reference, kernel k-means, has ARI vs truth circles 1.00, moons 0.70")


def test_the_width_grid_reaches_the_moons():
    # with multiples 3 and 10 only, kernel k-means on moons stays at ARI 0.30-0.45 (seed 0); at 5 it finds them
    from iclr24.kernel_trees.experiment import _kernel_kmeans_by_ari

    X, y, k = load_dataset("moons", seed=0)
    model, kernel, gamma = _kernel_kmeans_by_ari(X, y, k, PRESETS["quick"], seed=0)
    assert 5.0 in PRESETS["quick"].gamma_grid and PRESETS["quick"].n_init == 10
    assert kernel == "rbf" and gamma == pytest.approx(5.0 / (2 * X.var()))
    assert adjusted_rand_score(y, model.labels_) > 0.9


def test_claims_without_their_data_sets_are_not_run():
    verdicts = _verdicts(_replicates(["iris"]))
    assert verdicts[CLAIM_IMM] == verdicts[CLAIM_RECOVER] == "not run"
    assert verdicts[CLAIM_PRICE] == "inconclusive"   # iris alone is one data set, whatever the seeds


def test_the_input_space_fact_is_a_check_not_a_claim():
    assert CHECK_INPUT not in get_experiment("kernel_trees").claims
    assert PRESETS["quick"].n_seeds >= 3
    with pytest.raises(ValueError, match="n_seeds must be >= 1"):
        get_experiment("kernel_trees").config("quick", ["n_seeds=0"])
