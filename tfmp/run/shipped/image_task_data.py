"""The image data the shipped tasks share: a dataset loaded by name, its epochs, its probe and a synthetic batch.

Plain functions of the task's config, which `GANTask` and `ClassifierTask`
call from their own methods (composed, not inherited).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from tfmp.run import data as data_lib
from tfmp.run.config import ConfigError, ImageConfig

__all__ = ["load", "probe", "steps_per_epoch", "synthetic_batch"]


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
