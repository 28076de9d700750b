"""Remakes the documentation's figures (docs/images/*.png) from small real runs and recorded results.

    python tools/docs_figures.py                      # all four figures
    python tools/docs_figures.py --only=tensorboard   # one of tensorboard, benchmark, memory, parity
    python tools/docs_figures.py --only=parity --parity_records=parity.json

Run on demand, not in CI (minutes each on a CPU, the memory figure's emulated 16-bit rows about
10 on a 2-core AVX2-only one; the TensorBoard figure needs
`tensorboard` and a Chromium on the PATH). Each figure comes from tfmp's own
console scripts run on this machine:

- tensorboard: two classifier runs on the embedded digits (float32, and
  mixed_float16 with dynamic loss scaling, whose first steps overflow and are
  skipped), shown by TensorBoard itself (headless Chromium screenshot of the
  loss, `loss_scale` and `skipped_steps` curves);
- benchmark: `tfmp-benchmark --plot_out` on the GAN, the chart the benchmark
  writes;
- memory: the same chart from a small benchmark of the GAN and MobileNetV2
  (batch 32, float32, mixed_bfloat16 and mixed_float16, each row in its own
  process with TensorFlow's BFC allocator), whose rows carry the allocator's
  peak and step memory;
- parity: plotted by `plot_parity` (each arm's accuracy gap to float32 with its
  95% interval, against the +-1-point band) from the k-fold sweep recorded in
  docs/NUMERICS.md's table of the figures in full (`recorded_sweep`), or from
  `tfmp-parity --json_out` records (`--parity_records`).

The figures are what these runs measured; the pages that show them name this
command and say how small the runs are.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from tfmp.run import parity, reporting

__all__ = [
    "FIGURES",
    "TENSORBOARD_TAGS",
    "ArmGap",
    "gaps_of_records",
    "load_parity_records",
    "main",
    "plot_parity",
    "recorded_sweep",
    "tensorboard_url",
]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGES = os.path.join(REPO, "docs", "images")
NUMERICS = os.path.join(REPO, "docs", "NUMERICS.md")
FIGURES = ("tensorboard", "benchmark", "memory", "parity")
# The curves a user checks first under mixed_float16 (the train/ sub-run's per-step tags).
TENSORBOARD_TAGS = ("batch_loss", "batch_loss_scale", "batch_skipped_steps")
# Parity is claimed when the whole 95% interval lies within this many points of float32.
PARITY_BAND = 1.0

TENSORBOARD_RUNS = (
    ("float32", ["--precision=float32"]),
    ("mixed_float16", ["--precision=mixed_float16", "--loss_scale=dynamic"]),
)
# The header of docs/NUMERICS.md's table of the recorded sweep ("The figures in full").
SWEEP_TABLE_HEADER = "| arm | units | accuracy gap | SD per unit | standard error | 95% interval |"
# The AVX2-only CPU class's figure in docs/PERFORMANCE.md (16-bit types emulated: bfloat16 left out, it is slow there).
BENCHMARK_FLAGS = [
    "--models=gan",
    "--precisions=float32,mixed_float16",
    "--batch_sizes=256",
    "--xla=false",
    "--steps=5",
    "--repeats=2",
]
# Memory per precision: small batches so that the emulated 16-bit steps of an AVX2-only CPU take seconds.
MEMORY_FLAGS = [
    "--models=gan,mobilenet_v2",
    "--precisions=float32,mixed_bfloat16,mixed_float16",
    "--batch_sizes=32",
    "--xla=false",
    "--warmup_steps=1",
    "--steps=3",
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


def _benchmark_chart(name: str, flags: Sequence[str], workdir: str, out: str) -> str:
    """Runs `tfmp-benchmark` with `flags`; its own chart (`--plot_out`) is the figure `<name>.png`. Returns the path."""
    path = os.path.join(out, f"{name}.png")
    records = os.path.join(workdir, f"{name}.json")
    _script("benchmark", [*flags, f"--json_out={records}", f"--plot_out={path}"])
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


def recorded_sweep(path: str = NUMERICS) -> list[ArmGap]:
    """The arms of the k-fold sweep recorded in docs/NUMERICS.md's table of the figures in full.

    Reads the table whose header starts with `SWEEP_TABLE_HEADER`: per arm its
    units, mean accuracy gap and 95% interval (`-1.04..+0.55`); the arm's
    markdown emphasis and code marks are dropped.

    Raises:
        ValueError: when `path` has no such table, or a row of it does not parse.
    """
    with open(path) as f:
        lines = f.read().splitlines()
    try:
        first = next(i for i, line in enumerate(lines) if line.startswith(SWEEP_TABLE_HEADER)) + 2
    except StopIteration:
        raise ValueError(f"{path} has no table starting with {SWEEP_TABLE_HEADER!r}.") from None
    gaps = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        interval = re.fullmatch(r"([-+]?[\d.]+)\.\.([-+]?[\d.]+)", cells[5]) if len(cells) > 5 else None
        if interval is None:
            raise ValueError(f"{path}: a row of the sweep's table does not parse. Received: {line!r}")
        arm = re.sub(r"[*`]", "", cells[0])
        gaps.append(ArmGap(arm, int(cells[1]), float(cells[2]), float(interval[1]), float(interval[2])))
    if not gaps:
        raise ValueError(f"{path}: the sweep's table has no rows.")
    return gaps


def plot_parity(gaps: Sequence[ArmGap], path: str, title: str | None = None) -> str:
    """Writes a PNG of each arm's accuracy gap to float32 with its 95% interval, against the +-1-point band.

    One row per arm (float32 is the reference at 0), top to bottom in the
    given order; a dot at the mean paired gap, a bar over its 95% interval,
    the label `mean (low..high), n units`, and the band where parity is
    claimed shaded. An interval wholly inside the band is drawn green, one
    that crosses it orange.

    Args:
        gaps: The arms, e.g. `recorded_sweep()` or `gaps_of_records(records)`.
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
    figure = Figure(figsize=(8, 2.2 + 0.6 * len(gaps)), layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.subplots()
    ax.axvspan(-PARITY_BAND, PARITY_BAND, color="tab:green", alpha=0.12, label=f"±{PARITY_BAND:g} point")
    ax.axvline(0, color="black", linewidth=0.8)
    widest = PARITY_BAND
    for y, gap in enumerate(reversed(gaps)):
        color = "tab:blue"
        if not math.isnan(gap.low):
            inside = -PARITY_BAND <= gap.low and gap.high <= PARITY_BAND
            color = "tab:green" if inside else "tab:orange"
            ax.errorbar([gap.mean], [y], xerr=[[gap.mean - gap.low], [gap.high - gap.mean]], color=color, capsize=6)
            widest = max(widest, abs(gap.low), abs(gap.high))
            label = f"{gap.mean:+.2f} ({gap.low:+.2f}..{gap.high:+.2f}), {gap.units} units"
        else:
            label = f"{gap.mean:+.2f}, {gap.units} unit (no interval)"
        widest = max(widest, abs(gap.mean))
        ax.plot([gap.mean], [y], "o", color=color)
        ax.annotate(
            label,
            (gap.mean, y),
            xytext=(0, 7),
            textcoords="offset points",
            ha="center",
            fontsize=8,
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1},
        )
    ax.set_xlim(-1.25 * widest, 1.25 * widest)
    ax.set_ylim(-0.6, len(gaps) - 0.3)
    ax.set_yticks(range(len(gaps)))
    ax.set_yticklabels([g.arm for g in reversed(gaps)])
    ax.set_xlabel(
        "validation accuracy gap to float32 (points)\n"
        "dot: mean paired gap; bar: its 95% interval (green: inside the band, orange: crosses it)"
    )
    ax.legend(loc="lower right", fontsize=8)
    units = max(g.units for g in gaps)
    ax.set_title(title or f"Accuracy gap to float32 per arm (up to {units} paired units)", fontsize=10)
    figure.savefig(path, format="png", dpi=120, bbox_inches="tight", pad_inches=0.1)
    return path


