"""`ImageTask`: what the shipped image tasks share, a dataset loaded by name and what follows from its images.

`GANTask` and `ClassifierTask` are image tasks: their data is a
`tfmp.run.data.Split` of images, so they count an epoch's steps and give a
probe without building the pipeline, and their benchmark batch is
synthetic. Only they need `drop_remainder` and `epoch_batch_sizes`, so
those live here and not on `tfmp.run.tasks.Task`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from tfmp import _deprecated
from tfmp.run import data as data_lib
from tfmp.run.config import ConfigError, ImageConfig
from tfmp.run.tasks import Task

__all__ = ["ImageTask", "epoch_batch_sizes", "load", "probe", "steps_per_epoch", "synthetic_batch"]


class ImageTask(Task):
    """A task on an image dataset loaded by name (`config.dataset`), its data a `tfmp.run.data.Split`.

    Subclasses give `train_data` and `build_trainer` (and `labelled`,
    `drop_remainder` where they differ); the data hooks follow from the
    split's training images.

    Attributes:
        drop_remainder: Whether the training pipeline drops a last partial
            batch (the steps of an epoch and the benchmark's pipeline count
            batches so).
        labelled: Whether a training batch holds labels beside the images.
    """

    config: ImageConfig
    example_unit = "img"
    drop_remainder: bool = False
    labelled: bool = True

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """`(height, width, channels)` of the model's images."""
        return self.config.image_shape

    def load_data(self) -> data_lib.Split:
        """The config's dataset at the model's image shape, split by its seed."""
        return load(self.config, self.image_shape)

    def describe_data(self) -> str:
        return f"dataset={self.config.dataset}"

    def steps_per_epoch(self, data: data_lib.Split | int) -> int:
        """Batches of `data`'s training images (or that many), capped by `config.steps_per_epoch`."""
        return steps_per_epoch(self.config, data, self.drop_remainder)

    def probe(self, data: data_lib.Split) -> Any:
        """The first `batch_size` training images (with their labels if `labelled`), in the split's order."""
        return probe(data, self.config.batch_size, self.labelled)

    @property
    def cpu_bfloat16_float32_layers(self) -> str:
        """Deprecated name of `auto_float32_layers` (tfmp 0.1's shipped tasks had it); removed in tfmp 0.3."""
        _deprecated.warn("Task.cpu_bfloat16_float32_layers")
        return self.auto_float32_layers

    def epoch_batch_sizes(self, data: data_lib.Split) -> tuple[int, ...]:
        """Examples in each batch of one training epoch over `data` (the benchmark's input pipeline cycles them)."""
        return epoch_batch_sizes(len(data.x_train), self.config.batch_size, self.drop_remainder)


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


def load(config: ImageConfig, image_shape: tuple[int, int, int]) -> data_lib.Split:
    """`config.dataset` at `image_shape`, split by `config.seed` (`tfmp.run.data.load_images`)."""
    return data_lib.load_images(config.dataset, image_shape, data_dir=config.data_dir, seed=config.seed)


def steps_per_epoch(config: ImageConfig, data: data_lib.Split | int, drop_remainder: bool) -> int:
    """Training steps per epoch over `data`'s training images (or that many), capped by `config.steps_per_epoch`.

    Raises:
        ConfigError: when the batch size leaves no step (incomplete batches
            dropped), naming it.
    """
    num_examples = data if isinstance(data, int) else len(data.x_train)
    size = config.batch_size
    steps = num_examples // size if drop_remainder else -(-num_examples // size)
    if steps == 0:
        raise ConfigError(
            f"batch_size is larger than the {num_examples} training images of dataset {config.dataset!r}, and "
            f"incomplete batches are dropped; use a batch size <= {num_examples}. Received: batch_size={size}"
        )
    return min(steps, config.steps_per_epoch or steps)


def probe(data: data_lib.Split, batch_size: int, labelled: bool) -> Any:
    """The first `batch_size` training examples, in the split's order, through the training pipeline."""
    n = min(batch_size, len(data.x_train))
    labels = data.y_train[:n] if labelled else None
    (batch,) = list(data_lib.make_dataset(data.x_train[:n], labels, batch_size=n, shuffle=False))
    return batch


def synthetic_batch(config: ImageConfig, image_shape: tuple[int, int, int], num_classes: int | None) -> Any:
    """Uniform [0, 1] images of `image_shape` (and int32 labels below `num_classes` unless None), seeded by config."""
    rng = np.random.default_rng(config.seed)
    images = tf.constant(rng.uniform(0.0, 1.0, (config.batch_size, *image_shape)).astype(np.float32))
    if num_classes is None:
        return images
    return images, tf.constant(rng.integers(0, num_classes, config.batch_size).astype(np.int32))
