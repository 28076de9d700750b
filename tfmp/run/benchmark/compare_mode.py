"""The benchmark's `compare` mode: the trainer against float32, a hand-written step and plain `fit()`.

Each row is timed round after round, the paths interleaved, until its paired
ratio is known to the config's interval or its time budget is spent;
docs/guides/benchmark-methodology.md says how a row is measured.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import statistics
import time
from collections.abc import Callable, Mapping
from concurrent.futures.process import BrokenProcessPool

import keras
import tensorflow as tf

from tfmp import precision as precision_lib
from tfmp.run import tasks
from tfmp.run.benchmark import launches, rows
from tfmp.run.benchmark.benchmark_config import BenchmarkConfig, canonical_models
from tfmp.run.benchmark.drivers import (
    Driver,
    StopRule,
    fit_driver,
    hand_written_driver,
    relative_interval,
    steps_per_round,
    time_rounds,
    trainer_driver,
)
from tfmp.run.benchmark.progress import Progress, remaining_estimate
from tfmp.run.benchmark.records import Record
from tfmp.run.memory_meters import AllocatorMemory, GpuPeakMemory, HostPeakMemory, cpu_bfc_environment

__all__ = ["compare", "measure_row"]

# Steps per path of the launch count when --steps is unset: per-step counts, the same every step.
_LAUNCH_STEPS = 5


def _kept(float32_layers: int) -> str:
    return f", {float32_layers} float32 layers" if float32_layers else ""


@dataclasses.dataclass
class _RowRun:
    """One run of one `compare` row: the rounds' throughputs of each path, paired by position, and what each executes.

    `ops` and `reads` are per step, by path (`"trainer"`, `"hand_written"`,
    `"plain_fit"`): the ops executed and the host reads (`launches`).
    `steps` and `rounds` say how long the row was timed, `launch_seconds`
    what counting the launches cost (None when they were not counted).
    """

    trainer: list[float]
    hand_written: list[float]
    images_per_step: int
    float32_layers: int
    peak_host_mb: float
    peak_gpu_mb: float | None
    allocator: str | None = None
    peak_mb: float | None = None
    step_mb: float | None = None
    plain_fit: list[float] = dataclasses.field(default_factory=list)
    ops: dict[str, float] = dataclasses.field(default_factory=dict)
    reads: dict[str, float] = dataclasses.field(default_factory=dict)
    steps: int = 0
    rounds: int = 0
    launch_seconds: float | None = None

    @staticmethod
    def _paired(trainer: list[float], other: list[float]) -> float | None:
        if not other:
            return None
        return statistics.median(t / o for t, o in zip(trainer, other))

    @property
    def paired_ratio(self) -> float | None:
        """The median over the rounds of the trainer's throughput over the hand-written step's in that round.

        None when the task has no hand-written step.
        """
        return self._paired(self.trainer, self.hand_written)

    @property
    def plain_fit_ratio(self) -> float | None:
        """The same paired ratio against plain Keras `fit()`; None for a task without one (a GAN)."""
        return self._paired(self.trainer, self.plain_fit)

    @property
    def ratio_interval(self) -> float | None:
        """The relative half-width of the paired ratio's 95% interval (`drivers.relative_interval`)."""
        if not self.hand_written:
            return None
        return relative_interval([t / h for t, h in zip(self.trainer, self.hand_written)])

    @property
    def throughput_interval(self) -> float | None:
        """The relative half-width of the trainer's throughput's 95% interval."""
        return relative_interval(self.trainer)


def _count_launches(
    drivers: Mapping[str, Driver],
    models: Mapping[str, keras.Model],
    dataset: tf.data.Dataset,
    steps: int,
    count_ops: bool = True,
) -> tuple[dict[str, float], dict[str, float]]:
    """(ops executed per step, host reads per step) of each path, after its timed rounds.

    The reads of a path that is a Keras model (`models`) are those of its
    `fit()`, where Keras reads the logs; the hand-written step's, those of
    its driver. Without `count_ops` no op is counted (and no profile taken).
    """
    ops = {path: launches.executed_ops(driver.run, steps) for path, driver in drivers.items()} if count_ops else {}
    reads = {
        path: launches.fit_host_reads(models[path], dataset, steps)
        if path in models
        else launches.host_reads(driver.run, steps)
        for path, driver in drivers.items()
    }
    return ops, reads


