"""The `tf.data` pipelines: `make_dataset` for image arrays, `batched` for any examples a task holds."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

__all__ = ["batched", "make_dataset"]


def make_dataset(
    x: np.ndarray,
    y: np.ndarray | None = None,
    *,
    batch_size: int,
    shuffle: bool = True,
    drop_remainder: bool = False,
    seed: int | None = None,
) -> tf.data.Dataset:
    """Builds the input pipeline: cache, shuffle, batch, scale, prefetch.

    The arrays are cached as given, so uint8 images take a quarter of the
    memory of float32 ones. After batching, one vectorized `map` casts
    integer images to float32 and divides by 255; this scaling happens in
    float32 on the host, and the model's first layer casts the batch to its
    compute dtype. Float images pass through unchanged (assumed already in
    [0, 1]). Labels are cast to int32.

    Args:
        x: Images, uint8 (or another integer type) in [0, 255], or float
            already in [0, 1].
        y: Optional labels.
        batch_size: Examples per batch, > 0.
        shuffle: Reshuffle every epoch (with `seed` for a repeatable order).
        drop_remainder: Drop the last partial batch (the GAN does).
        seed: Shuffle seed.

    Returns:
        A `tf.data.Dataset` of `x` batches or `(x, y)` batches.

    Raises:
        ValueError: if `batch_size` is not positive.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be > 0. Received: batch_size={batch_size!r}")
    ds = tf.data.Dataset.from_tensor_slices(x if y is None else (x, y)).cache()
    if shuffle:
        ds = ds.shuffle(len(x), seed=seed, reshuffle_each_iteration=True)
    ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    image_spec = ds.element_spec if y is None else ds.element_spec[0]
    scale = image_spec.dtype.is_integer

    def to_model_inputs(images):
        return tf.cast(images, tf.float32) / 255.0 if scale else images

    if y is None:
        ds = ds.map(to_model_inputs, num_parallel_calls=tf.data.AUTOTUNE)
    else:
        ds = ds.map(
            lambda images, labels: (to_model_inputs(images), tf.cast(labels, tf.int32)),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
    return ds.prefetch(tf.data.AUTOTUNE)


_SHUFFLE_BUFFER = 10_000  # examples, for a dataset whose length is unknown or larger


def batched(
    source: Any,
    *,
    batch_size: int,
    seed: int,
    shuffle: bool = True,
    drop_remainder: bool = False,
) -> tf.data.Dataset:
    """One epoch of batches of `source`, in the order `seed` fixes.

    A fresh call returns the same order again (and `.repeat()` the same
    sequence of epochs), which is what an exact resume replays.

    Args:
        source: The examples, in one of three forms:

            * arrays: `(x, y)` or `(x, y, sample_weight)`, or `x` alone; `x`
              may be a dict of arrays (named inputs) and `y` integer labels,
              one-hot rows or regression targets. Shuffled (all examples) and
              batched here.
            * a `tf.data.Dataset` of single examples (not batched): shuffled
              (a buffer of up to 10,000 examples) and batched here.
            * a function `(batch_size, seed) -> tf.data.Dataset` returning
              batches: used as it is, so it decides the shuffling and must
              give the same order for the same seed.
        batch_size: Examples per batch.
        seed: Seed of the shuffle.
        shuffle: Reshuffle every epoch (False for validation data).
        drop_remainder: Drop the last incomplete batch.

    Returns:
        A `tf.data.Dataset` of batches, prefetched.

    Raises:
        TypeError: for a `source` of another kind, naming it.
    """
    if callable(source) and not isinstance(source, tf.data.Dataset):
        dataset = source(batch_size, seed)
        if not isinstance(dataset, tf.data.Dataset):
            raise TypeError(
                "A data function must return a tf.data.Dataset of batches. "
                f"Received: {getattr(source, '__name__', source)!r} returned {type(dataset).__name__}"
            )
        return dataset
    if isinstance(source, tf.data.Dataset):
        dataset = source
        buffer = int(dataset.cardinality())
        buffer = _SHUFFLE_BUFFER if buffer < 0 else min(buffer, _SHUFFLE_BUFFER)
    elif isinstance(source, (tuple, list, dict, np.ndarray)):
        dataset = tf.data.Dataset.from_tensor_slices(tuple(source) if isinstance(source, list) else source)
        buffer = int(dataset.cardinality())
    else:
        raise TypeError(
            "Training data must be arrays ((x, y), or x alone; x may be a dict), a tf.data.Dataset of single "
            f"examples, or a function (batch_size, seed) -> tf.data.Dataset of batches. Received: {source!r}"
        )
    if shuffle:
        dataset = dataset.shuffle(max(buffer, 1), seed=seed, reshuffle_each_iteration=True)
    return dataset.batch(batch_size, drop_remainder=drop_remainder).prefetch(tf.data.AUTOTUNE)
