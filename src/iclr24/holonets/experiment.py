"""Reproduction of HoloNets' claims on directed graphs generated in-process.

Node classification. Models (2 layers, same hidden width and training, every graph model with a root
(self) weight): an MLP, GCN on the symmetrised graph, PyG's ``DirGNNConv(GCNConv)`` (Dir-GNN), and
FaberNet. Graphs: Dir-GNN's ``syn-dir`` and a flow-imbalance DSBM, where direction is the only signal (an
undirected model is at chance by construction, so they compare the directed models only); a 4-class cyclic
DSBM, where an undirected model sees half of the class and direction carries the rest (FaberNet vs GCN);
and the 5-class cyclic DSBM with informative features as the control. Test accuracy at the best validation
epoch, mean over seeds.

Scale-insensitivity (the paper's stability result, for resolvent filters): graph regression on small
weighted directed graphs whose heavy clusters (bonds) collapse. Dir-ResolvNet, FaberNet, GCN and Dir-GNN
layers in the same regressor, trained on the collapsed graphs, then run on the fine graphs with the
heavy edges scaled by 1 .. 1e4: how far their predictions move from those on the collapsed graphs.

Replicates: a node-classification claim pairs the models over generated graphs (one graph and one
initialisation per seed); a collapse claim over seeds (each a fresh set of train/val/test graphs and
initialisation). Shifts and errors that span orders of magnitude are judged on a log scale.
"""

from __future__ import annotations

import copy
import math
import statistics
from dataclasses import dataclass
from typing import ClassVar

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from iclr24.core import Check, Claim, Result, RunContext, experiment  # noqa: E402
from iclr24.core.evidence import against, all_of, compare, given, ratio  # noqa: E402

PAPER = "HoloNets: Spectral Convolutions do Extend to Directed Graphs (Koke & Cremers, ICLR 2024)"
MODELS = ("MLP", "GCN", "DirGNN", "FaberNet")
#: Direction is the only signal: an undirected model is at chance by construction (a check, not a claim).
DIRECTIONAL = ("syn-dir", "flow-dsbm")
#: The control's generator with 4 classes: without direction a class and its opposite look alike.
PARTLY_DIRECTIONAL = "cyclic4-dsbm"
PARTLY_DIRECTIONAL_CLASSES = 4
CONTROL = "cyclic-dsbm"
#: The control's GCN as first run: no root weight (provenance of the control claim).
UNROOTED_GCN = "GCN without root weight"
# FaberNet vs Dir-GNN in the paper (test accuracy, %; the authors' best_hyperparams.yml)
PAPER_REAL = {"squirrel": (76.71, 74.71), "chameleon": (80.33, 79.71), "arxiv-year": (64.43, 64.08),
              "snap-patents": (75.10, 73.95), "roman-empire": (92.24, 91.23)}

# Thresholds, fixed before the first run (the spec's pass rules; accuracies are fractions). What was revised
# since, with results in view, is each claim's ``revision`` below (docs/holonets.md, "Evidence, second pass").
#: FaberNet over GCN on directional graphs: by more than 30 points.
MARGIN_OVER_GCN = 0.30
#: "Matches or beats Dir-GNN", and "keeps up" with GCN on the control: at most 1 point worse.
NON_INFERIORITY_MARGIN = 0.01
#: The control: GCN's accuracy on the cyclic DSBM above 0.9 (GCN is no strawman).
CONTROL_GCN_ACCURACY = 0.9
#: Collapse at the largest scale: Dir-ResolvNet's prediction shift below 0.01, every baseline's above 0.1.
MAX_STABLE_SHIFT = 0.01
MIN_UNSTABLE_SHIFT = 0.1
#: Transfer: Dir-ResolvNet's MAE on the fine graphs at most 1.05x its MAE on the collapsed graphs, and below every
#: baseline's on the fine graphs (ratio < 1).
MAX_TRANSFER_RATIO = 1.05

CLAIM_GCN = "on directional heterophilic graphs FaberNet beats GCN by a wide margin"
CLAIM_DIRGNN = "FaberNet matches or beats Dir-GNN"
CLAIM_CONTROL = "on the non-directional control GCN is no strawman and FaberNet keeps up"
CLAIM_COLLAPSE = ("as heavy clusters collapse, Dir-ResolvNet's predictions converge to those on the collapsed "
                  "graph, unlike the baselines'")
