"""The AID module: competitive attention that decomposes input features into TPR components.

Park, Choi, Lee. "Attention-based Iterative Decomposition for Tensor Product Representation", ICLR 2024,
section 3. A TPR model needs, at every step, a few structural vectors (roles, fillers, unbinding keys) made
from a few input features. Its usual decomposition is one linear/MLP map of the concatenated features; AID
starts from that map and refines it with slot-attention-like iterations in which the components compete for
the input features (softmax over components), so each component comes to read from the features it binds.

Shape convention: inputs ``(*, n_inputs, input_dim)``, components ``(*, n_components, component_dim)``,
attention ``(*, iterations, n_inputs, n_components)``; ``*`` is any batch shape (batch, or time x batch).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from iclr24.core.checks import check_int, check_number, check_tensor

__all__ = ["AID", "competitive_attention", "elu_plus_one", "shared_forward"]


def _dtype(module: nn.Module) -> torch.dtype:
    """The module's floating dtype: inputs must match it (convert them, or the module with ``.to(dtype)``)."""
    return next(module.parameters()).dtype


def elu_plus_one(x: torch.Tensor) -> torch.Tensor:
    """phi(x) = elu(x) + 1: the positive feature map AID uses for keys and queries (as linear attention does)."""
    return F.elu(x) + 1.0


