"""The docs-figures tool's plotting and URL functions, on small inputs (the tool itself runs on demand)."""

import importlib.util
import math
import pathlib
import re

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


def _benchmark_record():
    row = {"model": "gan", "batch_size": 512, "xla": False, "ratio_to_hand_written": 1.0}
    return {
        "machine": "2-core AMD EPYC, AVX512-BF16 (Zen 4)",
        "command": "python3 scripts/benchmark.py --models=gan,mobilenet_v2",
        "data": {
            "rows": [
                {**row, "precision": "float32", "images_per_sec": 800.0, "ratio_to_float32": 1.0, "step_mb": 550.0},
                {
                    **row,
                    "precision": "mixed_float16",
                    "images_per_sec": 400.0,
                    "ratio_to_float32": 0.5,
                    "step_mb": 300.0,
                    "step_ratio_to_float32": 0.545,
                },
                {
                    **row,
                    "model": "mobilenet_v2",
                    "batch_size": 128,
                    "precision": "float32",
                    "images_per_sec": 300.0,
                    "ratio_to_float32": 1.0,
                    "step_mb": None,
                },
            ]
        },
    }


def test_the_charts_are_drawn_from_a_record(tmp_path):
    record = _benchmark_record()
    assert docs_figures.plot_throughput(record, str(tmp_path / "b.png")) == str(tmp_path / "b.png")
    assert docs_figures.plot_memory(record, str(tmp_path / "m.png")) == str(tmp_path / "m.png")
    for name in ("b.png", "m.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_charts_refuse_a_record_without_their_rows(tmp_path):
    record = _benchmark_record()
    with pytest.raises(ValueError, match="no benchmark rows of models \\['resnet50'\\]"):
        docs_figures.plot_throughput(record, str(tmp_path / "b.png"), model="resnet50")
    for row in record["data"]["rows"]:
        row["step_mb"] = None
    with pytest.raises(ValueError, match="no allocator figures"):
        docs_figures.plot_memory(record, str(tmp_path / "m.png"))


def test_load_record_refuses_a_file_that_is_not_a_record(tmp_path):
    path = tmp_path / "r.json"
    path.write_text('{"data": {}}')
    with pytest.raises(ValueError, match="Received keys: \\['data'\\]"):
        docs_figures.load_record(str(path))


def test_the_committed_records_draw_the_charts():
    # docs/images/benchmark.png, memory.png and parity.png are drawn from these records.
    record = docs_figures.load_record(docs_figures.BENCHMARK_RECORD)
    assert {r["model"] for r in record["data"]["rows"]} >= {"gan", "mobilenet_v2"}
    # The parity chart computes its arms from the sweep's own --json_out rows, as the record's `data.arms`
    # (which the pages quote) were computed: the two agree to the digits quoted.
    sweep = docs_figures.load_record(docs_figures.PARITY_RECORD)
    assert sweep["kind"] == "measured" and "data.records" in sweep["raw"]
    drawn = [(g.arm, g.units, round(g.mean, 2), round(g.low, 2), round(g.high, 2)) for g in docs_figures.record_sweep()]
    quoted = [(a["arm"], a["units"], a["accuracy_gap"], a["low"], a["high"]) for a in sweep["data"]["arms"]]
    assert drawn == quoted
    assert [arm for arm, *_ in drawn] == list(docs_figures.PARITY_ARMS)


def test_parity_records_round_trip_through_json(tmp_path):
    import json

    path = tmp_path / "parity.json"
    path.write_text(json.dumps([r.to_json() for r in _records()]))
    assert docs_figures.load_parity_records(str(path)) == _records()


def test_parity_records_are_read_from_a_record_that_holds_them(tmp_path):
    import json

    path = tmp_path / "sweep.json"
    record = {
        "kind": "measured",
        "machine": "m",
        "command": "c",
        "data": {"records": [r.to_json() for r in _records()]},
    }
    path.write_text(json.dumps(record))
    assert docs_figures.load_parity_records(str(path)) == _records()
    path.write_text(json.dumps({**record, "data": {"arms": []}}))
    with pytest.raises(ValueError, match="holds no parity records"):
        docs_figures.load_parity_records(str(path))


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


def test_the_parity_chart_shows_the_arms_of_the_table_beside_it_in_their_precisions_colours():
    numerics = (pathlib.Path(docs_figures.REPO) / "docs" / "NUMERICS.md").read_text()
    table = numerics[numerics.index("## What to expect") : numerics.index("[![Accuracy gap")]
    shown = set(re.findall(r'figure: ([\w-]+) data\.arms\[arm="([^"]+)"\]', table))
    record = pathlib.Path(docs_figures.PARITY_RECORD).stem
    assert shown == {(record, arm) for arm in docs_figures.PARITY_ARMS}
    colors = [docs_figures._arm_color(arm) for arm in docs_figures.PARITY_ARMS]
    assert colors == [docs_figures._COLORS[p] for p in ("mixed_float16", "mixed_bfloat16")]


def test_every_picture_is_drawn_narrow_enough_to_read_at_420_px():
    # A page shows a picture at its column's width: one drawn at 1,000 px or more shrinks its type
    # below reading size on a phone. The charts are drawn about 400-600 px wide, type included.
    from PIL import Image

    images = sorted((pathlib.Path(docs_figures.REPO) / "docs" / "images").glob("*.png"))
    assert images
    assert {p.name: Image.open(p).size[0] for p in images if Image.open(p).size[0] > 700} == {}


def test_the_tensorboard_picture_names_a_record_with_the_runs_raw_output():
    record = docs_figures.load_record(docs_figures.TENSORBOARD_RECORD)
    assert record["kind"] == "measured"
    assert record["data"]["mixed_float16"][-1].startswith("  logs:")
    assert any("skipped steps: 5" in line for line in record["data"]["mixed_float16"])


def _window(path):
    """A 1400x1000 screenshot whose every pixel differs from its neighbours, written as a PNG; returns its pixels."""
    import numpy as np
    from matplotlib import image

    y, x = np.mgrid[:1000, :1400]
    pixels = np.stack([x % 256, y % 256, (x * 7 + y * 3) % 256], axis=-1).astype(np.uint8)
    image.imsave(path, pixels)
    return pixels


def test_the_tensorboard_picture_keeps_each_card_s_pixels_under_the_title(tmp_path):
    # Resampled, a card lost rows and columns of its type (the x tick 0 drawn in part).
    from matplotlib import image

    window = _window(str(tmp_path / "window.png"))
    path = docs_figures.crop_tensorboard(str(tmp_path / "window.png"), str(tmp_path / "tb.png"), "a\ntitle")
    picture = (image.imread(path) * 255).round().astype("uint8")
    top = docs_figures.TENSORBOARD_TITLE_PX
    for left, card_top, right, bottom in docs_figures.TENSORBOARD_CARDS:
        height = bottom - card_top
        assert (picture[top : top + height, : right - left, :3] == window[card_top:bottom, left:right]).all()
        top += height + docs_figures.TENSORBOARD_GAP_PX
    assert picture.shape[0] == top - docs_figures.TENSORBOARD_GAP_PX
    assert picture[: docs_figures.TENSORBOARD_TITLE_PX].min() < 128  # the title's type


def test_blank_cards_names_the_cards_tensorboard_has_not_drawn(tmp_path):
    import numpy as np
    from matplotlib import image

    pixels = np.full((1000, 1400, 3), 240, np.uint8)
    left, top, right, bottom = docs_figures.TENSORBOARD_CARDS[1]
    pixels[top + 50, left + 50 : left + 90] = 40  # a curve in the second card
    image.imsave(tmp_path / "window.png", pixels)
    assert docs_figures.blank_cards(str(tmp_path / "window.png")) == [0, 2]


def test_styled_adds_the_stylesheet_to_html_pages_and_forwards_everything_else():
    import http.server
    import threading
    import urllib.error
    import urllib.request

    class Server(http.server.BaseHTTPRequestHandler):
        def _answer(self, status, kind, data):
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/":
                self._answer(200, "text/html; charset=utf-8", b"<html><head></head><body>runs</body></html>")
            else:
                self._answer(404, "application/json", b'{"error": "no such page"}')

        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            self._answer(200, "application/json", self.headers["Content-Type"].encode() + b" " + body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Server)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        with docs_figures.styled(server.server_address[1], "p { color: red; }") as port:
            url = f"http://127.0.0.1:{port}"
            page = urllib.request.urlopen(url + "/").read()
            assert page == b"<html><head><style>p { color: red; }</style></head><body>runs</body></html>"
            posted = urllib.request.Request(url + "/data", data=b"tag=a", headers={"Content-Type": "text/plain"})
            assert urllib.request.urlopen(posted).read() == b"text/plain tag=a"
            with pytest.raises(urllib.error.HTTPError) as missing:
                urllib.request.urlopen(url + "/missing")
            assert missing.value.code == 404 and missing.value.read() == b'{"error": "no such page"}'
    finally:
        server.shutdown()
        server.server_close()
