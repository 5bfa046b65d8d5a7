import json

import pytest
from typer.testing import CliRunner

from iclr24 import cli

runner = CliRunner()


def invoke(*args):
    return runner.invoke(cli.app, list(args))


@pytest.fixture
def wide_console(monkeypatch):
    """A console wide enough that table cells do not wrap. Rich fixes a console's width when it is built if
    COLUMNS is set then, so passing COLUMNS to one invocation is not enough in every test process."""
    from rich.console import Console

    monkeypatch.setattr(cli, "console", Console(width=400))


def test_list_shows_registered_methods(toys, tmp_path):
    result = invoke("list", "--runs", str(tmp_path))
    assert result.exit_code == 0 and "hyperattention" in result.output and "toy" in result.output


def test_list_shows_each_latest_run_time_and_verdicts(toys, tmp_path):
    from iclr24.cli import _latest_summary
    from iclr24.core import run

    record = run("toy", preset="smoke", runs_dir=tmp_path, quiet=True)
    summary = _latest_summary(record)
    assert summary.startswith("paper claims: 1 hold, 0 fail, 0 inconclusive, 0 not run (smoke, ")
    r = record.result
    assert f"{r['wall_time_s']:.0f} s (CPU {r['cpu_time_s']:.0f} s); {record.run_dir.name})" in summary


def test_list_shows_the_latest_quick_run_time_beside_the_latest_run(toys, tmp_path, wide_console):
    from iclr24.core import run

    quick = run("toy", preset="quick", runs_dir=tmp_path, quiet=True)
    run("toy", preset="smoke", runs_dir=tmp_path, quiet=True)  # newer, but not the quick preset
    result = runner.invoke(cli.app, ["list", "--runs", str(tmp_path)])
    assert result.exit_code == 0
    r = quick.result
    assert f"quick: {r['wall_time_s']:.0f} s (CPU {r['cpu_time_s']:.0f} s)" in result.output


def test_list_quotes_the_reference_quick_time_until_a_method_has_run_here(monkeypatch, tmp_path, wide_console):
    from iclr24.core.runner import reference_time

    result = runner.invoke(cli.app, ["list", "--runs", str(tmp_path)])
    assert result.exit_code == 0
    wall = reference_time("sae")
    assert f"quick: not run here; {wall:.0f} s" in result.output and "(reference, " in result.output
    monkeypatch.setattr(cli, "reference_time", lambda name, preset="quick": None)
    result = runner.invoke(cli.app, ["list", "--runs", str(tmp_path)])
    assert "not run here" not in result.output and "quick: not run" in result.output


def test_a_run_time_is_wall_and_cpu_seconds():
    from iclr24.core.runner import run_time

    assert run_time({"wall_time_s": 158.4, "cpu_time_s": 150.2, "preset": "quick"}) == "158 s (CPU 150 s)"
    assert run_time({"wall_time_s": 181, "preset": "quick"}) == "181 s"  # the 180 s budget is retired
    assert run_time({"wall_time_s": 500, "cpu_time_s": 1, "preset": "paper"}) == "500 s (CPU 1 s)"
    assert run_time({}) == ""


