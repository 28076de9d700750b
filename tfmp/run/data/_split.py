"""What every dataset reader shares: the `Split` it returns, the errors it raises and its checks."""

from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np

__all__ = [
    "DIGITS_HINT",
    "CorruptDatasetError",
    "DatasetNotFoundError",
    "Split",
    "checked",
    "corrupt",
    "keras_datasets_dir",
]

DIGITS_HINT = (
    "To train with no download at all, use the embedded dataset \"digits\" instead (dataset='digits'): it "
    "ships inside the package."
)


class DatasetNotFoundError(FileNotFoundError):
    """A dataset that needs a download is not available.

    The message says which file to place where, the URL it comes from, and
    the offline alternative (the embedded `digits`).
    """


class CorruptDatasetError(ValueError):
    """A dataset file is corrupt, truncated, or not in its expected format.

    Also raised for a file refused for safety (a pickle holding anything but
    numpy arrays, an archive member outside its folder). The message names
    the file and where to download it again.
    """


class Split(NamedTuple):
    """Train and validation arrays, images NHWC and labels int32.

    Images are float32 in [0, 1] for `digits` and uint8 in [0, 255] for
    `mnist`, `cifar10` and `synthetic`; `make_dataset` scales the latter.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray


def keras_datasets_dir() -> str:
    """Where `keras.utils.get_file` caches datasets: `$KERAS_HOME/datasets` or `~/.keras/datasets`."""
    home = os.environ["KERAS_HOME"] if "KERAS_HOME" in os.environ else os.path.join("~", ".keras")
    return os.path.join(os.path.expanduser(home), "datasets")


def checked(x: np.ndarray, y: np.ndarray, image_shape: tuple[int, ...], where: str) -> tuple[np.ndarray, np.ndarray]:
    """Checks uint8 images of `image_shape` and one integer label each; returns labels as int32."""
    x = np.asarray(x)
    y = np.asarray(y)
    if x.dtype != np.uint8 or x.shape[1:] != tuple(image_shape):
        raise CorruptDatasetError(
            f"{where}: expected uint8 images of shape (N, {', '.join(map(str, image_shape))}). "
            f"Received: shape={x.shape}, dtype={x.dtype}"
        )
    if not np.issubdtype(y.dtype, np.integer) or y.shape != (len(x),):
        raise CorruptDatasetError(
            f"{where}: expected {len(x)} integer labels, one per image. Received: shape={y.shape}, dtype={y.dtype}"
        )
    return x, y.astype(np.int32)


def corrupt(path: str, err: BaseException, what: str, url: str) -> CorruptDatasetError:
    """The error for a file at `path` that could not be read as `what` (`err`), naming where to download it."""
    return CorruptDatasetError(
        f"Could not read {path}: it is corrupt or truncated, or is not {what} "
        f"({type(err).__name__}: {err}). Delete it and download it again from {url}."
    )
