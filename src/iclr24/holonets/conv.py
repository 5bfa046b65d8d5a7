"""FaberConv and FaberNet: spectral convolutions on directed graphs (PyTorch Geometric layers).

Koke & Cremers, "HoloNets: Spectral Convolutions do Extend to Directed Graphs", ICLR 2024.
https://arxiv.org/abs/2310.02232
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import MessagePassing
from torch_geometric.nn.dense.linear import Linear

from iclr24.core.checks import check_int, check_tensor
from iclr24.holonets.operators import GraphCache, _characteristic_operator, as_edge_index, check_graph

__all__ = ["FaberConv", "FaberNet"]


class FaberConv(MessagePassing):
    r"""The FaberNet layer from `"HoloNets: Spectral Convolutions do Extend to Directed Graphs"
    <https://arxiv.org/abs/2310.02232>`_ (ICLR 2024).

    .. math::
        \mathbf{X}' = \alpha \sum_{k=1}^{K} 2^{-(k-1)}\, T^k \mathbf{X} \mathbf{W}_k
        + (1 - \alpha) \sum_{k=1}^{K} 2^{-(k-1)}\, T'^k \mathbf{X} \mathbf{W}'_k
        + \mathbf{X} \mathbf{W}_0 + \mathbf{b}

    with the characteristic operator :math:`T = D_{out}^{e} A D_{in}^{e}` (``e = -1/4``) and
    :math:`T'` its counterpart for :math:`A^\top`. Faber polynomials on a disc are monomials;
    the geometric decay :math:`2^{-(k-1)}` reflects a filter holomorphic on a larger disc
    (``weight_penalty="exp"``; the authors' ``"lin"`` uses :math:`1, 1, 1/2, \dots, 1/(K-1)`).
    Each branch keeps its own iterate :math:`T^k X` and its own weights (the authors' code
    mixes them up in two places). With ``complex_weights=True`` every weight is
    :math:`W = W_r + i W_i` and the output is complex; inputs may be real or complex.

    Args:
        in_channels (int): Size of each input sample.
        out_channels (int): Size of each output sample.
        K (int, optional): Number of powers per branch. (default: :obj:`3`)
        alpha (float or Tensor, optional): Weight of the forward branch, in [0, 1]; a 1-element
            parameter makes it learnable (FaberNet shares one across its layers). (default: :obj:`0.5`)
        exponent (float, optional): Degree exponent :math:`e` of :math:`T`. (default: :obj:`-0.25`)
        complex_weights (bool, optional): Complex weights. (default: :obj:`False`)
        root_weight (bool, optional): Add :math:`X W_0`. (default: :obj:`True`)
        weight_penalty (str, optional): Decay of the k-th power's term, :obj:`"exp"` (:math:`2^{-(k-1)}`)
            or :obj:`"lin"` (:math:`1` for k = 1, then :math:`1/(k-1)`), as the authors' code names them.
            (default: :obj:`"exp"`)
        bias (bool, optional): Add a learnable bias. (default: :obj:`True`)

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F_{in})` (real or complex), edge indices
          :math:`(2, |\mathcal{E}|)`, edge weights :math:`(|\mathcal{E}|)` *(optional)*
        - **output:** node features :math:`(|\mathcal{V}|, F_{out})`, complex if
          ``complex_weights`` or the input is complex
    """

    def __init__(self, in_channels: int, out_channels: int, K: int = 3, alpha: float | Tensor = 0.5,
                 exponent: float = -0.25, complex_weights: bool = False, root_weight: bool = True, bias: bool = True,
                 weight_penalty: str = "exp") -> None:
        super().__init__(aggr="add")
        check_int("in_channels", in_channels, minimum=1)
        check_int("out_channels", out_channels, minimum=1)
        check_int("K", K, minimum=1)
        if isinstance(alpha, Tensor):
            if alpha.numel() != 1:
                raise ValueError(f"alpha must be a number or a 1-element tensor, got shape {tuple(alpha.shape)}")
        elif not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
        if weight_penalty not in ("exp", "lin"):
            raise ValueError(f"weight_penalty must be 'exp' or 'lin', got {weight_penalty!r}")
        self.weight_penalty = weight_penalty
        self.in_channels, self.out_channels, self.K = in_channels, out_channels, K
        self.alpha, self.exponent, self.complex_weights = alpha, exponent, complex_weights
        parts = ("real", "imag") if complex_weights else ("real",)

        def linears(n):
            return nn.ModuleList(Linear(in_channels, out_channels, bias=False) for _ in range(n))

        self.lins_fwd = nn.ModuleDict({p: linears(K) for p in parts})
        self.lins_bwd = nn.ModuleDict({p: linears(K) for p in parts})
        self.lin_root = nn.ModuleDict({p: linears(1) for p in parts}) if root_weight else None
        self.bias = nn.ParameterDict({p: nn.Parameter(torch.empty(out_channels)) for p in parts}) if bias else None
        self._operators = GraphCache()  # T and T' of the graphs seen last (a fixed graph: computed once)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        super().reset_parameters()
        for group in (self.lins_fwd, self.lins_bwd, self.lin_root):
            if group is not None:
                for lins in group.values():
                    for lin in lins:
                        lin.reset_parameters()
        if self.bias is not None:
            for b in self.bias.values():
                nn.init.zeros_(b)

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None) -> Tensor:
        edge_index, edge_weight = as_edge_index(edge_index, edge_weight)  # a sparse adj_t is accepted, as in PyG
        check_tensor("x", x, ndim=2, shape_doc="(num_nodes, in_channels)")
        if x.size(1) != self.in_channels:
            raise ValueError(f"x has {x.size(1)} channels, this layer expects in_channels={self.in_channels}")
        n = x.size(0)
        ops = self._operators((edge_index, edge_weight, n, self.exponent),
                              lambda: self._characteristic_operators(edge_index, n, edge_weight))
        out = self._linear(self.lin_root, 0, x) if self.lin_root is not None else 0
        iterates = {"fwd": x, "bwd": x}
        alpha = self.alpha.reshape(()) if isinstance(self.alpha, Tensor) else self.alpha
        for k in range(self.K):
            for branch, lins, weight in (("fwd", self.lins_fwd, alpha), ("bwd", self.lins_bwd, 1 - alpha)):
                iterates[branch] = self._propagate(ops[branch], iterates[branch])  # T^{k+1} x, its own iterate
                out = out + (weight * self._decay(k)) * self._linear(lins, k, iterates[branch])
        if self.bias is not None:
            out = out + (torch.complex(self.bias["real"], self.bias["imag"]) if self.complex_weights
                         else self.bias["real"])
        return out

    def _characteristic_operators(self, edge_index: Tensor, n: int, edge_weight: Tensor | None) -> dict:
        check_graph(edge_index, n, edge_weight)
        return {
            "fwd": _characteristic_operator(edge_index, n, edge_weight, exponent=self.exponent, reverse=False),
            "bwd": _characteristic_operator(edge_index, n, edge_weight, exponent=self.exponent, reverse=True),
        }

    def _decay(self, k: int) -> float:
        """The weight of the (k+1)-th power's term."""
        if self.weight_penalty == "exp":
            return 2.0**-k
        return 1.0 if k == 0 else 1.0 / k

    def _propagate(self, op: tuple[Tensor, Tensor], z: Tensor) -> Tensor:
        index, weight = op
        if z.is_complex():  # T is real: propagate both parts
            return torch.complex(self.propagate(index, x=z.real, edge_weight=weight),
                                 self.propagate(index, x=z.imag, edge_weight=weight))
        return self.propagate(index, x=z, edge_weight=weight)

    def _linear(self, group: nn.ModuleDict, k: int, z: Tensor) -> Tensor:
        """``z W`` for real or complex ``z`` and real or complex ``W = P + iQ``."""
        P = group["real"][k]
        if not self.complex_weights:
            return torch.complex(P(z.real), P(z.imag)) if z.is_complex() else P(z)
        Q = group["imag"][k]
        a, b = (z.real, z.imag) if z.is_complex() else (z, None)
        if b is None:
            return torch.complex(P(a), Q(a))
        return torch.complex(P(a) - Q(b), Q(a) + P(b))

    def message(self, x_j: Tensor, edge_weight: Tensor) -> Tensor:
        return edge_weight.view(-1, 1) * x_j

    def __repr__(self) -> str:
        kind = ", complex_weights=True" if self.complex_weights else ""
        alpha = "learned" if isinstance(self.alpha, Tensor) else self.alpha
        penalty = ", weight_penalty='lin'" if self.weight_penalty == "lin" else ""
        return (f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, K={self.K}, "
                f"alpha={alpha}{kind}{penalty})")


class FaberNet(nn.Module):
    """FaberNet: stacked :class:`FaberConv` layers, ``|x|`` nonlinearity, row normalisation,
    jumping knowledge and a linear read-out (complex features read out as ``[Re, Im]``).

    Args:
        in_channels, hidden_channels, out_channels (int): Layer sizes.
        num_layers (int): FaberConv layers. (default: 2)
        K, alpha, exponent, complex_weights, root_weight, weight_penalty: passed to every :class:`FaberConv`.
        learn_alpha (bool): One learnable ``alpha``, shared by all layers (the authors' option). (default: False)
        jumping_knowledge (str or None): ``"max"``, ``"cat"`` or ``None`` (last layer only).
        normalize (bool or str): L2-normalise each node's features after every layer. ``True`` or ``"joint"``
            divides complex features by their joint modulus; ``"separate"`` normalises the real and imaginary
            parts each on its own, as the authors' code does (the same for real features). (default: True)
        negative_slope (float or sequence of floats): LeakyReLU slope, one for all layers or one per layer;
            ``-1`` is ``|x|`` (the paper), ``0`` is ReLU. (default: -1.0)
        dropout (float): Dropout after every layer. (default: 0.0)

    Shapes:
        - **input:** node features ``(num_nodes, in_channels)``, edge indices ``(2, num_edges)``
        - **output:** logits ``(num_nodes, out_channels)``
    """

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int, num_layers: int = 2, K: int = 3,
                 alpha: float = 0.5, exponent: float = -0.25, complex_weights: bool = False,
                 jumping_knowledge: str | None = "max", normalize: bool | str = True,
                 negative_slope: float | Sequence[float] = -1.0, dropout: float = 0.0, root_weight: bool = True,
                 learn_alpha: bool = False, weight_penalty: str = "exp") -> None:
        super().__init__()
        check_int("num_layers", num_layers, minimum=1)
        if jumping_knowledge not in ("max", "cat", None):
            raise ValueError(f"jumping_knowledge must be 'max', 'cat' or None, got {jumping_knowledge!r}")
        if normalize not in (True, False, "joint", "separate"):
            raise ValueError(f"normalize must be True, False, 'joint' or 'separate', got {normalize!r}")
        slopes = [negative_slope] * num_layers if isinstance(negative_slope, (int, float)) else list(negative_slope)
        if len(slopes) != num_layers:
            raise ValueError(f"negative_slope must be one number or one per layer ({num_layers}), got {negative_slope}")
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
        # The authors share one alpha across layers; learnable when learn_alpha.
        self.alpha = nn.Parameter(torch.tensor([float(alpha)])) if learn_alpha else alpha
        self.convs = nn.ModuleList(
            FaberConv(in_channels if i == 0 else hidden_channels, hidden_channels, K=K, alpha=self.alpha,
                      exponent=exponent, complex_weights=complex_weights, root_weight=root_weight,
                      weight_penalty=weight_penalty)
            for i in range(num_layers))
        self.jumping_knowledge = jumping_knowledge
        self.normalize = "joint" if normalize is True else normalize
        self.negative_slopes, self.dropout = [float(v) for v in slopes], dropout
        width = hidden_channels * (num_layers if jumping_knowledge == "cat" else 1) * (2 if complex_weights else 1)
        self.lin = nn.Linear(width, out_channels)

    def reset_parameters(self) -> None:
        for conv in self.convs:
            conv.reset_parameters()
        self.lin.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None) -> Tensor:
        edge_index, edge_weight = as_edge_index(edge_index, edge_weight)  # converted once for every layer's cache
        layers = []
        for conv, slope in zip(self.convs, self.negative_slopes):
            x = conv(x, edge_index, edge_weight)
            x = self._act(x, slope)
            if self.normalize == "joint" or (self.normalize == "separate" and not x.is_complex()):
                norm = (x.abs() ** 2).sum(-1, keepdim=True).sqrt().clamp_min(1e-12)
                x = x / norm
            elif self.normalize == "separate":
                x = torch.complex(F.normalize(x.real, dim=-1), F.normalize(x.imag, dim=-1))
            if self.dropout:
                x = (torch.complex(F.dropout(x.real, self.dropout, self.training), F.dropout(x.imag, self.dropout,
                     self.training)) if x.is_complex() else F.dropout(x, self.dropout, self.training))
            layers.append(x)
        if self.jumping_knowledge == "max":
            x = torch.stack(layers).real.amax(0) if not layers[0].is_complex() else self._complex_max(layers)
        elif self.jumping_knowledge == "cat":
            x = torch.cat(layers, dim=-1)
        if x.is_complex():
            x = torch.cat([x.real, x.imag], dim=-1)
        return self.lin(x)

    @staticmethod
    def _act(x: Tensor, slope: float) -> Tensor:
        if x.is_complex():
            return torch.complex(F.leaky_relu(x.real, slope), F.leaky_relu(x.imag, slope))
        return F.leaky_relu(x, slope)

    @staticmethod
    def _complex_max(layers: list[Tensor]) -> Tensor:
        return torch.complex(torch.stack([z.real for z in layers]).amax(0),
                             torch.stack([z.imag for z in layers]).amax(0))
