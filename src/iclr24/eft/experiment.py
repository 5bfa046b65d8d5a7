"""Reproduction of EFT's claims on a model trio trained in the run (``iclr24 run eft``).

1. Up-scaling: the large base plus the small fine-tuning delta answers questions about people
   only the large base read about, in the fine-tuned format, far more often than either part.
2. Pre-training supplies facts, fine-tuning supplies behaviour (the paper's decomposition):
   factuality and format scored separately for the base, the fine-tuned model and EFT.
3. Speculative decoding with the small fine-tuned model as the draft samples the EFT distribution
   exactly (a chi-square test on two-token continuations) and is faster than plain EFT decoding
   (wall-clock, beside the paper's ~2.5x); how often the large model runs a token is reported too.

The trio is trained in-process on the synthetic world of :mod:`iclr24.eft.toy`: no two sizes of
one model family with one tokenizer ship offline. The invariants EFT(L, S, S) = L and beta = 0
gives the base are also measured on the embedded SmolLM2.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from scipy.stats import chisquare  # noqa: E402

from iclr24.core import Claim, Result, RunContext, experiment  # noqa: E402
from iclr24.core.tiny_lm import TinyLMConfig  # noqa: E402
from iclr24.eft.eft import EFTModel  # noqa: E402
from iclr24.eft.speculative import speculative_generate  # noqa: E402
from iclr24.eft.toy import ToyWorld, train_lm  # noqa: E402
from iclr24.llm.base import decode_tokens  # noqa: E402
from iclr24.llm.torch_lm import TorchLM  # noqa: E402

PAPER = "An Emulator for Fine-Tuning Large Language Models using Small Language Models (Mitchell et al., ICLR 2024)"
CLAIM_UPSCALE = "up-scaling (large base + small fine-tuning delta) beats both of its parts without training the " \
                "large model"
CLAIM_DECOMPOSE = "pre-training scale brings factuality, fine-tuning brings the fine-tuned behaviour"
CLAIM_SPECULATIVE = "speculative decoding with the small fine-tuned draft speeds up up-scaling without changing " \
                    "the samples"
PAPER_TABLE = [
    {"finding": "up-scaling Llama-2-7B-chat's delta onto the 70B base", "paper":
     "factuality and helpfulness both rise over the 7B chat model (GPT-4 judged; Llama-1, Llama-2, Falcon)"},
    {"finding": "scaling pre-training vs scaling fine-tuning", "paper":
     "pre-training scale improves factuality, fine-tuning scale improves helpfulness"},
    {"finding": "speculative decoding for up-scaling", "paper": "about 2.5x faster sampling, same distribution"},
]


@dataclass(frozen=True)
class Config:
    n_people: int = 200
    n_cities: int = 20
    n_known_small: int = 40  # people the small models read about and are fine-tuned on
    large_width: int = 96
    large_layers: int = 3
    small_width: int = 48
    small_layers: int = 2
    steps_large: int = 600
    steps_small: int = 400
    steps_fine_tune: int = 150
    n_eval: int = 160  # held-out people the claims are scored on
    betas: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0)
    n_sweep: int = 60  # held-out people for the beta sweep
    spec_samples: int = 1000  # two-token draws for the distribution test
    spec_k: int = 4
    spec_temperature: float = 1.0
    spec_tokens: int = 32  # tokens per prompt in the speed measurement
    spec_prompts: int = 8
    check_embedded: bool = True  # the invariants on the embedded SmolLM2 (extra `llm`)

    def __post_init__(self) -> None:
        if not 0 < self.n_known_small < self.n_people or self.n_cities < 2:
            raise ValueError(f"need 0 < n_known_small < n_people and n_cities >= 2, got {self.n_known_small}, "
                             f"{self.n_people}, {self.n_cities}")
        if min(self.steps_large, self.steps_small, self.steps_fine_tune, self.n_eval, self.spec_samples,
               self.spec_k, self.spec_tokens, self.spec_prompts) < 1:
            raise ValueError("steps_*, n_eval, spec_samples, spec_k, spec_tokens and spec_prompts must be >= 1")
        if not self.betas or 1.0 not in self.betas:
            raise ValueError(f"betas must include 1.0 (the claims' EFT), got {self.betas}")


PRESETS = {
    "smoke": Config(n_people=24, n_cities=4, n_known_small=8, large_width=32, large_layers=1, small_width=16,
                    small_layers=1, steps_large=30, steps_small=20, steps_fine_tune=10, n_eval=6, betas=(0.0, 1.0),
                    n_sweep=4, spec_samples=40, spec_tokens=6, spec_prompts=2, check_embedded=False),
    "quick": Config(),
    "paper": Config(n_people=1000, n_cities=50, n_known_small=150, large_width=192, large_layers=6,
                    steps_large=4000, steps_small=1500, steps_fine_tune=400, n_eval=850),
}


@experiment(
    name="eft",
    paper=PAPER,
    presets=PRESETS,
    claims=[CLAIM_UPSCALE, CLAIM_DECOMPOSE, CLAIM_SPECULATIVE],
    description="EFT: a small model's fine-tuning delta on a large base, scored on facts and format; speculative "
                "decoding.",
)
def reproduce(cfg: Config, ctx: RunContext) -> Result:
    """Train the trio, score its members and EFT, sweep beta, test speculative decoding, check real-LM invariants."""
    world = ToyWorld(cfg.n_people, cfg.n_cities, cfg.n_known_small, seed=ctx.seed)
    vocab, timings = world.vocab, {}
    large = TinyLMConfig(vocab_size=len(vocab), context=64, n_layers=cfg.large_layers, n_heads=4,
                         d_model=cfg.large_width)
    small = TinyLMConfig(vocab_size=len(vocab), context=64, n_layers=cfg.small_layers, n_heads=2,
                         d_model=cfg.small_width)
    start = time.perf_counter()
    with ctx.progress("training the trio", total=cfg.steps_large + cfg.steps_small + cfg.steps_fine_tune) as bar:
        base_large = train_lm(world.pretraining(world.people), vocab, large, steps=cfg.steps_large,
                              seed=ctx.seed, progress=bar.advance)
        base_small = train_lm(world.pretraining(world.known_small), vocab, small, steps=cfg.steps_small,
                              seed=ctx.seed + 1, progress=bar.advance)
        ft_small = train_lm(world.fine_tuning(world.known_small), vocab, small, steps=cfg.steps_fine_tune,
                            seed=ctx.seed + 2, lr=1e-3, init=base_small, progress=bar.advance)
    timings["training_seconds"] = time.perf_counter() - start
    L, S, F = (TorchLM(m, vocab, name=n) for m, n in ((base_large, "base-large"), (base_small, "base-small"),
                                                      (ft_small, "ft-small")))
    eft = EFTModel(L, F, S, beta=1.0)
    people = world.held_out[:cfg.n_eval]
    ctx.log(f"world: {cfg.n_people} people, {cfg.n_cities} cities; the small models know {cfg.n_known_small}; "
            f"scoring {len(people)} held-out people")

    scores = {}
    with ctx.progress("scoring", total=4 + len(cfg.betas)) as bar:
        for name, model in (("base_large", L), ("ft_small", F), ("base_small", S), ("eft", eft)):
            scores[name] = score_answers(model, world, people)
            bar.advance()
        sweep = {}
        for beta in cfg.betas:
            sweep[beta] = score_answers(EFTModel(L, F, S, beta=beta), world, people[:cfg.n_sweep])
            bar.advance()
    for name, s in scores.items():
        ctx.log(f"{name}: accuracy {s['accuracy']:.3f}, factuality {s['factuality']:.3f}, format {s['format']:.3f}")

    spec = speculative_checks(eft, F, world, cfg, seed=ctx.seed)
    timings.update(spec.pop("timings"))
    ctx.log(f"speculative: chi-square p = {spec['chi2_p']:.3f} over {spec['chi2_categories']} categories, "
            f"acceptance {spec['acceptance_rate']:.2f}, speed-up {timings['speculative_speedup']:.2f}x")

    metrics = {f"{name}_{k}": v for name, s in scores.items() for k, v in s.items()}
    metrics.update({f"beta_{beta:g}_{k}": v for beta, s in sweep.items() for k, v in s.items()})
    metrics.update(spec)
    if cfg.check_embedded:
        try:
            metrics.update(embedded_invariants())
        except ImportError as err:  # the `llm` extra is optional for this reproduction
            ctx.log(f"embedded-model invariants skipped: {err}")
        else:
            ctx.log(f"embedded SmolLM2: |EFT(L, S, S) - L| = {metrics['embedded_eft_LSS_max_abs_diff']:.2e}, "
                    f"|EFT(beta=0) - L| = {metrics['embedded_beta0_max_abs_diff']:.2e}")
    rows = [{"model": name, **{k: round(v, 3) for k, v in s.items()}} for name, s in scores.items()]
    return Result(
        metrics=metrics,
        claims=_claims(scores, spec, timings),
        timings=timings,
        figures={"beta_sweep.png": _plot_sweep(sweep), "factuality_format.png": _plot_scores(scores)},
        tables={"held_out": rows, "beta_sweep": [{"beta": b, **s} for b, s in sweep.items()], "paper": PAPER_TABLE},
        notes=(f"A synthetic world ({cfg.n_people} people, {cfg.n_cities} cities) and a trio trained in the run: "
               f"a large base ({cfg.large_layers} layers, width {cfg.large_width}) that read every fact, a small base "
               f"({cfg.small_layers} layers, width {cfg.small_width}) that read {cfg.n_known_small} people's, and "
               f"that small base fine-tuned to answer with the city alone. Greedy decoding, scored on {len(people)} "
               f"people only the large base read about. Not the paper's models or its GPT-4 judge (docs/eft.md)."),
    )


def score_answers(model, world: ToyWorld, people: list[str]) -> dict[str, float]:
    """Greedy answers to "where does X live?": ``factuality`` (the first city named is X's), ``format`` (the
    answer is one city and then the end) and ``accuracy`` (both)."""
    facts = formats = both = 0
    for person in people:
        reply = model.generate(world.question(person), max_tokens=4)[0]
        words = reply.text.split()
        cities = [w for w in words if w in world.cities]
        factual = bool(cities) and cities[0] == world.home[person]
        in_format = len(words) == 1 and bool(cities) and reply.finish_reason == "stop"
        facts, formats, both = facts + factual, formats + in_format, both + (factual and in_format)
    n = max(1, len(people))
    return {"accuracy": both / n, "factuality": facts / n, "format": formats / n}


def speculative_checks(target: EFTModel, draft: TorchLM, world: ToyWorld, cfg: Config, *, seed: int) -> dict:
    """The distribution test (two-token continuations: observed counts against the exact EFT probabilities) and
    the time of speculative against plain EFT decoding for the same number of tokens."""
    # "question : where does": the next word is any of the people, a spread-out distribution to test on
    prompt = target.tokenize(world.question("{name}").split("{name}")[0])
    T = cfg.spec_temperature
    first = torch.softmax(target.next_token_logprobs(prompt) / T, -1)
    exact: dict[tuple[int, ...], float] = {}
    for t1 in torch.nonzero(first > 1e-4).flatten().tolist():
        if t1 == world.vocab.eos_id:
            exact[(t1,)] = float(first[t1])
            continue
        second = torch.softmax(target.next_token_logprobs(prompt + [t1]) / T, -1)
        for t2, p in enumerate((first[t1] * second).tolist()):
            exact[(t1, t2)] = p
    counts: dict[tuple[int, ...], int] = {}
    proposed = accepted = 0
    for i in range(cfg.spec_samples):
        result = speculative_generate(target, draft, prompt, k=cfg.spec_k, max_tokens=2, temperature=T,
                                      seed=seed * 100_003 + i, eos_id=world.vocab.eos_id)
        key = tuple(result.token_ids) + ((world.vocab.eos_id,) if len(result.token_ids) < 2 else ())
        key = key[:1] if key[:1] == (world.vocab.eos_id,) else key
        counts[key] = counts.get(key, 0) + 1
        proposed, accepted = proposed + result.proposed, accepted + result.accepted
    # categories with >= 5 expected draws; the rest pooled into one
    n = cfg.spec_samples
    big = [key for key, p in exact.items() if p * n >= 5]
    observed = [counts.get(key, 0) for key in big]
    expected = [exact[key] * n for key in big]
    observed.append(n - sum(observed))
    expected.append(n - sum(expected))
    if expected[-1] < 1e-9:  # nothing left over to pool
        observed, expected = observed[:-1], expected[:-1]
    chi2 = chisquare(observed, expected) if len(observed) > 1 else None

    speed_prompts = [target.tokenize(world.question(p)) for p in world.held_out[:cfg.spec_prompts]]
    start, passes = time.perf_counter(), 0
    for i, ids in enumerate(speed_prompts):
        passes += speculative_generate(target, draft, ids, k=cfg.spec_k, max_tokens=cfg.spec_tokens, temperature=T,
                                       seed=i).target_calls
    speculative_s = time.perf_counter() - start
    start = time.perf_counter()
    for i, ids in enumerate(speed_prompts):  # plain EFT decoding, no end token, for the same token count
        decode_tokens(target.next_token_logprobs, ids, max_tokens=cfg.spec_tokens, detokenize=lambda t: "",
                      temperature=T, seed=i)
    plain_s = time.perf_counter() - start
    return {"chi2_statistic": float(chi2.statistic) if chi2 else 0.0, "chi2_p": float(chi2.pvalue) if chi2 else 1.0,
            "chi2_categories": len(observed), "acceptance_rate": accepted / max(1, proposed),
            # plain decoding runs the large model once a token; speculative once a block
            "speculative_large_passes_per_token": passes / (cfg.spec_tokens * len(speed_prompts)),
            "timings": {"speculative_seconds": speculative_s, "plain_eft_seconds": plain_s,
                        "speculative_speedup": plain_s / speculative_s}}


def embedded_invariants() -> dict[str, float]:
    """EFT(L, S, S) = L and beta = 0 gives the base, on the embedded SmolLM2's full next-token distributions."""
    from iclr24.llm import get_model

    llm = get_model("embedded")
    ids = llm.tokenize("The capital of France is")
    base = llm.next_token_logprobs(ids)
    same = EFTModel(llm, llm, llm).next_token_logprobs(ids)
    beta0 = EFTModel(llm, llm, llm, beta=0.0).next_token_logprobs(ids)
    return {"embedded_eft_LSS_max_abs_diff": float((same - base).abs().max()),
            "embedded_beta0_max_abs_diff": float((beta0 - base).abs().max())}


