"""Tests for tfmp/run/data.py and the embedded digits."""

import numpy as np
import pytest
import tensorflow as tf

from tfmp.run import data
from tfmp.run.data import digits


def test_embedded_digits_are_the_real_dataset():
    images, labels = digits._raw_digits()
    assert images.shape == (1797, 8, 8) and images.dtype == np.uint8
    assert images.min() == 0 and images.max() == 16
    # Class counts of the UCI test set as shipped by scikit-learn.
    assert np.bincount(labels).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]


@pytest.mark.parametrize("size, channels", [((28, 28), 1), ((32, 32), 3), ((8, 8), 1)])
def test_load_digits_shapes_and_range(size, channels):
    split = data.load_digits(image_size=size, channels=channels, validation_fraction=0.2)
    assert split.x_train.shape == (1438, *size, channels)
    assert split.x_val.shape == (359, *size, channels)
    assert split.x_train.dtype == np.float32 and split.y_train.dtype == np.int32
    assert 0.0 <= split.x_train.min() and split.x_train.max() <= 1.0
    assert set(np.unique(split.y_val)) == set(range(10))


def test_native_size_is_pixels_over_16_and_split_is_a_permutation():
    images, labels = digits._raw_digits()
    split = data.load_digits(image_size=(8, 8), validation_fraction=0.25, seed=3)
    x = np.concatenate([split.x_train, split.x_val])[..., 0]
    assert sorted(np.round(x.reshape(len(x), -1) * 16).astype(int).tolist()) == sorted(
        images.reshape(len(images), -1).astype(int).tolist()
    )
    assert sorted(np.concatenate([split.y_train, split.y_val]).tolist()) == sorted(labels.tolist())
    again = data.load_digits(image_size=(8, 8), validation_fraction=0.25, seed=3)
    np.testing.assert_array_equal(again.y_val, split.y_val)


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        (dict(channels=2), "channels=2"),
        (dict(validation_fraction=1.0), "validation_fraction=1.0"),
        (dict(image_size=(0, 28)), "image_size=(0, 28)"),
    ],
)
def test_load_digits_rejects_bad_arguments(kwargs, fragment):
    with pytest.raises(ValueError) as info:
        data.load_digits(**kwargs)
    assert fragment in str(info.value)


def test_make_dataset_batches_and_drops_remainder():
    x = np.arange(10, dtype=np.float32).reshape(10, 1)
    y = np.arange(10, dtype=np.int32)
    batches = list(data.make_dataset(x, y, batch_size=4, shuffle=False))
    assert [b[0].shape[0] for b in batches] == [4, 4, 2]
    dropped = list(data.make_dataset(x, batch_size=4, shuffle=True, drop_remainder=True, seed=1))
    assert [b.shape[0] for b in dropped] == [4, 4]
    with pytest.raises(ValueError, match="batch_size=0"):
        data.make_dataset(x, batch_size=0)


# --- MNIST, CIFAR-10, synthetic, load_images: all offline, from files the tests write. ---


def _write_mnist(directory, num_train=50, num_test=20):
    """Writes a small mnist.npz in Keras's format; returns its arrays."""
    rng = np.random.default_rng(0)
    arrays = dict(
        x_train=rng.integers(0, 256, (num_train, 28, 28), dtype=np.uint8),
        y_train=rng.integers(0, 10, num_train, dtype=np.uint8),
        x_test=rng.integers(0, 256, (num_test, 28, 28), dtype=np.uint8),
        y_test=rng.integers(0, 10, num_test, dtype=np.uint8),
    )
    arrays["x_train"][0, 0, :3] = [0, 128, 255]
    np.savez_compressed(directory / "mnist.npz", **arrays)
    return arrays


def _cifar_batch(rng, n, name):
    """A CIFAR-10 python batch: bytes keys, uint8 rows of 3,072 channel-major values."""
    return {
        b"batch_label": name.encode(),
        b"labels": rng.integers(0, 10, n).tolist(),
        b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
        b"filenames": [f"img_{i}.png".encode() for i in range(n)],
    }


