"""Our SparseAutoencoder vs SAELens's standard SAE: training steps per second and memory.

Same activations (toy superposition data, d_in=64), same dictionary size, same batch, Adam
1e-3, interleaved steps in one process. Memory is the bytes of parameters plus Adam state
(the part that scales with the dictionary); SAELens keeps separate W_enc and W_dec, our tied
SAE one matrix. SAELens (`pip install sae-lens`) installs here without a CUDA torch: it
brings transformer-lens, transformers and datasets, so it is a benchmark peer, not a
dependency.

    python benchmarks/sae.py
"""

from __future__ import annotations

import statistics

import torch

from iclr24.core import interleaved_times
from iclr24.sae import SparseAutoencoder, toy_superposition


def state_bytes(module: torch.nn.Module, opt: torch.optim.Optimizer) -> int:
    params = sum(p.numel() * p.element_size() for p in module.parameters())
    state = sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values() if torch.is_tensor(t))
    return params + state


def main(d_in: int = 64, ratios=(2, 8), batch_size: int = 1024, l1: float = 3e-3, repeats: int = 20) -> None:
    torch.set_num_threads(1)
    data, _ = toy_superposition(50_000, d=d_in, n_features=2 * d_in, seed=0)
    try:
        from sae_lens import StandardTrainingSAE, StandardTrainingSAEConfig
        from sae_lens.saes.sae import TrainStepInput
    except ImportError:
        print("sae-lens is not installed (pip install sae-lens): nothing to compare with")
        return
    print(f"d_in={d_in}, batch={batch_size}; steps/s and parameter+Adam bytes; ratio = ours / SAELens")
    print(f"{'d_sae':>6} {'variant':>8} {'ours steps/s':>13} {'SAELens steps/s':>16} {'speed ratio':>12} "
          f"{'memory ratio':>13}")
    gen = torch.Generator().manual_seed(0)
    for ratio in ratios:
        d_sae = ratio * d_in
        theirs = StandardTrainingSAE(StandardTrainingSAEConfig(d_in=d_in, d_sae=d_sae, l1_coefficient=l1))
        opt_theirs = torch.optim.Adam(theirs.parameters(), lr=1e-3)
        for tied in (True, False):
            ours = SparseAutoencoder(d_in, d_sae, tied=tied, l1_coefficient=l1)
            opt_ours = torch.optim.Adam(ours.parameters(), lr=1e-3)

            def step_ours():
                batch = data[torch.randint(len(data), (batch_size,), generator=gen)]
                loss, _ = ours.loss(batch)
                opt_ours.zero_grad()
                loss.backward()
                opt_ours.step()

            def step_theirs():
                batch = data[torch.randint(len(data), (batch_size,), generator=gen)]
                out = theirs.training_forward_pass(TrainStepInput(batch, {"l1": l1}, None, 0, False))
                opt_theirs.zero_grad()
                out.loss.backward()
                opt_theirs.step()

            times = interleaved_times({"ours": step_ours, "theirs": step_theirs}, repeats=repeats, warmup=3)
            ours_sps, theirs_sps = (1 / statistics.median(times[k]) for k in ("ours", "theirs"))
            memory = state_bytes(ours, opt_ours) / state_bytes(theirs, opt_theirs)
            print(f"{d_sae:>6} {'tied' if tied else 'untied':>8} {ours_sps:>13.1f} {theirs_sps:>16.1f} "
                  f"{ours_sps / theirs_sps:>12.2f} {memory:>13.2f}")


if __name__ == "__main__":
    main()
