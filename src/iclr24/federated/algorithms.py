"""Local training, FedAvg and weighted FedAvg as one loop over any torch model.

A round: every client runs ``local_steps`` of full-batch gradient descent from the model it holds, then the
server mixes the client models with a row-stochastic matrix ``A``: client k receives
``theta_k <- sum_k' A[k, k'] theta_k'``. The three methods differ only in ``A``:

- local training ("Singleset" in the paper): ``A = I``, no communication;
- FedAvg: every row is ``n_k' / N``, one global model;
- weighted FedAvg: ``A[k, k']`` proportional to ``relu(cos(phi_k, phi_k'))``, the similarity of the clients'
  label-weighted input features ``phi`` (for the paper's data, ``phi_k = mean_i y_i x_i^(1) = mu_k``), so a
  client averages only with clients whose data look alike.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from iclr24.core import check_int, check_number, check_tensor, track
from iclr24.federated.data import ClientData

__all__ = ["AGGREGATIONS", "FederatedRun", "aggregation_weights", "client_features", "error_rate",
           "federated_train", "local_train", "mix_state_dicts", "sample_size_weights", "similarity_weights"]

AGGREGATIONS = ("local", "fedavg", "weighted")
Loss = Callable[[Tensor, Tensor], Tensor]


def _binary_logits(logits: Tensor, n: int) -> Tensor:
    """``(n,)`` or ``(n, 1)`` logits as ``(n,)``; anything else would broadcast against the labels silently."""
    if logits.dim() == 2 and logits.shape[1] == 1:
        logits = logits[:, 0]
    if logits.shape != (n,):
        raise ValueError(f"with +-1 labels the model must output one logit per sample, shape ({n},) or ({n}, 1); "
                         f"got {tuple(logits.shape)}")
    return logits


def default_loss(y: Tensor) -> Loss:
    """Logistic loss for +-1 float labels with one logit per sample; cross-entropy for class indices."""
    if y.is_floating_point():
        return lambda logits, target: F.softplus(-target * _binary_logits(logits, target.shape[0])).mean()
    return F.cross_entropy


def _check_labels(x: Tensor, y: Tensor) -> None:
    if not isinstance(y, Tensor) or y.dim() != 1 or y.shape[0] != x.shape[0] or y.shape[0] == 0:
        shape = tuple(y.shape) if isinstance(y, Tensor) else type(y).__name__
        raise ValueError(f"y must be a 1-D tensor with one label per sample of x ({x.shape[0]}), got {shape}")
    if y.is_floating_point() and not bool(((y == 1) | (y == -1)).all()):
        raise ValueError("float labels must be +-1 (use integer class indices for classes)")


def error_rate(model: nn.Module, x: Tensor, y: Tensor) -> float:
    """Fraction of misclassified samples (sign of the logit for +-1 labels, argmax for class indices)."""
    _check_labels(x, y)
    with torch.no_grad():
        out = model(x)
    if y.is_floating_point():
        pred = torch.where(_binary_logits(out, y.shape[0]) >= 0, 1.0, -1.0)
    else:
        pred = out.argmax(dim=-1)
    return float((pred != y).float().mean())


def local_train(model: nn.Module, x: Tensor, y: Tensor, *, steps: int, lr: float,
                loss: Loss | None = None) -> float:
    """``steps`` of full-batch gradient descent on ``loss(model(x), y)`` in place; returns the last loss."""
    steps = check_int("steps", steps, minimum=1)
    lr = check_number("lr", lr, minimum=0.0, exclusive=True)
    _check_labels(x, y)
    loss = loss or default_loss(y)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model has no trainable parameters")
    for _ in range(steps):
        value = loss(model(x), y)
        if not torch.isfinite(value):
            raise FloatingPointError(f"local training diverged (loss {float(value.detach())}); lower lr "
                                     f"(got {lr:g})")
        grads = torch.autograd.grad(value, params)
        with torch.no_grad():
            for p, g in zip(params, grads):
                p.sub_(lr * g)
    return float(value.detach())


def client_features(x: Tensor, y: Tensor, classes: Sequence) -> Tensor:
    """The label-weighted input mean, flattened: the feature whose similarity weighted FedAvg uses.

    For +-1 float labels it is the paper's ``phi = (1/n) sum_i y_i x_i``, which on the signal patch is
    exactly ``mu_k`` whatever the label balance, so same-signal clients have cosine 1, opposite ones -1 and
    orthogonal ones 0. For class indices it is one block a class, ``[(1/n) sum_{i: y_i = c} x_i for c in
    classes]`` (``classes``: every client's classes, in one order).
    """
    x = check_tensor("x", x, min_ndim=2, shape_doc="(n, ...)").flatten(1).to(torch.float64)
    _check_labels(x, y)
    if y.is_floating_point():
        return (x * y.to(x.dtype)[:, None]).mean(0)
    if len(classes) == 0:
        raise ValueError("classes must list at least one class")
    blocks = [(x * (y == c).to(x.dtype)[:, None]).sum(0) / x.shape[0] for c in classes]
    return torch.cat(blocks)


def similarity_weights(features: Tensor) -> Tensor:
    """Row-stochastic ``A[k, k'] = relu(cos(phi_k, phi_k')) / sum_k'' relu(cos(phi_k, phi_k''))``.

    ``features`` is ``(K, D)``. The diagonal is 1 before normalising, so each row has mass; a client with a
    zero feature vector keeps its own model.
    """
    features = check_tensor("features", features, ndim=2, shape_doc="(clients, D)").to(torch.float64)
    norms = features.norm(dim=1, keepdim=True)
    unit = features / norms.clamp_min(torch.finfo(torch.float64).tiny)
    sim = (unit @ unit.T).clamp_min(0.0)
    sim.fill_diagonal_(1.0)
    return sim / sim.sum(dim=1, keepdim=True)


def sample_size_weights(sizes: Sequence[int]) -> Tensor:
    """FedAvg's ``A[k, k'] = n_k' / N`` for every row."""
    sizes_t = torch.as_tensor(list(sizes), dtype=torch.float64)
    if sizes_t.ndim != 1 or sizes_t.numel() == 0 or not bool(torch.isfinite(sizes_t).all()) \
            or bool((sizes_t <= 0).any()):
        raise ValueError(f"sizes must be a non-empty list of positive counts, got {list(sizes)}")
    return (sizes_t / sizes_t.sum()).expand(sizes_t.numel(), -1).clone()


