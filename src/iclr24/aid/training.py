"""Training and measuring SAR models: recall accuracy and how cleanly the read keys select the stored binding."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from iclr24.aid.sar import SARBatch, SARNetwork, SARTask
from iclr24.aid.tpr import memory_reads
from iclr24.core.checks import check_int, check_number
from iclr24.core.progress import progress as progress_bar

__all__ = ["SARHistory", "binding_selectivity", "recall_accuracy", "retrieval_selectivity", "train_sar",
           "train_sar_together"]


@dataclass
class SARHistory:
    """What :func:`train_sar` recorded: the steps at which it evaluated, the training loss there, and the
    recall accuracy on each named evaluation batch."""

    steps: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    accuracy: dict[str, list[float]] = field(default_factory=dict)


@torch.no_grad()
def recall_accuracy(model: SARNetwork, batch: SARBatch) -> float:
    """Fraction of the queried y's the model recalls (argmax over the vocabulary), in eval mode."""
    was_training = model.training
    model.eval()
    predicted = model(batch).argmax(-1)
    model.train(was_training)
    mask = batch.query_mask
    return (predicted[mask] == batch.targets[mask]).float().mean().item()


def binding_selectivity(roles: torch.Tensor, keys: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
    """Share of each read's weight on its own binding.

    ``roles`` (B, S, 2, D): the two write roles of S stored pairs; ``keys`` (B, Q, 2, D): the two read keys of
    Q queries; ``own`` (B, Q, S): 1 where query q asks for pair s. The read's weight on pair s is
    |(u1 . r1_s)(u2 . r2_s)|; returns (B, Q) own weight / total weight.
    """
    scores = torch.einsum("bqd,bsd->bqs", keys[:, :, 0], roles[:, :, 0]) * \
        torch.einsum("bqd,bsd->bqs", keys[:, :, 1], roles[:, :, 1])  # (B, Q, S)
    return (scores.abs() * own).sum(-1) / scores.abs().sum(-1).clamp_min(1e-12)


@torch.no_grad()
def retrieval_selectivity(model: SARNetwork, batch: SARBatch) -> float:
    """How much of each read falls on the right binding, from the components alone (chance: 1 / n_pairs).

    With one read, the memory returns sum_s (u1 . r1_s)(u2 . r2_s) f_s over the stored pairs s (before the
    delta rule and the norm bound reshape it). For the query of x, the selectivity is
    |score of x's own pair| / sum_s |score_s|, averaged over queries: 1 when the read key matches only the
    binding it asks for, 1 / P when it cannot tell the P pairs apart.
    """
    if model.fwm.n_reads != 1:
        raise ValueError(f"retrieval_selectivity needs a model with n_reads=1, got {model.fwm.n_reads}")
    was_training = model.training
    model.eval()
    _, details = model(batch, return_details=True)
    model.train(was_training)
    P = (batch.roles.shape[1] - 2) // 2  # sequences are 2P + 2 long
    roles = details["write"][:, 1: P + 1, :2]  # (B, P, 2, D) at the pair positions
    keys = details["read"][:, P + 2:]  # (B, P, 2, D) at the query positions
    own = (batch.roles[:, P + 2:, None] == batch.roles[:, None, 1: P + 1]).float()  # the query's own pair
    return binding_selectivity(roles, keys, own).mean().item()


def train_sar(model: SARNetwork, task: SARTask, steps: int, *, batch_size: int = 64, lr: float = 1e-3,
              clip: float = 50.0, eval_every: int = 250, evaluate_on: Mapping[str, SARBatch] | None = None,
              generator: torch.Generator | None = None, description: str = "SAR",
              progress: bool = False) -> SARHistory:
    """Adam (betas 0.9/0.98, as the paper's code) on the cross-entropy of the queried y's, gradient norm
    clipped at ``clip``; every ``eval_every`` steps the recall accuracy on each batch of ``evaluate_on``.

    ``progress=True`` draws a bar named ``description`` (steps, loss and accuracies) through
    :mod:`iclr24.core.progress`; off by default."""
    check_int("steps", steps, minimum=1)
    check_int("eval_every", eval_every, minimum=1)
    check_number("lr", lr, minimum=0.0, exclusive=True)
    check_number("clip", clip, minimum=0.0, exclusive=True)
    evaluate_on = dict(evaluate_on or {})
    for name, held_out in evaluate_on.items():
        if not isinstance(held_out, SARBatch):
            raise TypeError(f"evaluate_on[{name!r}] must be a SARBatch, got {type(held_out).__name__}")
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9)
    history = SARHistory(accuracy={name: [] for name in evaluate_on})
    model.train()
    with progress_bar(description, total=steps, enabled=progress) as bar:
        for step in range(1, steps + 1):
            batch = task.sample(batch_size, generator)
            logits = model(batch)
            loss = F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), ignore_index=0)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            if step % eval_every == 0 or step == steps:
                history.steps.append(step)
                history.train_loss.append(loss.item())
                for name, held_out in evaluate_on.items():
                    history.accuracy[name].append(recall_accuracy(model, held_out))
                bar.advance(0, loss=loss.item(), **{name: acc[-1] for name, acc in history.accuracy.items()})
            bar.advance()
    return history


