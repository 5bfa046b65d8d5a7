"""Reproduction of "Pushing Mixture of Experts to the Limit: Extremely Parameter Efficient MoE for Instruction
Tuning" (Zadouri et al., ICLR 2024), in miniature.

A frozen MLP base is pretrained in-process on one task family (eight skills, labels as they are), then
adapted to a mixture of conflicting tasks (the same skills with their labels shifted by an instructed
amount) and evaluated on the unseen tasks of the mixture's test split and on held-out (skill, shift)
pairs (zero-shot). Methods: full fine-tuning, (IA)^3 and LoRA from HF peft, MoV-{4,10} and
MoLoRA-{2,4} from iclr24.moe_peft, on the same sites. Every method gets the best learning rate of its
grid on a validation split (first seed; every rate screened on a third of the epochs, the best two trained
to the full length), then the chosen rate for every seed; a rate chosen at the edge of its grid is named in
the notes.

Each claim is judged over seeds (one replicate per seed: a fresh base, data and adapters; the seeds of a run
share its task family, drawn from the run's seed), paired. Every claim is a stand-in (a generated miniature for T5
on P3), and claims 2-4 were revised with results in view (the thresholds below say how):

1. MoV-10 is at most 2 points worse than full fine-tuning on the mixture (non-inferiority), tested only once
   full fine-tuning is above chance (trainable fraction reported).
2. MoV-10 beats (IA)^3 by more than 5 points on the mixture.
3. MoLoRA-4 beats LoRA on the mixture.
4. On held-out tasks MoV-10 is at most 2 points worse than (IA)^3, tested only once (IA)^3 is above chance there.
5. Routers specialise: mutual information between task and routed expert (MoV-10, mean over sites)
   above 0.1 bit and above 5x the same measure with task labels shuffled.
"""

from __future__ import annotations

import copy
import statistics
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from iclr24.core import Claim, Result, RunContext, experiment  # noqa: E402
from iclr24.core.evidence import against, all_of, compare, given  # noqa: E402
from iclr24.moe_peft.baselines import peft_ia3, peft_lora  # noqa: E402
from iclr24.moe_peft.model import MoEModel, MoLoRAConfig, MoVConfig, get_moe_model  # noqa: E402
from iclr24.moe_peft.routing import routing_mutual_information  # noqa: E402
from iclr24.moe_peft.stacked import StackedTrainer  # noqa: E402
from iclr24.moe_peft.tasks import SkillTasks, accuracy, mlp_base  # noqa: E402

PAPER = ("Pushing Mixture of Experts to the Limit: Extremely Parameter Efficient MoE for Instruction Tuning "
         "(Zadouri, Üstün, Ahmadian, Ermiş, Locatelli, Hooker, ICLR 2024)")
CLAIM_FULL = "MoV is on par with full fine-tuning while updating a small fraction of the parameters"
CLAIM_IA3 = "MoV outperforms (IA)^3 by a wide margin"
CLAIM_LORA = "MoLoRA outperforms LoRA"
CLAIM_HELD_OUT = "MoV generalises to unseen tasks at least as well as (IA)^3"
CLAIM_ROUTING = "MoV's routers specialise: different tasks are routed to different experts"
# Thresholds (accuracies are fractions; each claim is paired over seeds), each with its provenance.
#: "On par" (provenance "spec"): at most 2 points worse (the spec's pass rule, full FT - MoV-10 <= 2 points).
NON_INFERIORITY_MARGIN = 0.02
#: "At least as well as (IA)^3" on held-out tasks (provenance "revised"): the same 2 points. The first experiment.py
#: asked for MoV-10 >= (IA)^3 (margin 0); the evidence migration gave it the mixture claim's margin with the quick
#: run's 14.2% vs 48.4% in view. It is also judged under the first definition (Claim.original).
FIRST_HELD_OUT_MARGIN = 0.0
HELD_OUT_REVISION = ("margin 0 (first experiment.py: MoV-10 >= (IA)^3 held out) -> within 2 points, the mixture "
                     "claim's, in the evidence migration (c37fa5f) with the quick run's 14.2% vs 48.4% in view")
