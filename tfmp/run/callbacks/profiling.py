"""Profiling: a TensorFlow profiler trace of chosen training steps."""

from __future__ import annotations

import logging

import keras
import tensorflow as tf

from tfmp import _deprecated
from tfmp.run import _private_apis

__all__ = ["ProfileSteps"]

log = logging.getLogger(__name__)


class ProfileSteps(keras.callbacks.Callback):
    """Captures a TensorFlow profiler trace of training steps `start`..`end`.

    Steps are counted from 1 across epochs, both ends included, as Keras's
    `TensorBoard(profile_batch=(start, end))` counts them; start after the
    warm-up so tracing and compilation stay out of the trace (the GAN tutorial's
    DLProf `--iter_start`). The trace goes to `<tensorboard_dir>/plugins/profile/`,
    where TensorBoard's profile plugin (`pip install tensorboard-plugin-profile`)
    opens it; each step is marked with `tf.profiler.experimental.Trace`, so
    the plugin's step-time view works. A run shorter than `end` stops the
    trace at its last step. Like Keras, a profiler that cannot start (one is
    already running) is reported and does not stop training. The trace's
    location is logged (`tfmp.run.output`).

    Args:
        start: First profiled step (>= 1).
        end: Last profiled step (>= start).
        tensorboard_dir: The run's TensorBoard directory; `logdir=` is its
            deprecated name.
    """

    @_deprecated.renamed_argument("ProfileSteps(logdir)")
    def __init__(self, start: int, end: int, tensorboard_dir: str):
        super().__init__()
        if not 1 <= start <= end:
            raise ValueError(f"Profile steps must satisfy 1 <= start <= end. Received: start={start!r}, end={end!r}")
        self.start, self.end = int(start), int(end)
        self.tensorboard_dir = tensorboard_dir
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
                tf.profiler.experimental.start(self.tensorboard_dir)
                self._active = True
            except (tf.errors.AlreadyExistsError, tf.errors.UnavailableError) as e:
                log.warning(f"warning: the profiler could not start ({e.message}); no trace is written.")
        if self._active:
            self._trace = _private_apis.step_trace("train", self._step)
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
            log.info(f"profiled steps {steps}: tensorboard --logdir {self.tensorboard_dir} (Profile tab)")
