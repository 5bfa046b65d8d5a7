"""Task samplers for meta-learning across PDE configurations: uniform, self-paced, and DATS.

A sampler holds one probability per task. The training loop asks it for loss weights
(:meth:`TaskSampler.weights`, the DATS-w use) or for a split of a residual-point budget
(:meth:`TaskSampler.allocate`, the DATS-rp use), and every ``period`` steps hands it the tasks'
losses (and, for DATS, their flat gradients) through :meth:`TaskSampler.update`.

DATS (Toloubidokhti et al., ICLR 2024) chooses the probabilities that most decrease the
validation loss summed over tasks, with a KL penalty to a reference distribution q. Its
closed form is

    s_i = sum_j sqrt(L_i^train L_j^val) cos(g_i^train, g_j^val)      (gradient alignment)
    p_i ∝ q_i exp(eta s_i)                                            (q: previous p, or uniform)

The sampler takes losses and flattened gradients, so it works with any torch model.
"""

from __future__ import annotations

from typing import Literal

import torch

from iclr24.core.checks import check_int, check_number, check_tensor

__all__ = [
    "DifficultyAwareTaskSampler",
    "SelfPacedTaskSampler",
    "TaskSampler",
    "UniformTaskSampler",
    "allocate_points",
    "gradient_alignment",
    "normalized_scores",
]


def gradient_alignment(train_losses: torch.Tensor, val_losses: torch.Tensor, train_grads: torch.Tensor,
                       val_grads: torch.Tensor) -> torch.Tensor:
    """DATS's score per task: ``s_i = sum_j sqrt(L_i^train L_j^val) cos(g_i^train, g_j^val)``.

    ``train_losses``, ``val_losses``: (n_tasks,); ``train_grads``, ``val_grads``: (n_tasks, n_params).
    A zero gradient has cosine 0 with everything. Returns (n_tasks,).
    """
    for name, losses in (("train_losses", train_losses), ("val_losses", val_losses)):
        check_tensor(name, losses, ndim=1, shape_doc="(n_tasks,)", dtypes=_REAL)
        if bool((losses < 0).any()):
            raise ValueError(f"{name} must be non-negative, got {losses.tolist()}")
    for name, grads in (("train_grads", train_grads), ("val_grads", val_grads)):
        check_tensor(name, grads, ndim=2, shape_doc="(n_tasks, n_params)", dtypes=_REAL)
    n = train_losses.numel()
    if val_losses.numel() != n or train_grads.shape[0] != n or train_grads.shape != val_grads.shape:
        raise ValueError(f"expected losses (n_tasks,) and gradients (n_tasks, n_params) of one n_tasks and "
                         f"n_params, got {tuple(train_losses.shape)}, {tuple(val_losses.shape)}, "
                         f"{tuple(train_grads.shape)}, {tuple(val_grads.shape)}")
    g_train, g_val = _unit_rows(train_grads.detach()), _unit_rows(val_grads.detach())
    cosine = g_train @ g_val.T
    scale = torch.sqrt(train_losses.double()[:, None] * val_losses.double()[None, :])
    return (scale * cosine).sum(dim=1)


def normalized_scores(scores: torch.Tensor, train_losses: torch.Tensor, val_losses: torch.Tensor) -> torch.Tensor:
    """DATS's scores with the loss scale taken out: ``s_i / sqrt(sum_j L_j^train * sum_j L_j^val)``.

    Equal to ``sum_j sqrt(l_i l'_j) cos(g_i^train, g_j^val)`` with ``l = L^train / sum L^train`` and
    ``l' = L^val / sum L^val`` the loss shares: unchanged when the losses are multiplied by a constant, and at most
    ``sqrt(n_tasks)`` in size. All-zero losses give zero scores. (n_tasks,) each; returns (n_tasks,) float64.
    """
    total = torch.sqrt(train_losses.double().sum() * val_losses.double().sum())
    return scores.double() / total if total > 0 else torch.zeros_like(scores, dtype=torch.float64)


_REAL = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _unit_rows(g: torch.Tensor) -> torch.Tensor:
    """Rows scaled to unit norm; zero rows stay zero (no epsilon: a tiny gradient keeps its direction)."""
    g = g.double()
    norm = g.norm(dim=1, keepdim=True)
    return g / norm.masked_fill(norm == 0, 1.0)


