"""Tests for tfmp/run/data/digits.py: the embedded digits."""

import numpy as np
import pytest

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
