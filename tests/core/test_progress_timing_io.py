import json

import pytest

from iclr24.core import fit_power_law, interleaved_times, median_ratio, set_quiet, track
from iclr24.core.io import write_json_atomic
from iclr24.core.progress import is_enabled, progress


def test_track_yields_everything_and_bars_count():
    assert list(track(range(5), "loop")) == [0, 1, 2, 3, 4]
    with progress("work", total=3) as bar:
        for _ in range(3):
            bar.advance(loss=0.5)
    assert bar.completed == 3 and bar.fields == {"loss": 0.5}


def test_quiet_turns_bars_off():
    previous = set_quiet(True)
    try:
        assert not is_enabled()
    finally:
        set_quiet(previous)


def test_fit_power_law_recovers_known_exponents():
    ns = [1000, 2000, 4000, 8000]
    assert fit_power_law(ns, [3e-9 * n**2 for n in ns]) == pytest.approx(2.0)
    assert fit_power_law(ns, [5e-4 * n for n in ns]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="at least two"):
        fit_power_law([1], [1])


def test_interleaved_times_rotates_and_counts():
    calls = []
    times = interleaved_times({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=3, warmup=1)
    assert [len(t) for t in times.values()] == [3, 3]
    assert calls == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert median_ratio({"x": [2.0, 4.0, 6.0], "y": [1.0, 2.0, 3.0]}, "x", "y") == 2.0
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        interleaved_times({"a": lambda: None}, repeats=0)


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "result.json"
    write_json_atomic(path, {"a": 1})
    with pytest.raises(TypeError):
        write_json_atomic(path, {"a": object()})
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]
