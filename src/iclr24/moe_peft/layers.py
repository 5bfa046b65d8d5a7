"""MoV and MoLoRA layers: a frozen ``nn.Linear`` plus a router-weighted mixture of lightweight experts.

Both merge the experts *softly*, as the paper does: the router's probabilities weight the
experts' parameters (MoV) or their low-rank updates (MoLoRA), so a token costs one forward pass of the
base layer whatever the number of experts.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from iclr24.core import check_int, check_number
from iclr24.moe_peft.routing import Router, _keep_top_k, load_balancing_loss

__all__ = ["MoELinear", "MoLoRALinear", "MoVLinear"]


def _check_linear(base_layer: nn.Module) -> nn.Linear:
    if not isinstance(base_layer, nn.Linear):
        raise TypeError(f"base_layer must be an nn.Linear, got {type(base_layer).__name__}")
    return base_layer


class MoELinear(nn.Module):
    """What MoV and MoLoRA share: the frozen base layer, the router, top-k, and a record of routing.

    Every forward adds the tokens' routing probabilities to ``probability_sum`` (float64) and their
    top-1 expert to ``top1_count`` (int64), on the router's device, read by
    :meth:`MoEModel.router_statistics`. They are plain attributes, not buffers, so that casting the
    model to half precision cannot round the counts. (Every token passed counts, padding included,
    and a forward recomputed under gradient checkpointing counts twice.) While training with a
    load-balancing weight the last forward's probabilities are kept for :meth:`balance_loss`.

    ``weight`` and ``bias`` are the base layer's, as in peft, because some models read them directly
    (transformers' T5 checks ``wo.weight.dtype``).
    """

    def __init__(self, base_layer: nn.Linear, router_features: int, num_experts: int,
                 top_k: int | None = None, keep_probabilities: bool = False) -> None:
        super().__init__()
        self.base_layer = base_layer
        self.num_experts = check_int("num_experts", num_experts, minimum=1)
        self.top_k = None if top_k is None else check_int("top_k", top_k, minimum=1)
        if self.top_k is not None and self.top_k > num_experts:
            raise ValueError(f"top_k must be <= num_experts ({num_experts}), got {top_k}")
        weight = base_layer.weight
        self.router = Router(router_features, num_experts, device=weight.device, dtype=weight.dtype)
        self.keep_probabilities = keep_probabilities
        self.last_probabilities: torch.Tensor | None = None
        self.probability_sum: torch.Tensor | None = None
        self.top1_count: torch.Tensor | None = None
        self.reset_statistics()

    @property
    def weight(self) -> torch.Tensor:
        return self.base_layer.weight

    @property
    def bias(self) -> torch.Tensor | None:
        return self.base_layer.bias

    @property
    def in_features(self) -> int:
        return self.base_layer.in_features

    @property
    def out_features(self) -> int:
        return self.base_layer.out_features

    def _check_input(self, x: torch.Tensor) -> None:
        """The wrapped layer's input contract, said at this layer rather than deep inside a matmul."""
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{type(self).__name__} takes a tensor (*, {self.in_features}), got {type(x).__name__}")
        if x.dim() == 0 or x.shape[-1] != self.in_features:
            raise ValueError(f"{type(self).__name__} expects inputs (*, in_features={self.in_features}), got shape "
                             f"{tuple(x.shape)}")

    def route(self, h: torch.Tensor) -> torch.Tensor:
        """The merging weights ``(*, E)`` for the tokens ``h`` ``(*, router_features)``."""
        probs = self.router(h)
        with torch.no_grad():
            flat = probs.detach().reshape(-1, self.num_experts)
            if self.top1_count.device != flat.device:
                self.reset_statistics(flat.device)
            self.probability_sum += flat.sum(dim=0).to(self.probability_sum.dtype)
            self.top1_count += torch.bincount(flat.argmax(dim=-1), minlength=self.num_experts)
        self.last_probabilities = probs if (self.training and self.keep_probabilities) else None
        return probs if self.top_k is None else _keep_top_k(probs, self.top_k)

    def balance_loss(self) -> torch.Tensor | None:
        """The load-balancing loss of the last training forward, or None when none was kept."""
        if self.last_probabilities is None:
            return None
        return load_balancing_loss(self.last_probabilities, self.top_k or 1)

    def reset_statistics(self, device: torch.device | None = None) -> None:
        device = self.router.weight.device if device is None else device
        # MPS has no float64; elsewhere float64 keeps long sums exact enough
        self.probability_sum = torch.zeros(self.num_experts, device=device,
                                           dtype=torch.float32 if device.type == "mps" else torch.float64)
        self.top1_count = torch.zeros(self.num_experts, device=device, dtype=torch.int64)

    def adapter_parameters(self) -> dict[str, nn.Parameter]:
        return {name: p for name, p in self.named_parameters() if not name.startswith("base_layer.")}


class MoVLinear(MoELinear):
    """Mixture of (IA)^3 vectors around a frozen linear layer.

    The scale of each token is ``s = sum_e p_e l_e`` with ``p = softmax(W_r h)`` routed on the
    activation ``h`` being scaled and the E vectors ``l_e`` initialised to one. At a *feedforward*
    site (the FFN's second matrix) the layer's input is scaled, ``y = W (x * s(x)) + b``, which is the
    paper's scaling of the FFN intermediate activation; elsewhere (keys, values) its output is,
    ``y = h * s(h)`` with ``h = W x + b``; the same convention as peft's IA3 ``feedforward_modules``.

    With ``num_heads=H`` (keys and values only) the output is routed per head, as the official
    ``MoVAttention`` does: ``h`` is split into H heads of ``kv = out_features / H`` features, one router
    ``kv -> E`` shared by the heads gives each (token, head) its own probabilities ``p_{t,h}``, and each
    head has its own E vectors, ``s_{t,h} = sum_e p_{t,h,e} l_{h,e}`` (``mov_scaling`` is (H, E, kv)). The
    router statistics then count one routing decision per (token, head). ``num_heads=None`` (the default)
    routes the whole output with one (E, out_features) set of vectors; it assumes no head layout.

    Shapes:
        x: ``(*, in_features)`` -> ``(*, out_features)``.
    """

    def __init__(self, base_layer: nn.Linear, num_experts: int, feedforward: bool = False,
                 top_k: int | None = None, keep_probabilities: bool = False, num_heads: int | None = None) -> None:
        _check_linear(base_layer)
        dim = base_layer.in_features if feedforward else base_layer.out_features
        if num_heads is not None:
            check_int("num_heads", num_heads, minimum=1)
            if feedforward:
                raise ValueError("num_heads routes a key or value site per head; a feedforward site (whose input "
                                 "is scaled) has no heads: use num_heads=None there")
            if dim % num_heads:
                raise ValueError(f"num_heads must divide out_features ({dim}) into heads, got {num_heads}")
        self.num_heads = num_heads
        head_dim = dim if num_heads is None else dim // num_heads
        super().__init__(base_layer, head_dim, num_experts, top_k, keep_probabilities)
        self.feedforward = feedforward
        weight = base_layer.weight
        shape = (num_experts, dim) if num_heads is None else (num_heads, num_experts, head_dim)
        self.mov_scaling = nn.Parameter(torch.empty(shape, device=weight.device, dtype=weight.dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.ones_(self.mov_scaling)
        self.router.reset_parameters()

    def scale(self, h: torch.Tensor) -> torch.Tensor:
        """The merged (IA)^3 vector of each token, ``(*, dim)``."""
        if self.num_heads is None:
            return self.route(h) @ self.mov_scaling
        heads = h.unflatten(-1, (self.num_heads, -1))                      # (*, H, kv)
        probs = self.route(heads)                                          # (*, H, E): one router for all heads
        return torch.einsum("...he,hed->...hd", probs, self.mov_scaling).flatten(-2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input(x)
        if self.feedforward:
            return self.base_layer(x * self.scale(x))
        h = self.base_layer(x)
        return h * self.scale(h)

    def extra_repr(self) -> str:
        site = "input" if self.feedforward else "output"
        heads = "" if self.num_heads is None else f", num_heads={self.num_heads}"
        return f"num_experts={self.num_experts}, scales={site}{heads}, top_k={self.top_k}"


class MoLoRALinear(MoELinear):
    """Mixture of LoRA experts around a frozen linear layer.

    ``y = W x + b + (alpha / r) sum_e p_e B_e A_e x`` with ``p = softmax(W_r x)`` routed on the
    layer's input; ``A_e`` ``(r, in)`` ~ N(0, 0.02) and ``B_e`` ``(out, r)`` = 0, so the wrapped layer
    starts as the base. The sum is two matrix products over the concatenated experts, not E of them.

    Shapes:
        x: ``(*, in_features)`` -> ``(*, out_features)``.
    """

    def __init__(self, base_layer: nn.Linear, num_experts: int, r: int = 4, alpha: float = 16.0,
                 top_k: int | None = None, keep_probabilities: bool = False) -> None:
        super().__init__(_check_linear(base_layer), base_layer.in_features, num_experts, top_k, keep_probabilities)
        self.r = check_int("r", r, minimum=1)
        self.alpha = check_number("alpha", alpha, minimum=0.0, exclusive=True)
        self.scaling = self.alpha / self.r
        weight = base_layer.weight
        kw = {"device": weight.device, "dtype": weight.dtype}
        self.lora_A = nn.Parameter(torch.empty(num_experts, r, base_layer.in_features, **kw))
        self.lora_B = nn.Parameter(torch.empty(num_experts, base_layer.out_features, r, **kw))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.lora_A, std=0.02)
        nn.init.zeros_(self.lora_B)
        self.router.reset_parameters()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input(x)
        E, r = self.num_experts, self.r
        weights = self.route(x)                                       # (*, E)
        ax = F.linear(x, self.lora_A.reshape(E * r, -1))              # (*, E r): every A_e x at once
        ax = (ax.unflatten(-1, (E, r)) * weights.unsqueeze(-1)).flatten(-2)
        update = F.linear(ax, self.lora_B.permute(1, 0, 2).reshape(self.out_features, E * r))
        return self.base_layer(x) + self.scaling * update

    def extra_repr(self) -> str:
        return f"num_experts={self.num_experts}, r={self.r}, alpha={self.alpha:g}, top_k={self.top_k}"
