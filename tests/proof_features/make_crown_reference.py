"""Writes ``crown_reference.json``: CROWN bounds of small 2- and 3-hidden-layer ReLU nets computed by auto_LiRPA.

The file pins our CROWN (``iclr24.proof_features.verify``) to an independent implementation on nets deeper than
the one-hidden-layer case the tests write out by hand: every hidden layer's pre-activation bounds and the
margins' lower bounds. It was run once; the test only reads the JSON. To regenerate (nothing in the package
needs auto_LiRPA; PyPI's ``auto-lirpa`` 0.3 pins torch < 1.13, so take the source):

    git clone https://github.com/Verified-Intelligence/auto_LiRPA   # 0.7.1 was used
    pip install --target /tmp/lirpa-deps appdirs pyyaml tqdm graphviz
    PYTHONPATH=auto_LiRPA:/tmp/lirpa-deps python tests/proof_features/make_crown_reference.py

The nets' weights are stored in the file (rounded to 4 decimals, so the JSON holds them exactly), so the test
does not depend on a random generator. auto_LiRPA runs in float64 with its defaults for ``method="CROWN"`` (the
adaptive lower ReLU slope: 1 where u > -l, else 0), except that every neuron of every intermediate layer gets its
own CROWN bound (``BOUND_OPTS``). Our bounds matched these to 1e-15 when the file was written.
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import torch
from torch import nn

OUT = Path(__file__).with_name("crown_reference.json")
#: CROWN on every neuron of every layer: by default auto_LiRPA back-substitutes only for the neurons that IBP
#: finds unstable and keeps IBP bounds for the rest ("sparse intermediate bounds"), which leaves the margins the
#: same but not the stored layer bounds.
#: The auto_LiRPA commit the checked-in file was made with (its version string reads 0.7.1).
AUTO_LIRPA_COMMIT = "a050a3d61f4cb68b108fa7f07dcb3e4d7ef304df"
BOUND_OPTS = {"sparse_intermediate_bounds": False, "compare_crown_with_ibp": False}

# (name, layer sizes, eps, clip, seed): eps chosen so that every hidden layer has unstable neurons of both kinds
# (lower slope 1 and 0), which is where CROWN's relaxation, and so a looser one, shows.
CASES = [
    ("two_hidden_a", (4, 8, 6, 3), 0.25, None, 0),
    ("two_hidden_b", (5, 10, 7, 4), 0.4, None, 1),
    ("two_hidden_clipped", (6, 9, 8, 5), 0.3, (0.0, 1.0), 2),
    ("three_hidden_a", (4, 8, 7, 6, 3), 0.3, None, 3),
    ("three_hidden_b", (5, 10, 9, 8, 4), 0.15, None, 4),
    ("three_hidden_clipped", (6, 12, 10, 8, 5), 0.25, (0.0, 1.0), 5),
]


def make_case(sizes, seed):
    g = torch.Generator().manual_seed(seed)
    weights, biases = [], []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        W = torch.randn(fan_out, fan_in, generator=g, dtype=torch.float64) * (2.0 / fan_in) ** 0.5
        b = 0.3 * torch.randn(fan_out, generator=g, dtype=torch.float64)
        weights.append(torch.round(W, decimals=4))
        biases.append(torch.round(b, decimals=4))
    x = torch.round(torch.rand(sizes[0], generator=g, dtype=torch.float64), decimals=4)
    return weights, biases, x


def lirpa_bounds(weights, biases, x, eps, clip, label):
    from auto_LiRPA import BoundedModule, BoundedTensor, PerturbationLpNorm

    layers = []
    for W, b in zip(weights, biases):
        linear = nn.Linear(W.shape[1], W.shape[0]).double()
        with torch.no_grad():
            linear.weight.copy_(W)
            linear.bias.copy_(b)
        layers += [linear, nn.ReLU()]
    model = nn.Sequential(*layers[:-1]).double()
    lo, hi = x - eps, x + eps
    if clip is not None:
        lo, hi = lo.clamp(*clip), hi.clamp(*clip)
    bounded = BoundedModule(model, torch.zeros(1, len(x), dtype=torch.float64), device="cpu", bound_opts=BOUND_OPTS)
    perturbation = PerturbationLpNorm(norm=float("inf"), eps=eps, x_L=lo[None], x_U=hi[None])
    n_classes = weights[-1].shape[0]
    others = [j for j in range(n_classes) if j != label]
    C = torch.zeros(1, len(others), n_classes, dtype=torch.float64)
    C[0, :, label] = 1.0
    C[0, torch.arange(len(others)), others] = -1.0
    margins, _ = bounded.compute_bounds(x=(BoundedTensor(x[None], perturbation),), C=C, method="CROWN")
    # the pre-activation of each hidden layer is the input of each ReLU node, in order
    relus = [node for node in bounded.nodes() if type(node).__name__ == "BoundRelu"]
    layer_bounds = [(node.inputs[0].lower[0], node.inputs[0].upper[0]) for node in relus]
    assert len(layer_bounds) == len(weights) - 1
    return margins[0], layer_bounds


def main() -> None:
    import auto_LiRPA

    cases = []
    for name, sizes, eps, clip, seed in CASES:
        weights, biases, x = make_case(sizes, seed)
        h = x
        for W, b in zip(weights[:-1], biases[:-1]):
            h = (W @ h + b).clamp_min(0)
        label = int((weights[-1] @ h + biases[-1]).argmax())
        margins, layer_bounds = lirpa_bounds(weights, biases, x, eps, clip, label)
        unstable = [int(((l < 0) & (u > 0)).sum()) for l, u in layer_bounds]
        print(f"{name}: unstable neurons per hidden layer {unstable}, margins {margins.tolist()}")
        cases.append({
            "name": name, "eps": eps, "clip": clip, "label": label, "x": x.tolist(),
            "weights": [W.tolist() for W in weights], "biases": [b.tolist() for b in biases],
            "layer_bounds": [{"lower": l.tolist(), "upper": u.tolist()} for l, u in layer_bounds],
            "margin_lower_bounds": margins.tolist(),
        })
    provenance = (f"auto_LiRPA {auto_LiRPA.__version__} (github.com/Verified-Intelligence/auto_LiRPA at "
                  f"{AUTO_LIRPA_COMMIT}), compute_bounds(method='CROWN'), bound_opts={BOUND_OPTS}, otherwise its "
                  f"defaults (adaptive lower ReLU slope), float64, torch {torch.__version__}, "
                  f"Python {platform.python_version()}; written by tests/proof_features/make_crown_reference.py")
    # one case a line: small, and a regenerated file diffs case by case
    lines = ",\n".join(json.dumps(case) for case in cases)
    OUT.write_text(f'{{"provenance": {json.dumps(provenance)},\n"cases": [\n{lines}\n]}}\n')
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