#: "Outperforms (IA)^3" (provenance "revised", BUDGET_REVISION): by more than 5 points (the spec's pass rule).
MARGIN_OVER_IA3 = 0.05
#: "MoLoRA outperforms LoRA" (provenance "revised", BUDGET_REVISION): any improvement (no effect = 0).
MARGIN_OVER_LORA = 0.0
#: Claims 2 and 3 sit near their margins, and the quick preset's training budget was chosen with their verdicts
#: in view: the first version's 30 epochs were kept when 24 (for run time) moved both to "holds".
BUDGET_REVISION = ("quick's 30 epochs (the first version's) kept after a 24-epoch trial moved claims 2 and 3 to "
                   "holds (c888346): the budget was chosen with these verdicts in view; docs/moe_peft.md")
#: Router specialisation (provenance "spec": stated with the first experiment.py; the spec asks that "router
#: assignments differ across tasks"): I(task; expert) above 0.1 bit and above 5x the shuffled-task control.
MIN_ROUTING_BITS = 0.1
ROUTING_CONTROL_FACTOR = 5.0
#: Every claim is measured on the miniature: the paper's are about instruction-tuning a pretrained T5.
STAND_IN = ("an MLP base pretrained in-process on generated skill tasks, adapted to shifted-label instructions, "
            "stands in for T5 (770M-11B) instruction-tuned on P3")

LABELS = {"full": "full fine-tuning", "ia3": "(IA)^3 (peft)", "lora": "LoRA r4 (peft)", "mov4": "MoV-4",
          "mov10": "MoV-10", "molora2": "MoLoRA-2", "molora4": "MoLoRA-4"}
#: The hidden activations (inputs of the 2nd, 3rd and output layers): the FFN-intermediate sites of MoV/(IA)^3.
SCALED_SITES = ("2", "4", "6")
#: Every linear layer: the sites of LoRA and MoLoRA.
LINEAR_SITES = ("0", "2", "4", "6")


#: The largest learning rate a grid may hold: past it every adapter here diverges in one step.
MAX_LR = 10.0


