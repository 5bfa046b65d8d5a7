import numpy as np
import pytest
import torch
from sklearn.datasets import load_wine
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks
from torch import nn

from iclr24.lfr import LFRTransformer


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)


@parametrize_with_checks([LFRTransformer(dim=4, hidden=8, depth=2, projector_dim=4, n_projectors=2, epochs=2,
                                         batch_size=16)])
def test_sklearn_compatible(estimator, check):
    check(estimator)


def test_in_a_pipeline_with_logistic_regression_training_helps():
    X, y = load_wine(return_X_y=True)

    def pipeline(epochs):
        return make_pipeline(StandardScaler(), LFRTransformer(dim=16, hidden=32, epochs=epochs, random_state=0),
                             LogisticRegression(max_iter=2000)).fit(X, y)

    trained, untrained = pipeline(40), pipeline(0)
    assert trained.score(X, y) > 0.93 and trained.score(X, y) > untrained.score(X, y) + 0.1
    assert trained[:-1].get_feature_names_out()[0] == "lfrtransformer0"


def test_random_state_makes_it_deterministic_and_seeds_differ():
    X, _ = load_wine(return_X_y=True)
    X = StandardScaler().fit_transform(X)

    def features(seed):
        return LFRTransformer(dim=8, hidden=16, epochs=2, random_state=seed).fit_transform(X)

    assert np.array_equal(features(0), features(0))
    assert not np.allclose(features(0), features(1))


def test_a_given_module_is_copied_not_trained_in_place():
    X, _ = load_wine(return_X_y=True)
    encoder = nn.Sequential(nn.Linear(13, 16), nn.ReLU(), nn.Linear(16, 6))
    before = [p.clone() for p in encoder.parameters()]
    t = LFRTransformer(encoder, epochs=2, random_state=0).fit(StandardScaler().fit_transform(X))
    assert all(torch.equal(a, b) for a, b in zip(before, encoder.parameters()))
    assert t.transform(X[:3]).shape == (3, 6) and len(t.loss_curve_) == 2


def test_bad_parameters_are_named():
    X = np.random.default_rng(0).normal(size=(10, 3))
    with pytest.raises(ValueError, match="diversity"):
        LFRTransformer(diversity="random").fit(X)
    with pytest.raises(ValueError, match="n_candidates must be >= n_projectors=6"):
        LFRTransformer(n_candidates=3, epochs=1).fit(X)
    with pytest.raises(ValueError, match="3 features"):
        LFRTransformer(dim=4, hidden=4, epochs=1).fit(X).transform(X[:, :2])