def _stop_rule(config: BenchmarkConfig) -> StopRule:
    """The config's rounds: `repeats` of them, or until `interval` or `time_budget`."""
    return StopRule(config.repeats, config.interval, config.time_budget)


def _counts_launches(config: BenchmarkConfig) -> bool:
    """`count_launches`, unset meaning on with a GPU only."""
    if config.count_launches is None:
        return bool(tf.config.list_physical_devices("GPU"))
    return config.count_launches


def measure_row(
    spec: tasks.Task,
    precision: str,
    xla: bool,
    batch_size: int,
    config: BenchmarkConfig,
    progress: Progress | None = None,
) -> _RowRun:
    """Builds and times one row once; everything it builds is local, so it can be freed once this returns.

    `progress` (a row's `Progress`) hears each phase and round; None is silent.
    """
    gc.collect()  # free the previous row before measuring this one's memory
    allocator = AllocatorMemory.of_this_process()
    phase = progress.phase if progress is not None else lambda text: None
    rule = _stop_rule(config)
    with HostPeakMemory() as host, GpuPeakMemory() as gpu:
        with precision_lib.precision_scope(precision), precision_lib.tf32_scope(config.tf32):
            keras.utils.set_random_seed(config.seed)
            phase("building")
            workload = rows.build(spec, precision, xla, batch_size, config)
            dataset = tf.data.Dataset.from_tensors(workload.batch).repeat()
            phase(f"tracing and warm-up ({config.warmup_steps} steps per path)")
            trainer = trainer_driver(
                workload, dataset, (batch_size,), config.warmup_steps, first_fit=True, allocator=allocator
            )
            drivers = {"trainer": trainer}
            if workload.hand_written_step is not None:
                drivers["hand_written"] = hand_written_driver(workload, dataset, config.warmup_steps)
            if workload.plain_fit is not None:
                drivers["plain_fit"] = fit_driver(workload.plain_fit, dataset, (batch_size,), config.warmup_steps)
            steps = config.steps or steps_per_round(list(drivers.values()), config.round_seconds)

            def on_round(rounds: int, width: float | None, elapsed: float) -> None:
                if progress is not None:
                    progress.timing(rounds, steps, rule.eta(rounds, width, elapsed), width, config.repeats)

            rounds = time_rounds(list(drivers.values()), steps, rule, on_round)
            ops, reads, launch_seconds = {}, {}, None
            if _counts_launches(config):
                phase("counting launches")
                start = time.perf_counter()
                models = {"trainer": workload.trainer, "plain_fit": workload.plain_fit}
                # A CPU's profile shows a compiled step as one call, not its kernels: no op count there.
                count_ops = not xla or bool(tf.config.list_physical_devices("GPU"))
                ops, reads = _count_launches(
                    drivers,
                    {k: v for k, v in models.items() if v is not None},
                    dataset,
                    config.steps or _LAUNCH_STEPS,
                    count_ops,
                )
                launch_seconds = time.perf_counter() - start
    return _RowRun(
        trainer.images_per_sec,
        drivers["hand_written"].images_per_sec if "hand_written" in drivers else [],
        workload.images_per_step,
        len(workload.float32_layers),
        host.peak_mb,
        gpu.peak_mb,
        None if allocator is None else allocator.name,
        trainer.peak_mb,
        trainer.step_mb,
        drivers["plain_fit"].images_per_sec if "plain_fit" in drivers else [],
        ops,
        reads,
        steps,
        rounds,
        launch_seconds,
    )


def _measure_row_in_own_process(
    spec: tasks.Task,
    precision: str,
    xla: bool,
    batch_size: int,
    config: BenchmarkConfig,
    progress: Progress | None = None,
) -> _RowRun:
    """`measure_row` in a process of its own; a RuntimeError naming the row if that process dies."""
    environment = cpu_bfc_environment() if config.cpu_bfc else {}
    try:
        with rows.environment(environment):
            if progress is not None:
                progress.phase("starting its process")
            return rows.in_fresh_process(measure_row, spec, precision, xla, batch_size, config, progress)
    except BrokenProcessPool as e:
        raise RuntimeError(
            f"The process measuring {rows.label(spec, precision, xla, batch_size)} died before it "
            "returned: killed (perhaps for lack of memory: try a smaller batch size), or started "
            "from a script without an `if __name__ == '__main__':` guard, which the fresh process "
            "imports again. isolate=False measures in this process."
        ) from e


