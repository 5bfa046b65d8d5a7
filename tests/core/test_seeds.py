"""Seed groups: parsing --seeds, the aggregate record, the CLI and the report."""

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from iclr24 import cli
from iclr24.core.evidence import compare
from iclr24.core.runner import RunRecord, latest_run
from iclr24.core.seeds import latest_seed_group, parse_seeds, summarize_seeds, write_seed_group


@pytest.mark.parametrize("text, seeds", [("0,1,2", [0, 1, 2]), ("0-4", [0, 1, 2, 3, 4]), ("7, 0-2,2", [0, 1, 2, 7]),
                                         ("5", [5])])
def test_seeds_parse_lists_and_ranges(text, seeds):
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize("text, message", [("", "must list seeds like"), ("a", "bad part 'a'"),
                                           ("-1", "bad part '-1'"), ("3-1", "runs backwards; write 1-3"),
                                           ("0-20000", "holds more than 10000 seeds"),
                                           ("0-9999,10000-19999", "holds more than 10000 seeds"),
                                           (str(2**32), r"must be in \[0, 2\*\*32\)")])
def test_bad_seeds_are_refused_naming_the_option(text, message):
    with pytest.raises(ValueError, match=message):
        parse_seeds(text)


def record(seed, metric, holds, status="ok", name="toy", gains=None):
    """A run record whose one claim compares two arms over three replicates (``gains`` = a - b)."""
    gains = gains if gains is not None else ([0.5, 0.6, 0.7] if holds else [-0.5, -0.6, -0.7])
    evidence = compare(gains, [0.0] * len(gains), unit="seeds")
    result = {"name": name, "seed": seed, "status": status, "preset": "smoke", "metrics": {"m": metric, "flag": True},
              "claims": [{"statement": "c", "verdict": evidence.verdict, "holds": evidence.holds,
                          "evidence": evidence.to_dict()}]}
    return RunRecord(name=name, run_dir=Path(f"/runs/{name}/2026010{seed}T000000Z"), result=result)


def test_summary_known_values():
    group = summarize_seeds([record(0, 1.0, True), record(1, 2.0, False), record(2, 3.0, True),
                             record(3, 99.0, True, status="failed")])
    m = group["metrics"]["m"]
    assert (m["mean"], m["std"], m["n"]) == (2.0, 1.0, 3)  # the failed seed counts nowhere
    half = 4.302652729911275 / math.sqrt(3)  # Student t, 2 degrees of freedom, 97.5%
    assert m["ci95"] == pytest.approx([2 - half, 2 + half])
    assert "flag" not in group["metrics"]  # booleans are not metrics to average
    claim = group["claims"]["c"]
    assert claim["per_seed"] == {"0": "holds", "1": "fails", "2": "holds"}
    assert claim["evidence"]["n"] == 9 and claim["evidence"]["effect"] == pytest.approx(0.2)
    assert claim["verdict"] == "inconclusive"  # two seeds for, one against: pooled, the interval spans 0
    assert group["failed_seeds"] == [3] and group["seeds"] == [0, 1, 2, 3]
    single = summarize_seeds([record(0, 1.0, True)])
    assert single["metrics"]["m"]["ci95"] is None and single["metrics"]["m"]["std"] is None  # undefined for one
    nan = summarize_seeds([record(0, float("nan"), True), record(1, 4.0, True), record(2, float("inf"), True)])
    assert (nan["metrics"]["m"]["mean"], nan["metrics"]["m"]["n"], nan["metrics"]["m"]["non_finite"]) == (4.0, 1, 2)
    huge = summarize_seeds([record(0, 1e308, True), record(1, 1.7e308, True)])
    assert huge["metrics"]["m"]["mean"] == float("inf")  # no OverflowError after the runs finished
    with pytest.raises(ValueError, match="each seed once"):
        summarize_seeds([record(0, 1.0, True), record(0, 2.0, True)])
    with pytest.raises(ValueError, match="runs of one experiment"):
        summarize_seeds([record(0, 1.0, True), record(1, 1.0, True, name="other")])


