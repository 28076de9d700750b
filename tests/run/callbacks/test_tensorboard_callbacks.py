"""Tests for tfmp/run/callbacks/tensorboard.py."""

import os

import numpy as np
import pytest
import tensorflow as tf

from tfmp.run import callbacks


def _summary_values(directory):
    """`(event, value)` for every summary value in the event files of `directory`, file by file."""
    for name in sorted(os.listdir(directory)):
        if name.startswith("events"):
            for event in tf.compat.v1.train.summary_iterator(os.path.join(directory, name)):
                for value in event.summary.value:
                    yield event, value


def _read_scalars(directory):
    values = {}
    for event, value in _summary_values(directory):
        if value.metadata.plugin_data.plugin_name == "scalars":
            values.setdefault(value.tag, []).append((event.step, float(tf.make_ndarray(value.tensor))))
    return values


def test_epoch_summaries_route_scalars_and_record_hparams(tmp_path):
    routes = {
        "g_loss": ("generator", "loss"),
        "d_loss": ("discriminator", "loss"),
        "images_per_sec": ("", "images_per_sec"),
    }
    summaries = callbacks.Summaries(str(tmp_path), routes.__getitem__, {"precision": "mixed_float16", "batch_size": 64})
    summaries.on_train_begin()
    summaries.on_epoch_end(0, {"g_loss": 0.75, "d_loss": 0.5, "images_per_sec": 100.0})
    summaries.on_epoch_end(1, {"g_loss": 0.25, "d_loss": 0.125, "images_per_sec": 200.0})
    summaries.on_train_end()
    assert _read_scalars(tmp_path / "generator") == {"epoch_loss": [(0, 0.75), (1, 0.25)]}
    assert _read_scalars(tmp_path / "discriminator") == {"epoch_loss": [(0, 0.5), (1, 0.125)]}
    assert _read_scalars(tmp_path) == {"epoch_images_per_sec": [(0, 100.0), (1, 200.0)]}
    plugins = {value.metadata.plugin_data.plugin_name for _, value in _summary_values(tmp_path)}
    assert "hparams" in plugins


def test_image_grid_tiles_row_major_and_pads():
    images = np.arange(3, dtype=np.float32).reshape(3, 1, 1, 1) + 1
    grid = callbacks.image_grid(images)
    assert grid.shape == (2, 2, 1)
    assert grid[..., 0].tolist() == [[1.0, 2.0], [3.0, 0.0]]
    with pytest.raises(ValueError, match="shape"):
        callbacks.image_grid(np.zeros((2, 2)))


def _descriptions(directory):
    return {
        value.tag: value.metadata.summary_description
        for _, value in _summary_values(directory)
        if value.metadata.summary_description
    }


def test_summaries_write_batch_scalars_at_the_global_step_without_warmup(tmp_path):
    timer = callbacks.StepTimer(images_per_step=10, warmup_steps=1)
    summaries = callbacks.Summaries(str(tmp_path), lambda key: ("", key), log_every=2, step=4, timer=timer)
    summaries.on_train_begin()
    timer.on_train_begin()
    for batch, (seconds, loss) in enumerate([(5.0, 4.0), (0.5, 3.0), (0.25, 2.0), (0.25, 1.0)]):
        timer.step_times.append(seconds)
        summaries.on_train_batch_end(batch, {"loss": loss, "skipped_steps": 1})
    summaries.on_epoch_end(1, {"loss": 2.5, "skipped_steps": 1, "images_per_sec": 30.0})
    summaries.on_train_end()
    scalars = _read_scalars(tmp_path)
    # 4 steps restored: this fit's steps are global steps 5..8; every 2nd is written.
    assert scalars["batch_loss"] == [(6, 3.0), (8, 1.0)]
    assert scalars["batch_skipped_steps"] == [(6, 1.0), (8, 1.0)]
    # Step 6's point covers steps 5-6, and step 5 (the process's first) is warm-up: 10 images in 0.5 s.
    # Step 8's covers steps 7-8: 20 images in 0.5 s.
    assert scalars["batch_images_per_sec"] == [(6, 20.0), (8, 40.0)]
    assert scalars["epoch_loss"] == [(1, 2.5)]
    descriptions = _descriptions(tmp_path)
    assert set(descriptions) == set(scalars)
    assert "Cumulative" in descriptions["batch_skipped_steps"]
    assert "warm-up steps" in descriptions["batch_images_per_sec"]
    assert "global training step" in descriptions["batch_loss"] and "x: the epoch" in descriptions["epoch_loss"]