CLAIM_TRANSFER = "trained on collapsed graphs, Dir-ResolvNet predicts the fine-resolution graphs best"
COLLAPSE_MODELS = ("Dir-ResolvNet", "FaberNet", "GCN", "Dir-GNN")
CHECK_CHANCE = ("without direction syn-dir's and flow-dsbm's classes are invisible: no undirected model beats the "
                "best label-blind guess")
#: The check's tolerance: an accuracy this many binomial standard errors above the best label-blind guess
#: would mean the generator leaks the class into the undirected graph (one in 30 000 by chance).
CHANCE_TOLERANCE_SE = 4.0

# Why each claim's provenance is "revised" (Claim.revision): what changed with results in view.
QUICK_EPOCHS = "quick's epochs cut 200 -> 160 for run time after results were seen (same verdicts at both)"
REVISIONS = {
    CLAIM_GCN: ("judged on the 4-class cyclic DSBM, not syn-dir and flow-dsbm, where GCN is at chance by "
                "construction (review #58); GCN got a root weight after the control missed its bar; " + QUICK_EPOCHS
                + "; the 0.30 margin kept"),
    CLAIM_DIRGNN: QUICK_EPOCHS + "; the spec's margin and graphs kept",
    CLAIM_CONTROL: ("GCN got a root weight after it reached 0.855 against the 0.9 bar (the bar kept); "
                    + QUICK_EPOCHS),
    CLAIM_COLLAPSE: ("replaces the first claim, FaberNet stable under edge subdivision (failed; not the paper's "
                     "perturbation, review #19); thresholds set before the collapse experiment's first run; quick's "
                     "collapse epochs cut 200 -> 100 after results (same verdicts)"),
    CLAIM_TRANSFER: ("added with the collapse experiment after the method's first runs, threshold set before its "
                     "first run; quick's collapse epochs cut 200 -> 100 after results (same verdicts)"),
}


#: The largest learning rate ``--set lr=`` takes (Adam): 10x the presets' 0.01. At 0.3 the smoke preset's collapse
#: models already diverged (an infinite prediction shift failed the run); 1e308 overflows Adam's update.
MAX_LR = 0.1