def train_sar_together(models: Sequence[SARNetwork], tasks: Sequence[SARTask], steps: int, *, batch_size: int = 64,
                       lr: float = 1e-3, clip: float = 50.0, eval_every: int = 250,
                       evaluate_on: Sequence[Mapping[str, SARBatch]] | None = None,
                       generators: Sequence[torch.Generator] | None = None,
                       rng_states: Sequence[torch.Tensor] | None = None,
                       description: str = "SAR", progress: bool = False) -> list[SARHistory]:
    """:func:`train_sar` of several models in lockstep: the same numbers as one by one, for less time.

    Model i trains on ``tasks[i]`` with batches from ``generators[i]`` (default: the task's own generator) and
    evaluates on ``evaluate_on[i]``, as
    ``train_sar(models[i], tasks[i], ..., generator=generators[i])`` would with the global random state (its
    dropout) at ``rng_states[i]`` (default: the current state, for every model). Models given the same generator
    object and the same task train on the same batches: sampled once, as two identically seeded generators would
    give them. Each model has its own loss, gradient clipping and Adam state; the gain is that the memory, which
    has no parameters, reads the batches of all the models in one call of :func:`~iclr24.aid.tpr.memory_reads`
    (at T = 22, D = 16 its sequential write loop is mostly per-operation overhead). Equal to the one-by-one
    runs up to floating-point order (tested). The global random state ends at the last model's. ``progress``: as
    for :func:`train_sar`.
    """
    check_int("steps", steps, minimum=1)
    check_int("eval_every", eval_every, minimum=1)
    check_number("lr", lr, minimum=0.0, exclusive=True)
    check_number("clip", clip, minimum=0.0, exclusive=True)
    models, tasks = list(models), list(tasks)
    n = len(models)
    if n == 0 or len(tasks) != n or not all(isinstance(m, SARNetwork) for m in models):
        raise ValueError(f"models must be a non-empty sequence of SARNetwork and tasks one per model, got {n} "
                         f"models and {len(tasks)} tasks")
    if len({id(m) for m in models}) != n:
        raise ValueError("models must be distinct modules")
    generators = [task.generator for task in tasks] if generators is None else list(generators)
    evaluate_on = [{} for _ in models] if evaluate_on is None else [dict(e or {}) for e in evaluate_on]
    states = [torch.get_rng_state()] * n if rng_states is None else [s.clone() for s in rng_states]
    if not len(generators) == len(evaluate_on) == len(states) == n:
        raise ValueError(f"generators, evaluate_on and rng_states need one entry per model ({n}), got "
                         f"{len(generators)}, {len(evaluate_on)} and {len(states)}")
    for g in generators:
        if not isinstance(g, torch.Generator):
            raise TypeError(f"generators must be torch.Generator objects, got {type(g).__name__}")
    for held in evaluate_on:
        for name, held_out in held.items():
            if not isinstance(held_out, SARBatch):
                raise TypeError(f"evaluate_on[...][{name!r}] must be a SARBatch, got {type(held_out).__name__}")
    # Models whose memories can be read as one batch: the same component size, number of reads, memory form,
    # read normalisation and sequence length.
    groups: dict[tuple, list[int]] = {}
    for i, (m, task) in enumerate(zip(models, tasks)):
        f = m.fwm
        groups.setdefault((f.component_dim, f.n_reads, f.memory_form, f.read_norm.eps, task.seq_len), []).append(i)
    sources: dict[tuple[int, int], int] = {}  # (task, generator) -> the first model that samples for it
    # One Adam over every model's parameters: Adam is elementwise, so this is each model's own Adam (the same
    # numbers, tested), with the multi-tensor kernels doing all the models' updates in one call per operation.
    optimizer = torch.optim.Adam([p for m in models for p in m.parameters()], lr=lr, betas=(0.9, 0.98), eps=1e-9,
                                 foreach=True)
    histories = [SARHistory(accuracy={name: [] for name in held}) for held in evaluate_on]
    for m in models:
        m.train()
    with progress_bar(description, total=steps, enabled=progress) as bar:
        for step in range(1, steps + 1):
            batches: dict[int, SARBatch] = {}
            parts = []
            for i, (m, task, g) in enumerate(zip(models, tasks, generators)):
                source = sources.setdefault((id(task), id(g)), i)
                if source == i:
                    batches[i] = task.sample(batch_size, g)
                torch.set_rng_state(states[i])
                parts.append(m.fwm.decompose(m.embed(batches[source])))
                states[i] = torch.get_rng_state()
            recalled: list[torch.Tensor | None] = [None] * n
            for (D, *_), members in groups.items():
                stacked = (torch.cat([parts[i][key] for i in members]) for key in ("write", "read", "gate"))
                fwm = models[members[0]].fwm
                reads = memory_reads(*stacked, 1.0 / D, fwm.read_norm, fwm.memory_form)
                for i, r in zip(members, reads.split([parts[i]["write"].shape[0] for i in members])):
                    recalled[i] = r
            losses = []
            for i, m in enumerate(models):
                torch.set_rng_state(states[i])
                logits = m.fwm.readout(parts[i]["features"], recalled[i])
                states[i] = torch.get_rng_state()
                targets = batches[sources[id(tasks[i]), id(generators[i])]].targets
                losses.append(F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=0))
            optimizer.zero_grad(set_to_none=True)
            torch.stack(losses).sum().backward()  # each model's parameters get their own loss's gradient only
            for m in models:
                torch.nn.utils.clip_grad_norm_(m.parameters(), clip)
            optimizer.step()
            if step % eval_every == 0 or step == steps:
                for m, held, history, loss in zip(models, evaluate_on, histories, losses):
                    history.steps.append(step)
                    history.train_loss.append(loss.item())
                    for name, held_out in held.items():
                        history.accuracy[name].append(recall_accuracy(m, held_out))
                bar.advance(0, loss=statistics.mean(h.train_loss[-1] for h in histories))
            bar.advance()
    torch.set_rng_state(states[-1])
    return histories