def allocate_points(probabilities: torch.Tensor, total_points: int, minimum: int = 10) -> torch.Tensor:
    """Split ``total_points`` across tasks in proportion to ``probabilities``, each task >= ``minimum``.

    Tasks whose share would fall below the minimum get exactly the minimum and the rest is
    re-split among the others (water-filling); integer counts by largest remainder. The counts
    sum to ``total_points``. Returns a (n_tasks,) int64 tensor.
    """
    p = check_tensor("probabilities", probabilities, ndim=1, shape_doc="(n_tasks,)").double()
    total_points = check_int("total_points", total_points, minimum=0)
    minimum = check_int("minimum", minimum, minimum=0)
    n = p.numel()
    if total_points < n * minimum:
        raise ValueError(f"total_points must be >= n_tasks * minimum = {n * minimum}, got {total_points}")
    if bool((p < 0).any()) or float(p.sum()) <= 0:
        raise ValueError(f"probabilities must be non-negative with a positive sum, got {p.tolist()}")
    p = p / p.sum()
    pinned = torch.zeros(n, dtype=torch.bool)
    while True:
        free = total_points - minimum * int(pinned.sum())
        mass = p[~pinned].sum()
        share = torch.where(pinned, torch.full_like(p, float(minimum)), free * p / mass if mass > 0 else p * 0)
        below = (~pinned) & (share < minimum)
        if not bool(below.any()):
            break
        pinned |= below
    counts = share.floor().long()
    remainder = total_points - int(counts.sum())
    if remainder:
        order = torch.argsort(share - counts, descending=True, stable=True)
        counts[order[:remainder]] += 1
    return counts


class TaskSampler:
    """Probabilities over ``n_tasks`` tasks, updated every ``period`` training steps.

    Subclasses implement :meth:`_scores`; the base class keeps the probabilities, applies the
    floor, and turns them into loss weights or residual-point counts.
    """

    #: Whether :meth:`update` needs the tasks' gradients and validation losses.
    needs_gradients = False

    def __init__(self, n_tasks: int, *, period: int = 10, floor: float = 0.0) -> None:
        self.n_tasks = check_int("n_tasks", n_tasks, minimum=1)
        self.period = check_int("period", period, minimum=1)
        self.floor = check_number("floor", floor, minimum=0.0, maximum=1.0 / n_tasks)
        self._p = torch.full((n_tasks,), 1.0 / n_tasks, dtype=torch.float64)

    @property
    def probabilities(self) -> torch.Tensor:
        """The current task probabilities, (n_tasks,) float64, summing to 1."""
        return self._p.clone()

    def due(self, step: int) -> bool:
        """Whether the training loop should call :meth:`update` at ``step`` (every ``period`` steps)."""
        return step % self.period == 0

    def weights(self) -> torch.Tensor:
        """Loss weights for a weighted meta-gradient ``sum_i w_i g_i`` (DATS-w): the probabilities."""
        return self.probabilities

    def allocate(self, total_points: int, minimum: int = 10) -> torch.Tensor:
        """Residual points per task for a shared budget (DATS-rp); see :func:`allocate_points`."""
        return allocate_points(self._p, total_points, minimum)

    def update(self, train_losses: torch.Tensor, val_losses: torch.Tensor | None = None,
               train_grads: torch.Tensor | None = None, val_grads: torch.Tensor | None = None) -> torch.Tensor:
        """New probabilities from the tasks' current losses (and gradients); returns them."""
        train_losses = self._check_losses("train_losses", train_losses)
        p = self._next(train_losses, val_losses, train_grads, val_grads).double()
        if not bool(torch.isfinite(p).all()):
            raise ValueError(f"eta * score overflowed (eta={getattr(self, 'eta', None)}, losses "
                             f"{train_losses.tolist()}): use a smaller eta")
        p = p / p.sum()
        self._p = self.floor + (1.0 - self.n_tasks * self.floor) * p
        return self.probabilities

    def _next(self, train_losses, val_losses, train_grads, val_grads) -> torch.Tensor:
        raise NotImplementedError

    def _check_losses(self, name: str, losses) -> torch.Tensor:
        losses = check_tensor(name, losses, ndim=1, shape_doc="(n_tasks,)", dtypes=_REAL).detach().double()
        if losses.numel() != self.n_tasks:
            raise ValueError(f"{name} must have {self.n_tasks} entries (one per task), got {losses.numel()}")
        if bool((losses < 0).any()):
            raise ValueError(f"{name} must be non-negative, got {losses.tolist()}")
        return losses

    def __repr__(self) -> str:
        p = ", ".join(f"{v:.3f}" for v in self._p.tolist())
        return f"{type(self).__name__}(n_tasks={self.n_tasks}, p=[{p}])"


class UniformTaskSampler(TaskSampler):
    """Every task equally likely, always: the baseline meta-learning PINNs use."""

    def _next(self, train_losses, val_losses, train_grads, val_grads) -> torch.Tensor:
        return torch.ones(self.n_tasks, dtype=torch.float64)