def _claims(scores: dict, spec: dict, timings: dict) -> list[Claim]:
    eft, base, ft = scores["eft"], scores["base_large"], scores["ft_small"]
    upscale = eft["accuracy"] >= 0.8 and eft["accuracy"] >= 3 * base["accuracy"] and \
        eft["accuracy"] >= 3 * ft["accuracy"]
    decompose = (eft["factuality"] - ft["factuality"] >= 0.5 and eft["format"] - base["format"] >= 0.5
                 and abs(eft["factuality"] - base["factuality"]) <= 0.1)
    speedup = timings["speculative_speedup"]
    return [
        Claim(CLAIM_UPSCALE, "Llama-2-70B base + 7B-chat delta: more factual and more helpful than 7B-chat (GPT-4 "
                             "judge)",
              f"held-out accuracy: EFT {eft['accuracy']:.2f}, large base {base['accuracy']:.2f}, small fine-tuned "
              f"{ft['accuracy']:.2f}", upscale,
              "EFT accuracy >= 0.8 and >= 3x that of the large base and of the small fine-tuned model"),
        Claim(CLAIM_DECOMPOSE, "scaling pre-training improves factuality, scaling fine-tuning improves helpfulness",
              f"factuality: EFT {eft['factuality']:.2f}, large base {base['factuality']:.2f}, small fine-tuned "
              f"{ft['factuality']:.2f}; format: EFT {eft['format']:.2f}, large base {base['format']:.2f}, small "
              f"fine-tuned {ft['format']:.2f}", decompose,
              "EFT's factuality >= the small fine-tuned model's + 0.5 and within 0.1 of the large base's; EFT's "
              "format >= the large base's + 0.5"),
        Claim(CLAIM_SPECULATIVE, "about 2.5x faster up-scaled sampling, 70B base with a 7B draft (Sec. 4.3)",
              f"chi-square p = {spec['chi2_p']:.3f} over {spec['chi2_categories']} categories (two-token samples "
              f"vs exact EFT probabilities); wall-clock {speedup:.2f}x plain EFT decoding's speed; "
              f"{spec['acceptance_rate']:.0%} of drafts kept; the large model runs "
              f"{spec['speculative_large_passes_per_token']:.2f} times a token instead of once",
              spec["chi2_p"] >= 0.01 and speedup > 1.0,
              "chi-square p >= 0.01 and speculative decoding faster than plain EFT decoding in wall-clock time"),
    ]


def _plot_sweep(sweep: dict):
    fig, ax = plt.subplots(figsize=(5, 3.2))
    betas = list(sweep)
    for key in ("accuracy", "factuality", "format"):
        ax.plot(betas, [sweep[b][key] for b in betas], marker="o", label=key)
    ax.set_xlabel("beta (weight of the small model's fine-tuning delta)")
    ax.set_ylabel("held-out share")
    ax.set_ylim(-0.05, 1.05)
    ax.legend(fontsize=8)
    ax.set_title("EFT up-scaling against beta")
    fig.tight_layout()
    return fig


def _plot_scores(scores: dict):
    fig, ax = plt.subplots(figsize=(5, 3.2))
    names = list(scores)
    width = 0.38
    for offset, key in ((-width / 2, "factuality"), (width / 2, "format")):
        ax.bar([i + offset for i in range(len(names))], [scores[n][key] for n in names], width, label=key)
    ax.set_xticks(range(len(names)), [n.replace("_", " ") for n in names])
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=8)
    ax.set_title("Held-out people: facts come from pre-training, format from fine-tuning")
    fig.tight_layout()
    return fig

