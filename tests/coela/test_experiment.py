"""The reproduction's claims, built from hand-made episodes (fast: no model runs)."""

import pytest

from iclr24.coela.agent import CoELAAgent, HeuristicPlanner
from iclr24.coela.episode import Episode, run_episode
from iclr24.coela.experiment import (
    CLAIM_COMM,
    CLAIM_EI,
    CLAIM_LLM,
    PRESETS,
    _claims,
    _env,
    _llm_stand_in,
    _same_houses_check,
)


def _episodes(steps, rate=1.0):
    return [Episode(s, rate, rate == 1.0) for s in steps]


def _claim_map(single, pair, comm, llm, short, llm_rate=0.33, stand_in="a scripted model stands in for GPT-4"):
    runs = {"single (heuristic)": _episodes(single), "MHP-like pair, no messages": _episodes(pair),
            "MHP-like pair, messages": _episodes(comm), "random pair": _episodes(pair)}
    claims = _claims(PRESETS["quick"], runs, _episodes(llm, llm_rate), _episodes(short), "scripted", stand_in)
    return {c.statement: c for c in claims}


def test_claims_are_paired_by_episode():
    budget = PRESETS["quick"].llm_max_steps
    claims = _claim_map(single=[30, 34, 33, 31], pair=[20, 23, 22, 21], comm=[18, 21, 21, 19],
                        llm=[budget] * 3, short=[22, 20, 25])
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


def test_the_quick_budget_never_stops_the_mhp_like_pair():
    """The LLM claim's budget must be one the baseline meets: capped at it, the MHP-like pair still finishes every
    quick house (15-27 steps in the 20 houses of seed 0), so CoELA is compared with the pair's own step counts."""
    cfg = PRESETS["quick"]
    steps = []
    for seed in range(cfg.episodes):
        env = _env(cfg, 2, cfg.llm_max_steps)
        episode = run_episode(env, [CoELAAgent(planner=HeuristicPlanner(), communicate=False, name=a, seed=seed)
                                    for a in env.possible_agents], seed)
        assert episode.finished, f"house {seed}: the MHP-like pair does not finish in {cfg.llm_max_steps} steps"
        steps.append(episode.steps)
    assert max(steps) < cfg.llm_max_steps, f"the pair needs {max(steps)} of the {cfg.llm_max_steps}-step budget"


@pytest.mark.parametrize("budget, verdict", [(40, "fails"), (30, "fails"), (27, "fails"), (26, "inconclusive")])
def test_a_budget_above_the_pair_only_shrinks_a_model_that_never_finishes(budget, verdict):
    """With CoELA unfinished in every house, the paired difference is the budget minus the pair's steps (22, 24, 24
    in the quick houses): a shorter budget moves the whole interval down, from fails towards inconclusive."""
    claims = _claim_map(single=[30, 34, 33], pair=[20, 23, 22], comm=[18, 21, 21], llm=[budget] * 3,
                        short=[22, 24, 24])
    evidence = claims[CLAIM_LLM].evidence
    assert evidence.verdict == verdict
    assert evidence.effect == pytest.approx(budget - 70 / 3)
    assert evidence.interval[1] - evidence.interval[0] == pytest.approx(5.74, abs=0.01)   # the same spread


def test_each_claim_says_where_its_margin_came_from_and_what_it_measured():
    claims = _claim_map(single=[30, 34, 33, 31], pair=[20, 23, 22, 21], comm=[18, 21, 21, 19], llm=[30, 30, 30],
                        short=[22, 20, 25], llm_rate=0.0)
    assert claims[CLAIM_EI].provenance == "spec" and claims[CLAIM_EI].subject == "paper"   # MHP teams are the paper's
    assert claims[CLAIM_COMM].provenance == "spec" and claims[CLAIM_COMM].subject == "stand-in"
    assert "template messages" in claims[CLAIM_COMM].stand_in
    llm = claims[CLAIM_LLM]
    assert llm.provenance == "revised" and "transport rate" in llm.revision
    assert llm.subject == "stand-in" and llm.stand_in == "a scripted model stands in for GPT-4"
    # the first criterion, shown beside: transport rates 0 vs 1 in every house, a difference with no spread
    assert llm.original.label.startswith("transport rate") and llm.original.better == "higher"
    assert llm.original.effect == -1.0 and llm.original.verdict == "inconclusive"
    assert llm.verdict == "fails"                                        # the verdict is the steps criterion's


def test_only_a_served_model_makes_the_llm_claim_about_the_papers_subject():
    from iclr24.llm import get_model
    from iclr24.llm.openai_backend import OpenAIModel

    served = OpenAIModel("gpt-4", base_url="http://127.0.0.1:9/v1")   # built without contacting the server
    assert _llm_stand_in(served) == ""
    local = get_model("scripted", outputs=[])
    assert local.name in _llm_stand_in(local) and "GPT-4" in _llm_stand_in(local)
    claims = _claim_map(single=[30, 34, 33], pair=[20, 23, 22], comm=[18, 21, 21], llm=[20, 21, 19],
                        short=[22, 24, 24], stand_in=_llm_stand_in(served))
    assert claims[CLAIM_LLM].subject == "paper" and claims[CLAIM_LLM].stand_in == ""
