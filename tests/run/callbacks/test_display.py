"""Tests for tfmp/run/callbacks/display.py: how a task's logs are shown, derived from the task."""

import keras

from tfmp.run import config as config_lib
from tfmp.run import shipped, tasks
from tfmp.run.callbacks import display


def _model():
    x = keras.Input((4,))
    return keras.Model(x, keras.layers.Dense(3, dtype="float32")(x))


def test_a_user_task_gets_keras_layout_examples_its_loss_and_first_metric():
    task = tasks.SupervisedTask(_model, loss="mse", metrics=[keras.metrics.MeanAbsoluteError(), "mse"])
    assert display.console_fields(task) == (("Loss", "loss"), ("Mean Absolute Error", "mean_absolute_error"))
    route = display.summary_route(task)
    assert (route("loss"), route("val_mean_absolute_error"), route("loss_scale")) == (
        ("train", "loss"),
        ("validation", "mean_absolute_error"),
        ("train", "loss_scale"),
    )
    assert (display.example_unit(task), display.describe_data(task)) == ("ex", "")
    assert display.console_fields(tasks.SupervisedTask(_model, loss="mse")) == (("Loss", "loss"),)


def test_a_task_that_defines_them_is_shown_its_own_way():
    gan = shipped.GANTask(config_lib.GANConfig(dataset="digits"))
    assert display.console_fields(gan) == (("G Loss", "g_loss"), ("D Loss", "d_loss"))
    assert display.summary_route(gan)("d_loss_scale") == ("discriminator", "loss_scale")
    assert (display.example_unit(gan), display.describe_data(gan)) == ("img", "dataset=digits")
