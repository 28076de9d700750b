"""Tests for tfmp/run/diagnostics/probe.py: the batch a run's diagnosis looks at."""

import keras
import numpy as np
import pytest

from tfmp.run import config as config_lib
from tfmp.run import diagnostics, shipped, tasks


def _model():
    x = keras.Input((4,))
    return keras.Model(x, keras.layers.Dense(3, activation="softmax", dtype="float32")(x))


def test_a_user_task_without_a_probe_gets_its_first_training_batch():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(20, 4)).astype(np.float32), rng.integers(0, 3, 20)
    task = tasks.SupervisedTask(_model, (x, y), loss="mse", config=config_lib.TrainConfig(batch_size=8))
    assert task.probe(None) is None  # Task's default: derive it
    features, labels = diagnostics.probe(task, None)
    first_features, first_labels = next(iter(task.train_data(None)))
    np.testing.assert_array_equal(features.numpy(), first_features.numpy())
    assert labels.numpy().tolist() == first_labels.numpy().tolist() and features.shape == (8, 4)


def test_a_shipped_image_task_probes_its_first_images_in_the_splits_order():
    task = shipped.ClassifierTask(config_lib.ClassifierConfig(dataset="digits", batch_size=4))
    split = task.load_data()
    images, labels = diagnostics.probe(task, split)
    np.testing.assert_array_equal(images.numpy(), split.x_train[:4])
    assert labels.numpy().tolist() == split.y_train[:4].tolist()


def test_an_empty_pipeline_is_named():
    x = np.zeros((0, 4), np.float32)
    task = tasks.SupervisedTask(_model, (x, np.zeros(0)), loss="mse", name="empty")
    with pytest.raises(config_lib.ConfigError, match="training data of 'empty' is empty"):
        diagnostics.probe(task, None)
