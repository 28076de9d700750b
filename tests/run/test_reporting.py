"""Tests for tfmp/run/reporting.py: the markdown table, the JSON file and the PNG chart.

The records are built by hand (what `tfmp.run.benchmark.compare` returns for a
tiny classifier); tests/run/benchmark/test_compare_mode.py measures real ones.
"""

import dataclasses
import json
import math
import os
import sys

import pytest
from record_keys import COMPARE_KEYS

from tfmp.run import benchmark, parity, reporting


def _record(model, precision, images_per_sec):
    return benchmark.Record(
        model,
        precision,
        False,
        8,
        images_per_sec,
        8000 / images_per_sec,
        None if precision != "float32" else 1.0,
        0.97,
        900.0,
        None,
    )


@pytest.fixture
def records():
    # As compare() measures the tiny classifier at batch 8 on a CPU: float32 then bfloat16, no GPU memory.
    float32 = dataclasses.replace(_record("tiny", "float32", 970.0), images_per_sec_min=950.0, images_per_sec_max=990.0)
    bf16 = dataclasses.replace(
        _record("tiny", "mixed_bfloat16", 1365.0),
        ratio_to_float32=1365.0 / 970.0,
        images_per_sec_min=1300.0,
        images_per_sec_max=1400.0,
    )
    return [float32, bf16]


def test_markdown_table_has_a_header_and_one_row_per_record(records):
    lines = reporting.markdown_table(records).splitlines()
    assert [cell.strip() for cell in lines[0].strip("|").split("|")] == COMPARE_KEYS
    assert len(lines) == 2 + len(records)
    assert lines[3].startswith("| tiny | mixed_bfloat16 | false | 8 | ")
    # No GPU figure; one run; no timed rounds recorded; no launches counted.
    assert lines[3].endswith(" | n/a | 1 |" + " n/a |" * 9)


def test_markdown_table_prints_intervals_as_ratios_are_printed(records):
    records[1].images_per_sec_interval, records[1].ratio_to_hand_written_interval = 0.0123, 0.05
    records[1].steps_per_round, records[1].rounds = 1, 4
    row = [cell.strip() for cell in reporting.markdown_table(records).splitlines()[3].strip("|").split("|")]
    cells = dict(zip(COMPARE_KEYS, row))
    assert (cells["images_per_sec_interval"], cells["ratio_to_hand_written_interval"]) == ("0.012", "0.050")
    assert (cells["steps_per_round"], cells["rounds"], cells["ratio_to_float32_interval"]) == ("1", "4", "n/a")


def test_json_file_holds_the_records(records, tmp_path):
    path = tmp_path / "bench.json"
    reporting.write_json(records, str(path))
    assert json.loads(path.read_text()) == [r.to_json() for r in records]


def test_json_file_holds_parity_records_too(tmp_path):
    records = [
        parity.ParityRecord("float32", "float32", 0, 1, 0.875, 0.5, 0, None, (0.75, 0.875), (0.75, 0.5), 12.5),
        parity.ParityRecord("mixed_float16", "mixed_float16", 0, 1, 0.8125, 0.5, 7, 256.0),
    ]
    path = tmp_path / "parity.json"
    reporting.write_json(records, str(path))
    assert path.read_text().endswith("]\n")
    common = {"seed": 0, "fold": 1, "val_loss": 0.5}
    assert json.loads(path.read_text()) == [
        {
            "arm": "float32",
            "precision": "float32",
            **common,
            "val_accuracy": 0.875,
            "skipped_steps": 0,
            "final_loss_scale": None,
            "accuracy_by_epoch": [0.75, 0.875],
            "loss_by_epoch": [0.75, 0.5],
            "seconds": 12.5,
        },
        {
            "arm": "mixed_float16",
            "precision": "mixed_float16",
            **common,
            "val_accuracy": 0.8125,
            "skipped_steps": 7,
            "final_loss_scale": 256.0,
            "accuracy_by_epoch": [],
            "loss_by_epoch": [],
            "seconds": 0.0,
        },
    ]


