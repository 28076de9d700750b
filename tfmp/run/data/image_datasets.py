"""Image datasets by name, for a model of a given input shape, and synthetic images for benchmarks."""

from __future__ import annotations

import numpy as np

from tfmp.run.data._split import Split
from tfmp.run.data.cifar10 import CIFAR10_SHAPE, load_cifar10
from tfmp.run.data.digits import load_digits
from tfmp.run.data.mnist import MNIST_SHAPE, load_mnist

__all__ = ["DATASETS", "load_images", "synthetic"]

DATASETS = ("digits", "mnist", "cifar10", "synthetic")


def _is_int(value) -> bool:
    """Whether `value` is an integer (a numpy one too), not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def synthetic(
    image_shape: tuple[int, int, int],
    num_classes: int = 10,
    num_train: int = 2048,
    num_val: int = 512,
    seed: int = 0,
) -> Split:
    """Makes random images and labels, for benchmarks that need no real data.

    Args:
        image_shape: `(height, width, channels)` of each image, all positive.
        num_classes: Labels are drawn uniformly from `[0, num_classes)`, > 0.
        num_train: Training examples, > 0.
        num_val: Validation examples, >= 0 (0 gives an empty validation set).
        seed: Seed of the generator; the same seed gives the same arrays.

    Returns:
        A `Split` of uniform uint8 images in [0, 255] and int32 labels.

    Raises:
        ValueError: for a shape that is not three positive integers, or a
            non-positive class or example count.
    """
    shape = tuple(image_shape) if isinstance(image_shape, (tuple, list)) else None
    if shape is None or len(shape) != 3 or not all(_is_int(d) and d > 0 for d in shape):
        raise ValueError(
            "image_shape must be three positive integers (height, width, channels). "
            f"Received: image_shape={image_shape!r}"
        )
    counts = (("num_classes", num_classes, 1), ("num_train", num_train, 1), ("num_val", num_val, 0))
    for name, value, minimum in counts:
        if not _is_int(value) or value < minimum:
            raise ValueError(f"{name} must be an integer >= {minimum}. Received: {name}={value!r}")
    rng = np.random.default_rng(seed)
    arrays = []
    for n in (num_train, num_val):
        arrays.append(rng.integers(0, 256, size=(n, *shape), dtype=np.uint8))
        arrays.append(rng.integers(0, num_classes, size=n, dtype=np.int32))
    return Split(*arrays)


def load_images(
    name: str,
    image_shape: tuple[int, int, int],
    data_dir: str | None = None,
    seed: int = 0,
) -> Split:
    """Loads one of `DATASETS` by name, for a model taking `image_shape` inputs.

    Args:
        name: One of `DATASETS` (case-insensitive): `"digits"` (embedded, no
            download, resized and repeated to fit), `"mnist"` (needs
            `image_shape == (28, 28, 1)`), `"cifar10"` (needs
            `(32, 32, 3)`) or `"synthetic"` (random).
        image_shape: `(height, width, channels)` the model expects.
        data_dir: Directory with the downloaded files, for `mnist` and
            `cifar10` (see `load_mnist`, `load_cifar10`); `None` uses Keras's
            cache. Ignored by `digits` and `synthetic`.
        seed: Seed of the `digits` split or of the `synthetic` generator.

    Returns:
        A `Split`: float32 images in [0, 1] for `digits`, uint8 otherwise;
        `make_dataset` takes either.

    Raises:
        ValueError: for an unknown name, or a dataset whose images do not
            have `image_shape`.
        DatasetNotFoundError: if `mnist` or `cifar10` is not available.
        CorruptDatasetError: if its file is corrupt or not in its format.
    """
    key = name.lower() if isinstance(name, str) else None
    if key not in DATASETS:
        raise ValueError(f"Unknown dataset: expected one of {', '.join(DATASETS)}. Received: name={name!r}")
    shape = tuple(image_shape) if isinstance(image_shape, (tuple, list)) else None
    if shape is None or len(shape) != 3:
        raise ValueError(f"image_shape must be (height, width, channels). Received: image_shape={image_shape!r}")
    if key == "digits":
        return load_digits(image_size=shape[:2], channels=shape[2], seed=seed)
    if key == "synthetic":
        return synthetic(shape, seed=seed)
    native, load = (MNIST_SHAPE, load_mnist) if key == "mnist" else (CIFAR10_SHAPE, load_cifar10)
    if shape != native:
        raise ValueError(
            f"Dataset {key!r} has images of shape {native}, not the {shape} asked for; "
            "use 'digits' or 'synthetic', which fit any shape. "
            f"Received: name={name!r}, image_shape={image_shape!r}"
        )
    return load(data_dir)