def make_parity(out: str, records_path: str | None = None) -> str:
    """Plots `records_path`'s parity records, or the sweep recorded in docs/NUMERICS.md; returns the PNG path."""
    path = os.path.join(out, "parity.png")
    if records_path is not None:
        gaps = gaps_of_records(load_parity_records(records_path))
        return plot_parity(gaps, path, title=f"tfmp-parity --json_out={records_path}")
    title = (
        "The k-fold sweep of docs/NUMERICS.md (MobileNetV2 alpha 0.35, embedded digits, 12 epochs)\n"
        "2-core AVX512-BF16 CPU; accuracy gap to float32 per arm"
    )
    return plot_parity(recorded_sweep(), path, title=title)


def main(argv: Sequence[str] | None = None) -> int:
    """Parses the arguments, remakes the chosen figures and prints their paths."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", choices=FIGURES, action="append", help="A figure to remake (repeatable; default: all)."
    )
    parser.add_argument("--out", default=IMAGES, help="Directory of the PNGs (default: docs/images).")
    parser.add_argument("--workdir", default=None, help="Directory of the runs (default: a new temporary one).")
    parser.add_argument(
        "--parity_records", default=None, help="Plot these tfmp-parity --json_out records instead of NUMERICS.md's."
    )
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    workdir = args.workdir or tempfile.mkdtemp(prefix="tfmp_docs_figures_")
    os.makedirs(workdir, exist_ok=True)
    makers = {
        "tensorboard": lambda: make_tensorboard(os.path.join(workdir, "tensorboard"), args.out),
        "benchmark": lambda: _benchmark_chart("benchmark", BENCHMARK_FLAGS, workdir, args.out),
        "memory": lambda: _benchmark_chart("memory", MEMORY_FLAGS, workdir, args.out),
        "parity": lambda: make_parity(args.out, args.parity_records),
    }
    for name in args.only or FIGURES:
        print(f"{name}: {makers[name]()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