@dataclass(frozen=True)
class Config:
    maximum: ClassVar[dict[str, float]] = {"lr": MAX_LR}
    seeds: int = 3
    epochs: int = 200
    hidden: int = 32
    lr: float = 0.01
    weight_decay: float = 5e-4
    K: int = 3
    alpha: float = 0.5
    syn_dir_nodes: int = 5000
    dsbm_nodes: int = 2500
    # the collapse experiment: graph counts, epochs, resolvent powers and point, heavy-edge scales
    collapse_graphs: tuple[int, int, int] = (800, 200, 200)
    collapse_epochs: int = 200
    resolvent_K: int = 2
    omega: float = 1.0
    scales: tuple[float, ...] = (1.0, 10.0, 100.0, 1e3, 1e4)

    def __post_init__(self) -> None:
        if self.seeds < 1 or self.epochs < 1 or self.collapse_epochs < 1:
            raise ValueError(f"seeds, epochs and collapse_epochs must be >= 1, got {self.seeds}, {self.epochs} "
                             f"and {self.collapse_epochs}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if len(self.collapse_graphs) != 3 or min(self.collapse_graphs) < 1:
            raise ValueError("collapse_graphs must be three counts >= 1 (train, val, test), "
                             f"got {self.collapse_graphs}")
        if not self.scales or min(self.scales) <= 0:
            raise ValueError(f"scales must be a non-empty list of positive numbers, got {self.scales}")


PRESETS = {
    "smoke": Config(seeds=1, epochs=5, hidden=8, syn_dir_nodes=400, dsbm_nodes=250, collapse_graphs=(24, 8, 8),
                    collapse_epochs=3, scales=(1.0, 1e4)),
    "quick": Config(epochs=160, collapse_epochs=100),  # verdicts as at 200 and 200 (docs/holonets.md)
    "paper": Config(seeds=10, epochs=500, hidden=64, syn_dir_nodes=20000, dsbm_nodes=10000,
                    collapse_graphs=(4000, 500, 1000), collapse_epochs=500, scales=(1.0, 10.0, 100.0, 1e3, 1e4, 1e5)),
}


@experiment(
    name="holonets",
    paper=PAPER,
    presets=PRESETS,
    claims=[CLAIM_GCN, CLAIM_DIRGNN, CLAIM_CONTROL, CLAIM_COLLAPSE, CLAIM_TRANSFER],
    description="FaberNet and Dir-ResolvNet: holomorphic filters of a directed graph's characteristic operators.",
)
def reproduce(cfg: Config, ctx: RunContext) -> Result:
    """Node classification (MLP, GCN, Dir-GNN, FaberNet) and the weighted collapse experiment."""
    from iclr24.holonets import require_pyg

    require_pyg()
    from iclr24.holonets.data import cyclic_dsbm, flow_dsbm, syn_dir

    builders = {
        "syn-dir": lambda s: syn_dir(cfg.syn_dir_nodes, p=5.0 / cfg.syn_dir_nodes, seed=s),
        "flow-dsbm": lambda s: flow_dsbm(cfg.dsbm_nodes, seed=s),
        PARTLY_DIRECTIONAL: lambda s: cyclic_dsbm(cfg.dsbm_nodes, num_classes=PARTLY_DIRECTIONAL_CLASSES, seed=s),
        CONTROL: lambda s: cyclic_dsbm(cfg.dsbm_nodes, seed=s),
    }
    trained = {d: MODELS + ((UNROOTED_GCN,) if d == CONTROL else ()) for d in builders}
    acc = {(d, m): [] for d, models in trained.items() for m in models}
    label_blind = {d: [] for d in DIRECTIONAL}  # per graph: the test set's largest class share, and its size
    faber_example = None
    with ctx.progress("node classification", total=sum(map(len, trained.values())) * cfg.seeds) as bar:
        for dataset, build in builders.items():
            for seed in ctx.replicate_seeds(cfg.seeds):
                data = build(seed)
                if dataset in label_blind:
                    test_y = data.y[data.test_mask]
                    label_blind[dataset].append((float(torch.bincount(test_y).max()) / test_y.numel(),
                                                 test_y.numel()))
                for name in trained[dataset]:
                    torch.manual_seed(seed)
                    model = _make_model(name, data.num_features, cfg.hidden, int(data.y.max()) + 1, cfg)
                    model, test_acc = _train(model, data, cfg)
                    acc[dataset, name].append(test_acc)
                    if dataset == "flow-dsbm" and name == "FaberNet" and faber_example is None:
                        faber_example = model
                    bar.advance()
            ctx.log(f"{dataset}: " + ", ".join(f"{m} {statistics.mean(acc[dataset, m]):.3f}"
                                               for m in trained[dataset]))
    mean = {k: statistics.mean(v) for k, v in acc.items()}
    collapse = _collapse_experiment(cfg, ctx)

    metrics = {f"acc_{d}_{m.replace(' ', '_')}": v for (d, m), v in mean.items()}
    for m in COLLAPSE_MODELS:
        metrics[f"collapse_mae_coarse_{m}"] = collapse.mae_coarse[m]
        for scale in cfg.scales:
            metrics[f"collapse_shift_{m}_s{scale:g}"] = collapse.shift[m, scale]
            metrics[f"collapse_mae_{m}_s{scale:g}"] = collapse.mae_fine[m, scale]
    rows = [{"dataset": d, **{m: mean[d, m] for m in MODELS}} for d in builders]
    collapse_rows = [{"model": m, "MAE on collapsed graphs": collapse.mae_coarse[m],
                      **{f"shift at scale {s:g}": collapse.shift[m, s] for s in cfg.scales},
                      **{f"MAE at scale {s:g}": collapse.mae_fine[m, s] for s in cfg.scales}}
                     for m in COLLAPSE_MODELS]
    claims = [*_claims(acc), *_collapse_claims(collapse, cfg)]
    checks = [_chance_check(acc, label_blind)]
    figures = {"accuracy.png": _plot_accuracy(mean, list(builders)),
               "frequency_response.png": _plot_response(faber_example, cfg),
               "collapse.png": _plot_collapse(collapse, cfg)}
    notes = (f"Node classification: mean test accuracy over {cfg.seeds} seeds, at the best validation epoch of "
             f"{cfg.epochs} (one generated graph a seed); on the control also GCN without its root weight, as "
             "first run. Paper's real-data numbers (FaberNet vs Dir-GNN): "
             + "; ".join(f"{k} {a} vs {b}" for k, (a, b) in PAPER_REAL.items())
             + ". Real data sets load from a local path (iclr24.holonets.data.load_real_dataset). "
             f"Collapse: {cfg.collapse_graphs[0]} training graphs (collapsed), test MAE and prediction shift over "
             f"{cfg.collapse_graphs[2]} test graphs, mean over {cfg.seeds} seeds; shift = mean |prediction on the fine "
             "graph - prediction on the collapsed graph| / std of the collapsed-graph predictions. The paper tests "
             "this on directed QM7, which is not bundled; the graphs here are generated (iclr24.holonets.data."
             "clustered_digraphs).")
    return Result(metrics=metrics, claims=claims, figures=figures,
                  tables={"accuracy": rows, "collapse": collapse_rows}, notes=notes, checks=checks)


# --- models and training ---------------------------------------------------------------------------------


class _TwoLayer(nn.Module):
    """Two message-passing layers with ReLU, reading ``edge_index`` as given or symmetrised."""

    def __init__(self, conv1: nn.Module, conv2: nn.Module, undirected: bool = False) -> None:
        from iclr24.holonets.operators import GraphCache

        super().__init__()
        self.conv1, self.conv2, self.undirected = conv1, conv2, undirected
        self._symmetrised = GraphCache()

    def forward(self, x, edge_index):
        if self.undirected:
            from torch_geometric.utils import to_undirected

            edge_index = self._symmetrised((edge_index,), lambda: to_undirected(edge_index))
        return self.conv2(F.relu(self.conv1(x, edge_index)), edge_index)


class _RootWeighted(nn.Module):
    """``conv(x) + x W_0``: the root (self) weight DirGNNConv and FaberConv have, given to GCN for a fair control."""

    def __init__(self, conv: nn.Module, d_in: int, d_out: int) -> None:
        super().__init__()
        self.conv, self.root = conv, nn.Linear(d_in, d_out, bias=False)

    def forward(self, x, edge_index):
        return self.conv(x, edge_index) + self.root(x)


class _MLP(nn.Module):
    def __init__(self, d_in: int, hidden: int, d_out: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, d_out))

    def forward(self, x, edge_index):
        return self.net(x)


