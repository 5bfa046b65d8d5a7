"""The fixed non-negative orthogonal classifier against a learnable linear head, and masked against plain softmax
in our experience-replay loop.

1. One training step of the digits MLP (64-256-256-120) with each head, batch 128: the fixed head has no
   parameters to update, so the ratio shows what freezing the classifier saves (little: the encoder dominates).
2. Split digits, 5 tasks, experience replay with a 50-sample buffer: final average accuracy and wall time of
   ``continual_er`` with the masked and the plain softmax. (avalanche-lib, the peer for continual learning,
   is not installed here; docs/orthogonal_classifier.md says so.)

    python benchmarks/orthogonal_classifier.py
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits

from iclr24.orthogonal_classifier import FixedNonNegativeOrthogonalClassifier, LearnableClassifier
from iclr24.orthogonal_classifier.training import Net, continual_er, evaluate


def step_time(head, X, y, repeats=200) -> float:
    torch.manual_seed(0)
    net = Net(64, (256, 256, 120), head)
    optimizer = torch.optim.SGD([p for p in net.parameters() if p.requires_grad], lr=0.05, momentum=0.9)
    start = time.perf_counter()
    for _ in range(repeats):
        loss = F.cross_entropy(net(X), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return (time.perf_counter() - start) / repeats


def main() -> None:
    torch.set_num_threads(1)
    digits = load_digits()
    X, y = torch.tensor(digits.data / 16.0, dtype=torch.float32), torch.tensor(digits.target)
    fixed = step_time(FixedNonNegativeOrthogonalClassifier(120, 10, scale=5.0), X[:128], y[:128])
    learnable = step_time(LearnableClassifier(120, 10), X[:128], y[:128])
    print(f"training step, batch 128: fixed {fixed * 1e3:.2f} ms, learnable {learnable * 1e3:.2f} ms, "
          f"ratio {learnable / fixed:.2f}")

    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    Xtr, ytr, Xte, yte = X[order[:1347]], y[order[:1347]], X[order[1347:]], y[order[1347:]]
    tasks = [(Xtr[(ytr // 2) == t], ytr[(ytr // 2) == t]) for t in range(5)]
    for masked in (True, False):
        torch.manual_seed(0)
        net = Net(64, (256, 256, 120), FixedNonNegativeOrthogonalClassifier(120, 10, scale=5.0))
        start = time.perf_counter()
        for trained in continual_er(net, tasks, epochs=20, buffer_size=50, masked=masked,
                                    generator=torch.Generator().manual_seed(0)):
            pass
        print(f"ours, experience replay ({'masked' if masked else 'plain'} softmax): final accuracy "
              f"{evaluate(trained, Xte, yte, 10)[0]:.3f}, {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
