"""Checkpoints that resume a run exactly, and survive being killed mid-write.

A `RunCheckpoint` holds everything a step changes, as TensorFlow checkpoint
objects managed by one `tf.train.CheckpointManager`:

* every variable of the trainer: the networks' weights and BatchNorm
  statistics, and the trainer's random-generator states (the GAN's noise);
* every optimizer's variables: iterations, slots, learning rate, and for a
  `tfmp.LossScaleOptimizer` the scale, its growth and hysteresis counters
  and the skipped-step count;
* the global step, from which the epoch and the position in the data
  follow (`tfmp.training` replays the data stream to that position);
* the run's signature: what must not change between the run that wrote a
  checkpoint and the one that resumes from it (model, precision, loss
  scaling, optimizers, data order). A mismatch is refused, naming it.

Writes are crash-safe by construction: TensorFlow writes a checkpoint's
files first and only then, atomically, the `checkpoint` state file that
names the latest one. A process killed mid-write leaves the previous
checkpoint as the latest. Reading is defensive too: `latest()` reads every
tensor of the newest checkpoint before trusting it, and falls back to the
one before, saying so, when it is truncated or corrupt.

Typical use (what `tfmp.training` does):

```python
ckpt = RunCheckpoint(directory, trainer, signature, keep=3)
found = ckpt.latest(print_fn=print)          # None: nothing to resume
if found:
    step = ckpt.restore(found)               # raises CheckpointError on mismatch
...
ckpt.save(step)
```
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from typing import Any, Callable, Iterator, Mapping

import tensorflow as tf

__all__ = ["CheckpointError", "Found", "RunCheckpoint", "op_determinism"]

_STEP_KEY = "step/.ATTRIBUTES/VARIABLE_VALUE"
_SIGNATURE_KEY = "signature/.ATTRIBUTES/VARIABLE_VALUE"


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed from; the message names the file."""


@dataclasses.dataclass(frozen=True)
class Found:
    """A readable checkpoint.

    Attributes:
        path: The checkpoint's prefix (`<dir>/ckpt-N`).
        step: Training steps done when it was written.
        signature: The run signature it was written with.
    """

    path: str
    step: int
    signature: dict[str, Any]


def _read_all(path: str) -> tuple[int, dict[str, Any]]:
    """Reads every tensor of a checkpoint; returns its step and signature.

    Raises:
        Exception: (tf.errors.OpError, IndexError, ValueError, ...) if any
        part is missing, truncated or corrupt.
    """
    reader = tf.train.load_checkpoint(path)
    for key in reader.get_variable_to_shape_map():
        reader.get_tensor(key)  # reads (and checksums) the data
    step = int(reader.get_tensor(_STEP_KEY))
    signature = json.loads(reader.get_tensor(_SIGNATURE_KEY).decode("utf-8"))
    return step, signature


def _differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    keys = sorted(set(saved) | set(current))
    return [
        f"{key}: checkpoint {json.dumps(saved.get(key), sort_keys=True)[:200]}, "
        f"this run {json.dumps(current.get(key), sort_keys=True)[:200]}"
        for key in keys
        if saved.get(key) != current.get(key)
    ]


