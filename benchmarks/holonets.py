"""FaberConv and ResolventConv vs the layers a PyG user would pick instead: GCNConv and DirGNNConv(GCNConv).

Part 1: forward+backward time per call on directed Erdős-Rényi graphs of 10^4 to 10^6 edges,
interleaved in one process; ratios FaberConv / peer (> 1: FaberConv is slower). FaberConv
with K powers does 2K sparse products (two branches), GCNConv one, DirGNNConv two.

Part 2: ResolventConv (Dir-ResolvNet's filter, a dense LU solve per graph and branch) on batches of
small weighted graphs, the molecule-sized inputs it is meant for, against FaberConv and DirGNNConv
on the same batch; ratios ResolventConv / peer.

    python benchmarks/holonets.py
    python benchmarks/holonets.py --edges 10000 100000 --channels 64 --K 1 3 --graph-sizes 20 100
"""

from __future__ import annotations

import argparse
import statistics

import torch
from torch_geometric.nn import DirGNNConv, GCNConv

from iclr24.core import interleaved_times
from iclr24.holonets import FaberConv, ResolventConv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--edges", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--degree", type=float, default=10.0, help="mean out-degree (sets the node count)")
    parser.add_argument("--channels", type=int, default=64)
    parser.add_argument("--K", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--graph-sizes", type=int, nargs="+", default=[20, 100, 400],
                        help="nodes per graph in part 2 (batches of about 8000 nodes)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    large_graphs(args)
    small_graph_batches(args)


def large_graphs(args) -> None:
    c = args.channels
    print(f"threads={args.threads} channels={c}; forward+backward seconds (median), ratio FaberConv / peer")
    print(f"{'edges':>9} {'K':>3} {'Faber s':>9} {'GCN s':>9} {'DirGNN s':>9} {'/GCN':>7} {'/DirGNN':>8}")
    for m in args.edges:
        n = int(m / args.degree)
        edge_index = torch.randint(n, (2, m))
        x = torch.randn(n, c)
        gcn, dirgnn = GCNConv(c, c), DirGNNConv(GCNConv(c, c))
        gcn(x, edge_index)  # GCNConv caches nothing by default; warm the allocator
        for K in args.K:
            faber = FaberConv(c, c, K=K)

            def step(layer):
                layer.zero_grad(set_to_none=True)
                if isinstance(layer, FaberConv):  # time the whole layer, operators included, as GCNConv's is
                    layer._operators.clear()
                layer(x, edge_index).sum().backward()

            times = interleaved_times({"faber": lambda: step(faber), "gcn": lambda: step(gcn),
                                       "dirgnn": lambda: step(dirgnn)}, repeats=args.repeats)
            med = {k: statistics.median(v) for k, v in times.items()}
            print(f"{m:>9} {K:>3} {med['faber']:>9.4f} {med['gcn']:>9.4f} {med['dirgnn']:>9.4f} "
                  f"{med['faber'] / med['gcn']:>7.2f} {med['faber'] / med['dirgnn']:>8.2f}", flush=True)


def small_graph_batches(args) -> None:
    from torch_geometric.data import Batch, Data

    c = args.channels
    print(f"\nbatches of small weighted graphs (mean degree {args.degree / 2:g}); ratio ResolventConv / peer")
    print(f"{'nodes/graph':>11} {'graphs':>6} {'Resolv s':>9} {'Faber s':>9} {'DirGNN s':>9} {'/Faber':>7} "
          f"{'/DirGNN':>8}")
    for size in args.graph_sizes:
        count = max(1, 8000 // size)
        graphs = []
        for _ in range(count):
            edge_index = torch.randint(size, (2, int(size * args.degree / 2)))
            graphs.append(Data(x=torch.randn(size, c), edge_index=edge_index,
                               edge_weight=torch.rand(edge_index.size(1)) + 0.1))
        batch = Batch.from_data_list(graphs)
        resolvent, faber, dirgnn = ResolventConv(c, c, K=2), FaberConv(c, c, K=2), DirGNNConv(GCNConv(c, c))
        calls = {"resolvent": lambda: resolvent(batch.x, batch.edge_index, batch.edge_weight, batch=batch.batch),
                 "faber": lambda: faber(batch.x, batch.edge_index, batch.edge_weight),
                 "dirgnn": lambda: dirgnn(batch.x, batch.edge_index)}

        def step(name):
            for layer in (resolvent, faber, dirgnn):
                layer.zero_grad(set_to_none=True)
            resolvent._factors.clear()  # time the whole layers (factorisation, operators), as Dir-GNN's is
            faber._operators.clear()
            calls[name]().sum().backward()

        times = interleaved_times({name: (lambda name=name: step(name)) for name in calls}, repeats=args.repeats)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"{size:>11} {count:>6} {med['resolvent']:>9.4f} {med['faber']:>9.4f} {med['dirgnn']:>9.4f} "
              f"{med['resolvent'] / med['faber']:>7.2f} {med['resolvent'] / med['dirgnn']:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