# Student's t, two-sided: the tables' values (e.g. NIST/SEMATECH e-Handbook, table 1.3.6.7.2), to 3 decimals.
@pytest.mark.parametrize(
    "confidence, df, expected",
    [
        (0.95, 1, 12.706),
        (0.95, 2, 4.303),
        (0.95, 4, 2.776),
        (0.95, 9, 2.262),
        (0.95, 24, 2.064),
        (0.99, 5, 4.032),
        (0.90, 30, 1.697),
    ],
)
def test_t_quantile_matches_the_tables(confidence, df, expected):
    assert reporting.t_quantile(confidence, df) == pytest.approx(expected, abs=5e-4)


@pytest.mark.parametrize("args, message", [((0.95, 0), "df=0"), ((0.95, 2.5), "df=2.5"), ((1.0, 3), "confidence=1.0")])
def test_t_quantile_refuses_bad_arguments_naming_them(args, message):
    with pytest.raises(ValueError, match="Received") as error:
        reporting.t_quantile(*args)
    assert message in str(error.value)


def test_gap_summarises_paired_differences():
    gap = reporting.Gap((-1.0, 0.0, 1.0, 2.0))
    assert gap.mean == 0.5 and gap.std == pytest.approx(math.sqrt(5 / 3))
    assert gap.stderr == pytest.approx(math.sqrt(5 / 3) / 2)
    low, high = gap.interval
    assert (low, high) == pytest.approx((0.5 - 3.182446 * gap.stderr, 0.5 + 3.182446 * gap.stderr), abs=1e-5)
    assert (gap.min, gap.max) == (-1.0, 2.0)
    one = reporting.Gap((3.0,))
    assert math.isnan(one.std) and all(math.isnan(v) for v in one.interval)


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    records = [
        _record("gan", "float32", 970.0),
        _record("gan", "mixed_bfloat16", 1365.0),
        _record("resnet50", "float32", 90.0),
    ]
    path = reporting.plot(records, str(tmp_path / "bench.png"))
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(path) > 10_000


def test_plot_without_matplotlib_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
    hint = r'pip install matplotlib \(in a clone of tfmp: pip install -e "\.\[plot\]"\)'
    with pytest.raises(ImportError, match=hint):
        reporting.plot([_record("gan", "float32", 970.0)], str(tmp_path / "bench.png"))


def test_plot_of_rows_timed_to_an_interval_states_their_rounds_and_the_rule(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    figures = []
    savefig = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (figures.append(self), savefig(self, *a, **k))[1])
    records = [_record("gan", "float32", 1000.0), _record("gan", "mixed_bfloat16", 290.0)]
    for record, rounds in zip(records, (4, 9)):
        record.rounds, record.steps_per_round = rounds, 1
    reporting.plot(records, str(tmp_path / "bench.png"), benchmark.BenchmarkConfig(), device="CPU (test)")
    (figure,) = figures
    assert "median of 4-9 rounds x 1 steps (2 warm-up), each row to +-2% or 60 s" in figure._suptitle.get_text()


def test_plot_states_the_reference_device_method_and_hand_written_ratio(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    figures = []
    savefig = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (figures.append(self), savefig(self, *a, **k))[1])
    records = [_record("gan", "float32", 1000.0), _record("gan", "mixed_bfloat16", 290.0)]
    records[1].ratio_to_float32 = 0.29
    records[1].images_per_sec_min, records[1].images_per_sec_max = 251.0, 301.0
    config = benchmark.BenchmarkConfig(steps=7, repeats=3, warmup_steps=2)
    reporting.plot(records, str(tmp_path / "bench.png"), config, device="CPU (test)")
    (figure,) = figures
    title = figure._suptitle.get_text()
    assert "CPU (test)" in title and "median of 3 repeats x 7 steps (2 warm-up)" in title
    footnote = figure._supxlabel.get_text()
    assert "float32's" in footnote and "hand-written" in footnote and "slowest to fastest round" in footnote
    labels = [t.get_text() for ax in figure.axes for t in ax.texts]
    assert labels == ["1000\n0.97x hand-written", "290\n0.29x float32\n0.97x hand-written\n(251-301)"]
    # The whisker: one error bar, on the record that has a spread, from its slowest to its fastest round.
    bars = [c for c in figure.axes[0].containers if getattr(c, "errorbar", None) is not None]
    (whisker,) = [c.errorbar for c in bars if c.errorbar.lines[2]]
    segments = whisker.lines[2][0].get_segments()
    assert [tuple(segment[:, 1]) for segment in segments] == [(251.0, 301.0)]


