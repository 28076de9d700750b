"""The benchmark's two modes: `compare` (trainer against float32 and a hand-written step) and `input_pipeline`.

Each runs one row per (model, batch size, XLA, precision), in that nesting
order, and returns one record per row; docs/guides/benchmark-methodology.md
says how a row is measured.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import gc
import multiprocessing
import os
import pickle
import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

import keras
import tensorflow as tf

from tfmp import precision as precision_lib
from tfmp.run import config as config_lib
from tfmp.run import task_loader, tasks
from tfmp.run.benchmark import launches
from tfmp.run.benchmark.benchmark_config import (
    BenchmarkConfig,
    canonical_models,
    canonical_precisions,
    dedupe,
    default_specs,
)
from tfmp.run.benchmark.drivers import Driver, fit_driver, hand_written_driver, interleave, trainer_driver
from tfmp.run.benchmark.records import PipelineRecord, Record
from tfmp.run.benchmark.repeated_pipeline import Pipeline, training_pipeline
from tfmp.run.benchmark.workload import Workload, build_workload
from tfmp.run.memory_meters import AllocatorMemory, GpuPeakMemory, HostPeakMemory, cpu_bfc_environment

__all__ = ["compare", "input_pipeline"]

_T = TypeVar("_T")


def _check_specs(config: BenchmarkConfig, specs: Mapping[str, tasks.Task] | None) -> Mapping[str, tasks.Task]:
    specs = default_specs(config.resnet_input_size) if specs is None else specs
    config.validate(valid_models=specs)
    return specs


def _rows(config: BenchmarkConfig, specs: Mapping[str, tasks.Task]) -> Iterator[tuple[tasks.Task, int, bool, str]]:
    """(spec, batch, xla, precision) in run order: precisions of a group adjacent."""
    for name in canonical_models(config.models, specs):
        spec = specs[name]
        for batch_size in dedupe(config.batch_sizes) or (spec.config.batch_size,):
            for xla in dedupe(config.xla):
                for precision in canonical_precisions(config.precisions):
                    yield spec, batch_size, xla, precision


def _label(spec: tasks.Task, precision: str, xla: bool, batch_size: int) -> str:
    return f"{spec.name} {precision} xla={str(xla).lower()} batch={batch_size}"


def _row_task(spec: tasks.Task, batch_size: int, config: BenchmarkConfig, **changes: Any) -> tasks.Task:
    """The model's task as one row runs it: the row's batch size and the benchmark's seed, float32 layers and TF32.

    One epoch as long as the row's steps, so that a learning-rate schedule
    runs over the measurement as it runs over a training run.
    """
    steps = config.warmup_steps + config.steps * config.repeats
    return spec.with_config(
        batch_size=batch_size,
        seed=config.seed,
        float32_layers=config.float32_layers,
        tf32=config.tf32,
        epochs=1,
        steps_per_epoch=steps,
        **changes,
    )


def _build(
    spec: tasks.Task, precision: str, xla: bool, batch_size: int, config: BenchmarkConfig, hand_written: bool = True
) -> Workload:
    """The row's workload, built by the model's task as training builds it."""
    task = _row_task(spec, batch_size, config)
    return build_workload(task, precision, xla, task.config.steps_per_epoch, hand_written=hand_written)


def _unit(spec: tasks.Task) -> str:
    """What the model's throughput counts, as printed: `img/s` or `ex/s`."""
    return f"{spec.example_unit}/s"


def _kept(float32_layers: int) -> str:
    return f", {float32_layers} float32 layers" if float32_layers else ""


