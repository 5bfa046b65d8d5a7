"""Reproduction of HyperAttention's claims on a CPU.

1. Speed: time of HyperAttention and of exact attention (torch SDPA, whose CPU kernel is
   a flash-attention kernel) over n, causal and not; power-law exponents and speed-ups.
2. Error: relative Frobenius error of the output on clustered inputs (realistic,
   non-uniform attention) over n, and against sample size, with three ablations
   (LSH blocks alone, uniform sampling alone, blocks in the input order without sortLSH).
3. Model quality: a small causal transformer trained on a language that needs
   long-range recall (random segments, each repeated), checked to beat a bag-of-tokens
   floor by a wide margin, then evaluated with the attention of its final half of layers
   (and of all layers) replaced by HyperAttention, as the paper does with ChatGLM2.

Every claim is judged by :mod:`iclr24.core.evidence` over replicates, against the thresholds below: timings over
the interleaved repeats (``ratio`` of per-repeat times; exponents fitted per repeat), errors over independent draws
of the clustered inputs (``ctx.replicate_seeds``), perplexities over held-out sequences.
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
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from iclr24.core import Claim, Result, RunContext, experiment, fit_power_law, interleaved_times  # noqa: E402
from iclr24.core.evidence import against, all_of, compare, given, not_run, ratio  # noqa: E402
from iclr24.core.timing import median_ratio  # noqa: E402
from iclr24.hyperattention.attention import hyper_attention  # noqa: E402
from iclr24.hyperattention.module import HyperAttention  # noqa: E402
from iclr24.hyperattention.tiny_lm import (  # noqa: E402
    RepeatedSegments,
    TinyLM,
    TinyLMConfig,
    bag_of_tokens_perplexity,
)

PAPER = "HyperAttention: Long-context Attention in Near-Linear Time (Han et al., ICLR 2024)"
PAPER_SPEEDUP = 5.0  # single causal attention layer, n = 131k, vs FlashAttention, A100 (Fig. 4)
PAPER_PPL = (5.6, 6.3)  # ChatGLM2-32k, LongBench, final half of the layers replaced (Sec. 5.1)

# Thresholds. Each dates from the first version (aa63c0f) unless a *_REVISION line below says what changed after
# results were seen, and why; every claim carries its provenance.
#: "Near-linear time" (Thm. 1; the spec: near-linear up to log factors): HyperAttention's fitted exponent of
#: time ~ n^p below 1.3, and exact attention's above 1.7 ("quadratic", allowing for fixed costs at short n);
#: both stated with the first version of this reproduction, before any run.
EXPONENT_NEAR_LINEAR = 1.3
EXPONENT_QUADRATIC = 1.7
#: "Faster than exact attention": exact / HyperAttention time above 1; "widening with n": the speed-up at the
#: longest n above that at the shortest approximated n (ratio above 1). No effect = 1.
SPEEDUP_BAR = 1.0
#: "Sortlsh and sampling together beat either alone": any reduction of the error (no effect = 0).
MARGIN_ABLATION = 0.0
#: "Perplexity costs little": the relative increase at most twice the paper's (5.6 -> 6.3, +12.5%), i.e. a ratio
#: of perplexities below 1.25; and the model must use its attention: exact perplexity below 0.5x the
#: bag-of-tokens floor (the 1.25 bar from the first version; the floor since ca752fe: PPL_REVISION).
PPL_INCREASE_BAR = 1 + 2 * (PAPER_PPL[1] / PAPER_PPL[0] - 1)
PPL_FLOOR_SHARE = 0.5

FIT_REVISION = ("bars 1.3 / 1.7 from the first version; the fit range moved in ca752fe (#17), after a review's "
                "measurements, to start where HyperAttention approximates (n >= min_seq_len, causal >= 2 min_seq_len; "
                "before: n > min_seq_len), which added n=4096 to the non-causal fits and raised their exponent")
SPEED_REVISION = ("bar 1 (faster) from the first version; ca752fe (#17), with the official cut-off, measures the "
                  "widening from the shortest approximated n (causal 2 min_seq_len) instead of the shortest n, where "
                  "the old cut-off computed exact attention; that made both widening parts harder")
ERROR_REVISION = ("the first bar, error growth <= 1.25x from the shortest to the longest n, was read off one seed's "
                  "run (aa63c0f); c37fa5f re-derived it as one log factor of n, log(n_max) / log(n_min) (1.25 again "
                  "for 4k..32k), judged over input draws")
ABLATION_REVISION = ("the third part (sortLSH beats blocks in the input order) was added in ca752fe, after runs; "
                     "the first two parts and their margin 0 (any reduction) are the first version's")
PPL_REVISION = ("the cost bar (1.25: twice the paper's +12.5%) is the first version's; the requirement was exact "
                "perplexity < 0.9 x the vocabulary size on a lexicon language (aa63c0f), and ca752fe, after that model "
                "was seen not to use its attention (64.9 against 59.4 for counting tokens), changed the probe language "
                "to repeated segments and the requirement to < 0.5 x the bag-of-tokens floor; the claim then failed")
PPL_STAND_IN = ("a 2-layer rotary transformer (d=64) trained in the run on random segments each followed by its copy "
                "stands in for ChatGLM2-6B-32k on LongBench")


def error_growth_bar(n_min: int, n_max: int) -> float:
    """The most the error may grow from ``n_min`` to ``n_max`` and still count as "bounded as n grows".

    Thm. 1's guarantee does not depend on n; the spec reads the paper's bounds as holding up to log factors of n.
    So the error may grow by at most one log factor: ``log(n_max) / log(n_min)`` (1.25 from 4k to 32k). Fixed by
    the lengths of the preset, not by a run.
    """
    return math.log(n_max) / math.log(n_min)

CLAIM_SCALING = "run time grows near-linearly in n, exact attention quadratically"
CLAIM_SPEED = "faster than exact attention beyond a crossover length, widening with n"
CLAIM_ERROR = "approximation error stays bounded as n grows"
CLAIM_ABLATION = "sortLSH blocks and column sampling together beat either alone, and sortLSH beats unsorted blocks"
CLAIM_PPL = "replacing the final half of the layers costs little perplexity"


#: The largest learning rate ``--set`` takes for ``lm_lr`` (AdamW's peak, one-cycle): Adam moves each weight by about
#: lr a step, so past 1 one step outgrows the weights' scale (the presets use 3e-3; 1e308 overflows Adam's update).
MAX_LR = 1.0


@dataclass(frozen=True)
class Config:
    maximum: ClassVar[dict[str, float]] = {"lm_lr": MAX_LR}
    allow_empty: ClassVar[tuple[str, ...]] = ("hyper_only_ns",)
    # speed: sequence lengths, one attention layer (batch 1) of `heads` heads of `head_dim`
    ns: tuple[int, ...] = (4096, 8192, 16384, 32768)
    # HyperAttention alone at longer n (exact attention there costs minutes): widens its fit
    hyper_only_ns: tuple[int, ...] = (65536, 131072)
    heads: int = 1
    head_dim: int = 64
    repeats: int = 3
    # HyperAttention's own parameters (the authors' defaults)
    block_size: int = 256
    sample_size: int = 256
    lsh_num_projs: int = 7
    min_seq_len: int = 4096
    # error: clustered inputs, and a sweep over the sample size at n = error_n
    n_clusters: int = 64
    error_n: int = 8192
    sample_sizes: tuple[int, ...] = (32, 64, 128, 256, 512, 1024)
    error_seeds: int = 3
    # model quality: the tiny LM, its training, and HyperAttention scaled to its context
    lm_context: int = 512
    lm_segment: int = 64  # the repeated segments' length: the distance induction must reach back
    lm_layers: int = 2
    lm_steps: int = 600
    lm_batch: int = 8
    lm_lr: float = 3e-3
    lm_eval_sequences: int = 16
    lm_block_size: int = 32
    lm_sample_size: int = 32
    lm_min_seq_len: int = 64

    def __post_init__(self) -> None:
        if not self.ns or any(n < 2 for n in self.ns):
            raise ValueError(f"ns must hold sequence lengths >= 2, got {self.ns}")
        if not 1 <= self.lm_segment <= self.lm_context // 2:
            raise ValueError(f"lm_segment must be in [1, lm_context / 2 = {self.lm_context // 2}] so that a "
                             f"segment's copy fits in the context, got {self.lm_segment}")
        if self.lm_layers < 2 or self.lm_layers % 2:
            raise ValueError(f"lm_layers must be even and >= 2 (half are replaced), got {self.lm_layers}")


PRESETS = {
    "smoke": Config(ns=(512, 1024, 2048), hyper_only_ns=(4096,), repeats=3, block_size=64, sample_size=64,
                    min_seq_len=256,
                    n_clusters=16, error_n=1024, sample_sizes=(32, 128), error_seeds=3,
                    lm_context=64, lm_segment=16, lm_steps=4, lm_batch=2, lm_eval_sequences=3, lm_block_size=8,
                    lm_sample_size=8, lm_min_seq_len=16),
    "quick": Config(),
    "paper": Config(ns=(8192, 16384, 32768, 65536, 131072), hyper_only_ns=(), heads=32, repeats=3, error_n=32768,
                    lm_context=2048, lm_segment=256, lm_layers=4, lm_steps=3000, lm_block_size=128, lm_sample_size=128,
                    lm_min_seq_len=256),
}


@experiment(
    name="hyperattention",
    paper=PAPER,
    presets=PRESETS,
    claims=[CLAIM_SCALING, CLAIM_SPEED, CLAIM_ERROR, CLAIM_ABLATION, CLAIM_PPL],
    description="Near-linear-time attention: sortLSH blocks + sampled columns, merged by log-sum-exp.",
    runs_alone=True,  # the speed claims time wall-clock
    timed_claims=[CLAIM_SCALING, CLAIM_SPEED],
)
def reproduce(cfg: Config, ctx: RunContext) -> Result:
    """HyperAttention vs exact attention: speed, error and perplexity."""
    metrics, timings, tables, figures = {}, {}, {}, {}
    hyper_kw = dict(block_size=cfg.block_size, sample_size=cfg.sample_size, lsh_num_projs=cfg.lsh_num_projs,
                    min_seq_len=cfg.min_seq_len)

    # 1. Speed ----------------------------------------------------------------------------------
    rows, times = _time_sweep(cfg, ctx, hyper_kw)
    tables["speed"] = rows
    # where the approximation runs: n >= min_seq_len, and causal from 2 min_seq_len (the halves must reach it)
    approximated = {c: [n for n in cfg.ns if n >= cfg.min_seq_len * (2 if c else 1)] for c in (False, True)}
    approx_ns = approximated[False]
    exponents, fit_ranges = {}, {}  # per mask: one exponent per repeat
    for causal in (False, True):
        mask = _mask(causal)
        for r in rows:
            if r["causal"] == causal and r["exact_s"] is not None:
                timings[f"speedup_{mask}@{r['n']}"] = r["speedup"]
        both = approximated[causal]
        hyper = [n for n in (*cfg.ns, *cfg.hyper_only_ns) if n >= cfg.min_seq_len * (2 if causal else 1)]
        if len(both) >= 2 and len(hyper) >= 2:
            exponents[f"hyper_{mask}"] = _exponents(times, hyper, causal, "hyper")
            exponents[f"exact_{mask}"] = _exponents(times, both, causal, "exact")
            fit_ranges = {"hyper": (hyper[0], hyper[-1]), "exact": (both[0], both[-1])}
    timings.update({f"exponent_{k}": statistics.median(v) for k, v in exponents.items()})
    figures["time_vs_n.png"] = _plot_times(rows)

    # 2. Error ------------------------------------------------------------------------------------
    errors = {n: _errors(cfg, ctx, n, {"hyper": hyper_kw})["hyper"] for n in approx_ns}  # per input draw
    for n, e in errors.items():
        metrics[f"rel_error_clustered@{n}"] = statistics.mean(e)
    ctx.log("relative error on clustered inputs by n: "
            f"{ {n: round(statistics.mean(e), 4) for n, e in errors.items()} }")
    variants = {"hyper": hyper_kw, "blocks_only": {**hyper_kw, "sample_size": 0},
                "sampling_only": {**hyper_kw, "block_size": 0}, "unsorted_blocks": {**hyper_kw, "lsh_num_projs": 0}}
    for m in cfg.sample_sizes:
        variants[f"hyper@{m}"] = {**hyper_kw, "sample_size": m}
        variants[f"sampling_only@{m}"] = {**hyper_kw, "sample_size": m, "block_size": 0}
    at_error_n = _errors(cfg, ctx, cfg.error_n, variants)
    mean_at = {name: statistics.mean(e) for name, e in at_error_n.items()}
    sweep = [{"sample_size": m, "hyper": mean_at[f"hyper@{m}"], "sampling_only": mean_at[f"sampling_only@{m}"]}
             for m in cfg.sample_sizes]
    tables["error_vs_sample_size"] = sweep
    figures["error_vs_sample_size.png"] = _plot_errors(sweep, mean_at["blocks_only"], cfg)
    metrics.update({f"rel_error_{k}": mean_at[k] for k in ("hyper", "blocks_only", "sampling_only", "unsorted_blocks")})

    # 3. Model quality ------------------------------------------------------------------------------
    ppl = _perplexity_cost(cfg, ctx)
    metrics.update({f"ppl_{k}": v for k, v in ppl.items() if k != "per_sequence"})

    claims = [
        _scaling_claim(exponents, fit_ranges),
        _speed_claim(cfg, rows, times, approximated),
        _error_claim(errors),
        _ablation_claim(at_error_n, cfg),
        _perplexity_claim(ppl, cfg),
    ]
    notes = (f"CPU, {torch.get_num_threads()} torch thread(s); exact attention is torch SDPA. Speed on Gaussian "
             f"inputs (1 x {cfg.heads} heads x n x {cfg.head_dim}), {cfg.repeats} interleaved repeats per n; error on "
             f"clustered inputs ({cfg.n_clusters} clusters), {cfg.error_seeds} input draws per n; perplexity of a tiny "
             f"rotary transformer trained in this run, on {cfg.lm_eval_sequences} held-out sequences. See "
             "docs/hyperattention.md.")
    return Result(metrics=metrics, timings=timings, claims=claims, figures=figures, tables=tables, notes=notes)


# --- claims --------------------------------------------------------------------------------------------------


def _mask(causal: bool) -> str:
    return "causal" if causal else "noncausal"


def _exponents(times: dict, ns: list[int], causal: bool, which: str) -> list[float]:
    """One fitted exponent of time ~ n^p per repeat: repeat r's times over ``ns``."""
    per_n = [times[n, causal][which] for n in ns]
    return [fit_power_law(ns, [t[r] for t in per_n]) for r in range(len(per_n[0]))]