def aggregation_weights(aggregation: str | Tensor, clients: Sequence[ClientData], *,
                        feature_fn: Callable[[Tensor], Tensor] | None = None) -> Tensor:
    """The ``(K, K)`` mixing matrix for ``"local"``, ``"fedavg"``, ``"weighted"`` or a given matrix."""
    k = len(clients)
    for i, c in enumerate(clients):
        if not isinstance(c, ClientData):
            raise TypeError(f"clients[{i}] must be a ClientData, got {type(c).__name__}")
    if isinstance(aggregation, Tensor):
        return _check_mixing("aggregation", aggregation, k)
    if aggregation == "local":
        return torch.eye(k, dtype=torch.float64)
    if aggregation == "fedavg":
        return sample_size_weights([c.num_examples for c in clients])
    if aggregation == "weighted":
        feature_fn = feature_fn or (lambda x: x)
        classes = torch.unique(torch.cat([c.y for c in clients])).tolist()
        features = [client_features(feature_fn(c.x), c.y, classes) for c in clients]
        if len({f.shape for f in features}) > 1:
            raise ValueError("every client's features must have the same size; got "
                             f"{sorted({tuple(f.shape) for f in features})}")
        return similarity_weights(torch.stack(features))
    raise ValueError(f"aggregation must be one of {AGGREGATIONS} or a (K, K) tensor, got {aggregation!r}")


def _check_mixing(name: str, weights, k: int) -> Tensor:
    a = check_tensor(name, weights, ndim=2).to(torch.float64)
    if a.shape != (k, k) or bool((a < 0).any()) or not torch.allclose(a.sum(1), torch.ones(k, dtype=a.dtype)):
        raise ValueError(f"{name} must be a non-negative ({k}, {k}) matrix whose rows sum to 1, "
                         f"got shape {tuple(a.shape)}")
    return a


