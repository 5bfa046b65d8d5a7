import math

import pytest

from iclr24.core import get_experiment, run
from iclr24.hyperattention.experiment import CLAIM_ERROR, CLAIM_PPL, _error_claim, clustered_qkv, error_growth_bar


def test_smoke_run_reports_every_claim_with_finite_numbers(tmp_path):
    record = run("hyperattention", preset="smoke", runs_dir=tmp_path, quiet=True)
    assert record.ok, record.result.get("traceback")
    result = record.result
    assert [c["statement"] for c in result["claims"]] == list(get_experiment("hyperattention").claims)
    assert all(c["verdict"] in ("holds", "fails", "inconclusive", "not run") for c in result["claims"])
    # three interleaved repeats, three input draws, three held-out sequences: every measured part has n >= 3
    assert all(e["n"] >= 3 for c in result["claims"] for e in _measured_parts(c["evidence"]))
    # scaling and speed: two parts per mask; error: one; ablation: one per variant; perplexity: requirement and cost
    assert [len(list(_measured_parts(c["evidence"]))) for c in result["claims"]] == [4, 4, 1, 3, 2]
    # every bar dates from the first version, and each claim has been revised since with results in view: the
    # reason is on the claim; none was revised into holding. The perplexity claim's tiny model stands in for ChatGLM2.
    claims = {c["statement"]: c for c in result["claims"]}
    assert all(c["provenance"] == "revised" and len(c["revision"]) > 40 for c in claims.values())
    assert "one seed" in claims[CLAIM_ERROR]["revision"]
    assert all(c["original"] is None for c in claims.values())
    assert [s for s, c in claims.items() if c["subject"] == "stand-in"] == [CLAIM_PPL]
    assert "ChatGLM2" in claims[CLAIM_PPL]["stand_in"]
    assert all(math.isfinite(v) for v in {**result["metrics"], **result["timings"]}.values())
    assert {"time_vs_n.png", "error_vs_sample_size.png", "evidence.png"} == set(result["figures"])
    assert all((record.run_dir / f).stat().st_size > 1000 for f in result["figures"])
    smoke = get_experiment("hyperattention").presets["smoke"]
    assert len(result["tables"]["speed"]) == 2 * (len(smoke.ns) + len(smoke.hyper_only_ns))


def _measured_parts(evidence: dict):
    """The base evidence (compare, against, ratio) inside a claim's evidence, all_of / given parts flattened."""
    if evidence["kind"] in ("all_of", "given"):
        for part in evidence["parts"]:
            yield from _measured_parts(part)
    elif evidence["kind"] != "not run":
        yield evidence


def test_clustered_inputs_have_peaked_attention():
    import torch

    q, k, v = clustered_qkv(1024, 64, 16, torch.Generator().manual_seed(0))
    weights = torch.softmax(q @ k.transpose(-1, -2) / 8, dim=-1)
    # most of each row's mass sits on its own cluster (about 1/16 of the keys)
    top = weights.topk(1024 // 8, dim=-1).values.sum(-1)
    assert top.mean() > 0.9


def test_claims_that_cannot_be_measured_are_not_run(tmp_path):
    # every length at or below min_seq_len: no exponent and no error trend can be fitted
    record = run("hyperattention", preset="smoke", overrides=["min_seq_len=4096"], runs_dir=tmp_path, quiet=True)
    assert record.ok
    claims = {c["statement"]: c for c in record.result["claims"]}
    for statement in ("run time grows near-linearly in n, exact attention quadratically",
                      "approximation error stays bounded as n grows"):
        assert claims[statement]["verdict"] == "not run" and claims[statement]["measured"].startswith("not measured")


def test_the_error_claim_is_judged_over_input_draws_against_one_log_factor():
    # the review's case: 1.235x growth from one set of draws against a bar read off that run. Now the bar is one
    # log factor of n (fixed by the lengths), and the verdict rests on the spread over draws.
    assert error_growth_bar(4096, 32768) == pytest.approx(15 / 12)
    noisy = _error_claim({4096: [0.20, 0.23, 0.22], 32768: [0.26, 0.27, 0.28]})  # ratios 1.30, 1.17, 1.27
    assert noisy.verdict == "inconclusive" and noisy.evidence.n == 3 and noisy.evidence.unit == "input draws"
    flat = _error_claim({4096: [0.20, 0.23, 0.22], 8192: [0.3, 0.3, 0.3], 32768: [0.21, 0.24, 0.225]})
    assert flat.verdict == "holds"
    grows = _error_claim({4096: [0.20, 0.23, 0.22], 32768: [0.40, 0.47, 0.43]})
    assert grows.verdict == "fails"
    assert _error_claim({4096: [0.2, 0.2], 32768: [0.21, 0.2]}).verdict == "inconclusive"  # two draws


def test_the_probe_language_rewards_attention_and_the_floor_counts_tokens():
    import math

    import torch

    from iclr24.hyperattention.tiny_lm import RepeatedSegments, bag_of_tokens_perplexity

    x = RepeatedSegments(vocab_size=50, segment=5).sample(3, 23, torch.Generator().manual_seed(0))
    assert x.shape == (3, 23)
    assert torch.equal(x[:, 5:10], x[:, :5]) and torch.equal(x[:, 15:20], x[:, 10:15])
    assert not torch.equal(x[:, 10:15], x[:, :5])
    # the floor by hand: tokens [1, 1, 2] in a vocabulary of 3, add-one counts
    p = [(1 + 1) / (1 + 3), (0 + 1) / (2 + 3)]  # token 1 after one 1; token 2 after two 1s
    assert bag_of_tokens_perplexity(torch.tensor([[1, 1, 2]]), 3) == pytest.approx(math.exp(-sum(map(math.log, p)) / 2))


def test_segments_must_fit_twice_in_the_context():
    with pytest.raises(ValueError, match=r"lm_segment must be in \[1, lm_context / 2 = 256\]"):
        get_experiment("hyperattention").config("quick", ["lm_segment=300"])


def test_the_speed_claim_is_a_ratio_of_interleaved_times_over_repeats():
    from iclr24.hyperattention.experiment import Config, _speed_claim

    cfg = Config(ns=(1024, 4096), hyper_only_ns=(), repeats=3, min_seq_len=512)
    approximated = {False: [1024, 4096], True: [1024, 4096]}

    def sweep(exact_long, hyper_long):
        times = {}
        for causal in (False, True):
            times[1024, causal] = {"exact": [1.0, 1.1, 0.9], "hyper": [1.0, 1.0, 1.0]}
            times[4096, causal] = {"exact": list(exact_long), "hyper": list(hyper_long)}
        rows = [{"n": n, "causal": c, "exact_s": sorted(t["exact"])[1], "hyper_s": sorted(t["hyper"])[1],
                 "speedup": sorted(t["exact"])[1] / sorted(t["hyper"])[1]} for (n, c), t in times.items()]
        return _speed_claim(cfg, rows, times, approximated)

    faster = sweep([8.0, 8.4, 7.9], [2.0, 2.1, 1.9])  # about 4x at the longest n, about 1x at the shortest
    assert faster.verdict == "holds" and faster.evidence.parts[0].kind == "ratio"
    assert faster.evidence.parts[0].unit == "repeats" and faster.evidence.parts[0].n == 3
    slower = sweep([1.6, 1.7, 1.5], [2.0, 2.1, 1.9])
    assert slower.verdict == "fails"
    noisy = sweep([2.6, 1.5, 2.2], [2.0, 2.1, 1.9])  # 1.3x, 0.71x, 1.16x: decides nothing
    assert noisy.evidence.parts[0].verdict == "inconclusive"
