"""Inject MoV or MoLoRA into any torch model, the way HF peft injects its tuners.

    model = get_moe_model(base, MoVConfig(num_experts=10, target_modules=["k", "v", "wo"],
                                          feedforward_modules=["wo"]))
    loss = task_loss(model(x)) + model.auxiliary_loss()
    model.print_trainable_parameters()         # peft's line
    model.save_pretrained("mov/")              # the adapter only: adapter_config.json, adapter_model.safetensors
    model = MoEModel.from_pretrained(base, "mov/")   # restored onto the same base, bit for bit
    model.save_adapter("mov.safetensors")      # or the tensors as one file
    base = model.unwrap()                      # the original modules, unchanged

``target_modules`` names ``nn.Linear`` sites as peft does: a list matches a module whose qualified
name equals an entry or ends with ``"." + entry``; a string is a regular expression the whole
name must match. For a transformers model whose ``config.model_type`` is in
:data:`DEFAULT_TARGETS`, it may be left out. ``modules_to_save`` (a list, matched alike) names modules
that train in full and are saved with the adapter, e.g. a new classification head.
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

__all__ = ["CONFIG_NAME", "DEFAULT_TARGETS", "WEIGHTS_NAME", "MoEModel", "MoLoRAConfig", "MoVConfig",
           "RouterStatistics", "get_moe_model"]

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
#: The config file of an adapter directory (:meth:`MoEModel.save_pretrained`), named as HF peft names it.
CONFIG_NAME = "adapter_config.json"
#: The tensors file of an adapter directory (:meth:`MoEModel.save_pretrained`), named as HF peft names it.
WEIGHTS_NAME = "adapter_model.safetensors"


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


def _check_modules_to_save(value):
    if value is None:
        return None
    if isinstance(value, str):
        raise ValueError(f"modules_to_save must be a list of module names (as in peft), got the string {value!r}; "
                         f"write [{value!r}]")
    if isinstance(value, Sequence) and value and all(isinstance(v, str) and v for v in value):
        return tuple(value)
    raise ValueError(f"modules_to_save must be None or a non-empty list of module names, got {value!r}")


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
    :class:`MoVLinear`); None (the default) routes each site's whole output. ``modules_to_save`` names
    modules (not sites) that train in full and are saved with the adapter, as in peft (e.g. a new
    classification head, ``["classifier"]``).
    """

    num_experts: int = 10
    target_modules: Sequence[str] | str | None = None
    feedforward_modules: Sequence[str] | str | None = None
    top_k: int | None = None
    load_balance: float = 0.0
    num_heads: int | None = None
    modules_to_save: Sequence[str] | None = None

    def __post_init__(self) -> None:
        _check_router(self)
        if self.num_heads is not None:
            check_int("num_heads", self.num_heads, minimum=1)
        object.__setattr__(self, "modules_to_save", _check_modules_to_save(self.modules_to_save))
        object.__setattr__(self, "target_modules", _check_targets("target_modules", self.target_modules))
        object.__setattr__(self, "feedforward_modules",
                           _check_targets("feedforward_modules", self.feedforward_modules))


