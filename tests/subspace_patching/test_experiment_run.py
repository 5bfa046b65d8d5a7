"""The subspace_patching reproduction through the runner (smoke preset, a random 3-layer Llama: plumbing only)."""
import json

import pytest
import torch

from iclr24.core import run
from iclr24.subspace_patching.experiment import CLAIM_RESID
from tests.progress_probe import bars


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The smoke run as ``iclr24 run`` makes it on a terminal (quiet off), with the bars it opens recorded."""
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as monkeypatch:
        recorder = bars(monkeypatch)
        record = run("subspace_patching", preset="smoke", runs_dir=tmp_path_factory.mktemp("runs"), quiet=False)
    assert record.ok, record.result.get("traceback")
    return record.result, recorder


@pytest.fixture(scope="module")
def smoke_result(smoke):
    return smoke[0]


def test_the_run_shows_each_das_fit(smoke):
    # issue #61: the experiment passes progress=not ctx.quiet to train_das (both sites, and the MLP scan's fits)
    result, recorder = smoke
    fits = [(d, t) for d, t in recorder.added if d.startswith("DAS at ")]
    seeds, scanned = len(result["tables"]["seeds"]), len(result["tables"]["mlp_scan"]) - 1
    assert len(fits) == seeds + scanned  # one per (seed, site), one per further MLP layer
    assert len({d for d, _ in fits}) >= 2  # the MLP and the residual stream
    for description in {d for d, _ in fits}:
        assert recorder.advanced[description] == sum(t for d, t in fits if d == description)


def test_the_nullspace_parts_zero_effect_is_a_check_not_evidence(smoke_result):
    # W_out v_null = 0 makes the nullspace patch a no-op by construction: a sanity check, never a claim's evidence
    checks = [c for c in smoke_result["checks"] if "nullspace part" in c["statement"]]
    assert len(checks) == 1 and checks[0]["passed"] is True
    for claim in smoke_result["claims"]:
        text = json.dumps({k: claim[k] for k in ("statement", "measured", "evidence")}).lower()
        assert "nullspace" not in text and "null part" not in text


def test_the_residual_claim_says_only_what_is_measured(smoke_result):
    # "not illusory" is the name-mover claim's to make, from its own measurement
    assert "illusory" not in CLAIM_RESID
    assert [c["statement"] for c in smoke_result["claims"]][1] == CLAIM_RESID


def test_the_block_is_chosen_on_prompts_the_claims_are_not_judged_on(smoke_result):
    checks = [c for c in smoke_result["checks"] if "block is chosen" in c["statement"]]
    assert len(checks) == 1 and checks[0]["passed"] is True
    assert smoke_result["metrics"]["selection_judging_shared_prompts"] == 0
    assert all(any("selection pairs" in key for key in row) for row in smoke_result["tables"]["scan"])


def test_every_seed_and_the_dormancy_statistics_are_reported(smoke_result):
    tables, metrics = smoke_result["tables"], smoke_result["metrics"]
    assert [(r["site"], r["seed"]) for r in tables["seeds"]] == [(s, k) for k in range(3) for s in ("MLP", "resid")]
    assert [r["seed"] for r in tables["dormancy"]] == [0, 1, 2]
    for key in ("row_separation_sd", "null_separation_sd", "row_patch_shift_sd", "row_outside_central99",
                "row_outside_range", "mlp_seed_min_abs_cos", "resid_seed_min_abs_cos"):
        assert key in metrics
    assert len(tables["mlp_scan"]) >= 2  # the claim's MLP and at least one neighbour (mlp_scan_width=1)
    evidence = json.dumps(smoke_result["claims"][0]["evidence"])
    assert "separation along v_row" in evidence and "outside the clean central 99%" in evidence


def test_every_claim_records_its_provenance_and_the_random_model_is_a_stand_in(smoke_result):
    claims = smoke_result["claims"]
    assert [c["provenance"] for c in claims] == ["revised", "spec", "revised"]
    assert all(c["subject"] == "stand-in" and "random 3-layer Llama" in c["stand_in"] for c in claims)
    # the MLP claim under its first definition (rowspace part below half the DAS FLDD), shown beside the verdict
    original = claims[0]["original"]
    assert original["parts"][-1]["label"].startswith("rowspace-part FLDD")
    # smoke: 3 groups, each judged with its own DAS seed's direction, so 3 direction clusters
    assert claims[0]["evidence"]["parts"][0]["clusters"] == ["das-seed0", "das-seed1", "das-seed2"]
