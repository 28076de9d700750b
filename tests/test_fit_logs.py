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
    with pytest.warns(RuntimeWarning, match="found no tfmp.LossScaleOptimizer"):
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


# -- a GAN as keras-io writes it: a keras.Model subclass with its optimizers as attributes -----------------------


class KerasIoGAN(keras.Model):
    """keras-io's "DCGAN overriding train_step", shrunk: two attribute optimizers and two `Mean` trackers."""

    def __init__(self, discriminator, generator, latent_dim=2, name="gan"):
        super().__init__(name=name)
        self.discriminator = discriminator
        self.generator = generator
        self.latent_dim = latent_dim
        self.seed_generator = keras.random.SeedGenerator(0)
        self.d_loss_tracker = keras.metrics.Mean(name="d_loss")
        self.g_loss_tracker = keras.metrics.Mean(name="g_loss")

    @property
    def metrics(self):
        return [self.d_loss_tracker, self.g_loss_tracker]

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer
        self.loss_fn = loss_fn

    @staticmethod
    def _step(optimizer, network, loss_of):
        with tf.GradientTape() as tape:
            loss = loss_of()
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, network.trainable_weights)
        optimizer.apply_gradients(zip(grads, network.trainable_weights))  # divides by the scale
        return loss

    def train_step(self, real):
        batch = keras.ops.shape(real)[0]
        noise = keras.random.normal((batch, self.latent_dim), seed=self.seed_generator)
        images = keras.ops.concatenate([self.generator(noise), real], axis=0)
        labels = keras.ops.concatenate([keras.ops.ones((batch, 1)), keras.ops.zeros((batch, 1))], axis=0)
        d_loss = self._step(
            self.d_optimizer, self.discriminator, lambda: self.loss_fn(labels, self.discriminator(images))
        )
        misleading = keras.ops.zeros((batch, 1))
        g_loss = self._step(
            self.g_optimizer,
            self.generator,
            lambda: self.loss_fn(misleading, self.discriminator(self.generator(noise))),
        )
        self.d_loss_tracker.update_state(d_loss)
        self.g_loss_tracker.update_state(g_loss)
        return {"d_loss": self.d_loss_tracker.result(), "g_loss": self.g_loss_tracker.result()}


def _gan(generator_dtype="float32", cls=KerasIoGAN, name="gan"):
    """A tiny mixed_float16 GAN on 4 features; its generator's last layer computes in `generator_dtype`."""
    with tfmp.precision_scope("mixed_float16"):
        keras.utils.set_random_seed(0)
        generator = keras.Sequential(
            [keras.Input((2,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(4, dtype=generator_dtype)],
            name="generator",
        )
        discriminator = keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1, dtype="float32")],
            name="discriminator",
        )
        gan = cls(discriminator, generator, name=name)
    gan.compile(
        d_optimizer=tfmp.LossScaleOptimizer(keras.optimizers.Adam(1e-3)),
        g_optimizer=tfmp.LossScaleOptimizer(keras.optimizers.Adam(1e-3)),
        loss_fn=keras.losses.BinaryCrossentropy(from_logits=True),
    )
    return gan


def _real_images(nan_row=None):
    """16 rows of 4 features in [0, 1), batched by 8; a NaN in `nan_row` makes the discriminator's step skip."""
    x = np.random.default_rng(0).uniform(size=(16, 4)).astype(np.float32)
    if nan_row is not None:
        x[nan_row, 0] = np.nan
    return tf.data.Dataset.from_tensor_slices(x).batch(8)