@dataclass(frozen=True)
class MoLoRAConfig:
    """Mixture of LoRA experts: E rank-``r`` adapters and a router at each site, scaled ``alpha / r``.

    ``modules_to_save`` as in :class:`MoVConfig`.
    """

    num_experts: int = 4
    r: int = 4
    alpha: float = 16.0
    target_modules: Sequence[str] | str | None = None
    top_k: int | None = None
    load_balance: float = 0.0
    modules_to_save: Sequence[str] | None = None

    def __post_init__(self) -> None:
        _check_router(self)
        object.__setattr__(self, "modules_to_save", _check_modules_to_save(self.modules_to_save))
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
    """A model whose targeted linear layers carry MoV or MoLoRA experts; everything else is frozen but the
    config's ``modules_to_save``, which train in full.

    Built by :func:`get_moe_model`, or by :meth:`from_pretrained` from an adapter directory. Calls go to the
    wrapped model, and so do attributes this class does not define (``model.config``, ``model.generate`` ...),
    as with peft's ``PeftModel``; ``save_pretrained`` is this class's own and writes the adapter only.
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
        saved = _checked_modules_to_save(model, config, sites)
        model.requires_grad_(False)
        for name in sites:
            parent, child = _parent(model, name)
            setattr(parent, child, self._make_layer(name, getattr(parent, child)))
        for name in saved:
            for p in model.get_submodule(name).parameters():
                if p.is_floating_point() or p.is_complex():
                    p.requires_grad_(True)
        self._sites = tuple(sites)
        self._modules_to_save = tuple(saved)

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

    def modules_to_save(self) -> dict[str, nn.Module]:
        """The modules that train in full and are saved with the adapter (the config's ``modules_to_save``),
        by qualified name."""
        self._check_wrapped()
        return {name: self.base_model.get_submodule(name) for name in self._modules_to_save}

    def adapter_state_dict(self) -> dict[str, torch.Tensor]:
        """What :meth:`save_adapter` and :meth:`save_pretrained` write, by qualified name: the routers and
        experts, then the state of each of ``modules_to_save`` (its parameters and persistent buffers)."""
        state = {f"{site}.{name}": p for site, layer in self.moe_layers().items()
                 for name, p in layer.adapter_parameters().items()}
        for module_name, module in self.modules_to_save().items():
            state |= {f"{module_name}.{k}": v for k, v in module.state_dict(keep_vars=True).items()}
        return state

    def get_base_model(self) -> nn.Module:
        """The wrapped model (its targeted layers carry the experts), as peft's ``get_base_model``."""
        return self.base_model

    def get_nb_trainable_parameters(self) -> tuple[int, int]:
        """(trainable parameters, all parameters) of the wrapped model, adapter included, as peft counts them."""
        self._check_wrapped()
        params = list(self.parameters())
        return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)

    def print_trainable_parameters(self) -> None:
        """Print ``trainable params: N || all params: M || trainable%: P``, peft's line, from
        :meth:`get_nb_trainable_parameters`."""
        trainable, total = self.get_nb_trainable_parameters()
        print(f"trainable params: {trainable:,d} || all params: {total:,d} || trainable%: "
              f"{100 * trainable / total:.4f}")

    def trainable_parameters(self) -> int:
        """The number of parameters that receive gradients."""
        return self.get_nb_trainable_parameters()[0]

    def trainable_fraction(self) -> float:
        """Trainable parameters over all parameters of the wrapped model (adapter included), as peft reports."""
        trainable, total = self.get_nb_trainable_parameters()
        return trainable / total

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
        """Write the adapter (routers, experts and ``modules_to_save``, not the base) and its structure as one
        safetensors file, atomically. :meth:`save_pretrained` writes a peft-style directory instead."""
        from safetensors.torch import save

        path = Path(path)
        if path.is_dir():
            raise IsADirectoryError(f"path {str(path)!r} is a directory; give the adapter's file name, e.g. "
                                    f"{str(path / 'adapter.safetensors')!r} (or call save_pretrained({str(path)!r}) "
                                    f"to write {CONFIG_NAME} and {WEIGHTS_NAME} there)")
        # clone: tensors that share storage (tied weights in a saved module) are refused by safetensors
        tensors = {k: v.detach().cpu().clone().contiguous() for k, v in self.adapter_state_dict().items()}
        metadata = {_FORMAT: json.dumps(self._structure())}
        return write_bytes_atomic(path, save(tensors, metadata=metadata))

    def save_pretrained(self, save_directory: str | os.PathLike) -> Path:
        """Write the adapter as HF peft does: ``save_directory/adapter_config.json`` (the config, resolved
        targets included, and what the tensors mean) and ``save_directory/adapter_model.safetensors`` (the
        tensors of :meth:`adapter_state_dict`, as :meth:`save_adapter` writes them), each atomically. The base
        model is not written; :meth:`from_pretrained` puts the adapter back on one. Returns the directory."""
        self._check_wrapped()
        directory = Path(save_directory)
        if directory.exists() and not directory.is_dir():
            raise NotADirectoryError(f"save_directory {str(directory)!r} is a file; save_pretrained writes a directory "
                                     f"({CONFIG_NAME} and {WEIGHTS_NAME}); save_adapter writes a single file")
        directory.mkdir(parents=True, exist_ok=True)
        self.save_adapter(directory / WEIGHTS_NAME)
        text = json.dumps(self._adapter_config(), indent=2) + "\n"
        write_bytes_atomic(directory / CONFIG_NAME, text.encode())
        return directory

    def _adapter_config(self) -> dict:
        """The contents of ``adapter_config.json``."""
        cfg = self.moe_config
        fields = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
        fields = {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()}
        base = self.base_model
        name_or_path = getattr(getattr(base, "config", None), "_name_or_path", None) or None
        return {"format": _FORMAT, "method": type(cfg).__name__, "config": fields, "structure": self._structure(),
                "base_model_class": type(base).__name__, "base_model_name_or_path": name_or_path}

    @classmethod
    def from_pretrained(cls, model: nn.Module, pretrained_path: str | os.PathLike,
                        is_trainable: bool = False) -> MoEModel:
        """Wrap ``model`` with the config of an adapter directory written by :meth:`save_pretrained` and load
        its tensors, as peft's ``PeftModel.from_pretrained(model, path)``: the result computes what the saved
        model did, bit for bit, when ``model`` is the same base. With ``is_trainable=False`` (peft's default)
        the adapter is frozen and the model put in eval mode; ``True`` leaves it ready to train on. If the
        adapter does not fit the model, the model is left unwrapped and a ValueError says why."""
        if not isinstance(is_trainable, bool):
            raise TypeError(f"is_trainable must be a bool, got {is_trainable!r}")
        directory = Path(pretrained_path)
        if not directory.is_dir():
            what = "is a file" if directory.exists() else "does not exist"
            raise FileNotFoundError(f"pretrained_path {str(directory)!r} {what}; give a directory written by "
                                    f"save_pretrained (with {CONFIG_NAME} and {WEIGHTS_NAME})")
        config = _read_adapter_config(directory)
        wrapped = cls(model, config)
        try:
            wrapped.load_adapter(directory / WEIGHTS_NAME)
        except BaseException:
            wrapped.unwrap()
            raise
        if not is_trainable:
            for p in wrapped.adapter_state_dict().values():
                if isinstance(p, nn.Parameter):
                    p.requires_grad_(False)
            wrapped.eval()
        return wrapped

    def _structure(self) -> dict:
        """What an adapter's tensors mean: the method, its sizes, and which sites scale their input.
        (top_k, load_balance and how the targets were spelled do not change the weights.)"""
        cfg = self.moe_config
        structure = {"method": type(cfg).__name__, "num_experts": cfg.num_experts}
        if self._modules_to_save:
            structure["modules_to_save"] = sorted(self._modules_to_save)
        if isinstance(cfg, MoLoRAConfig):
            return structure | {"r": cfg.r, "alpha": cfg.alpha}
        structure |= {"feedforward_sites": sorted(n for n, layer in self.moe_layers().items() if layer.feedforward)}
        return structure if cfg.num_heads is None else structure | {"num_heads": cfg.num_heads}

    def load_adapter(self, path: str | os.PathLike) -> MoEModel:
        """Load an adapter written by :meth:`save_adapter` (a file) or :meth:`save_pretrained` (a directory)
        into this model, which must be wrapped alike."""
        from safetensors import safe_open

        path = Path(path)
        if path.is_dir():
            if (path / CONFIG_NAME).is_file():
                path = path / WEIGHTS_NAME
            else:
                raise IsADirectoryError(f"adapter path {str(path)!r} is a directory without {CONFIG_NAME}: give a "
                                        f".safetensors file written by save_adapter, or a directory written by "
                                        f"save_pretrained")
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
            kind_ok = (tensors[name].is_floating_point() if param.is_floating_point()
                       else tensors[name].dtype == param.dtype)
            if tensors[name].shape != param.shape or not kind_ok:
                expected = "floating point" if param.is_floating_point() else str(param.dtype)
                raise ValueError(f"adapter tensor {name!r} is {tuple(tensors[name].shape)} {tensors[name].dtype}, "
                                 f"the model expects {tuple(param.shape)} {expected}")
        with torch.no_grad():
            for name, param in own.items():
                param.copy_(tensors[name])
        return self

    def unwrap(self) -> nn.Module:
        """Put the original linear layers back, restore which parameters trained, and return the model.
        ``modules_to_save`` keep what they learned (as peft's ``unload`` keeps the trained copy)."""
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


