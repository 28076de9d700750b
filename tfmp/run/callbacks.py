"""Callbacks: the side effects of a training run.

* `StepTimer` times every training step and adds `images_per_sec` (warm-up
  excluded) to each epoch's logs;
* `ConsoleLogger` prints the seed's per-step line and a closing summary;
* `Summaries` writes the logs to TensorBoard every few steps (`batch_` tags,
  at the global step) and every epoch (`epoch_` tags), in the layout the
  trainer asks for, and records the run's hyperparameters (HParams plugin);
* `GeneratorSamples` writes a grid of generator images from fixed noise;
* `GradientDiagnostics` logs the float16 underflow/overflow fractions of the
  gradients every N steps (`tfmp.run.diagnostics`);
* `ProfileSteps` captures a TensorFlow profiler trace of chosen steps;
* `Checkpointing` saves the run every N steps and every epoch, and turns a
  SIGTERM/SIGINT into a checkpoint and a clean stop (`tfmp.run.preemption`);
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

from tfmp.run import checkpoint as checkpoint_lib
from tfmp.run import diagnostics
from tfmp.run import preemption

__all__ = ["CONSOLE_MODES", "Checkpointing", "ConsoleLogger", "GeneratorSamples", "GradientDiagnostics",
           "NonFiniteStepError", "NonFiniteStop", "ProfileSteps", "RunSegment", "StepTimer", "Summaries", "console_mode",
           "describe", "image_grid"]


class StepTimer(keras.callbacks.Callback):
    """Times training steps and reports throughput.

    Each epoch's logs get `images_per_sec` over the epoch's steps after the
    warm-up (no entry for an epoch made only of warm-up steps). A step's time runs from `on_train_batch_begin` to `on_train_batch_end`;
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

    def images_per_sec_since(self, start: int) -> float | None:
        """Images per second over the steps from index `start` on, warm-up excluded (None if none)."""
        measured = self.step_times[max(start, self.warmup_steps):]
        if not measured:
            return None
        return self.images_per_step * len(measured) / sum(measured)

    def on_epoch_end(self, epoch, logs=None):
        # The warm-up steps (tracing, compiling) would make the first epoch's figure a dip.
        throughput = self.images_per_sec_since(self._epoch_start)
        if logs is not None and throughput is not None:
            logs["images_per_sec"] = throughput


CONSOLE_MODES = ("auto", "progress", "lines")


def console_mode(mode: str, stream: Any) -> str:
    """Resolves a console setting to `"progress"` or `"lines"`.

    `"auto"` is a Keras progress bar when `stream` is a terminal (its
    `isatty()` is true) and the seed's step lines otherwise (a pipe, a file,
    a test's captured output, or no stream), so logs stay line by line.

    Args:
        mode: One of `CONSOLE_MODES`.
        stream: Where the progress bar would go (`sys.stdout`), or None.
    """
    if mode not in CONSOLE_MODES:
        raise ValueError(f"Unknown console mode. Valid: {', '.join(CONSOLE_MODES)}. Received: {mode!r}")
    if mode != "auto":
        return mode
    isatty = getattr(stream, "isatty", None)
    return "progress" if isatty is not None and isatty() else "lines"


def _format_number(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.3g}"