def test_an_openai_model_with_no_server_is_refused_before_the_run(toys, tmp_path, monkeypatch):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    result = invoke("run", "toy", "--llm", "openai:gpt-x", "--no-report")
    assert result.exit_code == 2 and result.output.startswith("error: --llm:"), result.output
    assert f"127.0.0.1:{port}" in result.output and not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (("run", "nope"), "error: unknown experiment 'nope'; known experiments:"),
        (("run", "toy", "--preset", "huge"), "error: unknown preset 'huge'"),
        (("run", "toy", "--preset", "paper"), "error: unknown preset 'paper' for experiment 'toy'"),
        (("run", "toy", "--set", "size=3"), "error: unknown key 'size'"),
        (("run", "toy", "--set", "n=x"), "error: bad value for 'n'"),
        (("run", "all", "--set", "n=1"), "error: --set applies to one method's config"),
        (("show", "toy"), "error: no run of 'toy'"),
        (("report", "--runs", "missing-folder"), "error: no runs folder"),
        (("run", "toy", "--llm", "gpt5"),
         "error: --llm: unknown language model 'gpt5'; expected embedded[:NAME], hf:FOLDER, llamacpp[:GGUF] or "
         "openai:MODEL"),
        (("run", "toy", "--llm", "scripted:abc"), "error: --llm: unknown language model 'scripted:abc'"),
        (("run", "toy", "--llm", "openai"), "error: --llm: 'openai' names no model"),
        (("run", "toy", "--llm", "hf:/nonexistent"), "error: --llm: 'hf:/nonexistent': hf needs an existing"),
        (("run", "toy", "--llm", "embedded:x"), "error: --llm: 'embedded:x': unknown embedded model 'x'"),
        (("run", "toy", "--llm", "llamacpp:/no/file.gguf"), "error: --llm: 'llamacpp:/no/file.gguf': no GGUF"),
        (("run", "toy", "--seed", "-1"), "error: --seed must be in [0, 2**32), got -1"),
        (("run", "toy", "--seed", str(2**32)), "error: --seed must be in [0, 2**32), got 4294967296"),
        (("run", "toy", "--seeds", "4294967290-4294967296"), "error: --seeds must be in [0, 2**32), got 4294967296"),
        (("run", "toy", "--threads", str(10**20)), "error: --threads must be in [1, 1024], got 100000000000000000000"),
        (("run", "toy", "--threads", "0"), "error: --threads must be in [1, 1024], got 0"),
        (("run", "toy", "--jobs", "0"), "error: --jobs must be in [1, 1024], got 0"),
        (("run", "toy", "--out", ""), "error: --out is empty; give a folder"),
        (("run", "toy", "--out", "/proc/self/task"), "error: --out '/proc/self/task' is not a folder a run can write"),
        (("run", "toy", "--out", "a" * 300), "is not a folder a run can write to: File name too long"),
        (("run", "toy", "--report-dir", "/proc/self/task"), "error: --report-dir '/proc/self/task' is not a folder"),
        (("report", "--runs", ".", "--out", "/proc/self/task"), "error: --out '/proc/self/task' is not a folder"),
        (("report", "--runs", "r" * 300), "error: no runs folder at"),
        (("run", "toy", "--set", "n=0"), "error: invalid experiment 'toy' after overrides"),
        (("run", "toy", "--set", "sizes="), "error: experiment 'toy': sizes must not be empty"),
        (("run", "toy", "--out", "a_file"), "error: --out 'a_file' is a file; give a folder"),
        (("run", "toy", "--report-dir", "a_file"), "error: --report-dir 'a_file' is a file; give a folder"),
    ],
)
def test_user_errors_print_one_line_and_exit_2(toys, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ICLR24_OPENAI_MODEL", raising=False)
    (tmp_path / "a_file").write_text("not a folder")
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert not (tmp_path / "runs" / "toy").exists()


def test_a_read_only_out_folder_is_a_user_error(toys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "locked").mkdir(mode=0o500)
    import tempfile

    real_mkstemp = tempfile.mkstemp

    def mkstemp(*args, dir=None, **kwargs):  # as a non-root user finds a 0o500 folder (root may write anywhere)
        if str(dir).endswith("locked"):
            raise PermissionError(13, "Permission denied")
        return real_mkstemp(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    result = invoke("run", "toy", "--out", "locked")
    assert result.exit_code == 2 and "error: --out 'locked' is not a folder a run can write to: Permission denied" \
        in result.output


def test_a_damaged_latest_result_does_not_break_show_or_list(toys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert invoke("run", "toy", "--preset", "smoke", "--quiet", "--no-report").exit_code == 0
    damaged = tmp_path / "runs" / "toy" / "29990101T000000Z"
    damaged.mkdir()
    (damaged / "result.json").write_text("{truncated")
    for args in (("show", "toy"), ("list",), ("report",)):
        with pytest.warns(UserWarning, match="cannot read run result"):
            result = invoke(*args)
        assert result.exit_code == 0, (args, result.output)


def _plant_after_a_toy_run(tmp_path, changes):
    """Run the toy, then plant a newer run folder holding its result with ``changes``; the toy's own run folder."""
    assert invoke("run", "toy", "--preset", "smoke", "--quiet", "--no-report").exit_code == 0
    (latest,) = (tmp_path / "runs" / "toy").glob("2*")
    result = json.loads((latest / "result.json").read_text())
    planted = tmp_path / "runs" / "toy" / "29990101T000000Z"
    planted.mkdir()
    (planted / "result.json").write_text(json.dumps({**result, **changes}))
    return latest


@pytest.mark.parametrize("damage", [
    {"claims": 5}, {"wall_time_s": None}, {"wall_time_s": "slow"}, {"metrics": {"m": "high"}},
    {"claims": ["a claim as a string"]}, {"checks": [5]}, {"timings": [1.0]}, {"name": 5},
])
def test_damaged_result_records_are_shown_as_damaged_and_the_commands_go_on(toys, tmp_path, monkeypatch, damage):
    monkeypatch.chdir(tmp_path)
    _plant_after_a_toy_run(tmp_path, damage)
    for args in (("show", "toy"), ("list",), ("report",)):
        if damage == {"claims": ["a claim as a string"]}:  # the record reads; the claim is shown as damaged
            shown = invoke(*args)
            assert shown.exit_code == 0 and (args == ("report",) or "damaged" in shown.output), shown.output
            continue
        with pytest.warns(UserWarning, match="damaged run result|cannot read"):
            shown = invoke(*args)
        assert shown.exit_code == 0, (args, shown.output)


def test_version_help_and_quiet(toys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert invoke("--version").output.strip() == "iclr24 0.1.0"
    assert "kernel_trees" in " ".join(invoke("run", "--help").output.split())  # the methods are listed
    quiet = invoke("run", "toy", "--preset", "smoke", "-q", "--no-report", "--runs", "r")
    assert quiet.exit_code == 0 and quiet.output.strip().startswith("claims: paper claims: 1 hold")
    assert len(quiet.output.strip().splitlines()) == 1  # the closing line only: no table
    listed = invoke("list", "--runs", "r")
    toy_row = next(line for line in listed.output.splitlines() if line.startswith("│ toy "))
    assert "holds 1" in toy_row


def test_show_refuses_a_record_of_another_method_planted_in_its_folder(toys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    latest = _plant_after_a_toy_run(tmp_path, {"name": "toy_empty", "claims": []})
    with pytest.warns(UserWarning, match="holds a run of 'toy_empty', not of 'toy'"):
        shown = invoke("show", "toy")
    assert shown.exit_code == 0 and latest.name in shown.output  # the toy's own run, not the planted one


def test_run_show_and_report(toys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("run", "toy", "--preset", "smoke", "--quiet", "--set", "n=5")
    assert result.exit_code == 0, result.output
    (run_dir,) = (tmp_path / "runs" / "toy").iterdir()
    assert json.loads((run_dir / "config.json").read_text())["fields"]["n"] == 5
    assert (tmp_path / "report" / "index.html").is_file()
    result = invoke("show", "toy")
    assert result.exit_code == 0 and "mean is small" in result.output and "mean" in result.output
    result = invoke("report", "--out", "elsewhere")
    assert result.exit_code == 0 and (tmp_path / "elsewhere" / "index.html").is_file()


def test_a_failed_run_exits_1_with_its_traceback(toys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("run", "toy", "--preset", "smoke", "--quiet", "--set", "fail=true", "--no-report")
    assert result.exit_code == 1
    assert "RuntimeError: the toy failed on purpose" in result.output and "Traceback" in result.output


def test_run_all_runs_every_experiment_and_reports_failures_at_the_end(toys, tmp_path, monkeypatch):
    from iclr24.core import get_experiment

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "list_experiments",
                        lambda: [get_experiment("toy_forgetful"), get_experiment("toy")])
    result = invoke("run", "all", "--preset", "smoke", "--quiet")
    assert result.exit_code == 1
    assert (tmp_path / "runs" / "toy").is_dir()  # ran after the first one failed
    assert "1 of 2 runs failed: toy_forgetful (seed 0)" in result.output
    assert "claims: paper claims: 1 hold, 0 fail, 0 inconclusive, 0 not run; 1 of 2 runs failed" in result.output
    assert "generated code sandbox: strong isolation" in result.output
    listed = invoke("list", "--claims")  # table cells wrap: look for the words
    assert "holds" in listed.output and "failed" in listed.output
    shown = invoke("show", "toy")
    assert "holds" in shown.output and "n=4" in shown.output


def test_the_closing_line_names_weak_isolation(toys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ICLR24_SANDBOX", "weak")
    result = invoke("run", "toy", "--preset", "smoke", "--quiet", "--no-report")
    assert result.exit_code == 0 and "generated code ran with WEAK isolation" in result.output


def test_the_registry_and_list_work_without_optional_extras():
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['torch_geometric'] = None\n"
        "from typer.testing import CliRunner\n"
        "from iclr24 import cli\n"
        "from iclr24.core import list_experiments, run\n"
        "assert 'holonets' in [e.name for e in list_experiments()]\n"
        "assert CliRunner().invoke(cli.app, ['list', '--runs', sys.argv[1]]).exit_code == 0\n"
        "record = run('holonets', preset='smoke', runs_dir=sys.argv[1], quiet=True)\n"
        "print(record.result['error'])\n"
    )
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([sys.executable, "-c", code, tmp], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "pip install 'iclr24[graph]'" in out.stdout


def test_report_into_an_existing_file_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    (tmp_path / "taken").write_text("a file")
    result = invoke("report", "--out", "taken")
    assert result.exit_code == 2 and "--out 'taken' is a file" in result.output and "Traceback" not in result.output


def test_absurd_set_values_are_refused_before_the_run(toys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("run", "toy", "--set", "n=99999999999999999999999")
    assert result.exit_code == 2 and "n must be <= 1e+07" in result.output and not (tmp_path / "runs").exists()
