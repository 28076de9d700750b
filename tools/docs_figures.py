"""Remakes the documentation's figures (docs/images/*.png) from tiny real runs.

    python tools/docs_figures.py                      # all three figures
    python tools/docs_figures.py --only=tensorboard   # one of tensorboard, benchmark, parity
    python tools/docs_figures.py --only=parity --parity_records=parity.json

Run on demand, not in CI (a few minutes on a CPU; the TensorBoard figure needs
`tensorboard` and a Chromium on the PATH). Each figure comes from tfmp's own
console scripts run on this machine:

- tensorboard: two classifier runs on the embedded digits (float32, and
  mixed_float16 with dynamic loss scaling, whose first steps overflow and are
  skipped), shown by TensorBoard itself (headless Chromium screenshot of the
  loss, `loss_scale` and `skipped_steps` curves);
- benchmark: `tfmp-benchmark --plot_out` on the GAN, the chart the benchmark
  writes;
- parity: a small `tfmp-parity` run (float32 and float16; one seed, three
  folds, two epochs),
  plotted by `plot_parity`: each arm's accuracy gap to float32 with its 95%
  interval, against the +-1-point band.

The figures are what these runs measured; the pages that show them name this
command and say how small the runs are.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence

from tfmp.run import parity, reporting

__all__ = [
    "FIGURES",
    "TENSORBOARD_TAGS",
    "load_parity_records",
    "main",
    "plot_parity",
    "tensorboard_url",
]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGES = os.path.join(REPO, "docs", "images")
FIGURES = ("tensorboard", "benchmark", "parity")
# The curves a user checks first under mixed_float16 (the train/ sub-run's per-step tags).
TENSORBOARD_TAGS = ("batch_loss", "batch_loss_scale", "batch_skipped_steps")
# Parity is claimed when the whole 95% interval lies within this many points of float32.
PARITY_BAND = 1.0

TENSORBOARD_RUNS = (
    ("float32", ["--precision=float32"]),
    ("mixed_float16", ["--precision=mixed_float16", "--loss_scale=dynamic"]),
)
PARITY_FLAGS = [
    "--seeds=0",
    "--folds=3",
    "--epochs=2",
    "--precisions=float32,mixed_float16",
]
# The AVX2-only CPU class's figure in docs/PERFORMANCE.md (16-bit types emulated: bfloat16 left out, it is slow there).
BENCHMARK_FLAGS = [
    "--models=gan",
    "--precisions=float32,mixed_float16",
    "--batch_sizes=256",
    "--xla=false",
    "--steps=5",
    "--repeats=2",
]


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


def make_tensorboard(workdir: str, out: str) -> str:
    """Trains the two tiny classifier runs and screenshots TensorBoard on them; returns the PNG path."""
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
    with _tensorboard(logdir) as port:
        return screenshot(tensorboard_url(port), os.path.join(out, "tensorboard.png"))


def make_benchmark(workdir: str, out: str) -> str:
    """Runs a small GAN benchmark whose own chart (`--plot_out`) is the figure; returns the PNG path."""
    path = os.path.join(out, "benchmark.png")
    records = os.path.join(workdir, "benchmark.json")
    _script("benchmark", [*BENCHMARK_FLAGS, f"--json_out={records}", f"--plot_out={path}"])
    return path


def load_parity_records(path: str) -> list[parity.ParityRecord]:
    """Reads the records `tfmp-parity --json_out` wrote.

    Raises:
        ValueError: when the file holds no list of records.
    """
    with open(path) as f:
        rows = json.load(f)
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{path} holds no parity records (a JSON list of tfmp-parity's records). Received: {rows!r}")
    by_epoch = ("accuracy_by_epoch", "loss_by_epoch")
    return [parity.ParityRecord(**{**row, **{key: tuple(row[key]) for key in by_epoch}}) for row in rows]


def plot_parity(records: Sequence[parity.ParityRecord], path: str, title: str | None = None) -> str:
    """Writes a PNG of each arm's accuracy gap to float32 with its 95% interval, against the +-1-point band.

    One row per arm (float32 is the reference at 0); a dot at the mean paired
    gap, a bar over its 95% interval (Student's t over the units), the label
    `mean (low..high), n units`, and the band where parity is claimed shaded.

    Args:
        records: `tfmp.run.parity.run_parity` records of float32 and at least
            one other arm, with accuracy.
        path: The PNG file to write.
        title: The figure's title; None names the units.

    Returns:
        `path`.

    Raises:
        ValueError: when no arm has an accuracy gap to float32.
    """
    reporting.require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    gaps = [g for g in parity.paired_gaps(records).values() if g.accuracy is not None]
    if not gaps:
        raise ValueError(
            "plot_parity needs float32 and another arm over the same units, with accuracy. "
            f"Received arms: {sorted({r.arm for r in records})}"
        )
    figure = Figure(figsize=(8, 2.2 + 0.6 * len(gaps)), layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.subplots()
    ax.axvspan(-PARITY_BAND, PARITY_BAND, color="tab:green", alpha=0.12, label=f"±{PARITY_BAND:g} point")
    ax.axvline(0, color="black", linewidth=0.8)
    widest = PARITY_BAND
    for y, gap in enumerate(gaps):
        accuracy = gap.accuracy
        low, high = accuracy.interval
        if low == low:  # not nan: two or more units
            ax.errorbar(
                [accuracy.mean], [y], xerr=[[accuracy.mean - low], [high - accuracy.mean]], color="tab:blue", capsize=6
            )
            widest = max(widest, abs(low), abs(high))
            label = f"{accuracy.mean:+.2f} ({low:+.2f}..{high:+.2f}), {len(gap.units)} units"
        else:
            label = f"{accuracy.mean:+.2f}, 1 unit (no interval)"
        widest = max(widest, abs(accuracy.mean))
        ax.plot([accuracy.mean], [y], "o", color="tab:blue")
        ax.annotate(label, (accuracy.mean, y), xytext=(0, 7), textcoords="offset points", ha="center", fontsize=8)
    ax.set_xlim(-1.25 * widest, 1.25 * widest)
    ax.set_ylim(-0.6, len(gaps) - 0.3)
    ax.set_yticks(range(len(gaps)))
    ax.set_yticklabels([g.arm for g in gaps])
    ax.set_xlabel("validation accuracy gap to float32 (points)\ndot: mean paired gap; bar: its 95% interval")
    ax.legend(loc="lower right", fontsize=8)
    units = max(len(g.units) for g in gaps)
    ax.set_title(title or f"Accuracy gap to float32 per arm ({units} paired units)", fontsize=10)
    figure.savefig(path, format="png", dpi=120)
    return path


def make_parity(workdir: str, out: str, records_path: str | None = None) -> str:
    """Plots `records_path`'s parity records, or those of a fresh small `tfmp-parity` run; returns the PNG path."""
    if records_path is None:
        records_path = os.path.join(workdir, "parity.json")
        _script("parity", [*PARITY_FLAGS, f"--logdir={os.path.join(workdir, 'parity')}", f"--json_out={records_path}"])
    records = load_parity_records(records_path)
    units = max((len(gap.units) for gap in parity.paired_gaps(records).values()), default=0)
    title = f"tfmp-parity {' '.join(PARITY_FLAGS)}\n({units} paired units; MobileNetV2 alpha 0.35, embedded digits)"
    return plot_parity(records, os.path.join(out, "parity.png"), title=title)


def main(argv: Sequence[str] | None = None) -> int:
    """Parses the arguments, remakes the chosen figures and prints their paths."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", choices=FIGURES, action="append", help="A figure to remake (repeatable; default: all)."
    )
    parser.add_argument("--out", default=IMAGES, help="Directory of the PNGs (default: docs/images).")
    parser.add_argument("--workdir", default=None, help="Directory of the runs (default: a new temporary one).")
    parser.add_argument("--parity_records", default=None, help="Plot these tfmp-parity --json_out records instead.")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    workdir = args.workdir or tempfile.mkdtemp(prefix="tfmp_docs_figures_")
    os.makedirs(workdir, exist_ok=True)
    makers = {
        "tensorboard": lambda: make_tensorboard(os.path.join(workdir, "tensorboard"), args.out),
        "benchmark": lambda: make_benchmark(workdir, args.out),
        "parity": lambda: make_parity(workdir, args.out, args.parity_records),
    }
    for name in args.only or FIGURES:
        print(f"{name}: {makers[name]()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
