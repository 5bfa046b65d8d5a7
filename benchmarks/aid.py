"""What AID costs: a training step with AID against the same model with its original decomposition.

No package implements AID or these TPR models (lucidrains' fast-weight attention is the nearest), so the
comparison a user needs is the overhead of switching ``decomposition="mlp"`` to ``"aid"`` in one model:

- FWM on SAR (20 words per list, 10 pairs, batch 64, hidden 64, memory 16^3): seconds per training step
  (median of interleaved repeats, AID / MLP), parameters, and the bytes autograd saves for the backward pass
  (the activation memory of a step);
- a causal linear-transformer layer (d_model 128, 4 heads of 32, 256 tokens, batch 8): the same three;
- the FWM memory itself, as the paper's code computes it (the D x D x D tensor, ``memory_form="tensor"``)
  against our dual form that never builds it (``"dual"``, the default; the same numbers): seconds per
  forward + backward of the reads, tensor / dual, at our SAR size (T 22, D 16) and at the paper's D 32.

    python benchmarks/aid.py [--repeats 7]
"""

from __future__ import annotations

import argparse

import torch

from iclr24.aid import LinearTransformerLayer, SARNetwork, memory_reads, sar_task
from iclr24.core import interleaved_times, median_ratio


def saved_bytes(step) -> int:
    """Bytes of the tensors autograd keeps for the backward pass during one ``step()``."""
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = step(backward=False)
    loss.backward()
    return total


def training_steps(make_model, loss_of) -> dict:
    """For each decomposition: (model, step), where ``step()`` is one Adam step on ``loss_of(model)`` and
    ``step(backward=False)`` only computes the loss."""
    steps = {}
    for decomposition in ("mlp", "aid"):
        torch.manual_seed(0)
        model = make_model(decomposition)
        optimizer = torch.optim.Adam(model.parameters(), 1e-3)

        def step(backward=True, model=model, optimizer=optimizer):
            loss = loss_of(model)
            if backward:
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            return loss

        steps[decomposition] = (model, step)
    return steps


def fwm_steps():
    task = sar_task(20, 10, 0.5, seed=0)
    batch = task.sample(64)
    return training_steps(
        lambda d: SARNetwork(task.vocab_size, decomposition=d, hidden=64, component_dim=16),
        lambda model: torch.nn.functional.cross_entropy(model(batch).flatten(0, 1), batch.targets.flatten(),
                                                        ignore_index=0))


def linear_transformer_steps():
    h = torch.randn(8, 256, 128)
    return training_steps(lambda d: LinearTransformerLayer(128, 4, 32, decomposition=d),
                          lambda layer: layer(h).square().mean())


def memory_form_steps(B: int, T: int, D: int):
    torch.manual_seed(0)
    write = torch.randn(B, T, 3, D, requires_grad=True)
    read = torch.randn(B, T, 2, D, requires_grad=True)
    gate = torch.rand(B, T, 1)
    norm = torch.nn.LayerNorm(D, elementwise_affine=False)
    return {form: (lambda form=form: memory_reads(write.tanh(), read.tanh(), gate, 1 / D, norm, form).sum()
                   .backward()) for form in ("tensor", "dual")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{'model':<28}{'time AID / MLP':>16}{'params MLP':>12}{'params AID':>12}{'saved MB MLP':>14}"
          f"{'saved MB AID':>14}")
    for name, steps in (("FWM on SAR", fwm_steps()), ("linear transformer layer", linear_transformer_steps())):
        times = interleaved_times({d: step for d, (_, step) in steps.items()}, repeats=args.repeats, warmup=2)
        params = {d: sum(p.numel() for p in m.parameters()) for d, (m, _) in steps.items()}
        memory = {d: saved_bytes(step) / 2**20 for d, (_, step) in steps.items()}
        print(f"{name:<28}{median_ratio(times, 'aid', 'mlp'):>16.2f}{params['mlp']:>12,}{params['aid']:>12,}"
              f"{memory['mlp']:>14.1f}{memory['aid']:>14.1f}")
    print(f"\n{'FWM memory (B 64)':<28}{'time tensor / dual':>20}")
    for T, D in ((22, 16), (42, 32), (202, 32)):
        times = interleaved_times(memory_form_steps(64, T, D), repeats=max(1, args.repeats // 2), warmup=1)
        print(f"{f'T {T}, D {D}':<28}{median_ratio(times, 'tensor', 'dual'):>20.1f}")


if __name__ == "__main__":
    main()