class SelfPacedTaskSampler(TaskSampler):
    """Self-paced baseline: ``p_i ∝ p_i exp(eta L_i^train)``, tilting toward the tasks with the largest loss."""

    def __init__(self, n_tasks: int, eta: float, *, period: int = 10, floor: float = 0.0) -> None:
        super().__init__(n_tasks, period=period, floor=floor)
        self.eta = check_number("eta", eta, minimum=0.0)

    def _next(self, train_losses, val_losses, train_grads, val_grads) -> torch.Tensor:
        return torch.softmax(self._p.log() + self.eta * train_losses, dim=0)


class DifficultyAwareTaskSampler(TaskSampler):
    """DATS: ``p_i ∝ q_i exp(eta s_i)`` with ``s`` the gradient alignment of :func:`gradient_alignment`.

    Parameters
    ----------
    n_tasks : int
        Number of tasks (PDE configurations).
    eta : float
        Step size of the update (the inverse weight of the KL term). The paper's configs use 0.005.
    period : int
        Steps between updates (the paper: 10).
    kl : {"consecutive", "uniform"}
        The reference distribution q of the KL term: the previous probabilities (they then move
        cumulatively) or the uniform distribution (they are a fresh tilt each update).
    floor : float
        Minimum probability of every task, in [0, 1/n_tasks]: the update's result is mixed with
        the uniform distribution so that no task starves. 0 is the paper's update; with it and the
        consecutive KL, a probability that underflows to 0 stays 0.
    normalize_scores : bool
        Divide the scores by ``sqrt(sum_j L_j^train * sum_j L_j^val)`` before the update, which turns
        ``sqrt(L_i^train L_j^val)`` into the same product of loss *shares* (ours, off by default: the paper
        uses the raw scores). The normalised score does not change when every loss is multiplied by one
        constant, nor grow with the number of tasks, so one ``eta`` means the same tilt on any problem.

    Notes
    -----
    The raw score is in the units of the losses: multiplying every loss by ``c`` multiplies ``s`` by ``c``,
    and so the step ``eta s``. The paper's ``eta = 0.005`` belongs to its loss scale (residual weight
    0.005); on a loss 100 times larger the same ``eta`` is a step 100 times larger. For example three tasks
    whose training and validation losses are 10, 2 and 1, with aligned gradients, put ``p = 0.99`` on the
    first task after a single update at ``eta = 0.5`` (0.35 at a hundredth of those losses). Either choose
    ``eta`` on the validation loss of the problem at hand, as the experiment does, or set
    ``normalize_scores=True`` (the first task then gets 0.43 at any scale).
    """

    needs_gradients = True

    def __init__(self, n_tasks: int, eta: float, *, period: int = 10,
                 kl: Literal["consecutive", "uniform"] = "consecutive", floor: float = 0.0,
                 normalize_scores: bool = False) -> None:
        super().__init__(n_tasks, period=period, floor=floor)
        self.eta = check_number("eta", eta, minimum=0.0)
        if kl not in ("consecutive", "uniform"):
            raise ValueError(f"kl must be 'consecutive' or 'uniform', got {kl!r}")
        if not isinstance(normalize_scores, bool):
            raise TypeError(f"normalize_scores must be a bool, got {type(normalize_scores).__name__}")
        self.kl = kl
        self.normalize_scores = normalize_scores
        self.last_scores: torch.Tensor | None = None

    def _next(self, train_losses, val_losses, train_grads, val_grads) -> torch.Tensor:
        if val_losses is None or train_grads is None or val_grads is None:
            raise ValueError("DATS needs val_losses, train_grads and val_grads")
        val_losses = self._check_losses("val_losses", val_losses)
        for name, g in (("train_grads", train_grads), ("val_grads", val_grads)):
            check_tensor(name, g, ndim=2, shape_doc="(n_tasks, n_params)", dtypes=_REAL)
            if g.shape[0] != self.n_tasks:
                raise ValueError(f"{name} must have {self.n_tasks} rows (one per task), got {tuple(g.shape)}")
        if train_grads.shape != val_grads.shape:
            raise ValueError(f"train_grads and val_grads must have the same shape, got {tuple(train_grads.shape)} "
                             f"and {tuple(val_grads.shape)}")
        s = gradient_alignment(train_losses, val_losses, train_grads, val_grads)
        if self.normalize_scores:
            s = normalized_scores(s, train_losses, val_losses)
        self.last_scores = s
        log_q = self._p.log() if self.kl == "consecutive" else torch.zeros_like(self._p)
        return torch.softmax(log_q + self.eta * s, dim=0)  # q exp(eta s) / Z, without overflow
