"""TensorBoard writing: training curves, hyperparameters, generator samples, gradient numerics.

* `Summaries` writes the logs every few steps (`batch_` tags, at the global
  step) and every epoch (`epoch_` tags), in the layout the trainer asks for,
  each with a description (`describe`), and records the run's
  hyperparameters (HParams plugin);
* `GeneratorSamples` writes a grid of generator images (`image_grid`) from
  fixed noise;
* `GradientDiagnostics` logs the float16 underflow/overflow fractions of the
  gradients every N steps (`tfmp.run.diagnostics`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from tensorboard.plugins.hparams import api as hparams_api

from tfmp import _deprecated
from tfmp.run import _private_apis, diagnostics
from tfmp.run.callbacks.step_timer import THROUGHPUT_KEYS, StepTimer

__all__ = ["GeneratorSamples", "GradientDiagnostics", "Summaries", "describe", "image_grid"]


# What each logged quantity is, by the end of its log key; per-step (`batch_`) and per-epoch (`epoch_`) text.
_DESCRIPTIONS = (
    (
        "skipped_steps",
        "Cumulative count of skipped steps since the run began (resumes included): steps whose gradients held "
        "NaN/Inf, so the update was not applied (and a dynamic loss scale was halved). It never decreases; "
        "a rise marks skipped steps.",
        "Cumulative count of skipped steps since the run began, at the end of the epoch (not the epoch's own count).",
    ),
    (
        "loss_scale",
        "The optimizer's loss scale after this step (dynamic scaling halves it on a skipped step and doubles it "
        "after a run of finite ones).",
        "The optimizer's loss scale at the end of the epoch.",
    ),
    (
        "learning_rate",
        "The optimizer's learning rate after this step: the one its next step applies (a schedule's value at the "
        "optimizer's step count, which a skipped step does not advance).",
        "The optimizer's learning rate at the end of the epoch (as Keras's TensorBoard callback logs it).",
    ),
    (
        "images_per_sec",
        "Training throughput in images per second over the steps since the previous point, the run's warm-up "
        "steps (tracing, compilation) excluded.",
        "Training throughput in images per second over the epoch's steps, the run's warm-up steps excluded.",
    ),
    (
        "examples_per_sec",
        "Training throughput in examples per second over the steps since the previous point, the run's warm-up "
        "steps (tracing, compilation) excluded.",
        "Training throughput in examples per second over the epoch's steps, the run's warm-up steps excluded.",
    ),
    (
        "loss",
        "Mean loss over the epoch's steps so far (the running mean Keras logs per batch).",
        "Mean loss over the epoch's steps.",
    ),
    (
        "accuracy",
        "Mean accuracy over the epoch's steps so far (the running mean Keras logs per batch).",
        "Mean accuracy over the epoch's steps (validation: over the validation set).",
    ),
)


def describe(name: str, per_step: bool) -> str:
    """The TensorBoard description of a logged quantity (a log key without `g_`/`val_` prefixes).

    Args:
        name: The quantity, e.g. `loss`, `loss_scale`, `skipped_steps`.
        per_step: The `batch_` (per-step) text rather than the `epoch_` one.
    """
    axis = (
        "x: the run's global training step (1 = after the first step; continues across epochs and resumes)."
        if per_step
        else "x: the epoch (0 = the first)."
    )
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
    directory under `tensorboard_dir` ("" for `tensorboard_dir` itself).
    Every scalar carries a description (`describe`). With a `StepTimer`,
    `batch_images_per_sec` (`batch_examples_per_sec` for a timer counting
    examples: its `log_key`) is the throughput since the previous point,
    warm-up steps excluded (not written while every step since is warm-up).
    The hyperparameters go to `tensorboard_dir` with the HParams plugin, so
    runs can be compared in its table.

    Args:
        tensorboard_dir: The run's TensorBoard directory (`Directories.tensorboard_dir`);
            `logdir=` is its deprecated name.
        route: Maps a log key to `(sub-run, name)`; a task's
            `summary_route` (`tfmp.run.callbacks.display`).
        hparams: Hyperparameters to record (str, bool, int or float values).
        log_every: Write the per-step scalars every this many global steps.
        step: Training steps done before this `fit()` (the restored step).
        timer: The run's `StepTimer` (placed before this callback), for the
            per-step throughput; None writes none.
    """

    @_deprecated.renamed_argument("Summaries(logdir)")
    def __init__(
        self,
        tensorboard_dir: str,
        route: Callable[[str], tuple[str, str]],
        hparams: Mapping[str, Any] | None = None,
        log_every: int = 1,
        step: int = 0,
        timer: StepTimer | None = None,
    ):
        super().__init__()
        if log_every < 1 or step < 0:
            raise ValueError(f"log_every must be >= 1 and step >= 0. Received: log_every={log_every!r}, step={step!r}")
        self.tensorboard_dir = tensorboard_dir
        self.route = route
        self.hparams = dict(hparams or {})
        self.log_every = int(log_every)
        self.step = int(step)
        self.timer = timer
        self._writers: dict[str, Any] = {}
        self._timed = 0  # the timer's steps already covered by a per-step throughput point

    def writer(self, run: str):
        """The summary writer of a sub-run, created on first use."""
        if run not in self._writers:
            self._writers[run] = tf.summary.create_file_writer(os.path.join(self.tensorboard_dir, run))
        return self._writers[run]

    def on_train_begin(self, logs=None):
        self._timed = 0
        if self.hparams:
            with self.writer("").as_default():
                hparams_api.hparams(self.hparams, trial_id=os.path.basename(os.path.normpath(self.tensorboard_dir)))

    def _write(self, logs: Mapping[str, Any], prefix: str, step: int) -> None:
        for key, value in logs.items():
            if value is None or not np.isscalar(value) and np.ndim(value):
                continue
            run, name = self.route(key)
            # On the host: on a GPU the summary's own eager ops (its recording condition, the value) would run
            # there, and reading the condition back would wait for the step.
            with self.writer(run).as_default(), _private_apis.on_host():
                tf.summary.scalar(
                    f"{prefix}_{name}", float(value), step=step, description=describe(name, per_step=prefix == "batch")
                )

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        if self.step % self.log_every:
            return
        logs = {k: v for k, v in (logs or {}).items() if k not in THROUGHPUT_KEYS.values()}
        if self.timer is not None:
            throughput = self.timer.images_per_sec_since(self._timed)
            self._timed = len(self.timer.step_times)
            if throughput is not None:
                logs[self.timer.log_key] = throughput
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
        grid[top : top + h, left : left + w] = images[i] if i < n else 0
    return grid