@dataclasses.dataclass
class _RowRun:
    """One run of one `compare` row: the rounds' throughputs of each path, paired by position, and what each executes.

    `ops` and `reads` are per step, by path (`"trainer"`, `"hand_written"`,
    `"plain_fit"`): the ops executed and the host reads (`launches`).
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


def _measure_compare_row(
    spec: tasks.Task, precision: str, xla: bool, batch_size: int, config: BenchmarkConfig
) -> _RowRun:
    """Builds and times one row once; everything it builds is local, so it can be freed once this returns."""
    gc.collect()  # free the previous row before measuring this one's memory
    allocator = AllocatorMemory.of_this_process()
    with HostPeakMemory() as host, GpuPeakMemory() as gpu:
        with precision_lib.precision_scope(precision), precision_lib.tf32_scope(config.tf32):
            keras.utils.set_random_seed(config.seed)
            workload = _build(spec, precision, xla, batch_size, config)
            dataset = tf.data.Dataset.from_tensors(workload.batch).repeat()
            trainer = trainer_driver(
                workload, dataset, (batch_size,), config.warmup_steps, first_fit=True, allocator=allocator
            )
            drivers = {"trainer": trainer}
            if workload.hand_written_step is not None:
                drivers["hand_written"] = hand_written_driver(workload, dataset, config.warmup_steps)
            if workload.plain_fit is not None:
                drivers["plain_fit"] = fit_driver(workload.plain_fit, dataset, (batch_size,), config.warmup_steps)
            interleave(list(drivers.values()), config.steps, config.repeats)
            ops, reads = {}, {}
            if config.count_launches:
                models = {"trainer": workload.trainer, "plain_fit": workload.plain_fit}
                # A CPU's profile shows a compiled step as one call, not its kernels: no op count there.
                count_ops = not xla or bool(tf.config.list_physical_devices("GPU"))
                ops, reads = _count_launches(
                    drivers, {k: v for k, v in models.items() if v is not None}, dataset, config.steps, count_ops
                )
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
    )


def _measure_compare_row_in_own_process(
    spec: tasks.Task, precision: str, xla: bool, batch_size: int, config: BenchmarkConfig
) -> _RowRun:
    """`_measure_compare_row` in a process of its own; a RuntimeError naming the row if that process dies."""
    environment = cpu_bfc_environment() if config.cpu_bfc else {}
    try:
        with _environment(environment):
            return _in_fresh_process(_measure_compare_row, spec, precision, xla, batch_size, config)
    except BrokenProcessPool as e:
        raise RuntimeError(
            f"The process measuring {_label(spec, precision, xla, batch_size)} died before it "
            "returned: killed (perhaps for lack of memory: try a smaller batch size), or started "
            "from a script without an `if __name__ == '__main__':` guard, which the fresh process "
            "imports again. isolate=False measures in this process."
        ) from e


@contextlib.contextmanager
def _environment(variables: Mapping[str, str]) -> Iterator[None]:
    """Sets environment variables for the processes started inside the block, then puts the old values back."""
    old = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in old.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _in_fresh_process(function: Callable[..., _T], *args: Any) -> _T:
    """`function(*args)` in a newly spawned Python process; its result, or its exception, comes back pickled.

    Spawned rather than forked: forking a process whose TensorFlow runtime has
    started its thread pools is unsafe. The process exits when it returns, and
    with it everything TensorFlow kept. It first imports the task files this
    process loaded by path (`tfmp.run.task_loader.imported_files`), so that a
    task defined in one unpickles there.
    """
    context = multiprocessing.get_context("spawn")
    files = task_loader.imported_files()
    with concurrent.futures.ProcessPoolExecutor(
        max_workers=1, mp_context=context, initializer=task_loader.import_files, initargs=(files,)
    ) as pool:
        return pool.submit(function, *args).result()


def _check_picklable(specs: Mapping[str, tasks.Task], names: tuple[str, ...]) -> None:
    """Raises ValueError, naming the task, if a row's task cannot be sent to a fresh process."""
    for name in names:
        try:
            pickle.dumps(specs[name])
        except (pickle.PicklingError, AttributeError, TypeError) as e:
            raise ValueError(
                f"isolate=True measures each row in a fresh process, so the model's task must pickle, and "
                f"{name!r}'s does not ({e}). Build it from module-level functions instead of lambdas or "
                f"local functions, or pass isolate=False (--isolate=false). Received: {specs[name]!r}"
            ) from None


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
        unit=_unit(spec),
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
    )