def _make_model(name: str, d_in: int, hidden: int, d_out: int, cfg: Config) -> nn.Module:
    from torch_geometric.nn import DirGNNConv, GCNConv

    from iclr24.holonets.conv import FaberNet

    if name == "MLP":
        return _MLP(d_in, hidden, d_out)
    # cached=True: PyG's GCNConv normalises the graph once and reuses it, right for a model that only ever
    # sees its one (transductive) graph, as here
    if name == UNROOTED_GCN:
        return _TwoLayer(GCNConv(d_in, hidden, cached=True), GCNConv(hidden, d_out, cached=True), undirected=True)
    if name == "GCN":
        return _TwoLayer(_RootWeighted(GCNConv(d_in, hidden, cached=True), d_in, hidden),
                         _RootWeighted(GCNConv(hidden, d_out, cached=True), hidden, d_out), undirected=True)
    if name == "DirGNN":
        return _TwoLayer(DirGNNConv(GCNConv(d_in, hidden, cached=True)),
                         DirGNNConv(GCNConv(hidden, d_out, cached=True)))
    return FaberNet(d_in, hidden, d_out, num_layers=2, K=cfg.K, alpha=cfg.alpha)


def _accuracy(model: nn.Module, data, mask: str) -> float:
    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(-1)
    m = data[mask]
    return float((pred[m] == data.y[m]).float().mean())


def _train(model: nn.Module, data, cfg: Config) -> tuple[nn.Module, float]:
    """Full-batch Adam; returns the model at its best validation epoch and its test accuracy.

    One forward pass an epoch: the logits that the next step's loss is computed from are those of the
    parameters after this step, so they also give this step's validation accuracy (none of the models has
    dropout or batch statistics, so training and evaluation mode compute the same logits)."""
    assert not any(isinstance(m, (nn.Dropout, nn.modules.batchnorm._BatchNorm)) for m in model.modules()) \
        and not getattr(model, "dropout", 0.0), "validation read from the training pass needs mode-free models"
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    train, val_mask, y = data.train_mask, data.val_mask, data.y
    best = (-1.0, None)
    model.train()
    logits = model(data.x, data.edge_index)
    for epoch in range(cfg.epochs):
        opt.zero_grad()
        F.cross_entropy(logits[train], y[train]).backward()
        opt.step()
        with torch.set_grad_enabled(epoch + 1 < cfg.epochs):  # the last one only validates
            logits = model(data.x, data.edge_index)
        val = float((logits.detach()[val_mask].argmax(-1) == y[val_mask]).float().mean())
        if val > best[0]:
            best = (val, copy.deepcopy(model.state_dict()))
    model.load_state_dict(best[1])
    return model, _accuracy(model, data, "test_mask")


# --- the collapse experiment ---------------------------------------------------------------------------------


@dataclass
class CollapseOutcome:
    """Per model: test MAE on the collapsed graphs, and per heavy-edge scale the MAE on the fine graphs
    and the prediction shift from the collapsed graphs; means over seeds (``per_seed`` keeps each)."""

    mae_coarse: dict
    mae_fine: dict
    shift: dict
    per_seed: dict


