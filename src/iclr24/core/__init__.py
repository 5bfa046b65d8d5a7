"""What every method shares: the experiment contract, the runner, the report, progress, checks."""

from iclr24.core.checks import check_finite, check_int, check_number, check_tensor
from iclr24.core.evidence import Evidence, against, all_of, compare, given, not_run, ratio
from iclr24.core.experiment import (
    PRESETS,
    Check,
    Claim,
    Experiment,
    Result,
    RunContext,
    apply_overrides,
    experiment,
    get_experiment,
    list_experiments,
)
from iclr24.core.progress import set_quiet, track
from iclr24.core.runner import RunRecord, latest_run, latest_runs, load_run, run, seed_everything
from iclr24.core.timing import fit_power_law, interleaved_times, median_ratio

__all__ = [
    "PRESETS",
    "Check",
    "Claim",
    "Evidence",
    "Experiment",
    "Result",
    "RunContext",
    "RunRecord",
    "against",
    "all_of",
    "apply_overrides",
    "check_finite",
    "check_int",
    "check_number",
    "check_tensor",
    "compare",
    "experiment",
    "fit_power_law",
    "get_experiment",
    "given",
    "interleaved_times",
    "latest_run",
    "latest_runs",
    "list_experiments",
    "load_run",
    "median_ratio",
    "not_run",
    "ratio",
    "run",
    "seed_everything",
    "set_quiet",
    "track",
]
