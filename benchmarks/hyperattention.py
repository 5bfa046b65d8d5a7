"""HyperAttention vs torch SDPA (the flash-attention kernel on CPU), side by side.

For each n: causal and non-causal, forward and forward+backward, timed interleaved in
one process; prints the median time ratio SDPA / HyperAttention (> 1: we are faster).

    python benchmarks/hyperattention.py                      # n = 4k..32k, 1 thread
    python benchmarks/hyperattention.py --ns 8192 65536 --heads 4 --threads 2
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.nn.functional as F

from iclr24.core import interleaved_times, median_ratio
from iclr24.hyperattention import hyper_attention


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ns", type=int, nargs="+", default=[4096, 8192, 16384, 32768])
    parser.add_argument("--heads", type=int, default=1)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--min-seq-len", type=int, default=4096)
    parser.add_argument("--no-backward", action="store_true", help="forward only")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)

    print(f"threads={args.threads} heads={args.heads} d={args.head_dim}; ratio = SDPA time / HyperAttention time")
    print(f"{'n':>7} {'mask':>10} {'pass':>9} {'SDPA s':>9} {'hyper s':>9} {'ratio':>7}")
    for n in args.ns:
        q, k, v = (torch.randn(1, args.heads, n, args.head_dim, generator=gen) for _ in range(3))
        for causal in (False, True):
            passes = ["forward"] if args.no_backward else ["forward", "fwd+bwd"]
            for kind in passes:
                backward = kind == "fwd+bwd"
                qg, kg, vg = (x.clone().requires_grad_(backward) for x in (q, k, v))

                def step(fn):
                    with torch.set_grad_enabled(backward):
                        out = fn()
                        if backward:
                            out.sum().backward()

                times = interleaved_times({
                    "sdpa": lambda: step(lambda: F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)),
                    "hyper": lambda: step(lambda: hyper_attention(qg, kg, vg, causal=causal, generator=gen,
                                                                  min_seq_len=args.min_seq_len)[0]),
                }, repeats=args.repeats)
                print(f"{n:>7} {'causal' if causal else 'full':>10} {kind:>9} {statistics.median(times['sdpa']):>9.3f} "
                      f"{statistics.median(times['hyper']):>9.3f} {median_ratio(times, 'sdpa', 'hyper'):>7.2f}",
                      flush=True)


if __name__ == "__main__":
    main()