class _GraphRegressor(nn.Module):
    """Two graph convolutions with ReLU, node-weighted sum pooling (a cluster's weight is its size, so
    pooling a lifted signal equals pooling the coarse one), and a linear head: the same for every filter."""

    def __init__(self, convs: nn.ModuleList, hidden: int) -> None:
        super().__init__()
        self.convs, self.head = convs, nn.Linear(hidden, 1)

    def forward(self, data):
        h = data.x
        for conv in self.convs:
            h = F.relu(conv(h, data.edge_index, data.edge_weight, data.batch, data.node_weight))
        pooled = torch.zeros(data.num_graphs, h.size(1), dtype=h.dtype).index_add_(
            0, data.batch, data.node_weight[:, None] * h)
        return self.head(pooled).squeeze(-1)


class _Local(nn.Module):
    """A message-passing layer ``conv(x, edge_index, edge_weight)``, called with the regressor's arguments."""

    def __init__(self, conv: nn.Module) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x, edge_index, edge_weight, batch, node_weight):
        return self.conv(x, edge_index, edge_weight)


class _WeightedGCN(nn.Module):
    """GCN on the symmetrised weighted graph (weights of both directions added), with a root weight."""

    def __init__(self, d_in: int, d_out: int) -> None:
        from torch_geometric.nn import GCNConv

        from iclr24.holonets.operators import GraphCache

        super().__init__()
        self.conv, self.root = GCNConv(d_in, d_out), nn.Linear(d_in, d_out, bias=False)
        self._symmetrised = GraphCache()

    def forward(self, x, edge_index, edge_weight):
        from torch_geometric.utils import to_undirected

        both, weight = self._symmetrised((edge_index, edge_weight),
                                         lambda: to_undirected(edge_index, edge_weight, reduce="add"))
        return self.conv(x, both, weight) + self.root(x)


def _weighted_dir_gnn(d_in: int, d_out: int) -> nn.Module:
    """PyG's DirGNNConv(GCNConv) with edge weights passed to both directions (its forward takes none)."""
    from torch_geometric.nn import DirGNNConv, GCNConv

    class WeightedDirGNNConv(DirGNNConv):
        def forward(self, x, edge_index, edge_weight=None):
            out = (self.alpha * self.conv_out(x, edge_index.flip([0]), edge_weight)
                   + (1 - self.alpha) * self.conv_in(x, edge_index, edge_weight))
            return out + self.lin(x) if self.lin is not None else out

    return WeightedDirGNNConv(GCNConv(d_in, d_out))


def _collapse_model(name: str, d_in: int, hidden: int, cfg: Config) -> nn.Module:
    from iclr24.holonets.conv import FaberConv
    from iclr24.holonets.resolvent import ResolventConv

    def layer(a, b):
        if name == "Dir-ResolvNet":
            return ResolventConv(a, b, K=cfg.resolvent_K, omega=cfg.omega, alpha=cfg.alpha)
        if name == "FaberNet":
            return _Local(FaberConv(a, b, K=cfg.resolvent_K, alpha=cfg.alpha))
        return _Local(_WeightedGCN(a, b) if name == "GCN" else _weighted_dir_gnn(a, b))

    return _GraphRegressor(nn.ModuleList([layer(d_in, hidden), layer(hidden, hidden)]), hidden)


