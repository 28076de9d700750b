"""CIFAR-10, from a directory the caller filled (archive or folder) or through Keras's download cache."""

from __future__ import annotations

import gzip
import os
import pickle
import shutil
import tarfile
import tempfile
import zlib

import keras
import numpy as np

from tfmp.run.data._split import (
    DIGITS_HINT,
    CorruptDatasetError,
    DatasetNotFoundError,
    Split,
    checked,
    corrupt,
    keras_datasets_dir,
)

__all__ = ["CIFAR10_SHAPE", "load_cifar10"]

CIFAR10_ARCHIVE = "cifar-10-python.tar.gz"
CIFAR10_FOLDER = "cifar-10-batches-py"
CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR10_TEST_BATCH = "test_batch"
CIFAR10_SHAPE = (32, 32, 3)
# Where keras.datasets.cifar10.load_data() keeps the archive and its contents,
# relative to `<Keras home>/datasets`.
KERAS_CIFAR10_ARCHIVE = "cifar-10-batches-py-target_archive"
KERAS_CIFAR10_FOLDER = "cifar-10-batches-py-target"

# The only globals a CIFAR-10 batch needs: rebuilding its numpy array. The real
# files were pickled by numpy 1.x (`numpy.core`); numpy >= 2 writes `numpy._core`.
# Same set as Keras's RestrictedUnpickler (keras/src/datasets/npz_utils.py).
_ALLOWED_PICKLE_GLOBALS = frozenset(
    {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
    }
)


class _RestrictedUnpickler(pickle.Unpickler):
    """Unpickles only plain data and numpy arrays: any other global is refused."""

    def find_class(self, module: str, name: str):
        if (module, name) in _ALLOWED_PICKLE_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load the global {module}.{name}: only numpy arrays are allowed")


def _read_cifar10_batch(path: str) -> tuple[np.ndarray, np.ndarray]:
    """Reads one CIFAR-10 python batch into uint8 NHWC images and int32 labels."""
    what = "a CIFAR-10 python batch"
    try:
        with open(path, "rb") as f:
            batch = _RestrictedUnpickler(f, encoding="bytes").load()
    except OSError:
        raise
    except Exception as err:  # A damaged pickle can fail in many ways.
        raise corrupt(path, err, what, CIFAR10_URL) from err
    if not isinstance(batch, dict):
        raise corrupt(path, TypeError(f"found a {type(batch).__name__}, not a dict"), what, CIFAR10_URL)
    found = {}
    for key in ("data", "labels"):
        for candidate in (key.encode(), key):
            if candidate in batch:
                found[key] = batch[candidate]
                break
        else:
            raise corrupt(path, KeyError(f"no {key.encode()!r} entry"), what, CIFAR10_URL)
    data, labels = found["data"], np.asarray(found["labels"])
    pixels = int(np.prod(CIFAR10_SHAPE))
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != pixels:
        shape, dtype = getattr(data, "shape", None), getattr(data, "dtype", type(data).__name__)
        err = ValueError(f"data must be uint8 of shape (n, {pixels}), got shape={shape}, dtype={dtype}")
        raise corrupt(path, err, what, CIFAR10_URL)
    height, width, channels = CIFAR10_SHAPE
    # Each row is channel-major: 1024 red, then 1024 green, then 1024 blue values.
    x = np.ascontiguousarray(data.reshape(-1, channels, height, width).transpose(0, 2, 3, 1))
    return checked(x, labels, CIFAR10_SHAPE, path)


