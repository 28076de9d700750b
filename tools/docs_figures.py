"""Remakes the documentation's figures (docs/images/*.png), the charts from the records in docs/records/.

    python tools/docs_figures.py                      # all four figures
    python tools/docs_figures.py --only=benchmark     # one of tensorboard, benchmark, memory, parity
    python tools/docs_figures.py --only=parity --parity_records=parity.json   # a run's --json_out, or a record
    python tools/docs_figures.py --only=tensorboard --tensorboard_logs=DIR   # kept runs, no training

The benchmark, memory and parity charts are drawn from a committed record, the same file the pages'
quoted figures are checked against (tools/figures.py), so a chart and the sentence under it cannot
disagree:

- benchmark: the GAN's throughput per precision from `BENCHMARK_RECORD` (`tfmp-benchmark --json_out`
  of a run on this class of CPU, with the command in the record), each bar labelled with its img/s
  and its ratio to float32;
- memory: the step memory (`step_mb`) of each model and precision in the same record, from
  TensorFlow's allocator, labelled with its ratio to float32's;
- parity: each arm's accuracy gap to float32 with its 95% interval, against the +-1-point band, from
  the `tfmp-parity --json_out` rows that the measured record `PARITY_RECORD` (the k-fold sweep of today's
  tfmp) holds, or from another such file or record (`--parity_records`);
- tensorboard: two classifier runs on the embedded digits (float32, and mixed_float16 with dynamic
  loss scaling, whose first steps overflow and are skipped), shown by TensorBoard itself (headless
  Chromium screenshot of the loss, `loss_scale` and `skipped_steps` curves, every tick label drawn
  whole); this one trains, for minutes, unless `--tensorboard_logs` names the folder of two runs
  kept from before (its `float32/` and `mixed_float16/`), and needs `tensorboard` and a Chromium on
  the PATH.

`--measure` reruns the benchmark record's own command first and rewrites the record (minutes; the
record then names this machine and its CPU class, this commit and today).

Titles name the CPU class; the type is large enough to read at 420 px wide, and the pages link each
image to its full-size file.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from typing import Any, NamedTuple

from tfmp.run import parity, reporting

__all__ = [
    "BENCHMARK_RECORD",
    "FIGURES",
    "PARITY_RECORD",
    "TENSORBOARD_TAGS",
    "ArmGap",
    "gaps_of_records",
    "load_parity_records",
    "main",
    "plot_memory",
    "plot_parity",
    "plot_throughput",
    "record_sweep",
    "tensorboard_url",
    "blank_cards",
    "crop_tensorboard",
    "make_tensorboard",
    "styled",
    "TENSORBOARD_CARDS",
    "TENSORBOARD_GAP_PX",
    "TENSORBOARD_RECORD",
    "TENSORBOARD_STYLE",
    "TENSORBOARD_TITLE_PX",
]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGES = os.path.join(REPO, "docs", "images")
FIGURES = ("tensorboard", "benchmark", "memory", "parity")
# The curves a user checks first under mixed_float16 (the train/ sub-run's per-step tags).
TENSORBOARD_TAGS = ("batch_loss", "batch_loss_scale", "batch_skipped_steps")
# Parity is claimed when the whole 95% interval lies within this many points of float32.
PARITY_BAND = 1.0

# The record of the two runs the picture shows (what each printed), and where TensorBoard draws its three
# cards in a 1400x1000 window (left, top, right, bottom), so that the picture keeps the curves only.
TENSORBOARD_RECORD = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "records", "avx512bf16-tensorboard-runs.json"
)
TENSORBOARD_CARDS = ((301, 171, 705, 590), (723, 171, 1127, 590), (301, 608, 705, 1000))
# TensorBoard 2.21 fades the tick labels in each axis's outer tenth and cuts a label at an axis's end in
# half (its axis, chart and card clip their paint), so the picture showed its lowest y tick and the x tick
# 0 in part. This stylesheet, added to the page the screenshot loads, draws every label whole; the x axis
# keeps its fade at its right end only, where the step selector's chip covers the last tick.
TENSORBOARD_STYLE = (
    "line-chart, line-chart-axis { contain: size layout style !important; }"
    " scalar-card-component .chart-container, line-chart .container, line-chart-axis, line-chart-axis .minor,"
    " line-chart-axis svg.ticks { overflow: visible !important; }"
    " line-chart-axis .y-axis .ticks { -webkit-mask-image: none !important; mask-image: none !important; }"
    " line-chart-axis .x-axis .ticks { -webkit-mask-image: linear-gradient(to right, #000 90%, transparent)"
    " !important; mask-image: linear-gradient(to right, #000 90%, transparent) !important; }"
)
# The picture: the title's band above the cards, and the white rows between two cards (pixels).
TENSORBOARD_TITLE_PX = 110
TENSORBOARD_GAP_PX = 10
TENSORBOARD_RUNS = (
    ("float32", ["--precision=float32"]),
    ("mixed_float16", ["--precision=mixed_float16", "--loss_scale=dynamic"]),
)
RECORDS = os.path.join(REPO, "docs", "records")
# The benchmark run both charts are drawn from, and the parity sweep of the parity chart.
BENCHMARK_RECORD = os.path.join(RECORDS, "avx512bf16-compare.json")
# A measured record: its `data.records` are the sweep's --json_out rows whole, its `data.arms` the gaps the
# pages quote, computed from those rows as the chart computes them.
PARITY_RECORD = os.path.join(RECORDS, "avx2-parity-sweep.json")
# The arms the pages' table shows beside the chart, in the chart's order (top to bottom).
PARITY_ARMS = ("mixed_float16", "mixed_bfloat16")
_LABELS = {"float32": "float32", "mixed_bfloat16": "bfloat16", "mixed_float16": "float16"}
_COLORS = {"float32": "tab:blue", "mixed_bfloat16": "tab:green", "mixed_float16": "tab:orange"}
_MODELS = {"gan": "GAN", "mobilenet_v2": "MobileNetV2", "resnet50": "ResNet-50"}
# Large type: the pages show the charts at their column's width, 420 px on a phone.
_FONT = 13


def _script(name: str, flags: Sequence[str]) -> None:
    """Runs one of tfmp's console scripts (`tfmp_scripts.<name>`) in this Python, failing loudly."""
    command = [sys.executable, "-m", f"tfmp_scripts.{name}", *flags]
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True, cwd=REPO)