def _collapse_experiment(cfg: Config, ctx: RunContext) -> CollapseOutcome:
    """Train every model on collapsed graphs; run it on the fine graphs at each heavy-edge scale."""
    from torch_geometric.data import Batch

    from iclr24.holonets.data import clustered_digraphs, scale_heavy_edges

    def batch(graphs):  # float64: the fine graphs' Laplacians at scale 1e4 are ill-conditioned in float32
        graphs = [g.clone() for g in graphs]
        for g in graphs:
            g.x, g.edge_weight, g.node_weight, g.y = g.x.double(), g.edge_weight.double(), g.node_weight.double(), \
                g.y.double()
        return Batch.from_data_list(graphs)

    per_seed = {}
    with ctx.progress("collapse experiment", total=cfg.seeds * len(COLLAPSE_MODELS)) as bar:
        for s, seed in enumerate(ctx.replicate_seeds(cfg.seeds)):
            splits, coarse_splits = zip(*(clustered_digraphs(n, seed=3 * seed + i, return_collapsed=True)
                                          for i, n in enumerate(cfg.collapse_graphs)))
            train, val, test = (batch(split) for split in coarse_splits)
            fine = {scale: batch([scale_heavy_edges(g, scale) for g in splits[2]]) for scale in cfg.scales}
            mean, std = train.y.mean(), train.y.std()
            for name in COLLAPSE_MODELS:
                torch.manual_seed(seed)
                model = _collapse_model(name, train.num_features, cfg.hidden, cfg).double()
                model = _fit_regressor(model, train, val, mean, std, cfg)
                with torch.no_grad():
                    coarse = model(test) * std + mean
                    per_seed[name, "coarse", s] = float((coarse - test.y).abs().mean())
                    for scale, graphs in fine.items():
                        pred = model(graphs) * std + mean
                        per_seed[name, scale, s] = (float((pred - graphs.y).abs().mean()),
                                                    float((pred - coarse).abs().mean() / coarse.std()))
                bar.advance()
    seeds = range(cfg.seeds)
    outcome = CollapseOutcome(
        mae_coarse={m: statistics.mean(per_seed[m, "coarse", s] for s in seeds) for m in COLLAPSE_MODELS},
        mae_fine={(m, c): statistics.mean(per_seed[m, c, s][0] for s in seeds)
                  for m in COLLAPSE_MODELS for c in cfg.scales},
        shift={(m, c): statistics.mean(per_seed[m, c, s][1] for s in seeds)
               for m in COLLAPSE_MODELS for c in cfg.scales},
        per_seed=per_seed)
    top = max(cfg.scales)
    ctx.log("collapse, shift at scale %g: " % top
            + ", ".join(f"{m} {outcome.shift[m, top]:.2g}" for m in COLLAPSE_MODELS))
    return outcome


def _fit_regressor(model: nn.Module, train, val, mean, std, cfg: Config) -> nn.Module:
    """Full-batch Adam on standardised targets; the weights of the best validation MAE."""
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=1e-4)
    target = (train.y - mean) / std
    best = (float("inf"), None)
    for _ in range(cfg.collapse_epochs):
        model.train()
        opt.zero_grad()
        F.mse_loss(model(train), target).backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            val_mae = float((model(val) * std + mean - val.y).abs().mean())
        if val_mae < best[0]:
            best = (val_mae, copy.deepcopy(model.state_dict()))
    model.load_state_dict(best[1])
    return model.eval()


def _collapse_claims(out: CollapseOutcome, cfg: Config) -> list[Claim]:
    """The collapse and transfer claims at the largest scale, over the run's seeds (``out.per_seed``)."""
    top = max(cfg.scales)
    baselines = [m for m in COLLAPSE_MODELS if m != "Dir-ResolvNet"]
    seeds = range(cfg.seeds)

    def log_shift(model):  # shifts span 1e-5 .. 1e8: judged as orders of magnitude
        return [math.log10(max(out.per_seed[model, top, s][1], 1e-300)) for s in seeds]

    def fine_mae(model):
        return [out.per_seed[model, top, s][0] for s in seeds]

    shifts = "; ".join(f"{m} " + ", ".join(f"{out.shift[m, c]:.2g}" for c in cfg.scales) for m in COLLAPSE_MODELS)
    first_baselines = ("GCN", "Dir-GNN")  # the first stability claim: FaberNet moves less than the larger of these
    return [
        Claim(CLAIM_COLLAPSE,
              paper="abstract: 'as opposed to baselines - may be rendered stable to resolution-scale varying "
                    "topological perturbations'; proved for resolvent filters, tested on directed QM7",
              measured=f"shift of the predictions at heavy-edge scales {', '.join(f'{c:g}' for c in cfg.scales)}: "
                       f"{shifts} (mean of {cfg.seeds} seeds; shift: mean |fine - collapsed prediction| / std of the "
                       "collapsed predictions)",
              evidence=all_of(
                  against(log_shift("Dir-ResolvNet"), math.log10(MAX_STABLE_SHIFT), better="lower",
                          label=f"log10 shift of Dir-ResolvNet at scale {top:g}"),
                  *[against(log_shift(m), math.log10(MIN_UNSTABLE_SHIFT), label=f"log10 shift of {m} at scale {top:g}")
                    for m in baselines]),
              provenance="revised", revision=REVISIONS[CLAIM_COLLAPSE],
              original=compare(log_shift("FaberNet"), np.maximum(*map(log_shift, first_baselines)), better="lower",
                               label=f"as first claimed: log10 shift at scale {top:g}, FaberNet - the larger of "
                                     "GCN's and Dir-GNN's")),
        Claim(CLAIM_TRANSFER,
              paper="(our check of what stability buys: the same molecule at two resolutions)",
              measured=f"test MAE at scale {top:g} (collapsed graphs): " + ", ".join(
                  f"{m} {out.mae_fine[m, top]:.3g} ({out.mae_coarse[m]:.3g})" for m in COLLAPSE_MODELS)
                       + f" (mean of {cfg.seeds} seeds)",
              evidence=all_of(
                  ratio(fine_mae("Dir-ResolvNet"), [out.per_seed["Dir-ResolvNet", "coarse", s] for s in seeds],
                        bar=MAX_TRANSFER_RATIO, better="lower", unit="seeds",
                        label=f"Dir-ResolvNet's MAE, fine graphs at scale {top:g} / collapsed graphs"),
                  *[ratio(fine_mae("Dir-ResolvNet"), fine_mae(m), better="lower", unit="seeds",
                          label=f"MAE on the fine graphs at scale {top:g}, Dir-ResolvNet / {m}") for m in baselines]),
              provenance="revised", revision=REVISIONS[CLAIM_TRANSFER]),
    ]