class GeneratorSamples(keras.callbacks.Callback):
    """Writes a grid of generator images from fixed noise every epoch.

    The same noise every epoch shows how the generator's output evolves.
    Tiles are separated by `gap` white (1.0) pixels, so neighbouring samples
    do not run into each other. The
    generator runs in inference mode (BatchNorm uses its moving statistics).

    Args:
        summary_dir: The folder the image summary is written to, a sub-run
            of the run's TensorBoard directory (the GAN's `generator/`);
            `logdir=` is its deprecated name.
        generator: The generator model.
        noise: Fixed noise, `(n, latent_dim)`.
        tag: The image summary's tag.
        gap: Pixels between tiles.
    """

    @_deprecated.renamed_argument("GeneratorSamples(logdir)")
    def __init__(self, summary_dir: str, generator: keras.Model, noise: np.ndarray, tag: str = "samples", gap: int = 2):
        super().__init__()
        self.gap = int(gap)
        self.summary_dir = summary_dir
        self.generator = generator
        self.noise = np.asarray(noise, np.float32)
        self.tag = tag
        self._writer = None

    def on_epoch_end(self, epoch, logs=None):
        images = keras.ops.convert_to_numpy(self.generator(self.noise, training=False)).astype(np.float32)
        grid = image_grid(np.clip(images, 0.0, 1.0), gap=self.gap, gap_value=1.0)
        if self._writer is None:
            self._writer = tf.summary.create_file_writer(self.summary_dir)
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
        tensorboard_dir: The run's TensorBoard directory; `logdir=` is its
            deprecated name.
    """

    @_deprecated.renamed_argument("GradientDiagnostics(logdir)")
    def __init__(self, probe: Any, every: int, tensorboard_dir: str):
        super().__init__()
        if every < 1:
            raise ValueError(f"every must be >= 1. Received: every={every!r}")
        self.probe = probe
        self.every = int(every)
        self.tensorboard_dir = tensorboard_dir
        self.reports: list[tuple[int, Any]] = []
        self._step = 0
        self._reference = None

    def on_train_begin(self, logs=None):
        self._reference = self.model.float32_copy()

    def on_train_batch_end(self, batch, logs=None):
        self._step += 1
        if self._step % self.every:
            return
        report = diagnostics.gradient_report(self.model, self.probe, reference=self._reference)
        diagnostics.write_gradient_summaries(report, self.tensorboard_dir, self._step)
        self.reports.append((self._step, report))