def competitive_attention(keys: torch.Tensor, queries: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Attention weights of the components over the inputs, where components compete for each input.

    ``keys`` (*, n_inputs, d) and ``queries`` (*, n_components, d) -> weights (*, n_inputs, n_components):
    a softmax over the components for each input (the competition), then a renormalisation over the inputs so
    that each component's weights sum to one (a weighted mean of the values). ``eps`` keeps a component that
    wins no input from dividing by zero.
    """
    check_number("eps", eps, minimum=0.0)
    check_tensor("keys", keys, min_ndim=2, finite=False, shape_doc="(*, n_inputs, d)")
    check_tensor("queries", queries, min_ndim=2, finite=False, shape_doc="(*, n_components, d)")
    if keys.shape[-1] != queries.shape[-1]:
        raise ValueError(f"keys and queries must share the last dimension d, got {tuple(keys.shape)} and "
                         f"{tuple(queries.shape)}")
    logits = keys @ queries.transpose(-1, -2)  # (*, n_inputs, n_components)
    attention = logits.softmax(dim=-1) + eps
    return attention / attention.sum(dim=-2, keepdim=True)


class AID(nn.Module):
    r"""Attention-based Iterative Decomposition (Park et al., ICLR 2024).

    From input features :math:`x_1..x_N` it makes :math:`N_c` components :math:`s_j` of size :math:`D`:

    .. math::
        s^0 &= W_{init}\,[x_1; \dots; x_N] \quad\text{(the plain decomposition, reshaped to } N_c \times D)\\
        k_i &= \phi(W_k x_i),\quad v_i = W_v x_i,\quad \phi = \mathrm{elu} + 1\\
        q_j &= \phi\big((W_q s_j + s^0_j) / \sqrt{D}\big)\\
        a_{ij} &= \mathrm{softmax}_j(k_i \cdot q_j),\quad
            \tilde a_{ij} = \frac{a_{ij} + \epsilon}{\sum_i (a_{ij} + \epsilon)},\quad
            u_j = \textstyle\sum_i \tilde a_{ij} v_i\\
        s_j &\leftarrow s_j + \mathrm{MLP}(\mathrm{LayerNorm}(u_j)) / D \qquad (T \text{ times})\\
        \text{out}_j &= W_o\,[\mathrm{dropout}(s^0_j); s_j]

    The output is linear; the TPR model applies its own nonlinearity (tanh for FWM's roles, elu + 1 for a
    linear transformer's keys). With ``iterations=0`` the module returns :math:`s^0` itself: the decomposition
    AID improves on, so one flag switches a model between the two.

    Args:
        input_dim: size of each input feature.
        n_inputs: number of input features N.
        n_components: number of components N_c.
        component_dim: size D of each component.
        iterations: refinement iterations T (the paper uses 2 for SAR, 3 for sys-bAbI).
        mlp_hidden: hidden width of the update MLP.
        dropout: dropout on the initial components in the output map (0.5 in the paper).
        eps: the attention floor epsilon.
        initial_map: learn :math:`W_{init}`; False when the caller always passes its own ``initial`` (as the
            linear transformer does with its keys and values).
        share_with: another AID whose attention, update and output maps (and dropout) this one reuses, keeping
            only its own initial map (the paper's FWM shares them between the write and the read components).

    Shapes:
        - input ``x``: (*, n_inputs, input_dim)
        - optional ``initial``: (*, n_components, component_dim), replacing :math:`s^0` (a linear transformer
          passes its own keys and values here)
        - output: (*, n_components, component_dim); with ``return_attention`` also
          (*, iterations, n_inputs, n_components)

    Example:
        >>> aid = AID(input_dim=8, n_inputs=3, n_components=3, component_dim=16)
        >>> aid(torch.randn(5, 3, 8)).shape
        torch.Size([5, 3, 16])
    """

    def __init__(self, input_dim: int, n_inputs: int, n_components: int, component_dim: int, iterations: int = 2,
                 mlp_hidden: int = 64, dropout: float = 0.5, eps: float = 1e-8, initial_map: bool = True,
                 share_with: AID | None = None) -> None:
        super().__init__()
        self.input_dim = check_int("input_dim", input_dim, minimum=1)
        self.n_inputs = check_int("n_inputs", n_inputs, minimum=1)
        self.n_components = check_int("n_components", n_components, minimum=1)
        self.component_dim = check_int("component_dim", component_dim, minimum=1)
        self.iterations = check_int("iterations", iterations, minimum=0)
        self.mlp_hidden = check_int("mlp_hidden", mlp_hidden, minimum=1)
        self.eps = check_number("eps", eps, minimum=0.0, exclusive=True)
        check_number("dropout", dropout, minimum=0.0, maximum=1.0)
        self.initial = nn.Linear(n_inputs * input_dim, n_components * component_dim) if initial_map else None
        if self.iterations == 0:
            if share_with is not None:
                raise ValueError("share_with needs iterations >= 1: with iterations=0 there is nothing to share")
            return  # the plain decomposition: the initial map only, so it has the baseline's parameters
        if share_with is not None:
            if not isinstance(share_with, AID):
                raise TypeError(f"share_with must be an AID module, got {type(share_with).__name__}")
            mine = (input_dim, component_dim, mlp_hidden, iterations)
            theirs = (share_with.input_dim, share_with.component_dim, share_with.mlp_hidden, share_with.iterations)
            if mine != theirs:
                raise ValueError(f"share_with must have the same (input_dim, component_dim, mlp_hidden, iterations), "
                                 f"got {theirs} for {mine}")
            for name in ("to_q", "to_k", "to_v", "norm", "mlp", "output", "dropout"):
                setattr(self, name, getattr(share_with, name))  # registered here too: the weights are tied
        else:
            D = component_dim
            self.to_q = nn.Linear(D, D)
            self.to_k = nn.Linear(input_dim, D)
            self.to_v = nn.Linear(input_dim, D)
            self.norm = nn.LayerNorm(D)
            self.mlp = nn.Sequential(nn.Linear(D, mlp_hidden), nn.ReLU(), nn.Linear(mlp_hidden, D))
            self.output = nn.Linear(2 * D, D)
            self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, initial: torch.Tensor | None = None,
                return_attention: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        x = check_tensor("x", x, min_ndim=2, dtypes=(_dtype(self),), shape_doc="(*, n_inputs, input_dim)")
        if x.shape[-2:] != (self.n_inputs, self.input_dim):
            raise ValueError(f"x must end in (n_inputs, input_dim) = ({self.n_inputs}, {self.input_dim}), "
                             f"got shape {tuple(x.shape)}")
        batch = x.shape[:-2]
        D = self.component_dim
        if initial is None:
            if self.initial is None:
                raise ValueError("initial must be given: this AID has no initial map (initial_map=False)")
            s0 = self.initial(x.flatten(-2)).unflatten(-1, (self.n_components, D))  # (*, Nc, D)
        else:
            s0 = check_tensor("initial", initial, min_ndim=2, dtypes=(x.dtype,),
                              shape_doc="(*, n_components, component_dim)")
            if s0.shape != (*batch, self.n_components, D):
                raise ValueError(f"initial must have shape {(*batch, self.n_components, D)} (the batch shape of x, "
                                 f"n_components, component_dim), got {tuple(s0.shape)}")
        if self.iterations == 0:
            out = s0
            attention = x.new_zeros((*batch, 0, self.n_inputs, self.n_components))
            return (out, attention) if return_attention else out

        k = elu_plus_one(self.to_k(x))  # (*, N, D)
        v = self.to_v(x)  # (*, N, D)
        s = s0
        maps = []
        for _ in range(self.iterations):
            q = elu_plus_one((self.to_q(s) + s0) / math.sqrt(D))  # (*, Nc, D)
            a = competitive_attention(k, q, self.eps)  # (*, N, Nc)
            u = a.transpose(-1, -2) @ v  # (*, Nc, D)
            s = s + self.mlp(self.norm(u)) / D
            maps.append(a)
        out = self.output(torch.cat([self.dropout(s0), s], dim=-1))
        return (out, torch.stack(maps, dim=-3)) if return_attention else out

    def extra_repr(self) -> str:
        return (f"input_dim={self.input_dim}, n_inputs={self.n_inputs}, n_components={self.n_components}, "
                f"component_dim={self.component_dim}, iterations={self.iterations}")


_SHARED = ("to_q", "to_k", "to_v", "norm", "mlp", "output", "dropout")


def shared_forward(modules: Sequence[AID], x: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``[m(x, return_attention=True) for m in modules]`` in one pass, for AIDs tied by ``share_with``.

    Tied modules differ in their initial maps only, so their keys and values are the same and every per-component
    map (queries, LayerNorm, update MLP, output) can run on all their components at once; only the competition
    (the softmax over components) stays within each module. The same numbers as the modules one by one (up to
    floating-point order; tested), with the dropout masks drawn in the same order; about half the operations.
    """
    if not modules or not all(isinstance(m, AID) for m in modules):
        raise TypeError("modules must be a non-empty sequence of AID modules")
    first = modules[0]
    if first.iterations == 0 or any(m.initial is None or m.iterations != first.iterations or m.eps != first.eps
                                    or any(getattr(m, n) is not getattr(first, n) for n in _SHARED)
                                    or (m.n_inputs, m.input_dim) != (first.n_inputs, first.input_dim)
                                    for m in modules):
        raise ValueError("shared_forward needs AIDs with iterations >= 1 and their own initial maps, tied by "
                         "share_with (the same attention, update and output maps, iterations and eps)")
    x = check_tensor("x", x, min_ndim=2, dtypes=(_dtype(first),), shape_doc="(*, n_inputs, input_dim)")
    if x.shape[-2:] != (first.n_inputs, first.input_dim):
        raise ValueError(f"x must end in (n_inputs, input_dim) = ({first.n_inputs}, {first.input_dim}), "
                         f"got shape {tuple(x.shape)}")
    D = first.component_dim
    sizes = [m.n_components for m in modules]
    initial = [m.initial(x.flatten(-2)).unflatten(-1, (m.n_components, D)) for m in modules]  # (*, Nc_m, D) each
    s0 = torch.cat(initial, dim=-2)  # (*, sum Nc, D)
    k = elu_plus_one(first.to_k(x))  # (*, N, D)
    v = first.to_v(x)  # (*, N, D)
    s = s0
    maps = []
    for _ in range(first.iterations):
        q = elu_plus_one((first.to_q(s) + s0) / math.sqrt(D))  # (*, sum Nc, D)
        a = torch.cat([competitive_attention(k, q_m, first.eps) for q_m in q.split(sizes, dim=-2)], dim=-1)
        u = a.transpose(-1, -2) @ v  # (*, sum Nc, D)
        s = s + first.mlp(first.norm(u)) / D
        maps.append(a)
    dropped = torch.cat([first.dropout(s0_m) for s0_m in initial], dim=-2)  # one draw per module, in order
    out = first.output(torch.cat([dropped, s], dim=-1))
    attention = torch.stack(maps, dim=-3)  # (*, iterations, N, sum Nc)
    return list(zip(out.split(sizes, dim=-2), attention.split(sizes, dim=-1)))
