import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from iclr24.core import get_experiment, run
from iclr24.kernel_trees.data import load_dataset, load_shape_set
from iclr24.kernel_trees.experiment import (
    CHECK_INPUT,
    CLAIM_IMM,
    CLAIM_PRICE,
    CLAIM_RECOVER,
    CLAIM_REGRESSION,
    PRESETS,
    _claims,
)


def test_smoke_run_reports_every_claim(tmp_path):
    record = run("kernel_trees", preset="smoke", runs_dir=tmp_path, quiet=True)
    assert record.ok, record.result.get("traceback")
    result = record.result
    assert [c["statement"] for c in result["claims"]] == list(get_experiment("kernel_trees").claims)
    # smoke: circles and iris, 3 seeds each; the claims pool (data set, seed) replicates
    assert [c["evidence"]["n"] for c in result["claims"]] == [3, 3, 3, 6]
    assert {c["evidence"]["unit"] for c in result["claims"]} == {"datasets x seeds"}
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
    with pytest.raises(ValueError, match="unknown dataset 'mnist'"):
        load_dataset("mnist")


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
    """Hand-made ``replicates[dataset, method][key]``: ``values[method] = (agreement, ari_truth, gain_lost)``,
    the same on every seed, unless a value is a list (one per seed). (Not all 0 and 1: ``against`` would read
    them as pass/fail outcomes.)"""
    base = {"kernel k-means": (1.0, 0.7, 0.0), "IMM": (0.5, 0.5, 0.3), "Kernel IMM": (0.9, 0.6, 0.2),
            "Kernel ExKMC": (0.98, 0.6, 0.01), "Kernel Expand": (0.98, 0.6, 0.01)}
    base.update(values)
    out = {}
    for d in datasets:
        for method, triple in base.items():
            per_seed = [v if isinstance(v, list) else [v] * seeds for v in triple]
            out[d, method] = {"agreement": per_seed[0], "ari_truth": per_seed[1], "gain_lost": per_seed[2],
                              "price": [1.0] * seeds}
    return out


def _verdicts(replicates, seeds=3):
    return {c.statement: c.verdict for c in _claims(replicates, seeds)}


def test_claims_pool_datasets_and_seeds_and_clear_effects_hold():
    claims = _claims(_replicates(["circles", "moons", "iris", "cancer"],
                                 IMM=([0.5, 0.52, 0.49], [0.5, 0.45, 0.55], 0.3)), 3)
    assert [c.verdict for c in claims] == ["holds"] * 4
    assert [c.evidence.n for c in claims] == [6, 6, 6, 12]     # circles+moons, circles+moons, iris+cancer, all
    assert all(c.evidence.unit == "datasets x seeds" for c in claims)


def test_a_tie_with_imm_is_not_clearly_better_and_one_seed_decides_nothing():
    tie = _replicates(["circles", "moons"], **{"Kernel IMM": (0.5, 0.5, 0.3)})
    assert _verdicts(tie)[CLAIM_IMM] == "fails"                  # 0.1 better was claimed; the tie is 0 better
    one_seed = _replicates(["circles", "iris"], seeds=1)
    assert set(_verdicts(one_seed, seeds=1).values()) == {"inconclusive"}   # n = 1 < 3


def test_no_loss_claim_is_non_inferiority_within_the_stated_tolerance():
    same = _replicates(["iris", "cancer"], IMM=(0.5, 0.6, 0.3))
    assert _verdicts(same)[CLAIM_REGRESSION] == "holds"          # equal ARI: no loss
    worse = _replicates(["iris", "cancer"], IMM=(0.5, [0.7, 0.72, 0.69], 0.3))
    assert _verdicts(worse)[CLAIM_REGRESSION] == "fails"         # ~0.1 below IMM, past the 0.05 tolerance


def test_claims_about_the_kernel_kmeans_partition_state_its_ari_against_the_truth():
    # issue #51: on moons kernel k-means reached ARI 0.45 against the truth, so agreeing with it says little; the
    # two claims judged against its partition say how good that reference is
    replicates = _replicates(["circles", "moons"], **{"kernel k-means": (1.0, [1.0, 1.0, 1.0], 0.0)})
    replicates["moons", "kernel k-means"]["ari_truth"] = [0.95, 0.52, 0.64]
    claims = {c.statement: c for c in _claims(replicates, 3)}
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
    assert verdicts[CLAIM_PRICE] == "holds"


def test_the_input_space_fact_is_a_check_not_a_claim():
    assert CHECK_INPUT not in get_experiment("kernel_trees").claims
    assert PRESETS["quick"].n_seeds >= 3
    with pytest.raises(ValueError, match="n_seeds must be >= 1"):
        get_experiment("kernel_trees").config("quick", ["n_seeds=0"])