def tensorboard_url(port: int, tags: Sequence[str] = TENSORBOARD_TAGS, runs: str = "train") -> str:
    """The URL of TensorBoard's time-series dashboard showing only `tags` of the runs matching `runs`.

    The curves are drawn unsmoothed and as SVG (a headless browser without a GPU draws no WebGL).

    Args:
        port: The port TensorBoard listens on (on 127.0.0.1).
        tags: Scalar tag names, matched exactly.
        runs: A regex on the run names (the training runs' `train/` sub-runs by default).

    Returns:
        The URL, e.g. `http://127.0.0.1:6006/?darkMode=false&forceSVG=true&smoothing=0&runFilter=train&tagFilter=%5E%28batch_loss%29%24#timeseries`.

    Raises:
        ValueError: for no tags.
    """
    if not tags:
        raise ValueError(f"tensorboard_url needs at least one tag. Received: tags={tags!r}")
    query = urllib.parse.urlencode(
        {
            "darkMode": "false",
            "forceSVG": "true",
            "smoothing": "0",
            "runFilter": runs,
            "tagFilter": "^(" + "|".join(tags) + ")$",
        },
        quote_via=urllib.parse.quote,
    )
    return f"http://127.0.0.1:{port}/?{query}#timeseries"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _tensorboard(logdir: str) -> Iterator[int]:
    """Serves `logdir` with TensorBoard on a free local port until the block ends; yields the port."""
    port = _free_port()
    server = subprocess.Popen(
        ["tensorboard", f"--logdir={logdir}", "--host=127.0.0.1", f"--port={port}", "--reload_interval=0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 600  # TensorFlow imports take minutes on a loaded CPU
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/data/runs", timeout=5)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    status = server.poll()
                    raise RuntimeError(f"TensorBoard did not start on port {port} (exit code {status}).") from None
                time.sleep(1)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=30)


def screenshot(url: str, path: str, width: int = 1400, height: int = 1000, wait_ms: int = 20000) -> str:
    """Writes a headless Chromium screenshot of `url` to `path` after `wait_ms` of page time; returns `path`."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if chromium is None:
        raise RuntimeError("No Chromium on the PATH: install it (e.g. apt-get install chromium).")
    subprocess.run(
        [
            chromium,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--window-size={width},{height}",
            f"--virtual-time-budget={wait_ms}",
            f"--screenshot={os.path.abspath(path)}",
            url,
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return path


@contextlib.contextmanager
def styled(port: int, style: str = TENSORBOARD_STYLE) -> Iterator[int]:
    """Serves the local server on `port` again, with `style` added to each HTML page; yields the new port.

    A proxy on a free local port until the block ends: requests (GET and POST, with their bodies) go
    to `port` as they came, and answers come back with their status and content type, each HTML
    page's `</head>` preceded by a `<style>` of `style`.
    """
    sheet = f"<style>{style}</style></head>".encode()

    class Proxy(http.server.BaseHTTPRequestHandler):
        def _forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or None
            headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "accept")}
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}{self.path}", data=body, headers=headers, method=self.command
            )
            try:
                with urllib.request.urlopen(request, timeout=120) as answer:
                    status, kind, data = answer.status, answer.headers.get("Content-Type", ""), answer.read()
            except urllib.error.HTTPError as error:
                status, kind, data = error.code, error.headers.get("Content-Type", ""), error.read()
            if kind.startswith("text/html"):
                data = data.replace(b"</head>", sheet, 1)
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _forward

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def make_tensorboard(workdir: str, out: str, logdir: str | None = None, tries: int = 3) -> str:
    """Screenshots TensorBoard on the two classifier runs and makes the picture of it; returns the PNG path.

    Args:
        workdir: Where the runs and the window's screenshot go.
        out: The folder of the picture (`tensorboard.png`).
        logdir: The folder of two runs kept from before (`float32/`, `mixed_float16/`); None trains
            them first (minutes).
        tries: How many screenshots to take at most while one of them shows a card without curves
            (TensorBoard has not always drawn them within the page time).

    Raises:
        RuntimeError: when every screenshot shows a card without curves.
    """
    if logdir is None:
        logdir = os.path.join(workdir, "logs")
        for name, flags in TENSORBOARD_RUNS:
            _script(
                "train_classifier",
                [
                    "--dataset=digits",
                    "--alpha=0.35",
                    "--epochs=2",
                    "--seed=0",
                    "--console=lines",
                    f"--logdir={logdir}",
                    f"--run_name={name}",
                    *flags,
                ],
            )
    os.makedirs(workdir, exist_ok=True)
    shot = os.path.join(workdir, "tensorboard_window.png")
    with _tensorboard(logdir) as port, styled(port) as styled_port:
        for _ in range(tries):
            screenshot(tensorboard_url(styled_port), shot)
            if not blank_cards(shot):
                break
        else:
            raise RuntimeError(f"TensorBoard drew no curves in {tries} screenshots of {logdir} (the last: {shot}).")
    record = load_record(TENSORBOARD_RECORD)
    title = (
        "TensorBoard: MobileNetV2 on digits, 2 epochs\n"
        "float32 (cyan), mixed_float16 (purple)\n"
        f"{record['machine'].split(' (')[0]}\nrecord {os.path.basename(TENSORBOARD_RECORD)[:-5]}"
    )
    return crop_tensorboard(shot, os.path.join(out, "tensorboard.png"), title)


def blank_cards(shot: str) -> list[int]:
    """The indexes of a TensorBoard screenshot's cards (`TENSORBOARD_CARDS`) showing nothing dark: no text or curve."""
    reporting.require_matplotlib()
    import matplotlib.image

    image = matplotlib.image.imread(shot)[..., :3]
    cards = [image[top:bottom, left:right] for left, top, right, bottom in TENSORBOARD_CARDS]
    return [i for i, card in enumerate(cards) if card.min() > 0.5]


def crop_tensorboard(shot: str, path: str, title: str) -> str:
    """Crops a 1400x1000 TensorBoard screenshot to its three cards, stacks them, titles them; returns `path`.

    The run list and the settings pane are left out, and the cards, one above the other at their
    own size, read at 420 px wide. `TENSORBOARD_CARDS` holds where TensorBoard 2.21 draws them. Each
    card keeps its pixels as they are (it is not resampled, which would drop rows and columns of its
    type): the picture is the title's band (`TENSORBOARD_TITLE_PX`) and the cards with
    `TENSORBOARD_GAP_PX` white rows between them.
    """
    reporting.require_matplotlib()
    import matplotlib.image
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    image = matplotlib.image.imread(shot)
    if image.dtype != np.uint8:
        image = np.round(image * 255).astype(np.uint8)
    if image.shape[2] == 3:
        image = np.concatenate([image, np.full(image.shape[:2] + (1,), 255, np.uint8)], axis=2)
    cards = [image[top:bottom, left:right] for left, top, right, bottom in TENSORBOARD_CARDS]
    width = max(card.shape[1] for card in cards)
    dpi = 100
    figure = Figure(figsize=(width / dpi, TENSORBOARD_TITLE_PX / dpi), dpi=dpi)
    canvas = FigureCanvasAgg(figure)
    figure.text(0.5, 0.5, title, fontsize=12, ha="center", va="center", linespacing=1.3)
    canvas.draw()
    rows = [np.asarray(canvas.buffer_rgba())]
    for card in cards:
        gap = 0 if len(rows) == 1 else TENSORBOARD_GAP_PX
        rows.append(np.full((gap, width, 4), 255, np.uint8))
        rows.append(np.pad(card, ((0, 0), (0, width - card.shape[1]), (0, 0)), constant_values=255))
    matplotlib.image.imsave(path, np.concatenate(rows), format="png")
    return path


def load_record(path: str) -> dict:
    """A record of docs/records/ (machine, command, tfmp commit, date, source and its `data`).

    Raises:
        ValueError: when the file is not such a record.
    """
    with open(path, encoding="utf-8") as f:
        record = json.load(f)
    if not isinstance(record, dict) or not {"machine", "command", "data"} <= set(record):
        raise ValueError(f"{path} is not a record (machine, command, data). Received keys: {sorted(record)}")
    return record


def _benchmark_rows(record: dict, models: Sequence[str] | None = None) -> list[dict]:
    rows = [r for r in record["data"]["rows"] if models is None or r["model"] in models]
    if not rows:
        raise ValueError(f"The record holds no benchmark rows of models {models}. Received: {record['data']['rows']!r}")
    return rows


def _figure(width: float, height: float) -> tuple[Any, Any]:
    reporting.require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure, figure.subplots()


def _bars(ax: Any, rows: Sequence[dict], value: str, label: Any, unit: str) -> None:
    """Horizontal bars, one per row (top to bottom in order), each labelled at its end."""
    names = [
        f"{_MODELS.get(r['model'], r['model'])} {_LABELS.get(r['precision'], r['precision'])}"
        if len({r["model"] for r in rows}) > 1
        else _LABELS.get(r["precision"], r["precision"])
        for r in rows
    ]
    ys = list(range(len(rows)))[::-1]
    widest = max(r[value] for r in rows)
    for y, r in zip(ys, rows):
        ax.barh(y, r[value], color=_COLORS.get(r["precision"], "tab:gray"), height=0.7)
        ax.text(r[value] + widest * 0.02, y, label(r), va="center", fontsize=_FONT)
    ax.set_yticks(ys)
    ax.set_yticklabels(names, fontsize=_FONT)
    ax.set_xlim(0, widest * 1.6)
    ax.set_xlabel(unit, fontsize=_FONT)
    ax.tick_params(axis="x", labelsize=_FONT - 2)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _ratio(value: float | None, of: str) -> str:
    return "" if value is None else f", {value:.2f}x {of}"


def plot_throughput(record: dict, path: str, model: str = "gan") -> str:
    """Writes a PNG of `model`'s throughput per precision in a benchmark `record`; returns `path`.

    One bar per precision, labelled with its median img/s and its ratio to float32 (the figures
    `ratio_to_float32` holds, as the pages quote them); the title names the model, its batch and the
    record's machine (its CPU class).
    """
    rows = _benchmark_rows(record, [model])
    figure, ax = _figure(4.6, 1.9 + 0.55 * len(rows))
    _bars(
        ax,
        rows,
        "images_per_sec",
        lambda r: (
            f"{r['images_per_sec']:.0f}"
            + _ratio(r["ratio_to_float32"] if r["precision"] != "float32" else None, "fp32")
        ),
        "img/s, tfmp trainer\n(median of the rounds)",
    )
    batch = rows[0]["batch_size"]
    name = _MODELS.get(model, model)
    ax.set_title(f"{name}, batch {batch}: training throughput\n{record['machine']}", fontsize=_FONT)
    figure.savefig(path, format="png", dpi=100, bbox_inches="tight", pad_inches=0.1)
    return path


def plot_memory(record: dict, path: str) -> str:
    """Writes a PNG of each row's step memory (`step_mb`, TensorFlow's allocator) in a benchmark `record`.

    One bar per model and precision, labelled with its MiB and, for 16 bits, its ratio to float32's
    (`step_ratio_to_float32`); the title names the record's machine. Returns `path`.

    Raises:
        ValueError: when no row carries the allocator's figures.
    """
    rows = [r for r in _benchmark_rows(record) if r.get("step_mb") is not None]
    if not rows:
        raise ValueError("The record's rows carry no allocator figures (step_mb).")
    figure, ax = _figure(4.6, 1.9 + 0.6 * len(rows))
    _bars(
        ax,
        rows,
        "step_mb",
        lambda r: (
            f"{r['step_mb']:.0f}"
            + _ratio(r.get("step_ratio_to_float32") if r["precision"] != "float32" else None, "fp32")
        ),
        "MiB a training step allocates\n(TensorFlow allocator)",
    )
    groups = dict.fromkeys((r["model"], r["batch_size"]) for r in rows)
    batches = ", ".join(f"{_MODELS.get(m, m)} {b}" for m, b in groups)
    ax.set_title(f"Step memory (batch: {batches})\n{record['machine']}", fontsize=_FONT)
    figure.savefig(path, format="png", dpi=100, bbox_inches="tight", pad_inches=0.1)
    return path


def _measure(record_path: str, workdir: str) -> None:
    """Reruns the benchmark record's command and rewrites the record with this run's rows."""
    record = load_record(record_path)
    flags = [f for f in record["command"].split() if f.startswith("--") and not f.startswith("--json_out")]
    rows_path = os.path.join(workdir, "compare.json")
    started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    _script("benchmark", [*flags, f"--json_out={rows_path}"])
    with open(rows_path, encoding="utf-8") as f:
        record["data"]["rows"] = json.load(f)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout.strip()
    from tfmp import cpu_kernels

    record.update(
        machine=f"{os.cpu_count()}-core {cpu_kernels.machine_id().split(' | ')[0]}, {cpu_kernels.cpu_class()}",
        cpu_class=cpu_kernels.cpu_class(),
        tfmp_commit=commit or "unknown",
        date=started,
        source="measured: `data.rows` is the command's --json_out file",
    )
    record["data"].pop("table", None)
    record.pop("cpu_note_class", None)  # this run's notes are this CPU's
    with open(record_path, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1, ensure_ascii=False)
        f.write("\n")


def load_parity_records(path: str) -> list[parity.ParityRecord]:
    """Reads the records `tfmp-parity --json_out` wrote: the file itself, or a measured record of docs/records/
    that holds such a file whole in `data.records`.

    Raises:
        ValueError: when the file holds no list of records.
    """
    with open(path) as f:
        rows = json.load(f)
    if isinstance(rows, dict) and isinstance(rows.get("data"), dict):
        rows = rows["data"].get("records")
    if not isinstance(rows, list) or not rows:
        raise ValueError(
            f"{path} holds no parity records (a JSON list of tfmp-parity's records, or a record with them in "
            f"data.records). Received: {rows!r}"
        )
    by_epoch = ("accuracy_by_epoch", "loss_by_epoch")
    return [parity.ParityRecord(**{**row, **{key: tuple(row[key]) for key in by_epoch}}) for row in rows]


class ArmGap(NamedTuple):
    """One arm's accuracy gap to float32 over paired units, as `plot_parity` draws it.

    Attributes:
        arm: The arm's name.
        units: How many paired units the gap is over.
        mean: The mean paired gap (points).
        low, high: Its 95% interval (points); nan for one unit.
    """

    arm: str
    units: int
    mean: float
    low: float = math.nan
    high: float = math.nan


def gaps_of_records(records: Sequence[parity.ParityRecord]) -> list[ArmGap]:
    """Each arm's accuracy gap to float32 in `tfmp.run.parity.run_parity` records (`paired_gaps`), in points.

    Raises:
        ValueError: when no arm has an accuracy gap to float32.
    """
    gaps = [g for g in parity.paired_gaps(records).values() if g.accuracy is not None]
    if not gaps:
        raise ValueError(
            "Parity records need float32 and another arm over the same units, with accuracy. "
            f"Received arms: {sorted({r.arm for r in records})}"
        )
    return [ArmGap(g.arm, len(g.units), g.accuracy.mean, *g.accuracy.interval) for g in gaps]


def record_sweep(path: str = PARITY_RECORD) -> list[ArmGap]:
    """The arms of a measured parity record (docs/records/), computed from the `tfmp-parity --json_out` rows it
    holds (`data.records`): per arm its units, mean accuracy gap and 95% interval.

    Raises:
        ValueError: when the record holds no parity records.
    """
    load_record(path)
    return gaps_of_records(load_parity_records(path))


def _arm_color(arm: str) -> str:
    """An arm's colour: its precision's, as in the throughput and memory charts (float32 blue, bfloat16
    green, float16 orange), whatever its interval."""
    for precision in ("mixed_bfloat16", "mixed_float16"):
        if arm.startswith(precision):
            return _COLORS[precision]
    return _COLORS["float32"]


def plot_parity(gaps: Sequence[ArmGap], path: str, title: str | None = None) -> str:
    """Writes a PNG of each arm's accuracy gap to float32 with its 95% interval, against the +-1-point band.

    One row per arm (float32 is the reference at 0), top to bottom in the
    given order; a dot at the mean paired gap, a bar over its 95% interval,
    the label `mean (low..high), n units` under it, and the band where parity
    is claimed shaded. Each arm has its precision's colour, as in the other
    charts; a filled dot marks an interval wholly inside the band, a hollow
    one an interval that crosses it. Drawn narrow, with large type, so that
    it reads at 420 px.

    Args:
        gaps: The arms, e.g. `record_sweep()` or `gaps_of_records(records)`.
        path: The PNG file to write.
        title: The figure's title; None names the units.

    Returns:
        `path`.

    Raises:
        ValueError: for no arms.
    """
    reporting.require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not gaps:
        raise ValueError(f"plot_parity needs at least one arm. Received: gaps={gaps!r}")
    figure = Figure(figsize=(5, 1.9 + 1.0 * len(gaps)), layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.subplots()
    ax.axvspan(-PARITY_BAND, PARITY_BAND, color="0.85", alpha=0.6, label=f"±{PARITY_BAND:g} point band")
    ax.axvline(0, color="black", linewidth=0.8)
    widest = PARITY_BAND
    for y, gap in enumerate(reversed(gaps)):
        color = _arm_color(gap.arm)
        inside = True
        if not math.isnan(gap.low):
            inside = -PARITY_BAND <= gap.low and gap.high <= PARITY_BAND
            ax.errorbar(
                [gap.mean], [y], xerr=[[gap.mean - gap.low], [gap.high - gap.mean]], color=color, capsize=7, lw=2.5
            )
            widest = max(widest, abs(gap.low), abs(gap.high))
            label = f"{gap.mean:+.2f} ({gap.low:+.2f} to {gap.high:+.2f}), {gap.units} units"
        else:
            label = f"{gap.mean:+.2f}, {gap.units} unit (no interval)"
        widest = max(widest, abs(gap.mean))
        ax.plot([gap.mean], [y], "o", ms=11, color=color, mfc=color if inside else "white", mew=2.5)
        ax.annotate(label, (0, y), xytext=(0, -24), textcoords="offset points", ha="center", fontsize=_FONT - 1)
    ax.set_xlim(-1.15 * widest, 1.15 * widest)
    ax.set_ylim(-0.8, len(gaps) - 0.4)
    ax.set_yticks(range(len(gaps)))
    ax.set_yticklabels([_arm_label(g.arm) for g in reversed(gaps)], fontsize=_FONT)
    ax.tick_params(axis="x", labelsize=_FONT - 1)
    ax.set_xlabel(
        "accuracy gap to float32 (points): dot the mean,\nbar the 95% interval (hollow: crosses the band)",
        fontsize=_FONT - 1,
    )
    ax.legend(loc="upper right", fontsize=_FONT - 2)
    units = max(g.units for g in gaps)
    ax.set_title(title or f"Accuracy gap to float32 per arm (up to {units} paired units)", fontsize=_FONT - 1)
    figure.savefig(path, format="png", dpi=110, bbox_inches="tight", pad_inches=0.1)
    return path


def _arm_label(arm: str) -> str:
    """A short label for the chart's axis: the floor's long name shortened, `mixed_` dropped."""
    if arm.startswith("float32,"):
        return "float32 floor"
    return arm.replace("mixed_", "")


def make_parity(out: str, records_path: str | None = None) -> str:
    """Plots the parity records of `records_path` (a `tfmp-parity --json_out` file, or a record holding one in
    `data.records`), by default those of the sweep record `PARITY_RECORD`; returns the PNG path."""
    path = os.path.join(out, "parity.png")
    source = records_path or PARITY_RECORD
    gaps = gaps_of_records(load_parity_records(source))
    with open(source) as f:
        held = json.load(f)
    if not isinstance(held, dict):
        return plot_parity(gaps, path, title=f"tfmp-parity --json_out={source}")
    record = load_record(source)
    machine = record["machine"].split(" (")[0]
    where = f"{machine}, {record['cpu_class']}" if record.get("cpu_class") else machine
    name = os.path.basename(source).removesuffix(".json")
    title = f"k-fold sweep, MobileNetV2 on digits\n{where}\ntfmp {record['tfmp_commit'][:7]} (record: {name})"
    order = {arm: i for i, arm in enumerate(PARITY_ARMS)}
    return plot_parity(sorted(gaps, key=lambda gap: order.get(gap.arm, len(order))), path, title=title)


def main(argv: Sequence[str] | None = None) -> int:
    """Parses the arguments, remakes the chosen figures and prints their paths."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", choices=FIGURES, action="append", help="A figure to remake (repeatable; default: all)."
    )
    parser.add_argument("--out", default=IMAGES, help="Directory of the PNGs (default: docs/images).")
    parser.add_argument("--workdir", default=None, help="Directory of the runs (default: a new temporary one).")
    parser.add_argument(
        "--parity_records",
        default=None,
        help="Plot these tfmp-parity --json_out records (the file, or a record holding it) instead of the sweep's.",
    )
    parser.add_argument(
        "--measure", action="store_true", help="Rerun the benchmark record's command first and rewrite the record."
    )
    parser.add_argument(
        "--tensorboard_logs",
        default=None,
        help="Picture these kept runs (float32/, mixed_float16/) instead of training two new ones.",
    )
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    workdir = args.workdir or tempfile.mkdtemp(prefix="tfmp_docs_figures_")
    os.makedirs(workdir, exist_ok=True)
    if args.measure:
        _measure(BENCHMARK_RECORD, workdir)
    makers = {
        "tensorboard": lambda: make_tensorboard(
            os.path.join(workdir, "tensorboard"), args.out, logdir=args.tensorboard_logs
        ),
        "benchmark": lambda: plot_throughput(load_record(BENCHMARK_RECORD), os.path.join(args.out, "benchmark.png")),
        "memory": lambda: plot_memory(load_record(BENCHMARK_RECORD), os.path.join(args.out, "memory.png")),
        "parity": lambda: make_parity(args.out, args.parity_records),
    }
    for name in args.only or FIGURES:
        print(f"{name}: {makers[name]()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