def mix_state_dicts(states: Sequence[dict[str, Tensor]], weights: Tensor) -> list[dict[str, Tensor]]:
    """``out[k][name] = sum_k' weights[k, k'] * states[k'][name]`` for floating-point entries; other entries
    (e.g. BatchNorm's step counter) are taken from client k unchanged. ``weights`` is row-stochastic."""
    k = len(states)
    if k == 0:
        raise ValueError("states must hold at least one state dict")
    weights = _check_mixing("weights", weights, k)
    keys = set(states[0])
    for i, state in enumerate(states):
        if set(state) != keys:
            raise ValueError(f"states[{i}] has keys {sorted(set(state) ^ keys)} that states[0] does not share")
    out: list[dict[str, Tensor]] = [{} for _ in range(k)]
    for name, first in states[0].items():
        if not first.is_floating_point():
            for i in range(k):
                out[i][name] = states[i][name]
            continue
        for i, state in enumerate(states):
            if state[name].shape != first.shape:
                raise ValueError(f"states[{i}][{name!r}] has shape {tuple(state[name].shape)}, states[0]'s is "
                                 f"{tuple(first.shape)}: the clients must share one model")
        stacked = torch.stack([s[name] for s in states]).to(torch.float64)
        mixed = torch.tensordot(weights.to(torch.float64), stacked, dims=1).to(first.dtype)
        for i in range(k):
            out[i][name] = mixed[i]
    return out


@dataclass
class FederatedRun:
    """The client models after the last round, the mixing matrix, and what ``callback`` returned each round
    (round 0 is before training)."""

    models: list[nn.Module]
    weights: Tensor
    history: list[dict] = field(default_factory=list)


def federated_train(
    model: nn.Module,
    clients: Sequence[ClientData],
    *,
    rounds: int,
    local_steps: int,
    lr: float,
    aggregation: str | Tensor = "fedavg",
    loss: Loss | None = None,
    feature_fn: Callable[[Tensor], Tensor] | None = None,
    callback: Callable[[int, list[nn.Module]], dict | None] | None = None,
    progress: str | None = None,
    batched: bool = False,
) -> FederatedRun:
    """Train one copy of ``model`` per client for ``rounds`` rounds of local GD + aggregation.

    Every client starts from ``model``'s parameters (the server's initialisation). ``aggregation`` is
    ``"local"``, ``"fedavg"``, ``"weighted"`` (similarity of ``client_features(feature_fn(x), y)``) or a
    row-stochastic ``(K, K)`` tensor. ``callback(round, models)`` may return a dict of measurements.

    ``batched=True`` trains all clients as one stacked model (``torch.func.vmap`` over the clients'
    parameters; clients with fewer samples are zero-padded and their padding weighted out of the mean loss),
    one forward and backward pass a step instead of one per client. It computes the same gradient steps and
    the same mixing as the per-client loop up to float rounding (batched sums add in another order). It
    needs the default loss and a model without buffers whose parameters all train; otherwise the per-client
    loop runs.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    clients = list(clients)
    if not clients:
        raise ValueError("clients must hold at least one client")
    rounds = check_int("rounds", rounds, minimum=0)
    check_int("local_steps", local_steps, minimum=1)
    check_number("lr", lr, minimum=0.0, exclusive=True)
    weights = aggregation_weights(aggregation, clients, feature_fn=feature_fn)
    models = [copy.deepcopy(model) for _ in clients]
    run = FederatedRun(models, weights)

    def record(r: int) -> None:
        if callback is not None:
            out = callback(r, models)
            if out is not None and not isinstance(out, dict):
                raise TypeError(f"callback must return a dict or None, got {type(out).__name__}")
            if out is not None:
                run.history.append({"round": r, **out})

    record(0)
    steps = track(range(1, rounds + 1), progress, total=rounds) if progress else range(1, rounds + 1)
    if batched and loss is None and _stackable(model):
        _train_stacked(model, models, clients, weights, steps=steps, local_steps=local_steps, lr=lr,
                       record=record if callback is not None else None)
        return run
    for r in steps:
        for client_model, data in zip(models, clients):
            local_train(client_model, data.x, data.y, steps=local_steps, lr=lr, loss=loss)
        if not torch.equal(weights, torch.eye(len(clients), dtype=weights.dtype)):
            for client_model, state in zip(models, mix_state_dicts([m.state_dict() for m in models], weights)):
                client_model.load_state_dict(state)
        record(r)
    return run


def _stackable(model: nn.Module) -> bool:
    """Whether :func:`_train_stacked` can run ``model``: no buffers, and every parameter trains."""
    params = list(model.parameters())
    return bool(params) and all(p.requires_grad for p in params) and not list(model.buffers())


def _functional_forward(model: nn.Module) -> Callable[[dict[str, Tensor], Tensor], Tensor]:
    """``forward(params, x)``: ``model``'s output with ``params`` in place of its parameters, vmap-able."""
    from iclr24.federated.model import TwoLayerCNN, cnn_logits

    if isinstance(model, TwoLayerCNN):  # its forward checks the input's values, which vmap cannot
        return lambda params, x: cnn_logits(params["weight"], x, model.power)
    return lambda params, x: torch.func.functional_call(model, params, (x,))


