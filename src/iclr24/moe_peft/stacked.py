"""Independent fits of one method trained in lockstep as one batched model, bit for bit as one at a time.

The reproduction trains many small models of the same architecture: the rates of a learning-rate sweep,
the seeds of a method, the pretrained bases of the seeds. :class:`StackedTrainer` stacks their parameters
along a leading fit dimension ``B`` and runs each step once for all of them: every ``F.linear`` becomes a
``torch.baddbmm``/``torch.bmm`` with per-fit weights (a trainable one through :class:`_Linear`, whose backward
rounds as ``F.linear``'s does; a frozen one as the plain product), element-wise operations run on the stacked
tensors, and Adam updates every stacked tensor once, with a learning rate per fit (``torch._foreach_*`` ops, on
the CPU a loop of the single-tensor ops ``torch.optim.Adam`` runs). Each fit keeps its own data, batch
order (its own generator) and learning rate.

The batched step performs, for each fit, the operations of :class:`iclr24.moe_peft.tasks.Trainer` on the
wrapped model (peft's (IA)^3 and LoRA layers, MoV and MoLoRA, or the plain MLP) in the same order, and each
fit's slice of a batched product is computed as the product of that fit alone (MKL, one thread), so the
trained weights equal the one-at-a-time fits bit for bit; the tests check that for every method here, and the
smoke and quick presets give the same numbers as before, to the last digit. (On some odd shapes, whose per-fit
slices are not 64-byte aligned, MKL's batched product rounded differently, by 4e-8 on one weight.) What it
leaves out is what no result reads: the router statistics accumulated during training (they are reset before
routing is measured) and the loss of each epoch (its sum may round differently; it is not returned).

Only the architecture of :func:`iclr24.moe_peft.tasks.mlp_base` with the wrappers the reproduction uses is
supported (soft routing, no load balancing, whole-output MoV at feedforward sites); anything else raises.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from iclr24.moe_peft.layers import MoLoRALinear, MoVLinear

__all__ = ["StackedTrainer"]

_BETA1, _BETA2, _EPS = 0.9, 0.999, 1e-8  # torch.optim.Adam's defaults, which Trainer uses


def _template(model: nn.Module) -> tuple[nn.Sequential, str]:
    """The MLP a (wrapped) model computes, and the prefix of its parameter names."""
    peft_inner = getattr(getattr(model, "base_model", None), "model", None)
    if isinstance(peft_inner, nn.Sequential):  # a PeftModel
        return peft_inner, "base_model.model."
    if isinstance(getattr(model, "base_model", None), nn.Sequential):  # an MoEModel
        return model.base_model, "base_model."
    if isinstance(model, nn.Sequential):
        return model, ""
    raise TypeError(f"StackedTrainer trains the MLP of tasks.mlp_base, plain or wrapped; got {type(model).__name__}")


def _kind(layer: nn.Module) -> str:
    if isinstance(layer, nn.GELU):
        if layer.approximate != "none":
            raise ValueError("only the exact GELU of mlp_base is supported")
        return "gelu"
    if isinstance(layer, MoVLinear):
        if layer.top_k is not None or layer.keep_probabilities or layer.num_heads is not None or not layer.feedforward:
            raise ValueError("only soft, whole-output MoV at feedforward sites without load balancing is supported")
        return "mov"
    if isinstance(layer, MoLoRALinear):
        if layer.top_k is not None or layer.keep_probabilities:
            raise ValueError("only soft MoLoRA without load balancing is supported")
        return "molora"
    if type(layer) is nn.Linear:
        return "linear"
    module = type(layer).__module__
    if module.startswith("peft.tuners.ia3") and type(layer).__name__ == "Linear":
        if not layer.is_feedforward or list(layer.active_adapters) != ["default"] or layer.merged:
            raise ValueError("only peft's (IA)^3 at feedforward sites, one unmerged adapter, is supported")
        return "ia3"
    if module.startswith("peft.tuners.lora") and type(layer).__name__ == "Linear":
        if list(layer.active_adapters) != ["default"] or layer.merged or not isinstance(
                layer.lora_dropout["default"], nn.Identity) or layer.use_dora.get("default", False):
            raise ValueError("only peft's plain LoRA, one unmerged adapter without dropout, is supported")
        return "lora"
    raise TypeError(f"StackedTrainer does not support {type(layer).__name__} layers")


class _Linear(torch.autograd.Function):
    """``F.linear`` of each fit with the backward products of ``addmm``/``mm`` on a transposed weight.

    For ``F.linear(x, W, b)`` (``addmm(b, x, W.t())``) autograd computes the weight's gradient as
    ``(grad.t() @ x)`` (it keeps the column-major layout of ``W.t()``), and the batched product's own backward
    would compute ``(x.t() @ grad).t()``, which can round differently; so the products are spelled out here.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        if bias is None:
            return torch.bmm(x, weight.transpose(1, 2))
        return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        grad_x = grad.bmm(weight) if ctx.needs_input_grad[0] else None                     # (B, n, in)
        grad_weight = grad.transpose(1, 2).bmm(x) if ctx.needs_input_grad[1] else None     # (B, out, in)
        grad_bias = grad.sum(dim=1) if ctx.has_bias and ctx.needs_input_grad[2] else None  # (B, out)
        return grad_x, grad_weight, grad_bias


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` of each fit: x ``(B, n, in)``, weight ``(B, out, in)``, bias ``(B, out)`` -> ``(B, n, out)``.

    A frozen layer (weight and bias without gradient) runs the batched product itself: its backward computes
    only ``grad @ weight`` for ``x``, the product :class:`_Linear` spells out, without a Python node.
    """
    if weight.requires_grad or (bias is not None and bias.requires_grad):
        return _Linear.apply(x, weight, bias)
    if bias is None:
        return torch.bmm(x, weight.transpose(1, 2))
    return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))


class StackedTrainer:
    """Adam on B models of one architecture in lockstep; each fit as :class:`~iclr24.moe_peft.tasks.Trainer`.

    Args:
        models: the fits, wrapped alike (their trainable parameters are read here and written back by
            :meth:`write_back`).
        lrs: a learning rate per fit.
        generators: a batch-order generator per fit.

    ``run(data, epochs=a)`` then ``run(data, epochs=b)`` trains what ``run(data, epochs=a + b)`` trains, and
    :meth:`subset` goes on with some of the fits (the Adam state carries over), as ``Trainer`` does.
    """

    def __init__(self, models: Sequence[nn.Module], *, lrs: Sequence[float],
                 generators: Sequence[torch.Generator]) -> None:
        if not models or not len(models) == len(lrs) == len(generators):
            raise ValueError(f"need one lr and one generator per model, got {len(models)} models, {len(lrs)} lrs "
                             f"and {len(generators)} generators")
        self.models, self.lrs, self.generators = list(models), [float(lr) for lr in lrs], list(generators)
        template, self._prefix = _template(self.models[0])
        self._layers = [(str(i), _kind(layer), layer) for i, layer in enumerate(template)]
        named = [dict(m.named_parameters()) for m in self.models]
        if any(n.keys() != named[0].keys() for n in named):
            raise ValueError("the models must be wrapped alike (the same parameter names)")
        self.trainable = [name for name, p in named[0].items() if p.requires_grad]
        with torch.no_grad():
            self.params = {name: torch.stack([n[name].detach() for n in named]).requires_grad_(name in self.trainable)
                           for name in named[0]}
        self.exp_avg = {name: torch.zeros_like(self.params[name]) for name in self.trainable}
        self.exp_avg_sq = {name: torch.zeros_like(self.params[name]) for name in self.trainable}
        self.steps = 0
        self.epochs_done = 0

    def __len__(self) -> int:
        return len(self.models)

    def _p(self, site: str, name: str) -> torch.Tensor:
        return self.params[f"{self._prefix}{site}.{name}"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The logits of every fit, ``(B, n, classes)``, for inputs ``(B, n, features)``."""
        for site, kind, layer in self._layers:
            if kind == "gelu":
                x = F.gelu(x)
            elif kind == "linear":
                x = _linear(x, self._p(site, "weight"), self._p(site, "bias"))
            elif kind == "ia3":  # peft: x * (1 * l), then the base layer
                x = _linear(x * self._p(site, "ia3_l.default"),  # peft multiplies by 1 first: exact
                            self._p(site, "base_layer.weight"),
                            self._p(site, "base_layer.bias"))
            elif kind == "lora":  # peft: base(x) + B(A(x)) * scaling
                result = _linear(x, self._p(site, "base_layer.weight"), self._p(site, "base_layer.bias"))
                update = _linear(_linear(x, self._p(site, "lora_A.default.weight")),
                                 self._p(site, "lora_B.default.weight"))
                x = result + update * layer.scaling["default"]
            else:
                probs = _linear(x, self._p(site, "router.weight")).softmax(dim=-1)          # (B, n, E)
                weight, bias = self._p(site, "base_layer.weight"), self._p(site, "base_layer.bias")
                if kind == "mov":  # MoVLinear at a feedforward site: base(x * (p @ l))
                    x = _linear(x * torch.bmm(probs, self._p(site, "mov_scaling")), weight, bias)
                else:  # MoLoRALinear: base(x) + scaling * sum_e p_e B_e A_e x, two products
                    B, E, r = x.shape[0], layer.num_experts, layer.r
                    lora_A, lora_B = self._p(site, "lora_A"), self._p(site, "lora_B")
                    ax = _linear(x, lora_A.reshape(B, E * r, -1))                        # (B, n, E r)
                    ax = (ax.unflatten(-1, (E, r)) * probs.unsqueeze(-1)).flatten(-2)
                    update = _linear(ax, lora_B.permute(0, 2, 1, 3).reshape(B, layer.out_features, E * r))
                    x = _linear(x, weight, bias) + layer.scaling * update
        return x

    def run(self, data: Sequence[tuple[torch.Tensor, torch.Tensor]], *, epochs: int, batch_size: int = 128) -> None:
        """Train ``epochs`` more epochs, fit ``i`` on ``data[i] = (X, y)`` (all of one length)."""
        if len(data) != len(self):
            raise ValueError(f"need one (X, y) per fit ({len(self)}), got {len(data)}")
        n = len(data[0][0])
        if any(len(X) != n or len(y) != n for X, y in data):
            raise ValueError("every fit's data must have the same number of examples")
        for _ in range(epochs):
            orders = [torch.randperm(n, generator=g) for g in self.generators]
            X_epoch = torch.stack([X[order] for (X, _), order in zip(data, orders)])  # (B, n, features)
            y_epoch = torch.stack([y[order] for (_, y), order in zip(data, orders)])  # (B, n)
            for start in range(0, n, batch_size):
                xb, yb = X_epoch[:, start:start + batch_size], y_epoch[:, start:start + batch_size]
                logits = self.forward(xb)                                              # (B, b, classes)
                # the sum of the fits' mean losses: each fit's gradient is its own loss's
                loss = F.cross_entropy(logits.flatten(0, 1), yb.flatten(), reduction="none")
                loss = loss.view(len(self), -1).mean(dim=1).sum()
                for name in self.trainable:
                    self.params[name].grad = None
                loss.backward()
                self._adam_step()
            self.epochs_done += 1

    @torch.no_grad()
    def _adam_step(self) -> None:
        """torch.optim.Adam's single-tensor update (its defaults), on every stacked tensor, a rate per fit."""
        self.steps += 1
        bias_correction1 = 1 - _BETA1 ** self.steps
        bias_correction2_sqrt = (1 - _BETA2 ** self.steps) ** 0.5
        step_sizes = [lr / bias_correction1 for lr in self.lrs]
        same = all(s == step_sizes[0] for s in step_sizes)
        params = [self.params[name] for name in self.trainable]
        grads = [p.grad for p in params]
        exp_avgs = [self.exp_avg[name] for name in self.trainable]
        exp_avg_sqs = [self.exp_avg_sq[name] for name in self.trainable]
        # the same element-wise ops on every tensor, in one call each (on the CPU a loop of the single-tensor op)
        torch._foreach_lerp_(exp_avgs, grads, 1 - _BETA1)
        torch._foreach_mul_(exp_avg_sqs, _BETA2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - _BETA2)
        denoms = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(denoms, bias_correction2_sqrt)
        torch._foreach_add_(denoms, _EPS)
        if same:
            torch._foreach_addcdiv_(params, exp_avgs, denoms, value=-step_sizes[0])
        else:  # addcdiv computes param + value * t1 / t2: the same with value folded into t1
            neg_step = torch.tensor([-s for s in step_sizes])
            torch._foreach_addcdiv_(params, [m * neg_step.view(-1, *[1] * (m.dim() - 1)) for m in exp_avgs], denoms)

    @torch.no_grad()
    def write_back(self) -> list[nn.Module]:
        """Copy each fit's trained parameters into its model; the models."""
        for i, model in enumerate(self.models):
            named = dict(model.named_parameters())
            for name in self.trainable:
                named[name].copy_(self.params[name][i])
        return self.models

    def subset(self, indices: Sequence[int]) -> StackedTrainer:
        """A trainer that goes on with the fits ``indices`` only, their Adam state and generators included."""
        index = torch.tensor(list(indices))
        out = StackedTrainer.__new__(StackedTrainer)
        out.models = [self.models[i] for i in indices]
        out.lrs = [self.lrs[i] for i in indices]
        out.generators = [self.generators[i] for i in indices]
        out._prefix, out._layers, out.trainable = self._prefix, self._layers, self.trainable
        with torch.no_grad():
            out.params = {name: p[index].requires_grad_(name in self.trainable) for name, p in self.params.items()}
        out.exp_avg = {name: t[index] for name, t in self.exp_avg.items()}
        out.exp_avg_sq = {name: t[index] for name, t in self.exp_avg_sq.items()}
        out.steps, out.epochs_done = self.steps, self.epochs_done
        return out
