"""Power plans and confirmations: the planned n reaches its power, a confirmation is judged on fresh runs only."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest
from typer.testing import CliRunner

from iclr24 import cli
from iclr24.core import Claim, Result, against, all_of, compare, given, ratio
from iclr24.core.confirm import check_plan, confirm, latest_confirmation
from iclr24.core.experiment import _REGISTRY, experiment
from iclr24.core.plan import (
    PlanError,
    build_plan,
    load_plan,
    parse_duration,
    pilot,
    plan_claim,
    plan_digest,
    units_needed,
    write_plan,
)
from iclr24.core.runner import run

SIMULATIONS = 600


def _exact(values, mean, sd):
    """``values`` moved and scaled to have exactly this mean and sd: a pilot whose estimates are the truth."""
    x = np.asarray(values, float)
    return (x - x.mean()) / x.std(ddof=1) * sd + mean


def _power(make, n, rng):
    return np.mean([make(n, rng).verdict != "inconclusive" for _ in range(SIMULATIONS)])


# Each case: a pilot whose estimates are the truth, and fresh samples of size n drawn from that truth.
CASES = {
    "paired mean": (lambda rng: compare(_exact(rng.normal(size=12), 0.6, 1.0), np.zeros(12)),
                    lambda n, rng: compare(rng.normal(0.6, 1.0, n), np.zeros(n))),
    "mean against a bar": (lambda rng: against(_exact(rng.normal(size=10), 0.3, 0.4), 0.5, better="lower"),
                           lambda n, rng: against(rng.normal(0.3, 0.4, n), 0.5, better="lower")),
    "unpaired (Welch)": (lambda rng: compare(_exact(rng.normal(size=8), 1.0, 1.0), _exact(rng.normal(size=8), 0, 2.0),
                                             paired=False),
                         lambda n, rng: compare(rng.normal(1.0, 1.0, n), rng.normal(0, 2.0, n), paired=False)),
    "ratio": (lambda rng: ratio(np.exp(_exact(rng.normal(size=6), 0.2, 0.3)), np.ones(6)),
              lambda n, rng: ratio(np.exp(rng.normal(0.2, 0.3, n)), np.ones(n))),
    "pass rate": (lambda rng: against([1] * 15 + [0] * 5, 0.5, binary=True, unit="problems"),
                  lambda n, rng: against(rng.binomial(1, 15.5 / 21, n), 0.5, binary=True, unit="problems")),
    "paired pass rates": (lambda rng: compare([1] * 9 + [0] * 3 + [1] * 8, [0] * 9 + [1] * 3 + [1] * 8, binary=True,
                                              unit="problems"),
                          lambda n, rng: compare(*_paired_outcomes(n, rng), binary=True, unit="problems")),
}


def _paired_outcomes(n, rng):
    kind = rng.choice(3, size=n, p=[9 / 20, 3 / 20, 8 / 20])  # a wins, b wins, both pass
    return (kind != 1).astype(float), (kind != 0).astype(float)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_planned_n_reaches_the_target_power_in_simulation(case):
    make_pilot, fresh = CASES[case]
    rng = np.random.default_rng(7)
    part = units_needed(make_pilot(rng))
    assert part.n is not None and part.n >= 3 and part.side == "holds", part
    assert 0.75 <= _power(fresh, part.n, rng) <= 0.86, (case, part.n)
    if part.n > 6:  # and fewer units fall short: the n is the smallest that reaches it
        assert _power(fresh, part.n // 2, rng) < 0.75


def test_a_part_on_the_failing_side_is_planned_to_fail():
    part = units_needed(compare(_exact(np.arange(6.0), -0.5, 1.0), np.zeros(6)))
    assert part.side == "fails" and part.n is not None


@pytest.mark.parametrize("evidence, reason", [
    (against([0.2, 0.4, 0.3], 0.0, fixed=True, unit="data sets"), "a fixed set of 3 data sets: more seeds add no"),
    (compare([0.2, 0.2, 0.2], [0.1, 0.1, 0.1]), "no spread in the pilot"),
    (compare([0.1, -0.1, 0.005], [0, 0, 0]), "power needs more than 1000 seeds"),
    (against([0.4], 0.5), "the pilot has 1 seeds; a spread needs 2"),
])
def test_a_part_that_cannot_be_decided_says_why(evidence, reason):
    part = units_needed(evidence)
    assert part.n is None and reason in part.reason


def test_units_needed_refuses_combined_evidence_and_bad_power():
    with pytest.raises(ValueError, match="plan its parts"):
        units_needed(all_of(against([1.0, 2, 3], 0)))
    with pytest.raises(ValueError, match=r"power must be in \[0.5, 1\), got 1.2"):
        units_needed(against([1.0, 2, 3], 0), power=1.2)


def _stored(evidence, statement="c"):
    return {"statement": statement, "verdict": evidence.verdict, "evidence": evidence.to_dict()}


def test_an_all_of_claim_is_planned_on_its_failing_part_and_a_given_on_its_requirement():
    holding = compare(_exact(np.arange(5.0), 0.3, 0.5), np.zeros(5), label="holding")
    failing = compare(_exact(np.arange(5.0), -0.3, 0.5), np.zeros(5), label="failing")
    stuck = compare([0.2, 0.2, 0.2], [0.1, 0.1, 0.1], label="stuck")
    plan = plan_claim(_stored(all_of(holding, failing, stuck)), units_per_run=5, cpu_s_per_run=10.0)
    failing_part = plan.parts[1]
    assert plan.status == "planned" and plan.side == "fails" and plan.n == failing_part.n
    assert plan.runs == -(-failing_part.n // 5) and plan.cpu_s == plan.runs * 10.0
    plan = plan_claim(_stored(all_of(holding, stuck)), units_per_run=5, cpu_s_per_run=10.0)
    assert plan.status == "cannot decide" and plan.reason.startswith("stuck: no spread")
    plan = plan_claim(_stored(given(failing, holding)), units_per_run=5, cpu_s_per_run=10.0)
    assert plan.status == "cannot decide" and "requirement lies on its failing side" in plan.reason


def test_parse_duration():
    assert parse_duration("2h") == 7200 and parse_duration("15m") == 900 and parse_duration("90") == 90
    for bad in ("", "2 days", "-1h", "0"):
        with pytest.raises(ValueError, match="expected a duration like 2h"):
            parse_duration(bad)


# --- plans and confirmations of a toy experiment -----------------------------------------------------------


@dataclass(frozen=True)
class PowerToyConfig:
    replicates: int = 3
    effect: float = 2.0


@pytest.fixture
def power_toy():
    """A toy whose one claim ("the effect is positive") is inconclusive at seed 0 and decidable with more seeds;
    a second claim is fixed (the same three values whatever the seed)."""
    @experiment(name="toy_power", paper="A Power Toy (ICLR 2024)",
                presets={"smoke": PowerToyConfig(), "quick": PowerToyConfig()},
                claims=["the effect is positive", "a fixed set clears 0"])
    def toy_power(cfg, ctx):
        seeds = ctx.replicate_seeds(cfg.replicates)
        values = [float(np.random.default_rng([s, 17]).normal(cfg.effect, 1.0)) for s in seeds]
        return Result(metrics={"mean": float(np.mean(values))}, claims=[
            Claim("the effect is positive", paper="> 0", measured=f"{np.mean(values):.2f}",
                  evidence=all_of(against(values, 0.0, label="effect"), against(np.abs(values) + 1, 0.5,
                                                                                label="size")), provenance="spec"),
            Claim("a fixed set clears 0", paper="> 0", measured="-", provenance="spec",
                  evidence=against([0.1, -0.3, 0.25], 0.0, fixed=True, unit="data sets"))])
    yield toy_power
    _REGISTRY.pop("toy_power", None)


def _pilot_seed(power_toy, runs):
    record = run("toy_power", seed=0, runs_dir=runs, quiet=True)
    assert record.result["claims"][0]["verdict"] == "inconclusive"  # the toy's premise
    return pilot(runs, power_toy)


def test_a_plan_prices_each_inconclusive_claim_and_picks_fresh_seeds(power_toy, tmp_path):
    found = _pilot_seed(power_toy, tmp_path)
    assert found["seeds"] == [0] and found["runs"][0].startswith("toy_power/")
    plan = build_plan({"toy_power": found})
    method = plan["methods"]["toy_power"]
    planned, fixed = method["claims"]
    assert planned["status"] == "planned" and planned["n"] >= 3 and planned["runs"] == -(-planned["n"] // 3)
    assert fixed["status"] == "cannot decide" and "fixed set of 3 data sets" in fixed["reason"]
    assert method["confirm_runs"] == planned["runs"] and 0 not in method["confirm_seeds"]
    assert plan["digest"] == plan_digest(plan)
    # a budget below the claim's cost selects nothing; the claim says why
    tight = build_plan({"toy_power": found}, budget_cpu_s=planned["cpu_s"] / 2)
    assert tight["methods"]["toy_power"]["confirm_runs"] == 0
    assert tight["methods"]["toy_power"]["claims"][0]["status"] == "over budget"
    # seeds an earlier confirmation ran are never planned again
    assert build_plan({"toy_power": {**found, "exclude_seeds": [1, 2]}})["methods"]["toy_power"][
        "confirm_seeds"][:2] == [3, 4]


def test_a_confirmation_is_judged_on_its_own_runs_only(power_toy, tmp_path):
    found = _pilot_seed(power_toy, tmp_path)
    plan = build_plan({"toy_power": found})
    path = confirm(plan, ["toy_power"], tmp_path, quiet=True)["toy_power"]
    record = json.loads(path.read_text())
    entry = plan["methods"]["toy_power"]["claims"][0]
    (claim,) = record["claims"]
    own = plan["methods"]["toy_power"]["confirm_seeds"][: entry["runs"]]
    assert claim["seeds"] == own
    effect = claim["evidence"]["parts"][0]
    assert effect["n"] == 3 * entry["runs"]  # exactly the planned runs' replicates
    pilot_values = set(json.loads((tmp_path / found["runs"][0] / "result.json").read_text())["claims"][0][
        "evidence"]["parts"][0]["samples"][0])
    assert not pilot_values & set(effect["samples"][0])  # the pilot is never pooled in
    assert claim["pilot_verdict"] == "inconclusive" and claim["verdict"] in ("holds", "fails", "inconclusive")
    assert "not planned again" in record["rule"] and latest_confirmation(tmp_path, "toy_power") == record
    # the confirmation's runs are hidden: the method's latest run is still the pilot, so it is never a pilot itself
    assert pilot(tmp_path, power_toy)["runs"] == found["runs"]
    # and the next plan from that pilot takes other seeds
    again = build_plan({"toy_power": pilot(tmp_path, power_toy)})
    assert not set(again["methods"]["toy_power"]["confirm_seeds"]) & set(record["seeds"])
    assert again["methods"]["toy_power"]["claims"][0]["confirmed_before"] == f"{claim['verdict']} on seeds {own}"


def test_a_confirmation_that_pooled_the_pilot_would_differ(power_toy, tmp_path):
    """The judged evidence equals pooling the confirmation's runs alone, and not pooling them with the pilot."""
    from iclr24.core.evidence import pool

    found = _pilot_seed(power_toy, tmp_path)
    plan = build_plan({"toy_power": found})
    record = json.loads(confirm(plan, ["toy_power"], tmp_path, quiet=True)["toy_power"].read_text())
    runs = [json.loads((tmp_path / r / "result.json").read_text()) for r in record["runs"]]
    own = pool([r["claims"][0]["evidence"] for r in runs]).to_dict()
    with_pilot = pool([r["claims"][0]["evidence"] for r in runs]
                      + [json.loads((tmp_path / found["runs"][0] / "result.json").read_text())["claims"][0][
                          "evidence"]]).to_dict()
    assert record["claims"][0]["evidence"]["parts"][0]["samples"] == own["parts"][0]["samples"]
    assert record["claims"][0]["evidence"]["parts"][0]["samples"] != with_pilot["parts"][0]["samples"]


