"""The real input pipeline the `input_pipeline` mode feeds the trainer: training's own, repeated."""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from tfmp.run import tasks
from tfmp.run.shipped import ImageTask

__all__ = ["Pipeline", "training_pipeline"]


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


def training_pipeline(task: tasks.Task) -> Pipeline:
    """The task's training pipeline on its data, exactly as a training run builds it, repeated.

    An image task (`tfmp.run.shipped.ImageTask`) gives the batch sizes
    (`epoch_batch_sizes`); for any other task one epoch of the pipeline is
    read once to count them.
    """
    data = task.load_data()
    if isinstance(task, ImageTask):
        sizes = task.epoch_batch_sizes(data)
    else:
        sizes = tuple(int(tf.nest.flatten(batch)[0].shape[0]) for batch in task.train_data(data))
    return Pipeline(task.train_data(data).repeat(), sizes)
