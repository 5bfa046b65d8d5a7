"""The reproduction's claims, built from hand-made episodes (fast: no model runs)."""

from iclr24.coela.episode import Episode
from iclr24.coela.experiment import (
    CLAIM_COMM,
    CLAIM_EI,
    CLAIM_LLM,
    PRESETS,
    _claims,
    _same_houses_check,
)


def _episodes(steps, rate=1.0):
    return [Episode(s, rate, rate == 1.0) for s in steps]


def _claim_map(single, pair, comm, llm, short):
    runs = {"single (heuristic)": _episodes(single), "MHP-like pair, no messages": _episodes(pair),
            "MHP-like pair, messages": _episodes(comm), "random pair": _episodes(pair)}
    claims = _claims(PRESETS["quick"], runs, _episodes(llm, 0.33), _episodes(short), "scripted")
    return {c.statement: c for c in claims}


def test_claims_are_paired_by_episode():
    claims = _claim_map(single=[30, 34, 33, 31], pair=[20, 23, 22, 21], comm=[18, 21, 21, 19],
                        llm=[40, 40, 40], short=[22, 20, 25])
    assert claims[CLAIM_EI].verdict == "holds"               # pair/single ~0.67 < 0.8 in every house
    assert claims[CLAIM_EI].evidence.kind == "ratio" and claims[CLAIM_EI].evidence.n == 4
    assert claims[CLAIM_COMM].verdict == "holds"
    assert claims[CLAIM_LLM].verdict == "fails"               # budget used up vs ~22 steps
    assert {c.evidence.unit for c in claims.values()} == {"episodes"}
    assert all(c.evidence.paired for c in claims.values())
    assert "scripted" in claims[CLAIM_LLM].measured


def test_a_tie_is_inconclusive_and_a_small_team_gain_does_not_reach_the_stated_ei():
    claims = _claim_map(single=[30, 34, 33], pair=[27, 31, 30], comm=[27, 31, 30], llm=[22, 20, 25],
                        short=[22, 20, 25])
    assert claims[CLAIM_COMM].verdict == "inconclusive"        # messages change nothing
    assert claims[CLAIM_LLM].verdict == "inconclusive"
    assert claims[CLAIM_EI].verdict == "fails"                 # EI ~0.1: the whole interval above 0.8


def test_one_llm_episode_decides_nothing_and_quick_plays_three():
    claims = _claim_map(single=[30, 34, 33], pair=[20, 23, 22], comm=[18, 21, 21], llm=[40], short=[22])
    assert claims[CLAIM_LLM].verdict == "inconclusive" and claims[CLAIM_LLM].evidence.n == 1
    assert PRESETS["quick"].llm_episodes >= 3 and PRESETS["quick"].episodes >= 3


def test_every_method_meets_the_same_houses():
    check = _same_houses_check(PRESETS["quick"], list(range(5)))
    assert check.passed and "5 houses" in check.detail
