"""IBP vs DeepZ vs CROWN on the same networks: bound tightness, proofs found, time per property.

The three digit MLPs of the reproduction (standard, PGD, IBP-trained), 100 correctly classified
test points each, eps = 0.02. Tightness: the mean lower bound on the margins (higher is
tighter); proofs: the share of properties verified; time: median seconds per property,
methods interleaved. auto_LiRPA, the library users would reach for, pins torch < 1.13 and
does not import here, so the comparison is between our three verifiers.

    python benchmarks/proof_features.py
"""

from __future__ import annotations

import statistics
import time

import torch
from sklearn.datasets import load_digits

from iclr24.proof_features import TRAINING_KINDS, as_affine_net, make_mlp, train, verify

METHODS = ("ibp", "deepz", "crown")


def main(eps: float = 0.02, n_points: int = 100) -> None:
    torch.set_num_threads(1)
    digits = load_digits()
    X, y = torch.tensor(digits.data / 16.0, dtype=torch.float32), torch.tensor(digits.target)
    gen = torch.Generator().manual_seed(0)
    order = torch.randperm(len(y), generator=gen)
    tr, te = order[:1347], order[1347:]
    print(f"eps={eps}, {n_points} points per net; mean margin lower bound / share verified / ms per property")
    print(f"{'training':>9} " + " ".join(f"{m:>22}" for m in METHODS))
    for kind in TRAINING_KINDS:
        torch.manual_seed(0)
        model = train(make_mlp(), X[tr], y[tr], kind, eps=eps, epochs=20, generator=gen).eval()
        net = as_affine_net(model, (64,))
        points = [i for i in te.tolist() if int(model(X[i:i + 1]).argmax()) == int(y[i])][:n_points]
        bounds = {m: [] for m in METHODS}
        times = {m: [] for m in METHODS}
        for i in points:
            for m in METHODS:  # interleaved per point
                start = time.perf_counter()
                result = verify(net, X[i], eps, int(y[i]), m, clip=(0.0, 1.0))
                times[m].append(time.perf_counter() - start)
                bounds[m].append(result)
        cells = []
        for m in METHODS:
            lower = statistics.mean(float(r.lower_bounds.mean()) for r in bounds[m])
            proved = statistics.mean(r.verified for r in bounds[m])
            cells.append(f"{lower:>8.3f} / {proved:.2f} / {1000 * statistics.median(times[m]):>5.2f}")
        print(f"{kind:>9} " + " ".join(f"{c:>22}" for c in cells))


if __name__ == "__main__":
    main()