class ConsoleLogger(keras.callbacks.Callback):
    """Prints the seed's step line every `log_every` steps, and a summary.

    The line, for the GAN:
    `(epoch, step), G Loss: x, D Loss: y, loss_scale: s, step_time: t, throughput: N img/s`.
    Losses are the epoch's running means, as Keras's progress bar shows them.
    With two loss-scaled optimizers the scales print as `s_g/s_d`; without
    loss scaling, `loss_scale: none`. With `progress=True` a
    `keras.utils.Progbar` per epoch (written to `sys.stdout`, as Keras's
    own) shows the same values instead of the lines. The closing summary gives the mean
    throughput and the skipped steps, per optimizer with several
    (`skipped steps: G 0, D 1`, named after the log-key prefixes).

    Args:
        timer: The run's `StepTimer` (placed before this callback).
        fields: `(label, log key)` pairs to print, e.g. `(("G Loss", "g_loss"),)`.
        loss_scale_prefixes: Log-key prefixes of the loss-scale entries.
        log_every: Print every this many steps (and the last step of each epoch).
        logdir: Where the run's logs are, for the summary.
        print_fn: Where lines go.
        progress: Show a progress bar rather than the step lines.
    """

    def __init__(
        self,
        timer: StepTimer,
        fields: Sequence[tuple[str, str]],
        loss_scale_prefixes: Sequence[str] = ("",),
        log_every: int = 1,
        logdir: str | None = None,
        print_fn: Callable[[str], None] = print,
        progress: bool = False,
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
        self.progress = bool(progress)
        self.final_logs: dict[str, Any] = {}
        self._epoch = 0
        self._steps_in_epoch: int | None = None
        self._bar: keras.utils.Progbar | None = None
        self._bar_step = 0

    def _loss_scale(self, logs: Mapping[str, Any]) -> str:
        scales = [logs[p + "loss_scale"] for p in self.loss_scale_prefixes if p + "loss_scale" in logs]
        return "/".join(_format_number(s) for s in scales) if scales else "none"

    def _skipped(self, logs: Mapping[str, Any]) -> str:
        """`G 0, D 1` with per-optimizer prefixes (`g_`, `d_`), a bare count with one; "" without any."""
        return ", ".join(
            f"{p.rstrip('_').upper()} {int(logs[p + 'skipped_steps'])}" if p else str(int(logs[p + "skipped_steps"]))
            for p in self.loss_scale_prefixes if p + "skipped_steps" in logs
        )

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._steps_in_epoch = self.params.get("steps") if self.params else None
        if self.progress:
            self.print_fn(f"Epoch {epoch + 1}/{self.params.get('epochs', '?') if self.params else '?'}")
            # Every value is shown as logged: the losses already are the epoch's running means.
            self._bar = keras.utils.Progbar(self._steps_in_epoch, stateless_metrics=())

    def _bar_values(self, logs: Mapping[str, Any]) -> list[tuple[str, float]]:
        values = [(label, float(logs[key])) for label, key in self.fields if key in logs]
        values += [(f"{p.rstrip('_').upper()} loss_scale" if p else "loss_scale", float(logs[p + "loss_scale"]))
                   for p in self.loss_scale_prefixes if p + "loss_scale" in logs]
        return values + [("img/s", self.timer.images_per_step / self.timer.last_step_time)]

    def on_train_batch_end(self, batch, logs=None):
        if self._bar is not None:
            self._bar_step = batch + 1
            self._bar.update(self._bar_step, self._bar_values(logs or {}), finalize=False)
            return
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
        if self._bar is not None:
            self._bar.update(self._bar_step, finalize=True)
            self._bar = None
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
            f"  skipped steps: {skipped or 'none (no loss scaling)'}; final {finals}",
        ]
        if self.logdir:
            parent = os.path.dirname(os.path.normpath(self.logdir)) or "."
            lines.append(f"  logs: {self.logdir}  (view: tensorboard --logdir {parent})")
        for line in lines:
            self.print_fn(line)


# What each logged quantity is, by the end of its log key; per-step (`batch_`) and per-epoch (`epoch_`) text.
_DESCRIPTIONS = (
    ("skipped_steps",
     "Cumulative count of skipped steps since the run began (resumes included): steps whose gradients held "
     "NaN/Inf, so the update was not applied (and a dynamic loss scale was halved). It never decreases; "
     "a rise marks skipped steps.",
     "Cumulative count of skipped steps since the run began, at the end of the epoch (not the epoch's own count)."),
    ("loss_scale",
     "The optimizer's loss scale after this step (dynamic scaling halves it on a skipped step and doubles it "
     "after a run of finite ones).",
     "The optimizer's loss scale at the end of the epoch."),
    ("images_per_sec",
     "Training throughput in images per second over the steps since the previous point, the run's warm-up "
     "steps (tracing, compilation) excluded.",
     "Training throughput in images per second over the epoch's steps, the run's warm-up steps excluded."),
    ("loss",
     "Mean loss over the epoch's steps so far (the running mean Keras logs per batch).",
     "Mean loss over the epoch's steps."),
    ("accuracy",
     "Mean accuracy over the epoch's steps so far (the running mean Keras logs per batch).",
     "Mean accuracy over the epoch's steps (validation: over the validation set)."),
)


