"""Tests for tfmp/fit_logs.py: the loss scale and skipped steps in fit()'s logs, and Keras's own callbacks."""

import csv
import os
import warnings

import families
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfmp


def _keras_scalars(directory):
    """`{tag: [value, ...]}` of the scalars Keras's TensorBoard callback wrote under `directory`."""
    found = {}
    for folder, _, names in os.walk(directory):
        for name in sorted(names):
            if name.startswith("events"):
                for event in tf.compat.v1.train.summary_iterator(os.path.join(folder, name)):
                    for value in event.summary.value:
                        if value.metadata.plugin_data.plugin_name != "scalars":
                            continue
                        found.setdefault(value.tag, []).append(float(tf.make_ndarray(value.tensor)))
    return found


def _data(family, n=32, nan_row=None):
    x, y, _, _ = families.digits(n_train=n)
    if family != "bn_cnn":
        x = families.tokens(x)
    weights = np.ones(n, np.float32)
    if nan_row is not None:
        if family == "bn_cnn":
            x = x.copy()
            x[nan_row] = np.nan
        else:
            weights[nan_row] = np.nan
    return x, y, weights


FAMILIES = {"bn_cnn": families.bn_cnn, "transformer": families.transformer, "gru": families.gru}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_trainer_puts_loss_scale_and_skipped_steps_in_keras_tensorboard_event_files(family, tmp_path):
    x, y, w = _data(family, nan_row=20)  # batch 2 of 2 (rows 16..31) is skipped
    with tfmp.precision_scope("mixed_float16"):
        keras.utils.set_random_seed(0)
        trainer = tfmp.Trainer(FAMILIES[family]())
        # A scale no finite step overflows at, so that only the NaN batch is skipped.
        optimizer = tfmp.LossScaleOptimizer(keras.optimizers.Adam(1e-2), initial_scale=256)
        trainer.compile(optimizer, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    board = keras.callbacks.TensorBoard(str(tmp_path), update_freq=1)
    history = trainer.fit(x, y, sample_weight=w, batch_size=16, epochs=2, shuffle=False, verbose=0, callbacks=[board])
    scalars = _keras_scalars(str(tmp_path))
    assert {"batch_loss_scale", "epoch_loss_scale", "batch_skipped_steps", "epoch_skipped_steps"} <= set(scalars)
    # The NaN batch is skipped in each epoch: the scale halves each time, and stays out of the loss.
    assert history.history["skipped_steps"] == scalars["epoch_skipped_steps"] == [1, 2]
    assert history.history["loss_scale"] == scalars["epoch_loss_scale"] == [128, 64]
    assert scalars["batch_skipped_steps"] == [0, 1, 1, 2]
    assert all(np.isfinite(history.history["loss"])) and all(np.isfinite(scalars["epoch_loss"])), history.history


def test_log_loss_scale_adds_both_to_plain_fit_for_keras_tensorboard_csv_and_history(tmp_path):
    x, y, _ = _data("gru")
    with tfmp.precision_scope("mixed_float16"):
        keras.utils.set_random_seed(0)
        model = families.gru()
        model.compile(tfmp.LossScaleOptimizer(keras.optimizers.Adam()), "sparse_categorical_crossentropy")
    log = str(tmp_path / "log.csv")
    callbacks = [
        tfmp.LogLossScale(),
        keras.callbacks.TensorBoard(str(tmp_path / "tb"), update_freq=1),
        keras.callbacks.CSVLogger(log),
    ]
    history = model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=callbacks)
    assert {"loss_scale", "skipped_steps"} <= set(history.history)
    scalars = _keras_scalars(str(tmp_path / "tb"))
    assert scalars["batch_loss_scale"][: len(scalars["batch_skipped_steps"])] and "epoch_loss_scale" in scalars
    assert scalars["epoch_loss_scale"] == history.history["loss_scale"]
    with open(log) as f:
        rows = list(csv.DictReader(f))
    assert [float(r["loss_scale"]) for r in rows] == history.history["loss_scale"]
    assert [int(r["skipped_steps"]) for r in rows] == history.history["skipped_steps"]


def test_without_a_tfmp_optimizer_or_on_a_trainer_nothing_is_added():
    x, y, _ = _data("gru", n=16)
    model = families.gru()
    model.compile("adam", "sparse_categorical_crossentropy")
    history = model.fit(x, y, batch_size=16, verbose=0, callbacks=[tfmp.LogLossScale()])
    assert set(history.history) == {"loss"}
    trainer = tfmp.Trainer(families.gru())
    trainer.compile(tfmp.LossScaleOptimizer(keras.optimizers.Adam()), loss="sparse_categorical_crossentropy")
    logs = {}

    class Keep(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, epoch_logs=None):
            logs.update(epoch_logs)

    trainer.fit(x, y, batch_size=16, verbose=0, callbacks=[tfmp.LogLossScale(), Keep()])
    assert type(logs["skipped_steps"]) is not int  # the trainer's own value, not the callback's copy


def _fit_with_a_nan_batch(model, **compile_kwargs):
    x, y, _ = _data("bn_cnn", nan_row=3)
    model.compile(tfmp.LossScaleOptimizer(keras.optimizers.SGD(0.1)), "sparse_categorical_crossentropy")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0, callbacks=[tfmp.LogLossScale()])
    return [str(w.message) for w in caught if w.category is RuntimeWarning and "skipped a step" in str(w.message)]


def test_plain_fit_warns_once_at_the_first_skip_when_batch_norm_cannot_be_put_back():
    with tfmp.precision_scope("mixed_float16"):
        model = families.bn_cnn()
    messages = _fit_with_a_nan_batch(model)
    assert len(messages) == 1, messages  # two skipped steps, one warning
    assert "tfmp.Trainer(bn_cnn)" in messages[0] and "moving_mean" in messages[0]
    assert "tfmp.undo_if_skipped(model, optimizer)" in messages[0]
    assert not np.isfinite(model.layers[2].moving_mean.numpy()).all()  # what the warning is about


def test_no_warning_when_nothing_leaks():
    with tfmp.precision_scope("mixed_float16"):
        model = families.gru()
    x, y, w = _data("gru", nan_row=3)
    model.compile(tfmp.LossScaleOptimizer(keras.optimizers.SGD(0.1)), "sparse_categorical_crossentropy")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = model.fit(x, y, sample_weight=w, batch_size=16, verbose=0, callbacks=[tfmp.LogLossScale()])
    assert history.history["skipped_steps"] == [1]
    assert not [w for w in caught if "skipped a step" in str(w.message)]


def test_no_warning_for_a_custom_train_step_that_runs_inside_the_guard():
    class Guarded(keras.Model):
        def train_step(self, data):
            x, y = data
            with tfmp.undo_if_skipped(self, self.optimizer):
                with tf.GradientTape() as tape:
                    loss = self.compute_loss(x=x, y=y, y_pred=self(x, training=True))
                    scaled = self.optimizer.scale_loss(loss)
                self.optimizer.apply(tape.gradient(scaled, self.trainable_variables), self.trainable_variables)
            return {"loss": loss}

    with tfmp.precision_scope("mixed_float16"):
        inner = families.bn_cnn()
        model = Guarded(inner.inputs, inner.outputs)
    messages = _fit_with_a_nan_batch(model)
    assert messages == []
    assert np.isfinite(model.layers[2].moving_mean.numpy()).all()  # put back by the guard