def _extract_cifar10(archive: str, data_dir: str) -> None:
    """Extracts `cifar-10-batches-py/` from the archive into `data_dir`.

    The archive is extracted into a temporary directory first and its files
    are moved into place only once it has been read to the end, so a
    truncated archive leaves no truncated batch behind.
    """
    scratch = tempfile.mkdtemp(prefix=".cifar-10-extract-", dir=data_dir)
    try:
        try:
            with tarfile.open(archive, "r:gz") as tar:
                tar.extractall(scratch, filter="data")
        except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as err:
            raise corrupt(archive, err, f"the {CIFAR10_ARCHIVE} archive", CIFAR10_URL) from err
        extracted = os.path.join(scratch, CIFAR10_FOLDER)
        if not os.path.isdir(extracted):
            err = FileNotFoundError(f"no {CIFAR10_FOLDER}/ inside")
            raise corrupt(archive, err, f"the {CIFAR10_ARCHIVE} archive", CIFAR10_URL)
        folder = os.path.join(data_dir, CIFAR10_FOLDER)
        os.makedirs(folder, exist_ok=True)
        for name in os.listdir(extracted):
            os.replace(os.path.join(extracted, name), os.path.join(folder, name))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _load_cifar10_dir(data_dir: str) -> Split:
    folder = os.path.join(data_dir, CIFAR10_FOLDER)
    archive = os.path.join(data_dir, CIFAR10_ARCHIVE)
    names = (*CIFAR10_TRAIN_BATCHES, CIFAR10_TEST_BATCH)

    def missing() -> list[str]:
        return [name for name in names if not os.path.isfile(os.path.join(folder, name))]

    if missing() and os.path.isfile(archive):
        _extract_cifar10(archive, data_dir)
        if missing():
            raise CorruptDatasetError(
                f"{archive} does not hold the CIFAR-10 python batches: after extracting it, "
                f"{folder} lacks {', '.join(missing())}. Download it again from {CIFAR10_URL}."
            )
    if missing():
        partial = f" ({folder} exists but lacks {', '.join(missing())})" if os.path.isdir(folder) else ""
        raise DatasetNotFoundError(
            f"CIFAR-10 is not available: found neither the archive {archive} nor the extracted "
            f"folder {folder}{os.sep} with {', '.join(names)}{partial}. Download {CIFAR10_URL} and "
            f"place it at {archive} (it is extracted there on first use), or extract it into "
            f"{data_dir} yourself. {DIGITS_HINT} Received: data_dir={data_dir!r}"
        )
    train = [_read_cifar10_batch(os.path.join(folder, name)) for name in CIFAR10_TRAIN_BATCHES]
    x_val, y_val = _read_cifar10_batch(os.path.join(folder, CIFAR10_TEST_BATCH))
    x_train = np.concatenate([x for x, _ in train])
    y_train = np.concatenate([y for _, y in train])
    return Split(x_train, y_train, x_val, y_val)


def load_cifar10(data_dir: str | None = None) -> Split:
    """Loads CIFAR-10: 50,000 training and 10,000 test colour images, 32x32, 10 classes.

    Args:
        data_dir: A directory holding either the extracted folder
            `cifar-10-batches-py/` (`data_batch_1` to `data_batch_5` and
            `test_batch`) or the archive `cifar-10-python.tar.gz` (from
            `CIFAR10_URL`), which is then extracted into `data_dir`. Nothing is
            downloaded. The batches are unpickled with only numpy array
            reconstruction allowed. With `None`,
            `keras.datasets.cifar10.load_data()` is used: it reads Keras's
            cache (`~/.keras/datasets`, or under `$KERAS_HOME` if set) or
            downloads the archive into it.

    Returns:
        A `Split` of uint8 images `(N, 32, 32, 3)` (channels last) in [0, 255]
        and int32 labels `(N,)`; the validation split is the test set.

    Raises:
        DatasetNotFoundError: if `data_dir` has neither the folder nor the
            archive, or, without `data_dir`, if Keras can neither find nor
            download it (offline).
        CorruptDatasetError: (a ValueError) if a batch or the archive is
            corrupt, truncated, not in the CIFAR-10 python format, or refused
            (a pickle holding anything but numpy arrays).
    """
    if data_dir is not None:
        return _load_cifar10_dir(data_dir)
    try:
        (x_train, y_train), (x_val, y_val) = keras.datasets.cifar10.load_data()
    except Exception as err:
        cache = keras_datasets_dir()
        raise DatasetNotFoundError(
            f"CIFAR-10 is not available: keras.datasets.cifar10.load_data() failed "
            f"({type(err).__name__}: {err}). Keras keeps {CIFAR10_URL} at "
            f"{os.path.join(cache, KERAS_CIFAR10_ARCHIVE)} (extracted to "
            f"{os.path.join(cache, KERAS_CIFAR10_FOLDER)}) and downloads it when it is missing. "
            f"Offline, put {CIFAR10_ARCHIVE} (or the extracted {CIFAR10_FOLDER}{os.sep}) in any "
            f"directory and pass that directory as data_dir. {DIGITS_HINT}"
        ) from err
    where = "keras.datasets.cifar10.load_data()"
    splits = []
    for x, y in ((x_train, y_train), (x_val, y_val)):
        if x.ndim == 4 and x.shape[1:] == (CIFAR10_SHAPE[2], *CIFAR10_SHAPE[:2]):
            x = x.transpose(0, 2, 3, 1)  # Keras configured for channels_first.
        splits.extend(checked(x, np.reshape(y, (-1,)), CIFAR10_SHAPE, where))
    return Split(*splits)