def _plot_collapse(out: CollapseOutcome, cfg: Config):
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    for m in COLLAPSE_MODELS:
        left.plot(cfg.scales, [max(out.shift[m, c], 1e-12) for c in cfg.scales], "o-", label=m)
        right.plot(cfg.scales, [out.mae_fine[m, c] for c in cfg.scales], "o-", label=m)
    left.set(xscale="log", yscale="log", xlabel="heavy-edge scale", ylabel="prediction shift",
             title="fine vs collapsed predictions")
    right.set(xscale="log", yscale="log", xlabel="heavy-edge scale", ylabel="test MAE on fine graphs",
              title="trained on collapsed graphs")
    left.legend(fontsize=8)
    fig.tight_layout()
    return fig


# --- claims and figures -------------------------------------------------------------------------------------


def _claims(acc: dict[tuple[str, str], list[float]]) -> list[Claim]:
    """The node-classification claims from per-graph test accuracies ``acc[(dataset, model)]`` (one graph a seed;
    on the control also ``UNROOTED_GCN``, the GCN the control was first judged with)."""
    mean = {k: statistics.mean(v) for k, v in acc.items()}
    n_graphs = len(acc[CONTROL, "GCN"])
    mixed = PARTLY_DIRECTIONAL

    def show(model, datasets=DIRECTIONAL):
        return ", ".join(f"{d} {mean[d, model]:.3f}" for d in datasets)

    def versus(model, margin, what, datasets=DIRECTIONAL):
        return [compare(acc[d, "FaberNet"], acc[d, model], margin=margin, unit="graphs",
                        label=f"{d}: test accuracy, FaberNet - {what}") for d in datasets]

    def control(gcn):
        return all_of(
            against(acc[CONTROL, gcn], CONTROL_GCN_ACCURACY, unit="graphs",
                    label=f"cyclic-dsbm: {gcn}'s test accuracy"),
            compare(acc[CONTROL, "FaberNet"], acc[CONTROL, gcn], margin=-NON_INFERIORITY_MARGIN, unit="graphs",
                    label=f"cyclic-dsbm: test accuracy, FaberNet - {gcn}"))

    over = f"(mean test accuracy over {n_graphs} generated graphs each)"
    chance = 1.0 / PARTLY_DIRECTIONAL_CLASSES
    return [
        Claim(CLAIM_GCN, paper="heterophilic SOTA where undirected spectral GNNs fail (Tables 1-2)",
              measured=(f"{mixed}: FaberNet {mean[mixed, 'FaberNet']:.3f}, GCN {mean[mixed, 'GCN']:.3f}, MLP "
                        f"{mean[mixed, 'MLP']:.3f} (chance {chance:.2f}) {over}; on the direction-only graphs, "
                        f"first used: FaberNet {show('FaberNet')}, GCN {show('GCN')}"),
              # the comparison means something only while GCN sees part of the class, as the graphs are built for
              evidence=given(against(acc[mixed, "GCN"], chance, unit="graphs",
                                     label=f"{mixed}: GCN's test accuracy, above chance"),
                             *versus("GCN", MARGIN_OVER_GCN, "GCN", datasets=(mixed,))),
              provenance="revised", revision=REVISIONS[CLAIM_GCN],
              original=all_of(*versus("GCN", MARGIN_OVER_GCN, "GCN"))),
        Claim(CLAIM_DIRGNN, paper="FaberNet vs Dir-GNN: " + ", ".join(f"{k} {a} vs {b}" for k, (a, b) in
                                                                      PAPER_REAL.items()),
              measured=f"FaberNet {show('FaberNet')}; Dir-GNN {show('DirGNN')} {over}",
              evidence=all_of(*versus("DirGNN", -NON_INFERIORITY_MARGIN, "Dir-GNN")),
              provenance="revised", revision=REVISIONS[CLAIM_DIRGNN]),
        Claim(CLAIM_CONTROL, paper="(a control of ours: GCN solves heterophily with informative features)",
              measured=(f"cyclic-dsbm: GCN {mean[CONTROL, 'GCN']:.3f}, FaberNet {mean[CONTROL, 'FaberNet']:.3f}, "
                        f"MLP {mean[CONTROL, 'MLP']:.3f}; {UNROOTED_GCN} {mean[CONTROL, UNROOTED_GCN]:.3f} {over}"),
              evidence=control("GCN"), provenance="revised", revision=REVISIONS[CLAIM_CONTROL],
              original=control(UNROOTED_GCN)),
    ]


