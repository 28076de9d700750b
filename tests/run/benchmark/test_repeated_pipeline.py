"""Tests for tfmp/run/benchmark/repeated_pipeline.py: the real input pipeline of the input_pipeline mode."""

import tensorflow as tf

from tfmp.run import benchmark


def test_the_pipelines_are_the_training_pipelines():
    specs = benchmark.default_specs()
    gan = benchmark.training_pipeline(specs["gan"].with_config(dataset="digits", batch_size=512, seed=0))
    assert gan.epoch_batch_sizes == (512, 512)  # 1,438 training digits, last batch dropped
    assert gan.dataset.element_spec.shape.as_list() == [512, 28, 28, 1]
    classifier = benchmark.training_pipeline(
        specs["mobilenet_v2"].with_config(dataset="digits", batch_size=128, seed=0)
    )
    assert classifier.epoch_batch_sizes == (128,) * 11 + (30,)
    images, labels = classifier.dataset.element_spec
    assert images.shape.as_list() == [None, 32, 32, 3] and labels.dtype == tf.int32
