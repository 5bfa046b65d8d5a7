"""LFR as a scikit-learn transformer, for tables: ``make_pipeline(StandardScaler(), LFRTransformer(),
LogisticRegression())``."""

from __future__ import annotations

import copy
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin, _fit_context
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data
from torch import nn

from iclr24.lfr.lfr import LFR
from iclr24.lfr.networks import mlp_encoder


class LFRTransformer(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Self-supervised features learnt from random data projectors (Sui et al., ICLR 2024), no labels used.

    Parameters
    ----------
    encoder : "mlp" or torch.nn.Module, default="mlp"
        ``"mlp"``: the paper's tabular encoder, ``depth`` linear layers of width ``hidden`` with ReLU, output
        ``dim``. A module mapping ``(batch, n_features)`` float32 tensors to ``(batch, dim)`` is deep-copied
        and trained; the one passed in is left untouched.
    dim, hidden, depth : int, default=256, 256, 4
        Shape of the ``"mlp"`` encoder (ignored for a module).
    n_projectors, projector_dim, n_candidates, diversity, lam, pred_epochs
        As in :class:`iclr24.lfr.LFR` (K = 6 random 2-layer MLP projectors of width 256, chosen by DPP out of
        10 K candidates, lambda = 0.01, one predictor epoch per encoder epoch).
    epochs : int, default=100
    batch_size : int, default=128
    lr : float, default=1e-3
        Adam's learning rate (the official tabular setting).
    random_state : int, RandomState instance or None, default=None
        Seeds the encoder, projectors, heads and shuffling; the global torch RNG is left as it was.
    progress : bool, default=False
        Draw a bar of the training epochs, with the losses, while :meth:`fit` runs (through
        :mod:`iclr24.core.progress`, on stderr when it is a terminal; ``iclr24.core.set_quiet(True)`` silences it).

    Attributes
    ----------
    model_ : iclr24.lfr.LFR
        The trained model (``model_.encoder`` is the encoder).
    loss_curve_ : list of float
        Mean encoder-phase loss per epoch.
    n_features_in_ : int
    feature_names_in_ : ndarray of str, only when ``X`` has string column names

    Examples
    --------
    >>> from sklearn.datasets import load_wine
    >>> from sklearn.linear_model import LogisticRegression
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.preprocessing import StandardScaler
    >>> X, y = load_wine(return_X_y=True)
    >>> pipe = make_pipeline(StandardScaler(), LFRTransformer(dim=32, hidden=64, epochs=3, random_state=0),
    ...                      LogisticRegression(max_iter=1000)).fit(X, y)
    >>> pipe[1].transform(X[:2]).shape
    (2, 32)
    """

    _parameter_constraints: dict = {
        "encoder": [StrOptions({"mlp"}), nn.Module],
        "dim": [Interval(Integral, 1, None, closed="left")],
        "hidden": [Interval(Integral, 1, None, closed="left")],
        "depth": [Interval(Integral, 1, None, closed="left")],
        "n_projectors": [Interval(Integral, 1, None, closed="left")],
        "projector_dim": [Interval(Integral, 1, None, closed="left")],
        "n_candidates": [Interval(Integral, 1, None, closed="left"), None],
        "diversity": [StrOptions({"dpp", "greedy"}), None],
        "lam": [Interval(Real, 0, None, closed="left")],
        "pred_epochs": [Interval(Integral, 0, None, closed="left")],
        "epochs": [Interval(Integral, 0, None, closed="left")],
        "batch_size": [Interval(Integral, 2, None, closed="left")],
        "lr": [Interval(Real, 0, None, closed="neither")],
        "random_state": ["random_state"],
        "progress": ["boolean"],
    }

    def __init__(self, encoder="mlp", *, dim=256, hidden=256, depth=4, n_projectors=6, projector_dim=256,
                 n_candidates=None, diversity="dpp", lam=0.01, pred_epochs=1, epochs=100, batch_size=128, lr=1e-3,
                 random_state=None, progress=False):
        self.encoder = encoder
        self.dim = dim
        self.hidden = hidden
        self.depth = depth
        self.n_projectors = n_projectors
        self.projector_dim = projector_dim
        self.n_candidates = n_candidates
        self.diversity = diversity
        self.lam = lam
        self.pred_epochs = pred_epochs
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.random_state = random_state
        self.progress = progress

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Train the encoder on the rows of ``X`` (``y`` is ignored); returns self."""
        X = validate_data(self, X, dtype=[np.float64, np.float32], ensure_min_samples=2)
        _check_float32_range(X)
        if self.n_candidates is not None and self.n_candidates < self.n_projectors:
            raise ValueError(f"n_candidates must be >= n_projectors={self.n_projectors}, got {self.n_candidates}")
        seed = int(check_random_state(self.random_state).randint(2 ** 31 - 1))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            encoder = (mlp_encoder(X.shape[1], self.dim, self.hidden, self.depth) if isinstance(self.encoder, str)
                       else copy.deepcopy(self.encoder))
        self.model_ = LFR(encoder, X.shape[1], n_projectors=self.n_projectors, projector_dim=self.projector_dim,
                          n_candidates=self.n_candidates, diversity=self.diversity, lam=self.lam,
                          pred_epochs=self.pred_epochs, seed=seed)
        self.model_.fit(torch.tensor(X, dtype=torch.float32), epochs=self.epochs, batch_size=self.batch_size,
                        lr=self.lr, generator=torch.Generator().manual_seed(seed), progress=self.progress)
        self.loss_curve_ = [h["encoder"] for h in self.model_.history_ if "encoder" in h]
        self._n_features_out = self.model_.dim
        return self

    def transform(self, X):
        """The encoder's representation of each row of ``X``, shape ``(n_samples, dim)``."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        _check_float32_range(X)
        return self.model_.transform(torch.tensor(X, dtype=torch.float32)).double().numpy()


def _check_float32_range(X: np.ndarray) -> None:
    """The encoder computes in float32: larger finite values would become inf there."""
    if X.size and np.abs(X).max() > np.finfo(np.float32).max:
        raise ValueError("X has values beyond float32's range (3.4e38); rescale it (e.g. StandardScaler first)")
