"""Tests for tfmp/run/benchmark/pipeline.py: the real input pipeline of the input_pipeline mode."""

import pytest
import tensorflow as tf

from tfmp.run import benchmark


def test_the_pipelines_are_the_training_pipelines():
    specs = benchmark.default_specs()
    gan = benchmark.training_pipeline(specs["gan"].replace(dataset="digits", batch_size=512, seed=0))
    assert gan.epoch_batch_sizes == (512, 512)  # 1,438 training digits, last batch dropped
    assert gan.dataset.element_spec.shape.as_list() == [512, 28, 28, 1]
    classifier = benchmark.training_pipeline(specs["mobilenet_v2"].replace(dataset="digits", batch_size=128, seed=0))
    assert classifier.epoch_batch_sizes == (128,) * 11 + (30,)
    images, labels = classifier.dataset.element_spec
    assert images.shape.as_list() == [None, 32, 32, 3] and labels.dtype == tf.int32


def test_epoch_batch_sizes():
    assert benchmark.epoch_batch_sizes(10, 4, drop_remainder=False) == (4, 4, 2)
    assert benchmark.epoch_batch_sizes(10, 4, drop_remainder=True) == (4, 4)
    assert benchmark.epoch_batch_sizes(8, 4, drop_remainder=False) == (4, 4)
    with pytest.raises(ValueError, match="batch_size=16"):
        benchmark.epoch_batch_sizes(10, 16, drop_remainder=True)