def _scaling_claim(exponents: dict[str, list[float]], fit_ranges: dict) -> Claim:
    statement, paper = CLAIM_SCALING, "near-linear time (Thm. 1); exact attention is quadratic"
    if not exponents:
        return Claim(statement, paper, "not measured: fewer than two lengths at or above min_seq_len",
                     not_run("fewer than two sequence lengths at or above min_seq_len: no exponent to fit"),
                     provenance="revised", revision=FIT_REVISION)
    parts = []
    for mask in ("noncausal", "causal"):
        parts.append(against(exponents[f"hyper_{mask}"], EXPONENT_NEAR_LINEAR, better="lower", unit="repeats",
                             label=f"HyperAttention's exponent, {mask}"))
        parts.append(against(exponents[f"exact_{mask}"], EXPONENT_QUADRATIC, better="higher", unit="repeats",
                             label=f"exact attention's exponent, {mask}"))

    def median(key):
        return statistics.median(exponents[key])
    measured = (f"exponent {median('hyper_noncausal'):.2f} (causal {median('hyper_causal'):.2f}) over "
                f"n={fit_ranges['hyper'][0]}..{fit_ranges['hyper'][1]} vs exact {median('exact_noncausal'):.2f} "
                f"(causal {median('exact_causal'):.2f}) over n={fit_ranges['exact'][0]}..{fit_ranges['exact'][1]}; "
                "medians of the exponents fitted per repeat")
    return Claim(statement, paper, measured, all_of(*parts), provenance="revised", revision=FIT_REVISION)