def _write_cifar_folder(directory, sizes=(4, 3, 4, 2, 4), num_test=3):
    """Writes cifar-10-batches-py/ with five data batches and a test batch; returns the dicts."""
    import pickle

    rng = np.random.default_rng(1)
    folder = directory / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    batches = {f"data_batch_{i}": _cifar_batch(rng, n, f"training batch {i}") for i, n in enumerate(sizes, 1)}
    batches["test_batch"] = _cifar_batch(rng, num_test, "testing batch")
    # First image: red, green and blue of pixel (0, 0), then red of (0, 1) and of (1, 0).
    first = batches["data_batch_1"][b"data"][0]
    first[[0, 1024, 2048, 1, 32]] = [11, 22, 33, 44, 55]
    for name, batch in batches.items():
        payload = pickle.dumps(batch, protocol=3)
        if name == "data_batch_2":
            # The real files were written by numpy 1.x, which names numpy.core.
            assert payload.count(b"cnumpy._core.multiarray\n") == 1
            payload = payload.replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")
        (folder / name).write_bytes(payload)
    return batches


def _expected_cifar(batches):
    def images(names):
        rows = np.concatenate([batches[name][b"data"] for name in names])
        return rows.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)

    def labels(names):
        return np.concatenate([batches[name][b"labels"] for name in names]).astype(np.int32)

    train = [f"data_batch_{i}" for i in range(1, 6)]
    return images(train), labels(train), images(["test_batch"]), labels(["test_batch"])


def _assert_split_equal(split, expected):
    for got, want in zip(split, expected):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_load_mnist_from_data_dir(tmp_path):
    arrays = _write_mnist(tmp_path)
    split = data.load_mnist(str(tmp_path))
    assert split.x_train.shape == (50, 28, 28, 1) and split.x_val.shape == (20, 28, 28, 1)
    assert split.x_train.dtype == np.uint8 and split.y_train.dtype == np.int32
    expected = (
        arrays["x_train"][..., None],
        arrays["y_train"].astype(np.int32),
        arrays["x_test"][..., None],
        arrays["y_test"].astype(np.int32),
    )
    _assert_split_equal(split, expected)
    assert split.x_train[0, 0, :3, 0].tolist() == [0, 128, 255]


def test_load_mnist_without_data_dir_uses_keras(monkeypatch):
    import keras

    rng = np.random.default_rng(2)
    x_train = rng.integers(0, 256, (6, 28, 28), dtype=np.uint8)
    x_test = rng.integers(0, 256, (2, 28, 28), dtype=np.uint8)
    y_train, y_test = np.arange(6, dtype=np.uint8), np.arange(2, dtype=np.uint8)
    monkeypatch.setattr(keras.datasets.mnist, "load_data", lambda: ((x_train, y_train), (x_test, y_test)))
    split = data.load_mnist()
    _assert_split_equal(
        split, (x_train[..., None], y_train.astype(np.int32), x_test[..., None], y_test.astype(np.int32))
    )


def test_load_cifar10_from_folder_keeps_channel_order(tmp_path):
    batches = _write_cifar_folder(tmp_path)
    split = data.load_cifar10(str(tmp_path))
    assert split.x_train.shape == (17, 32, 32, 3) and split.x_val.shape == (3, 32, 32, 3)
    assert split.x_train.dtype == np.uint8 and split.y_train.dtype == np.int32 and split.y_val.shape == (3,)
    _assert_split_equal(split, _expected_cifar(batches))
    assert split.x_train[0, 0, 0].tolist() == [11, 22, 33]  # R, G, B of pixel (row 0, column 0)
    assert split.x_train[0, 0, 1, 0] == 44 and split.x_train[0, 1, 0, 0] == 55


