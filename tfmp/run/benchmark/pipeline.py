"""The real input pipeline the `input_pipeline` mode feeds the trainer: training's own, repeated."""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from tfmp.run import tasks
from tfmp.run.config import ImageConfig

__all__ = ["Pipeline", "epoch_batch_sizes", "training_pipeline"]


@dataclasses.dataclass
class Pipeline:
    """A repeated training pipeline and the batch sizes of one of its epochs.

    Attributes:
        dataset: The `tf.data` pipeline training uses, with `.repeat()`.
        epoch_batch_sizes: Examples in each batch of one epoch, in order; the
            repeated pipeline cycles through them.
    """

    dataset: tf.data.Dataset
    epoch_batch_sizes: tuple[int, ...]


def epoch_batch_sizes(num_examples: int, batch_size: int, drop_remainder: bool) -> tuple[int, ...]:
    """The sizes of the batches one epoch of `num_examples` yields.

    Args:
        num_examples: Examples in the epoch.
        batch_size: Examples per batch.
        drop_remainder: Whether the last incomplete batch is dropped.

    Returns:
        e.g. `(128,) * 11 + (30,)` for 1,438 examples in batches of 128.

    Raises:
        ValueError: when no batch at all results, naming the values.
    """
    full, rest = divmod(num_examples, batch_size)
    sizes = (batch_size,) * full + ((rest,) if rest and not drop_remainder else ())
    if not sizes:
        raise ValueError(
            f"batch_size is larger than the {num_examples} training examples and incomplete batches "
            f"are dropped. Received: batch_size={batch_size!r}"
        )
    return sizes


def training_pipeline(task: tasks.Task) -> Pipeline:
    """The task's training pipeline on its data, exactly as a training run builds it, repeated.

    For an image task the batch sizes follow from its training images; for
    any other task one epoch of the pipeline is read once to count them.
    """
    data = task.load_data()
    if isinstance(task.config, ImageConfig):
        sizes = epoch_batch_sizes(len(data.x_train), task.config.batch_size, task.drop_remainder)
    else:
        sizes = tuple(int(tf.nest.flatten(batch)[0].shape[0]) for batch in task.train_data(data))
    return Pipeline(task.train_data(data).repeat(), sizes)
