"""Training sparse autoencoders, the metrics the paper reports, and the baseline decompositions."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from torch import Tensor

from iclr24.core.checks import check_int, check_number, check_tensor
from iclr24.core.progress import progress as progress_bar
from iclr24.sae.autoencoder import SparseAutoencoder

__all__ = [
    "Decomposition",
    "SAETrainingConfig",
    "baseline_decompositions",
    "dead_latents",
    "fvu",
    "l0",
    "matched_similarity",
    "mmcs",
    "sweep_sae",
    "topk_fvu",
    "toy_superposition",
    "train_sae",
    "train_saes",
]


@dataclass(frozen=True)
class SAETrainingConfig:
    """Training of one SAE (the paper's: Adam 1e-3, batch 256-1024, one pass over the data)."""

    d_sae: int = 128
    l1_coefficient: float = 1e-3
    tied: bool = True
    normalize_encoder: bool = False  # untied only: also unit-norm encoder columns (not the paper's choice)
    lr: float = 1e-3
    batch_size: int = 1024
    steps: int = 2000
    resample_dead_every: int = 0  # 0: never (the paper's choice); else re-initialise dead latents every n steps
    centre: bool = False  # subtract the activations' mean before encoding (the paper's optional centring t)
    seed: int = 0
    # where the activations come from: saved in the SAE's SAELens metadata, which names the hook to read
    hook_name: str | None = None
    model_name: str | None = None

    def __post_init__(self) -> None:
        for name in ("d_sae", "batch_size", "steps"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("resample_dead_every", self.resample_dead_every, minimum=0)
        check_number("lr", self.lr, minimum=0, exclusive=True)
        check_number("l1_coefficient", self.l1_coefficient, minimum=0)
        for name in ("hook_name", "model_name"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, str) and value):
                raise ValueError(f"{name} must be None or a non-empty string, got {value!r}")


def train_sae(activations, cfg: SAETrainingConfig = SAETrainingConfig(), *, progress: bool = False
              ) -> SparseAutoencoder:
    """Train an SAE by Adam on minibatches of ``activations``.

    ``activations`` is a tensor ``(n, d_in)`` (batches drawn at random) or an activation
    source: a callable ``source(batch_size) -> Tensor (batch_size, d_in)``, e.g. one that
    runs a model and reads a hook, for data that does not fit in memory. With a source,
    ``centre`` uses the mean of its first batch.

    Decoder rows are renormalised to unit length after every step (the forward uses
    normalised rows anyway); an untied encoder is left free, as in the paper. Dead latents
    (never active on a batch over the last ``resample_dead_every`` steps) are re-initialised
    toward badly reconstructed inputs when resampling is on.

    ``progress``: draw a bar counting the steps (:mod:`iclr24.core.progress`; off by default, the experiment turns
    it on under ``iclr24 run``). It changes nothing else.
    """
    gen = torch.Generator().manual_seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    if callable(activations):
        source, first = activations, check_tensor("source batch", activations(cfg.batch_size), ndim=2)
    else:
        check_tensor("activations", activations, ndim=2, shape_doc="(n_samples, d_in)")
        if len(activations) == 0 or activations.shape[1] == 0:
            raise ValueError(f"activations must hold at least one row of at least one value, got shape "
                             f"{tuple(activations.shape)}")
        data = activations

        def source(size):
            return data[torch.randint(len(data), (size,), generator=gen)]

        first = activations
    sae = SparseAutoencoder(first.shape[1], cfg.d_sae, tied=cfg.tied, l1_coefficient=cfg.l1_coefficient,
                            centring=first.mean(0) if cfg.centre else None, normalize_encoder=cfg.normalize_encoder,
                            hook_name=cfg.hook_name, model_name=cfg.model_name)
    opt = torch.optim.Adam(sae.parameters(), lr=cfg.lr)
    fired = torch.zeros(cfg.d_sae, dtype=torch.bool)
    with progress_bar("training SAE", total=cfg.steps, enabled=progress) as bar:
        for step in range(1, cfg.steps + 1):
            batch = source(cfg.batch_size)
            loss, parts = sae.loss(batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            with torch.no_grad():
                sae.dictionary.data = torch.nn.functional.normalize(sae.dictionary.data, dim=-1)
                if sae.normalize_encoder:
                    sae.encoder.data = torch.nn.functional.normalize(sae.encoder.data, dim=0)
                if cfg.resample_dead_every:
                    fired |= (sae.encode(batch) > 0).any(0)
                    if step % cfg.resample_dead_every == 0:
                        _resample(sae, opt, batch, ~fired, gen)
                        fired.zero_()
            bar.advance(mse=parts["mse"])
    return sae


def train_saes(activations, cfgs, *, progress: bool = False) -> list[SparseAutoencoder]:
    """Train several SAEs at once: the same SAEs as ``[train_sae(a, c) for a, c in zip(activations, cfgs)]``.

    ``activations`` is one tensor ``(n, d_in)`` for all, or one per config. SAEs whose configs
    share their shape, tying, learning rate, batch size and step count are trained as one
    batched model: stacked weights, one batched matrix product per layer, and the sum of their
    losses (their parameters are disjoint, so each gets its own gradient, and Adam is
    elementwise, so each gets its own update). Each SAE keeps its own initialisation and its
    own minibatches (its own seeded generator), so the result differs from one at a time only
    by floating-point order. Configs that resample dead latents, and activation sources
    (callables), are trained one at a time by :func:`train_sae`. ``progress``: a bar per batched group (or SAE
    trained alone) counting its steps, as in :func:`train_sae`.
    """
    cfgs = list(cfgs)
    data = list(activations) if isinstance(activations, (list, tuple)) else [activations] * len(cfgs)
    if len(data) != len(cfgs):
        raise ValueError(f"activations must be one tensor or one per config ({len(cfgs)}), got {len(data)}")
    out: list[SparseAutoencoder | None] = [None] * len(cfgs)
    groups: dict[tuple, list[int]] = {}
    for i, (x, cfg) in enumerate(zip(data, cfgs)):
        if callable(x) or cfg.resample_dead_every:
            out[i] = train_sae(x, cfg, progress=progress)
        else:
            check_tensor("activations", x, ndim=2, shape_doc="(n_samples, d_in)")
            key = (x.shape[1], cfg.d_sae, cfg.tied, cfg.normalize_encoder, cfg.lr, cfg.batch_size, cfg.steps)
            groups.setdefault(key, []).append(i)
    for rows in groups.values():
        for i, sae in zip(rows, _train_batched([data[i] for i in rows], [cfgs[i] for i in rows],
                                                    progress=progress)):
            out[i] = sae
    return out


def _train_batched(data: list[Tensor], cfgs: list[SAETrainingConfig], *, progress: bool
                   ) -> list[SparseAutoencoder]:
    """SAEs of one shape trained together (see :func:`train_saes`); ``K`` models, weights ``(K, ...)``."""
    saes, gens = [], []
    for x, cfg in zip(data, cfgs):  # each SAE's initialisation and generator exactly as train_sae makes them
        if len(x) == 0 or x.shape[1] == 0:
            raise ValueError(f"activations must hold at least one row of at least one value, got shape "
                             f"{tuple(x.shape)}")
        gens.append(torch.Generator().manual_seed(cfg.seed))
        torch.manual_seed(cfg.seed)
        saes.append(SparseAutoencoder(x.shape[1], cfg.d_sae, tied=cfg.tied, l1_coefficient=cfg.l1_coefficient,
                                      centring=x.mean(0) if cfg.centre else None,
                                      normalize_encoder=cfg.normalize_encoder, hook_name=cfg.hook_name,
                                      model_name=cfg.model_name))
    cfg = cfgs[0]
    tied, norm_enc = cfg.tied, cfg.normalize_encoder
    dictionary = torch.nn.Parameter(torch.stack([s.dictionary.detach() for s in saes]))  # (K, d_sae, d_in)
    encoder = None if tied else torch.nn.Parameter(torch.stack([s.encoder.detach() for s in saes]))  # (K, d_in, d_sae)
    b_enc = torch.nn.Parameter(torch.stack([s.b_enc.detach() for s in saes]))  # (K, d_sae)
    b_dec = torch.stack([s.b_dec for s in saes])[:, None]  # (K, 1, d_in)
    alpha = torch.tensor([s.l1_coefficient for s in saes])  # (K,)
    params = [dictionary, b_enc] if tied else [dictionary, encoder, b_enc]
    opt = torch.optim.Adam(params, lr=cfg.lr)
    # SAEs drawing the same rows (one data tensor, one seed) share one draw
    draws: dict[tuple, list[int]] = {}
    for k, (x, c) in enumerate(zip(data, cfgs)):
        draws.setdefault((id(x), c.seed), []).append(k)
    order = [k for ks in draws.values() for k in ks]
    inverse = torch.argsort(torch.tensor(order))
    with progress_bar(f"training {len(saes)} SAEs", total=cfg.steps, enabled=progress) as bar:
        for _ in range(cfg.steps):
            batches = []
            for ks in draws.values():
                x = data[ks[0]]
                batch = x[torch.randint(len(x), (cfg.batch_size,), generator=gens[ks[0]])]
                for k in ks[1:]:  # advance the twins' generators as train_sae would
                    torch.randint(len(x), (cfg.batch_size,), generator=gens[k])
                batches += [batch] * len(ks)
            if len(draws) == 1:  # (K, B, d_in)
                x = batches[0].expand(len(saes), -1, -1)
            else:
                x = torch.stack(batches)[inverse]
            w_dec = torch.nn.functional.normalize(dictionary, dim=-1)
            if tied:
                w_enc = w_dec.transpose(1, 2)
            else:
                w_enc = torch.nn.functional.normalize(encoder, dim=1) if norm_enc else encoder
            codes = torch.relu(torch.baddbmm(b_enc[:, None], x - b_dec, w_enc))  # (K, B, d_sae)
            reconstruction = torch.baddbmm(b_dec, codes, w_dec)  # (K, B, d_in)
            mse = (reconstruction - x).pow(2).mean((1, 2))  # (K,)
            l1 = codes.abs().sum(-1).mean(-1)
            loss = (mse + alpha * l1).sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            with torch.no_grad():
                dictionary.data = torch.nn.functional.normalize(dictionary.data, dim=-1)
                if norm_enc:
                    encoder.data = torch.nn.functional.normalize(encoder.data, dim=1)
            bar.advance(mse=float(mse.detach().mean()))
    with torch.no_grad():
        for k, sae in enumerate(saes):
            sae.dictionary.copy_(dictionary[k])
            if not tied:
                sae.encoder.copy_(encoder[k])
            sae.b_enc.copy_(b_enc[k])
    return saes


def sweep_sae(activations: Tensor, l1_coefficients, ratios, cfg: SAETrainingConfig = SAETrainingConfig(),
              truth: Tensor | None = None, n_eval: int = 5000, *, progress: bool = False) -> list[dict]:
    """Train one SAE per (l1 coefficient, dictionary ratio) and report FVU, L0, dead latents,
    and MMCS / matched similarity when the true features ``truth`` are known (``progress``: a bar per SAE, as in
    :func:`train_sae`)."""
    rows = []
    sample = activations[:n_eval]
    for ratio in ratios:
        for l1 in l1_coefficients:
            sae = train_sae(activations, replace(cfg, d_sae=int(ratio * activations.shape[1]), l1_coefficient=l1),
                            progress=progress)
            with torch.no_grad():
                reconstruction, codes = sae(sample)
            row = {"ratio": ratio, "l1": l1, "fvu": fvu(sample, reconstruction), "l0": l0(codes),
                   "dead": dead_latents(codes)}
            if truth is not None:
                row.update(mmcs=mmcs(sae.atoms, truth), matched=matched_similarity(sae.atoms, truth))
            rows.append(row)
    return rows


def _resample(sae: SparseAutoencoder, opt: torch.optim.Optimizer, batch: Tensor, dead: Tensor,
              gen: torch.Generator) -> None:
    """Point dead latents at the worst-reconstructed inputs of the batch, with fresh Adam moments
    (Anthropic's recipe, simplified)."""
    n_dead = int(dead.sum())
    if n_dead == 0:
        return
    errors = (sae(batch)[0] - batch).pow(2).sum(-1)
    picks = torch.multinomial(errors + 1e-12, n_dead, replacement=True, generator=gen)
    directions = torch.nn.functional.normalize(batch[picks] - sae.b_dec, dim=-1)
    sae.dictionary.data[dead] = directions
    if sae.encoder is not None:
        sae.encoder.data[:, dead] = directions.T
    sae.b_enc.data[dead] = 0.0
    for param, index in ((sae.dictionary, (dead,)), (sae.encoder, (slice(None), dead)), (sae.b_enc, (dead,))):
        for moment in opt.state.get(param, {}).values() if param is not None else ():
            if torch.is_tensor(moment) and moment.shape == param.shape:
                moment[index] = 0.0


# --- metrics -------------------------------------------------------------------------------------------------


def fvu(x: Tensor, reconstruction: Tensor) -> float:
    """Fraction of variance unexplained: ``||x - x^||^2 / ||x - mean(x)||^2``.

    Undefined when every row of ``x`` is the same (no variance to explain): that raises a
    ValueError rather than returning inf or NaN.
    """
    check_tensor("x", x, min_ndim=1, dtypes=_FLOATS, shape_doc="(n, ...)")
    check_tensor("reconstruction", reconstruction, dtypes=_FLOATS)
    if reconstruction.shape != x.shape:
        raise ValueError(f"reconstruction must have x's shape {tuple(x.shape)}, got {tuple(reconstruction.shape)}")
    if x.shape[0] < 2:
        raise ValueError(f"x must hold at least 2 rows (a variance), got shape {tuple(x.shape)}")
    total = (x - x.mean(0)).pow(2).sum()
    # Rows all equal: the variance is 0 (the mean may round to a tiny non-zero one), so the ratio is undefined.
    if bool((x == x[:1]).all()):
        raise ValueError(f"fvu is undefined for a constant x (all {x.shape[0]} rows equal, so there is no variance to "
                         f"explain), got x of shape {tuple(x.shape)} with every row equal to x[0]")
    if total == 0:
        raise ValueError(f"fvu is undefined for x without variance: sum((x - mean(x))^2) is 0 in {x.dtype} for x of "
                         f"shape {tuple(x.shape)}")
    return float((x - reconstruction).pow(2).sum() / total)


def l0(codes: Tensor) -> float:
    """Mean number of active latents per input."""
    _check_codes(codes)
    return float((codes > 0).float().sum(-1).mean())


def dead_latents(codes: Tensor) -> int:
    """Latents never active on these inputs."""
    _check_codes(codes)
    return int(((codes > 0).sum(0) == 0).sum())


_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _check_codes(codes: Tensor) -> None:
    check_tensor("codes", codes, min_ndim=2, shape_doc="(n, d_sae)")
    if codes.shape[0] == 0:
        raise ValueError(f"codes must hold at least one input, got shape {tuple(codes.shape)}")


def _cosines(learned: Tensor, truth: Tensor) -> Tensor:
    check_tensor("learned", learned, ndim=2, dtypes=_FLOATS, shape_doc="(n_atoms, d)")
    check_tensor("truth", truth, ndim=2, dtypes=_FLOATS, shape_doc="(n_features, d)")
    if learned.shape[1] != truth.shape[1] or not len(learned) or not len(truth):
        raise ValueError(f"learned and truth must be non-empty (n, d) with one d, got {tuple(learned.shape)} and "
                         f"{tuple(truth.shape)}")
    a = torch.nn.functional.normalize(learned.double(), dim=-1)
    b = torch.nn.functional.normalize(truth.double(), dim=-1)
    return b @ a.T  # (n_true, n_learned)


def mmcs(learned: Tensor, truth: Tensor) -> float:
    """Mean max cosine similarity: for each true feature, its best-matching learned atom."""
    return float(_cosines(learned, truth).amax(1).mean())


def matched_similarity(learned: Tensor, truth: Tensor) -> float:
    """Mean cosine under the best one-to-one matching of true features to atoms (Hungarian)."""
    cos = _cosines(learned, truth).numpy()
    rows, cols = linear_sum_assignment(-cos)
    return float(cos[rows, cols].sum() / len(truth))


# --- baselines ----------------------------------------------------------------------------------------------


class Decomposition:
    """A fixed dictionary with the SAE's interface: ``encode``, ``decode``, ``atoms``."""

    def __init__(self, name: str, atoms: Tensor, encode, decode) -> None:
        self.name, self._atoms, self._encode, self._decode = name, atoms, encode, decode

    @property
    def atoms(self) -> Tensor:
        return torch.nn.functional.normalize(self._atoms, dim=-1)

    def encode(self, x: Tensor) -> Tensor:
        return self._encode(x)

    def decode(self, codes: Tensor) -> Tensor:
        return self._decode(codes)


def baseline_decompositions(activations: Tensor, seed: int = 0, *, ica_max_iter: int = 1000,
                            ica_samples: int | None = None) -> dict[str, Decomposition]:
    """PCA, PCA +- (each direction split into ReLU halves), ICA, the neuron basis, and a random basis.

    FastICA is the slow one (minutes at d = 576): ``ica_samples`` fits it on the first rows
    only and ``ica_max_iter`` caps its iterations.
    """
    import warnings

    from sklearn.decomposition import PCA, FastICA
    from sklearn.exceptions import ConvergenceWarning

    x = activations.double().numpy()
    d = x.shape[1]
    mean = torch.tensor(x.mean(0))
    pca = PCA(n_components=d, random_state=seed).fit(x)
    P = torch.tensor(pca.components_)  # (d, d) orthonormal rows

    def pm(basis):
        return (lambda z: torch.cat([torch.relu((z.double() - mean) @ basis.T), torch.relu(-(z.double() - mean)
                                                                                             @ basis.T)], -1),
                lambda c: (c[..., :d] - c[..., d:]) @ basis + mean)

    scale = x.std(0) + 1e-12
    ica = FastICA(n_components=d, whiten="unit-variance", random_state=seed, max_iter=ica_max_iter, tol=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # a capped ICA is still a fixed linear basis
        ica.fit(x[:ica_samples] / scale)
    mixing = torch.tensor(ica.mixing_.T * scale)  # (d, d): sources -> activations
    unmixing = torch.linalg.pinv(mixing)
    ica_mean = torch.tensor(ica.mean_ * scale)
    rand = torch.linalg.qr(torch.randn(d, d, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)))[0].T
    eye = torch.eye(d, dtype=torch.float64)
    out = {
        "PCA": Decomposition("PCA", P, lambda z: (z.double() - mean) @ P.T, lambda c: c @ P + mean),
        "PCA +-": Decomposition("PCA +-", torch.cat([P, -P]), *pm(P)),
        "ICA": Decomposition("ICA", mixing, lambda z: (z.double() - ica_mean) @ unmixing,
                             lambda c: c @ mixing + ica_mean),
        "neurons": Decomposition("neurons", eye, lambda z: z.double(), lambda c: c),
        "neurons +-": Decomposition("neurons +-", torch.cat([eye, -eye]), *pm(eye)),
        "random": Decomposition("random", rand, lambda z: (z.double() - mean) @ rand.T, lambda c: c @ rand + mean),
    }
    return out


# --- toy data with known features (Sharkey et al., "Taking features out of superposition") --------------------


def toy_superposition(n_samples: int, d: int = 64, n_features: int = 128, active: float = 5.0, decay: float = 0.99,
                      seed: int = 0) -> tuple[Tensor, Tensor]:
    """Sparse combinations of ``n_features`` random unit directions in ``R^d``.

    Feature i is on with probability proportional to ``decay^i`` (``active`` on average),
    with strength uniform in (0, 1). Returns ``(data (n, d), true_features (n_features, d))``.
    """
    check_int("n_samples", n_samples, minimum=1)
    check_int("d", d, minimum=1)
    check_int("n_features", n_features, minimum=1)
    check_number("active", active, minimum=0.0, exclusive=True)
    check_number("decay", decay, minimum=0.0, exclusive=True)
    g = torch.Generator().manual_seed(seed)
    truth = torch.nn.functional.normalize(torch.randn(n_features, d, generator=g), dim=-1)
    p = decay ** torch.arange(n_features, dtype=torch.float64)
    p = (p * active / p.sum()).clamp(max=1.0)
    on = torch.rand(n_samples, n_features, generator=g, dtype=torch.float64) < p
    strength = torch.rand(n_samples, n_features, generator=g, dtype=torch.float64) * on
    return (strength @ truth.double()).float(), truth


def _as_numpy(t: Tensor) -> np.ndarray:
    return t.detach().double().numpy()


def topk_fvu(decomposition, x: Tensor, k: int) -> float:
    """FVU when each input keeps only its ``k`` largest feature contributions (``|code| * ||atom||``).

    Puts a dense decomposition (PCA, ICA, neurons) on an SAE's reconstruction-vs-sparsity
    axes: compare an SAE of L0 ``k`` with ``topk_fvu(pca, x, k)``.
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    with torch.no_grad():
        codes = decomposition.encode(x)
        eye = torch.eye(codes.shape[-1], dtype=codes.dtype)
        norms = (decomposition.decode(eye) - decomposition.decode(torch.zeros_like(eye[:1]))).norm(dim=-1)
        weight = codes.abs() * norms.to(codes.dtype)
        keep = torch.zeros_like(codes, dtype=torch.bool)
        if k:
            keep.scatter_(-1, weight.topk(min(k, codes.shape[-1]), dim=-1).indices, True)
        reconstruction = decomposition.decode(torch.where(keep, codes, torch.zeros_like(codes)))
    return fvu(x.double(), reconstruction.double())