def _speed_claim(cfg: Config, rows: list[dict], times: dict, approximated: dict) -> Claim:
    """Faster at the longest n (paired interleaved repeats), and more so than at the shortest approximated n."""
    longest = max(cfg.ns)
    speed = {c: {r["n"]: r["speedup"] for r in rows if r["causal"] == c and r["exact_s"] is not None}
             for c in (False, True)}
    crossover = {c: next((n for n in sorted(speed[c]) if speed[c][n] > 1.0), None) for c in (False, True)}
    parts = []
    for causal in (False, True):
        at_longest = times[longest, causal]
        parts.append(ratio(at_longest["exact"], at_longest["hyper"], bar=SPEEDUP_BAR, better="higher",
                           unit="repeats", label=f"exact / HyperAttention time at n={longest}, {_mask(causal)}"))
        shortest = min(approximated[causal], default=None)
        if shortest is None or shortest == longest:
            parts.append(not_run(f"{_mask(causal)}: fewer than two approximated lengths, no widening to measure"))
            continue
        per_repeat = {n: [e / h for e, h in zip(times[n, causal]["exact"], times[n, causal]["hyper"])]
                      for n in (shortest, longest)}
        parts.append(ratio(per_repeat[longest], per_repeat[shortest], bar=SPEEDUP_BAR, better="higher",
                           paired=False, unit="repeats",
                           label=f"speed-up at n={longest} / at n={shortest}, {_mask(causal)}"))

    def at_shortest(c: bool) -> str:
        n = min(approximated[c], default=None)
        return f"{speed[c][n]:.2f}x at n={n}" if n else "none approximated"
    measured = (f"{speed[True][longest]:.2f}x causal, {speed[False][longest]:.2f}x non-causal at n={longest} (CPU, "
                f"vs SDPA; medians of {cfg.repeats} interleaved repeats); faster from n={crossover[True]} causal, "
                f"n={crossover[False]} non-causal; at the shortest approximated n: {at_shortest(True)} causal, "
                f"{at_shortest(False)} non-causal")
    return Claim(CLAIM_SPEED, f"{PAPER_SPEEDUP:.0f}x at n=131k, causal, one layer, vs FlashAttention (A100)",
                 measured, all_of(*parts), provenance="revised", revision=SPEED_REVISION)


