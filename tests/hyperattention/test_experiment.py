import math

import pytest

from iclr24.core import get_experiment, run
from iclr24.hyperattention.experiment import clustered_qkv


def test_smoke_run_reports_every_claim_with_finite_numbers(tmp_path):
    record = run("hyperattention", preset="smoke", runs_dir=tmp_path, quiet=True)
    assert record.ok, record.result.get("traceback")
    result = record.result
    assert [c["statement"] for c in result["claims"]] == list(get_experiment("hyperattention").claims)
    assert all(isinstance(c["holds"], bool) for c in result["claims"])
    assert all(math.isfinite(v) for v in {**result["metrics"], **result["timings"]}.values())
    assert {"time_vs_n.png", "error_vs_sample_size.png"} == set(result["figures"])
    assert all((record.run_dir / f).stat().st_size > 1000 for f in result["figures"])
    smoke = get_experiment("hyperattention").presets["smoke"]
    assert len(result["tables"]["speed"]) == 2 * (len(smoke.ns) + len(smoke.hyper_only_ns))


def test_clustered_inputs_have_peaked_attention():
    import torch

    q, k, v = clustered_qkv(1024, 64, 16, torch.Generator().manual_seed(0))
    weights = torch.softmax(q @ k.transpose(-1, -2) / 8, dim=-1)
    # most of each row's mass sits on its own cluster (about 1/16 of the keys)
    top = weights.topk(1024 // 8, dim=-1).values.sum(-1)
    assert top.mean() > 0.9


def test_claims_that_cannot_be_measured_do_not_hold(tmp_path):
    # every length at or below min_seq_len: no exponent and no error trend can be fitted
    record = run("hyperattention", preset="smoke", overrides=["min_seq_len=4096"], runs_dir=tmp_path, quiet=True)
    assert record.ok
    claims = {c["statement"]: c for c in record.result["claims"]}
    for statement in ("run time grows near-linearly in n, exact attention quadratically",
                      "approximation error stays bounded as n grows"):
        assert not claims[statement]["holds"] and claims[statement]["measured"].startswith("not measured")


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