def test_a_resumed_confirmation_equals_an_uninterrupted_one(power_toy, tmp_path, monkeypatch):
    import shutil

    import iclr24.core.confirm as confirm_module

    whole, halted = tmp_path / "whole", tmp_path / "halted"
    plan = build_plan({"toy_power": _pilot_seed(power_toy, whole)})
    shutil.copytree(whole, halted)  # one pilot and one plan, confirmed twice
    reference = json.loads(confirm(plan, ["toy_power"], whole, quiet=True)["toy_power"].read_text())
    real = confirm_module.run_jobs
    calls = []

    def interrupted(jobs, **kwargs):
        calls.append([j.seed for j in jobs])
        if len(calls) == 1:  # the first attempt finishes one run, then Ctrl-C
            real(jobs[:1], **kwargs)
            raise KeyboardInterrupt
        return real(jobs, **kwargs)

    monkeypatch.setattr(confirm_module, "run_jobs", interrupted)
    with pytest.raises(KeyboardInterrupt):
        confirm(plan, ["toy_power"], halted, quiet=True)
    resumed = json.loads(confirm(plan, ["toy_power"], halted, quiet=True)["toy_power"].read_text())
    seeds = plan["methods"]["toy_power"]["confirm_seeds"]
    assert calls == [seeds, seeds[1:]]  # the finished run was not run again, and n did not change
    assert [c["evidence"] for c in resumed["claims"]] == [c["evidence"] for c in reference["claims"]]


