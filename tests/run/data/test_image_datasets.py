"""Tests for tfmp/run/data/image_datasets.py: synthetic images, and an image dataset by name."""

import numpy as np
import pytest
from dataset_files import assert_split_equal, write_cifar_folder, write_mnist

from tfmp.run import data


def test_synthetic_shapes_dtypes_and_seed():
    split = data.synthetic((16, 12, 3), num_classes=4, num_train=30, num_val=7, seed=5)
    assert split.x_train.shape == (30, 16, 12, 3) and split.x_val.shape == (7, 16, 12, 3)
    assert split.x_train.dtype == np.uint8 and split.y_train.dtype == np.int32 and split.y_val.shape == (7,)
    assert set(np.unique(split.y_train)) <= set(range(4))
    assert_split_equal(data.synthetic((16, 12, 3), num_classes=4, num_train=30, num_val=7, seed=5), split)
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
    assert_split_equal(data.load_images("digits", (28, 28, 1), seed=0), digits)
    rgb = data.load_images("Digits", (32, 32, 3))
    assert rgb.x_train.shape[1:] == (32, 32, 3) and rgb.x_train.dtype == np.float32
    write_mnist(tmp_path)
    assert data.load_images("mnist", (28, 28, 1), data_dir=str(tmp_path)).x_val.shape == (20, 28, 28, 1)
    write_cifar_folder(tmp_path)
    assert data.load_images("CIFAR10", [32, 32, 3], data_dir=str(tmp_path)).x_train.shape == (17, 32, 32, 3)
    assert_split_equal(data.load_images("synthetic", (8, 8, 3), seed=2), data.synthetic((8, 8, 3), seed=2))


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
