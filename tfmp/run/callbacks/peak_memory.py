"""`PeakMemory`: the allocator's peak of each epoch, to TensorBoard (`memory/peak_mb`) and the console."""

from __future__ import annotations

import logging
import os

import keras
import tensorflow as tf

from tfmp.run.memory_meters import AllocatorMemory

__all__ = ["PeakMemory"]

log = logging.getLogger(__name__)


class PeakMemory(keras.callbacks.Callback):
    """Writes TensorFlow's allocator peak of every epoch to TensorBoard, and logs the run's highest.

    The peak is what the allocator held at most during the epoch: the
    weights, optimizer slots and data resident between steps, plus the
    step's activations, gradients and workspaces. It is written as the
    scalar `memory/peak_mb` (MiB, at the epoch index) to `tensorboard_dir`, and the
    run's highest is logged (`tfmp.run.output`) at the end of training (`memory: peak ... MiB
    (GPU:0 allocator)`).

    It reads GPU:0's allocator with a GPU. On a CPU it needs TensorFlow's
    BFC allocator, switched on by `TF_CPU_ALLOCATOR_USE_BFC=true` in the
    environment before TensorFlow starts (e.g.
    `TF_CPU_ALLOCATOR_USE_BFC=true python scripts/train.py ...`); without
    it the callback writes and logs nothing.

    Args:
        tensorboard_dir: The run's TensorBoard directory; None writes no
            TensorBoard scalar.
        allocator: The allocator to read; None: `AllocatorMemory.of_this_process()`
            when training begins.

    Attributes:
        peaks_mb: Each epoch's peak, in MiB, in order.
    """

    def __init__(
        self,
        tensorboard_dir: str | None = None,
        allocator: AllocatorMemory | None = None,
    ):
        super().__init__()
        self.tensorboard_dir = tensorboard_dir
        self.allocator = allocator
        self.peaks_mb: list[float] = []
        self._writer = None

    def on_train_begin(self, logs=None):
        if self.allocator is None:
            self.allocator = AllocatorMemory.of_this_process()
        if self.allocator is not None and self.tensorboard_dir is not None:
            self._writer = tf.summary.create_file_writer(os.path.join(self.tensorboard_dir, ""))

    def on_epoch_begin(self, epoch, logs=None):
        if self.allocator is not None:
            self.allocator.reset()

    def on_epoch_end(self, epoch, logs=None):
        if self.allocator is None:
            return
        peak = self.allocator.peak_mb()
        self.peaks_mb.append(peak)
        if self._writer is not None:
            with self._writer.as_default():
                tf.summary.scalar(
                    "memory/peak_mb",
                    peak,
                    step=epoch,
                    description=f"The peak of TensorFlow's {self.allocator.name} allocator over the epoch's "
                    "steps, in MiB: weights, optimizer slots and data, plus the step's activations, gradients "
                    "and workspaces. x: the epoch (0 = the first).",
                )
            self._writer.flush()

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self.peaks_mb:
            log.info(
                f"  memory: peak {max(self.peaks_mb):.1f} MiB ({self.allocator.name} allocator, the highest "
                f"epoch of {len(self.peaks_mb)})"
            )
