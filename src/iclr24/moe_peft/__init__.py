"""Mixtures of lightweight experts for parameter-efficient fine-tuning: MoV and MoLoRA.

Ted Zadouri, Ahmet Üstün, Arash Ahmadian, Beyza Ermiş, Acyr Locatelli, Sara Hooker. "Pushing Mixture of
Experts to the Limit: Extremely Parameter Efficient MoE for Instruction Tuning". ICLR 2024.
https://arxiv.org/abs/2309.05444

    from iclr24.moe_peft import MoVConfig, get_moe_model
    model = get_moe_model(model, MoVConfig(num_experts=10, target_modules=["k", "v", "wo"],
                                           feedforward_modules=["wo"]))
    model.print_trainable_parameters(); model.router_statistics()
    model.save_pretrained("mov/")                        # adapter_config.json + adapter_model.safetensors only
    model = MoEModel.from_pretrained(base, "mov/")       # onto the same base, bit for bit; or model.unwrap()

Works on any torch model whose sites are ``nn.Linear`` (transformers models included). Saving and
loading adapters needs ``safetensors`` (extra ``peft``, which also brings HF peft for the baselines).
"""

from iclr24.moe_peft.layers import MoELinear, MoLoRALinear, MoVLinear
from iclr24.moe_peft.model import (
    CONFIG_NAME,
    DEFAULT_TARGETS,
    WEIGHTS_NAME,
    MoEModel,
    MoLoRAConfig,
    MoVConfig,
    RouterStatistics,
    get_moe_model,
)
from iclr24.moe_peft.routing import Router, keep_top_k, load_balancing_loss, routing_mutual_information

__all__ = [
    "CONFIG_NAME",
    "DEFAULT_TARGETS",
    "WEIGHTS_NAME",
    "MoELinear",
    "MoEModel",
    "MoLoRAConfig",
    "MoLoRALinear",
    "MoVConfig",
    "MoVLinear",
    "Router",
    "RouterStatistics",
    "get_moe_model",
    "keep_top_k",
    "load_balancing_loss",
    "routing_mutual_information",
]
