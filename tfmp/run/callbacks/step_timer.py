"""Step timing: how long each training step takes, and the run's throughput.

`StepTimer` times every training step and adds the throughput (warm-up
excluded) to each epoch's logs, under the key its unit names
(`THROUGHPUT_KEYS`: `images_per_sec` for images, `examples_per_sec`
otherwise); `ConsoleLogger` and `Summaries` read it.
"""

from __future__ import annotations

import time

import keras

__all__ = ["THROUGHPUT_KEYS", "StepTimer"]

# What a task's throughput counts (`tfmp.run.tasks.Task.example_unit`) -> its log key and TensorBoard tag.
THROUGHPUT_KEYS = {"img": "images_per_sec", "ex": "examples_per_sec"}


class StepTimer(keras.callbacks.Callback):
    """Times training steps and reports throughput.

    Each epoch's logs get the throughput over the epoch's steps after the
    warm-up, as `log_key` (`images_per_sec`, or `examples_per_sec` for a
    unit of `"ex"`; no entry for an epoch made only of warm-up steps). A step's time
    runs from `on_train_batch_begin` to `on_train_batch_end`; Keras converts
    the step's logs to Python numbers before the latter, so the step has
    finished on the device by then.

    Args:
        images_per_step: Images (or examples) one step processes (for the
            GAN, twice the batch: real and fake, as the GAN tutorial counts).
        warmup_steps: Leading steps of the run left out of
            `mean_images_per_sec`: they include tracing and compilation.
        unit: What a step's `images_per_step` are: `"img"` (images) or
            `"ex"` (examples of a model that does not take images).

    Attributes:
        unit: As given; the console shows throughput in `<unit>/s`.
        log_key: The epoch logs' (and TensorBoard's) name of the throughput.
    """

    def __init__(self, images_per_step: int, warmup_steps: int = 3, unit: str = "img"):
        super().__init__()
        if images_per_step < 1 or warmup_steps < 0:
            raise ValueError(
                "images_per_step must be >= 1 and warmup_steps >= 0. Received: "
                f"images_per_step={images_per_step!r}, warmup_steps={warmup_steps!r}"
            )
        if unit not in THROUGHPUT_KEYS:
            raise ValueError(f"unit must be one of {', '.join(map(repr, THROUGHPUT_KEYS))}. Received: unit={unit!r}")
        self.images_per_step = int(images_per_step)
        self.warmup_steps = int(warmup_steps)
        self.unit = unit
        self.log_key = THROUGHPUT_KEYS[unit]
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
        measured = self.step_times[self.warmup_steps :]
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
        measured = self.step_times[max(start, self.warmup_steps) :]
        if not measured:
            return None
        return self.images_per_step * len(measured) / sum(measured)

    def on_epoch_end(self, epoch, logs=None):
        # The warm-up steps (tracing, compiling) would make the first epoch's figure a dip.
        throughput = self.images_per_sec_since(self._epoch_start)
        if logs is not None and throughput is not None:
            logs[self.log_key] = throughput
