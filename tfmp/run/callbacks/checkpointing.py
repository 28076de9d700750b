"""Checkpoints during training, and a clean stop on SIGTERM/SIGINT (`tfmp.run.preemption`)."""

from __future__ import annotations

import logging
import os

import keras

from tfmp.run import checkpoint as checkpoint_lib
from tfmp.run import preemption

__all__ = ["Checkpointing"]

log = logging.getLogger(__name__)


class Checkpointing(keras.callbacks.Callback):
    """Saves the run's checkpoint every `every` steps, every epoch, and on a stop request.

    The checkpoint of an epoch's last step is written at the epoch's end,
    after the callbacks before this one have finished the epoch (in a run,
    `tfmp.run.distribute.AverageReplicaStatistics` averages the replicas'
    BatchNorm statistics there), so a run resumed from it starts the next
    epoch from the state the uninterrupted run had. A stop requested during
    that step is acted on there too.

    With a `tfmp.run.preemption.PreemptionGuard` whose signal has arrived, the
    step in flight finishes, a checkpoint is written and
    `tfmp.run.preemption.Preempted` is raised out of `fit()`.

    With a `tfmp.run.preemption.ClusterStop` (multi-worker runs), a worker's
    own signal is not acted on alone: after every step and at each epoch's
    end every worker gathers every worker's signal, so that all of them save
    at the same step and raise `Preempted` together, whichever was
    signalled.

    Each epoch's checkpoint is logged (`tfmp.run.output`).

    Args:
        checkpoint: The run's `tfmp.run.checkpoint.RunCheckpoint`.
        step: Training steps done before this `fit()` (the restored step).
        every: Also save every this many steps; 0 = only at epoch ends.
        guard: The active preemption guard, if any.
        cluster: Gathers the workers' stop requests in a multi-worker run.
    """

    def __init__(
        self,
        checkpoint: checkpoint_lib.RunCheckpoint,
        step: int = 0,
        every: int = 0,
        guard: preemption.PreemptionGuard | None = None,
        cluster: preemption.ClusterStop | None = None,
    ):
        super().__init__()
        if every < 0:
            raise ValueError(f"every must be >= 0. Received: every={every!r}")
        self.checkpoint = checkpoint
        self.step = int(step)
        self.every = int(every)
        self.guard = guard
        self.cluster = cluster
        self.last_saved: tuple[int, str] | None = None

    def save(self) -> str:
        """Writes a checkpoint at the current step (once per step)."""
        if self.last_saved is None or self.last_saved[0] != self.step:
            self.last_saved = (self.step, self.checkpoint.save(self.step))
        return self.last_saved[1]

    def _stop_if_requested(self) -> None:
        signum = self.guard.signum if self.guard is not None else None
        if self.cluster is None:
            if signum is not None:
                raise preemption.Preempted(signum, self.step, self.save())
            return
        signalled = self.cluster(signum)
        if signalled:
            saved = self.save()  # every worker, at this same step; the chief's is the run's
            self.cluster(signum)  # no worker leaves before every worker's save is written
            run_checkpoint = os.path.join(self.checkpoint.read_directory, os.path.basename(saved))
            raise preemption.Preempted(next(iter(signalled.values())), self.step, run_checkpoint, signalled)

    def _ends_epoch(self, batch: int) -> bool:
        steps = (self.params or {}).get("steps")
        return steps is not None and batch + 1 == steps

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        if self._ends_epoch(batch):
            # Left to on_epoch_end: the epoch's end may still change the state (validation, the
            # replicas' BatchNorm statistics averaged), and a checkpoint of this step must hold that.
            return
        self._stop_if_requested()
        if self.every and self.step % self.every == 0:
            self.save()

    def on_epoch_end(self, epoch, logs=None):
        path = self.save()
        log.info(f"checkpoint: {path} (step {self.step})")
        self._stop_if_requested()