def compare(
    config: BenchmarkConfig,
    specs: Mapping[str, tasks.Task] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Record]:
    """Measures the tfmp trainer against float32 and a hand-written step.

    One row per (model, batch size, XLA, precision), in that nesting order;
    see [How the benchmark measures](../../guides/benchmark-methodology.md) for the method. With
    `config.runs` > 1 every row is measured once per run, run after run
    (all rows of run 1, then all rows of run 2, ...), and each ratio is the
    median over the runs with its min and max. With `config.isolate` (the
    default) each row of each run is built and measured in a process of its
    own, so its `peak_host_mb` holds that row alone; this process runs no
    TensorFlow op.

    Args:
        config: What to measure; validated first.
        specs: The models' `tfmp.run.tasks.Task`s by name; `default_specs(config.resnet_input_size)`
            when None.
        progress: Called with one line per measured row and run (e.g. print
            to stderr); silent when None.

    Returns:
        One `Record` per row.

    Raises:
        ValueError: for an invalid config, before any work, naming the value;
            with `config.isolate`, also for a task that does not pickle.
        RuntimeError: when a row's process dies without returning (for
            example killed for lack of memory), naming the row.
    """
    specs = _check_specs(config, specs)
    if config.isolate:
        _check_picklable(specs, canonical_models(config.models, specs))
    measure = _measure_compare_row_in_own_process if config.isolate else _measure_compare_row
    rows = list(_rows(config, specs))
    measured: list[list[_RowRun]] = [[] for _ in rows]
    for run in range(config.runs):
        for (spec, batch_size, xla, precision), runs in zip(rows, measured):
            start = time.perf_counter()
            row_run = measure(spec, precision, xla, batch_size, config)
            runs.append(row_run)
            if progress is not None:
                label = _label(spec, precision, xla, batch_size) + _kept(row_run.float32_layers)
                of = f" (run {run + 1}/{config.runs})" if config.runs > 1 else ""
                hand = (
                    f" (hand-written {statistics.median(row_run.hand_written):.1f}, paired ratio "
                    f"{row_run.paired_ratio:.3f})"
                    if row_run.hand_written
                    else " (no hand-written step)"
                )
                allocator = (
                    f", allocator ({row_run.allocator}) peak {row_run.peak_mb:.0f} MB, step {row_run.step_mb:.0f} MB"
                    if row_run.peak_mb is not None
                    else ""
                )
                progress(
                    f"{label}{of}: {statistics.median(row_run.trainer):.1f} {_unit(spec)}{hand}, "
                    f"peak RSS {row_run.peak_host_mb:.0f} MB{allocator}, {time.perf_counter() - start:.0f} s"
                )
    records = [
        _record(spec, precision, xla, batch, runs) for (spec, batch, xla, precision), runs in zip(rows, measured)
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
    return records


def _ratio(value: float | None, reference: float | None) -> float | None:
    """`value / reference`, or None when either is missing or the reference is not positive."""
    if value is None or reference is None or reference <= 0:
        return None
    return value / reference


def _measure_pipeline_row(
    spec: tasks.Task, precision: str, xla: bool, batch_size: int, pipeline: Pipeline, config: BenchmarkConfig
) -> tuple[float, float]:
    """Times one row; returns (pipeline, synthetic) throughputs, in the model's unit."""
    with precision_lib.precision_scope(precision), precision_lib.tf32_scope(config.tf32):
        keras.utils.set_random_seed(config.seed)
        workload = _build(spec, precision, xla, batch_size, config, hand_written=False)
        synthetic_data = tf.data.Dataset.from_tensors(workload.batch).repeat()
        synthetic = trainer_driver(workload, synthetic_data, (batch_size,), config.warmup_steps, first_fit=True)
        # At least one epoch of warm-up: a partial last batch has its own shape.
        warmup = max(config.warmup_steps, len(pipeline.epoch_batch_sizes))
        real = trainer_driver(workload, pipeline.dataset, pipeline.epoch_batch_sizes, warmup, first_fit=False)
        interleave([real, synthetic], config.steps, config.repeats)
    return real.median_images_per_sec, synthetic.median_images_per_sec


def input_pipeline(
    config: BenchmarkConfig,
    specs: Mapping[str, tasks.Task] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[PipelineRecord]:
    """Measures the trainer fed by the real pipeline against in-memory tensors.

    For each (model, batch size, XLA, precision): one trainer, compiled as in
    `compare`, is fed alternately by `training_pipeline` on `config.dataset`
    (`tfmp.run.data.load_images` + `tfmp.run.data.make_dataset`, exactly the
    pipeline a training run's task builds, with `.repeat()`) and by
    `tf.data.Dataset.from_tensors(batch).repeat()` of the same shape and
    dtypes, through the same `train_function`, interleaved over `repeats`.
    The pipeline's warm-up covers at least one epoch, so a partial last batch
    (the classifier keeps it) is traced, and with XLA compiled, before
    timing; its images count at their real number.

    Args:
        config: What to measure; `config.dataset` is the real data.
        specs: The models' `tfmp.run.tasks.Task`s by name; `default_specs(...)` when None.
        progress: Called with one line per finished row; silent when None.

    Returns:
        One `PipelineRecord` per row.

    Raises:
        ValueError: for an invalid config, naming the value.
        tfmp.run.data.DatasetNotFoundError: when the dataset needs a download
            that is not available.
    """
    specs = _check_specs(config, specs)
    records = []
    pipelines: dict[tuple[str, int], Pipeline] = {}
    dataset = config.dataset.lower()
    for spec, batch_size, xla, precision in _rows(config, specs):
        start = time.perf_counter()
        key = (spec.name, batch_size)
        if key not in pipelines:
            # The shipped image models read the benchmark's dataset; a task of your own reads its own data.
            changes = {"dataset": dataset} if isinstance(spec.config, config_lib.ImageConfig) else {}
            pipelines[key] = training_pipeline(_row_task(spec, batch_size, config, **changes))
        gc.collect()
        real, synthetic = _measure_pipeline_row(spec, precision, xla, batch_size, pipelines[key], config)
        record = PipelineRecord(
            model=spec.name,
            dataset=dataset,
            precision=precision,
            xla=xla,
            batch_size=batch_size,
            pipeline_images_per_sec=real,
            synthetic_images_per_sec=synthetic,
            ratio=real / synthetic,
            unit=_unit(spec),
        )
        records.append(record)
        if progress is not None:
            progress(
                f"{_label(spec, precision, xla, batch_size)} on {dataset}: pipeline {real:.1f} {record.unit}, "
                f"synthetic {synthetic:.1f} {record.unit}, ratio {record.ratio:.3f}, "
                f"{time.perf_counter() - start:.0f} s"
            )
    return records