def _padded(tensors: Sequence[Tensor], n: int, fill: float) -> Tensor:
    """Stack tensors with different first dimensions, padding each with ``fill`` up to ``n`` rows."""
    out = torch.full((len(tensors), n, *tensors[0].shape[1:]), fill, dtype=tensors[0].dtype)
    for k, t in enumerate(tensors):
        out[k, :t.shape[0]] = t
    return out


def _train_stacked(model: nn.Module, models: list[nn.Module], clients: list[ClientData], weights: Tensor, *,
                   steps, local_steps: int, lr: float, record: Callable[[int], None] | None) -> None:
    """The rounds of :func:`federated_train` with the K client models stacked along a leading dimension:
    ``params[name]`` is ``(K, *shape)``, the forward pass is vmapped over clients, and the sum of the clients'
    mean losses is differentiated once (client k's parameters only reach client k's loss, so its gradient is
    client k's own). Writes the final parameters (and, before each ``record``, the current ones) into
    ``models``."""
    k = len(clients)
    for c in clients:
        _check_labels(c.x, c.y)
    sizes = [c.num_examples for c in clients]
    n = max(sizes)
    binary = clients[0].y.is_floating_point()
    x = _padded([c.x for c in clients], n, 0.0)                          # (K, n, ...)
    y = _padded([c.y for c in clients], n, 1.0 if binary else 0)         # padding: any valid label
    equal = len(set(sizes)) == 1
    if not equal:  # client k's mean over its own n_k samples: weight 1 / n_k, padding 0
        share = torch.zeros(k, n)
        for i, size in enumerate(sizes):
            share[i, :size] = 1.0 / size
    names = [name for name, _ in model.named_parameters()]
    params = {name: p.detach().unsqueeze(0).repeat(k, *([1] * p.dim())).requires_grad_()
              for name, p in model.named_parameters()}
    forward = torch.func.vmap(_functional_forward(model))
    mix = not torch.equal(weights, torch.eye(k, dtype=weights.dtype))
    a = weights.to(torch.float64)

    def write_back() -> None:
        with torch.no_grad():
            for i, client_model in enumerate(models):
                for name, p in client_model.named_parameters():
                    p.copy_(params[name][i])

    for r in steps:
        for _ in range(local_steps):
            out = forward(params, x)
            if binary:
                per_sample = F.softplus(-y * _binary_logits(out.flatten(0, 1), k * n).view(k, n))
            else:
                per_sample = F.cross_entropy(out.flatten(0, 1), y.flatten(), reduction="none").view(k, n)
            losses = per_sample.mean(1) if equal else (per_sample * share).sum(1)    # (K,)
            if not bool(torch.isfinite(losses).all()):
                raise FloatingPointError(f"local training diverged (losses {losses.detach().tolist()}); lower lr "
                                         f"(got {lr:g})")
            grads = torch.autograd.grad(losses.sum(), [params[name] for name in names])
            with torch.no_grad():
                for name, g in zip(names, grads):
                    params[name].sub_(lr * g)
        if mix:  # as mix_state_dicts: sum_k' A[k, k'] theta_k' in float64
            with torch.no_grad():
                for p in params.values():
                    p.copy_(torch.tensordot(a, p.to(torch.float64), dims=1).to(p.dtype))
        if record is not None:
            write_back()
            record(r)
    write_back()
