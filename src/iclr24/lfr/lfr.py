"""Learning from Randomness (LFR): train an encoder so that simple heads on its output predict what K frozen,
randomly initialised networks make of the same input. No augmentation, no masking: any encoder, any modality.

Sui et al., "Self-supervised Representation Learning from Random Data Projectors", ICLR 2024.
https://openreview.net/forum?id=EpYnZpDpsQ

    encoder = mlp_encoder(d, dim=256)
    lfr = LFR(encoder, input_shape=d).fit(X, epochs=100)   # X: (n, d) tensor, no labels
    Z = lfr.transform(X)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from iclr24.core import check_int, check_number
from iclr24.lfr.diversity import DIVERSITY, select_diverse
from iclr24.lfr.networks import ProjectorFactory, mlp_projector, output_dim
from iclr24.lfr.training import Phase, SelfSupervised


def batch_barlow_loss(prediction: torch.Tensor, target: torch.Tensor, lam: float = 0.01) -> torch.Tensor:
    """The "barlow-batch" loss (the official code's name) between predicted and random-projector representations.

    C = normalize(prediction) normalize(target)^T is the (batch x batch) cosine similarity between each
    row's prediction and every row's target; L = sum_i (C_ii - 1)^2 + lam * sum_{i != j} C_ij^2 pulls each
    prediction onto its own target and away from the other rows' targets.
    """
    if prediction.shape != target.shape or prediction.dim() != 2:
        raise ValueError(f"prediction and target must be (batch, dim) of one shape, got {tuple(prediction.shape)} "
                         f"and {tuple(target.shape)}")
    C = F.normalize(prediction, dim=1) @ F.normalize(target, dim=1).T
    on_diagonal = (torch.diagonal(C) - 1).pow(2).sum()
    off_diagonal = C.pow(2).sum() - torch.diagonal(C).pow(2).sum()
    return on_diagonal + lam * off_diagonal


def batch_barlow_loss_heads(predictions: torch.Tensor, targets: torch.Tensor, n_heads: int, lam: float = 0.01, *,
                            normalized_targets: bool = False) -> torch.Tensor:
    """The mean over ``n_heads`` heads of :func:`batch_barlow_loss`, all heads at once.

    ``predictions`` and ``targets`` are ``(batch, n_heads * dim)``: head k's columns side by side, as
    :class:`LinearHeads` and :meth:`LFR._project` lay them out. The K (batch x batch) matrices come from one
    batched product instead of K separate ones: the same arithmetic up to float rounding (checked against the
    per-head loss in the tests). ``normalized_targets`` skips normalising rows that are already unit-norm per head
    (LFR normalises its cached targets once per fit).
    """
    if predictions.shape != targets.shape or predictions.dim() != 2 or predictions.shape[1] % n_heads:
        raise ValueError(f"predictions and targets must be (batch, n_heads * dim) of one shape, got "
                         f"{tuple(predictions.shape)} and {tuple(targets.shape)} for {n_heads} heads")
    batch = len(predictions)
    p = F.normalize(predictions.view(batch, n_heads, -1), dim=2).transpose(0, 1)  # (K, batch, dim)
    t = targets.view(batch, n_heads, -1)
    t = (t if normalized_targets else F.normalize(t, dim=2)).permute(1, 2, 0)  # (K, dim, batch)
    C = torch.bmm(p, t)  # (K, batch, batch)
    diagonal = torch.diagonal(C, dim1=1, dim2=2)
    on_diagonal = (diagonal - 1).pow(2).sum(1)
    off_diagonal = C.pow(2).sum((1, 2)) - diagonal.pow(2).sum(1)
    return (on_diagonal + lam * off_diagonal).mean()


class LinearHeads(nn.Module):
    """K independent linear heads ``Linear(dim, out)`` held as one weight ``(K, out, dim)`` and bias ``(K, out)``.

    Each head is initialised as ``nn.Linear(dim, out)`` would be, drawn in the same order as K separate layers
    (so one seed gives the same heads as before), and the K heads run as one matrix product: the output is
    ``(batch, K * out)``, head k's predictions in columns ``k * out`` to ``(k + 1) * out``. Indexing gives head k
    as a plain ``nn.Linear`` copy (for inspection; it does not share parameters).
    """

    def __init__(self, n_heads: int, dim: int, out: int) -> None:
        super().__init__()
        heads = [nn.Linear(dim, out) for _ in range(n_heads)]
        self.weight = nn.Parameter(torch.stack([h.weight.detach() for h in heads]))
        self.bias = nn.Parameter(torch.stack([h.bias.detach() for h in heads]))

    def __len__(self) -> int:
        return self.weight.shape[0]

    def __getitem__(self, k: int) -> nn.Linear:
        head = nn.Linear(self.weight.shape[2], self.weight.shape[1])
        with torch.no_grad():
            head.weight.copy_(self.weight[k])
            head.bias.copy_(self.bias[k])
        return head

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return F.linear(h, self.weight.flatten(0, 1), self.bias.flatten())


class LFR(SelfSupervised):
    """An encoder trained to predict K diverse random projections of its input.

    Parameters
    ----------
    encoder : nn.Module
        Maps a batch shaped ``(batch, *input_shape)`` to ``(batch, dim)``; trained.
    input_shape : int or tuple of int
        Shape of one input row (the number of features for a table).
    n_projectors : int, default=6
        K, the number of random projectors (and predictor heads).
    projector_dim : int, default=256
        Output width of each projector.
    projector : "mlp" or callable, default="mlp"
        ``"mlp"``: random 2-layer MLPs (d -> 256 -> projector_dim) on the flattened input, the official tabular
        target. A callable with no arguments builds one projector (e.g. :func:`conv1d_projector`).
    n_candidates : int, optional
        Candidates drawn before choosing K diverse ones; default ``10 * n_projectors`` (the official
        ``target_sample_ratio``), or ``n_projectors`` when ``diversity`` is None.
    diversity : {"dpp", "greedy", None}, default="dpp"
        How the K are chosen: greedy DPP MAP over the candidates' similarity kernel, farthest-point selection,
        or the first K drawn.
    lam : float, default=0.01
        Weight of the off-diagonal term of :func:`batch_barlow_loss`.
    pred_epochs : int, default=1
        Predictor-only epochs after each encoder epoch (the official alternating schedule: the encoder phase
        steps the encoder alone, the predictor phase the heads alone, with the encoder in eval mode).
    cache_targets : bool, default=True
        Compute the projectors' outputs on the training set once per :meth:`fit` (they never change: there is
        no augmentation) instead of once a batch; costs ``n * K * projector_dim`` floats of memory.
    seed : int, optional
        Seeds the projectors' and heads' initialisation without touching the global RNG.

    Attributes
    ----------
    projectors : nn.ModuleList
        The K chosen projectors; frozen (no gradients, always in eval mode).
    predictors : LinearHeads
        The K linear heads ``Linear(dim, projector_dim)``, stacked: weight ``(K, projector_dim, dim)``, bias
        ``(K, projector_dim)``; ``predictors[k]`` is a copy of head k as an ``nn.Linear``.
    selected_ : list of int
        Indices of the chosen candidates.

    Notes
    -----
    A torch module, not a scikit-learn estimator: it trains the encoder it is given in place and draws its
    candidate projectors in ``__init__``, so ``sklearn.base.clone`` (which rebuilds an estimator from its
    constructor arguments) cannot copy it and raises ``TypeError``. The scikit-learn estimator is
    :class:`~iclr24.lfr.LFRTransformer`: it takes the same hyperparameters, deep-copies the encoder and builds
    an LFR inside ``fit``, so it clones, grid-searches and sits in pipelines. The defaults are the official
    Income recipe (K 6, width 256, 10 K candidates by DPP, lam 0.01, one predictor epoch; ``fit``: 100
    epochs, batch 128, Adam 1e-3).
    """

    def __init__(self, encoder: nn.Module, input_shape: int | Sequence[int], *, n_projectors: int = 6,
                 projector_dim: int = 256, projector: str | ProjectorFactory = "mlp", n_candidates: int | None = None,
                 diversity: str | None = "dpp", lam: float = 0.01, pred_epochs: int = 1,
                 cache_targets: bool = True, seed: int | None = None) -> None:
        super().__init__(encoder, input_shape)
        check_int("n_projectors", n_projectors, minimum=1)
        check_int("projector_dim", projector_dim, minimum=1)
        check_int("pred_epochs", pred_epochs, minimum=0)
        if diversity not in DIVERSITY:
            raise ValueError(f"diversity must be one of {DIVERSITY}, got {diversity!r}")
        n_candidates = n_candidates if n_candidates is not None else (
            n_projectors if diversity is None else 10 * n_projectors)
        check_int("n_candidates", n_candidates, minimum=n_projectors)
        lam = check_number("lam", lam, minimum=0)
        if projector == "mlp":
            factory = mlp_projector(self.input_shape, dim=projector_dim)
        elif callable(projector):
            factory = projector
        else:
            raise ValueError(f"projector must be 'mlp' or a callable building one projector, got {projector!r}")
        self.n_projectors, self.projector_dim, self.n_candidates = n_projectors, projector_dim, n_candidates
        self.diversity, self.lam, self.pred_epochs = diversity, lam, pred_epochs
        self.dim = output_dim(encoder, torch.zeros(1, *self.input_shape))

        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            # Heads first: with one seed, runs that differ only in how projectors are chosen get the same heads,
            # and diversity=None keeps exactly the first K candidates the DPP chooses from.
            self.predictors = LinearHeads(n_projectors, self.dim, projector_dim)
            candidates = []
            for _ in range(n_candidates):
                candidate = factory()
                for p in candidate.parameters():
                    p.requires_grad_(False)
                candidates.append(candidate.eval())
            self._selection_rng = torch.Generator().manual_seed(seed if seed is not None else
                                                                int(torch.randint(2 ** 31, ())))
        out = output_dim(candidates[0], torch.zeros(1, *self.input_shape))
        if out != projector_dim:
            raise ValueError(f"the projector factory builds networks of output width {out}, expected "
                             f"projector_dim={projector_dim}")
        # Registered, so .to() / .double() before fit move the candidates too; emptied once K are chosen.
        self.candidates = nn.ModuleList(candidates)
        self.cache_targets = cache_targets
        self._targets: torch.Tensor | None = None
        self._targets_of: torch.Tensor | None = None
        self.projectors = nn.ModuleList()
        self.selected_: list[int] = []
        if diversity is None:
            self._keep(list(range(n_projectors)))

    def _keep(self, indices: list[int]) -> None:
        self.projectors = nn.ModuleList(self.candidates[i] for i in indices).eval()
        self.selected_ = list(indices)
        self.candidates = nn.ModuleList()

    def select_projectors(self, sample: torch.Tensor) -> list[int]:
        """Choose the K projectors by the configured diversity rule on ``sample`` (at most 1000 rows are used)."""
        if self.selected_:
            raise RuntimeError(f"projectors were already chosen ({self.selected_})")
        self.check_input(sample, minimum_rows=2, name="sample")
        indices = select_diverse(list(self.candidates), self.n_projectors, sample, self.diversity,
                                 generator=self._selection_rng)
        self._keep(indices)
        return indices

    def prepare(self, X: torch.Tensor) -> None:
        if not self.selected_:
            self.select_projectors(X)
        if self.cache_targets:  # normalised per head once: the loss only uses the targets' directions
            self._targets, self._targets_of = self._normalized(self._project(X)), X

    def train(self, mode: bool = True) -> LFR:
        super().train(mode)
        self.projectors.eval()  # random targets stay fixed functions (no batch statistics, no dropout)
        self.candidates.eval()
        return self

    def phases(self) -> list[Phase]:
        # Without augmentation the projectors' outputs on the training set never change: they are computed
        # once in prepare() and each phase reads them from its rows (the arithmetic is that of loss()).
        cached = self._targets is not None
        phases = [Phase("encoder", list(self.encoder.parameters()),
                        precompute=self._inputs_and_targets if cached else None,
                        loss=self._encoder_loss if cached else None)]
        if self.pred_epochs:
            # The encoder is frozen too: its outputs are computed once per predictor phase.
            phases.append(Phase("predictors", list(self.predictors.parameters()), self.pred_epochs,
                                encoder_frozen=True, precompute=self._features_and_targets,
                                loss=self._predictor_loss))
        return phases

    def fit(self, X: torch.Tensor, **kwargs) -> LFR:
        """Train on the rows of ``X`` (see :meth:`SelfSupervised.fit`); projectors are chosen first if needed."""
        try:
            return super().fit(X, **kwargs)
        finally:
            self._targets, self._targets_of = None, None

    # -- the loss from cached rows (the same arithmetic as loss()) ------------------------------------------
    def _project(self, X: torch.Tensor) -> torch.Tensor:
        """The K projectors' outputs side by side, ``(n, K * projector_dim)``, in chunks, without gradients."""
        with torch.no_grad():
            return torch.cat([torch.cat([g(X[i:i + 1024]) for g in self.projectors], dim=1)
                              for i in range(0, len(X), 1024)])

    def _normalized(self, targets: torch.Tensor) -> torch.Tensor:
        """Each projector's block of ``targets`` scaled to unit norm per row (what the loss does to them)."""
        return F.normalize(targets.view(len(targets), self.n_projectors, -1), dim=2).view_as(targets)

    def _targets_for(self, X: torch.Tensor) -> torch.Tensor:
        return self._targets if X is self._targets_of else self._normalized(self._project(X))

    def _inputs_and_targets(self, X: torch.Tensor) -> torch.Tensor:
        return torch.cat([X.flatten(1), self._targets_for(X)], dim=1)

    def _features_and_targets(self, X: torch.Tensor) -> torch.Tensor:
        features = torch.cat([self.encoder(X[i:i + 1024]) for i in range(0, len(X), 1024)])
        return torch.cat([features, self._targets_for(X)], dim=1)

    def _loss_from(self, h: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean over the K heads of the Barlow-batch loss, from the representation and the side-by-side targets
        (normalised per head)."""
        return batch_barlow_loss_heads(self.predictors(h), targets, self.n_projectors, self.lam,
                                       normalized_targets=True)

    def _encoder_loss(self, rows: torch.Tensor) -> torch.Tensor:
        n_in = math.prod(self.input_shape)
        return self._loss_from(self.encoder(rows[:, :n_in].view(-1, *self.input_shape)), rows[:, n_in:])

    def _predictor_loss(self, rows: torch.Tensor) -> torch.Tensor:
        return self._loss_from(rows[:, :self.dim], rows[:, self.dim:])

    def forward(self, x: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Each head's prediction and each projector's target for the batch ``x``."""
        if not self.selected_:
            raise RuntimeError("choose the projectors first: call fit(X) or select_projectors(X)")
        h = self.encode(x)
        with torch.no_grad():
            targets = [g(x) for g in self.projectors]
        return list(self.predictors(h).split(self.projector_dim, dim=1)), targets

    def loss(self, x: torch.Tensor) -> torch.Tensor:
        """Mean over the K projectors of :func:`batch_barlow_loss` (all heads in one batched product)."""
        if not self.selected_:
            raise RuntimeError("choose the projectors first: call fit(X) or select_projectors(X)")
        h = self.encode(x)
        with torch.no_grad():
            targets = torch.cat([g(x) for g in self.projectors], dim=1)
        return batch_barlow_loss_heads(self.predictors(h), targets, self.n_projectors, self.lam)
