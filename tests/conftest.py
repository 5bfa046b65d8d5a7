import matplotlib
import pytest
import torch

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def _one_thread():
    # Two busy threads on a shared 2-core machine ran 7x slower than one.
    torch.set_num_threads(1)