def _spread(values: list[float]) -> tuple[float, float, float]:
    """(median, min, max)."""
    return statistics.median(values), min(values), max(values)


def _record(spec: tasks.Task, precision: str, xla: bool, batch_size: int, runs: list[_RowRun]) -> Record:
    """One row's record from its runs (ratio_to_float32 is filled in by `compare`)."""
    rounds = [v for run in runs for v in run.trainer]
    images_per_sec, slowest, fastest = _spread(rounds)
    paired = [run.paired_ratio for run in runs if run.paired_ratio is not None]
    hand_written, hand_written_min, hand_written_max = _spread(paired) if paired else (None, None, None)
    peak_gpu = [run.peak_gpu_mb for run in runs if run.peak_gpu_mb is not None]
    peak = [run.peak_mb for run in runs if run.peak_mb is not None]
    step = [run.step_mb for run in runs if run.step_mb is not None]
    plain = [run.plain_fit_ratio for run in runs if run.plain_fit_ratio is not None]

    def per_step(kind: str, path: str) -> float | None:
        counts = [getattr(run, kind)[path] for run in runs if path in getattr(run, kind)]
        return statistics.median(counts) if counts else None

    def widest(name: str) -> float | None:
        widths = [getattr(run, name) for run in runs if getattr(run, name) is not None]
        return max(widths) if widths else None

    return Record(
        model=spec.name,
        precision=precision,
        xla=xla,
        batch_size=batch_size,
        images_per_sec=images_per_sec,
        step_ms=1000.0 * runs[0].images_per_step / images_per_sec,
        ratio_to_float32=None,
        ratio_to_hand_written=hand_written,
        peak_host_mb=max(run.peak_host_mb for run in runs),
        peak_gpu_mb=max(peak_gpu) if peak_gpu else None,
        images_per_sec_min=slowest,
        images_per_sec_max=fastest,
        ratio_to_hand_written_min=hand_written_min,
        ratio_to_hand_written_max=hand_written_max,
        runs=len(runs),
        unit=rows.unit(spec),
        allocator=runs[0].allocator,
        peak_mb=max(peak) if peak else None,
        step_mb=max(step) if step else None,
        ratio_to_plain_fit=statistics.median(plain) if plain else None,
        ops_per_step=per_step("ops", "trainer"),
        hand_written_ops_per_step=per_step("ops", "hand_written"),
        plain_fit_ops_per_step=per_step("ops", "plain_fit"),
        host_reads_per_step=per_step("reads", "trainer"),
        hand_written_host_reads_per_step=per_step("reads", "hand_written"),
        plain_fit_host_reads_per_step=per_step("reads", "plain_fit"),
        steps_per_round=runs[0].steps,
        rounds=sum(run.rounds for run in runs),
        images_per_sec_interval=widest("throughput_interval"),
        ratio_to_hand_written_interval=widest("ratio_interval"),
    )


