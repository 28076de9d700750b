"""Tests for tfmp/run/epochs.py: an epoch's length, the stream a resume replays, and the batch at a step."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf
import tiny

from tfmp.run import config as config_lib
from tfmp.run import epochs, shipped, tasks

TINY_CLASSIFIER = config_lib.ClassifierConfig(dataset="digits", batch_size=16, alpha=0.35, epochs=3)


def test_a_user_task_without_the_hooks_gets_its_epochs_stream_and_batches_from_its_pipeline():
    x, y = tiny.arrays()
    task = tasks.SupervisedTask(tiny.dense_model(), (x, y), loss="mse", config=config_lib.TrainConfig(batch_size=8))
    assert task.stream(None, 0) is None and task.steps_per_epoch(None) is None  # Task's defaults: derive them
    assert epochs.steps_per_epoch(task, None) == 3
    first = [b[1].numpy().tolist() for b in task.train_data(None)]
    resumed = [b[1].numpy().tolist() for b in epochs.stream(task, None, 2).take(2)]
    assert resumed[0] == first[2] and resumed[1] != first[0]  # step 3 is the next epoch's, reshuffled
    assert epochs.batch_at(task, None, 2)[1].numpy().tolist() == first[2]


def test_batch_at_is_the_streams_batch_of_that_step_across_epochs():
    task = shipped.ClassifierTask(dataclasses.replace(TINY_CLASSIFIER, batch_size=512))
    split = task.load_data()
    steps = epochs.steps_per_epoch(task, len(split.x_train))
    stream = [x.numpy() for x, _ in epochs.stream(task, split).take(2 * steps + 1)]
    for index in (0, steps - 1, steps, 2 * steps):
        np.testing.assert_array_equal(epochs.batch_at(task, split, index)[0].numpy(), stream[index])
    # A new epoch is reshuffled: its first batch is not the first epoch's.
    assert not np.array_equal(stream[0], stream[steps])


def test_a_pipeline_that_repeats_forever_is_told_to_set_steps_per_epoch_and_an_unknown_length_its_cardinality():
    def forever(batch_size, seed):
        return tf.data.Dataset.from_tensor_slices(tiny.arrays()).batch(batch_size).repeat()

    def unknown(batch_size, seed):
        return tf.data.Dataset.from_tensor_slices(tiny.arrays()).filter(lambda x, y: y >= 0).batch(batch_size)

    endless = tasks.SupervisedTask(tiny.dense_model(), forever, loss="mse", name="endless")
    with pytest.raises(config_lib.ConfigError) as raised:
        epochs.steps_per_epoch(endless, None)
    assert raised.value.render("--steps_per_epoch") == (
        "--steps_per_epoch must be set: the training pipeline of 'endless' repeats forever, so an epoch has no end. "
        "Set it to the steps of an epoch, or make the pipeline give one epoch (no repeat()). "
        "Received: --steps_per_epoch=None"
    )
    assert "cardinality" not in str(raised.value) and "assert_cardinality" not in str(raised.value)
    unsized = tasks.SupervisedTask(tiny.dense_model(), unknown, loss="mse", name="unsized")
    with pytest.raises(config_lib.ConfigError, match=r"'unsized'.*not known \(tf.data cardinality -2\)") as raised:
        epochs.steps_per_epoch(unsized, None)
    assert "assert_cardinality" in str(raised.value)
    assert (
        epochs.steps_per_epoch(endless.with_config(steps_per_epoch=4), None),
        epochs.steps_per_epoch(unsized.with_config(steps_per_epoch=2), None),
    ) == (4, 2)
