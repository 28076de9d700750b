"""Tests for tfmp/run/callbacks.py."""

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


def test_step_timer_excludes_warmup_and_reports_epoch_throughput():
    timer = callbacks.StepTimer(images_per_step=100, warmup_steps=2)
    timer.on_train_begin()
    timer.on_epoch_begin(0)
    # Simulated step times: a slow first (tracing) step, then 0.5 s steps.
    timer.step_times.extend([5.0, 0.5, 0.5, 0.25])
    logs = {}
    timer.on_epoch_end(0, logs)
    # The epoch's throughput leaves the warm-up steps out too: 2 steps of 100 images in 0.75 s.
    assert logs["images_per_sec"] == pytest.approx(200 / 0.75)
    assert timer.measured_steps == 2
    assert timer.mean_images_per_sec == pytest.approx(200 / 0.75)


def test_step_timer_has_no_mean_when_every_step_is_warmup():
    timer = callbacks.StepTimer(images_per_step=10, warmup_steps=3)
    timer.step_times.extend([1.0, 1.0])
    assert timer.mean_images_per_sec is None


def test_step_timer_rejects_bad_arguments():
    with pytest.raises(ValueError, match="images_per_step=0"):
        callbacks.StepTimer(images_per_step=0)


def test_console_logger_prints_the_seed_line_and_a_summary():
    lines = []
    timer = callbacks.StepTimer(images_per_step=512, warmup_steps=1)
    console = callbacks.ConsoleLogger(
        timer, (("G Loss", "g_loss"), ("D Loss", "d_loss")), ("g_", "d_"), log_every=2,
        logdir="logs/run1", print_fn=lines.append,
    )
    console.set_params({"epochs": 1, "steps": 3})
    console.on_epoch_begin(0)
    logs = {"g_loss": 0.6991, "d_loss": 0.6123, "g_loss_scale": 32768.0, "d_loss_scale": 16384.0,
            "g_skipped_steps": 0, "d_skipped_steps": 1}
    for step, seconds in enumerate([2.0, 0.25, 0.5]):
        timer.step_times.append(seconds)
        console.on_train_batch_end(step, logs)
    assert lines == [
        "(0, 0), G Loss: 0.699, D Loss: 0.612, loss_scale: 32768/16384, step_time: 2.000, throughput: 256.000 img/s",
        "(0, 2), G Loss: 0.699, D Loss: 0.612, loss_scale: 32768/16384, step_time: 0.500, throughput: 1024.000 img/s",
    ]
    console.on_epoch_end(0, dict(logs, images_per_sec=600.0))
    console.on_train_end()
    summary = "\n".join(lines[3:])
    assert "3 steps; mean throughput 1365.3 img/s over 2 steps (first 1 steps excluded as warm-up)" in summary
    assert "skipped steps: G 0, D 1;" in summary
    assert "final G Loss 0.6991, D Loss 0.6123" in summary
    assert "tensorboard --logdir logs" in summary


def _one_step_console(logs):
    """A one-optimizer console logger after one 0.5 s step with `logs`; returns it and its printed lines."""
    lines = []
    timer = callbacks.StepTimer(images_per_step=8, warmup_steps=0)
    console = callbacks.ConsoleLogger(timer, (("Loss", "loss"),), print_fn=lines.append)
    console.set_params({"epochs": 1, "steps": 1})
    console.on_epoch_begin(0)
    timer.step_times.append(0.5)
    console.on_train_batch_end(0, logs)
    return console, lines


def test_console_logger_without_loss_scaling_says_none():
    _, lines = _one_step_console({"loss": 1.0})
    assert "loss_scale: none" in lines[0]


def test_epoch_summaries_route_scalars_and_record_hparams(tmp_path):
    routes = {"g_loss": ("generator", "loss"), "d_loss": ("discriminator", "loss"), "images_per_sec": ("", "images_per_sec")}
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


def _fit_tiny(callback, steps):
    import keras

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x, y = np.ones((steps * 2, 2), "float32"), np.zeros((steps * 2, 1), "float32")
    model.fit(x, y, batch_size=4, epochs=2, callbacks=[callback], verbose=0)  # steps/2 per epoch


def _traces(logdir):
    return [f for d, _, files in os.walk(logdir) for f in files if f.endswith(".xplane.pb")]


def test_profile_steps_traces_the_window_across_epochs(tmp_path):
    lines = []
    profiler = callbacks.ProfileSteps(2, 3, str(tmp_path), print_fn=lines.append)
    _fit_tiny(profiler, steps=4)  # two epochs of two steps: step 3 is the next epoch's first
    assert profiler.profiled_steps == [2, 3]
    assert len(_traces(tmp_path / "plugins" / "profile")) == 1
    assert lines == [f"profiled steps 2-3: tensorboard --logdir {tmp_path} (Profile tab)"]


def test_profile_steps_past_the_end_stops_with_the_run(tmp_path):
    profiler = callbacks.ProfileSteps(3, 99, str(tmp_path), print_fn=lambda line: None)
    _fit_tiny(profiler, steps=4)
    assert profiler.profiled_steps == [3, 4]
    assert _traces(tmp_path)


