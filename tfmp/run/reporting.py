"""Presenting benchmark records: a markdown table, a JSON file, a PNG chart.

`Gap` summarises paired differences (mean, standard error, a 95% interval
from Student's t, `t_quantile`), as `tfmp.run.parity` reports them.

`markdown_table` and `write_json` take any records with a `to_json()` dict
(`tfmp.run.benchmark.Record`, `PipelineRecord`, `CeilingRecord` and
`ResidentRecord`; `write_json` also `tfmp.run.parity.ParityRecord`); `plot` draws `tfmp.run.benchmark.compare` records
and needs the optional matplotlib (`pip install matplotlib`, or `pip install -e ".[plot]"` in a clone).

This module presents records and imports none of the tools that make them:
what it reads of a record is the `JsonRecord` and `ThroughputRecord`
protocols, so the benchmark and parity modules sit above it.

```python
from tfmp.run import benchmark, reporting
records = benchmark.compare(benchmark.BenchmarkConfig(models=("gan",)))
print(reporting.markdown_table(records))
reporting.write_json(records, "bench.json")
reporting.plot(records, "bench.png")
```
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import os
import statistics
from collections.abc import Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

import tensorflow as tf

from tfmp import cpu_kernels

__all__ = [
    "Gap",
    "JsonRecord",
    "PLOT_INSTALL_HINT",
    "ThroughputRecord",
    "TimingSettings",
    "markdown_table",
    "plot",
    "require_matplotlib",
    "t_quantile",
    "write_json",
]

# tfmp is installed from a clone, not an index: the hint names the package, or the clone's extra.
PLOT_INSTALL_HINT = 'pip install matplotlib (in a clone of tfmp: pip install -e ".[plot]")'
# One colour per precision, in the order the bars of a group are drawn.
_PRECISION_COLORS = {"float32": "#4c72b0", "mixed_bfloat16": "#55a868", "mixed_float16": "#c44e52"}


class JsonRecord(Protocol):
    """A record that `markdown_table` and `write_json` present: one JSON-ready dict."""

    def to_json(self) -> dict[str, Any]:
        """The record as a dict of JSON values, its keys in column order."""


@runtime_checkable
class ThroughputRecord(Protocol):
    """A record that `plot` draws: one row of `tfmp.run.benchmark.compare` (a `tfmp.run.benchmark.Record`).

    Attributes:
        model: The model's name (one panel each).
        precision: `float32`, `mixed_bfloat16` or `mixed_float16` (one bar each).
        xla: Whether the step was compiled with XLA.
        batch_size: Examples per batch.
        images_per_sec: The median throughput (the bar's height).
        images_per_sec_min: The slowest round's throughput, or None.
        images_per_sec_max: The fastest round's throughput, or None.
        ratio_to_float32: The ratio to the float32 row's throughput, or None.
        ratio_to_hand_written: The ratio to the hand-written step's throughput, or None.
        unit: What the throughput counts (`img/s` or `ex/s`; the axis label).

    `plot` also draws `peak_mb`, `step_mb` and `step_ratio_to_float32` (the
    allocator's figures) in a row of memory panels where records have them.
    """

    model: str
    precision: str
    xla: bool
    batch_size: int
    images_per_sec: float
    images_per_sec_min: float | None
    images_per_sec_max: float | None
    ratio_to_float32: float | None
    ratio_to_hand_written: float | None
    unit: str


class TimingSettings(Protocol):
    """How the plotted records were timed (a `tfmp.run.benchmark.BenchmarkConfig`).

    Attributes:
        steps: Timed steps per round; None: chosen per row.
        repeats: Timed rounds; None: until `interval` or `time_budget`.
        warmup_steps: Untimed steps before timing.
        interval: The relative 95% interval a row is timed to, without `repeats`.
        time_budget: The seconds a row may time, without `repeats`.
    """

    steps: int | None
    repeats: int | None
    warmup_steps: int
    interval: float
    time_budget: float


def _span(values: Sequence[int]) -> str:
    """`4`, or `4-9` for several."""
    values = sorted(set(values))
    return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"


def _method(records: Sequence[Any], config: TimingSettings | None) -> str:
    """How the records were timed, in a few words, for the chart's title."""
    if config is None:
        return "steps and repeats not given"
    warm = f" ({config.warmup_steps} warm-up)"
    if config.steps and config.repeats:
        return f"median of {config.repeats} repeats x {config.steps} steps{warm}"
    rounds = [r.rounds for r in records if getattr(r, "rounds", None)]
    steps = [r.steps_per_round for r in records if getattr(r, "steps_per_round", None)]
    timed = f"median of {_span(rounds)} rounds x {_span(steps)} steps" if rounds and steps else "median of the rounds"
    return f"{timed}{warm}, each row to +-{100 * config.interval:g}% or {config.time_budget:g} s"


def _format(key: str, value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        three = "ratio" in key or key.endswith("_interval") or key in ("of_ceiling", "of_routed_ceiling")
        return f"{value:.3f}" if three else f"{value:.1f}"
    return str(value)


def markdown_table(records: Sequence[JsonRecord]) -> str:
    """A markdown table with one column per JSON key and one row per record.

    Keys whose values are lists or dicts (a ceiling record's `ops`) are left
    to the JSON.

    Ratios (keys naming a ratio, intervals, `of_ceiling` and
    `of_routed_ceiling`) print with three decimals, other floats with one,
    None as `n/a`.

    Raises:
        ValueError: for an empty list or records of different kinds.
    """
    if not records:
        raise ValueError(f"markdown_table needs at least one record. Received: records={records!r}")
    kinds = {type(r) for r in records}
    if len(kinds) > 1:
        raise ValueError(f"markdown_table needs records of one kind. Received: {sorted(k.__name__ for k in kinds)}")
    keys = [k for k, v in records[0].to_json().items() if not isinstance(v, (list, dict))]
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for record in records:
        row = record.to_json()
        lines.append("| " + " | ".join(_format(k, row[k]) for k in keys) + " |")
    return "\n".join(lines)


def write_json(records: Sequence[JsonRecord], path: str) -> None:
    """Writes the records as a JSON list of their `to_json()` dicts (indented, with a final newline)."""
    with open(path, "w") as f:
        json.dump([r.to_json() for r in records], f, indent=2)
        f.write("\n")


def require_matplotlib() -> None:
    """Raises ImportError naming the fix when the optional matplotlib is missing."""
    try:
        importlib.import_module("matplotlib")
    except ImportError as e:
        raise ImportError(
            f"Plotting needs matplotlib, an optional dependency of tfmp: {PLOT_INSTALL_HINT} "
            f"(or pip install matplotlib). ({e})"
        ) from None


def _device_name() -> str:
    import platform

    gpus = tf.config.list_physical_devices("GPU")
    names = sorted({tf.config.experimental.get_device_details(g).get("device_name", "GPU") for g in gpus})
    if gpus:
        return f"{len(gpus)} x {' + '.join(names)}"
    machine = platform.processor() or platform.machine()
    kind = cpu_kernels.cpu_class()
    return f"CPU ({machine}, {kind}, {os.cpu_count()} cores)" if kind else f"CPU ({machine}, {os.cpu_count()} cores)"


def _has_memory(record: ThroughputRecord) -> bool:
    return getattr(record, "peak_mb", None) is not None and getattr(record, "step_mb", None) is not None


def _bar_groups(
    rows: Sequence[ThroughputRecord], precisions: Sequence[str]
) -> Iterator[tuple[ThroughputRecord, float, float, bool]]:
    """Yields (record, x, width, in the first group) per bar: a group per (XLA, batch), a bar per precision."""
    groups = list(dict.fromkeys((r.xla, r.batch_size) for r in rows))
    width = 0.8 / len(precisions)
    for j, precision in enumerate(precisions):
        for i, group in enumerate(groups):
            match = [r for r in rows if (r.xla, r.batch_size) == group and r.precision == precision]
            if match:
                yield match[0], i + (j - (len(precisions) - 1) / 2) * width, width, i == 0


def _group_axis(ax: Any, rows: Sequence[ThroughputRecord], title: str, ylabel: str, legend: bool = True) -> None:
    groups = list(dict.fromkeys((r.xla, r.batch_size) for r in rows))
    ax.set_xlim(-0.6, len(groups) - 0.4)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"xla={str(x).lower()}\nbatch {b}" for x, b in groups])
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.margins(y=0.3)
    if legend:
        ax.legend(fontsize=8)


def _throughput_panel(ax: Any, model: str, rows: Sequence[ThroughputRecord], precisions: Sequence[str]) -> None:
    for r, x, width, first in _bar_groups(rows, precisions):
        spread = None
        if r.images_per_sec_min is not None and r.images_per_sec_max is not None:
            spread = [[r.images_per_sec - r.images_per_sec_min], [r.images_per_sec_max - r.images_per_sec]]
        ax.bar(
            x,
            r.images_per_sec,
            width,
            color=_PRECISION_COLORS[r.precision],
            yerr=spread,
            capsize=2,
            error_kw={"elinewidth": 0.8},
            label=r.precision if first else None,
        )
        top = r.images_per_sec if r.images_per_sec_max is None else r.images_per_sec_max
        label = f"{r.images_per_sec:.0f}"
        if r.ratio_to_float32 is not None and r.precision != "float32":
            label += f"\n{r.ratio_to_float32:.2f}x float32"
        if r.ratio_to_hand_written is not None:
            label += f"\n{r.ratio_to_hand_written:.2f}x hand-written"
        if spread is not None:
            label += f"\n({r.images_per_sec_min:.0f}-{r.images_per_sec_max:.0f})"
        ax.annotate(label, (x, top), ha="center", va="bottom", fontsize=6)
    units = " or ".join(dict.fromkeys(r.unit for r in rows))
    _group_axis(ax, rows, model, f"{units} (tfmp trainer)")


def _memory_panel(ax: Any, model: str, rows: Sequence[ThroughputRecord], precisions: Sequence[str]) -> None:
    """One stacked bar per row: what stayed allocated between steps (light) under the step's own memory."""
    for r, x, width, _ in _bar_groups(rows, precisions):
        if not _has_memory(r):
            continue
        color = _PRECISION_COLORS[r.precision]
        resident = r.peak_mb - r.step_mb
        ax.bar(x, resident, width, color=color, alpha=0.35, hatch="//", edgecolor="white")
        ax.bar(x, r.step_mb, width, bottom=resident, color=color)
        label = f"peak {r.peak_mb:.0f}\nstep {r.step_mb:.0f} MiB"
        step_ratio = getattr(r, "step_ratio_to_float32", None)
        if step_ratio is not None and r.precision != "float32":
            label += f"\nstep {step_ratio:.2f}x float32's"
        ax.annotate(label, (x, r.peak_mb), ha="center", va="bottom", fontsize=6)
    # The throughput panel above holds the legend: the same colours, and the labels need the room.
    _group_axis(ax, rows, f"{model}: memory", "MiB (TensorFlow allocator)", legend=False)


def plot(
    records: Sequence[ThroughputRecord],
    path: str,
    config: TimingSettings | None = None,
    device: str | None = None,
) -> str:
    """Writes a PNG bar chart of the trainer's throughput (img/s or ex/s), and its memory, per model and precision.

    One panel per model (their scales differ); within a panel one group of
    bars per (XLA, batch size) and one bar per precision, labelled with its
    throughput, its ratio to float32 (`1.41x float32`) and its ratio to the
    hand-written step (`0.98x hand-written`). The title names the device and
    the method (median of `repeats` rounds of `steps` steps); each bar has a
    whisker from its slowest to its fastest round (records without the
    spread get none); a footnote says what the ratios and whiskers are.

    Where records carry the allocator's figures (`peak_mb` and `step_mb`), a
    second row of panels shows them per model: one stacked bar per precision,
    the step's own memory (`step_mb`) on top of what stayed allocated between
    steps (`peak_mb - step_mb`: weights, optimizer slots, the batch; hatched),
    labelled `peak 253 / step 205 MiB` and the step's ratio to float32
    (`step 0.66x float32's`).

    Args:
        records: `tfmp.run.benchmark.compare` records.
        path: The PNG file to write.
        config: The `tfmp.run.benchmark.BenchmarkConfig` the records were
            measured with, for the steps and repeats; None leaves them out.
        device: The device the records were measured on; None names the
            one this process sees (its GPUs, or the CPU).

    Returns:
        `path`.

    Raises:
        ImportError: without matplotlib, naming `PLOT_INSTALL_HINT`.
        ValueError: for no records, or records that are not compare's (that lack
            an attribute of `ThroughputRecord`).
    """
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not records or not all(isinstance(r, ThroughputRecord) for r in records):
        raise ValueError(f"plot needs compare() records. Received: records={records!r}")
    if device is None:
        device = _device_name()
    models = list(dict.fromkeys(r.model for r in records))
    precisions = [p for p in _PRECISION_COLORS if any(r.precision == p for r in records)]
    memory = any(_has_memory(r) for r in records)
    panels = 2 if memory else 1
    figure = Figure(figsize=(max(6.5, 4.5 * len(models) + 1), 5 + 3.8 * (panels - 1)), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(panels, len(models), squeeze=False)
    for k, model in enumerate(models):
        rows = [r for r in records if r.model == model]
        _throughput_panel(axes[0][k], model, rows, precisions)
        if memory:
            _memory_panel(axes[1][k], model, rows, precisions)
    method = _method(records, config)
    what = "throughput and memory" if memory else "throughput"
    figure.suptitle(f"tfmp trainer {what} by precision\n{device}; {method}", fontsize=10)
    # One short line each, so that the narrowest figure (one model) holds them; supxlabel, unlike a free
    # text, gets room from the constrained layout, and the tight box keeps whatever still sticks out.
    footnote = [
        "bar label: median throughput; whisker and (a-b): slowest to fastest round",
        "Nx float32 = throughput / float32's (same model, XLA, batch)",
        "Nx hand-written = tfmp trainer / a hand-written tf.function step",
        "(same model, precision, XLA, batch)",
    ]
    if memory:
        footnote += [
            "memory: TensorFlow allocator's peak during the timed steps (peak);",
            "step = that peak minus what was allocated before them (hatched: weights, slots, batch)",
        ]
    figure.supxlabel("\n".join(footnote), fontsize=7)
    figure.savefig(path, format="png", dpi=120, bbox_inches="tight", pad_inches=0.1)
    return path


def t_quantile(confidence: float, df: int) -> float:
    """The two-sided `confidence` quantile of Student's t with `df` (integer >= 1) degrees of freedom.

    `P(|T| <= t) = confidence`, from the distribution's closed form for an
    integer `df` (Abramowitz and Stegun 26.7.3-4) by bisection; e.g.
    `t_quantile(0.95, 4)` is 2.776.
    """
    if isinstance(df, bool) or not isinstance(df, int) or df < 1:
        raise ValueError(f"df must be an integer >= 1. Received: df={df!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1). Received: confidence={confidence!r}")

    def inside(t: float) -> float:  # P(|T| <= t)
        theta = math.atan(t / math.sqrt(df))
        c2, term, total = math.cos(theta) ** 2, 1.0, 1.0
        if df % 2:
            if df == 1:
                return 2 * theta / math.pi
            for k in range(1, (df - 1) // 2):
                term *= c2 * (2 * k) / (2 * k + 1)
                total += term
            return 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)
        for k in range(1, df // 2):
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        return math.sin(theta) * total

    low, high = 0.0, 1.0
    while inside(high) < confidence:
        high *= 2
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if inside(mid) < confidence else (low, mid)
    return (low + high) / 2


@dataclasses.dataclass(frozen=True)
class Gap:
    """Paired differences of one metric over the units, and their summary.

    Attributes:
        differences: Per unit, the arm's value minus float32's.
        mean: Mean of `differences`.
        std: Sample standard deviation of `differences` (nan for one unit).
        stderr: Standard error of `mean` (`std / sqrt(n)`).
        interval: The 95% interval of the mean (Student's t, n - 1 degrees
            of freedom); `(nan, nan)` for one unit.
        min, max: Smallest and largest difference.
    """

    differences: tuple[float, ...]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.differences)

    @property
    def std(self) -> float:
        return statistics.stdev(self.differences) if len(self.differences) > 1 else math.nan

    @property
    def stderr(self) -> float:
        return self.std / math.sqrt(len(self.differences))

    @property
    def interval(self) -> tuple[float, float]:
        if len(self.differences) < 2:
            return (math.nan, math.nan)
        half = t_quantile(0.95, len(self.differences) - 1) * self.stderr
        return (self.mean - half, self.mean + half)

    @property
    def min(self) -> float:
        return min(self.differences)

    @property
    def max(self) -> float:
        return max(self.differences)