def _error_claim(errors: dict[int, list[float]]) -> Claim:
    """The error at the longest approximated n against the shortest's, paired by input draw."""
    statement, paper = CLAIM_ERROR, "spectral-norm error guarantee independent of n under bounded hardness (Thm. 1)"
    if len(errors) < 2:
        return Claim(statement, paper, "not measured: fewer than two lengths at or above min_seq_len",
                     not_run("fewer than two sequence lengths at or above min_seq_len: no growth to measure"),
                     provenance="revised", revision=ERROR_REVISION)
    first, last = min(errors), max(errors)
    bar = error_growth_bar(first, last)
    measured = (", ".join(f"{statistics.mean(e):.3f} at n={n}" for n, e in sorted(errors.items()))
                + f" (relative Frobenius error on clustered inputs, mean of {len(errors[first])} input draws); "
                f"allowed growth {bar:.3f}x (one log factor of n)")
    return Claim(statement, paper, measured,
                 ratio(errors[last], errors[first], bar=bar, better="lower", unit="input draws",
                       label=f"error at n={last} / at n={first}"), provenance="revised", revision=ERROR_REVISION)


def _ablation_claim(at_error_n: dict[str, list[float]], cfg: Config) -> Claim:
    together = at_error_n["hyper"]
    parts = [compare(together, at_error_n[name], better="lower", margin=MARGIN_ABLATION, unit="input draws",
                     label=f"error, sortLSH + sampling - {label}")
             for name, label in (("blocks_only", "blocks only"), ("sampling_only", "sampling only"),
                                 ("unsorted_blocks", "unsorted blocks + sampling"))]

    def mean(name):
        return statistics.mean(at_error_n[name])
    measured = (f"relative error {mean('hyper'):.3f} together, {mean('blocks_only'):.3f} blocks only, "
                f"{mean('sampling_only'):.3f} sampling only, {mean('unsorted_blocks'):.3f} with blocks in the input "
                f"order (n={cfg.error_n}, mean of {len(together)} input draws, the same draws for every variant)")
    return Claim(CLAIM_ABLATION, "LSH finds the large entries, sampling the rest (Sec. 3); no number given", measured,
                 all_of(*parts), provenance="revised", revision=ABLATION_REVISION)