def test_a_plan_that_cannot_be_confirmed_is_refused_before_anything_runs(power_toy, tmp_path, monkeypatch):
    found = _pilot_seed(power_toy, tmp_path)
    plan = build_plan({"toy_power": found})
    statement = "'the effect is positive'"
    with pytest.raises(PlanError, match=rf"toy_power: seeds \[0\] are the pilot's: claim {statement}"):
        check_plan(plan, ["toy_power"], tmp_path, seeds={"toy_power": [0] + plan["methods"]["toy_power"][
            "confirm_seeds"][1:]})
    with pytest.raises(PlanError, match="needs .* distinct seeds"):
        check_plan(plan, ["toy_power"], tmp_path, seeds={"toy_power": [7]})
    # n lowered by hand, the digest recomputed: the pilot says otherwise
    edited = json.loads(json.dumps(plan))
    edited["methods"]["toy_power"]["claims"][0]["n"] -= 1
    edited["digest"] = plan_digest(edited)
    with pytest.raises(PlanError, match=rf"claim {statement} plans n = .* but its pilot gives .*: the plan was edited"):
        check_plan(edited, ["toy_power"], tmp_path)
    # a claim added by hand
    added = json.loads(json.dumps(plan))
    added["methods"]["toy_power"]["claims"].append({**added["methods"]["toy_power"]["claims"][0],
                                                    "statement": "a claim the pilot never made"})
    with pytest.raises(PlanError, match="'a claim the pilot never made' is not an inconclusive claim of the pilot"):
        check_plan(added, ["toy_power"], tmp_path)
    # the claim's definition changed since the plan
    import iclr24.core.confirm as confirm_module

    monkeypatch.setattr(confirm_module, "experiment_source_digest", lambda exp: "another definition")
    with pytest.raises(PlanError, match=rf"toy_power: the claims' definitions changed since the plan .*{statement}"):
        check_plan(plan, ["toy_power"], tmp_path)
    assert not (tmp_path / ".confirm").exists()  # nothing ran


