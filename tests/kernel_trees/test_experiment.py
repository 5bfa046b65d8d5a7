import numpy as np
import pytest

from iclr24.core import get_experiment, run
from iclr24.kernel_trees.data import load_dataset, load_shape_set


def test_smoke_run_reports_every_claim(tmp_path):
    record = run("kernel_trees", preset="smoke", runs_dir=tmp_path, quiet=True)
    assert record.ok, record.result.get("traceback")
    result = record.result
    assert [c["statement"] for c in result["claims"]] == list(get_experiment("kernel_trees").claims)
    assert result["figures"] == ["partitions.png"]
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
