"""Tests for tfmp/run/data/mnist.py: MNIST from a directory or Keras's cache."""

import numpy as np
from dataset_files import assert_split_equal, write_mnist

from tfmp.run import data


def test_load_mnist_from_data_dir(tmp_path):
    arrays = write_mnist(tmp_path)
    split = data.load_mnist(str(tmp_path))
    assert split.x_train.shape == (50, 28, 28, 1) and split.x_val.shape == (20, 28, 28, 1)
    assert split.x_train.dtype == np.uint8 and split.y_train.dtype == np.int32
    expected = (
        arrays["x_train"][..., None],
        arrays["y_train"].astype(np.int32),
        arrays["x_test"][..., None],
        arrays["y_test"].astype(np.int32),
    )
    assert_split_equal(split, expected)
    assert split.x_train[0, 0, :3, 0].tolist() == [0, 128, 255]


def test_load_mnist_without_data_dir_uses_keras(monkeypatch):
    import keras

    rng = np.random.default_rng(2)
    x_train = rng.integers(0, 256, (6, 28, 28), dtype=np.uint8)
    x_test = rng.integers(0, 256, (2, 28, 28), dtype=np.uint8)
    y_train, y_test = np.arange(6, dtype=np.uint8), np.arange(2, dtype=np.uint8)
    monkeypatch.setattr(keras.datasets.mnist, "load_data", lambda: ((x_train, y_train), (x_test, y_test)))
    split = data.load_mnist()
    assert_split_equal(
        split, (x_train[..., None], y_train.astype(np.int32), x_test[..., None], y_test.astype(np.int32))
    )
