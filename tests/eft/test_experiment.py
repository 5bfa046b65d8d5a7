"""The EFT reproduction's claims: judged by the evidence API on what they measure, facts by construction as checks."""

from iclr24.core import run
from iclr24.eft.experiment import CLAIM_DECOMPOSE, CLAIM_SPECULATIVE, CLAIM_UPSCALE, _claims


def _outcomes(n=40, eft=(1, 1, 1), base=(0, 1, 0), ft=(0, 0, 1)):
    """``n`` people with the same (accuracy, factuality, format) outcome for each model."""
    def person(acc, fact, fmt):
        return {"accuracy": [acc] * n, "factuality": [fact] * n, "format": [fmt] * n}
    return {"eft": person(*eft), "base_large": person(*base), "ft_small": person(*ft)}


SPEC = {"speculative_large_passes_per_token": 0.45, "acceptance_rate": 0.6, "chi2_p": 0.5}


def _work(spec_passes, tokens=32):
    return [{"prompt": i, "tokens": tokens, "plain large passes": tokens, "speculative large passes": p,
             "draft passes": tokens} for i, p in enumerate(spec_passes)]


def test_the_speculative_claim_is_judged_on_work_whatever_the_wall_clock():
    # the review's case: the wall-clock ratio flipped between 0.91x and 1.09x with the machine's load
    verdicts = set()
    for speedup in (0.91, 0.95, 1.06, 1.09):
        claims = {c.statement: c for c in _claims(_outcomes(), SPEC, _work([14, 15, 13, 16]),
                                                  {"speculative_speedup": speedup})}
        speculative = claims[CLAIM_SPECULATIVE]
        verdicts.add(speculative.verdict)
        assert speculative.evidence.kind == "ratio" and speculative.evidence.unit == "prompts"
        assert speculative.evidence.n == 4 and f"{speedup:.2f}x" in speculative.measured
    assert verdicts == {"holds"}  # 32 tokens in about 15 large-model passes: about 2.1x less work


def test_the_speculative_claim_fails_when_no_work_is_saved_and_needs_three_prompts():
    no_saving = _claims(_outcomes(), SPEC, _work([36, 37, 36]), {"speculative_speedup": 1.2})[2]
    assert no_saving.verdict == "fails"  # more large-model passes than tokens, whatever the wall-clock says
    assert _claims(_outcomes(), SPEC, _work([14, 15]), {"speculative_speedup": 2.0})[2].verdict == "inconclusive"


def test_upscaling_and_decomposition_claims_over_held_out_people():
    claims = {c.statement: c.verdict for c in _claims(_outcomes(), SPEC, _work([14, 15, 13]),
                                                      {"speculative_speedup": 1.0})}
    assert claims[CLAIM_UPSCALE] == "holds" and claims[CLAIM_DECOMPOSE] == "holds"
    # EFT no better than the small fine-tuned model: up-scaling fails; EFT loses the facts: decomposition fails
    claims = {c.statement: c.verdict for c in _claims(_outcomes(eft=(0, 0, 1)), SPEC, _work([14, 15, 13]),
                                                      {"speculative_speedup": 1.0})}
    assert claims[CLAIM_UPSCALE] == "fails" and claims[CLAIM_DECOMPOSE] == "fails"


def test_smoke_run_keeps_identities_and_the_distribution_test_as_checks(tmp_path):
    record = run("eft", preset="smoke", runs_dir=tmp_path, quiet=True)
    assert record.ok, record.result.get("traceback")
    checks = {c["statement"]: c for c in record.result["checks"]}
    assert "EFT(L, S, S) = L (toy trio)" in checks and "beta = 0 gives the large base (toy trio)" in checks
    assert any(s.startswith("speculative samples follow the exact EFT distribution") for s in checks)
    assert all(c["passed"] for c in checks.values())
    assert all("EFT(L, S, S)" not in c["statement"] for c in record.result["claims"])
    assert len(record.result["tables"]["speculative_work"]) == 3
