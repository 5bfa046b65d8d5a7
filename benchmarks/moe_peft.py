"""MoV and MoLoRA against HF peft's (IA)^3 and LoRA on the same transformers model: the cost of a training step.

A BERT encoder built from a config (no download), each method on the paper's sites (MoV and (IA)^3:
keys, values and the FFN output's input, as peft's BERT defaults; MoLoRA and LoRA: every attention
and FFN matrix), batch ``--batch`` x ``--length`` tokens. For each: the seconds of a forward and
backward pass (median of ``--steps``) as a ratio to the base model trained in full and to peft's
method of the same family; and the bytes autograd saves for the backward pass (distinct storages,
counted by a saved-tensor hook) as a ratio to that peft method.

    python benchmarks/moe_peft.py [--hidden 256] [--layers 4] [--batch 8] [--length 128]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from iclr24.moe_peft import MoLoRAConfig, MoVConfig, get_moe_model
from iclr24.moe_peft.baselines import peft_ia3, peft_lora
from iclr24.moe_peft.model import DEFAULT_TARGETS


def step_cost(model, ids, steps: int) -> tuple[float, int]:
    """(median seconds of forward + backward, bytes saved for backward in one step)."""
    saved = {}  # by storage: a tensor saved by two operations is held once

    def pack(t):
        saved[(t.untyped_storage().data_ptr(), t.dtype)] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids).last_hidden_state.square().mean().backward()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        model(input_ids=ids).last_hidden_state.square().mean().backward()
        times.append(time.perf_counter() - start)
        model.zero_grad(set_to_none=True)
    return statistics.median(times), sum(saved.values())


def main() -> None:
    import transformers

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = transformers.BertConfig(hidden_size=args.hidden, num_hidden_layers=args.layers,
                                     num_attention_heads=max(1, args.hidden // 64), intermediate_size=4 * args.hidden)
    base = transformers.BertModel(config).train()
    ids = torch.randint(0, config.vocab_size, (args.batch, args.length))
    mov_sites, feedforward, lora_sites = DEFAULT_TARGETS["bert"]
    methods = {
        "base (all weights train)": lambda m: m,
        "(IA)^3 (peft)": lambda m: peft_ia3(m, mov_sites, feedforward),
        "MoV-10": lambda m: get_moe_model(m, MoVConfig(10, mov_sites, feedforward)),
        "MoV-30": lambda m: get_moe_model(m, MoVConfig(30, mov_sites, feedforward)),
        "LoRA r4 (peft)": lambda m: peft_lora(m, lora_sites, r=4),
        "MoLoRA-4 r4": lambda m: get_moe_model(m, MoLoRAConfig(4, target_modules=lora_sites)),
        "MoLoRA-10 r4": lambda m: get_moe_model(m, MoLoRAConfig(10, target_modules=lora_sites)),
    }
    results = {}
    for name, wrap in methods.items():
        model = wrap(copy.deepcopy(base))
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        total = sum(p.numel() for p in model.parameters())
        seconds, saved = step_cost(model, ids, args.steps)
        results[name] = (seconds, saved, trainable, total)
    base_seconds = results["base (all weights train)"][0]
    print(f"BERT {args.layers} layers x {args.hidden}, batch {args.batch} x {args.length} tokens, 1 thread")
    print(f"{'method':26s} {'trainable':>10s} {'%':>7s} {'step s':>8s} {'x base':>7s} {'x peft':>7s} "
          f"{'saved MB':>9s} {'x peft':>7s}")
    for name, (seconds, saved, trainable, total) in results.items():
        peer = "(IA)^3 (peft)" if name.startswith("MoV") else "LoRA r4 (peft)" if name.startswith("MoLoRA") else name
        print(f"{name:26s} {trainable:10d} {100 * trainable / total:7.3f} {seconds:8.3f} "
              f"{seconds / base_seconds:7.2f} {seconds / results[peer][0]:7.2f} {saved / 2**20:9.1f} "
              f"{saved / results[peer][1]:7.2f}")


if __name__ == "__main__":
    main()
