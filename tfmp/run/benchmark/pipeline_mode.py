"""The benchmark's `input_pipeline` mode: the trainer fed by the real input pipeline against in-memory tensors."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Mapping

import keras
import tensorflow as tf

from tfmp import precision as precision_lib
from tfmp.run import config as config_lib
from tfmp.run import tasks
from tfmp.run.benchmark import rows
from tfmp.run.benchmark.benchmark_config import BenchmarkConfig
from tfmp.run.benchmark.drivers import interleave, trainer_driver
from tfmp.run.benchmark.records import PipelineRecord
from tfmp.run.benchmark.repeated_pipeline import Pipeline, training_pipeline

__all__ = ["input_pipeline"]


def _measure_pipeline_row(
    spec: tasks.Task, precision: str, xla: bool, batch_size: int, pipeline: Pipeline, config: BenchmarkConfig
) -> tuple[float, float]:
    """Times one row; returns (pipeline, synthetic) throughputs, in the model's unit."""
    with precision_lib.precision_scope(precision), precision_lib.tf32_scope(config.tf32):
        keras.utils.set_random_seed(config.seed)
        workload = rows.build(spec, precision, xla, batch_size, config, hand_written=False)
        synthetic_data = tf.data.Dataset.from_tensors(workload.batch).repeat()
        synthetic = trainer_driver(workload, synthetic_data, (batch_size,), config.warmup_steps, first_fit=True)
        # At least one epoch of warm-up: a partial last batch has its own shape.
        warmup = max(config.warmup_steps, len(pipeline.epoch_batch_sizes))
        real = trainer_driver(workload, pipeline.dataset, pipeline.epoch_batch_sizes, warmup, first_fit=False)
        interleave([real, synthetic], *config.fixed_counts())
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
    config, specs = rows.check_specs(config, specs, progress)
    records = []
    pipelines: dict[tuple[str, int], Pipeline] = {}
    dataset = config.dataset.lower()
    for spec, batch_size, xla, precision in rows.plan(config, specs):
        start = time.perf_counter()
        key = (spec.name, batch_size)
        if key not in pipelines:
            # The shipped image models read the benchmark's dataset; a task of your own reads its own data.
            changes = {"dataset": dataset} if isinstance(spec.config, config_lib.ImageConfig) else {}
            pipelines[key] = training_pipeline(rows.row_task(spec, batch_size, config, **changes))
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
            unit=rows.unit(spec),
        )
        records.append(record)
        if progress is not None:
            progress(
                f"{rows.label(spec, precision, xla, batch_size)} on {dataset}: pipeline {real:.1f} {record.unit}, "
                f"synthetic {synthetic:.1f} {record.unit}, ratio {record.ratio:.3f}, "
                f"{time.perf_counter() - start:.0f} s"
            )
    return records