def test_a_keras_io_gan_logs_both_attribute_optimizers_in_keras_tensorboard_event_files(tmp_path):
    gan = _gan()
    board = keras.callbacks.TensorBoard(str(tmp_path), update_freq=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = gan.fit(_real_images(nan_row=12), epochs=1, verbose=0, callbacks=[tfmp.LogLossScale(), board])
    scalars = _keras_scalars(str(tmp_path))
    # Batch 2's real images hold a NaN: the discriminator's step is skipped and its scale halves; the
    # generator's loss does not read the real images, so its step is not.
    assert scalars["batch_d_optimizer_skipped_steps"] == [0, 1]
    assert scalars["batch_d_optimizer_loss_scale"] == [2**15, 2**14]
    assert scalars["batch_g_optimizer_skipped_steps"] == [0, 0]
    assert scalars["batch_g_optimizer_loss_scale"] == [2**15, 2**15]
    assert scalars["epoch_d_optimizer_skipped_steps"] == history.history["d_optimizer_skipped_steps"] == [1]
    assert scalars["epoch_d_optimizer_loss_scale"] == history.history["d_optimizer_loss_scale"] == [2**14]
    assert scalars["epoch_g_optimizer_skipped_steps"] == [0] and scalars["epoch_g_optimizer_loss_scale"] == [2**15]
    # model.optimizer is what super().compile() made (Keras's own LossScaleOptimizer around rmsprop): not logged.
    assert not isinstance(gan.optimizer, tfmp.LossScaleOptimizer)
    assert "batch_loss_scale" not in scalars and "batch_skipped_steps" not in scalars
    # The trackers' NaN is no forward-pass state, the generator's output is float32, and optimizers were found.
    assert not np.isfinite(history.history["d_loss"][0])
    assert [str(w.message) for w in caught if w.category is RuntimeWarning] == []


def test_each_optimizer_logs_once_and_one_that_only_skips_logs_no_loss_scale():
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs), name="regression")
    model.compile(tfmp.LossScaleOptimizer(keras.optimizers.SGD(0.1)), "mse")
    model.same_optimizer = model.optimizer  # logged once, under model.optimizer's keys
    model.skipper = tfmp.LossScaleOptimizer(keras.optimizers.SGD(0.1), dynamic=False, initial_scale=1)
    x = np.ones((8, 4), np.float32)
    history = model.fit(x, x[:, :1], batch_size=8, verbose=0, callbacks=[tfmp.LogLossScale()])
    assert set(history.history) == {"loss", "loss_scale", "skipped_steps", "skipper_skipped_steps"}
    assert history.history["skipper_skipped_steps"] == [0]


def test_without_any_tfmp_optimizer_it_warns_once_naming_the_model_and_the_fix():
    gan = _gan()
    gan.compile(  # the same GAN with plain Keras optimizers
        d_optimizer=keras.optimizers.Adam(),
        g_optimizer=keras.optimizers.Adam(),
        loss_fn=keras.losses.MeanSquaredError(),
    )
    callback = tfmp.LogLossScale()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):  # two fit() calls with one callback: one warning
            history = gan.fit(_real_images(), verbose=0, callbacks=[callback])
    messages = [str(w.message) for w in caught if w.category is RuntimeWarning]
    assert len(messages) == 1, messages
    assert "found no tfmp.LossScaleOptimizer on model 'gan'" in messages[0]
    assert "Compile the model with optimizer=tfmp.LossScaleOptimizer(...)" in messages[0]
    assert "self.d_optimizer = tfmp.LossScaleOptimizer(...)" in messages[0]
    assert "Received: model.optimizer=keras.src.optimizers.loss_scale_optimizer.LossScaleOptimizer" in messages[0]
    assert set(history.history) == {"d_loss", "g_loss"}


class WGANStep(KerasIoGAN):
    """The step of keras-io's WGAN-GP that mixes the generator's output with real images (its gradient penalty)."""

    def train_step(self, real):
        noise = keras.random.normal((keras.ops.shape(real)[0], self.latent_dim), seed=self.seed_generator)
        difference = self.generator(noise) - real
        return {"difference": tf.reduce_mean(difference)}


def test_a_float16_generator_output_is_named_with_its_fix_before_the_first_step_fails():
    gan = _gan(generator_dtype=None, cls=WGANStep, name="wgan")  # its last Dense follows mixed_float16
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(TypeError, match="float16"):  # the pitfall itself: float16 fake minus float32 real
            gan.fit(_real_images(), verbose=0, callbacks=[tfmp.LogLossScale()])
    (message,) = [str(w.message) for w in caught if w.category is RuntimeWarning]
    assert message.startswith("Model 'wgan': what should stay float32 is computed in 16 bits.")
    assert message.endswith(
        "  generator output 0: model output in float16; fix: give the model's last layer dtype='float32', "
        "or end it with keras.layers.Activation('linear', dtype='float32')"
    )
    # Asked not to, it does not check.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(TypeError, match="float16"):
            gan.fit(_real_images(), verbose=0, callbacks=[tfmp.LogLossScale(check_outputs=False)])
    assert [w for w in caught if "should stay float32" in str(w.message)] == []
