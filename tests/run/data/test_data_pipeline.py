"""Tests for tfmp/run/data/pipeline.py: the tf.data pipeline of image arrays."""

import numpy as np
import pytest
import tensorflow as tf

from tfmp.run import data


def test_make_dataset_batches_and_drops_remainder():
    x = np.arange(10, dtype=np.float32).reshape(10, 1)
    y = np.arange(10, dtype=np.int32)
    batches = list(data.make_dataset(x, y, batch_size=4, shuffle=False))
    assert [b[0].shape[0] for b in batches] == [4, 4, 2]
    dropped = list(data.make_dataset(x, batch_size=4, shuffle=True, drop_remainder=True, seed=1))
    assert [b.shape[0] for b in dropped] == [4, 4]
    with pytest.raises(ValueError, match="batch_size=0"):
        data.make_dataset(x, batch_size=0)


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
