"""Tests for tfmp/run/benchmark/progress.py: what a benchmark shows while it runs, piped and on a terminal."""

import pickle
import re

import pytest
from benchmark_tiny import tiny_config, tiny_specs

from tfmp.run import baseline, benchmark
from tfmp.run.benchmark.progress import Progress, remaining_estimate


def test_piped_each_phase_is_a_line_and_timing_lines_are_spaced_out(capsys):
    row = Progress("lines", every=3600).row("gan float32 xla=false batch=512")
    row.phase("building")
    row.timing(1, 2, eta=None, width=None)
    row.timing(2, 2, eta=30.0, width=0.05)  # within `every` of the last: not shown
    row.done("gan float32 xla=false batch=512: 447.0 img/s, 97 s")
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "gan float32 xla=false batch=512: building, 0 s",
        "gan float32 xla=false batch=512: timing, round 1 (2 steps per path), 0 s",
        "gan float32 xla=false batch=512: 447.0 img/s, 97 s",
    ]
    assert "\r" not in capsys.readouterr().err


def test_a_timing_line_gives_the_round_the_interval_and_the_eta(capsys):
    row = Progress("lines", every=0).row("tiny")
    row.timing(4, 3, eta=125.0, width=0.031, repeats=None)
    row.timing(2, 20, eta=4.0, width=None, repeats=5)
    row.timing(2, 1, eta=9.0, width=9.94)  # two rounds: an interval of one degree of freedom, not shown
    assert capsys.readouterr().err.splitlines() == [
        "tiny: timing, round 4 (12 steps per path), ratio +-3.1%, 0 s, ETA 2 min 5 s",
        "tiny: timing, round 2/5 (40 steps per path), 0 s, ETA 4 s",
        "tiny: timing, round 2 (2 steps per path), 0 s, ETA 9 s",
    ]


def test_on_a_terminal_the_row_is_one_line_rewritten_in_place(capsys):
    row = Progress("progress").row("tiny")
    row.phase("building")
    row.timing(1, 2, eta=1.0, width=None)
    row.done("tiny: 10 img/s")
    err = capsys.readouterr().err
    assert err == "\r\x1b[Ktiny: building, 0 s\r\x1b[Ktiny: timing, round 1 (2 steps per path), 0 s, ETA 1 s" + (
        "\r\x1b[Ktiny: 10 img/s\n"
    )


def test_progress_pickles_for_a_row_measured_in_its_own_process():
    row = Progress("lines").row("tiny")
    again = pickle.loads(pickle.dumps(row))
    assert (again.mode, again.label, again.started) == ("lines", "tiny", row.started)


def test_an_unknown_mode_names_the_value():
    with pytest.raises(ValueError, match="Received: mode='bar'"):
        Progress("bar")


def test_the_estimate_of_the_rest_takes_each_models_own_rows_first():
    measured = [("gan", 100.0), ("gan", 120.0), ("mobilenet_v2", 40.0)]
    # gan rows at 110 s, mobilenet_v2 at 40 s, resnet50 (none yet) at the mean of all, 86.67 s.
    assert remaining_estimate(measured, ["gan", "mobilenet_v2", "resnet50"]) == pytest.approx(110 + 40 + 260 / 3)
    with pytest.raises(ValueError, match="Received: seconds=\\[\\]"):
        remaining_estimate([], ["gan"])


def test_compare_piped_shows_each_rows_phases_its_end_and_the_estimate_of_the_rest(capsys, monkeypatch):
    # No plain fit() path, which no line names: tests/run/benchmark/test_compare_mode.py measures it.
    monkeypatch.setattr(baseline, "plain_fit_model", lambda *args: None)
    config = tiny_config(models=("tiny",), precisions=(), runs=2, count_launches=False)
    records = benchmark.compare(config, tiny_specs(), progress=Progress("lines", every=0))
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("benchmark: measuring tiny x float32")
    assert "x XLA off; the precisions auto measures on this CPU (" in err[0]
    labels = [f"tiny {r.precision} xla=false batch=8 (run {run}/2)" for run in (1, 2) for r in records]
    for i, label in enumerate(labels):
        mine = [line for line in err if line.startswith(label + ":")]
        assert [re.sub(r", \d+ s$", "", line) for line in mine[:2]] == [
            f"{label}: building",
            f"{label}: tracing and warm-up (1 steps per path)",
        ]
        assert re.fullmatch(rf"{re.escape(label)}: timing, round 1/1 \(2 steps per path\), \d+ s, ETA 0 s", mine[2])
        assert "paired ratio" in mine[-1] and "1 rounds x 2 steps" in mine[-1]
        left = len(labels) - i - 1
        assert (f"for the {left} row(s) left" in mine[-1]) == (left > 0), mine[-1]