def describe(name: str, per_step: bool) -> str:
    """The TensorBoard description of a logged quantity (a log key without `g_`/`val_` prefixes).

    Args:
        name: The quantity, e.g. `loss`, `loss_scale`, `skipped_steps`.
        per_step: The `batch_` (per-step) text rather than the `epoch_` one.
    """
    axis = ("x: the run's global training step (1 = after the first step; continues across epochs and resumes)."
            if per_step else "x: the epoch (0 = the first).")
    for suffix, step_text, epoch_text in _DESCRIPTIONS:
        if name.endswith(suffix):
            return f"{step_text if per_step else epoch_text} {axis}"
    return f"The training log {name!r}, {'logged every few steps' if per_step else 'at the end of each epoch'}. {axis}"


class Summaries(keras.callbacks.Callback):
    """Writes the training curves to TensorBoard, and the run's hyperparameters.

    Tags follow Keras's `keras.callbacks.TensorBoard`: `batch_<name>` every
    `log_every` global steps, at the global step (counted from 1 over the
    whole run: `step` steps done before this `fit()`, then one more per
    step, so a resumed run continues its curves), and `epoch_<name>` at the
    end of each epoch, at the epoch index (from 0). Each log key is sent
    where `route(key)` says: a `(sub-run, name)` pair, the sub-run being a
    directory under `logdir` ("" for `logdir` itself). Every scalar carries a
    description (`describe`). With a `StepTimer`, `batch_images_per_sec` is
    the throughput since the previous point, warm-up steps excluded (not
    written while every step since is warm-up). The hyperparameters go to
    `logdir` with the HParams plugin, so runs can be compared in its table.

    Args:
        logdir: The run's directory.
        route: Maps a log key to `(sub-run, name)`; a task's
            `summary_route` (`tfmp.run.tasks`).
        hparams: Hyperparameters to record (str, bool, int or float values).
        log_every: Write the per-step scalars every this many global steps.
        step: Training steps done before this `fit()` (the restored step).
        timer: The run's `StepTimer` (placed before this callback), for the
            per-step throughput; None writes none.
    """

    def __init__(
        self,
        logdir: str,
        route: Callable[[str], tuple[str, str]],
        hparams: Mapping[str, Any] | None = None,
        log_every: int = 1,
        step: int = 0,
        timer: StepTimer | None = None,
    ):
        super().__init__()
        if log_every < 1 or step < 0:
            raise ValueError(f"log_every must be >= 1 and step >= 0. Received: log_every={log_every!r}, step={step!r}")
        self.logdir = logdir
        self.route = route
        self.hparams = dict(hparams or {})
        self.log_every = int(log_every)
        self.step = int(step)
        self.timer = timer
        self._writers: dict[str, Any] = {}
        self._timed = 0  # the timer's steps already covered by a batch_images_per_sec point

    def writer(self, run: str):
        """The summary writer of a sub-run, created on first use."""
        if run not in self._writers:
            self._writers[run] = tf.summary.create_file_writer(os.path.join(self.logdir, run))
        return self._writers[run]

    def on_train_begin(self, logs=None):
        self._timed = 0
        if self.hparams:
            with self.writer("").as_default():
                hparams_api.hparams(self.hparams, trial_id=os.path.basename(os.path.normpath(self.logdir)))

    def _write(self, logs: Mapping[str, Any], prefix: str, step: int) -> None:
        for key, value in logs.items():
            if value is None or not np.isscalar(value) and np.ndim(value):
                continue
            run, name = self.route(key)
            with self.writer(run).as_default():
                tf.summary.scalar(f"{prefix}_{name}", float(value), step=step,
                                  description=describe(name, per_step=prefix == "batch"))

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        if self.step % self.log_every:
            return
        logs = {k: v for k, v in (logs or {}).items() if k != "images_per_sec"}
        if self.timer is not None:
            throughput = self.timer.images_per_sec_since(self._timed)
            self._timed = len(self.timer.step_times)
            if throughput is not None:
                logs["images_per_sec"] = throughput
        self._write(logs, "batch", self.step)

    def on_epoch_end(self, epoch, logs=None):
        self._write(logs or {}, "epoch", epoch)
        for writer in self._writers.values():
            writer.flush()

    def on_train_end(self, logs=None):
        for writer in self._writers.values():
            writer.close()
        self._writers = {}