def _checked_modules_to_save(model: nn.Module, config, sites: Sequence[str]) -> list[str]:
    """The qualified names of the modules to train in full and save (outermost matches only); a clear error for
    an entry that matches nothing, a module without parameters, or one that holds or is an MoV/MoLoRA site."""
    wanted = config.modules_to_save
    if wanted is None:
        return []
    names = [name for name, _ in model.named_modules() if name]
    for entry in wanted:
        if not any(_matches(name, [entry]) for name in names):
            children = [n for n, _ in model.named_children()]
            raise ValueError(f"modules_to_save entry {entry!r} matched no module; the model's top-level modules are "
                             f"{children[:12]}{' ...' if len(children) > 12 else ''}")
    matched = [name for name in names if _matches(name, wanted)]
    outermost = [n for n in matched if not any(n.startswith(m + ".") for m in matched)]
    for name in outermost:
        inside = [s for s in sites if s == name or s.startswith(name + ".")]
        if inside:
            raise ValueError(f"modules_to_save {name!r} is or holds the MoV/MoLoRA site {inside[0]!r}; a module is "
                             f"either adapted (target_modules) or trained in full (modules_to_save), not both")
        if not any(True for _ in model.get_submodule(name).parameters()):
            raise ValueError(f"modules_to_save {name!r} is a {type(model.get_submodule(name)).__name__} without "
                             f"parameters; name modules that have weights to train")
    return outermost


