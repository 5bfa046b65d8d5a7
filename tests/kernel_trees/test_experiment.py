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
