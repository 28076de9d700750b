"""The whole diagnosis: all four reports, and the warnings a run prints at its start."""

from __future__ import annotations

import dataclasses
from typing import Any

import tensorflow as tf

from tfmp.run.diagnostics import _report
from tfmp.run.diagnostics._report import Source
from tfmp.run.diagnostics.alignment import AlignmentReport, tensor_core_report
from tfmp.run.diagnostics.first_nonfinite import NonFiniteReport, first_nonfinite
from tfmp.run.diagnostics.gradients import GradientReport, gradient_report
from tfmp.run.diagnostics.outputs import OutputReport, float32_output_report

__all__ = ["Diagnosis", "diagnose", "startup_warnings"]


def startup_warnings(source: Source, batch_size: int | None) -> str:
    """A short warning block for the start of a training run, or "" when all is well.

    Runs the alignment and float32-output checks and keeps what needs action:
    alignment warnings (not info) and every float32-output finding.
    """
    alignment = tensor_core_report(source, batch_size)
    outputs = float32_output_report(source)
    lines = [
        f"  {f.layer}: {f.dimension} {f.value} is not a multiple of {alignment.multiple} (use {f.aligned})"
        for f in alignment.warnings
    ]
    lines += [f"  {f.where}: {f.what} in {f.dtype}; {f.fix}" for f in outputs.findings]
    if not lines:
        return ""
    return "\n".join(["warning: mixed-precision pitfalls found (details: tfmp.run.training.diagnose_run):", *lines])


@dataclasses.dataclass
class Diagnosis:
    """All four reports for one model, precision and batch."""

    alignment: AlignmentReport
    outputs: OutputReport
    gradients: GradientReport
    nonfinite: NonFiniteReport

    def __str__(self) -> str:
        return "\n\n".join(str(r) for r in (self.alignment, self.outputs, self.gradients, self.nonfinite))


def diagnose(
    source: Source,
    data: Any,
    loss: Any = None,
    loss_scale: float | str | None = "current",
    batch_size: int | None = None,
    print_fn: Any = _report.UNSET,
) -> Diagnosis:
    """Runs all four reports on `source` with one batch `data`.

    `batch_size` is the training batch size the alignment report checks
    (default: the size of `data`). The `Diagnosis`'s `str()` is the four
    tables. `print_fn`, tfmp 0.1's way to print them, still prints them,
    with a `DeprecationWarning` (it goes in tfmp 0.3).
    """
    if batch_size is None:
        batch_size = int(tf.shape(tf.nest.flatten(data)[0])[0])
    diagnosis = Diagnosis(
        tensor_core_report(source, batch_size),
        float32_output_report(source, loss),
        gradient_report(source, data, loss, loss_scale),
        first_nonfinite(source, data, loss, loss_scale),
    )
    _report.removed_print_fn("diagnose", print_fn, diagnosis)
    return diagnosis