def _perplexity_claim(ppl: dict, cfg: Config) -> Claim:
    """The increase with the final half replaced, tested only once the model uses its attention."""
    per = ppl["per_sequence"]
    increase = ppl["half"] / ppl["exact"] - 1
    paper_increase = PAPER_PPL[1] / PAPER_PPL[0] - 1
    uses_attention = ratio(per["exact"], per["bag_of_tokens"], bar=PPL_FLOOR_SHARE, better="lower",
                           unit="held-out sequences", label="exact perplexity / bag-of-tokens floor")
    cost = ratio(per["half"], per["exact"], bar=PPL_INCREASE_BAR, better="lower", unit="held-out sequences",
                 label="perplexity, final half replaced / exact")
    return Claim(CLAIM_PPL, f"perplexity {PAPER_PPL[0]} -> {PAPER_PPL[1]} (+{paper_increase:.1%}), ChatGLM2-32k",
                 f"perplexity {ppl['exact']:.2f} -> {ppl['half']:.2f} (+{increase:.1%}); all layers {ppl['all']:.2f}; "
                 f"bag-of-tokens floor {ppl['bag_of_tokens']:.1f} (tiny LM trained on repeated {cfg.lm_segment}-token "
                 f"segments, n={cfg.lm_context}, {len(per['exact'])} held-out sequences)",
                 given(uses_attention, cost), provenance="revised", revision=PPL_REVISION, subject="stand-in",
                 stand_in=PPL_STAND_IN)