class RunCheckpoint:
    """The checkpoints of one training run.

    Args:
        directory: Where the checkpoints go (created if missing).
        trainer: A `tfmp.trainers` trainer, compiled, with its optimizers
            built (its `optimizers` mapping names them).
        signature: JSON-serialisable settings a resume must match.
        keep: How many checkpoints to keep (>= 1; keep 2 or more so that a
            corrupt newest one has a fallback).
        read_directory: Where to resume from, if not `directory`. Under
            multi-worker training every worker restores the chief's
            checkpoints (a filesystem all workers see) but the others write
            their own copies to private directories.
    """

    def __init__(
        self, directory: str, trainer: Any, signature: Mapping[str, Any], keep: int = 3,
        read_directory: str | None = None,
    ):
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be an integer >= 1. Received: keep={keep!r}")
        self.directory = directory
        self.signature = json.loads(json.dumps(signature, sort_keys=True, default=str))
        self._step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self._signature = tf.Variable(json.dumps(self.signature, sort_keys=True), dtype=tf.string, trainable=False)
        objects: dict[str, Any] = {
            "model": list(trainer.variables),
            "step": self._step,
            "signature": self._signature,
        }
        for name, optimizer in trainer.optimizers.items():
            if not optimizer.built:
                raise ValueError(f"Build the optimizer of {name!r} before checkpointing (trainer.compile does).")
            objects[f"optimizer_{name}"] = list(optimizer.variables)
        self._checkpoint = tf.train.Checkpoint(**objects)
        self._manager = tf.train.CheckpointManager(self._checkpoint, directory, max_to_keep=keep)
        self.read_directory = read_directory or directory
        self._reader = self._manager
        if self.read_directory != directory:
            self._reader = tf.train.CheckpointManager(self._checkpoint, self.read_directory, max_to_keep=keep)

    @property
    def checkpoints(self) -> list[str]:
        """The checkpoints to resume from that the state file lists, oldest first."""
        return list(self._reader.checkpoints)

    def save(self, step: int) -> str:
        """Writes a checkpoint of the current state after `step` steps; returns its path."""
        self._step.assign(step)
        return self._manager.save(checkpoint_number=step)

    def latest(self, print_fn: Callable[[str], None] = print) -> Found | None:
        """The newest checkpoint that reads back completely, or None if there is none.

        An unreadable newest checkpoint (truncated, corrupt, half-written by
        a killed process) is skipped with a message naming it and the one
        used instead.

        Raises:
            CheckpointError: when checkpoints exist but none can be read.
        """
        candidates = list(reversed(self.checkpoints))
        if not candidates:
            # A state file that lists nothing (or is missing) while data files exist is still
            # worth reporting: the user asked to resume from this directory.
            return None
        failures = []
        for path in candidates:
            try:
                step, signature = _read_all(path)
            except Exception as e:  # noqa: BLE001 - TF raises OpError, IndexError, ValueError... for bad files
                reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                failures.append(f"{path} ({reason})")
                continue
            if failures:
                print_fn(
                    f"warning: checkpoint {failures[-1]} is unreadable; resuming from the previous one, {path}"
                )
            return Found(path, step, signature)
        raise CheckpointError(
            "No checkpoint in this directory can be read: " + "; ".join(failures)
            + ". Start a new run (another --run_name or --checkpoint_dir) or restore the files."
        )

    def check_signature(self, found: Found) -> None:
        """Raises `CheckpointError` naming every setting that differs from `found`'s."""
        differences = _differences(found.signature, self.signature)
        if differences:
            raise CheckpointError(
                f"Checkpoint {found.path} was written by a different run; resume with the same settings, "
                f"or start a new run (another --run_name or --checkpoint_dir). Differences: "
                + "; ".join(differences)
            )

    def restore(self, found: Found) -> int:
        """Restores `found` into the trainer and optimizers; returns its step.

        Raises:
            CheckpointError: when the signatures differ, or the checkpoint's
                variables do not fit this trainer (another model).
        """
        self.check_signature(found)
        try:
            status = self._checkpoint.read(found.path)
            status.assert_existing_objects_matched()  # every variable here got a value
            status.expect_partial()  # the manager's save counter is not restored
        except (AssertionError, ValueError, tf.errors.OpError) as e:
            raise CheckpointError(
                f"Checkpoint {found.path} does not fit this model and optimizers ({str(e).splitlines()[0]}). "
                "It was written by another model; start a new run (another --run_name or --checkpoint_dir)."
            ) from None
        return int(self._step.numpy())


@contextlib.contextmanager
def op_determinism(enabled: bool = True) -> Iterator[None]:
    """Turns TensorFlow's op determinism on inside the block, then restores it.

    `tf.config.experimental.enable_op_determinism` is process-wide and has no
    public off switch; this uses TensorFlow's own internal one to restore the
    previous setting, so a library call does not leave it behind.
    """
    from tensorflow.python.framework import config as tf_config  # no public getter/disable

    before = tf_config.is_op_determinism_enabled()
    if enabled and not before:
        tf_config.enable_op_determinism()
    try:
        yield
    finally:
        if enabled and not before:
            tf_config.disable_op_determinism()
