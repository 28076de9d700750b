"""A run's training batches, epoch after epoch: the length of an epoch, and the stream a resumed run replays.

Derived from the task's `train_data` (`tfmp.run.tasks.Task`): an epoch is
one pass over the pipeline (capped by `config.steps_per_epoch`), and the
stream is that pipeline repeated in its seeded order, so a fresh pipeline
skipped to a global step lands where a stopped run left off. A task that
knows better defines a method of the same name, which is used instead:

* `steps_per_epoch(data) -> int`, e.g. to count the steps without building
  the pipeline (the shipped image tasks);
* `stream(data, position) -> tf.data.Dataset`, the batches from global step
  `position` on.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tfmp.run.config import ConfigError

__all__ = ["batch_at", "steps_per_epoch", "stream"]


def steps_per_epoch(task: Any, data: Any) -> int:
    """Training steps per epoch: the pipeline's batches, capped by `config.steps_per_epoch`.

    The task's own `steps_per_epoch(data)` when it defines one.

    Args:
        task: A `tfmp.run.tasks.Task`.
        data: What `task.load_data()` returned.

    Raises:
        ConfigError: when the pipeline yields no batch, or repeats forever
            or has an unknown length and `config.steps_per_epoch` is not set.
    """
    own = task.steps_per_epoch(data)
    if own is not None:
        return own
    c = task.config
    batches = int(task.train_data(data).cardinality())
    if batches == 0:
        raise ConfigError(
            f"The training data of {task.name!r} gives no batch of batch_size={c.batch_size}: use a smaller "
            f"batch size or more data. Received: batch_size={c.batch_size}"
        )
    if batches < 0 and c.steps_per_epoch is None:
        if batches == tf.data.INFINITE_CARDINALITY:
            raise ConfigError(
                f"must be set: the training pipeline of {task.name!r} repeats forever, so an epoch has no "
                "end. Set it to the steps of an epoch, or make the pipeline give one epoch (no repeat()).",
                "steps_per_epoch",
                None,
            )
        raise ConfigError(
            f"The length of {task.name!r}'s training pipeline is not known (tf.data cardinality "
            f"{batches}), so an epoch has no end: set steps_per_epoch, or give the dataset its length "
            "with tf.data.experimental.assert_cardinality. Received: steps_per_epoch=None"
        )
    if batches < 0:
        return c.steps_per_epoch
    return min(batches, c.steps_per_epoch or batches)


def stream(task: Any, data: Any, position: int = 0) -> tf.data.Dataset:
    """The training batches from global step `position` on, epoch after epoch in the seeded order.

    The task's own `stream(data, position)` when it defines one.
    """
    own = task.stream(data, position)
    if own is not None:
        return own
    return task.train_data(data).repeat().skip(position)


def batch_at(task: Any, data: Any, index: int) -> Any:
    """The training batch of 0-based global step `index` (the stream's)."""
    return next(iter(stream(task, data, index).take(1)))
