"""Inject MoV or MoLoRA into any torch model, the way HF peft injects its tuners.

    model = get_moe_model(base, MoVConfig(num_experts=10, target_modules=["k", "v", "wo"],
                                          feedforward_modules=["wo"]))
    loss = task_loss(model(x)) + model.auxiliary_loss()
    model.save_adapter("mov.safetensors")      # the adapter only
    base = model.unwrap()                      # the original modules, unchanged

``target_modules`` names ``nn.Linear`` sites as peft does: a list matches a module whose qualified
name equals an entry or ends with ``"." + entry``; a string is a regular expression the whole
name must match. For a transformers model whose ``config.model_type`` is in
:data:`DEFAULT_TARGETS`, it may be left out.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from iclr24.core import check_int, check_number
from iclr24.core.io import write_bytes_atomic
from iclr24.moe_peft.layers import MoELinear, MoLoRALinear, MoVLinear

__all__ = ["DEFAULT_TARGETS", "MoEModel", "MoLoRAConfig", "MoVConfig", "RouterStatistics", "get_moe_model"]

#: model_type -> (MoV sites, MoV feedforward sites, MoLoRA sites): the paper's sites (keys, values and
#: the FFN intermediate for MoV; every attention and FFN matrix for MoLoRA) in each family's names
#: (T5 v1.1 and mT5 gate their FFN with ``wi_0`` and ``wi_1``). For BERT these are peft's (IA)^3
#: defaults, whose ``output.dense`` also matches the attention's output projection.
_T5 = (("k", "v", "wo"), ("wo",), ("q", "k", "v", "o", "wi", "wi_0", "wi_1", "wo"))
DEFAULT_TARGETS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "t5": _T5,
    "mt5": _T5,
    "bert": (("key", "value", "output.dense"), ("output.dense",),
             ("query", "key", "value", "attention.output.dense", "intermediate.dense", "output.dense")),
    "llama": (("k_proj", "v_proj", "down_proj"), ("down_proj",),
              ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")),
}
_FORMAT = "iclr24.moe_peft"


def _check_targets(name: str, value, optional: bool = True):
    if value is None and optional:
        return None
    if isinstance(value, str):
        try:
            re.compile(value)
        except re.error as err:
            raise ValueError(f"{name} must be a list of module names or a regular expression, got {value!r}: "
                             f"{err}") from None
        return value
    if isinstance(value, Sequence) and value and all(isinstance(v, str) and v for v in value):
        return tuple(value)
    raise ValueError(f"{name} must be a non-empty list of module names or a regular expression, got {value!r}")


def _check_router(cfg) -> None:
    check_int("num_experts", cfg.num_experts, minimum=1)
    if cfg.top_k is not None and not 1 <= check_int("top_k", cfg.top_k) <= cfg.num_experts:
        raise ValueError(f"top_k must be in [1, num_experts={cfg.num_experts}] or None, got {cfg.top_k}")
    object.__setattr__(cfg, "load_balance", check_number("load_balance", cfg.load_balance, minimum=0.0))


@dataclass(frozen=True)
class MoVConfig:
    """Mixture of (IA)^3 vectors: E vectors and a router at each site; only these train.

    ``feedforward_modules`` (a subset of the targets) have their input scaled rather than their
    output: the FFN's second matrix, whose input is the intermediate activation the paper scales.
    ``top_k=None`` is soft merging over all experts (the paper's default); ``load_balance`` weights
    the Switch load-balancing loss returned by :meth:`MoEModel.auxiliary_loss` (0: off, the default).
    ``num_heads`` routes the other (key and value) sites per head, as the official code does (see
    :class:`MoVLinear`); None (the default) routes each site's whole output.
    """

    num_experts: int = 10
    target_modules: Sequence[str] | str | None = None
    feedforward_modules: Sequence[str] | str | None = None
    top_k: int | None = None
    load_balance: float = 0.0
    num_heads: int | None = None

    def __post_init__(self) -> None:
        _check_router(self)
        if self.num_heads is not None:
            check_int("num_heads", self.num_heads, minimum=1)
        object.__setattr__(self, "target_modules", _check_targets("target_modules", self.target_modules))
        object.__setattr__(self, "feedforward_modules",
                           _check_targets("feedforward_modules", self.feedforward_modules))


@dataclass(frozen=True)
class MoLoRAConfig:
    """Mixture of LoRA experts: E rank-``r`` adapters and a router at each site, scaled ``alpha / r``."""

    num_experts: int = 4
    r: int = 4
    alpha: float = 16.0
    target_modules: Sequence[str] | str | None = None
    top_k: int | None = None
    load_balance: float = 0.0

    def __post_init__(self) -> None:
        _check_router(self)
        check_int("r", self.r, minimum=1)
        object.__setattr__(self, "alpha", check_number("alpha", self.alpha, minimum=0.0, exclusive=True))
        object.__setattr__(self, "target_modules", _check_targets("target_modules", self.target_modules))


def _matches(name: str, targets: Sequence[str] | str | None) -> bool:
    if targets is None:
        return False
    if isinstance(targets, str):
        return re.fullmatch(targets, name) is not None
    return any(name == t or name.endswith("." + t) for t in targets)


@dataclass(frozen=True)
class RouterStatistics:
    """What one site's router did over the tokens since the last reset."""

    tokens: int
    mean_probability: torch.Tensor  # (E,): the mean routing distribution
    top1_fraction: torch.Tensor  # (E,): the share of tokens whose most probable expert is e
    # (with MoVConfig.num_heads, tokens and shares count one routing decision per (token, head))


class MoEModel(nn.Module):
    """A model whose targeted linear layers carry MoV or MoLoRA experts; everything else is frozen.

    Built by :func:`get_moe_model`. Calls go to the wrapped model, and so do attributes this class
    does not define (``model.config``, ``model.generate`` ...), as with peft's ``PeftModel``.
    """

    def __init__(self, model: nn.Module, config: MoVConfig | MoLoRAConfig) -> None:
        super().__init__()
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch nn.Module, got {type(model).__name__}")
        if not isinstance(config, (MoVConfig, MoLoRAConfig)):
            raise TypeError(f"config must be a MoVConfig or MoLoRAConfig, got {type(config).__name__}")
        if any(isinstance(m, MoELinear) for m in model.modules()):
            raise ValueError("model already carries MoV/MoLoRA layers; unwrap() it before wrapping again")
        config = _with_default_targets(model, config)
        self.moe_config = config
        self.base_model = model
        self._requires_grad = {name: p.requires_grad for name, p in model.named_parameters()}
        sites = _checked_sites(model, config)  # every check before the model is touched
        model.requires_grad_(False)
        for name in sites:
            parent, child = _parent(model, name)
            setattr(parent, child, self._make_layer(name, getattr(parent, child)))
        self._sites = tuple(sites)

    def _make_layer(self, name: str, module: nn.Linear) -> MoELinear:
        cfg = self.moe_config
        keep = cfg.load_balance > 0
        if isinstance(cfg, MoVConfig):
            feedforward = _matches(name, cfg.feedforward_modules)
            return MoVLinear(module, cfg.num_experts, feedforward=feedforward, top_k=cfg.top_k,
                             keep_probabilities=keep, num_heads=None if feedforward else cfg.num_heads)
        return MoLoRALinear(module, cfg.num_experts, r=cfg.r, alpha=cfg.alpha, top_k=cfg.top_k,
                            keep_probabilities=keep)

    def forward(self, *args, **kwargs):
        self._check_wrapped()
        return self.base_model(*args, **kwargs)

    def _check_wrapped(self) -> None:
        if self._sites is None:
            raise RuntimeError("this MoEModel was unwrapped; use the model unwrap() returned, or wrap it again "
                               "with get_moe_model")

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "base_model":
                raise
            return getattr(self.base_model, name)

    # -- the adapter --------------------------------------------------------------------------
    def moe_layers(self) -> dict[str, MoELinear]:
        """The wrapped sites by qualified name."""
        self._check_wrapped()
        return {name: self.base_model.get_submodule(name) for name in self._sites}

    def adapter_state_dict(self) -> dict[str, torch.Tensor]:
        """Routers and experts only, by qualified name: what trains and what :meth:`save_adapter` writes."""
        return {f"{site}.{name}": p for site, layer in self.moe_layers().items()
                for name, p in layer.adapter_parameters().items()}

    def trainable_parameters(self) -> int:
        """The number of parameters that receive gradients."""
        self._check_wrapped()
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def trainable_fraction(self) -> float:
        """Trainable parameters over all parameters of the wrapped model (adapter included), as peft reports."""
        return self.trainable_parameters() / sum(p.numel() for p in self.parameters())

    def auxiliary_loss(self) -> torch.Tensor:
        """``load_balance`` times the mean load-balancing loss over the sites of the last training forward
        (call it after each forward, before the next); add it to the task loss. Zero when ``load_balance``
        is 0 or in eval mode."""
        losses = [loss for layer in self.moe_layers().values() if (loss := layer.balance_loss()) is not None]
        if not losses or not self.training:
            return torch.zeros((), device=next(self.parameters()).device)
        return self.moe_config.load_balance * torch.stack(losses).mean()

    def router_statistics(self) -> dict[str, RouterStatistics]:
        """Per site, the routing since the last :meth:`reset_router_statistics` (or since wrapping)."""
        stats = {}
        for name, layer in self.moe_layers().items():
            tokens = int(layer.top1_count.sum())
            denominator = max(tokens, 1)
            stats[name] = RouterStatistics(tokens, (layer.probability_sum / denominator).float(),
                                           (layer.top1_count / denominator).float())
        return stats

    def reset_router_statistics(self) -> None:
        for layer in self.moe_layers().values():
            layer.reset_statistics()

    def save_adapter(self, path: str | os.PathLike) -> Path:
        """Write the adapter (routers and experts, not the base) and its config as one safetensors file,
        atomically."""
        from safetensors.torch import save

        path = Path(path)
        if path.is_dir():
            raise IsADirectoryError(f"path {str(path)!r} is a directory; give the adapter's file name, e.g. "
                                    f"{str(path / 'adapter.safetensors')!r}")
        tensors = {k: v.detach().cpu().contiguous() for k, v in self.adapter_state_dict().items()}
        metadata = {_FORMAT: json.dumps(self._structure())}
        return write_bytes_atomic(path, save(tensors, metadata=metadata))

    def _structure(self) -> dict:
        """What an adapter's tensors mean: the method, its sizes, and which sites scale their input.
        (top_k, load_balance and how the targets were spelled do not change the weights.)"""
        cfg = self.moe_config
        structure = {"method": type(cfg).__name__, "num_experts": cfg.num_experts}
        if isinstance(cfg, MoLoRAConfig):
            return structure | {"r": cfg.r, "alpha": cfg.alpha}
        structure |= {"feedforward_sites": sorted(n for n, layer in self.moe_layers().items() if layer.feedforward)}
        return structure if cfg.num_heads is None else structure | {"num_heads": cfg.num_heads}

    def load_adapter(self, path: str | os.PathLike) -> MoEModel:
        """Load an adapter written by :meth:`save_adapter` into this model, which must be wrapped alike."""
        from safetensors import safe_open

        path = Path(path)
        if path.is_dir():
            raise IsADirectoryError(f"adapter path {str(path)!r} is a directory, not a .safetensors file")
        if not path.is_file():
            raise FileNotFoundError(f"adapter file {str(path)!r} does not exist")
        try:
            with safe_open(str(path), framework="pt") as f:
                saved = json.loads((f.metadata() or {}).get(_FORMAT, "null"))
                tensors = {k: f.get_tensor(k) for k in f.keys()}
        except Exception as err:  # safetensors raises its own error types for damaged headers
            raise ValueError(f"adapter file {str(path)!r} is not a readable safetensors file: {err}") from err
        if not isinstance(saved, dict):
            raise ValueError(f"{str(path)!r} is not an iclr24.moe_peft adapter (no {_FORMAT!r} metadata)")
        ours = self._structure()
        if saved != ours:
            raise ValueError(f"adapter {str(path)!r} was saved from {saved}, this model is {ours}")
        own = self.adapter_state_dict()
        if set(tensors) != set(own):
            raise ValueError(f"adapter {str(path)!r} holds {sorted(set(tensors) - set(own))[:5]} not in this model "
                             f"and lacks {sorted(set(own) - set(tensors))[:5]}")
        for name, param in own.items():  # every tensor checked before any is copied
            if tensors[name].shape != param.shape or not tensors[name].is_floating_point():
                raise ValueError(f"adapter tensor {name!r} is {tuple(tensors[name].shape)} {tensors[name].dtype}, "
                                 f"the model expects {tuple(param.shape)} floating point")
        with torch.no_grad():
            for name, param in own.items():
                param.copy_(tensors[name])
        return self

    def unwrap(self) -> nn.Module:
        """Put the original linear layers back, restore which parameters trained, and return the model."""
        model = self.base_model
        for name in self.moe_layers():
            parent, child = _parent(model, name)
            setattr(parent, child, getattr(parent, child).base_layer)
        for name, p in model.named_parameters():
            p.requires_grad_(self._requires_grad.get(name, True))
        self._sites = None
        return model

    def extra_repr(self) -> str:
        kind = "MoV" if isinstance(self.moe_config, MoVConfig) else "MoLoRA"
        sites = "unwrapped" if self._sites is None else f"{len(self._sites)} sites"
        return f"{kind}, num_experts={self.moe_config.num_experts}, {sites}"


def _checked_sites(model: nn.Module, config) -> list[str]:
    """The qualified names of the sites to wrap, each an ``nn.Linear`` a wrapper can serve; a clear error
    otherwise."""
    sites = [name for name, _ in model.named_modules() if name and _matches(name, config.target_modules)]
    if not sites:
        linear = [n for n, m in model.named_modules() if n and isinstance(m, nn.Linear)]
        raise ValueError(f"target_modules {config.target_modules!r} matched no module; the model's nn.Linear "
                         f"layers are {linear[:12]}{' ...' if len(linear) > 12 else ''}")
    for name in sites:  # all checked before the model is touched
        module = model.get_submodule(name)
        if not isinstance(module, nn.Linear):
            raise TypeError(f"target module {name!r} is a {type(module).__name__}; MoV and MoLoRA wrap "
                            f"nn.Linear layers only (narrow target_modules)")
        if isinstance(module, nn.modules.linear.NonDynamicallyQuantizableLinear):
            raise TypeError(f"target module {name!r} is nn.MultiheadAttention's out_proj, whose weight the "
                            f"attention reads directly, bypassing any wrapper; target other layers")
    lazy = [n for n, p in model.named_parameters() if isinstance(p, nn.parameter.UninitializedParameter)]
    if lazy:
        raise ValueError(f"model has uninitialised lazy parameters ({lazy[:3]}); run one forward pass first")
    if isinstance(config, MoVConfig) and config.feedforward_modules is not None:
        stray = [n for n, _ in model.named_modules()
                 if n and _matches(n, config.feedforward_modules) and n not in sites]
        if stray:
            raise ValueError(f"feedforward_modules must be a subset of target_modules; {stray[:5]} match "
                             f"feedforward_modules {config.feedforward_modules!r} but not target_modules "
                             f"{config.target_modules!r}")
    return sites


def get_moe_model(model: nn.Module, config: MoVConfig | MoLoRAConfig) -> MoEModel:
    """Wrap ``model``'s targeted ``nn.Linear`` layers with MoV or MoLoRA experts and freeze the rest.

    The model is modified in place (as peft does) and computes the base model at initialisation:
    MoV's vectors start at one (equal to rounding: the merged vector is a sum of probabilities) and
    MoLoRA's ``B`` at zero (exactly). :meth:`MoEModel.unwrap` undoes it.

    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    >>> x = torch.randn(4, 8)
    >>> before = net(x)
    >>> moe = get_moe_model(net, MoVConfig(num_experts=3, target_modules=["2"], feedforward_modules=["2"]))
    >>> torch.allclose(moe(x), before), moe.trainable_parameters()  # 3 vectors of 16 and a 16 x 3 router
    (True, 96)
    """
    return MoEModel(model, config)


def _with_default_targets(model: nn.Module, config):
    if config.target_modules is not None:
        return config
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in DEFAULT_TARGETS:
        raise ValueError(f"target_modules is required for this model (model_type {model_type!r}; defaults exist "
                         f"for {sorted(DEFAULT_TARGETS)})")
    mov, feedforward, molora = DEFAULT_TARGETS[model_type]
    if isinstance(config, MoVConfig):
        ff = config.feedforward_modules if config.feedforward_modules is not None else feedforward
        return dataclasses.replace(config, target_modules=mov, feedforward_modules=ff)
    return dataclasses.replace(config, target_modules=molora)


def _parent(model: nn.Module, name: str) -> tuple[nn.Module, str]:
    parent, _, child = name.rpartition(".")
    return (model.get_submodule(parent) if parent else model), child
