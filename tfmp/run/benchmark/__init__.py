"""Throughput benchmarks: tfmp's trainers per precision, against a hand-written step.

Four modes, each returning a list of dataclass records: `compare` (a
`Record` per model, precision, XLA and batch size: images (or examples) per second, the
ratios to float32 and to a hand-written `tf.function` step, peak memory),
`input_pipeline` (a `PipelineRecord`: the real `tf.data` pipeline against
in-memory tensors), `ceiling` (a `CeilingRecord` per 16-bit precision: the
whole-step speed-up its kernels allow, against the one measured) and
`resident` (a `ResidentRecord` per row: the memory each `compare` row leaves
behind in a process that runs them one after another) and `max_batch` (a
`MaxBatchRecord` per model, XLA setting and precision: the largest batch
whose training step fits a memory budget, found by trials in fresh processes).
`tfmp.run.reporting` presents the records.

How a row is measured, and what the hand-written step is:
[How the benchmark measures](../../guides/benchmark-methodology.md).

Modules, each importing only the ones before it: `benchmark_config` (what to
measure), `records` (the results), `launches` (what a step costs a GPU's
host: its conditionals, executed ops and host reads, counted on any
machine), `workload` (the trainer, the hand-written step and the plain
`fit()` model of one row), `repeated_pipeline` (the real input pipeline),
`progress` (what a run shows while it measures), `drivers` (running and
timing each path, round after round until a stop rule says enough), `rows`
(the rows every mode runs, in order, and a row's own process), `compare_mode`
(`compare`), `pipeline_mode` (`input_pipeline`), `kernel_ceiling` (the `ceiling` mode), `resident_memory`
(the `resident` mode), `largest_batch` (the `max_batch` mode).
"""

from tfmp.run.benchmark.benchmark_config import (
    DEFAULT_RESNET_INPUT_SIZE,
    MODELS,
    MODES,
    PIPELINE_MODELS,
    PRECISIONS,
    BenchmarkConfig,
    canonical_models,
    canonical_precisions,
    default_specs,
    fit_to_machine,
)
from tfmp.run.benchmark.compare_mode import compare
from tfmp.run.benchmark.kernel_ceiling import CeilingRecord, ceiling
from tfmp.run.benchmark.largest_batch import MaxBatchRecord, MaxBatchSettings, max_batch
from tfmp.run.benchmark.launches import conditionals, executed_ops, fit_host_reads, host_reads, xla_conditionals
from tfmp.run.benchmark.pipeline_mode import input_pipeline
from tfmp.run.benchmark.progress import Progress
from tfmp.run.benchmark.records import PipelineRecord, Record, ResidentRecord
from tfmp.run.benchmark.repeated_pipeline import Pipeline, training_pipeline
from tfmp.run.benchmark.resident_memory import resident
from tfmp.run.benchmark.workload import Workload, build_workload

# fmt: off
__all__ = [  # by module: benchmark_config, records, launches, workload, repeated_pipeline, progress,
    # compare_mode and pipeline_mode, kernel_ceiling, resident_memory, largest_batch
    "BenchmarkConfig", "DEFAULT_RESNET_INPUT_SIZE", "MODELS", "MODES", "PIPELINE_MODELS", "PRECISIONS",
    "canonical_models", "canonical_precisions", "default_specs", "fit_to_machine",
    "PipelineRecord", "Record", "ResidentRecord",
    "conditionals", "executed_ops", "fit_host_reads", "host_reads", "xla_conditionals",
    "Workload", "build_workload",
    "Pipeline", "training_pipeline",
    "Progress",
    "compare", "input_pipeline",
    "CeilingRecord", "ceiling",
    "resident",
    "MaxBatchRecord", "MaxBatchSettings", "max_batch",
]
# fmt: on
