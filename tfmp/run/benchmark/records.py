"""The benchmark's results: one record per measured row, ready for JSON.

`Record` is a row of the `compare` mode, `PipelineRecord` one of the
`input_pipeline` mode; `tfmp.run.reporting` presents either.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["PipelineRecord", "Record"]


@dataclasses.dataclass
class Record:
    """One row of the `compare` mode.

    Attributes:
        model: The model's name.
        precision: `float32`, `mixed_bfloat16` or `mixed_float16`.
        xla: Whether the step was compiled with XLA (`jit_compile`).
        batch_size: Examples per batch.
        images_per_sec: The tfmp trainer's throughput, median over repeats.
        images_per_sec_min: The slowest repeat's throughput (the spread's
            low end).
        images_per_sec_max: The fastest repeat's throughput.
        step_ms: Milliseconds per step at that throughput.
        ratio_to_float32: `images_per_sec` over that of the float32 row of the
            same model, XLA setting and batch size in the same run; None
            without such a row.
        ratio_to_hand_written: `images_per_sec` over the hand-written step's
            median throughput.
        peak_host_mb: Peak resident memory of the process during the row
            (MiB; docs/guides/benchmark-methodology.md, "Memory", says what
            it includes).
        peak_gpu_mb: Peak GPU memory during the row (MiB), None without a GPU.
    """

    model: str
    precision: str
    xla: bool
    batch_size: int
    images_per_sec: float
    step_ms: float
    ratio_to_float32: float | None
    ratio_to_hand_written: float
    peak_host_mb: float
    peak_gpu_mb: float | None
    images_per_sec_min: float | None = None
    images_per_sec_max: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON-ready dict, one key per attribute (the spread after the median)."""
        row = dataclasses.asdict(self)
        keys = [k for k in row if not k.startswith("images_per_sec_")]
        at = keys.index("images_per_sec") + 1
        keys[at:at] = ["images_per_sec_min", "images_per_sec_max"]
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
    """

    model: str
    dataset: str
    precision: str
    xla: bool
    batch_size: int
    pipeline_images_per_sec: float
    synthetic_images_per_sec: float
    ratio: float

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON-ready dict, one key per attribute."""
        return dataclasses.asdict(self)
