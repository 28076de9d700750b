"""Datasets and input pipelines.

`load_digits` is the embedded real dataset: 1,797 handwritten digits shipped
inside the package (see `tfmp/datasets/README.md`), usable with no network.
`make_dataset` is the `tf.data` pipeline the demos and trainers feed from.
Pixels are scaled to [0, 1] in float32 on the host; the model's first layer
casts them to its compute dtype.
"""

from __future__ import annotations

import importlib.resources
from typing import NamedTuple

import numpy as np
import tensorflow as tf

__all__ = ["Split", "load_digits", "make_dataset"]

DIGITS_FILE = "digits.npz"
NUM_DIGITS = 1797
DIGITS_MAX_PIXEL = 16.0


class Split(NamedTuple):
    """Train and validation arrays: images float32 NHWC in [0, 1], labels int32."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray


def _raw_digits() -> tuple[np.ndarray, np.ndarray]:
    path = importlib.resources.files("tfmp.datasets").joinpath(DIGITS_FILE)
    with path.open("rb") as f, np.load(f) as data:
        return data["images"], data["labels"]


def load_digits(
    image_size: tuple[int, int] = (28, 28),
    channels: int = 1,
    validation_fraction: float = 0.2,
    seed: int = 0,
) -> Split:
    """Loads the embedded digits, resized for a model, split train/validation.

    Args:
        image_size: `(height, width)` to resize the 8x8 images to, with
            bilinear interpolation: `(28, 28)` for the MNIST-shaped GAN,
            `(32, 32)` for the CIFAR-shaped classifier; `(8, 8)` keeps them.
        channels: 1 for grey images, 3 to repeat grey into RGB.
        validation_fraction: The share of images held out, in [0, 1).
        seed: Seed of the shuffle that precedes the split.

    Returns:
        A `Split`; pixel values are float32 in [0, 1].

    Raises:
        ValueError: for an impossible size, channel count or fraction.
    """
    height, width = image_size
    if height < 1 or width < 1:
        raise ValueError(f"image_size must be positive. Received: image_size={image_size!r}")
    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 or 3. Received: channels={channels!r}")
    if not 0 <= validation_fraction < 1:
        raise ValueError(
            f"validation_fraction must be in [0, 1). Received: validation_fraction={validation_fraction!r}"
        )
    images, labels = _raw_digits()
    x = images.astype(np.float32)[..., None] / DIGITS_MAX_PIXEL
    if (height, width) != x.shape[1:3]:
        x = tf.image.resize(x, (height, width), method="bilinear").numpy()
        x = np.clip(x, 0.0, 1.0)
    if channels == 3:
        x = np.repeat(x, 3, axis=-1)
    y = labels.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(y))
    n_val = int(round(len(y) * validation_fraction))
    val, train = order[:n_val], order[n_val:]
    return Split(x[train], y[train], x[val], y[val])


def make_dataset(
    x: np.ndarray,
    y: np.ndarray | None = None,
    *,
    batch_size: int,
    shuffle: bool = True,
    drop_remainder: bool = False,
    seed: int | None = None,
) -> tf.data.Dataset:
    """Builds the input pipeline: cache, shuffle, batch, prefetch.

    Args:
        x: Inputs, float32 already scaled on the host.
        y: Optional labels.
        batch_size: Examples per batch, > 0.
        shuffle: Reshuffle every epoch (with `seed` for a repeatable order).
        drop_remainder: Drop the last partial batch (the GAN does).
        seed: Shuffle seed.

    Returns:
        A `tf.data.Dataset` of `x` batches or `(x, y)` batches.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be > 0. Received: batch_size={batch_size!r}")
    ds = tf.data.Dataset.from_tensor_slices(x if y is None else (x, y)).cache()
    if shuffle:
        ds = ds.shuffle(len(x), seed=seed, reshuffle_each_iteration=True)
    ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    return ds.prefetch(tf.data.AUTOTUNE)
