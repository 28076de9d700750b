"""Tests for tfmp/run/data/cifar10.py: CIFAR-10 from a folder, an archive or Keras's cache, read safely."""

import numpy as np
import pytest
from dataset_files import assert_split_equal, expected_cifar, write_cifar_folder

from tfmp.run import data


def test_load_cifar10_from_folder_keeps_channel_order(tmp_path):
    batches = write_cifar_folder(tmp_path)
    split = data.load_cifar10(str(tmp_path))
    assert split.x_train.shape == (17, 32, 32, 3) and split.x_val.shape == (3, 32, 32, 3)
    assert split.x_train.dtype == np.uint8 and split.y_train.dtype == np.int32 and split.y_val.shape == (3,)
    assert_split_equal(split, expected_cifar(batches))
    assert split.x_train[0, 0, 0].tolist() == [11, 22, 33]  # R, G, B of pixel (row 0, column 0)
    assert split.x_train[0, 0, 1, 0] == 44 and split.x_train[0, 1, 0, 0] == 55


def test_load_cifar10_from_archive(tmp_path):
    import tarfile

    batches = write_cifar_folder(tmp_path / "build")
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    with tarfile.open(data_dir / "cifar-10-python.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "build" / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    split = data.load_cifar10(str(data_dir))
    assert_split_equal(split, expected_cifar(batches))
    assert (data_dir / "cifar-10-batches-py" / "test_batch").is_file()  # Extracted next to the archive.
    assert_split_equal(data.load_cifar10(str(data_dir)), expected_cifar(batches))


def test_load_cifar10_without_data_dir_flattens_labels(monkeypatch):
    import keras

    rng = np.random.default_rng(3)
    x_train = rng.integers(0, 256, (5, 32, 32, 3), dtype=np.uint8)
    x_test = rng.integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    y_train, y_test = np.arange(5, dtype=np.uint8)[:, None], np.arange(2, dtype=np.uint8)[:, None]
    monkeypatch.setattr(keras.datasets.cifar10, "load_data", lambda: ((x_train, y_train), (x_test, y_test)))
    expected = (x_train, np.arange(5, dtype=np.int32), x_test, np.arange(2, dtype=np.int32))
    assert_split_equal(data.load_cifar10(), expected)
    # Keras configured channels_first returns (N, 3, 32, 32): it comes back channels-last.
    channels_first = ((x_train.transpose(0, 3, 1, 2), y_train), (x_test.transpose(0, 3, 1, 2), y_test))
    monkeypatch.setattr(keras.datasets.cifar10, "load_data", lambda: channels_first)
    assert_split_equal(data.load_cifar10(), expected)


def test_incomplete_cifar_folder_names_the_missing_batch(tmp_path):
    write_cifar_folder(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(data.DatasetNotFoundError, match="lacks data_batch_3"):
        data.load_cifar10(str(tmp_path))


def test_cifar_batches_may_only_hold_numpy_arrays(tmp_path):
    import os
    import pickle

    class Gadget:
        def __reduce__(self):
            return (os.getcwd, ())

    write_cifar_folder(tmp_path)
    batch = tmp_path / "cifar-10-batches-py" / "test_batch"
    batch.write_bytes(pickle.dumps({b"data": Gadget(), b"labels": []}))
    with pytest.raises(ValueError, match=r"refusing to load the global \w+\.getcwd") as info:
        data.load_cifar10(str(tmp_path))
    assert str(batch) in str(info.value)


def test_truncated_cifar_archive_raises_value_error(tmp_path):
    import tarfile

    write_cifar_folder(tmp_path / "build")
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
