"""Checkpoints during training, and a clean stop on SIGTERM/SIGINT (`tfmp.run.preemption`)."""

from __future__ import annotations

from collections.abc import Callable

import keras

from tfmp.run import checkpoint as checkpoint_lib
from tfmp.run import preemption

__all__ = ["Checkpointing"]


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