@dataclass(frozen=True)
class Config:
    seeds: int = 3
    hidden: int = 256
    n_features: int = 16
    n_skills: int = 8
    n_classes: int = 4
    pretrain_per_task: int = 3000
    pretrain_epochs: int = 20
    adapt_per_task: int = 800
    eval_per_task: int = 300
    epochs: int = 30
    batch_size: int = 256
    lora_r: int = 4
    lora_alpha: float = 16.0
    full_lrs: tuple[float, ...] = (3e-4, 1e-3, 3e-3)
    vector_lrs: tuple[float, ...] = (3e-3, 1e-2, 3e-2, 1e-1, 3e-1)  # (IA)^3 and MoV: vectors take large steps
    low_rank_lrs: tuple[float, ...] = (3e-4, 1e-3, 3e-3)  # LoRA and MoLoRA
    # The sweep screens every rate for screen_epochs (None: a third of epochs), keeps the screen_keep best by
    # validation accuracy and trains only those to the full length (successive halving, one rung).
    screen_epochs: int | None = None
    screen_keep: int = 2

    def __post_init__(self) -> None:
        if min(self.seeds, self.hidden, self.n_features, self.n_skills, self.pretrain_per_task,
               self.pretrain_epochs, self.adapt_per_task, self.eval_per_task, self.epochs, self.batch_size,
               self.lora_r) < 1:
            raise ValueError("seeds, sizes, epochs, batch_size and lora_r must be >= 1")
        if self.n_classes < 3:
            raise ValueError(f"n_classes must be >= 3 (two shifts to train, one held out), got {self.n_classes}")
        if not (self.full_lrs and self.vector_lrs and self.low_rank_lrs):
            raise ValueError("each learning-rate grid needs at least one rate")
        for grid in ("full_lrs", "vector_lrs", "low_rank_lrs"):
            bad = [lr for lr in getattr(self, grid) if not 0 < lr <= MAX_LR]  # NaN fails too
            if bad:
                raise ValueError(f"{grid} must hold learning rates in (0, {MAX_LR:g}], got {bad[0]!r}")
        if self.screen_keep < 1:
            raise ValueError(f"screen_keep must be >= 1, got {self.screen_keep}")
        if self.screen_epochs is not None and not 1 <= self.screen_epochs <= self.epochs:
            raise ValueError(f"screen_epochs must be in [1, epochs={self.epochs}] or None, got {self.screen_epochs}")

    @property
    def screen(self) -> int:
        """Epochs every rate of a grid trains before the sweep keeps the ``screen_keep`` best."""
        return max(1, self.epochs // 3) if self.screen_epochs is None else self.screen_epochs


PRESETS = {
    "smoke": Config(seeds=3, hidden=32, n_skills=3, pretrain_per_task=200, pretrain_epochs=2, adapt_per_task=60,
                    eval_per_task=40, epochs=2, full_lrs=(1e-3,), vector_lrs=(1e-2,), low_rank_lrs=(1e-3,)),
    "quick": Config(),
    "paper": Config(seeds=5, hidden=512, pretrain_per_task=6000, adapt_per_task=2000, epochs=50),
}


def _adapt(name: str, base: torch.nn.Module, cfg: Config) -> torch.nn.Module:
    """A fresh copy of the frozen base, wrapped for method ``name``."""
    model = copy.deepcopy(base)
    if name == "full":
        return model.requires_grad_(True)
    if name == "ia3":
        return peft_ia3(model, SCALED_SITES, SCALED_SITES)
    if name == "lora":
        return peft_lora(model, LINEAR_SITES, r=cfg.lora_r, alpha=cfg.lora_alpha)
    experts = int(name.removeprefix("mov").removeprefix("molora"))
    if name.startswith("mov"):
        return get_moe_model(model, MoVConfig(experts, SCALED_SITES, SCALED_SITES))
    return get_moe_model(model, MoLoRAConfig(experts, cfg.lora_r, cfg.lora_alpha, LINEAR_SITES))


def _grid(name: str, cfg: Config) -> tuple[float, ...]:
    return cfg.full_lrs if name == "full" else cfg.vector_lrs if name in ("ia3", "mov4", "mov10") \
        else cfg.low_rank_lrs


def _screening(cfg: Config, lrs: tuple[float, ...]) -> bool:
    """Whether the sweep over ``lrs`` screens on a short horizon (more rates than it keeps, and a shorter horizon)."""
    return len(lrs) > cfg.screen_keep and cfg.screen < cfg.epochs


def _sweep(name: str, base: torch.nn.Module, cfg: Config, seed: int, lrs: tuple[float, ...], train, val,
           advance) -> tuple[float, torch.nn.Module, list[dict]]:
    """The best rate of ``lrs`` by validation accuracy at the full length, its model, and a row per rate.

    Successive halving with one rung, its rule fixed before any result: every rate trains ``cfg.screen``
    epochs; the ``cfg.screen_keep`` best by validation accuracy (ties: the earlier rate of the grid) go on to
    ``cfg.epochs`` from where they stopped, and the best of those is chosen (ties alike). The rates train side
    by side (:class:`StackedTrainer`), and a continued model is the model a full-length fit trains, bit for bit.
    With ``screen_keep >= len(lrs)`` every rate trains to the full length, as a plain grid search does.
    """
    screening = _screening(cfg, lrs)
    models = []
    for _ in lrs:
        torch.manual_seed(seed)  # the same adapter initialisation and batch order for every run
        models.append(_adapt(name, base, cfg))
    # the rates train side by side as one batched model, each as it would alone (bit for bit)
    trainer = StackedTrainer(models, lrs=lrs, generators=[torch.Generator().manual_seed(seed) for _ in lrs])
    trainer.run([train] * len(lrs), epochs=cfg.screen if screening else cfg.epochs, batch_size=cfg.batch_size)
    trainer.write_back()
    scores, rows = [], []
    for lr, model in zip(lrs, models):
        scores.append(accuracy(model, *val))
        rows.append({"method": LABELS[name], "lr": lr, "epochs": trainer.epochs_done,
                     "validation accuracy": round(scores[-1], 4)})
        advance(method=name, lr=lr, val=round(scores[-1], 3))
    candidates = range(len(lrs))
    if screening:
        # the stable sort keeps grid order among ties
        candidates = sorted(sorted(range(len(lrs)), key=lambda i: -scores[i])[:cfg.screen_keep])
        trainer = trainer.subset(candidates)
        trainer.run([train] * len(candidates), epochs=cfg.epochs - trainer.epochs_done, batch_size=cfg.batch_size)
        trainer.write_back()
        for i in candidates:
            scores[i] = accuracy(models[i], *val)
            rows.append({"method": LABELS[name], "lr": lrs[i], "epochs": trainer.epochs_done,
                         "validation accuracy": round(scores[i], 4)})
            advance(method=name, lr=lrs[i], val=round(scores[i], 3))
    best = max(candidates, key=lambda i: (scores[i], -i))
    return lrs[best], models[best], rows


@experiment(
    name="moe_peft",
    paper=PAPER,
    presets=PRESETS,
    claims=[CLAIM_FULL, CLAIM_IA3, CLAIM_LORA, CLAIM_HELD_OUT, CLAIM_ROUTING],
    description="MoV and MoLoRA against full fine-tuning, (IA)^3 and LoRA (HF peft) on a frozen base adapted to "
                "a mixture of conflicting generated tasks, with held-out tasks for zero-shot generalisation.",
)
def reproduce(cfg: Config, ctx: RunContext) -> Result:
    names = tuple(LABELS)
    family = SkillTasks(cfg.n_features, cfg.n_skills, cfg.n_classes, seed=ctx.seed)
    train_tasks, held_out_tasks = family.adaptation_split()
    lr_of: dict[str, float] = {}
    mixture: dict[str, list[float]] = {n: [] for n in names}
    held_out: dict[str, list[float]] = {n: [] for n in names}
    sweep_rows, fractions, base_accuracy = [], {}, []
    routing: list[dict] = []
    grids = [_grid(n, cfg) for n in names]
    total = sum(len(lrs) + (cfg.screen_keep if _screening(cfg, lrs) else 0) for lrs in grids) \
        + (cfg.seeds - 1) * len(names) + cfg.seeds
    seeds = ctx.replicate_seeds(cfg.seeds)
    generators = [torch.Generator().manual_seed(seed) for seed in seeds]  # a seed's data and batch orders
    with ctx.progress("pretraining and adapting", total=total) as bar:
        # Independent fits of one architecture train side by side as one batched model, each bit for bit as it
        # would alone (StackedTrainer): the seeds' bases, each method's rates, each method's other seeds.
        bases, pretraining, pretraining_test = [], [], []
        for seed, g in zip(seeds, generators):
            torch.manual_seed(seed)
            bases.append(mlp_base(family.input_dim, cfg.hidden, cfg.n_classes))
            pretraining.append(family.sample(family.pretraining_tasks(), cfg.pretrain_per_task, g)[:2])
            pretraining_test.append(family.sample(family.pretraining_tasks(), cfg.eval_per_task, g)[:2])
        pretrainer = StackedTrainer(bases, lrs=[1e-3] * len(seeds), generators=generators)
        pretrainer.run(pretraining, epochs=cfg.pretrain_epochs, batch_size=cfg.batch_size)
        pretrainer.write_back()
        data = []
        for base, test, g in zip(bases, pretraining_test, generators):
            base_accuracy.append(accuracy(base, *test))
            base.requires_grad_(False)
            bar.advance(pretrained=round(base_accuracy[-1], 3))
            X, y, _ = family.sample(train_tasks, cfg.adapt_per_task, g)
            X_val, y_val, _ = family.sample(train_tasks, cfg.eval_per_task, g)
            X_test, y_test, task_test = family.sample(train_tasks, cfg.eval_per_task, g)
            X_held, y_held, _ = family.sample(held_out_tasks, cfg.eval_per_task, g)
            data.append({"train": (X, y), "val": (X_val, y_val), "test": (X_test, y_test), "task": task_test,
                         "held": (X_held, y_held)})
        for name in names:
            # the first seed chooses each method's rate; the others reuse it
            lr_of[name], chosen, rows = _sweep(name, bases[0], cfg, seeds[0], _grid(name, cfg), data[0]["train"],
                                              data[0]["val"], bar.advance)
            sweep_rows += rows
            others = []
            for seed, base in zip(seeds[1:], bases[1:]):
                torch.manual_seed(seed)  # the same adapter initialisation and batch order for every run
                others.append(_adapt(name, base, cfg))
            if others:
                trainer = StackedTrainer(others, lrs=[lr_of[name]] * len(others),
                                         generators=[torch.Generator().manual_seed(seed) for seed in seeds[1:]])
                trainer.run([d["train"] for d in data[1:]], epochs=cfg.epochs, batch_size=cfg.batch_size)
                trainer.write_back()
            for model, d in zip([chosen, *others], data):
                fractions[name] = _trainable(model)
                mixture[name].append(accuracy(model, *d["test"]))
                held_out[name].append(accuracy(model, *d["held"]))
                if name == "mov10":
                    routing.append(_routing(model, d["test"][0], d["task"], len(train_tasks), seeds[len(routing)]))
            for _ in others:
                bar.advance(method=name, lr=lr_of[name])
        for s, seed in enumerate(seeds):
            ctx.log(f"seed {seed}: base {base_accuracy[s]:.3f}; " + ", ".join(
                f"{n} {mixture[n][s]:.3f}/{held_out[n][s]:.3f}" for n in names))

    screen_note = (f" (each rate screened for {cfg.screen} epochs, the best {cfg.screen_keep} continued to "
                   f"{cfg.epochs})" if any(_screening(cfg, lrs) for lrs in grids) else "")
    at_edge = [LABELS[n] for n in names if len(_grid(n, cfg)) > 1 and lr_of[n] in (min(_grid(n, cfg)),
                                                                                    max(_grid(n, cfg)))]
    mean_mix = {n: statistics.mean(v) for n, v in mixture.items()}
    mean_held = {n: statistics.mean(v) for n, v in held_out.items()}
    metrics = {"base_pretraining_accuracy": statistics.mean(base_accuracy),
               "routing_mutual_information_bits": statistics.mean(r["mi"] for r in routing),
               "routing_mutual_information_shuffled_bits": statistics.mean(r["mi_shuffled"] for r in routing)}
    for n in names:
        metrics |= {f"{n}_mixture_accuracy": mean_mix[n], f"{n}_held_out_accuracy": mean_held[n],
                    f"{n}_trainable_fraction": fractions[n][1], f"{n}_trainable_parameters": fractions[n][0],
                    f"{n}_lr": lr_of[n]}
    rows = [{"method": LABELS[n], "trainable parameters": fractions[n][0],
             "trainable %": round(100 * fractions[n][1], 3), "lr": lr_of[n],
             "mixture accuracy": round(mean_mix[n], 4), "held-out accuracy": round(mean_held[n], 4),
             "per seed (mixture)": [round(v, 4) for v in mixture[n]]} for n in names]
    return Result(
        metrics=metrics,
        claims=_claims(mixture, held_out, fractions, routing, chance=1 / cfg.n_classes),
        figures={"accuracy_vs_parameters.png": _plot_tradeoff(mean_mix, mean_held, fractions, 1 / cfg.n_classes),
                 "router_usage.png": _plot_routing(routing[0], train_tasks)},
        tables={"methods": rows, "learning_rate_sweep": sweep_rows,
                "routing": [{"site": site, "I(task; expert) bits, first seed": round(mi, 4)}
                            for site, mi in routing[0]["per_site"].items()]},
        notes=(f"{cfg.seeds} seeds. Base: MLP, {cfg.hidden} wide, 3 GELU layers, pretrained {cfg.pretrain_epochs} "
               f"epochs on {cfg.n_skills} skills ({cfg.pretrain_per_task} examples each; accuracy "
               f"{statistics.mean(base_accuracy):.3f}), then frozen. Mixture: {len(train_tasks)} (skill, shift) "
               f"tasks, {cfg.adapt_per_task} examples each, {cfg.epochs} epochs, Adam, batch {cfg.batch_size}; "
               f"held out: {len(held_out_tasks)} unseen pairs. (IA)^3 and MoV scale the hidden activations, LoRA "
               f"and MoLoRA (r={cfg.lora_r}, alpha={cfg.lora_alpha:g}) adapt every linear layer. Learning rate "
               f"per method: best validation accuracy of its grid on the first seed{screen_note}"
               f"{'; at the edge of its grid: ' + ', '.join(at_edge) if at_edge else ', inside the grid for all'}. "
               f"The paper's T5 on P3 does not run offline; see docs/moe_peft.md."),
    )


def _trainable(model: torch.nn.Module) -> tuple[int, float]:
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, trainable / sum(p.numel() for p in model.parameters())


def _routing(model: MoEModel, X: torch.Tensor, task: torch.Tensor, n_tasks: int, seed: int) -> dict:
    """Per site, each task's mean routing distribution, I(task; expert), and the same with shuffled tasks."""
    shuffled = task[torch.randperm(len(task), generator=torch.Generator().manual_seed(seed))]
    per_task = {}
    model.eval()
    for labels, key in ((task, "real"), (shuffled, "shuffled")):
        sums = {}
        for t in range(n_tasks):
            model.reset_router_statistics()
            with torch.no_grad():
                model(X[labels == t])
            for site, stats in model.router_statistics().items():
                sums.setdefault(site, []).append(stats.mean_probability)
        per_task[key] = {site: torch.stack(v) for site, v in sums.items()}
    mi = {site: routing_mutual_information(p) for site, p in per_task["real"].items()}
    mi_shuffled = {site: routing_mutual_information(p) for site, p in per_task["shuffled"].items()}
    return {"per_site": mi, "mi": statistics.mean(mi.values()), "mi_shuffled": statistics.mean(mi_shuffled.values()),
            "usage": per_task["real"]}


def _claims(mixture: dict[str, list[float]], held: dict[str, list[float]], fractions: dict,
            routing: list[dict], chance: float) -> list[Claim]:
    """The five claims from per-seed accuracies (``mixture``, ``held``: method -> one value per seed) and per-seed
    routing measurements; ``chance`` is 1 / classes."""
    def pct(x: float) -> str:
        return f"{100 * x:.1f}%"

    mix = {n: statistics.mean(v) for n, v in mixture.items()}
    held_mean = {n: statistics.mean(v) for n, v in held.items()}
    mi = [r["mi"] for r in routing]
    control = [r["mi_shuffled"] for r in routing]
    seeds = f"mean of {len(mixture['full'])} seeds"
    stand_in = {"subject": "stand-in", "stand_in": STAND_IN}
    return [
        Claim(CLAIM_FULL, "on par with full fine-tuning, updating less than 1% of an 11B-parameter T5 "
              "(abstract; zero-shot on held-out P3 tasks)",
              f"mixture test accuracy: full fine-tuning {pct(mix['full'])}, MoV-10 {pct(mix['mov10'])} (chance "
              f"{pct(chance)}; {seeds}), training {pct(fractions['mov10'][1])} of the parameters "
              f"({fractions['mov10'][0]})",
              given(against(mixture["full"], chance, label="full fine-tuning's mixture accuracy vs chance"),
                    compare(mixture["mov10"], mixture["full"], margin=-NON_INFERIORITY_MARGIN,
                            label="mixture accuracy, MoV-10 - full fine-tuning")),
              provenance="spec", **stand_in),
        Claim(CLAIM_IA3, "outperforms standard PEFT methods ((IA)^3, the method MoV mixes) (abstract)",
              f"mixture test accuracy: MoV-10 {pct(mix['mov10'])} vs (IA)^3 {pct(mix['ia3'])} ({seeds})",
              compare(mixture["mov10"], mixture["ia3"], margin=MARGIN_OVER_IA3,
                      label="mixture accuracy, MoV-10 - (IA)^3"),
              provenance="revised", revision=BUDGET_REVISION, **stand_in),
        Claim(CLAIM_LORA, "outperforms standard PEFT methods (LoRA, the method MoLoRA mixes) (abstract)",
              f"mixture test accuracy: MoLoRA-4 {pct(mix['molora4'])} vs LoRA {pct(mix['lora'])} ({seeds})",
              compare(mixture["molora4"], mixture["lora"], margin=MARGIN_OVER_LORA,
                      label="mixture accuracy, MoLoRA-4 - LoRA"),
              provenance="revised", revision=BUDGET_REVISION, **stand_in),
        Claim(CLAIM_HELD_OUT, "generalises to unseen tasks, as it does not depend on prior task knowledge (abstract)",
              f"held-out tasks: MoV-10 {pct(held_mean['mov10'])} vs (IA)^3 {pct(held_mean['ia3'])}; full "
              f"fine-tuning {pct(held_mean['full'])}, LoRA {pct(held_mean['lora'])} (chance {pct(chance)}; {seeds})",
              given(against(held["ia3"], chance, label="(IA)^3's held-out accuracy vs chance"),
                    compare(held["mov10"], held["ia3"], margin=-NON_INFERIORITY_MARGIN,
                            label="held-out accuracy, MoV-10 - (IA)^3")),
              provenance="revised", revision=HELD_OUT_REVISION,
              original=compare(held["mov10"], held["ia3"], margin=FIRST_HELD_OUT_MARGIN,
                               label="held-out accuracy, MoV-10 - (IA)^3 (first definition: >= (IA)^3)"),
              **stand_in),
        Claim(CLAIM_ROUTING, "experts specialise by task (the paper's routing analysis; not verified here)",
              f"I(task; expert) = {statistics.mean(mi):.3f} bits (MoV-10, mean over sites; shuffled tasks "
              f"{statistics.mean(control):.4f} bits; {seeds})",
              all_of(against(mi, MIN_ROUTING_BITS, label="I(task; expert), bits"),
                     compare(mi, [ROUTING_CONTROL_FACTOR * c for c in control],
                             label=f"I(task; expert) - {ROUTING_CONTROL_FACTOR:g}x the shuffled-task control")),
              provenance="spec", **stand_in),
    ]


def _plot_tradeoff(mix: dict, held: dict, fractions: dict, chance: float):
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), sharex=True)
    for ax, acc, title in ((axes[0], mix, "mixture (training tasks)"), (axes[1], held, "held-out tasks")):
        for n in acc:
            colour = "tab:red" if n.startswith(("mov", "molora")) else "tab:grey"
            ax.scatter(fractions[n][0], 100 * acc[n], color=colour)
            ax.annotate(LABELS[n], (fractions[n][0], 100 * acc[n]), fontsize=7, xytext=(3, 3),
                        textcoords="offset points")
        ax.axhline(100 * chance, color="black", linestyle=":", linewidth=1)
        ax.annotate("chance", (min(f for f, _ in fractions.values()), 100 * chance), fontsize=7,
                    xytext=(0, 3), textcoords="offset points")
        ax.set_xscale("log")
        ax.set_xlabel("trainable parameters")
        ax.set_ylabel("accuracy (%)")
        ax.set_title(title)
    fig.tight_layout()
    return fig


def _plot_routing(routing: dict, tasks: list[tuple[int, int]]):
    usage = routing["usage"]
    fig, axes = plt.subplots(1, len(usage), figsize=(3.2 * len(usage), 4))
    for ax, (site, probs) in zip(np.atleast_1d(axes), usage.items()):
        ax.imshow(probs.numpy(), aspect="auto", cmap="viridis", vmin=0)
        ax.set_yticks(range(len(tasks)), [f"skill {k}, shift {j}" for k, j in tasks], fontsize=6)
        ax.set_xlabel("expert")
        ax.set_title(f"site {site}: I = {routing['per_site'][site]:.2f} bits", fontsize=9)
    fig.suptitle("MoV-10 mean routing probability per task", fontsize=10)
    fig.tight_layout()
    return fig
