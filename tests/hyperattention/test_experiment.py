import math

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