def test_summaries_write_no_throughput_while_every_step_is_warmup(tmp_path):
    timer = callbacks.StepTimer(images_per_step=10, warmup_steps=3)
    summaries = callbacks.Summaries(str(tmp_path), lambda key: ("", key), timer=timer)
    summaries.on_train_begin()
    for batch in range(4):
        timer.step_times.append(0.5)
        summaries.on_train_batch_end(batch, {"loss": 1.0})
    summaries.on_train_end()
    assert _read_scalars(tmp_path)["batch_images_per_sec"] == [(4, 20.0)]
    with pytest.raises(ValueError, match="log_every=0"):
        callbacks.Summaries(str(tmp_path), lambda key: ("", key), log_every=0)


def test_image_grid_separates_tiles_with_gaps_of_a_constant_value():
    images = np.repeat(np.arange(1, 4, dtype=np.float32).reshape(3, 1, 1, 1), 2, axis=2)  # 1x2 tiles: 11, 22, 33
    grid = callbacks.image_grid(images, gap=1, gap_value=9.0)
    # 2x2 cells of 1x2 with a 1-pixel gap between them (none around): 3 rows, 5 columns.
    assert grid[..., 0].tolist() == [
        [1.0, 1.0, 9.0, 2.0, 2.0],
        [9.0, 9.0, 9.0, 9.0, 9.0],
        [3.0, 3.0, 9.0, 0.0, 0.0],
    ]
    with pytest.raises(ValueError, match="gap=-1"):
        callbacks.image_grid(images, gap=-1)


def test_generator_samples_write_a_grid_of_each_epoch_to_their_summary_dir(tmp_path):
    import keras

    generator = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Reshape((2, 2, 1))])
    samples = callbacks.GeneratorSamples(str(tmp_path / "generator"), generator, np.zeros((4, 3)), gap=1)
    samples.on_epoch_end(0)
    samples.on_epoch_end(1)
    samples.on_train_end()
    images = [(event.step, value.tag) for event, value in _summary_values(tmp_path / "generator")]
    assert images == [(0, "samples"), (1, "samples")]


def test_logdir_is_the_deprecated_name_of_summaries_tensorboard_dir(tmp_path):
    with pytest.warns(
        DeprecationWarning, match=r"`Summaries\(logdir\)` is deprecated; use `Summaries\(tensorboard_dir\)`"
    ):
        summaries = callbacks.Summaries(logdir=str(tmp_path), route=lambda key: ("", key))
    assert summaries.tensorboard_dir == str(tmp_path)


def test_logdir_is_the_deprecated_name_of_generator_samples_summary_dir(tmp_path):
    with pytest.warns(
        DeprecationWarning, match=r"`GeneratorSamples\(logdir\)` is deprecated; use `GeneratorSamples\(summary_dir\)`"
    ):
        samples = callbacks.GeneratorSamples(logdir=str(tmp_path), generator=None, noise=np.zeros((1, 3)))
    assert samples.summary_dir == str(tmp_path)


def test_logdir_is_the_deprecated_name_of_gradient_diagnostics_tensorboard_dir(tmp_path):
    with pytest.warns(
        DeprecationWarning,
        match=r"`GradientDiagnostics\(logdir\)` is deprecated; use `GradientDiagnostics\(tensorboard_dir\)`",
    ):
        diagnostics = callbacks.GradientDiagnostics(probe=None, every=5, logdir=str(tmp_path))
    assert (diagnostics.tensorboard_dir, diagnostics.every) == (str(tmp_path), 5)


def test_the_learning_rate_is_described_as_the_rate_of_the_next_step():
    assert "the one its next step applies" in callbacks.describe("g_learning_rate", per_step=True)
    assert "end of the epoch" in callbacks.describe("learning_rate", per_step=False)


def test_summaries_name_the_throughput_of_examples_examples_per_sec(tmp_path):
    timer = callbacks.StepTimer(images_per_step=10, warmup_steps=0, unit="ex")
    summaries = callbacks.Summaries(str(tmp_path), lambda key: ("", key), timer=timer)
    summaries.on_train_begin()
    timer.step_times.append(0.5)
    summaries.on_train_batch_end(0, {"loss": 1.0})
    summaries.on_epoch_end(0, {"loss": 1.0, "examples_per_sec": 20.0})
    summaries.on_train_end()
    scalars = _read_scalars(tmp_path)
    assert scalars["batch_examples_per_sec"] == [(1, 20.0)] and scalars["epoch_examples_per_sec"] == [(0, 20.0)]
    assert not [tag for tag in scalars if "images" in tag]
    assert "examples per second" in _descriptions(tmp_path)["batch_examples_per_sec"]
