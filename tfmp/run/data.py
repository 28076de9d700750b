"""Datasets and input pipelines.

`load_digits` is the embedded real dataset: 1,797 handwritten digits shipped
inside the package (see `tfmp/datasets/README.md`), usable with no network.
`load_mnist` and `load_cifar10` read the standard datasets, either from a
directory the caller filled (no download) or through Keras's download cache;
when neither works they raise `DatasetNotFoundError`, which says where to put
the file and points to `digits`; a file that is there but unusable raises
`CorruptDatasetError`, naming it. `synthetic` makes random images for
benchmarks, and `load_images` picks one of them by name (see `DATASETS`).

`make_dataset` is the `tf.data` pipeline the image models feed from;
`batched` makes one from any examples a task holds (arrays, dicts of
arrays, an unbatched `tf.data.Dataset`, or a function returning batches).
MNIST, CIFAR-10 and synthetic images stay uint8 in memory; the pipeline
scales each batch to [0, 1] in float32 on the host, and the model's first
layer casts it to its compute dtype.
"""

from __future__ import annotations

import gzip
import importlib.resources
import os
import pickle
import shutil
import tarfile
import tempfile
import zipfile
import zlib
from typing import Any, NamedTuple

import keras
import numpy as np
import tensorflow as tf

__all__ = [
    "DATASETS",
    "CorruptDatasetError",
    "DatasetNotFoundError",
    "Split",
    "batched",
    "load_cifar10",
    "load_digits",
    "load_images",
    "load_mnist",
    "make_dataset",
    "synthetic",
]

DIGITS_FILE = "digits.npz"
DIGITS_MAX_PIXEL = 16.0


DATASETS = ("digits", "mnist", "cifar10", "synthetic")

MNIST_FILE = "mnist.npz"
MNIST_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"
MNIST_SHAPE = (28, 28, 1)

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

_DIGITS_HINT = (
    "To train with no download at all, use the embedded dataset \"digits\" instead (dataset='digits'): it "
    "ships inside the package."
)

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


def _keras_datasets_dir() -> str:
    """Where `keras.utils.get_file` caches datasets: `$KERAS_HOME/datasets` or `~/.keras/datasets`."""
    home = os.environ["KERAS_HOME"] if "KERAS_HOME" in os.environ else os.path.join("~", ".keras")
    return os.path.join(os.path.expanduser(home), "datasets")


def _checked(x: np.ndarray, y: np.ndarray, image_shape: tuple[int, ...], where: str) -> tuple[np.ndarray, np.ndarray]:
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


def _corrupt(path: str, err: BaseException, what: str, url: str) -> CorruptDatasetError:
    return CorruptDatasetError(
        f"Could not read {path}: it is corrupt or truncated, or is not {what} "
        f"({type(err).__name__}: {err}). Delete it and download it again from {url}."
    )