# --- 1. speed -----------------------------------------------------------------------------------------------


def _time_sweep(cfg: Config, ctx: RunContext, hyper_kw: dict) -> tuple[list[dict], dict]:
    """Seconds per call of both, interleaved; HyperAttention alone at ``hyper_only_ns``. Returns the rows (medians)
    and the per-repeat times, ``times[n, causal] = {"hyper": [...], "exact": [...]}``."""
    rows, times = [], {}
    gen = torch.Generator().manual_seed(ctx.seed)
    lengths = [(n, True) for n in cfg.ns] + [(n, False) for n in cfg.hyper_only_ns]
    with torch.no_grad(), ctx.progress("timing", total=2 * len(lengths)) as bar:
        for n, with_exact in lengths:
            q, k, v = (torch.randn(1, cfg.heads, n, cfg.head_dim, generator=gen) for _ in range(3))
            for causal in (False, True):
                candidates = {"hyper": lambda: hyper_attention(q, k, v, causal=causal, generator=gen, **hyper_kw)}
                if with_exact:
                    candidates["exact"] = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                times[n, causal] = interleaved_times(candidates, repeats=cfg.repeats)
                hyper_s = statistics.median(times[n, causal]["hyper"])
                exact_s = statistics.median(times[n, causal]["exact"]) if with_exact else None
                speedup = median_ratio(times[n, causal], "exact", "hyper") if with_exact else None
                rows.append({"n": n, "causal": causal, "exact_s": exact_s, "hyper_s": hyper_s, "speedup": speedup})
                shown = f"exact {exact_s:.3f}s, speed-up {speedup:.2f}x" if with_exact else "exact not run"
                ctx.log(f"n={n} causal={causal}: hyper {hyper_s:.3f}s, {shown}")
                bar.advance()
    return rows, times