def image_grid(images: np.ndarray, columns: int | None = None, gap: int = 0, gap_value: float = 1.0) -> np.ndarray:
    """Tiles `(n, h, w, c)` images into one image, `gap` pixels of `gap_value` between tiles.

    The result is `(rows*h + (rows-1)*gap, columns*w + (columns-1)*gap, c)`:
    the gaps separate tiles, with no border around the grid. Missing cells
    of the last row are left black (0). `columns` defaults to
    `ceil(sqrt(n))`.
    """
    images = np.asarray(images)
    if images.ndim != 4 or len(images) == 0:
        raise ValueError(f"images must be (n, h, w, c) with n >= 1. Received shape: {images.shape}")
    if gap < 0:
        raise ValueError(f"gap must be >= 0. Received: gap={gap!r}")
    n, h, w, c = images.shape
    columns = columns or math.ceil(math.sqrt(n))
    rows = math.ceil(n / columns)
    grid = np.full((rows * (h + gap) - gap, columns * (w + gap) - gap, c), gap_value, images.dtype)
    for i in range(rows * columns):
        r, col = divmod(i, columns)
        top, left = r * (h + gap), col * (w + gap)
        grid[top:top + h, left:left + w] = images[i] if i < n else 0
    return grid


class GeneratorSamples(keras.callbacks.Callback):
    """Writes a grid of generator images from fixed noise every epoch.

    The same noise every epoch shows how the generator's output evolves.
    Tiles are separated by `gap` white (1.0) pixels, so neighbouring samples
    do not run into each other. The
    generator runs in inference mode (BatchNorm uses its moving statistics).

    Args:
        logdir: Directory of the summary (e.g. the run's `generator/`).
        generator: The generator model.
        noise: Fixed noise, `(n, latent_dim)`.
        tag: The image summary's tag.
        gap: Pixels between tiles.
    """

    def __init__(self, logdir: str, generator: keras.Model, noise: np.ndarray, tag: str = "samples", gap: int = 2):
        super().__init__()
        self.gap = int(gap)
        self.logdir = logdir
        self.generator = generator
        self.noise = np.asarray(noise, np.float32)
        self.tag = tag
        self._writer = None

    def on_epoch_end(self, epoch, logs=None):
        images = keras.ops.convert_to_numpy(self.generator(self.noise, training=False)).astype(np.float32)
        grid = image_grid(np.clip(images, 0.0, 1.0), gap=self.gap, gap_value=1.0)
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

    Every `every` training steps it runs `tfmp.run.diagnostics.gradient_report`
    on a fixed probe batch with the current weights and loss scales, and
    writes the underflow, subnormal and overflow fractions (unscaled and at
    the loss scale) and log2|g| histograms to the run's `diagnostics`
    sub-run (`tfmp.run.diagnostics.write_gradient_summaries`). The float32
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

    With a `tfmp.run.preemption.PreemptionGuard` whose signal has arrived, the
    step in flight finishes, a checkpoint is written and
    `tfmp.run.preemption.Preempted` is raised out of `fit()`.

    Args:
        checkpoint: The run's `tfmp.run.checkpoint.RunCheckpoint`.
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
    `tfmp.run.diagnostics.first_nonfinite` reports the input, layer output, loss
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
