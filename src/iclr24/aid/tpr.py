"""TPR models AID plugs into, each switching between AID and its own decomposition with one argument.

- :class:`FastWeightMemory`: the Fast Weight Memory of Schlag, Munkhdalai and Schmidhuber (ICLR 2021) in the
  form the AID paper uses for SAR: an LSTM reads ``n_inputs`` projections of each token, the components are
  made from its states, an order-3 TPR memory is written with the delta rule and read by chained unbinding.
- :class:`LinearTransformerLayer`: a causal linear-attention layer (Katharopoulos et al., 2020) whose keys and
  values AID refines from 2H sub-vectors of the token (the paper's WikiText-103 plug-in).

``decomposition="mlp"`` is the model's original decomposition (one linear map of the concatenated features,
AID's initial components); ``decomposition="aid"`` refines it. Everything else is shared, so the two differ
in the decomposition only.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from iclr24.aid.module import AID, _dtype, elu_plus_one, shared_forward
from iclr24.core.checks import check_int, check_number, check_tensor

__all__ = ["FastWeightMemory", "LinearTransformerLayer", "causal_linear_attention", "memory_reads", "tpr_read",
           "tpr_write"]

DECOMPOSITIONS = ("aid", "mlp")
MEMORY_FORMS = ("dual", "tensor")


def _check_decomposition(decomposition: str) -> str:
    if decomposition not in DECOMPOSITIONS:
        raise ValueError(f"decomposition must be one of {DECOMPOSITIONS}, got {decomposition!r}")
    return decomposition


_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def tpr_write(memory: torch.Tensor, role1: torch.Tensor, role2: torch.Tensor, filler: torch.Tensor,
              gate: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """One delta-rule write of an order-3 TPR memory.

    ``memory`` (B, D, D, D); ``role1``, ``role2``, ``filler`` (B, D); ``gate`` (B, 1). What the memory holds
    for role1 (x) role2 is replaced by the gated new filler, then the memory is shrunk back to norm <= 1:
    M <- M + r1 (x) r2 (x) scale * gate * (f - M(r1, r2)); M <- M / max(||M||, 1).
    """
    check_tensor("memory", memory, ndim=4, dtypes=_FLOATS, finite=False, shape_doc="(B, D, D, D)")
    B, D = memory.shape[0], memory.shape[-1]
    for name, x, shape in (("role1", role1, (B, D)), ("role2", role2, (B, D)), ("filler", filler, (B, D)),
                           ("gate", gate, (B, 1))):
        check_tensor(name, x, dtypes=_FLOATS, finite=False)
        if x.shape != shape or memory.shape[1:] != (D, D, D):
            raise ValueError(f"{name} must be {shape} for memory (B, D, D, D) = {tuple(memory.shape)}, got shape "
                             f"{tuple(x.shape)}")
    role = torch.einsum("br,bt->brt", role1, role2)  # (B, D, D)
    stored = torch.einsum("brt,brtf->bf", role, memory)  # (B, D): what the memory returns for this role now
    memory = memory + torch.einsum("brt,bf->brtf", role, scale * gate * (filler - stored))
    norm = memory.flatten(1).norm(dim=1).clamp(min=1.0)
    return memory / norm[:, None, None, None]


def tpr_read(memory: torch.Tensor, unbind1: torch.Tensor, unbind2: torch.Tensor,
             norm: nn.Module | None = None) -> torch.Tensor:
    """Chained unbinding of an order-3 TPR memory.

    ``memory`` (B, D, D, D), ``unbind1`` (B, D), ``unbind2`` (B, R, D) -> (B, D): u <- M(u, unbind2[:, i])
    for i = 1..R, each read followed by ``norm`` (LayerNorm in the FWM; None reads the raw tensor product).
    """
    check_tensor("memory", memory, ndim=4, dtypes=_FLOATS, finite=False, shape_doc="(B, D, D, D)")
    B, D = memory.shape[0], memory.shape[-1]
    check_tensor("unbind1", unbind1, dtypes=_FLOATS, finite=False)
    check_tensor("unbind2", unbind2, dtypes=_FLOATS, finite=False)
    if unbind1.shape != (B, D) or unbind2.dim() != 3 or unbind2.shape[0] != B or unbind2.shape[2] != D:
        raise ValueError(f"unbind1 must be (B, D) and unbind2 (B, R, D) for memory (B, D, D, D) = "
                         f"{tuple(memory.shape)}, got {tuple(unbind1.shape)} and {tuple(unbind2.shape)}")
    u = unbind1
    for i in range(unbind2.shape[1]):
        u = torch.einsum("bsrv,bs,br->bv", memory, u, unbind2[:, i])
        if norm is not None:
            u = norm(u)
    return u


def memory_reads(write: torch.Tensor, read: torch.Tensor, gate: torch.Tensor, scale: float,
                 norm: nn.Module | None = None, form: str = "dual") -> torch.Tensor:
    """The read of every step of a sequence of :func:`tpr_write` / :func:`tpr_read` steps.

    ``write`` (B, T, 3, D) = (role 1, role 2, filler) and ``read`` (B, T, 1 + R, D) = (key, R chained keys) per
    step, ``gate`` (B, T, 1) -> reads (B, T, D): at step t, write then read.

    ``form="tensor"`` keeps the D x D x D memory: O(T D^3). ``form="dual"`` never builds it: the memory is
    a weighted sum of the written r1_s (x) r2_s (x) delta_s, so a read is a sum over the steps written so far
    with weights (u1 . r1_s)(u2 . r2_s), and the norm bound needs only a running squared norm:
    ||M + K (x) d||^2 = ||M||^2 + 2 d . M(K) + ||K||^2 ||d||^2. That is O(T^2 D), much less at T < D^2;
    the two are equal (tested). The dual form squares the memory's norm, so fillers beyond ~1e18 overflow in
    float32 (FWM's tanh keeps them within 1).
    """
    if form not in MEMORY_FORMS:
        raise ValueError(f"form must be one of {MEMORY_FORMS}, got {form!r}")
    write = check_tensor("write", write, ndim=4, shape_doc="(B, T, 3, D)")
    B, T, _, D = write.shape
    read = check_tensor("read", read, ndim=4, dtypes=(write.dtype,), shape_doc="(B, T, 1 + R, D)")
    gate = check_tensor("gate", gate, ndim=3, dtypes=(write.dtype,), shape_doc="(B, T, 1)")
    if write.shape[2] != 3 or read.shape[:2] != (B, T) or read.shape[2] < 2 or read.shape[3] != D \
            or gate.shape != (B, T, 1):
        raise ValueError(f"write must be (B, T, 3, D), read (B, T, 1 + R, D) with R >= 1 and gate (B, T, 1); got "
                         f"{tuple(write.shape)}, {tuple(read.shape)} and {tuple(gate.shape)}")
    scale = check_number("scale", scale)
    if T == 0:
        return write.new_zeros(B, 0, D)
    if form == "tensor":
        memory = write.new_zeros(B, D, D, D)
        reads = []
        for t in range(T):
            memory = tpr_write(memory, write[:, t, 0], write[:, t, 1], write[:, t, 2], gate[:, t], scale)
            reads.append(tpr_read(memory, read[:, t, 0], read[:, t, 1:], norm))
        return torch.stack(reads, dim=1)

    r1, r2, filler = write.unbind(2)  # (B, T, D) each
    keys = (r1 @ r1.transpose(1, 2)) * (r2 @ r2.transpose(1, 2))  # (B, T, T): <r1_t (x) r2_t, r1_s (x) r2_s>
    first = (read[:, :, 0] @ r1.transpose(1, 2)) * (read[:, :, 1] @ r2.transpose(1, 2))  # first read's weights
    # Only the writes are sequential (each delta depends on what the memory stored before it). The loop records,
    # for every step t, the shrink factor each delta_s carries then (row t of `carried`, zero for s > t); the
    # reads, which nothing later depends on, are then computed for all steps at once.
    deltas: list[torch.Tensor] = []  # delta_s: what step s added, before later shrinking
    weight = write.new_zeros(B, T)  # the shrink factor each delta_s carries now (0 for steps not yet written)
    steps = torch.eye(T, dtype=write.dtype, device=write.device)
    squared_norm = write.new_zeros(B)
    carried = []
    for t in range(T):
        if t:
            stored = torch.einsum("bs,bsd->bd", weight[:, :t] * keys[:, t, :t],
                                  torch.stack(deltas, 1))  # M(r1 (x) r2)
        else:
            stored = torch.zeros_like(filler[:, 0])
        delta = scale * gate[:, t] * (filler[:, t] - stored)
        squared_norm = (squared_norm + 2 * (stored * delta).sum(-1)
                        + keys[:, t, t] * delta.square().sum(-1)).clamp_min(0.0)
        shrink = squared_norm.clamp_min(1.0).sqrt()  # max(||M||, 1)
        squared_norm = squared_norm / shrink.square()
        weight = (weight + steps[t]) / shrink[:, None]
        deltas.append(delta)
        carried.append(weight)
    carried = torch.stack(carried, 1)  # (B, T, T): lower triangular
    stacked = torch.stack(deltas, 1)  # (B, T, D)
    u = (carried * first) @ stacked  # (B, T, D): the read of every step, after its write
    u = norm(u) if norm is not None else u
    for i in range(2, read.shape[2]):  # the chained reads key the memory with the previous read
        w = (u @ r1.transpose(1, 2)) * (read[:, :, i] @ r2.transpose(1, 2))  # (B, T, T)
        u = (carried * w) @ stacked
        u = norm(u) if norm is not None else u
    return u


class FastWeightMemory(nn.Module):
    r"""Fast Weight Memory (order-3 TPR) with AID or the original MLP decomposition.

    Per token: ``n_inputs`` linear projections of the token each pass through one shared LSTM, giving input
    features :math:`c_{t,1..N}`. The decomposition turns them into write components (role 1, role 2, filler)
    and read components (unbinding key and ``n_reads`` chained keys), each through tanh. Then

    .. math::
        M_t = \mathrm{write}(M_{t-1}, r_1, r_2, f, \sigma(w^\top c_t + 1)),\qquad
        y_t = W_{out}\big(\mathrm{dropout}(W_h c_t) + W_m\,\mathrm{read}(M_t, u_1, u_2)\big)

    Args:
        input_dim: size of each token's input vector.
        output_dim: number of output classes per token.
        decomposition: ``"aid"`` or ``"mlp"`` (AID's initial components only: the original FWM).
        n_inputs: number of input features per token (3 in the paper).
        input_proj_dim: size of each projection fed to the LSTM.
        hidden: LSTM width. ``lstm_layers``: its depth.
        component_dim: size D of the components; the memory is D x D x D.
        n_reads: chained unbinding steps.
        iterations, mlp_hidden: AID's (ignored for ``"mlp"``).
        dropout: on the LSTM shortcut and on AID's initial components.
        memory_form: ``"dual"`` (default) computes the reads without building the D^3 memory, ``"tensor"``
            builds it; the same numbers (see :func:`memory_reads`).

    Shapes:
        - input: (batch, time, input_dim)
        - output: logits (batch, time, output_dim); with ``return_details`` also a dict of the write and read
          components (batch, time, 3 | 1 + n_reads, D) and AID's attention (batch, time, iterations, n_inputs, 3
          | 1 + n_reads), and the write gate (batch, time, 1).
    """

    def __init__(self, input_dim: int, output_dim: int, *, decomposition: str = "aid", n_inputs: int = 3,
                 input_proj_dim: int = 32, hidden: int = 256, lstm_layers: int = 1, component_dim: int = 32,
                 n_reads: int = 1, iterations: int = 2, mlp_hidden: int = 64, dropout: float = 0.5,
                 memory_form: str = "dual") -> None:
        super().__init__()
        self.decomposition = _check_decomposition(decomposition)
        if memory_form not in MEMORY_FORMS:
            raise ValueError(f"memory_form must be one of {MEMORY_FORMS}, got {memory_form!r}")
        self.memory_form = memory_form
        self.input_dim = check_int("input_dim", input_dim, minimum=1)
        self.output_dim = check_int("output_dim", output_dim, minimum=1)
        self.n_inputs = check_int("n_inputs", n_inputs, minimum=1)
        self.input_proj_dim = check_int("input_proj_dim", input_proj_dim, minimum=1)
        self.hidden = check_int("hidden", hidden, minimum=1)
        self.component_dim = D = check_int("component_dim", component_dim, minimum=1)
        self.n_reads = check_int("n_reads", n_reads, minimum=1)
        check_number("dropout", dropout, minimum=0.0, maximum=1.0)
        steps = iterations if decomposition == "aid" else 0
        self.input_proj = nn.Linear(input_dim, n_inputs * input_proj_dim)
        self.lstm = nn.LSTM(input_proj_dim, hidden, check_int("lstm_layers", lstm_layers, minimum=1),
                            batch_first=True)
        self.write_decomposition = AID(hidden, n_inputs, 3, D, steps, mlp_hidden, dropout)
        self.read_decomposition = AID(hidden, n_inputs, 1 + n_reads, D, steps, mlp_hidden, dropout,
                                      share_with=self.write_decomposition if steps else None)
        self.write_gate = nn.Linear(n_inputs * hidden, 1)
        self.read_norm = nn.LayerNorm(D, elementwise_affine=False)
        self.shortcut = nn.Linear(n_inputs * hidden, hidden)
        self.memory_out = nn.Linear(D, hidden)
        self.classifier = nn.Linear(hidden, output_dim)
        self.dropout = nn.Dropout(dropout)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The input features c (batch, time, n_inputs, hidden): each projection of a token through the LSTM."""
        B, T, _ = x.shape
        streams = self.input_proj(x).view(B, T, self.n_inputs, self.input_proj_dim)
        streams = streams.permute(0, 2, 1, 3).reshape(B * self.n_inputs, T, self.input_proj_dim)
        context, _ = self.lstm(streams)  # one LSTM, shared by the N streams
        return context.view(B, self.n_inputs, T, self.hidden).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor, return_details: bool = False):
        parts = self.decompose(x)
        recalled = memory_reads(parts["write"], parts["read"], parts["gate"], 1.0 / self.component_dim,
                                self.read_norm, self.memory_form)  # (B, T, D)
        logits = self.readout(parts.pop("features"), recalled)
        return (logits, parts) if return_details else logits

    def decompose(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """The first half of :meth:`forward`, up to the memory: the concatenated input features (``features``, (B,
        T, N * hidden)), the write and read components, the write gate and AID's attention. The memory has no
        parameters, so the reads of several models can run as one batch
        (:func:`~iclr24.aid.training.train_sar_together`); :meth:`readout` is the second half."""
        x = check_tensor("x", x, ndim=3, dtypes=(_dtype(self),), shape_doc="(batch, time, input_dim)")
        if x.shape[-1] != self.input_dim or x.shape[1] == 0:
            raise ValueError(f"x must have input_dim = {self.input_dim} features and at least one step, got shape "
                             f"{tuple(x.shape)}")
        c = self.features(x)  # (B, T, N, H)
        c_cat = c.flatten(2)  # (B, T, N * H)
        if self.write_decomposition.iterations:  # the two AIDs are tied: one pass over both (the same numbers)
            (write, write_attention), (read, read_attention) = shared_forward(
                [self.write_decomposition, self.read_decomposition], c)
        else:
            write, write_attention = self.write_decomposition(c, return_attention=True)  # (B, T, 3, D)
            read, read_attention = self.read_decomposition(c, return_attention=True)  # (B, T, 1 + R, D)
        write, read = torch.tanh(write), torch.tanh(read)
        gate = torch.sigmoid(self.write_gate(c_cat) + 1.0)  # (B, T, 1); +1 opens the gate at the start
        return {"features": c_cat, "write": write, "read": read, "gate": gate, "write_attention": write_attention,
                "read_attention": read_attention}

    def readout(self, features: torch.Tensor, recalled: torch.Tensor) -> torch.Tensor:
        """The second half of :meth:`forward`: logits from the features of :meth:`decompose` and the memory's
        reads (B, T, D)."""
        return self.classifier(self.dropout(self.shortcut(features)) + self.memory_out(recalled))

    def extra_repr(self) -> str:
        return f"decomposition={self.decomposition!r}, component_dim={self.component_dim}, n_reads={self.n_reads}"


def causal_linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    r"""Causal linear attention with positive features: :math:`o_t = \frac{\sum_{s \le t} (q_t \cdot k_s) v_s}
    {\sum_{s \le t} q_t \cdot k_s + \epsilon}`.

    ``q``, ``k`` (B, H, T, d) already mapped to positive features, ``v`` (B, H, T, d_v) -> (B, H, T, d_v). The
    masked quadratic form is used (cheaper than the recurrent fast-weight form at the short lengths this
    package trains on; the two are equal, which the tests check).
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, x, ndim=4, dtypes=_FLOATS, finite=False, shape_doc="(B, H, T, d)")
    if q.shape != k.shape or v.shape[:-1] != q.shape[:-1]:
        raise ValueError(f"q and k must be (B, H, T, d) and v (B, H, T, d_v) with the same B, H, T; got "
                         f"{tuple(q.shape)}, {tuple(k.shape)} and {tuple(v.shape)}")
    scores = (q @ k.transpose(-1, -2)).tril()  # (B, H, T, T), zero above the diagonal: causal
    return (scores @ v) / (scores.sum(-1, keepdim=True) + eps)


class LinearTransformerLayer(nn.Module):
    r"""A causal linear-transformer layer whose keys and values can come from AID.

    q, k, v per head from one linear map of the token h; with ``decomposition="aid"`` the 2H heads' keys and
    values are AID's initial components, refined by attention over 2H sub-vectors of a linear map of h. Then
    :math:`o = \mathrm{LayerNorm}(h + \mathrm{dropout}(W_o\,\mathrm{LinAttn}(\phi(q), \phi(k), v) / \sqrt{d}))`.

    Args:
        d_model: token width. n_heads: heads H. d_head: per-head width.
        decomposition: ``"aid"`` or ``"mlp"`` (the plain linear transformer).
        iterations: AID iterations. dropout: on the layer output. aid_dropout: AID's dropout on the layer's own
        keys and values (0.5, as the paper's code hard-codes it). eps: the normaliser's floor and AID's.
        sum_norm: divide each feature-mapped key and query by its sum before the attention (the official layer's
        ``use_sum_norm``; off in the paper's WikiText-103 run, attn_type 9998, which this layer equals to 1e-15).

    Shapes:
        - input: (batch, time, d_model)
        - output: (batch, time, d_model)
    """

    def __init__(self, d_model: int, n_heads: int, d_head: int, *, decomposition: str = "aid", iterations: int = 2,
                 dropout: float = 0.0, aid_dropout: float = 0.5, eps: float = 1e-5, sum_norm: bool = False) -> None:
        super().__init__()
        self.decomposition = _check_decomposition(decomposition)
        if not isinstance(sum_norm, bool):
            raise TypeError(f"sum_norm must be a bool, got {type(sum_norm).__name__}")
        self.sum_norm = sum_norm
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.n_heads = H = check_int("n_heads", n_heads, minimum=1)
        self.d_head = check_int("d_head", d_head, minimum=1)
        self.eps = check_number("eps", eps, minimum=0.0, exclusive=True)
        self.qkv = nn.Linear(d_model, 3 * H * d_head, bias=False)
        if decomposition == "aid":
            self.aid_inputs = nn.Linear(d_model, 2 * H * d_head)
            self.aid = AID(d_head, 2 * H, 2 * H, d_head, iterations, mlp_hidden=2 * d_head, dropout=aid_dropout,
                           eps=eps, initial_map=False)
        self.out = nn.Linear(H * d_head, d_model, bias=False)
        self.norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(check_number("dropout", dropout, minimum=0.0, maximum=1.0))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = check_tensor("h", h, ndim=3, dtypes=(_dtype(self),), shape_doc="(batch, time, d_model)")
        if h.shape[-1] != self.d_model:
            raise ValueError(f"h must have d_model = {self.d_model} features, got shape {tuple(h.shape)}")
        B, T, _ = h.shape
        H, d = self.n_heads, self.d_head
        q, k, v = self.qkv(h).view(B, T, 3, H, d).unbind(2)  # each (B, T, H, d)
        if self.decomposition == "aid":
            inputs = self.aid_inputs(h).view(B, T, 2 * H, d)
            k, v = self.aid(inputs, initial=torch.cat([k, v], dim=2)).split(H, dim=2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))  # (B, H, T, d)
        q, k = elu_plus_one(q), elu_plus_one(k)
        if self.sum_norm:  # q's factor cancels in the ratio (up to eps); k's reweights the past tokens
            q, k = q / q.sum(-1, keepdim=True), k / k.sum(-1, keepdim=True)
        o = causal_linear_attention(q, k, v, self.eps) / math.sqrt(d)
        o = o.transpose(1, 2).reshape(B, T, H * d)
        return self.norm(h + self.dropout(self.out(o)))

    def extra_repr(self) -> str:
        return (f"decomposition={self.decomposition!r}, n_heads={self.n_heads}, d_head={self.d_head}"
                + (", sum_norm=True" if self.sum_norm else ""))