def compare(
    config: BenchmarkConfig,
    specs: Mapping[str, tasks.Task] | None = None,
    progress: Progress | Callable[[str], None] | None = None,
) -> list[Record]:
    """Measures the tfmp trainer against float32 and a hand-written step.

    One row per (model, batch size, XLA, precision), in that nesting order;
    see [How the benchmark measures](../../guides/benchmark-methodology.md) for the method.
    Precisions and XLA settings left unset are those a run here would choose
    among (`fit_to_machine`). Each row is timed round after round until its
    paired ratio's 95% interval is within `config.interval` or its
    `config.time_budget` is spent (or for `config.repeats` rounds, when set).
    With `config.runs` > 1 every row is measured once per run, run after run
    (all rows of run 1, then all rows of run 2, ...), and each ratio is the
    median over the runs with its min and max. With `config.isolate` (the
    default) each row of each run is built and measured in a process of its
    own, so its `peak_host_mb` holds that row alone; this process runs no
    TensorFlow op.

    Args:
        config: What to measure; validated first.
        specs: The models' `tfmp.run.tasks.Task`s by name; `default_specs(config.resnet_input_size)`
            when None.
        progress: A `Progress`: each row's phase, rounds and ETA while it
            runs, a line when it ends, and the whole run's estimate; or a
            callable taking the line of each measured row and run (e.g.
            print to stderr); silent when None.

    Returns:
        One `Record` per row.

    Raises:
        ValueError: for an invalid config, before any work, naming the value;
            with `config.isolate`, also for a task that does not pickle.
        RuntimeError: when a row's process dies without returning (for
            example killed for lack of memory), naming the row.
    """
    config, specs = rows.check_specs(config, specs, progress)
    if config.isolate:
        rows.check_picklable(specs, canonical_models(config.models, specs))
    measure = _measure_row_in_own_process if config.isolate else measure_row
    plan = list(rows.plan(config, specs))
    measured: list[list[_RowRun]] = [[] for _ in plan]
    seconds: list[tuple[str, float]] = []
    queue = [spec.name for _ in range(config.runs) for spec, *_ in plan]
    for run in range(config.runs):
        for (spec, batch_size, xla, precision), runs in zip(plan, measured):
            label = rows.label(spec, precision, xla, batch_size)
            of = f" (run {run + 1}/{config.runs})" if config.runs > 1 else ""
            live = progress.row(label + of) if isinstance(progress, Progress) else None
            start = time.perf_counter()
            row_run = measure(spec, precision, xla, batch_size, config, live)
            runs.append(row_run)
            seconds.append((queue.pop(0), time.perf_counter() - start))
            if progress is not None:
                line = _row_line(label + _kept(row_run.float32_layers) + of, spec, row_run, seconds[-1][1])
                if queue:
                    left = remaining_estimate(seconds, queue)
                    line += f"; about {_minutes(left)} for the {len(queue)} row(s) left"
                if live is not None:
                    live.done(line)
                else:
                    progress(line)
    records = [
        _record(spec, precision, xla, batch, runs) for (spec, batch, xla, precision), runs in zip(plan, measured)
    ]
    # Each run's ratio to its own float32 row, then the median over the runs.
    float32 = {(r.model, r.xla, r.batch_size): runs for r, runs in zip(records, measured) if r.precision == "float32"}
    for record, runs in zip(records, measured):
        reference = float32.get((record.model, record.xla, record.batch_size))
        if reference is not None:
            ratios = [statistics.median(a.trainer) / statistics.median(b.trainer) for a, b in zip(runs, reference)]
            record.ratio_to_float32, record.ratio_to_float32_min, record.ratio_to_float32_max = _spread(ratios)
    by_key = {(r.model, r.xla, r.batch_size): r for r in records if r.precision == "float32"}
    for record in records:
        reference = by_key.get((record.model, record.xla, record.batch_size))
        if reference is not None:
            record.peak_ratio_to_float32 = _ratio(record.peak_mb, reference.peak_mb)
            record.step_ratio_to_float32 = _ratio(record.step_mb, reference.step_mb)
            widths = (record.images_per_sec_interval, reference.images_per_sec_interval)
            if record is not reference and None not in widths:
                # Two rows are not paired: their throughputs' intervals add in quadrature.
                record.ratio_to_float32_interval = math.hypot(*widths)
    return records


def _row_line(label: str, spec: tasks.Task, row_run: _RowRun, seconds: float) -> str:
    """The line a measured row ends with: throughput, paired ratio and its interval, memory, timed steps, time."""
    width = row_run.ratio_interval
    hand = (
        f" (hand-written {statistics.median(row_run.hand_written):.1f}, paired ratio {row_run.paired_ratio:.3f}"
        + (f" +-{100 * width:.1f}%" if width is not None else "")
        + ")"
        if row_run.hand_written
        else " (no hand-written step)"
    )
    allocator = (
        f", allocator ({row_run.allocator}) peak {row_run.peak_mb:.0f} MB, step {row_run.step_mb:.0f} MB"
        if row_run.peak_mb is not None
        else ""
    )
    launches = f", launches counted in {row_run.launch_seconds:.0f} s" if row_run.launch_seconds is not None else ""
    return (
        f"{label}: {statistics.median(row_run.trainer):.1f} {rows.unit(spec)}{hand}, "
        f"peak RSS {row_run.peak_host_mb:.0f} MB{allocator}, {row_run.rounds} rounds x {row_run.steps} steps"
        f"{launches}, {seconds:.0f} s"
    )


def _minutes(seconds: float) -> str:
    """`40 s`, `3.5 min`."""
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def _ratio(value: float | None, reference: float | None) -> float | None:
    """`value / reference`, or None when either is missing or the reference is not positive."""
    if value is None or reference is None or reference <= 0:
        return None
    return value / reference