def _chance_check(acc: dict[tuple[str, str], list[float]], label_blind: dict[str, list[tuple[float, int]]]) -> Check:
    """The fact that keeps syn-dir and flow-dsbm out of the FaberNet-vs-GCN claim: the undirected models (MLP, GCN)
    do no better than guessing the test set's largest class, within ``CHANCE_TOLERANCE_SE`` binomial standard
    errors (``label_blind[d]``: per graph, that class's share and the test set's size)."""
    passed, parts = True, []
    for d in DIRECTIONAL:
        share = statistics.mean(p for p, _ in label_blind[d])
        standard_error = math.sqrt(share * (1 - share) / sum(n for _, n in label_blind[d]))
        for model in ("MLP", "GCN"):
            passed &= statistics.mean(acc[d, model]) <= share + CHANCE_TOLERANCE_SE * standard_error
        parts.append(f"{d}: MLP {statistics.mean(acc[d, 'MLP']):.3f}, GCN {statistics.mean(acc[d, 'GCN']):.3f}, "
                     f"largest test class {share:.3f} (+{CHANCE_TOLERANCE_SE:g} SE: "
                     f"{share + CHANCE_TOLERANCE_SE * standard_error:.3f})")
    return Check(CHECK_CHANCE, passed=passed, detail="; ".join(parts) + " (means over the graphs)")


def _plot_accuracy(mean: dict, datasets: list[str]):
    fig, ax = plt.subplots(figsize=(7, 3.5))
    width = 0.2
    for i, m in enumerate(MODELS):
        ax.bar(np.arange(len(datasets)) + (i - 1.5) * width, [mean[d, m] for d in datasets], width, label=m)
    ax.set_xticks(np.arange(len(datasets)), datasets)
    ax.set_ylabel("test accuracy")
    ax.set_ylim(0, 1.2)
    ax.legend(ncol=4, fontsize=8, loc="upper center")
    ax.set_title("Node classification on generated directed graphs")
    return fig


def _plot_response(model, cfg: Config):
    """|f(z)| over the complex plane for the first FaberConv's forward-branch filters, with the
    spectrum of T of a small flow DSBM graph: the filter acts on each eigenvector by f(lambda)."""
    from iclr24.holonets.data import flow_dsbm
    from iclr24.holonets.operators import dense_characteristic_operator, faber_response, spectrum

    small = flow_dsbm(200, seed=0)
    eig = spectrum(dense_characteristic_operator(small.edge_index, small.num_nodes))
    r = 1.1 * float(eig.abs().max())
    grid = torch.complex(*torch.meshgrid(torch.linspace(-r, r, 200), torch.linspace(-r, r, 200), indexing="xy"))
    conv = model.convs[0]
    coefficients = torch.stack([lin.weight.detach()[:, 0] for lin in conv.lins_fwd["real"]])  # (K, hidden)
    response = faber_response(coefficients, grid.flatten()).abs().norm(dim=-1).reshape(grid.shape)
    fig, ax = plt.subplots(figsize=(4.5, 4))
    im = ax.imshow(response.numpy(), extent=(-r, r, -r, r), origin="lower", cmap="viridis")
    ax.scatter(eig.real, eig.imag, s=6, c="white", edgecolors="black", linewidths=0.3, label="spectrum of T")
    fig.colorbar(im, ax=ax, label="|f(z)| (forward filters, layer 1)")
    ax.set_xlabel("Re z")
    ax.set_ylabel("Im z")
    ax.set_title("FaberNet frequency response")
    ax.legend(fontsize=7, loc="upper right")
    return fig
