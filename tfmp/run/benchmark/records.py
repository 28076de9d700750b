"""The benchmark's results: one record per measured row, ready for JSON.

`Record` is a row of the `compare` mode, `PipelineRecord` one of the
`input_pipeline` mode, `ResidentRecord` one of the `resident` mode;
`tfmp.run.reporting` presents each.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["PipelineRecord", "Record", "ResidentRecord"]


@dataclasses.dataclass
class Record:
    """One row of the `compare` mode.

    Attributes:
        model: The model's name.
        precision: `float32`, `mixed_bfloat16` or `mixed_float16`.
        xla: Whether the step was compiled with XLA (`jit_compile`).
        batch_size: Examples per batch.
        images_per_sec: The tfmp trainer's throughput, median over the
            rounds of every run, in `unit` (the name is kept for every model).
        images_per_sec_min: The slowest round's throughput (the spread's
            low end).
        images_per_sec_max: The fastest round's throughput.
        unit: What the throughput counts: `img/s`, or `ex/s` for a model
            that does not take images (`tfmp.run.tasks.Task.example_unit`).
        step_ms: Milliseconds per step at that throughput.
        ratio_to_float32: The trainer's median throughput over that of the
            float32 row of the same model, XLA setting and batch size in the
            same run, the median over the runs; None without such a row.
        ratio_to_hand_written: The trainer's throughput over the hand-written
            step's in the same round (a paired ratio), the median over a
            run's rounds, then the median over the runs; None for a task
            without a hand-written step (`Task.hand_written_step`).
        ratio_to_float32_min, ratio_to_float32_max: The lowest and highest
            run's `ratio_to_float32` (equal to it for one run).
        ratio_to_hand_written_min, ratio_to_hand_written_max: The lowest and
            highest run's `ratio_to_hand_written`.
        runs: How many runs the figures come from (`BenchmarkConfig.runs`).
        steps_per_round: Timed steps per path in each round (`BenchmarkConfig.steps`,
            or chosen so a round lasts about `round_seconds`).
        rounds: Timed rounds, over all runs: each path ran `rounds * steps_per_round` timed steps.
        images_per_sec_interval: The relative half-width of the 95% interval of
            the trainer's throughput over the rounds (0.02: +-2%), the widest
            run's; None for a single round.
        ratio_to_float32_interval: That of `ratio_to_float32`, from the two
            rows' throughput intervals (rows are not paired, so they add in
            quadrature); None for the float32 row itself or a single round.
        ratio_to_hand_written_interval: That of the paired ratio to the
            hand-written step (what a row timed to an interval stops on), the
            widest run's; None without a hand-written step or for a single round.
        peak_host_mb: Peak resident memory of the process during the row
            (MiB; "Memory" in [How the benchmark measures](../../guides/benchmark-methodology.md)
            says what it includes).
        peak_gpu_mb: Peak GPU memory during the row (MiB), None without a GPU.
        allocator: Which allocator `peak_mb` and `step_mb` read: `"GPU:0"`,
            `"CPU:0 BFC"` (TensorFlow's BFC allocator, switched on in the
            row's own process), or None where none could be read (a CPU
            without the BFC allocator).
        peak_mb: The allocator's peak during the trainer's timed steps
            (MiB), the highest over the runs: what TensorFlow allocated for
            tensors, without the runtime the RSS includes.
        step_mb: That peak minus what the allocator held before the steps
            (MiB): the step's activations, gradients and workspaces, without
            the weights, optimizer slots and batch resident between steps.
        peak_ratio_to_float32: `peak_mb` over the float32 row's (same model,
            XLA setting and batch size); None without one.
        step_ratio_to_float32: `step_mb` over the float32 row's.
        ratio_to_plain_fit: The trainer's throughput over plain Keras
            `fit()`'s in the same round (its network compiled by Keras's own
            `compile()`, `tfmp.run.baseline.plain_fit_model`), paired and
            taken as `ratio_to_hand_written` is; None for a GAN.
        ops_per_step: Ops the trainer's step executes (`tfmp.run.benchmark.launches`:
            kernels on a GPU); what a step costs a GPU's host in launches.
            None for an XLA row on a CPU, whose profile shows the compiled
            step as one call.
        hand_written_ops_per_step: The same for the hand-written step.
        plain_fit_ops_per_step: The same for plain `fit()`.
        host_reads_per_step: Copies of tensor values to the host per step of
            the trainer as `fit()` runs it (each waits for the device on a GPU).
        hand_written_host_reads_per_step: The same for the hand-written step.
        plain_fit_host_reads_per_step: The same for plain `fit()`.
    """

    model: str
    precision: str
    xla: bool
    batch_size: int
    images_per_sec: float
    step_ms: float
    ratio_to_float32: float | None
    ratio_to_hand_written: float | None
    peak_host_mb: float
    peak_gpu_mb: float | None
    images_per_sec_min: float | None = None
    images_per_sec_max: float | None = None
    ratio_to_float32_min: float | None = None
    ratio_to_float32_max: float | None = None
    ratio_to_hand_written_min: float | None = None
    ratio_to_hand_written_max: float | None = None
    runs: int = 1
    unit: str = "img/s"
    allocator: str | None = None
    peak_mb: float | None = None
    step_mb: float | None = None
    peak_ratio_to_float32: float | None = None
    step_ratio_to_float32: float | None = None
    ratio_to_plain_fit: float | None = None
    ops_per_step: float | None = None
    hand_written_ops_per_step: float | None = None
    plain_fit_ops_per_step: float | None = None
    host_reads_per_step: float | None = None
    hand_written_host_reads_per_step: float | None = None
    plain_fit_host_reads_per_step: float | None = None
    steps_per_round: int | None = None
    rounds: int | None = None
    images_per_sec_interval: float | None = None
    ratio_to_float32_interval: float | None = None
    ratio_to_hand_written_interval: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON-ready dict, one key per attribute (each spread and interval after its median, the
        unit after the throughput's, the timed steps after the runs, the allocator's figures after the resident
        set's, the per-step launch counts after the ratio to plain `fit()`)."""
        row = dataclasses.asdict(self)
        memory = ["allocator", "peak_mb", "step_mb", "peak_ratio_to_float32", "step_ratio_to_float32"]
        launch = [k for k in row if k.endswith("_per_step")]
        timed = ["steps_per_round", "rounds"]
        spreads = ("_min", "_max", "_interval")
        keys = [k for k in row if not k.endswith(spreads) and k != "unit" and k not in memory + launch + timed]
        for median in ("images_per_sec", "ratio_to_float32", "ratio_to_hand_written"):
            at = keys.index(median) + 1
            keys[at:at] = [median + end for end in spreads] + (["unit"] if median == "images_per_sec" else [])
        at = keys.index("runs") + 1
        keys[at:at] = timed
        at = keys.index("peak_gpu_mb") + 1
        keys[at:at] = memory
        at = keys.index("ratio_to_plain_fit") + 1
        keys[at:at] = launch
        return {k: row[k] for k in keys}


