"""Tests for tfmp/run/data/_split.py: a dataset that is missing or unusable raises one error naming it."""

import pytest
from dataset_files import write_cifar_folder

from tfmp.run import data


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

    write_cifar_folder(tmp_path)
    batch = tmp_path / "cifar-10-batches-py" / "data_batch_4"
    batch.write_bytes(batch.read_bytes()[:500])
    with pytest.raises(ValueError) as info:
        data.load_cifar10(str(tmp_path))
    assert str(batch) in str(info.value)


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
    write_cifar_folder(cifar)
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
