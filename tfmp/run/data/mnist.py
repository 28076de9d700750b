"""MNIST, from a directory the caller filled or through Keras's download cache."""

from __future__ import annotations

import os
import zipfile
import zlib

import keras
import numpy as np

from tfmp.run.data._split import DIGITS_HINT, DatasetNotFoundError, Split, checked, corrupt, keras_datasets_dir

__all__ = ["MNIST_SHAPE", "load_mnist"]

MNIST_FILE = "mnist.npz"
MNIST_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"
MNIST_SHAPE = (28, 28, 1)


def _read_mnist_npz(path: str) -> tuple[np.ndarray, ...]:
    """Reads Keras's `mnist.npz` (x_train, y_train, x_test, y_test) without unpickling anything."""
    keys = ("x_train", "y_train", "x_test", "y_test")
    what = f"Keras's {MNIST_FILE} (an .npz archive with {', '.join(keys)})"
    if not zipfile.is_zipfile(path):
        raise corrupt(path, ValueError("not a zip archive"), what, MNIST_URL)
    try:
        loaded = np.load(path, allow_pickle=False)
    except (ValueError, EOFError, zipfile.BadZipFile) as err:
        raise corrupt(path, err, what, MNIST_URL) from err
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise corrupt(path, TypeError(f"found a single {type(loaded).__name__}"), what, MNIST_URL)
    with loaded:
        missing = [key for key in keys if key not in loaded.files]
        if missing:
            raise corrupt(path, KeyError(f"missing {', '.join(missing)}"), what, MNIST_URL)
        try:
            return tuple(loaded[key] for key in keys)
        except (ValueError, EOFError, zipfile.BadZipFile, zlib.error) as err:
            raise corrupt(path, err, what, MNIST_URL) from err


def load_mnist(data_dir: str | None = None) -> Split:
    """Loads MNIST: 60,000 training and 10,000 test handwritten digits, 28x28 grey.

    Args:
        data_dir: A directory holding Keras's `mnist.npz` (from `MNIST_URL`),
            read directly: nothing is downloaded. With `None`,
            `keras.datasets.mnist.load_data()` is used: it reads Keras's cache
            (`~/.keras/datasets/mnist.npz`, or under `$KERAS_HOME` if set) or
            downloads the file into it.

    Returns:
        A `Split` of uint8 images `(N, 28, 28, 1)` in [0, 255] and int32
        labels; the validation split is MNIST's test set.

    Raises:
        DatasetNotFoundError: if `data_dir` has no `mnist.npz`, or, without
            `data_dir`, if Keras can neither find nor download it (offline).
        CorruptDatasetError: (a ValueError) if the file is corrupt or not
            in Keras's format.
    """
    if data_dir is None:
        try:
            (x_train, y_train), (x_val, y_val) = keras.datasets.mnist.load_data()
        except Exception as err:
            cache = os.path.join(keras_datasets_dir(), MNIST_FILE)
            raise DatasetNotFoundError(
                f"MNIST is not available: keras.datasets.mnist.load_data() failed "
                f"({type(err).__name__}: {err}). Keras keeps the file at {cache} and downloads it "
                f"from {MNIST_URL} when it is missing. Offline, copy that file to {cache}, or put "
                f"it in any directory and pass that directory as data_dir. {DIGITS_HINT}"
            ) from err
        where = "keras.datasets.mnist.load_data()"
    else:
        where = os.path.join(data_dir, MNIST_FILE)
        if not os.path.isfile(where):
            raise DatasetNotFoundError(
                f"MNIST is not available: {where} does not exist. Download {MNIST_URL} and place "
                f"it at {where} (it is read as is, nothing is downloaded). {DIGITS_HINT} "
                f"Received: data_dir={data_dir!r}"
            )
        x_train, y_train, x_val, y_val = _read_mnist_npz(where)
    x_train, y_train = checked(x_train, y_train, MNIST_SHAPE[:2], where)
    x_val, y_val = checked(x_val, y_val, MNIST_SHAPE[:2], where)
    return Split(x_train[..., None], y_train, x_val[..., None], y_val)