@pytest.mark.parametrize("start, end", [(0, 3), (4, 3)])
def test_profile_steps_rejects_bad_windows(start, end, tmp_path):
    with pytest.raises(ValueError, match=f"start={start}, end={end}"):
        callbacks.ProfileSteps(start, end, str(tmp_path))


# --- runs split over several fit() calls, and non-finite stops --------------------


class _Recorder(__import__("keras").callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.events = []

    def on_train_begin(self, logs=None):
        self.events.append(("train_begin", self.params["steps"], self.params["epochs"]))

    def on_train_end(self, logs=None):
        self.events.append(("train_end",))

    def on_epoch_begin(self, epoch, logs=None):
        self.events.append(("epoch", epoch))

    def on_train_batch_end(self, batch, logs=None):
        self.events.append(("batch", batch))


def test_run_segments_look_like_one_run_to_a_callback():
    import keras

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x = np.zeros((12, 2), np.float32)
    recorder = _Recorder()
    run = {"steps": 3, "epochs": 3}
    # Resumed after 2 steps of epoch 0: one step finishes it, then epochs 1 and 2.
    model.fit(x[:1], x[:1, :1], batch_size=1, epochs=1, verbose=0,
              callbacks=[callbacks.RunSegment(recorder, True, False, batch_offset=2, params=run)])
    model.fit(x, x[:, :1], batch_size=4, initial_epoch=1, epochs=3, verbose=0,
              callbacks=[callbacks.RunSegment(recorder, False, True, params=run)])
    assert recorder.events == [
        ("train_begin", 3, 3), ("epoch", 0), ("batch", 2),
        ("epoch", 1), ("batch", 0), ("batch", 1), ("batch", 2),
        ("epoch", 2), ("batch", 0), ("batch", 1), ("batch", 2), ("train_end",),
    ]


def test_nonfinite_stop_names_the_step_and_the_input_and_leaves_the_weights():
    import keras

    from tfmp import trainers

    inputs = keras.Input((2,))
    model = keras.Model(inputs, keras.layers.Dense(1, name="dense")(inputs))
    trainer = trainers.ClassifierTrainer(model)
    trainer.compile(keras.optimizers.SGD(0.1), loss="mse", skip_nonfinite=True)
    x = np.ones((6, 2), np.float32)
    x[4, 1] = np.nan  # the third batch of 2
    data = tf.data.Dataset.from_tensor_slices((x, np.ones((6, 1), np.float32))).batch(2)
    batches = list(data)
    after_two = []

    class Snapshot(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 1:
                after_two.extend(v.numpy().copy() for v in trainer.variables)

    with pytest.raises(callbacks.NonFiniteStepError) as error:
        trainer.fit(data, epochs=1, verbose=0, callbacks=[Snapshot(), callbacks.NonFiniteStop(batches.__getitem__)])
    message = str(error.value)
    assert "epoch 1, step 3 of the epoch (global step 3)" in message
    assert "input batch" in message and "1 NaN" in message
    assert "skipped this step's update and every variable of the model is finite" in message
    for before, variable in zip(after_two, trainer.variables):
        np.testing.assert_array_equal(before, variable.numpy())


def _dense_trainer(learning_rate=0.1):
    import keras

    from tfmp import trainers

    inputs = keras.Input((2,))
    trainer = trainers.ClassifierTrainer(keras.Model(inputs, keras.layers.Dense(1, name="dense")(inputs)))
    trainer.compile(keras.optimizers.SGD(learning_rate), loss="mse", skip_nonfinite=True)
    return trainer


def test_nonfinite_stop_sees_a_non_finite_first_step():
    trainer = _dense_trainer()
    x = np.ones((4, 2), np.float32)
    x[0, 0] = np.inf  # the very first batch of the fit()
    batches = list(tf.data.Dataset.from_tensor_slices((x, np.ones((4, 1), np.float32))).batch(2))
    with pytest.raises(callbacks.NonFiniteStepError) as error:
        trainer.fit(batches[0][0], batches[0][1], epochs=1, verbose=0,
                    callbacks=[callbacks.NonFiniteStop(batches.__getitem__)])
    assert "epoch 1, step 1 of the epoch (global step 1)" in str(error.value)
    assert "input batch" in str(error.value) and "1 Inf" in str(error.value)
    assert int(trainer.optimizer.skipped_steps) == 1


def test_nonfinite_stop_does_not_call_broken_weights_unchanged():
    """An infinite learning rate applies inf to the weights (finite gradient), then the next step is skipped:
    the message must not claim the weights are fine."""
    trainer = _dense_trainer(learning_rate=float("inf"))
    x = np.ones((4, 2), np.float32)
    data = tf.data.Dataset.from_tensor_slices((x, np.zeros((4, 1), np.float32))).batch(2)
    batches = list(data)
    with pytest.raises(callbacks.NonFiniteStepError) as error:
        trainer.fit(data, epochs=1, verbose=0, shuffle=False,
                    callbacks=[callbacks.NonFiniteStop(batches.__getitem__)])
    message = str(error.value)
    assert "step 2 of the epoch (global step 2)" in message
    assert "unchanged" not in message and "is finite" not in message
    assert "2 of the model's variables already hold NaN or Inf (dense/kernel, dense/bias)" in message


def test_checkpointing_saves_every_n_steps_and_stops_on_request(tmp_path):
    import signal

    import keras

    from tfmp import trainers
    from tfmp.run import checkpoint, preemption

    inputs = keras.Input((2,))
    trainer = trainers.ClassifierTrainer(keras.Model(inputs, keras.layers.Dense(1)(inputs)))
    trainer.compile(keras.optimizers.SGD(0.1), loss="mse")
    ckpt = checkpoint.RunCheckpoint(str(tmp_path), trainer, {}, keep=10)
    x = np.ones((8, 2), np.float32)
    lines = []
    saver = callbacks.Checkpointing(ckpt, step=0, every=3, print_fn=lines.append)
    trainer.fit(x, x[:, :1], batch_size=2, epochs=1, verbose=0, callbacks=[saver])
    assert [os.path.basename(p) for p in ckpt.checkpoints] == ["ckpt-3", "ckpt-4"]
    assert lines == [f"checkpoint: {ckpt.checkpoints[-1]} (step 4)"]

    class Stop(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 0:
                signal.raise_signal(signal.SIGTERM)

    with preemption.PreemptionGuard() as guard:
        saver = callbacks.Checkpointing(ckpt, step=4, every=0, guard=guard, print_fn=lines.append)
        with pytest.raises(preemption.Preempted) as stopped:
            trainer.fit(x, x[:, :1], batch_size=2, epochs=1, verbose=0, callbacks=[Stop(), saver])
    assert stopped.value.step == 5 and stopped.value.checkpoint.endswith("ckpt-5")
    assert ckpt.latest().step == 5


def _descriptions(directory):
    return {value.tag: value.metadata.summary_description
            for _, value in _summary_values(directory) if value.metadata.summary_description}


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


def test_step_timer_leaves_an_all_warmup_epoch_without_throughput():
    timer = callbacks.StepTimer(images_per_step=10, warmup_steps=3)
    timer.on_train_begin()
    timer.on_epoch_begin(0)
    timer.step_times.extend([5.0, 0.5])
    logs = {}
    timer.on_epoch_end(0, logs)
    assert "images_per_sec" not in logs
    timer.on_epoch_begin(1)
    timer.step_times.extend([0.5, 0.25, 0.25])  # the third step of the run is still warm-up
    timer.on_epoch_end(1, logs)
    assert logs["images_per_sec"] == pytest.approx(20 / 0.5)


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


def test_console_summary_keeps_one_bare_count_for_one_optimizer():
    console, lines = _one_step_console({"loss": 1.0, "skipped_steps": 2})
    console.on_epoch_end(0, {"loss": 1.0, "skipped_steps": 2})
    console.on_train_end()
    assert "  skipped steps: 2; final Loss 1.0000" in lines


class _Stream:
    def __init__(self, tty):
        self.tty = tty

    def isatty(self):
        return self.tty


@pytest.mark.parametrize("mode, stream, expected", [
    ("auto", _Stream(True), "progress"),
    ("auto", _Stream(False), "lines"),
    ("auto", object(), "lines"),  # no isatty: not a terminal
    ("auto", None, "lines"),
    ("lines", _Stream(True), "lines"),
    ("progress", _Stream(False), "progress"),
])
def test_console_mode_is_a_progress_bar_only_on_a_terminal(mode, stream, expected):
    assert callbacks.console_mode(mode, stream) == expected


def test_console_mode_rejects_an_unknown_mode():
    with pytest.raises(ValueError, match="'bars'"):
        callbacks.console_mode("bars", None)


def test_console_logger_progress_bar_replaces_the_step_lines(capsys):
    lines = []
    timer = callbacks.StepTimer(images_per_step=512, warmup_steps=0)
    console = callbacks.ConsoleLogger(timer, (("G Loss", "g_loss"), ("D Loss", "d_loss")), ("g_", "d_"),
                                      print_fn=lines.append, progress=True)
    console.set_params({"epochs": 1, "steps": 2})
    console.on_epoch_begin(0)
    logs = {"g_loss": 0.5, "d_loss": 0.25, "g_loss_scale": 32768.0, "d_loss_scale": 16384.0,
            "g_skipped_steps": 0, "d_skipped_steps": 0}
    for step in range(2):
        timer.step_times.append(0.5)
        console.on_train_batch_end(step, logs)
    console.on_epoch_end(0, logs)
    bar = capsys.readouterr().out
    assert "2/2" in bar and "G Loss: 0.5000" in bar and "D loss_scale: 16384.0000" in bar and "img/s: 1024.0000" in bar
    assert lines[0] == "Epoch 1/1"
    assert not [line for line in lines if line.startswith("(")], lines  # no seed step lines
    assert lines[1].startswith("epoch 1/1: ")