@dataclasses.dataclass
class PipelineRecord:
    """One row of the `input_pipeline` mode.

    Attributes:
        model: The model's name.
        dataset: The real dataset fed through `tfmp.run.data.make_dataset`.
        precision: The precision.
        xla: Whether the step was compiled with XLA.
        batch_size: Examples per batch.
        pipeline_images_per_sec: The trainer's throughput fed by the real
            pipeline (median over repeats; partial batches count their real
            size).
        synthetic_images_per_sec: The same trainer fed by in-memory tensors of
            the same shape.
        ratio: `pipeline_images_per_sec / synthetic_images_per_sec`; 1.0 means
            the pipeline costs nothing (the target is >= 0.95).
        unit: What both throughputs count: `img/s`, or `ex/s` for a model
            that does not take images.
    """

    model: str
    dataset: str
    precision: str
    xla: bool
    batch_size: int
    pipeline_images_per_sec: float
    synthetic_images_per_sec: float
    ratio: float
    unit: str = "img/s"

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON-ready dict, one key per attribute (the unit after the two throughputs)."""
        row = dataclasses.asdict(self)
        keys = [k for k in row if k != "unit"]
        keys.insert(keys.index("synthetic_images_per_sec") + 1, "unit")
        return {k: row[k] for k in keys}


@dataclasses.dataclass
class ResidentRecord:
    """One row of the `resident` mode: the memory a row takes, and what it leaves behind in its process.

    All figures are the resident set size (RSS) of the one process that
    measures every row, in MiB ("Memory" in
    [How the benchmark measures](../../guides/benchmark-methodology.md)).

    Attributes:
        model: The model's name.
        precision: The precision.
        xla: Whether the step was compiled with XLA.
        batch_size: Examples per batch.
        run: Which run the row belongs to, from 1 (`BenchmarkConfig.runs`).
        peak_host_mb: The peak RSS during the row, measured as the `compare`
            mode measures it; it includes what earlier rows left.
        resident_mb: The RSS once the row has returned and Python has
            collected its objects: what the next row starts from.
        retained_mb: The RSS after, in addition,
            `keras.backend.clear_session()` and glibc's `malloc_trim(0)`:
            what nothing in the process gives back.
        left_behind_mb: `retained_mb` minus the same figure before the row:
            the memory this row added for good. Near zero when the rows
            leave nothing; the first row's includes what TensorFlow sets up
            once per process.
    """

    model: str
    precision: str
    xla: bool
    batch_size: int
    run: int
    peak_host_mb: float
    resident_mb: float
    retained_mb: float
    left_behind_mb: float

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON-ready dict, one key per attribute."""
        return dataclasses.asdict(self)
