"""The embedded digits: 1,797 handwritten digits shipped inside the package (see `tfmp/datasets/README.md`)."""

from __future__ import annotations

import importlib.resources

import numpy as np
import tensorflow as tf

from tfmp.run.data._split import Split

__all__ = ["load_digits"]

DIGITS_FILE = "digits.npz"
DIGITS_MAX_PIXEL = 16.0


def _raw_digits() -> tuple[np.ndarray, np.ndarray]:
    """The 8x8 images (pixels 0 to 16) and their labels, as stored."""
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