def _read_adapter_config(directory: Path) -> MoVConfig | MoLoRAConfig:
    """The config of an adapter directory written by :meth:`MoEModel.save_pretrained`."""
    path = directory / CONFIG_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{str(path)!r} does not exist; pretrained_path must be a directory written by "
                                f"save_pretrained")
    try:
        saved = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"{str(path)!r} is not valid JSON: {err}") from None
    if not isinstance(saved, dict) or saved.get("format") != _FORMAT:
        found = saved.get("format") if isinstance(saved, dict) else type(saved).__name__
        hint = " (an HF peft adapter: load it with peft.PeftModel)" if isinstance(saved, dict) and \
            "peft_type" in saved else ""
        raise ValueError(f"{str(path)!r} is not an iclr24.moe_peft adapter config: format {found!r}, expected "
                         f"{_FORMAT!r}{hint}")
    configs = {"MoVConfig": MoVConfig, "MoLoRAConfig": MoLoRAConfig}
    method, fields = saved.get("method"), saved.get("config")
    if method not in configs or not isinstance(fields, dict):
        raise ValueError(f"{str(path)!r} has method {method!r} and config {fields!r}; expected one of "
                         f"{sorted(configs)} and a dict of its fields")
    try:
        return configs[method](**fields)
    except TypeError as err:
        raise ValueError(f"{str(path)!r} holds a config {method} does not take: {err}") from None


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