def _plot_times(rows: list[dict]):
    fig, ax = plt.subplots(figsize=(6, 4))
    for causal, style in ((False, "-"), (True, "--")):
        sub = [r for r in rows if r["causal"] == causal]
        label = "causal" if causal else "non-causal"
        exact = [r for r in sub if r["exact_s"] is not None]
        ax.loglog([r["n"] for r in exact], [r["exact_s"] for r in exact], "o" + style, color="C0",
                  label=f"exact (SDPA), {label}")
        ax.loglog([r["n"] for r in sub], [r["hyper_s"] for r in sub], "s" + style, color="C1",
                  label=f"HyperAttention, {label}")
    ax.set_xlabel("sequence length n")
    ax.set_ylabel("seconds per call (median)")
    ax.set_title("One attention layer on CPU")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    return fig


# --- 2. error ------------------------------------------------------------------------------------------------


def clustered_qkv(n: int, d: int, n_clusters: int, generator: torch.Generator, *, strength: float = 8.0,
                  noise: float = 0.5) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Queries, keys and values drawn around ``n_clusters`` shared cluster centres.

    A query's attention concentrates on its cluster's keys (scores about ``strength^2 /
    sqrt(d)`` above the rest), and keys of one cluster carry similar values: peaked,
    structured attention like a trained model's, unlike i.i.d. Gaussian inputs whose
    attention is nearly uniform and whose output is close to zero (so relative errors
    of it mean little). Shapes ``(1, 1, n, d)``: SDPA on CPU takes its flash kernel only for
    4-D inputs (3-D ones fall back to the n x n math path, ~9x slower at n=16k).
    """
    centres = F.normalize(torch.randn(n_clusters, d, generator=generator), dim=-1) * strength
    values = torch.randn(n_clusters, d, generator=generator)
    q_cluster = torch.randint(n_clusters, (n,), generator=generator)
    k_cluster = torch.randint(n_clusters, (n,), generator=generator)
    q = centres[q_cluster] + noise * torch.randn(n, d, generator=generator)
    k = centres[k_cluster] + noise * torch.randn(n, d, generator=generator)
    v = values[k_cluster] + noise * torch.randn(n, d, generator=generator)
    return q[None, None], k[None, None], v[None, None]


def _errors(cfg: Config, ctx: RunContext, n: int, variants: dict[str, dict]) -> dict[str, list[float]]:
    """||out~ - out||_F / ||out||_F on clustered inputs (non-causal), per variant, one value per input draw.

    Draw i uses replicate seed i for the inputs and for HyperAttention's own random draws, so every variant sees
    the same inputs and the same random draws.
    """
    errors: dict[str, list[float]] = {name: [] for name in variants}
    with torch.no_grad():
        for seed in ctx.replicate_seeds(cfg.error_seeds):
            q, k, v = clustered_qkv(n, cfg.head_dim, cfg.n_clusters, torch.Generator().manual_seed(seed))
            exact = F.scaled_dot_product_attention(q, k, v)
            for name, kw in variants.items():
                approx, _ = hyper_attention(q, k, v, generator=torch.Generator().manual_seed(seed), **kw)
                errors[name].append(float((approx - exact).norm() / exact.norm()))
    return errors


def _plot_errors(sweep: list[dict], blocks_only: float, cfg: Config):
    fig, ax = plt.subplots(figsize=(6, 4))
    m = [r["sample_size"] for r in sweep]
    ax.semilogx(m, [r["hyper"] for r in sweep], "o-", label=f"HyperAttention (block {cfg.block_size})")
    ax.semilogx(m, [r["sampling_only"] for r in sweep], "s--", label="uniform sampling only")
    ax.axhline(blocks_only, color="C2", ls=":", label="sortLSH blocks only")
    ax.set_xlabel("sample size m")
    ax.set_ylabel("relative Frobenius error")
    ax.set_title(f"Clustered inputs, n={cfg.error_n}, non-causal")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    return fig


# --- 3. model quality --------------------------------------------------------------------------------------------


def _perplexity_cost(cfg: Config, ctx: RunContext) -> dict:
    language = RepeatedSegments(vocab_size=128, segment=cfg.lm_segment)
    model = TinyLM(TinyLMConfig(vocab_size=128, context=cfg.lm_context, n_layers=cfg.lm_layers))
    gen = torch.Generator().manual_seed(ctx.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lm_lr)
    schedule = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lm_lr, total_steps=cfg.lm_steps, pct_start=0.1)
    with ctx.progress("training tiny LM", total=cfg.lm_steps) as bar:
        for step in range(cfg.lm_steps):
            loss = model.loss(language.sample(cfg.lm_batch, cfg.lm_context + 1, gen))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            schedule.step()
            bar.advance(loss=loss.item())
            if step % 100 == 0 or step == cfg.lm_steps - 1:
                ctx.log(f"lm step {step}: loss {loss.item():.3f}")
    model.eval()
    test = language.sample(cfg.lm_eval_sequences, cfg.lm_context + 1, torch.Generator().manual_seed(ctx.seed + 1))
    head_dim = model.cfg.d_model // model.cfg.n_heads

    def losses(replaced: int) -> torch.Tensor:
        """Mean next-token loss (nats) of each held-out sequence."""
        torch.manual_seed(ctx.seed)  # the same hyperplanes and sampled columns for every evaluation
        swapped = copy.deepcopy(model)
        for block in swapped.blocks[len(swapped.blocks) - replaced:]:
            block.attn.sdpa = HyperAttention(head_dim, block_size=cfg.lm_block_size, sample_size=cfg.lm_sample_size,
                                             min_seq_len=cfg.lm_min_seq_len)
        with torch.no_grad():
            logits = swapped(test[:, :-1])
            return F.cross_entropy(logits.transpose(1, 2), test[:, 1:], reduction="none").mean(-1)

    per_sequence = {"exact": losses(0), "half": losses(cfg.lm_layers // 2), "all": losses(cfg.lm_layers)}
    # every sequence has the same length, so the perplexity of the set is exp of the mean of the sequences' losses
    result = {name: math.exp(float(loss.mean())) for name, loss in per_sequence.items()}
    result["bag_of_tokens"] = bag_of_tokens_perplexity(test, language.vocab_size)
    ctx.log(f"perplexity: {result}")
    result["per_sequence"] = {name: torch.exp(loss).tolist() for name, loss in per_sequence.items()}
    result["per_sequence"]["bag_of_tokens"] = [bag_of_tokens_perplexity(test[i:i + 1], language.vocab_size)
                                               for i in range(len(test))]
    return result
