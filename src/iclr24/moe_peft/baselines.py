"""The paper's baselines, (IA)^3 and LoRA, from HF peft itself (extra ``peft``): the comparison is against
the library users already run, on the same base and the same sites."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

__all__ = ["peft_ia3", "peft_lora", "require_peft"]


def require_peft():
    """Import HF peft, or fail naming the extra that provides it."""
    try:
        import peft
    except ImportError as err:
        raise ImportError("the (IA)^3 and LoRA baselines use HF peft: pip install 'iclr24[peft]'") from err
    return peft


def peft_ia3(model: nn.Module, target_modules: Sequence[str] | str,
             feedforward_modules: Sequence[str] | str) -> nn.Module:
    """peft's (IA)^3 on ``model`` (modified in place): one vector per site, ones at initialisation."""
    peft = require_peft()
    return peft.get_peft_model(model, peft.IA3Config(target_modules=_listed(target_modules),
                                                     feedforward_modules=_listed(feedforward_modules)))


def peft_lora(model: nn.Module, target_modules: Sequence[str] | str, r: int = 4, alpha: float = 16.0) -> nn.Module:
    """peft's LoRA on ``model`` (modified in place), scaled ``alpha / r``, no dropout."""
    peft = require_peft()
    return peft.get_peft_model(model, peft.LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0,
                                                      target_modules=_listed(target_modules)))


def _listed(names: Sequence[str] | str):
    return names if isinstance(names, str) else list(names)