def _read_mnist_npz(path: str) -> tuple[np.ndarray, ...]:
    """Reads Keras's `mnist.npz` (x_train, y_train, x_test, y_test) without unpickling anything."""
    keys = ("x_train", "y_train", "x_test", "y_test")
    what = f"Keras's {MNIST_FILE} (an .npz archive with {', '.join(keys)})"
    if not zipfile.is_zipfile(path):
        raise _corrupt(path, ValueError("not a zip archive"), what, MNIST_URL)
    try:
        loaded = np.load(path, allow_pickle=False)
    except (ValueError, EOFError, zipfile.BadZipFile) as err:
        raise _corrupt(path, err, what, MNIST_URL) from err
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise _corrupt(path, TypeError(f"found a single {type(loaded).__name__}"), what, MNIST_URL)
    with loaded:
        missing = [key for key in keys if key not in loaded.files]
        if missing:
            raise _corrupt(path, KeyError(f"missing {', '.join(missing)}"), what, MNIST_URL)
        try:
            return tuple(loaded[key] for key in keys)
        except (ValueError, EOFError, zipfile.BadZipFile, zlib.error) as err:
            raise _corrupt(path, err, what, MNIST_URL) from err


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
            cache = os.path.join(_keras_datasets_dir(), MNIST_FILE)
            raise DatasetNotFoundError(
                f"MNIST is not available: keras.datasets.mnist.load_data() failed "
                f"({type(err).__name__}: {err}). Keras keeps the file at {cache} and downloads it "
                f"from {MNIST_URL} when it is missing. Offline, copy that file to {cache}, or put "
                f"it in any directory and pass that directory as data_dir. {_DIGITS_HINT}"
            ) from err
        where = "keras.datasets.mnist.load_data()"
    else:
        where = os.path.join(data_dir, MNIST_FILE)
        if not os.path.isfile(where):
            raise DatasetNotFoundError(
                f"MNIST is not available: {where} does not exist. Download {MNIST_URL} and place "
                f"it at {where} (it is read as is, nothing is downloaded). {_DIGITS_HINT} "
                f"Received: data_dir={data_dir!r}"
            )
        x_train, y_train, x_val, y_val = _read_mnist_npz(where)
    x_train, y_train = _checked(x_train, y_train, MNIST_SHAPE[:2], where)
    x_val, y_val = _checked(x_val, y_val, MNIST_SHAPE[:2], where)
    return Split(x_train[..., None], y_train, x_val[..., None], y_val)


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
        raise _corrupt(path, err, what, CIFAR10_URL) from err
    if not isinstance(batch, dict):
        raise _corrupt(path, TypeError(f"found a {type(batch).__name__}, not a dict"), what, CIFAR10_URL)
    found = {}
    for key in ("data", "labels"):
        for candidate in (key.encode(), key):
            if candidate in batch:
                found[key] = batch[candidate]
                break
        else:
            raise _corrupt(path, KeyError(f"no {key.encode()!r} entry"), what, CIFAR10_URL)
    data, labels = found["data"], np.asarray(found["labels"])
    pixels = int(np.prod(CIFAR10_SHAPE))
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != pixels:
        shape, dtype = getattr(data, "shape", None), getattr(data, "dtype", type(data).__name__)
        err = ValueError(f"data must be uint8 of shape (n, {pixels}), got shape={shape}, dtype={dtype}")
        raise _corrupt(path, err, what, CIFAR10_URL)
    height, width, channels = CIFAR10_SHAPE
    # Each row is channel-major: 1024 red, then 1024 green, then 1024 blue values.
    x = np.ascontiguousarray(data.reshape(-1, channels, height, width).transpose(0, 2, 3, 1))
    return _checked(x, labels, CIFAR10_SHAPE, path)


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
            raise _corrupt(archive, err, f"the {CIFAR10_ARCHIVE} archive", CIFAR10_URL) from err
        extracted = os.path.join(scratch, CIFAR10_FOLDER)
        if not os.path.isdir(extracted):
            err = FileNotFoundError(f"no {CIFAR10_FOLDER}/ inside")
            raise _corrupt(archive, err, f"the {CIFAR10_ARCHIVE} archive", CIFAR10_URL)
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
            f"{data_dir} yourself. {_DIGITS_HINT} Received: data_dir={data_dir!r}"
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
        cache = _keras_datasets_dir()
        raise DatasetNotFoundError(
            f"CIFAR-10 is not available: keras.datasets.cifar10.load_data() failed "
            f"({type(err).__name__}: {err}). Keras keeps {CIFAR10_URL} at "
            f"{os.path.join(cache, KERAS_CIFAR10_ARCHIVE)} (extracted to "
            f"{os.path.join(cache, KERAS_CIFAR10_FOLDER)}) and downloads it when it is missing. "
            f"Offline, put {CIFAR10_ARCHIVE} (or the extracted {CIFAR10_FOLDER}{os.sep}) in any "
            f"directory and pass that directory as data_dir. {_DIGITS_HINT}"
        ) from err
    where = "keras.datasets.cifar10.load_data()"
    splits = []
    for x, y in ((x_train, y_train), (x_val, y_val)):
        if x.ndim == 4 and x.shape[1:] == (CIFAR10_SHAPE[2], *CIFAR10_SHAPE[:2]):
            x = x.transpose(0, 2, 3, 1)  # Keras configured for channels_first.
        splits.extend(_checked(x, np.reshape(y, (-1,)), CIFAR10_SHAPE, where))
    return Split(*splits)


def _is_int(value) -> bool:
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
