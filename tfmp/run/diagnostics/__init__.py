"""Why is a mixed-precision run slow or wrong? Four reports on a user's own model.

* `tensor_core_report(model, batch_size)` (`alignment.py`): every dimension
  that feeds Tensor Core math (Dense units and input features, convolution
  filters and input channels, RNN units and inputs, the batch size) and is
  not a multiple of 8 (the GAN tutorial's pitfall: the generator widths
  63/31/7 and batch 4090; what it measured to cost is printed with the
  report, `MISALIGNMENT_COST`); attention layers on heads x key_dim, not the
  head count.
* `float32_output_report(model)` (`outputs.py`): model outputs,
  softmax/sigmoid layers and losses computed in float16 or bfloat16, where
  they should stay float32, each with a fix the user can apply (also for a
  softmax inside another layer).
* `gradient_report(trainer, batch)` (`gradients.py`): per trainable variable,
  what float16 would do to its gradient: the fractions that would flush to
  zero (|g| < 2^-24), become subnormal (|g| < 2^-14) or overflow
  (|g| > 65504), without scaling and at a loss scale, plus a suggested
  static loss scale; `write_gradient_summaries` sends them to TensorBoard.
* `first_nonfinite(trainer, batch)` (`first_nonfinite.py`): when a loss or
  gradient is NaN or Inf, the first layer whose activation or gradient went
  non-finite.

Each function accepts a `keras.Model` or a `tfmp.trainers` trainer, returns a
report object whose `str()` is a readable table, and changes no global
state. `diagnose` (`diagnosis.py`) runs all four; `startup_warnings` (there
too) is the short block a run prints when it starts; the training batch a
run's diagnosis looks at is the task's `probe`. `_report.py` holds what
the reports share.
"""

# In reading order, which the API page keeps.
from tfmp.float32_layers import float32_copy
from tfmp.run.diagnostics.alignment import (
    ALIGNMENT,
    MISALIGNMENT_COST,
    AlignmentFinding,
    AlignmentReport,
    tensor_core_report,
)
from tfmp.run.diagnostics.diagnosis import Diagnosis, diagnose, startup_warnings
from tfmp.run.diagnostics.first_nonfinite import NonFiniteReport, first_nonfinite
from tfmp.run.diagnostics.gradients import (
    FLOAT16_MAX,
    FLOAT16_MIN_NORMAL,
    FLOAT16_MIN_SUBNORMAL,
    SCALE_MARGIN,
    GradientReport,
    ObjectiveGradients,
    VariableGradients,
    gradient_report,
    write_gradient_summaries,
)
from tfmp.run.diagnostics.outputs import OutputFinding, OutputReport, float32_output_report

__all__ = [
    "ALIGNMENT",
    "FLOAT16_MAX",
    "FLOAT16_MIN_NORMAL",
    "FLOAT16_MIN_SUBNORMAL",
    "MISALIGNMENT_COST",
    "SCALE_MARGIN",
    "AlignmentFinding",
    "AlignmentReport",
    "Diagnosis",
    "GradientReport",
    "NonFiniteReport",
    "ObjectiveGradients",
    "OutputFinding",
    "OutputReport",
    "VariableGradients",
    "diagnose",
    "first_nonfinite",
    "float32_copy",
    "float32_output_report",
    "gradient_report",
    "startup_warnings",
    "tensor_core_report",
    "write_gradient_summaries",
]
