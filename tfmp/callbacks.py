"""Callbacks: the side effects of a training run.

* `StepTimer` times every training step and adds `images_per_sec` to each
  epoch's logs;
* `ConsoleLogger` prints the seed's per-step line and a closing summary;
* `EpochSummaries` writes each epoch's logs to TensorBoard, in the layout the
  trainer asks for, and records the run's hyperparameters (HParams plugin);
* `GeneratorSamples` writes a grid of generator images from fixed noise;
* `GradientDiagnostics` logs the float16 underflow/overflow fractions of the
  gradients every N steps (`tfmp.diagnostics`);
* `ProfileSteps` captures a TensorFlow profiler trace of chosen steps;
* `Checkpointing` saves the run every N steps and every epoch, and turns a
  SIGTERM/SIGINT into a checkpoint and a clean stop (`tfmp.preemption`);
* `NonFiniteStop` stops at the first skipped step and names the first
  non-finite layer;
* `RunSegment` presents one `fit()` call of a run split over several (a
  resumed, partial epoch first) to a callback as part of one run.

Put `StepTimer` before the callbacks that read `images_per_sec`, and
`Checkpointing` last.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, Callable, Mapping, Sequence

import keras
import numpy as np
import tensorflow as tf
from tensorboard.plugins.hparams import api as hparams_api

from tfmp import checkpoint as checkpoint_lib
from tfmp import diagnostics
from tfmp import preemption

__all__ = ["Checkpointing", "ConsoleLogger", "EpochSummaries", "GeneratorSamples", "GradientDiagnostics",
           "NonFiniteStepError", "NonFiniteStop", "ProfileSteps", "RunSegment", "StepTimer", "image_grid"]


class StepTimer(keras.callbacks.Callback):
    """Times training steps and reports throughput.

    A step's time runs from `on_train_batch_begin` to `on_train_batch_end`;
    Keras converts the step's logs to Python numbers before the latter, so the
    step has finished on the device by then.

    Args:
        images_per_step: Images one step processes (for the GAN, twice the
            batch: real and fake, as the seed counts).
        warmup_steps: Leading steps of the run left out of
            `mean_images_per_sec`: they include tracing and compilation.
    """

    def __init__(self, images_per_step: int, warmup_steps: int = 3):
        super().__init__()
        if images_per_step < 1 or warmup_steps < 0:
            raise ValueError(
                "images_per_step must be >= 1 and warmup_steps >= 0. Received: "
                f"images_per_step={images_per_step!r}, warmup_steps={warmup_steps!r}"
            )
        self.images_per_step = int(images_per_step)
        self.warmup_steps = int(warmup_steps)
        self.step_times: list[float] = []
        self._epoch_start = 0
        self._start = 0.0

    @property
    def last_step_time(self) -> float:
        """Seconds the latest step took."""
        return self.step_times[-1]

    @property
    def measured_steps(self) -> int:
        """Steps after the warm-up."""
        return max(len(self.step_times) - self.warmup_steps, 0)

    @property
    def mean_images_per_sec(self) -> float | None:
        """Images per second over all steps after the warm-up (None if none)."""
        measured = self.step_times[self.warmup_steps:]
        if not measured:
            return None
        return self.images_per_step * len(measured) / sum(measured)

    def on_train_begin(self, logs=None):
        self.step_times = []

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_start = len(self.step_times)

    def on_train_batch_begin(self, batch, logs=None):
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.step_times.append(time.perf_counter() - self._start)

    def on_epoch_end(self, epoch, logs=None):
        epoch_times = self.step_times[self._epoch_start:]
        if logs is not None and epoch_times:
            logs["images_per_sec"] = self.images_per_step * len(epoch_times) / sum(epoch_times)


def _format_number(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.3g}"


class ConsoleLogger(keras.callbacks.Callback):
    """Prints the seed's step line every `log_every` steps, and a summary.

    The line, for the GAN:
    `(epoch, step), G Loss: x, D Loss: y, loss_scale: s, step_time: t, throughput: N img/s`.
    Losses are the epoch's running means, as Keras's progress bar shows them.
    With two loss-scaled optimizers the scales print as `s_g/s_d`; without
    loss scaling, `loss_scale: none`.

    Args:
        timer: The run's `StepTimer` (placed before this callback).
        fields: `(label, log key)` pairs to print, e.g. `(("G Loss", "g_loss"),)`.
        loss_scale_prefixes: Log-key prefixes of the loss-scale entries.
        log_every: Print every this many steps (and the last step of each epoch).
        logdir: Where the run's logs are, for the summary.
        print_fn: Where lines go.
    """

    def __init__(
        self,
        timer: StepTimer,
        fields: Sequence[tuple[str, str]],
        loss_scale_prefixes: Sequence[str] = ("",),
        log_every: int = 1,
        logdir: str | None = None,
        print_fn: Callable[[str], None] = print,
    ):
        super().__init__()
        if log_every < 1:
            raise ValueError(f"log_every must be >= 1. Received: log_every={log_every!r}")
        self.timer = timer
        self.fields = tuple(fields)
        self.loss_scale_prefixes = tuple(loss_scale_prefixes)
        self.log_every = int(log_every)
        self.logdir = logdir
        self.print_fn = print_fn
        self.final_logs: dict[str, Any] = {}
        self._epoch = 0
        self._steps_in_epoch: int | None = None

    def _loss_scale(self, logs: Mapping[str, Any]) -> str:
        scales = [logs[p + "loss_scale"] for p in self.loss_scale_prefixes if p + "loss_scale" in logs]
        return "/".join(_format_number(s) for s in scales) if scales else "none"

    def _skipped(self, logs: Mapping[str, Any]) -> list[int]:
        return [int(logs[p + "skipped_steps"]) for p in self.loss_scale_prefixes if p + "skipped_steps" in logs]

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._steps_in_epoch = self.params.get("steps") if self.params else None

    def on_train_batch_end(self, batch, logs=None):
        last = self._steps_in_epoch is not None and batch + 1 == self._steps_in_epoch
        if batch % self.log_every and not last:
            return
        logs = logs or {}
        step_time = self.timer.last_step_time
        values = ", ".join(f"{label}: {logs[key]:.3f}" for label, key in self.fields if key in logs)
        self.print_fn(
            f"({self._epoch}, {batch}), {values}, loss_scale: {self._loss_scale(logs)}, "
            f"step_time: {step_time:.3f}, throughput: {self.timer.images_per_step / step_time:.3f} img/s"
        )

    def on_epoch_end(self, epoch, logs=None):
        logs = dict(logs or {})
        self.final_logs = logs
        shown = ", ".join(f"{k} {_format_number(v) if 'loss_scale' in k or 'skipped' in k else f'{v:.4g}'}"
                          for k, v in logs.items())
        self.print_fn(f"epoch {epoch + 1}/{self.params.get('epochs', '?')}: {shown}")

    def on_train_end(self, logs=None):
        timer = self.timer
        mean = timer.mean_images_per_sec
        if mean is None:
            throughput = f"n/a (all {len(timer.step_times)} steps were warm-up)"
        else:
            throughput = (
                f"{mean:.1f} img/s over {timer.measured_steps} steps "
                f"(first {timer.warmup_steps} steps excluded as warm-up)"
            )
        skipped = self._skipped(self.final_logs)
        finals = ", ".join(f"{label} {self.final_logs[key]:.4f}" for label, key in self.fields if key in self.final_logs)
        lines = [
            f"summary: {len(timer.step_times)} steps; mean throughput {throughput}",
            f"  skipped steps: {'/'.join(map(str, skipped)) if skipped else 'none (no loss scaling)'}; final {finals}",
        ]
        if self.logdir:
            parent = os.path.dirname(os.path.normpath(self.logdir)) or "."
            lines.append(f"  logs: {self.logdir}  (view: tensorboard --logdir {parent})")
        for line in lines:
            self.print_fn(line)


class EpochSummaries(keras.callbacks.Callback):
    """Writes every epoch's logs to TensorBoard, and the run's hyperparameters.

    Each log key is sent where `route(key)` says: a `(sub-run, tag)` pair,
    the sub-run being a directory under `logdir` ("" for `logdir` itself).
    The hyperparameters go to `logdir` with the HParams plugin, so runs can
    be compared in its table.

    Args:
        logdir: The run's directory.
        route: Maps a log key to `(sub-run, tag)`; a trainer's
            `summary_route`.
        hparams: Hyperparameters to record (str, bool, int or float values).
    """

    def __init__(
        self,
        logdir: str,
        route: Callable[[str], tuple[str, str]],
        hparams: Mapping[str, Any] | None = None,
    ):
        super().__init__()
        self.logdir = logdir
        self.route = route
        self.hparams = dict(hparams or {})
        self._writers: dict[str, Any] = {}

    def writer(self, run: str):
        """The summary writer of a sub-run, created on first use."""
        if run not in self._writers:
            self._writers[run] = tf.summary.create_file_writer(os.path.join(self.logdir, run))
        return self._writers[run]

    def on_train_begin(self, logs=None):
        if self.hparams:
            with self.writer("").as_default():
                hparams_api.hparams(self.hparams, trial_id=os.path.basename(os.path.normpath(self.logdir)))

    def on_epoch_end(self, epoch, logs=None):
        for key, value in (logs or {}).items():
            if value is None or not np.isscalar(value) and np.ndim(value):
                continue
            run, tag = self.route(key)
            with self.writer(run).as_default():
                tf.summary.scalar(tag, float(value), step=epoch)
        for writer in self._writers.values():
            writer.flush()

    def on_train_end(self, logs=None):
        for writer in self._writers.values():
            writer.close()
        self._writers = {}


def image_grid(images: np.ndarray, columns: int | None = None) -> np.ndarray:
    """Tiles `(n, h, w, c)` images into one `(rows*h, columns*w, c)` image.

    Missing cells of the last row are left black. `columns` defaults to
    `ceil(sqrt(n))`.
    """
    images = np.asarray(images)
    if images.ndim != 4 or len(images) == 0:
        raise ValueError(f"images must be (n, h, w, c) with n >= 1. Received shape: {images.shape}")
    n, h, w, c = images.shape
    columns = columns or math.ceil(math.sqrt(n))
    rows = math.ceil(n / columns)
    grid = np.zeros((rows * h, columns * w, c), images.dtype)
    for i, image in enumerate(images):
        r, col = divmod(i, columns)
        grid[r * h:(r + 1) * h, col * w:(col + 1) * w] = image
    return grid


class GeneratorSamples(keras.callbacks.Callback):
    """Writes a grid of generator images from fixed noise every epoch.

    The same noise every epoch shows how the generator's output evolves. The
    generator runs in inference mode (BatchNorm uses its moving statistics).

    Args:
        logdir: Directory of the summary (e.g. the run's `generator/`).
        generator: The generator model.
        noise: Fixed noise, `(n, latent_dim)`.
        tag: The image summary's tag.
    """

    def __init__(self, logdir: str, generator: keras.Model, noise: np.ndarray, tag: str = "samples"):
        super().__init__()
        self.logdir = logdir
        self.generator = generator
        self.noise = np.asarray(noise, np.float32)
        self.tag = tag
        self._writer = None

    def on_epoch_end(self, epoch, logs=None):
        images = keras.ops.convert_to_numpy(self.generator(self.noise, training=False)).astype(np.float32)
        grid = np.clip(image_grid(images), 0.0, 1.0)
        if self._writer is None:
            self._writer = tf.summary.create_file_writer(self.logdir)
        with self._writer.as_default():
            tf.summary.image(self.tag, grid[None], step=epoch)
        self._writer.flush()

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class GradientDiagnostics(keras.callbacks.Callback):
    """Logs what float16 would lose of the gradients, every `every` steps.

    Every `every` training steps it runs `tfmp.diagnostics.gradient_report`
    on a fixed probe batch with the current weights and loss scales, and
    writes the underflow, subnormal and overflow fractions (unscaled and at
    the loss scale) and log2|g| histograms to the run's `diagnostics`
    sub-run (`tfmp.diagnostics.write_gradient_summaries`). The float32
    reference copy is made once and refreshed with the weights each time.
    The step timer does not see this work when it is placed before it.

    Args:
        probe: One training batch, as `fit()` receives it.
        every: Steps between reports, >= 1.
        logdir: The run's directory.
    """

    def __init__(self, probe: Any, every: int, logdir: str):
        super().__init__()
        if every < 1:
            raise ValueError(f"every must be >= 1. Received: every={every!r}")
        self.probe = probe
        self.every = int(every)
        self.logdir = logdir
        self.reports: list[tuple[int, Any]] = []
        self._step = 0
        self._reference = None

    def on_train_begin(self, logs=None):
        self._reference = self.model.float32_copy()

    def on_train_batch_end(self, batch, logs=None):
        self._step += 1
        if self._step % self.every:
            return
        report = diagnostics.gradient_report(self.model, self.probe, print_fn=None, reference=self._reference)
        diagnostics.write_gradient_summaries(report, self.logdir, self._step)
        self.reports.append((self._step, report))


class ProfileSteps(keras.callbacks.Callback):
    """Captures a TensorFlow profiler trace of training steps `start`..`end`.

    Steps are counted from 1 across epochs, both ends included, as Keras's
    `TensorBoard(profile_batch=(start, end))` counts them; start after the
    warm-up so tracing and compilation stay out of the trace (the seed's
    DLProf `--iter_start`). The trace goes to `<logdir>/plugins/profile/`,
    where TensorBoard's profile plugin (`pip install tensorboard-plugin-profile`)
    opens it; each step is marked with `tf.profiler.experimental.Trace`, so
    the plugin's step-time view works. A run shorter than `end` stops the
    trace at its last step. Like Keras, a profiler that cannot start (one is
    already running) is reported and does not stop training.

    Args:
        start: First profiled step (>= 1).
        end: Last profiled step (>= start).
        logdir: The run's directory.
        print_fn: Where the trace's location is reported.
    """

    def __init__(self, start: int, end: int, logdir: str, print_fn: Callable[[str], None] = print):
        super().__init__()
        if not 1 <= start <= end:
            raise ValueError(f"Profile steps must satisfy 1 <= start <= end. Received: start={start!r}, end={end!r}")
        self.start, self.end = int(start), int(end)
        self.logdir = logdir
        self.print_fn = print_fn
        self.profiled_steps: list[int] = []
        self._step = 0
        self._active = False
        self._trace = None

    def on_train_begin(self, logs=None):
        self._step = 0

    def on_train_batch_begin(self, batch, logs=None):
        self._step += 1
        if self._step == self.start:
            try:
                tf.profiler.experimental.start(self.logdir)
                self._active = True
            except (tf.errors.AlreadyExistsError, tf.errors.UnavailableError) as e:
                self.print_fn(f"warning: the profiler could not start ({e.message}); no trace is written.")
        if self._active:
            self._trace = tf.profiler.experimental.Trace("train", step_num=self._step, _r=1)
            self._trace.__enter__()

    def on_train_batch_end(self, batch, logs=None):
        if not self._active:
            return
        self._trace.__exit__(None, None, None)
        self.profiled_steps.append(self._step)
        if self._step >= self.end:
            self._stop()

    def on_train_end(self, logs=None):
        self._stop()

    def _stop(self) -> None:
        if self._active:
            tf.profiler.experimental.stop()
            self._active = False
            steps = f"{self.profiled_steps[0]}-{self.profiled_steps[-1]}"
            self.print_fn(f"profiled steps {steps}: tensorboard --logdir {self.logdir} (Profile tab)")


class Checkpointing(keras.callbacks.Callback):
    """Saves the run's checkpoint every `every` steps, every epoch, and on a stop request.

    With a `tfmp.preemption.PreemptionGuard` whose signal has arrived, the
    step in flight finishes, a checkpoint is written and
    `tfmp.preemption.Preempted` is raised out of `fit()`.

    Args:
        checkpoint: The run's `tfmp.checkpoint.RunCheckpoint`.
        step: Training steps done before this `fit()` (the restored step).
        every: Also save every this many steps; 0 = only at epoch ends.
        guard: The active preemption guard, if any.
        print_fn: Says where each checkpoint went.
    """

    def __init__(
        self,
        checkpoint: checkpoint_lib.RunCheckpoint,
        step: int = 0,
        every: int = 0,
        guard: preemption.PreemptionGuard | None = None,
        print_fn: Callable[[str], None] = print,
    ):
        super().__init__()
        if every < 0:
            raise ValueError(f"every must be >= 0. Received: every={every!r}")
        self.checkpoint = checkpoint
        self.step = int(step)
        self.every = int(every)
        self.guard = guard
        self.print_fn = print_fn
        self.last_saved: tuple[int, str] | None = None

    def save(self) -> str:
        """Writes a checkpoint at the current step (once per step)."""
        if self.last_saved is None or self.last_saved[0] != self.step:
            self.last_saved = (self.step, self.checkpoint.save(self.step))
        return self.last_saved[1]

    def _stop_if_requested(self) -> None:
        if self.guard is not None and self.guard.requested:
            raise preemption.Preempted(self.guard.signum, self.step, self.save())

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        self._stop_if_requested()
        if self.every and self.step % self.every == 0:
            self.save()

    def on_epoch_end(self, epoch, logs=None):
        path = self.save()
        self.print_fn(f"checkpoint: {path} (step {self.step})")
        self._stop_if_requested()


class NonFiniteStepError(RuntimeError):
    """A training step met a non-finite value and the run was told to stop."""


class NonFiniteStop(keras.callbacks.Callback):
    """Stops training at the first skipped step, naming what went non-finite.

    The optimizers must skip non-finite steps (`skip_nonfinite=True` or loss
    scaling), so the offending update is not applied (and the trainers put
    back the BatchNorm statistics its forward pass wrote). When a step's
    skipped-step count goes up, from the first step of `fit()` on, the batch
    is fetched again with `batch_at(step_index)` and
    `tfmp.diagnostics.first_nonfinite` reports the input, layer output, loss
    or gradient where the first non-finite value appears;
    `NonFiniteStepError` then carries it, with the epoch and step. The
    message says whether the model's variables are finite: a skipped step
    leaves them as they were, which is not finite if an earlier, applied
    update (a learning rate of inf, say) already broke them.

    Args:
        batch_at: Returns the training batch of a 0-based global step index.
        step: Training steps done before this `fit()`.
    """

    def __init__(self, batch_at: Callable[[int], Any], step: int = 0):
        super().__init__()
        self.batch_at = batch_at
        self.step = int(step)
        self._skipped: int | None = None
        self._epoch = 0

    @staticmethod
    def _count(logs: Mapping[str, Any]) -> int:
        return int(sum(value for key, value in logs.items() if key.endswith("skipped_steps") and not key.startswith("val_")))

    def _restored_count(self) -> int:
        """The optimizers' skipped steps now (restored from a checkpoint, or 0)."""
        return int(sum(int(getattr(o, "skipped_steps", 0)) for o in self.model.optimizers.values()))

    def _nonfinite_variables(self) -> list[str]:
        """Paths of the trainer's network variables holding NaN or Inf."""
        return [v.path for v in self.model.variables
                if v.dtype.startswith(("float", "bfloat")) and not np.isfinite(np.asarray(v.numpy(), np.float32)).all()]

    def on_train_begin(self, logs=None):
        # Before the first step: a non-finite first step must count as one.
        self._skipped = self._restored_count()

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        count = self._count(logs or {})
        if self._skipped is None:  # on_train_begin was not called: no baseline but the counts now
            self._skipped = self._restored_count()
        if count > self._skipped:
            report = diagnostics.first_nonfinite(self.model, self.batch_at(self.step - 1))
            broken = self._nonfinite_variables()
            if broken:
                shown = ", ".join(broken[:3]) + (f" and {len(broken) - 3} more" if len(broken) > 3 else "")
                state = (
                    f"the optimizer skipped this step's update, but {len(broken)} of the model's variables already "
                    f"hold NaN or Inf ({shown}): an earlier, applied update wrote them (check the learning rate)"
                )
            else:
                state = "the optimizer skipped this step's update and every variable of the model is finite"
            raise NonFiniteStepError(
                f"Non-finite value at epoch {self._epoch + 1}, step {batch + 1} of the epoch (global step "
                f"{self.step}); {state}. First non-finite: {report}. "
                "Check the input data, or set on_nonfinite=skip to skip such steps and go on."
            )
        self._skipped = count


class RunSegment(keras.callbacks.Callback):
    """Shows `callback` one `fit()` call of a run that takes several, as one run.

    A run resumed in the middle of an epoch finishes that epoch with a short
    `fit()` and then runs the remaining epochs with another. Wrapped in a
    `RunSegment` per call, a callback sees one `on_train_begin` (in the first
    segment) and one `on_train_end` (in the last), the epoch's real batch
    indices (`batch_offset` added) and the real `steps_per_epoch`.

    Args:
        callback: The callback to present the run to.
        first: Whether this is the run's first segment.
        last: Whether this is its last.
        batch_offset: Steps of the first epoch done before this segment.
        params: Values of the whole run that replace the segment's own in
            `params` (`{"steps": steps_per_epoch, "epochs": epochs}`).
    """

    def __init__(
        self, callback: keras.callbacks.Callback, first: bool, last: bool, batch_offset: int = 0,
        params: Mapping[str, Any] | None = None,
    ):
        super().__init__()
        self.callback = callback
        self.first = first
        self.last = last
        self.batch_offset = int(batch_offset)
        self.run_params = dict(params or {})

    def set_model(self, model):
        super().set_model(model)
        self.callback.set_model(model)

    def set_params(self, params):
        super().set_params(params)
        self.callback.set_params({**params, **self.run_params})

    def on_train_begin(self, logs=None):
        if self.first:
            self.callback.on_train_begin(logs)

    def on_train_end(self, logs=None):
        if self.last:
            self.callback.on_train_end(logs)

    def on_epoch_begin(self, epoch, logs=None):
        self.callback.on_epoch_begin(epoch, logs)

    def on_epoch_end(self, epoch, logs=None):
        self.batch_offset = 0  # later epochs of this segment start at batch 0
        self.callback.on_epoch_end(epoch, logs)

    def on_train_batch_begin(self, batch, logs=None):
        self.callback.on_train_batch_begin(batch + self.batch_offset, logs)

    def on_train_batch_end(self, batch, logs=None):
        self.callback.on_train_batch_end(batch + self.batch_offset, logs)

    def on_test_begin(self, logs=None):
        self.callback.on_test_begin(logs)

    def on_test_end(self, logs=None):
        self.callback.on_test_end(logs)

    def on_test_batch_begin(self, batch, logs=None):
        self.callback.on_test_batch_begin(batch, logs)

    def on_test_batch_end(self, batch, logs=None):
        self.callback.on_test_batch_end(batch, logs)