def test_a_group_pools_replicates_so_seeds_that_are_each_inconclusive_can_decide():
    """Two replicates per seed decide nothing alone; six together do (not a count of booleans)."""
    runs = [record(s, 1.0, True, gains=g) for s, g in enumerate([[0.4, 0.5], [0.45, 0.55], [0.5, 0.6]])]
    assert {r.result["claims"][0]["verdict"] for r in runs} == {"inconclusive"}
    pooled = summarize_seeds(runs)["claims"]["c"]
    assert pooled["verdict"] == "holds" and pooled["evidence"]["n"] == 6


def test_a_group_of_runs_without_evidence_is_not_judged():
    old = RunRecord(name="toy", run_dir=Path("/runs/toy/1"), result={
        "name": "toy", "seed": 0, "status": "ok", "metrics": {}, "claims": [{"statement": "c", "holds": True}]})
    claim = summarize_seeds([old])["claims"]["c"]
    assert claim["verdict"] == "not run" and "schema 2" in claim["reason"]


def test_a_group_folder_is_never_taken_for_a_run(tmp_path):
    runs = [record(0, 1.0, True), record(1, 2.0, True)]
    first = write_seed_group(tmp_path, runs)
    second = write_seed_group(tmp_path, runs)  # same second: the next suffix, nothing overwritten
    assert first != second and first.parent.name.startswith("seeds-") and second.parent.name.endswith("-2")
    assert latest_seed_group(tmp_path, "toy")["seeds"] == [0, 1]
    assert latest_run(tmp_path, "toy") is None and latest_seed_group(tmp_path, "missing") is None
    assert not list((tmp_path / "toy").glob(".tmp-*"))


@pytest.mark.parametrize("content", ['"oops"', "[1]", '{"runs": 3}', '{"runs": [], "seeds": [], "claims": {"c": {}}, '
                                     '"metrics": {}}', "{not json"])
def test_a_damaged_group_is_skipped_with_a_warning(tmp_path, content):
    good = write_seed_group(tmp_path, [record(0, 1.0, True), record(1, 2.0, True)])
    bad = tmp_path / "toy" / "seeds-29990101T000000Z" / "summary.json"  # newer than the good one
    bad.parent.mkdir()
    bad.write_text(content)
    with pytest.warns(UserWarning, match="skipping seed group"):
        assert latest_seed_group(tmp_path, "toy")["runs"] == json.loads(good.read_text())["runs"]


def test_cli_runs_each_seed_and_the_report_counts_the_claims(toys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli.app, ["run", "toy", "--preset", "smoke", "--seeds", "0-2"])
    assert result.exit_code == 0, result.output
    runs = [d for d in (tmp_path / "runs" / "toy").iterdir() if not d.name.startswith("seeds-")]
    assert sorted(json.loads((d / "result.json").read_text())["seed"] for d in runs) == [0, 1, 2]
    group = latest_seed_group(tmp_path / "runs", "toy")
    claim = group["claims"]["mean is small"]
    assert claim["evidence"]["n"] == 12 and claim["verdict"] == "holds"  # 3 seeds x 4 draws, pooled
    assert "replicates pooled" in result.output
    assert "claims: paper claims: 1 hold, 0 fail, 0 inconclusive, 0 not run" in result.output
    html = (tmp_path / "report" / "index.html").read_text()
    assert "pooled over seeds [0, 1, 2]" in html and "n=12 draws" in html and "95% interval" in html
    # a later single run supersedes the group in the report
    assert CliRunner().invoke(cli.app, ["run", "toy", "--preset", "smoke", "--quiet", "--seed", "5"]).exit_code == 0
    assert "pooled over seeds" not in (tmp_path / "report" / "index.html").read_text()
    bad = CliRunner().invoke(cli.app, ["run", "toy", "--seeds", "2-1"])
    assert bad.exit_code == 2 and "runs backwards" in bad.output
    both = CliRunner().invoke(cli.app, ["run", "toy", "--seed", "5", "--seeds", "0,1"])
    assert both.exit_code == 2 and "--seed 5 and --seeds '0,1' both choose seeds" in both.output


def test_failed_seeds_are_named_and_counted(toys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli.app, ["run", "toy", "--preset", "smoke", "--quiet", "--seeds", "0-2",
                                          "--set", "fail=true"])
    assert result.exit_code == 1 and "3 of 3 runs failed: toy (seed 0), toy (seed 1), toy (seed 2)" in result.output
    assert latest_seed_group(tmp_path / "runs", "toy")["failed_seeds"] == [0, 1, 2]
