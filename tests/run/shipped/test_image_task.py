"""Tests for tfmp/run/shipped/image_task.py: what the shipped image tasks share."""

import pytest

from tfmp.run import config as config_lib
from tfmp.run import shipped
from tfmp.run.shipped import image_task


def test_epoch_batch_sizes():
    assert image_task.epoch_batch_sizes(10, 4, drop_remainder=False) == (4, 4, 2)
    assert image_task.epoch_batch_sizes(10, 4, drop_remainder=True) == (4, 4)
    assert image_task.epoch_batch_sizes(8, 4, drop_remainder=False) == (4, 4)
    with pytest.raises(ValueError, match="batch_size=16"):
        image_task.epoch_batch_sizes(10, 16, drop_remainder=True)


def test_the_gan_drops_a_last_partial_batch_and_the_classifier_keeps_it_everywhere_it_counts():
    gan = shipped.GANTask(config_lib.GANConfig(dataset="digits", batch_size=512))
    classifier = shipped.ClassifierTask(config_lib.ClassifierConfig(dataset="digits", batch_size=512))
    split = gan.load_data()
    assert (gan.drop_remainder, classifier.drop_remainder) == (True, False)
    assert gan.epoch_batch_sizes(split) == (512, 512)  # 1,438 training digits
    assert gan.steps_per_epoch(split) == len(list(gan.train_data(split))) == 2
    assert classifier.epoch_batch_sizes(split) == (512, 512, 414)
    assert isinstance(gan, shipped.ImageTask) and isinstance(classifier, shipped.ImageTask)