def test_an_edited_plan_file_is_refused(power_toy, tmp_path):
    plan = build_plan({"toy_power": _pilot_seed(power_toy, tmp_path)})
    path = write_plan(plan, tmp_path / "plan.json")
    assert load_plan(path) == plan
    text = json.loads(path.read_text())
    text["methods"]["toy_power"]["confirm_runs"] = 1
    path.write_text(json.dumps(text))
    with pytest.raises(PlanError, match="was edited after `iclr24 plan` wrote it"):
        load_plan(path)
    path.write_text("[1, 2]")
    with pytest.raises(PlanError, match="is not a plan written by `iclr24 plan`"):
        load_plan(path)


def test_the_cli_plans_confirms_and_shows_pilot_beside_confirmation(power_toy, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    never = runner.invoke(cli.app, ["plan", "toy_power", "--runs", str(tmp_path)])
    assert never.exit_code == 2 and "toy_power: no completed quick run under" in never.output
    run("toy_power", seed=0, runs_dir="runs", quiet=True)
    made = runner.invoke(cli.app, ["plan", "toy_power", "--out", "plan.json", "--budget", "1h"])
    assert made.exit_code == 0, made.output
    assert "planned" in made.output and "cannot decide" in made.output and "fixed set" in made.output
    runs = json.loads((tmp_path / "plan.json").read_text())["methods"]["toy_power"]["confirm_runs"]
    bad = runner.invoke(cli.app, ["run", "toy_power", "--confirm", "plan.json", "--seeds", f"0-{runs - 1}",
                                  "--no-report"])
    assert bad.exit_code == 2 and "seeds [0] are the pilot's" in bad.output
    bad = runner.invoke(cli.app, ["run", "toy_power", "--confirm", "plan.json", "--seed", "4", "--no-report"])
    assert bad.exit_code == 2 and "drop --preset, --seed and --set" in bad.output
    done = runner.invoke(cli.app, ["run", "toy_power", "--confirm", "plan.json", "--no-report", "--jobs", "1"])
    assert done.exit_code == 0, done.output
    assert "confirmation on fresh seeds" in done.output and "confirmed claims: " in done.output
    shown = runner.invoke(cli.app, ["show", "toy_power"])
    assert shown.exit_code == 0 and "confirmation on fresh seeds" in shown.output
    from iclr24.core.report import build_report

    page = build_report("runs", "report").read_text()
    assert "confirmed on fresh seeds: paper claims: " in page and "the pilot not pooled in" in page
    glance = page[page.index("<table id='glance'>"):page.index("</table>", page.index("<table id='glance'>"))]
    assert "href='#toy_power-evidence'" in glance and "id='toy_power-evidence'" in page
    assert "the pilot not pooled in" in (tmp_path / "report" / "README.md").read_text()
    bad = runner.invoke(cli.app, ["plan", "toy_power", "--budget", "soon"])
    assert bad.exit_code == 2 and "expected a duration like 2h" in bad.output
