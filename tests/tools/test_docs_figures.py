"""The docs-figures tool's plotting and URL functions, on small inputs (the tool itself runs on demand)."""

import importlib.util
import math
import pathlib

import pytest

from tfmp.run import parity

pytest.importorskip("matplotlib")

_PATH = pathlib.Path(__file__).resolve().parents[2] / "tools" / "docs_figures.py"
_SPEC = importlib.util.spec_from_file_location("docs_figures", _PATH)
docs_figures = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(docs_figures)


def _record(arm, fold, accuracy):
    precision = "float32" if arm == "float32" else arm
    return parity.ParityRecord(arm, precision, 0, fold, accuracy, 0.3, 0, None, (accuracy,), (0.3,), 1.0)


def _records():
    return [
        _record("float32", 0, 0.90),
        _record("float32", 1, 0.92),
        _record("float32", 2, 0.91),
        _record("mixed_bfloat16", 0, 0.905),
        _record("mixed_bfloat16", 1, 0.915),
        _record("mixed_bfloat16", 2, 0.91),
        _record("mixed_float16", 0, 0.90),
    ]


def test_plot_parity_writes_a_png(tmp_path):
    path = docs_figures.plot_parity(docs_figures.gaps_of_records(_records()), str(tmp_path / "parity.png"))
    assert path == str(tmp_path / "parity.png")
    assert (tmp_path / "parity.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_gaps_of_records_are_the_paired_gaps_in_points():
    bf16, fp16 = docs_figures.gaps_of_records(_records())
    assert (bf16.arm, bf16.units, fp16.arm, fp16.units) == ("mixed_bfloat16", 3, "mixed_float16", 1)
    assert bf16.mean == pytest.approx(0.0) and bf16.low < 0 < bf16.high
    assert fp16.mean == pytest.approx(0.0) and math.isnan(fp16.low)


def test_gaps_of_records_refuse_records_without_a_gap():
    with pytest.raises(ValueError, match="Received arms: \\['float32'\\]"):
        docs_figures.gaps_of_records(_records()[:3])


def test_plot_parity_refuses_no_arms(tmp_path):
    with pytest.raises(ValueError, match="Received: gaps=\\[\\]"):
        docs_figures.plot_parity([], str(tmp_path / "parity.png"))


_SWEEP = """# Numerics

| arm | units | accuracy gap | SD per unit | standard error | 95% interval | NLL gap | 95% interval |
|---|---|---|---|---|---|---|---|
| float32, Keras BatchNorm (**the floor**) | 25 | -0.39 | 2.52 | **0.50** | -1.43..+0.65 | +0.020 | -0.006..+0.047 |
| `mixed_float16` | 35 | -0.25 | 2.32 | 0.39 | -1.04..+0.55 | +0.021 | -0.003..+0.045 |

- after the table
"""


def test_recorded_sweep_reads_every_arm_of_the_table(tmp_path):
    path = tmp_path / "NUMERICS.md"
    path.write_text(_SWEEP)
    assert docs_figures.recorded_sweep(str(path)) == [
        docs_figures.ArmGap("float32, Keras BatchNorm (the floor)", 25, -0.39, -1.43, 0.65),
        docs_figures.ArmGap("mixed_float16", 35, -0.25, -1.04, 0.55),
    ]


def test_recorded_sweep_names_what_it_could_not_read(tmp_path):
    path = tmp_path / "NUMERICS.md"
    path.write_text("# Numerics\n")
    with pytest.raises(ValueError, match="has no table starting with"):
        docs_figures.recorded_sweep(str(path))
    path.write_text(_SWEEP.replace("-1.04..+0.55", "n/a"))
    with pytest.raises(ValueError, match="Received: '\\| `mixed_float16`"):
        docs_figures.recorded_sweep(str(path))


def test_the_docs_table_is_the_recorded_sweep():
    # The figure in docs/images/parity.png is drawn from this table: every arm of it parses.
    arms = [gap.arm for gap in docs_figures.recorded_sweep()]
    assert arms[1:3] == ["mixed_float16", "mixed_bfloat16"] and len(arms) == 4


def test_parity_records_round_trip_through_json(tmp_path):
    import json

    path = tmp_path / "parity.json"
    path.write_text(json.dumps([r.to_json() for r in _records()]))
    assert docs_figures.load_parity_records(str(path)) == _records()


def test_load_parity_records_refuses_an_empty_file(tmp_path):
    path = tmp_path / "parity.json"
    path.write_text("[]")
    with pytest.raises(ValueError, match="Received: \\[\\]"):
        docs_figures.load_parity_records(str(path))


def test_tensorboard_url_filters_exactly_the_tags():
    url = docs_figures.tensorboard_url(6006, ("batch_loss", "batch_loss_scale"))
    assert url == (
        "http://127.0.0.1:6006/?darkMode=false&forceSVG=true&smoothing=0&runFilter=train"
        "&tagFilter=%5E%28batch_loss%7Cbatch_loss_scale%29%24#timeseries"
    )
    with pytest.raises(ValueError, match="Received: tags=\\(\\)"):
        docs_figures.tensorboard_url(6006, ())
