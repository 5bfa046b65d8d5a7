"""Reproduction of EFT's claims on a model trio trained in the run (``iclr24 run eft``).

1. Up-scaling: the large base plus the small fine-tuning delta answers questions about people
   only the large base read about, in the fine-tuned format, far more often than either part.
2. Pre-training supplies facts, fine-tuning supplies behaviour (the paper's decomposition):
   factuality and format scored separately for the base, the fine-tuned model and EFT.
3. Speculative decoding with the small fine-tuned model as the draft saves the large model's work: it is judged
   on the large-model forward passes per generated token (one per token in plain EFT decoding), per prompt.
   The wall-clock ratio is reported beside it (in the timings) but does not decide: on a CPU with tiny models it
   moves with the machine's load (0.91x-1.09x over four runs).

Claims 1 and 2 are judged over the held-out people (a population of questions, one 0/1 outcome each), claim 3
over the prompts, by :mod:`iclr24.core.evidence`. Facts true by construction are checks, not claims: the sampled
distribution equals the EFT distribution (speculative sampling is exact; a chi-square test of our code), and
EFT(L, S, S) = L and beta = 0 gives the base, on the toy trio and, with the `llm` extra, on the embedded SmolLM2
with S a noisy copy of L; and there EFT with a non-zero reward equals proxy-tuning's logit arithmetic.

The trio is trained in-process on the synthetic world of :mod:`iclr24.eft.toy`: no two sizes of
one model family with one tokenizer ship offline.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from scipy.stats import chisquare  # noqa: E402

from iclr24.core import Check, Claim, Result, RunContext, experiment  # noqa: E402
from iclr24.core.evidence import against, all_of, compare, ratio  # noqa: E402
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
# Thresholds, fixed before the run (/work/shared/specs/eft.md's pass rule and the first version of this module).
#: Up-scaling: EFT's held-out accuracy above 0.8, and above 3x that of each of its parts (spec: "EFT >= 0.8 and >= 3x
#: both components"); the 3x is tested as the paired difference EFT - 3 x part > 0 (no effect = 0).
UPSCALE_ACCURACY_BAR = 0.8
UPSCALE_FACTOR = 3
#: Decomposition: EFT's factuality more than 0.5 above the small fine-tuned model's and within 0.1 of the large
#: base's (two one-sided tests); EFT's format more than 0.5 above the large base's.
MARGIN_FACTS_OVER_FT = 0.5
FACTS_TOLERANCE = 0.1
MARGIN_FORMAT_OVER_BASE = 0.5
#: Speculative decoding saves work: plain EFT's large-model passes / speculative's above 1 (no effect = 1).
WORK_RATIO_BAR = 1.0
#: The sampled distribution check: the chi-square test must not reject the exact EFT distribution at 1%.
CHI2_ALPHA = 0.01
#: The identities EFT(L, S, S) = L and beta = 0 -> L hold to float32 rounding: relative to the log-probability
#: (torch.allclose's default rtol, as in tests/eft/test_eft.py; a cached forward pass rounds differently).
IDENTITY_RTOL = 1e-5
#: EFT against proxy-tuning's arithmetic on SmolLM2: float32 logits, cached against uncached forward passes.
PROXY_TUNING_ATOL = 2e-4

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
    spec_prompts: int = 30  # the speculative claim's replicates (issue #49: >= 30 where a claim is about a population)
    check_embedded: bool = True  # EFT beside proxy-tuning, and the identities, on SmolLM2 (extra `llm`)

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
                    n_sweep=4, spec_samples=40, spec_tokens=6, spec_prompts=3, check_embedded=False),
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

    outcomes, scores = {}, {}
    with ctx.progress("scoring", total=4 + len(cfg.betas)) as bar:
        for name, model in (("base_large", L), ("ft_small", F), ("base_small", S), ("eft", eft)):
            outcomes[name] = answer_outcomes(model, world, people)
            scores[name] = _shares(outcomes[name])
            bar.advance()
        sweep = {}
        for beta in cfg.betas:
            sweep[beta] = score_answers(EFTModel(L, F, S, beta=beta), world, people[:cfg.n_sweep])
            bar.advance()
    for name, s in scores.items():
        ctx.log(f"{name}: accuracy {s['accuracy']:.3f}, factuality {s['factuality']:.3f}, format {s['format']:.3f}")

    spec = speculative_checks(eft, F, world, cfg, seed=ctx.seed)
    timings.update(spec.pop("timings"))
    work = spec.pop("per_prompt")
    ctx.log(f"speculative: chi-square p = {spec['chi2_p']:.3f} over {spec['chi2_categories']} categories, "
            f"acceptance {spec['acceptance_rate']:.2f}, large-model passes per token "
            f"{spec['speculative_large_passes_per_token']:.2f}, wall-clock speed-up "
            f"{timings['speculative_speedup']:.2f}x")
    checks = [Check(f"speculative samples follow the exact EFT distribution (chi-square p >= {CHI2_ALPHA:g})",
                    spec["chi2_p"] >= CHI2_ALPHA,
                    f"p = {spec['chi2_p']:.3f} over {spec['chi2_categories']} categories, {cfg.spec_samples} "
                    "two-token samples")]

    metrics = {f"{name}_{k}": v for name, s in scores.items() for k, v in s.items()}
    metrics.update({f"beta_{beta:g}_{k}": v for beta, s in sweep.items() for k, v in s.items()})
    metrics.update(spec)
    gaps = {"toy trio": identity_gaps(L, S, L.tokenize(world.question(people[0])))}
    if cfg.check_embedded:
        try:
            embedded = embedded_side_by_side()
        except ImportError as err:  # the `llm` extra is optional for this reproduction
            ctx.log(f"embedded-model checks skipped: {err}")
        else:
            gaps["embedded SmolLM2, S != L"] = embedded
            metrics.update({f"embedded_{k}": v for k, v in embedded.items()})
            ctx.log(f"embedded SmolLM2: |EFT - proxy-tuning| = {embedded['proxy_tuning_max_abs_diff']:.2e} with a "
                    f"reward up to {embedded['reward_max_abs']:.2f} nats")
            checks.append(Check(
                "EFT equals proxy-tuning's base + alpha (expert - antiexpert) on SmolLM2 with a non-zero reward",
                embedded["proxy_tuning_max_abs_diff"] <= PROXY_TUNING_ATOL and embedded["reward_max_abs"] > 0
                and embedded["eft_vs_large_base_max_abs"] > PROXY_TUNING_ATOL,
                f"max |log p difference| {embedded['proxy_tuning_max_abs_diff']:.1e} over every position (tolerance "
                f"{PROXY_TUNING_ATOL:g}); reward up to {embedded['reward_max_abs']:.2f} nats, EFT up to "
                f"{embedded['eft_vs_large_base_max_abs']:.2f} nats from the large base"))
    for where, gap in gaps.items():
        ctx.log(f"{where}: |EFT(L, S, S) - L| = {gap['eft_LSS_max_abs_diff']:.2e}, "
                f"|EFT(beta=0) - L| = {gap['beta0_max_abs_diff']:.2e}")
        for statement, key in (("EFT(L, S, S) = L", "eft_LSS"), ("beta = 0 gives the large base", "beta0")):
            checks.append(Check(f"{statement} ({where})", gap[f"{key}_max_rel_diff"] <= IDENTITY_RTOL,
                                f"max |log p difference| {gap[f'{key}_max_abs_diff']:.1e}, relative to max(|log p|, 1) "
                                f"{gap[f'{key}_max_rel_diff']:.1e} (tolerance {IDENTITY_RTOL:g})"))
    rows = [{"model": name, **{k: round(v, 3) for k, v in s.items()}} for name, s in scores.items()]
    return Result(
        metrics=metrics,
        claims=_claims(outcomes, spec, work, timings),
        checks=checks,
        timings=timings,
        figures={"beta_sweep.png": _plot_sweep(sweep), "factuality_format.png": _plot_scores(scores)},
        tables={"held_out": rows, "beta_sweep": [{"beta": b, **s} for b, s in sweep.items()],
                "speculative_work": work, "paper": PAPER_TABLE},
        notes=(f"A synthetic world ({cfg.n_people} people, {cfg.n_cities} cities) and a trio trained in the run: "
               f"a large base ({cfg.large_layers} layers, width {cfg.large_width}) that read every fact, a small base "
               f"({cfg.small_layers} layers, width {cfg.small_width}) that read {cfg.n_known_small} people's, and "
               f"that small base fine-tuned to answer with the city alone. Greedy decoding, scored on {len(people)} "
               f"people only the large base read about. Not the paper's models or its GPT-4 judge (docs/eft.md)."),
    )


def answer_outcomes(model, world: ToyWorld, people: list[str]) -> dict[str, list[int]]:
    """Greedy answers to "where does X live?", one 0/1 outcome per person: ``factuality`` (the first city named is
    X's), ``format`` (the answer is one city and then the end) and ``accuracy`` (both)."""
    out: dict[str, list[int]] = {"accuracy": [], "factuality": [], "format": []}
    for person in people:
        reply = model.generate(world.question(person), max_tokens=4)[0]
        words = reply.text.split()
        cities = [w for w in words if w in world.cities]
        factual = bool(cities) and cities[0] == world.home[person]
        in_format = len(words) == 1 and bool(cities) and reply.finish_reason == "stop"
        out["accuracy"].append(int(factual and in_format))
        out["factuality"].append(int(factual))
        out["format"].append(int(in_format))
    return out


def _shares(outcomes: dict[str, list[int]]) -> dict[str, float]:
    return {k: sum(v) / max(1, len(v)) for k, v in outcomes.items()}


def score_answers(model, world: ToyWorld, people: list[str]) -> dict[str, float]:
    """The shares of :func:`answer_outcomes`: ``accuracy``, ``factuality`` and ``format``."""
    return _shares(answer_outcomes(model, world, people))


def speculative_checks(target: EFTModel, draft: TorchLM, world: ToyWorld, cfg: Config, *, seed: int) -> dict:
    """The distribution test (two-token continuations: observed counts against the exact EFT probabilities), the
    large-model passes of speculative decoding per prompt (``per_prompt``), and the time of speculative against
    plain EFT decoding for the same number of tokens."""
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
    start, per_prompt = time.perf_counter(), []
    for i, ids in enumerate(speed_prompts):
        result = speculative_generate(target, draft, ids, k=cfg.spec_k, max_tokens=cfg.spec_tokens, temperature=T,
                                      seed=i)
        # plain decoding runs the large model once a token; speculative once a block
        tokens = len(result.token_ids)
        per_prompt.append({"prompt": i, "tokens": tokens, "speculative large passes": result.target_calls,
                           "plain large passes": tokens, "draft passes": result.draft_calls})
    passes = sum(r["speculative large passes"] for r in per_prompt)
    speculative_s = time.perf_counter() - start
    start = time.perf_counter()
    for i, ids in enumerate(speed_prompts):  # plain EFT decoding, no end token, for the same token count
        decode_tokens(target.next_token_logprobs, ids, max_tokens=cfg.spec_tokens, detokenize=lambda t: "",
                      temperature=T, seed=i)
    plain_s = time.perf_counter() - start
    return {"chi2_statistic": float(chi2.statistic) if chi2 else 0.0, "chi2_p": float(chi2.pvalue) if chi2 else 1.0,
            "chi2_categories": len(observed), "acceptance_rate": accepted / max(1, proposed),
            "speculative_large_passes_per_token": passes / sum(r["tokens"] for r in per_prompt),
            "per_prompt": per_prompt,
            "timings": {"speculative_seconds": speculative_s, "plain_eft_seconds": plain_s,
                        "speculative_speedup": plain_s / speculative_s}}


def embedded_side_by_side(noise: float = 0.05, seeds: tuple[int, int] = (1, 2)) -> dict[str, float]:
    """EFT on the embedded SmolLM2 with a non-zero reward, beside proxy-tuning's logit arithmetic.

    The three parts are distinct models sharing one tokenizer: the checkpoint as the large base, and two copies
    with seeded Gaussian weight noise (``noise`` x each tensor's standard deviation) as the small fine-tuned model
    and its base. The reference is proxy-tuning's ``softmax(base + alpha (expert - antiexpert))`` on the raw
    transformers logits of one uncached forward pass per model; EFT comes from :class:`EFTModel` (cached forward
    passes, log-probabilities). Returns the largest gap over every position of a probe text, the reward's size,
    and the identity gaps EFT(L, S, S) - L and beta 0 - L with S != L.
    """
    import copy

    from iclr24.llm import get_model

    large = get_model("embedded")
    ft, small = copy.deepcopy(large), copy.deepcopy(large)
    for model, seed in zip((ft, small), seeds):
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for weight in model.model.parameters():
                weight.add_(torch.randn(weight.shape, generator=generator) * noise * weight.std())
        model.name = f"{large.name}+noise{seed}"
    ids = large.tokenize("The capital of France is Paris, and the capital of Italy is")
    with torch.no_grad():
        base, expert, anti = (m.model(input_ids=torch.tensor([ids])).logits[0].double() for m in (large, ft, small))
    proxy = torch.log_softmax(base + (expert - anti), -1)
    eft = EFTModel(large, ft, small).sequence_logprobs(ids).double()
    return {"proxy_tuning_max_abs_diff": float((eft - proxy).abs().max()),
            "reward_max_abs": float((torch.log_softmax(expert, -1) - torch.log_softmax(anti, -1)).abs().max()),
            "eft_vs_large_base_max_abs": float((proxy - torch.log_softmax(base, -1)).abs().max()),
            **identity_gaps(large, small, ids)}


def identity_gaps(large, small, ids: list[int]) -> dict[str, float]:
    """Max |log p difference| of EFT(L, S, S) and of beta = 0 from L over the full next-token distribution, absolute
    and relative to max(|log p of L|, 1)."""
    base = torch.as_tensor(large.next_token_logprobs(ids)).double()
    gaps = {}
    for key, beta in (("eft_LSS", 1.0), ("beta0", 0.0)):
        eft = EFTModel(large, small, small, beta=beta).next_token_logprobs(ids).double()
        diff = torch.where(eft == base, 0.0, (eft - base).abs())  # equal -inf entries are no difference
        gaps[f"{key}_max_abs_diff"] = float(diff.max())
        gaps[f"{key}_max_rel_diff"] = float((diff / base.abs().clamp_min(1.0)).max())
    return gaps


def _claims(outcomes: dict, spec: dict, work: list[dict], timings: dict) -> list[Claim]:
    """The claims from the per-person 0/1 outcomes (``outcomes[model][score]``, the people in the same order for
    every model), the distribution test (``spec``), the per-prompt work counts and the wall-clock timings."""
    eft, base, ft = outcomes["eft"], outcomes["base_large"], outcomes["ft_small"]
    unit = "held-out people"

    def share(o, key):
        return sum(o[key]) / max(1, len(o[key]))

    def times(factor, o):
        return [factor * x for x in o]

    upscale = all_of(
        against(eft["accuracy"], UPSCALE_ACCURACY_BAR, better="higher", binary=True, unit=unit,
                label="EFT's accuracy"),
        compare(eft["accuracy"], times(UPSCALE_FACTOR, base["accuracy"]), better="higher", unit=unit,
                label=f"accuracy, EFT - {UPSCALE_FACTOR} x large base"),
        compare(eft["accuracy"], times(UPSCALE_FACTOR, ft["accuracy"]), better="higher", unit=unit,
                label=f"accuracy, EFT - {UPSCALE_FACTOR} x small fine-tuned"))
    decompose = all_of(
        compare(eft["factuality"], ft["factuality"], better="higher", margin=MARGIN_FACTS_OVER_FT, binary=True,
                unit=unit, label="factuality, EFT - small fine-tuned"),
        compare(eft["factuality"], base["factuality"], better="higher", margin=-FACTS_TOLERANCE, binary=True,
                unit=unit, label="factuality, EFT - large base (not lower)"),
        compare(eft["factuality"], base["factuality"], better="lower", margin=FACTS_TOLERANCE, binary=True,
                unit=unit, label="factuality, EFT - large base (not higher)"),
        compare(eft["format"], base["format"], better="higher", margin=MARGIN_FORMAT_OVER_BASE, binary=True,
                unit=unit, label="format, EFT - large base"))
    saving = ratio([r["plain large passes"] for r in work], [r["speculative large passes"] for r in work],
                   bar=WORK_RATIO_BAR, better="higher", unit="prompts",
                   label="large-model passes, plain EFT / speculative")
    return [
        Claim(CLAIM_UPSCALE, "Llama-2-70B base + 7B-chat delta: more factual and more helpful than 7B-chat (GPT-4 "
                             "judge)",
              f"held-out accuracy: EFT {share(eft, 'accuracy'):.2f}, large base {share(base, 'accuracy'):.2f}, small "
              f"fine-tuned {share(ft, 'accuracy'):.2f} ({len(eft['accuracy'])} people)", upscale),
        Claim(CLAIM_DECOMPOSE, "scaling pre-training improves factuality, scaling fine-tuning improves helpfulness",
              f"factuality: EFT {share(eft, 'factuality'):.2f}, large base {share(base, 'factuality'):.2f}, small "
              f"fine-tuned {share(ft, 'factuality'):.2f}; format: EFT {share(eft, 'format'):.2f}, large base "
              f"{share(base, 'format'):.2f}, small fine-tuned {share(ft, 'format'):.2f} ({len(eft['format'])} "
              "people)", decompose),
        Claim(CLAIM_SPECULATIVE, "about 2.5x faster up-scaled sampling, 70B base with a 7B draft (Sec. 4.3)",
              f"the large model runs {spec['speculative_large_passes_per_token']:.2f} times a token instead of once "
              f"({len(work)} prompts, {spec['acceptance_rate']:.0%} of drafts kept); samples match the exact EFT "
              f"distribution (chi-square p = {spec['chi2_p']:.3f}, a check); wall-clock, not judged: "
              f"{timings['speculative_speedup']:.2f}x plain EFT decoding's speed (tiny models on a CPU, where the "
              "large model's passes are not most of the time)",
              saving),
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

