"""The docs-figures tool's plotting and URL functions, on small inputs (the tool itself runs on demand)."""

import importlib.util
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
    path = docs_figures.plot_parity(_records(), str(tmp_path / "parity.png"))
    assert path == str(tmp_path / "parity.png")
    assert (tmp_path / "parity.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_parity_refuses_records_without_a_gap(tmp_path):
    with pytest.raises(ValueError, match="Received arms: \\['float32'\\]"):
        docs_figures.plot_parity(_records()[:3], str(tmp_path / "parity.png"))


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