def test_load_cifar10_from_archive(tmp_path):
    import tarfile

    batches = _write_cifar_folder(tmp_path / "build")
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    with tarfile.open(data_dir / "cifar-10-python.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "build" / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    split = data.load_cifar10(str(data_dir))
    _assert_split_equal(split, _expected_cifar(batches))
    assert (data_dir / "cifar-10-batches-py" / "test_batch").is_file()  # Extracted next to the archive.
    _assert_split_equal(data.load_cifar10(str(data_dir)), _expected_cifar(batches))


def test_load_cifar10_without_data_dir_flattens_labels(monkeypatch):
    import keras

    rng = np.random.default_rng(3)
    x_train = rng.integers(0, 256, (5, 32, 32, 3), dtype=np.uint8)
    x_test = rng.integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    y_train, y_test = np.arange(5, dtype=np.uint8)[:, None], np.arange(2, dtype=np.uint8)[:, None]
    monkeypatch.setattr(keras.datasets.cifar10, "load_data", lambda: ((x_train, y_train), (x_test, y_test)))
    expected = (x_train, np.arange(5, dtype=np.int32), x_test, np.arange(2, dtype=np.int32))
    _assert_split_equal(data.load_cifar10(), expected)
    # Keras configured channels_first returns (N, 3, 32, 32): it comes back channels-last.
    channels_first = ((x_train.transpose(0, 3, 1, 2), y_train), (x_test.transpose(0, 3, 1, 2), y_test))
    monkeypatch.setattr(keras.datasets.cifar10, "load_data", lambda: channels_first)
    _assert_split_equal(data.load_cifar10(), expected)


def test_missing_files_raise_dataset_not_found(tmp_path):
    with pytest.raises(data.DatasetNotFoundError) as info:
        data.load_mnist(str(tmp_path))
    message = str(info.value)
    assert isinstance(info.value, FileNotFoundError)
    mnist_url = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"
    for fragment in (str(tmp_path / "mnist.npz"), mnist_url, '"digits"', "dataset='digits'"):
        assert fragment in message
    assert "--" not in message and "scripts" not in message  # the library's terms; the scripts say --dataset

    with pytest.raises(data.DatasetNotFoundError) as info:
        data.load_cifar10(str(tmp_path))
    message = str(info.value)
    for fragment in (
        str(tmp_path / "cifar-10-python.tar.gz"),
        str(tmp_path / "cifar-10-batches-py"),
        "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
        "digits",
    ):
        assert fragment in message


def test_incomplete_cifar_folder_names_the_missing_batch(tmp_path):
    _write_cifar_folder(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(data.DatasetNotFoundError, match="lacks data_batch_3"):
        data.load_cifar10(str(tmp_path))


@pytest.mark.parametrize("loader, name", [("load_mnist", "mnist.npz"), ("load_cifar10", "cifar-10-python.tar.gz")])
def test_offline_without_data_dir_raises_dataset_not_found(monkeypatch, tmp_path, loader, name):
    import keras

    def offline():
        raise Exception("URL fetch failure on https://example.invalid/: None -- [Errno -3] name resolution")

    monkeypatch.setattr(getattr(keras.datasets, loader.removeprefix("load_")), "load_data", offline)
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras_home"))
    with pytest.raises(data.DatasetNotFoundError) as info:
        getattr(data, loader)()
    message = str(info.value)
    for fragment in (name, "digits", "data_dir", "URL fetch failure", str(tmp_path / "keras_home" / "datasets")):
        assert fragment in message
    assert "URL fetch failure" in str(info.value.__cause__)


def test_corrupt_files_raise_value_error_naming_the_file(tmp_path):
    (tmp_path / "mnist.npz").write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(ValueError, match="mnist.npz"):
        data.load_mnist(str(tmp_path))

    _write_cifar_folder(tmp_path)
    batch = tmp_path / "cifar-10-batches-py" / "data_batch_4"
    batch.write_bytes(batch.read_bytes()[:500])
    with pytest.raises(ValueError) as info:
        data.load_cifar10(str(tmp_path))
    assert str(batch) in str(info.value)


def test_cifar_batches_may_only_hold_numpy_arrays(tmp_path):
    import os
    import pickle

    class Gadget:
        def __reduce__(self):
            return (os.getcwd, ())

    _write_cifar_folder(tmp_path)
    batch = tmp_path / "cifar-10-batches-py" / "test_batch"
    batch.write_bytes(pickle.dumps({b"data": Gadget(), b"labels": []}))
    with pytest.raises(ValueError, match=r"refusing to load the global \w+\.getcwd") as info:
        data.load_cifar10(str(tmp_path))
    assert str(batch) in str(info.value)


def test_truncated_cifar_archive_raises_value_error(tmp_path):
    import tarfile

    _write_cifar_folder(tmp_path / "build")
    archive = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "build" / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    archive.write_bytes(archive.read_bytes()[:-200])
    for _ in range(2):  # The failed extraction leaves nothing behind that a retry would trust.
        with pytest.raises(ValueError, match="cifar-10-python.tar.gz") as info:
            data.load_cifar10(str(tmp_path))
        assert not isinstance(info.value, data.DatasetNotFoundError)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["build", "cifar-10-python.tar.gz"]


def test_cifar_archive_without_the_batches_folder_raises_value_error(tmp_path):
    import tarfile

    (tmp_path / "readme.txt").write_text("not CIFAR")
    with tarfile.open(tmp_path / "cifar-10-python.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "readme.txt", arcname="readme.txt")
    with pytest.raises(ValueError, match="no cifar-10-batches-py/ inside"):
        data.load_cifar10(str(tmp_path))


def test_synthetic_shapes_dtypes_and_seed():
    split = data.synthetic((16, 12, 3), num_classes=4, num_train=30, num_val=7, seed=5)
    assert split.x_train.shape == (30, 16, 12, 3) and split.x_val.shape == (7, 16, 12, 3)
    assert split.x_train.dtype == np.uint8 and split.y_train.dtype == np.int32 and split.y_val.shape == (7,)
    assert set(np.unique(split.y_train)) <= set(range(4))
    _assert_split_equal(data.synthetic((16, 12, 3), num_classes=4, num_train=30, num_val=7, seed=5), split)
    other = data.synthetic((16, 12, 3), num_classes=4, num_train=30, num_val=7, seed=6)
    assert not np.array_equal(other.x_train, split.x_train)
    assert data.synthetic((4, 4, 1), num_val=0).x_val.shape == (0, 4, 4, 1)


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        (dict(image_shape=(0, 28, 1)), "image_shape=(0, 28, 1)"),
        (dict(image_shape=(28, 28)), "image_shape=(28, 28)"),
        (dict(image_shape=(28.0, 28, 1)), "image_shape=(28.0, 28, 1)"),
        (dict(image_shape=(28, 28, 1), num_classes=0), "num_classes=0"),
        (dict(image_shape=(28, 28, 1), num_train=0), "num_train=0"),
        (dict(image_shape=(28, 28, 1), num_val=-1), "num_val=-1"),
    ],
)
def test_synthetic_rejects_bad_arguments(kwargs, fragment):
    with pytest.raises(ValueError) as info:
        data.synthetic(**kwargs)
    assert fragment in str(info.value)


def test_load_images_by_name(tmp_path, digits):
    assert data.DATASETS == ("digits", "mnist", "cifar10", "synthetic")
    _assert_split_equal(data.load_images("digits", (28, 28, 1), seed=0), digits)
    rgb = data.load_images("Digits", (32, 32, 3))
    assert rgb.x_train.shape[1:] == (32, 32, 3) and rgb.x_train.dtype == np.float32
    _write_mnist(tmp_path)
    assert data.load_images("mnist", (28, 28, 1), data_dir=str(tmp_path)).x_val.shape == (20, 28, 28, 1)
    _write_cifar_folder(tmp_path)
    assert data.load_images("CIFAR10", [32, 32, 3], data_dir=str(tmp_path)).x_train.shape == (17, 32, 32, 3)
    _assert_split_equal(data.load_images("synthetic", (8, 8, 3), seed=2), data.synthetic((8, 8, 3), seed=2))


@pytest.mark.parametrize(
    "name, native, asked", [("mnist", (28, 28, 1), (32, 32, 3)), ("cifar10", (32, 32, 3), (28, 28, 1))]
)
def test_load_images_rejects_a_shape_the_dataset_does_not_have(tmp_path, name, native, asked):
    with pytest.raises(ValueError) as info:
        data.load_images(name, asked, data_dir=str(tmp_path))
    assert not isinstance(info.value, data.DatasetNotFoundError)
    for fragment in (repr(name), str(native), str(asked)):
        assert fragment in str(info.value)


def test_load_images_rejects_an_unknown_name():
    with pytest.raises(ValueError) as info:
        data.load_images("imagenet", (32, 32, 3))
    assert "name='imagenet'" in str(info.value)
    for name in data.DATASETS:
        assert name in str(info.value)


def test_make_dataset_scales_uint8_batches_to_float32():
    x = np.arange(256, dtype=np.uint8).reshape(16, 4, 4, 1)
    y = np.arange(16, dtype=np.uint8) % 10
    ds = data.make_dataset(x, y, batch_size=5, shuffle=False)
    assert ds.element_spec[0].dtype == tf.float32 and ds.element_spec[1].dtype == tf.int32
    batches = list(ds)
    assert [len(b[0]) for b in batches] == [5, 5, 5, 1]
    images = np.concatenate([b[0].numpy() for b in batches])
    labels = np.concatenate([b[1].numpy() for b in batches])
    assert images.dtype == np.float32 and images.min() == 0.0 and images.max() == 1.0
    np.testing.assert_array_equal(images, x.astype(np.float32) / np.float32(255))  # All 256 values, exactly.
    np.testing.assert_array_equal(labels, y.astype(np.int32))
    dropped = list(data.make_dataset(x, y, batch_size=5, shuffle=False, drop_remainder=True))
    assert [len(b[0]) for b in dropped] == [5, 5, 5]
    shuffled = np.concatenate([b.numpy() for b in data.make_dataset(x, batch_size=4, seed=3)])
    assert sorted(shuffled.ravel().tolist()) == sorted((x.astype(np.float32) / np.float32(255)).ravel().tolist())


def test_make_dataset_passes_float_images_through():
    x = np.random.default_rng(4).random((6, 3, 3, 2), dtype=np.float32)
    ds = data.make_dataset(x, np.arange(6, dtype=np.int64), batch_size=4, shuffle=False)
    batches = list(ds)
    np.testing.assert_array_equal(np.concatenate([b[0].numpy() for b in batches]), x)
    assert batches[0][1].dtype == tf.int32


def test_every_unusable_dataset_file_raises_one_catchable_error_naming_it(tmp_path):
    """Corrupt, truncated, refused: one `CorruptDatasetError` (a ValueError), which the scripts report in a line."""
    import io
    import os
    import pickle
    import tarfile

    (tmp_path / "mnist.npz").write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(data.CorruptDatasetError, match="mnist.npz"):
        data.load_mnist(str(tmp_path))

    cifar = tmp_path / "cifar"
    _write_cifar_folder(cifar)
    batch = cifar / "cifar-10-batches-py" / "data_batch_2"
    original = batch.read_bytes()
    batch.write_bytes(original[:500])  # truncated
    with pytest.raises(data.CorruptDatasetError, match=str(batch)):
        data.load_cifar10(str(cifar))
    batch.write_bytes(pickle.dumps({b"data": print, b"labels": []}))  # refused: not a numpy array
    with pytest.raises(data.CorruptDatasetError, match=r"refusing to load the global builtins\.print"):
        data.load_cifar10(str(cifar))

    archive_dir = tmp_path / "archive"
    archive_dir.mkdir()
    with tarfile.open(archive_dir / "cifar-10-python.tar.gz", "w:gz") as tar:  # refused: escapes its folder
        member = tarfile.TarInfo("../escaped")
        member.size = 4
        tar.addfile(member, io.BytesIO(b"evil"))
    with pytest.raises(data.CorruptDatasetError, match="cifar-10-python.tar.gz"):
        data.load_cifar10(str(archive_dir))
    assert not os.path.exists(archive_dir / "escaped") and not os.path.exists(tmp_path / "escaped")
