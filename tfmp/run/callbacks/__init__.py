"""Callbacks: the side effects of a training run, one concern per file.

* `step_timer.py`: `StepTimer` times every training step and adds the throughput
  (`images_per_sec`, or `examples_per_sec` for a model that does not take
  images; warm-up excluded) to each epoch's logs;
* `console.py`: `ConsoleLogger` prints the GAN tutorial's per-step line (or a
  progress bar, `console_mode`) and a closing summary;
* `tensorboard.py`: `Summaries` writes the logs to TensorBoard every few
  steps (`batch_` tags, at the global step) and every epoch (`epoch_` tags),
  in the layout the trainer asks for, and records the run's hyperparameters
  (HParams plugin); `GeneratorSamples` writes a grid of generator images
  from fixed noise (`image_grid`); `GradientDiagnostics` logs the float16
  underflow/overflow fractions of the gradients every N steps
  (`tfmp.run.diagnostics`);
* `peak_memory.py`: `PeakMemory` writes TensorFlow's allocator peak of each
  epoch to TensorBoard (`memory/peak_mb`) and prints the run's highest,
  where the allocator can be read (a GPU; a CPU with
  `TF_CPU_ALLOCATOR_USE_BFC=true`);
* `profiling.py`: `ProfileSteps` captures a TensorFlow profiler trace of
  chosen steps;
* `checkpointing.py`: `Checkpointing` saves the run every N steps and every
  epoch, and turns a SIGTERM/SIGINT into a checkpoint and a clean stop
  (`tfmp.run.preemption`);
* `nonfinite_stop.py`: `NonFiniteStop` stops at the first skipped step and names
  the first non-finite layer (`NonFiniteStepError`);
* `display.py`: which layers a built task keeps in float32, as the run says;
* `segments.py`: `RunSegment` presents one `fit()` call of a run split over
  several (a resumed, partial epoch first) to a callback as part of one run.

Put `StepTimer` before the callbacks that read the throughput, and
`Checkpointing` last.
"""

# In reading order, which the API page keeps.
from tfmp.run.callbacks.checkpointing import Checkpointing
from tfmp.run.callbacks.console import CONSOLE_MODES, ConsoleLogger, console_mode
from tfmp.run.callbacks.nonfinite_stop import NonFiniteStepError, NonFiniteStop
from tfmp.run.callbacks.peak_memory import PeakMemory
from tfmp.run.callbacks.profiling import ProfileSteps
from tfmp.run.callbacks.segments import RunSegment
from tfmp.run.callbacks.step_timer import THROUGHPUT_KEYS, StepTimer
from tfmp.run.callbacks.tensorboard import GeneratorSamples, GradientDiagnostics, Summaries, describe, image_grid

__all__ = [
    "CONSOLE_MODES",
    "THROUGHPUT_KEYS",
    "Checkpointing",
    "ConsoleLogger",
    "GeneratorSamples",
    "GradientDiagnostics",
    "NonFiniteStepError",
    "NonFiniteStop",
    "PeakMemory",
    "ProfileSteps",
    "RunSegment",
    "StepTimer",
    "Summaries",
    "console_mode",
    "describe",
    "image_grid",
]