def _figure_of_plot(monkeypatch, records, path, **kwargs):
    """Runs reporting.plot and returns the matplotlib Figure it saved."""
    from matplotlib.figure import Figure

    figures = []
    savefig = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (figures.append(self), savefig(self, *a, **k))[1])
    reporting.plot(records, path, **kwargs)
    (figure,) = figures
    return figure


def test_plot_draws_the_allocators_memory_below_the_throughput(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    records = [_record("gan", "float32", 1000.0), _record("gan", "mixed_bfloat16", 1400.0)]
    records[0].peak_mb, records[0].step_mb = 90.0, 77.0
    records[1].peak_mb, records[1].step_mb, records[1].step_ratio_to_float32 = 80.0, 66.0, 0.857
    figure = _figure_of_plot(monkeypatch, records, str(tmp_path / "bench.png"), device="CPU (test)")
    throughput, memory = figure.axes
    assert memory.get_title() == "gan: memory" and "MiB" in memory.get_ylabel()
    assert [t.get_text() for t in throughput.texts] == ["1000\n0.97x hand-written", "1400\n0.97x hand-written"]
    assert [t.get_text() for t in memory.texts] == [
        "peak 90\nstep 77 MiB",
        "peak 80\nstep 66 MiB\nstep 0.86x float32's",
    ]
    # Each row a stacked bar: what stayed allocated (peak - step) under the step's own memory, up to the peak.
    stacks = [(p.get_y(), p.get_height()) for p in memory.patches]
    assert stacks == [(0, 13.0), (13.0, 77.0), (0, 14.0), (14.0, 66.0)]
    assert "throughput and memory" in figure._suptitle.get_text()
    assert "allocated before them" in figure._supxlabel.get_text()


def test_plot_without_memory_draws_throughput_only(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    records = [_record("gan", "float32", 1000.0), _record("resnet50", "float32", 90.0)]
    figure = _figure_of_plot(monkeypatch, records, str(tmp_path / "bench.png"), device="CPU (test)")
    assert [ax.get_title() for ax in figure.axes] == ["gan", "resnet50"]
    assert "allocated" not in figure._supxlabel.get_text()


def test_plot_keeps_its_footnote_inside_the_figure(tmp_path, monkeypatch):
    # One model is the narrowest figure: every line of the footnote still fits its width.
    pytest.importorskip("matplotlib")
    records = [_record("gan", "float32", 1000.0)]
    records[0].peak_mb, records[0].step_mb = 90.0, 77.0
    figure = _figure_of_plot(monkeypatch, records, str(tmp_path / "bench.png"), device="CPU (test)")
    renderer = figure.canvas.get_renderer()
    box, page = figure._supxlabel.get_window_extent(renderer), figure.bbox
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0


def test_plot_refuses_records_that_are_not_compares(tmp_path):
    # reporting imports no benchmark: what it checks is the attributes plot reads (ThroughputRecord).
    pytest.importorskip("matplotlib")
    pipeline = benchmark.PipelineRecord("tiny", "digits", "float32", False, 8, 950.0, 1000.0, 0.95)
    with pytest.raises(ValueError, match="plot needs compare"):
        reporting.plot([_record("gan", "float32", 970.0), pipeline], str(tmp_path / "bench.png"))
    assert not (tmp_path / "bench.png").exists()
    assert isinstance(_record("gan", "float32", 970.0), reporting.ThroughputRecord)
