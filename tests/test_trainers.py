"""Tests for tfmp/trainers/: the loss-scaled step inside fit()."""

import contextlib

import families
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfmp
from tfmp import trainers
from tfmp.models.gan import build_discriminator, build_generator


def _linear_classifier(seed=0):
    inputs = keras.Input((4,))
    logits = keras.layers.Dense(3, name="dense", kernel_initializer=keras.initializers.GlorotUniform(seed))(inputs)
    outputs = keras.layers.Activation("softmax", dtype="float32", name="probs")(logits)
    return keras.Model(inputs, outputs)


def _tiny_gan(seed=0):
    generator = build_generator(latent_dim=8, widths=(8, 8, 8))
    discriminator = build_discriminator(widths=(8, 8, 8))
    return trainers.GANTrainer(generator, discriminator, seed=seed)


def _data(n=32, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 4)).astype(np.float32), rng.integers(0, 3, size=n).astype(np.int32)


# --- labels -----------------------------------------------------------------


def test_discriminator_labels_soften_and_swap_the_first_tenth():
    real, fake = trainers.discriminator_labels(20, softening=0.01, swap_fraction=0.1)
    np.testing.assert_allclose(real.numpy()[:, 0], [0.99] * 2 + [0.01] * 18, rtol=0, atol=1e-7)
    np.testing.assert_allclose(fake.numpy()[:, 0], [0.01] * 2 + [0.99] * 18, rtol=0, atol=1e-7)
    assert real.shape == (20, 1) and real.dtype == tf.float32


def test_discriminator_labels_round_the_swap_count_down():
    real, _ = trainers.discriminator_labels(19, softening=0.0, swap_fraction=0.1)
    assert real.numpy()[:, 0].tolist() == [1.0] + [0.0] * 18


# --- optimizer preparation (the Model Garden grid) ----------------------------


@pytest.mark.parametrize("precision", ["float32", "mixed_bfloat16", "mixed_float16"])
@pytest.mark.parametrize("loss_scale", ["none", "dynamic", 128])
def test_prepare_optimizer_scales_only_float16_and_skips_in_every_precision(precision, loss_scale):
    with tfmp.precision_scope(precision):
        model = _linear_classifier()
    optimizer = trainers.prepare_optimizer(keras.optimizers.SGD(0.1), model, loss_scale)
    assert type(optimizer) is tfmp.LossScaleOptimizer
    scaled = precision == "mixed_float16" and loss_scale != "none"
    assert float(optimizer.loss_scale) == (1.0 if not scaled else 2.0**15 if loss_scale == "dynamic" else 128.0)
    assert optimizer.dynamic == (scaled and loss_scale == "dynamic")
    bare = trainers.prepare_optimizer(keras.optimizers.SGD(0.1), model, loss_scale, skip_nonfinite=False)
    assert isinstance(bare, tfmp.LossScaleOptimizer) == scaled


def test_prepare_optimizer_keeps_a_tfmp_optimizer_and_converts_a_keras_one():
    with tfmp.precision_scope("mixed_float16"):
        model = _linear_classifier()
    mine = tfmp.LossScaleOptimizer(keras.optimizers.SGD(0.1), initial_scale=64, hysteresis=2)
    assert trainers.prepare_optimizer(mine, model, "none") is mine
    stock = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1), initial_scale=256)
    converted = trainers.prepare_optimizer(stock, model)
    assert isinstance(converted, tfmp.LossScaleOptimizer)
    assert float(converted.loss_scale) == 256.0


def test_prepare_optimizer_turns_tf_keras_2s_optimizer_into_keras_3s_with_its_settings():
    # The trainers' step is Keras 3's (scale_loss, then an update that divides): tf.keras 2's class refuses it.
    with tfmp.precision_scope("mixed_float16"):
        model = _linear_classifier()
    inner = keras.optimizers.SGD(0.1)
    given = tfmp.mixed_precision.LossScaleOptimizer(inner, initial_scale=64, hysteresis=3, xla_update=True)
    converted = trainers.prepare_optimizer(given, model)
    assert type(converted) is tfmp.LossScaleOptimizer and converted.inner_optimizer is inner
    settings = ("initial_scale", "dynamic", "hysteresis", "max_scale", "min_scale", "xla_update")
    assert [getattr(converted, name) for name in settings] == [64.0, True, 3, 2.0**24, 1.0, True]


def test_computes_in_float16_looks_into_nested_models():
    with tfmp.precision_scope("mixed_float16"):
        inner = _linear_classifier()
    outer = keras.Sequential([keras.Input((4,)), inner])
    assert trainers.computes_in_float16(outer)
    assert not trainers.computes_in_float16(_linear_classifier())


# --- the classifier step ------------------------------------------------------


def test_scaled_step_equals_the_plain_step_exactly():
    """A power-of-two loss scale multiplies and divides exactly: same update."""
    x, y = _data()
    plain = trainers.ClassifierTrainer(_linear_classifier())
    plain.compile(keras.optimizers.SGD(0.5), loss="sparse_categorical_crossentropy", loss_scale="none")
    scaled = trainers.ClassifierTrainer(_linear_classifier())
    scaled.compile(
        tfmp.LossScaleOptimizer(keras.optimizers.SGD(0.5), dynamic=False, initial_scale=1024),
        loss="sparse_categorical_crossentropy",
    )
    for trainer in (plain, scaled):
        trainer.fit(x, y, batch_size=32, epochs=1, verbose=0, shuffle=False)
    for a, b in zip(plain.network.get_weights(), scaled.network.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert float(scaled.optimizer.loss_scale) == 1024.0


def _bn_trainer(skip_nonfinite=True, **compile_kwargs):
    trainer = trainers.ClassifierTrainer(_bn_classifier())
    trainer.compile(
        keras.optimizers.Adam(1e-2),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
        skip_nonfinite=skip_nonfinite,
        **compile_kwargs,
    )
    return trainer


def test_fit_and_evaluate_report_losses_metrics_and_loss_scale():
    x, y = _data()
    with tfmp.precision_scope("mixed_float16"):
        trainer = trainers.ClassifierTrainer(_linear_classifier())
        trainer.compile(keras.optimizers.Adam(1e-2), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    history = trainer.fit(x, y, batch_size=8, epochs=2, validation_data=(x, y), verbose=0)
    assert set(history.history) >= {"loss", "accuracy", "val_loss", "val_accuracy", "loss_scale", "skipped_steps"}
    assert history.history["loss_scale"] == [32768.0, 32768.0]
    assert history.history["skipped_steps"] == [0, 0]
    assert history.history["loss"][1] < history.history["loss"][0]
    results = trainer.evaluate(x, y, verbose=0, return_dict=True)
    assert results["loss"] == pytest.approx(history.history["val_loss"][1], rel=1e-3)


def test_a_non_finite_batch_is_skipped_and_the_scale_backs_off():
    x, y = _data(8)
    x[3, 0] = np.inf
    with tfmp.precision_scope("mixed_float16"):
        trainer = trainers.ClassifierTrainer(_linear_classifier())
        trainer.compile(keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    before = trainer.network.get_weights()
    history = trainer.fit(x, y, batch_size=8, epochs=1, verbose=0)
    for a, b in zip(before, trainer.network.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert history.history["skipped_steps"] == [1]
    assert history.history["loss_scale"] == [16384.0]


class _BatchLogs(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.logs = []

    def on_train_batch_end(self, batch, logs=None):
        self.logs.append(dict(logs))


@pytest.mark.parametrize("precision", ["float32", "mixed_float16"])
def test_the_logs_hold_the_learning_rate_a_schedule_gives_after_each_step(precision):
    # 0.5 up to step 1, 0.25 up to step 3, then 0.125; the value after step k is the schedule's at k.
    schedule = keras.optimizers.schedules.PiecewiseConstantDecay([1, 3], [0.5, 0.25, 0.125])
    x, y = _data(16)
    with tfmp.precision_scope(precision):
        trainer = trainers.Trainer(_linear_classifier())
        trainer.compile(keras.optimizers.SGD(schedule), loss="sparse_categorical_crossentropy")
    assert isinstance(trainer.optimizer, tfmp.LossScaleOptimizer)  # skip_nonfinite: the inner optimizer's rate
    batches = _BatchLogs()
    history = trainer.fit(x, y, batch_size=4, epochs=1, verbose=0, callbacks=[batches])
    assert [logs["learning_rate"] for logs in batches.logs] == [0.5, 0.25, 0.25, 0.125]
    assert history.history["learning_rate"] == [0.125]
    assert "learning_rate" not in trainer.evaluate(x, y, verbose=0, return_dict=True)


def test_the_gan_logs_each_optimizers_learning_rate_under_its_prefix():
    gan = _tiny_gan()
    gan.compile(
        keras.optimizers.Adam(0.5), keras.optimizers.Adam(keras.optimizers.schedules.ExponentialDecay(1.0, 1, 0.5))
    )
    real = np.random.default_rng(0).uniform(size=(16, 28, 28, 1)).astype(np.float32)
    history = gan.fit(real, batch_size=8, epochs=1, verbose=0)
    # Two steps: the discriminator's rate halves at each.
    assert (history.history["g_learning_rate"], history.history["d_learning_rate"]) == ([0.5], [0.25])


def test_tf_keras_2s_optimizer_is_refused_in_the_step_before_it_updates():
    x, y = _data(8)
    trainer = tfmp.Trainer(_linear_classifier())
    trainer.compile(keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    before = [v.numpy() for v in trainer.network.variables]
    trainer.optimizer = tfmp.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))
    with pytest.raises(TypeError, match=r"tf.keras 2's class.*construct tfmp.LossScaleOptimizer"):
        trainer.fit(x, y, batch_size=8, epochs=1, verbose=0)
    for a, b in zip(before, trainer.network.variables):
        np.testing.assert_array_equal(a, b.numpy())


def test_a_forward_without_the_step_still_works_with_a_deprecation_warning():
    # tfmp 0.1's forward() took no argument.
    x, y = _data(8)

    class OldTrainer(tfmp.Trainer):
        def train_step(self, data):
            x, y = data
            loss, _ = self.optimize(
                self.optimizer, self.trainable_variables, lambda: (self.compute_loss(x=x, y=y, y_pred=self(x)), None)
            )
            return {"loss": loss}

    trainer = OldTrainer(_linear_classifier())
    trainer.compile(keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    with pytest.warns(DeprecationWarning, match=r"optimize\(forward\(\)\)` is deprecated.*forward\(step\)"):
        history = trainer.fit(x, y, batch_size=8, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0]) and int(trainer.optimizer.iterations) == 1


# --- the GAN step ---------------------------------------------------------------


def test_gan_losses_are_the_tutorials_formula():
    gan = _tiny_gan()
    real = tf.random.stateless_uniform((10, 28, 28, 1), seed=(1, 2))
    fake = tf.random.stateless_uniform((10, 28, 28, 1), seed=(3, 4))
    d_loss = gan.discriminator_loss(real, fake, training=False)
    real_labels, fake_labels = trainers.discriminator_labels(10, 0.01, 0.1)
    xent = tf.nn.sigmoid_cross_entropy_with_logits
    expected = 0.5 * (
        tf.reduce_mean(xent(labels=real_labels, logits=gan.discriminator(real)))
        + tf.reduce_mean(xent(labels=fake_labels, logits=gan.discriminator(fake)))
    )
    np.testing.assert_allclose(float(d_loss), float(expected), rtol=1e-6)


def test_gan_step_updates_both_models_with_their_own_optimizers():
    gan = _tiny_gan()
    gan.compile(keras.optimizers.Adam(1e-3), keras.optimizers.RMSprop(1e-4))
    g_before = [v.numpy() for v in gan.generator.trainable_variables]
    d_before = [v.numpy() for v in gan.discriminator.trainable_variables]
    real = np.random.default_rng(0).uniform(size=(16, 28, 28, 1)).astype(np.float32)
    history = gan.fit(real, batch_size=16, epochs=1, verbose=0)
    # Non-finite steps are skipped by default, so each optimizer counts its skips.
    assert set(history.history) == {
        "g_loss",
        "d_loss",
        "g_skipped_steps",
        "d_skipped_steps",
        "g_learning_rate",
        "d_learning_rate",
    }
    assert all(np.isfinite(v[0]) for v in history.history.values())
    assert all(not np.array_equal(a, v.numpy()) for a, v in zip(g_before, gan.generator.trainable_variables))
    assert all(not np.array_equal(a, v.numpy()) for a, v in zip(d_before, gan.discriminator.trainable_variables))
    assert int(gan.generator_optimizer.iterations) == 1
    assert int(gan.discriminator_optimizer.iterations) == 1


@pytest.mark.parametrize("jit_compile", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_float16_gan_has_one_loss_scale_per_optimizer(jit_compile):
    with tfmp.precision_scope("mixed_float16"):
        gan = _tiny_gan()
        gan.compile(loss_scale="dynamic", jit_compile=jit_compile)
    assert isinstance(gan.generator_optimizer, tfmp.LossScaleOptimizer)
    assert isinstance(gan.discriminator_optimizer, tfmp.LossScaleOptimizer)
    assert gan.generator_optimizer is not gan.discriminator_optimizer
    real = np.random.default_rng(0).uniform(size=(16, 28, 28, 1)).astype(np.float32)
    history = gan.fit(real, batch_size=8, epochs=1, verbose=0)
    logs = {k: v[-1] for k, v in history.history.items()}
    assert logs["g_loss_scale"] == logs["d_loss_scale"] == 32768.0
    assert logs["g_skipped_steps"] == logs["d_skipped_steps"] == 0
    assert np.isfinite(logs["g_loss"]) and np.isfinite(logs["d_loss"])
    assert int(gan.generator_optimizer.iterations) == 2


def test_gan_evaluate_and_predict():
    gan = _tiny_gan()
    gan.compile()
    real = np.random.default_rng(0).uniform(size=(8, 28, 28, 1)).astype(np.float32)
    results = gan.evaluate(real, batch_size=8, verbose=0, return_dict=True)
    assert set(results) == {"g_loss", "d_loss", "g_skipped_steps", "d_skipped_steps"}
    images = gan.predict(np.zeros((3, 8), np.float32), verbose=0)
    assert images.shape == (3, 28, 28, 1) and images.dtype == np.float32


def test_gan_rejects_bad_label_settings():
    generator, discriminator = build_generator(8, (8, 8, 8)), build_discriminator((8, 8, 8))
    with pytest.raises(ValueError, match="label_softening=0.7"):
        trainers.GANTrainer(generator, discriminator, label_softening=0.7)
    with pytest.raises(ValueError, match="label_swap_fraction=2"):
        trainers.GANTrainer(generator, discriminator, label_swap_fraction=2)


# --- non-finite steps without loss scaling ----------------------------------------


@pytest.mark.parametrize("precision", ["float32", "mixed_bfloat16"])
def test_skip_nonfinite_skips_a_nan_batch_exactly(precision):
    """[b1, NaN, b2] with skipping trains exactly as [b1, b2]: the NaN step changes nothing."""
    x, y = _data(n=24)
    poisoned = x.copy()
    poisoned[8] = np.nan

    def train(batches, skip_nonfinite):
        with tfmp.precision_scope(precision):
            trainer = trainers.ClassifierTrainer(_linear_classifier())
            trainer.compile(
                keras.optimizers.Adam(0.1),
                loss="sparse_categorical_crossentropy",
                loss_scale="none",
                skip_nonfinite=skip_nonfinite,
            )
        trainer.fit(tf.data.Dataset.from_tensor_slices(batches).batch(8), epochs=1, verbose=0, shuffle=False)
        return trainer

    with_nan = train((poisoned, y), skip_nonfinite=True)
    clean = train((np.concatenate([x[:8], x[16:]]), np.concatenate([y[:8], y[16:]])), skip_nonfinite=True)
    assert int(with_nan.optimizer.skipped_steps) == 1
    inner = [t.optimizer.inner_optimizer.variables for t in (with_nan, clean)]  # iterations, slots
    for a, b in zip(with_nan.variables + inner[0], clean.variables + inner[1]):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    # Without skipping, the NaN reaches the weights: the check above can fail.
    unguarded = train((poisoned, y), skip_nonfinite=False)
    assert not np.isfinite(unguarded.network.get_layer("dense").kernel.numpy()).all()


def test_skip_nonfinite_wraps_only_what_loss_scaling_does_not():
    model = _linear_classifier()
    optimizer = trainers.prepare_optimizer(keras.optimizers.SGD(0.1), model, "none", skip_nonfinite=True)
    assert isinstance(optimizer, tfmp.LossScaleOptimizer) and not optimizer.dynamic
    assert optimizer.initial_scale == 1
    logs = trainers.MixedPrecisionTrainer.loss_scale_logs(optimizer)
    assert set(logs) == {"skipped_steps"}  # a scale of 1 is not shown as loss scaling
    assert type(trainers.prepare_optimizer(keras.optimizers.SGD(0.1), model, "none", skip_nonfinite=False)) is (
        keras.optimizers.SGD
    )


def test_a_nan_batch_under_dynamic_loss_scaling_is_skipped_and_counted():
    x, y = _data(n=24)
    x[8] = np.nan
    with tfmp.precision_scope("mixed_float16"):
        trainer = trainers.ClassifierTrainer(_linear_classifier())
        trainer.compile(keras.optimizers.Adam(0.1), loss="sparse_categorical_crossentropy", loss_scale="dynamic")
    trainer.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
    assert int(trainer.optimizer.skipped_steps) == 1
    assert float(trainer.optimizer.loss_scale) == 2.0**14  # halved once
    assert all(np.isfinite(v.numpy()).all() for v in trainer.variables)


# --- a skipped step changes nothing the model computes with ----------------------------
# The rule (README, "What a skipped step changes"): the update is a transaction.
# When the optimizer skips it, the non-trainable variables its forward passes
# wrote (BatchNorm moving statistics) get their values from before the step
# back; only seed-generator states (noise, Dropout) advance, as in a step
# that was applied.

SEED_STATE = "seed_generator_state"


def _bn_classifier():
    """A tiny conv net with both BatchNorm implementations and a Dropout."""
    from tfmp.layers import FusedBatchNormalization

    init = keras.initializers.GlorotUniform
    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(16, 3, padding="same", kernel_initializer=init(1))(inputs)
    x = FusedBatchNormalization(momentum=0.9, name="fused_bn")(x)
    x = keras.layers.Conv2D(16, 3, padding="same", activation="relu", kernel_initializer=init(2))(x)
    x = keras.layers.BatchNormalization(momentum=0.9, name="keras_bn")(x)
    x = keras.layers.Dropout(0.5, seed=3)(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.Dense(3, kernel_initializer=init(4))(x)
    return keras.Model(inputs, keras.layers.Activation("softmax", dtype="float32")(x))


def _images(n, side, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(size=(n, side, side, 3)).astype(np.float32), (np.arange(n) % 3).astype(np.int32)


def _all_values(trainer):
    """`(path, value)` of every network and inner-optimizer variable (weights, statistics, seeds, slots)."""
    inner = [getattr(o, "inner_optimizer", o) for o in trainer.optimizers.values()]
    variables = trainer.variables + [v for o in inner for v in o.variables]
    return [(v.path, v.numpy().copy()) for v in variables]


def _assert_unchanged_but_seeds(before, trainer, draws):
    """Every variable equals `before` bit for bit; seed states are `draws[i]` draws further on."""
    after = _all_values(trainer)
    assert [p for p, _ in after] == [p for p, _ in before]
    seeds = [(p, a, b) for (p, a), (_, b) in zip(before, after) if SEED_STATE in p]
    assert [int(b[1] - a[1]) for _, a, b in seeds] == draws  # SeedGenerator.next() adds [0, 1]
    changed = [p for (p, a), (_, b) in zip(before, after) if SEED_STATE not in p and not np.array_equal(a, b)]
    assert not changed, f"{len(changed)} variables changed: {changed[:6]}"


def _bn_statistics(network):
    return [v for v in network.non_trainable_weights if "moving_" in v.path]


@pytest.mark.parametrize(
    "precision, jit_compile, bad",
    [
        ("float32", False, "nan"),
        ("float32", True, "nan"),  # XLA
        ("mixed_bfloat16", False, "nan"),
        ("mixed_float16", False, "overflow"),  # dynamic loss scaling, a scale the gradients overflow at
    ],
)
def test_a_skipped_step_leaves_batch_norm_statistics_and_weights_bit_for_bit(precision, jit_compile, bad):
    x, y = _images(4, 8)
    with tfmp.precision_scope(precision):
        trainer = trainers.ClassifierTrainer(_bn_classifier())
        if bad == "overflow":  # loss ~1.1 x 2**24: its gradients exceed float16's 65504 in the backward pass
            optimizer = tfmp.LossScaleOptimizer(keras.optimizers.Adam(0.1), initial_scale=2.0**24)
        else:
            optimizer = keras.optimizers.Adam(0.1)
            x[2, 5, 5, 1] = np.nan
        trainer.compile(optimizer, loss="sparse_categorical_crossentropy", skip_nonfinite=True, jit_compile=jit_compile)
    before = _all_values(trainer)
    trainer.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False)
    assert int(trainer.optimizer.skipped_steps) == 1
    if bad == "overflow":
        assert float(trainer.optimizer.loss_scale) == 2.0**23
    _assert_unchanged_but_seeds(before, trainer, draws=[1])  # the Dropout drew its mask


@pytest.mark.parametrize("precision, bad", [("float32", "nan"), ("mixed_float16", "overflow")])
def test_the_compiled_update_a_gpu_runs_skips_a_step_bit_for_bit_too(precision, bad):
    """`xla_update=True` (the default on a GPU): no branch, each variable selected; a skip still changes nothing."""
    x, y = _images(4, 8)
    with tfmp.precision_scope(precision):
        trainer = trainers.Trainer(_bn_classifier())
        if bad == "overflow":
            optimizer = tfmp.LossScaleOptimizer(keras.optimizers.Adam(0.1), initial_scale=2.0**24, xla_update=True)
        else:
            optimizer = tfmp.LossScaleOptimizer(
                keras.optimizers.Adam(0.1), dynamic=False, initial_scale=1.0, xla_update=True
            )
            x[2, 5, 5, 1] = np.nan
        trainer.compile(optimizer, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    before = _all_values(trainer)
    history = trainer.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False).history
    assert int(trainer.optimizer.skipped_steps) == 1 and np.isnan(history["loss"][0])  # nothing counted
    _assert_unchanged_but_seeds(before, trainer, draws=[1])


def test_the_compiled_update_keeps_a_skipped_steps_loss_and_metrics_out_of_the_means_exactly():
    x, y = _data(32)
    poisoned = x.copy()
    poisoned[9] = np.nan

    def history(x, y):
        trainer = trainers.Trainer(_linear_classifier())
        optimizer = tfmp.LossScaleOptimizer(
            keras.optimizers.SGD(0.1), dynamic=False, initial_scale=1.0, xla_update=True
        )
        trainer.compile(optimizer, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
        return trainer.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0).history

    with_nan = history(poisoned, y)
    clean = history(np.concatenate([x[:8], x[16:]]), np.concatenate([y[:8], y[16:]]))
    assert with_nan["skipped_steps"] == [1, 2]
    assert with_nan["loss"] == clean["loss"] and with_nan["accuracy"] == clean["accuracy"]


def test_a_finite_step_updates_batch_norm_statistics_as_without_skipping():
    """The restore is conditional: a finite step trains exactly as a plain optimizer does."""
    x, y = _images(4, 8)
    runs = []
    for skip_nonfinite in (True, False):
        trainer = trainers.ClassifierTrainer(_bn_classifier())
        trainer.compile(
            keras.optimizers.Adam(0.1), loss="sparse_categorical_crossentropy", skip_nonfinite=skip_nonfinite
        )
        statistics = [v.numpy().copy() for v in _bn_statistics(trainer.network)]
        trainer.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False)
        assert len(statistics) == 4
        for old, variable in zip(statistics, _bn_statistics(trainer.network)):
            assert not np.array_equal(old, variable.numpy()), variable.path
        runs.append(trainer)
    assert isinstance(runs[0].optimizer, tfmp.LossScaleOptimizer) and int(runs[0].optimizer.skipped_steps) == 0
    for a, b in zip(runs[0].variables, runs[1].variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)


def test_a_skipped_step_restores_each_replicas_statistics(tmp_path):
    """Under MirroredStrategy a NaN on replica 1 skips everywhere; each replica puts back its own copy."""
    from tfmp.run import distribute

    strategy = distribute.make_strategy("mirrored")
    with strategy.scope():
        trainer = trainers.ClassifierTrainer(_bn_classifier())
        trainer.compile(keras.optimizers.Adam(0.1), loss="sparse_categorical_crossentropy", skip_nonfinite=True)
    x, y = _images(4, 8)
    x[3, 0, 0, 0] = np.nan  # examples 2-3 are replica 1's share; replica 0's forward is finite
    statistics = [[t.numpy().copy() for t in v.value.values] for v in _bn_statistics(trainer.network)]
    trainer.fit(tf.data.Dataset.from_tensors((x, y)), epochs=1, verbose=0, shuffle=False)
    assert int(trainer.optimizer.skipped_steps) == 1
    for old, variable in zip(statistics, _bn_statistics(trainer.network)):
        new = [t.numpy() for t in variable.value.values]
        assert len(new) == 2
        for a, b in zip(old, new):
            np.testing.assert_array_equal(a, b, err_msg=variable.path)


def _mobilenet_trainer(precision, optimizer, run_eagerly):
    from tfmp.models.mobilenet_v2 import build_mobilenet_v2_classifier

    with tfmp.precision_scope(precision):
        network = build_mobilenet_v2_classifier((32, 32, 3), num_classes=3, alpha=0.35, batch_norm_momentum=0.9)
        trainer = trainers.ClassifierTrainer(network)
        trainer.compile(optimizer, loss="sparse_categorical_crossentropy", skip_nonfinite=True, run_eagerly=run_eagerly)
    return trainer


def _mobilenet_finite_then_nan(precision, run_eagerly):
    """One finite step (moves every BatchNorm statistic), then one NaN step (changes nothing)."""
    trainer = _mobilenet_trainer(precision, keras.optimizers.Adam(1e-3), run_eagerly)
    x, y = _images(4, 32)
    initial = [v.numpy().copy() for v in _bn_statistics(trainer.network)]
    assert len(initial) == 104  # 52 BatchNorm layers
    trainer.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False)
    moved = [v.path for old, v in zip(initial, _bn_statistics(trainer.network)) if not np.array_equal(old, v.numpy())]
    assert len(moved) == 104
    before = _all_values(trainer)
    x[1, 7, 7, 2] = np.nan
    trainer.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False)
    assert int(trainer.optimizer.skipped_steps) == 1
    _assert_unchanged_but_seeds(before, trainer, draws=[])  # MobileNetV2 here has no Dropout


def test_mobilenet_v2_nan_batch_leaves_its_104_batch_norm_statistics():
    """Issue 12's case, run eagerly to keep it fast (graph mode: the slow twin below)."""
    _mobilenet_finite_then_nan("float32", run_eagerly=True)


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["float32", "mixed_bfloat16"])
def test_mobilenet_v2_nan_batch_leaves_its_statistics_in_graph_mode(precision):
    _mobilenet_finite_then_nan(precision, run_eagerly=False)


@pytest.mark.slow
def test_mobilenet_v2_float16_overflow_leaves_its_statistics_in_graph_mode():
    trainer = _mobilenet_trainer(
        "mixed_float16", tfmp.LossScaleOptimizer(keras.optimizers.Adam(1e-3), initial_scale=2.0**24), False
    )
    x, y = _images(4, 32)
    before = _all_values(trainer)
    trainer.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False)
    assert int(trainer.optimizer.skipped_steps) == 1
    _assert_unchanged_but_seeds(before, trainer, draws=[])


def test_gan_float16_overflow_in_both_updates_changes_nothing_but_the_seeds():
    """The generator's BatchNorm statistics are written by the generator step's forward and by the
    fakes of the discriminator step; both updates overflow and are skipped, so neither write stays."""
    with tfmp.precision_scope("mixed_float16"):
        gan = _tiny_gan(seed=5)
        gan.compile(
            tfmp.LossScaleOptimizer(keras.optimizers.Adam(1e-3), initial_scale=2.0**24),
            tfmp.LossScaleOptimizer(keras.optimizers.RMSprop(1e-4), initial_scale=2.0**24),
        )
    before = _all_values(gan)
    real = np.random.default_rng(0).uniform(size=(8, 28, 28, 1)).astype(np.float32)
    gan.fit(real, batch_size=8, epochs=1, verbose=0, shuffle=False)
    assert (int(gan.generator_optimizer.skipped_steps), int(gan.discriminator_optimizer.skipped_steps)) == (1, 1)
    # Noise: one draw per update. Each Dropout: one draw in the generator step, two in the discriminator's.
    assert sum(SEED_STATE in p for p, _ in before) == 4
    _assert_unchanged_but_seeds(before, gan, draws=[2, 3, 3, 3])


class _RecordingGAN(trainers.GANTrainer):
    """Copies the generator's BatchNorm statistics right after the generator's update."""

    def optimize(self, optimizer, variables, forward):
        result = super().optimize(optimizer, variables, forward)
        if optimizer is self.generator_optimizer:
            for copy, variable in zip(self.recorded, _bn_statistics(self.generator)):
                copy.assign(variable)
        return result


def test_gan_nan_real_image_undoes_the_discriminator_steps_fakes_but_keeps_the_generator_step():
    gan = _RecordingGAN(build_generator(latent_dim=8, widths=(8, 8, 8)), build_discriminator(widths=(8, 8, 8)), seed=0)
    gan.recorded = [tf.Variable(tf.zeros_like(v)) for v in _bn_statistics(gan.generator)]
    gan.compile(keras.optimizers.Adam(1e-3), keras.optimizers.RMSprop(1e-4), skip_nonfinite=True)
    statistics = [v.numpy().copy() for v in _bn_statistics(gan.generator)]
    discriminator = [v.numpy().copy() for v in gan.discriminator.weights]
    real = np.random.default_rng(0).uniform(size=(8, 28, 28, 1)).astype(np.float32)
    real[5, 4, 4, 0] = np.nan
    gan.fit(real, batch_size=8, epochs=1, verbose=0, shuffle=False)
    assert (int(gan.generator_optimizer.skipped_steps), int(gan.discriminator_optimizer.skipped_steps)) == (0, 1)
    for a, v in zip(discriminator, gan.discriminator.weights):
        np.testing.assert_array_equal(a, v.numpy(), err_msg=v.path)
    # The generator step's forward moved the statistics and stays; the fakes' forward was undone.
    for old, copy, v in zip(statistics, gan.recorded, _bn_statistics(gan.generator)):
        assert not np.array_equal(old, v.numpy()), v.path
        np.testing.assert_array_equal(copy.numpy(), v.numpy(), err_msg=v.path)
    np.testing.assert_array_equal(gan.noise_seed.state.numpy() - [0, 2], [0, 0])  # seed 0, drawn twice


def test_under_a_strategy_every_fit_reads_the_pipeline_as_one_fit_does():
    """Building under a strategy draws no batch: a later fit() (a resumed run's next segment) reads on in order.

    Keras 3.15 drew the first batch of every fit() from an extra iterator, which advanced a reshuffling
    pipeline's seed; a model already built skipped that, so its next fit() read another shuffle order.
    """
    from tfmp.run import distribute

    strategy = distribute.make_strategy("mirrored")
    x, y = _data(32)

    def stream(position):
        data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(32, seed=1, reshuffle_each_iteration=True)
        return data.batch(8).repeat().skip(position)

    def trainer():
        keras.utils.set_random_seed(0)
        with strategy.scope():
            trainer = trainers.ClassifierTrainer(_linear_classifier())
            trainer.compile(keras.optimizers.Adam(0.1), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
        return trainer

    whole, split = trainer(), trainer()
    whole.fit(stream(0), epochs=2, steps_per_epoch=3, verbose=0, shuffle=False)
    split.fit(stream(0), epochs=1, steps_per_epoch=3, verbose=0, shuffle=False)
    split.fit(stream(3), initial_epoch=1, epochs=2, steps_per_epoch=3, verbose=0, shuffle=False)
    for a, b in zip(whole.trainable_variables, split.trainable_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
    # A dataset the user distributed already builds from one replica's shapes.
    distributed = trainer()
    distributed.fit(strategy.experimental_distribute_dataset(stream(0)), epochs=1, steps_per_epoch=2, verbose=0)
    assert distributed.optimizer.iterations.numpy() == 2


# --- a skipped step's loss stays out of the epoch's means --------------------------------


def test_a_skipped_steps_loss_and_metrics_stay_out_of_the_epoch_means_exactly():
    """float32, skip only: the NaN batch is skipped, so every other step runs as on the data without it.

    The epoch's loss and accuracy are then the means over the other batches, bit for bit.
    """
    x, y = _data(32)
    poisoned = x.copy()
    poisoned[9] = np.nan  # batch 2 of 4

    def history(x, y):
        trainer = trainers.Trainer(_linear_classifier())
        trainer.compile(
            keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy", metrics=["accuracy"], skip_nonfinite=True
        )
        return trainer.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0).history

    with_nan = history(poisoned, y)
    clean = history(np.concatenate([x[:8], x[16:]]), np.concatenate([y[:8], y[16:]]))
    assert with_nan["skipped_steps"] == [1, 2]
    assert with_nan["loss"] == clean["loss"] and with_nan["accuracy"] == clean["accuracy"]
    assert all(np.isfinite(with_nan["loss"]))


def test_an_epoch_whose_steps_were_all_skipped_has_undefined_means_not_zero():
    x, y = _data(8)
    x[0] = np.nan
    with tfmp.precision_scope("mixed_float16"):
        trainer = trainers.Trainer(_linear_classifier())
        trainer.compile(keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    history = trainer.fit(x, y, batch_size=8, epochs=1, verbose=0).history
    assert history["skipped_steps"] == [1]
    assert np.isnan(history["loss"][0]) and np.isnan(history["accuracy"][0])


def test_a_skipped_gan_update_leaves_its_loss_out_and_the_other_in():
    gan = _tiny_gan()
    gan.compile(keras.optimizers.Adam(1e-3), keras.optimizers.RMSprop(1e-4), loss_scale="none", skip_nonfinite=True)
    real = np.random.default_rng(0).uniform(size=(16, 28, 28, 1)).astype(np.float32)
    real[12] = np.nan  # the second batch: the discriminator's update is skipped, the generator's is not
    history = gan.fit(real, batch_size=8, epochs=1, shuffle=False, verbose=0).history
    assert history["d_skipped_steps"] == [1] and history["g_skipped_steps"] == [0]
    assert np.isfinite(history["d_loss"][0]) and np.isfinite(history["g_loss"][0])


# --- trainers are Keras models: config, .keras files, Keras's checkpoint callbacks -------------


def _bn_trainer_after_a_skip(precision="mixed_float16"):
    with tfmp.precision_scope(precision):
        trainer = trainers.Trainer(_bn_classifier())
        trainer.compile(keras.optimizers.Adam(1e-2), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    x, y = _images(16, 8)
    x[12] = np.nan
    trainer.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    return trainer, x, y


def _assert_same_state(a, b):
    """Every variable but the seed generators' states (Dropout, noise), which Keras does not save in .keras files."""
    assert type(a) is type(b)
    for v, w in zip(a.variables, b.variables):
        if SEED_STATE not in v.path:
            np.testing.assert_array_equal(v.numpy(), w.numpy(), err_msg=v.path)
    for (name, opt), other in zip(a.optimizers.items(), b.optimizers.values()):
        assert len(opt.variables) == len(other.variables), name
        for v, w in zip(opt.variables, other.variables):
            np.testing.assert_array_equal(v.numpy(), w.numpy(), err_msg=f"{name}: {v.path}")


def test_a_trainer_saved_as_a_keras_file_loads_with_its_loss_scale_state(tmp_path):
    trainer, x, y = _bn_trainer_after_a_skip()
    assert int(trainer.optimizer.skipped_steps) == 1 and float(trainer.optimizer.loss_scale) == 2.0**14
    trainer.save(tmp_path / "t.keras")
    loaded = keras.saving.load_model(tmp_path / "t.keras")
    _assert_same_state(trainer, loaded)
    assert isinstance(loaded.optimizer, tfmp.LossScaleOptimizer)
    assert float(loaded.optimizer.loss_scale) == 2.0**14 and int(loaded.optimizer.skipped_steps) == 1
    assert loaded.network.layers[-1].dtype_policy.name == "float32"
    assert trainers.Trainer.from_config(trainer.get_config()).network.count_params() == trainer.network.count_params()


def test_a_gan_trainer_round_trips_through_a_keras_file(tmp_path):
    gan = _tiny_gan(seed=3)
    with tfmp.precision_scope("float32"):
        gan.compile(skip_nonfinite=True)
    real = np.random.default_rng(0).uniform(size=(8, 28, 28, 1)).astype(np.float32)
    gan.fit(real, batch_size=8, epochs=1, verbose=0)
    gan.save(tmp_path / "gan.keras")
    loaded = keras.saving.load_model(tmp_path / "gan.keras")
    _assert_same_state(gan, loaded)
    assert (loaded.label_softening, loaded.label_swap_fraction, loaded.seed) == (0.01, 0.1, 3)
    assert isinstance(loaded.discriminator_optimizer, tfmp.LossScaleOptimizer)  # skip-only, scale 1


def test_model_checkpoint_saves_whole_trainers_each_epoch(tmp_path):
    trainer, x, y = _bn_trainer_after_a_skip()
    path = str(tmp_path / "epoch{epoch}.keras")
    trainer.fit(
        x, y, batch_size=8, epochs=2, shuffle=False, verbose=0, callbacks=[keras.callbacks.ModelCheckpoint(path)]
    )
    loaded = keras.saving.load_model(tmp_path / "epoch2.keras")
    _assert_same_state(trainer, loaded)
    assert int(loaded.optimizer.skipped_steps) == int(trainer.optimizer.skipped_steps) == 3


def test_backup_and_restore_resumes_a_trainer_with_its_loss_scale(tmp_path):
    class StopAfterEpoch(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 0:
                raise RuntimeError("interrupted")

    x, y, _, _ = families.digits(n_train=16)
    x = x.copy()
    x[12] = np.nan

    def trainer():
        keras.utils.set_random_seed(0)
        with tfmp.precision_scope("mixed_float16"):
            t = trainers.Trainer(families.bn_cnn())  # no Dropout: the resumed run can equal the whole one
            t.compile(keras.optimizers.Adam(1e-2), loss="sparse_categorical_crossentropy")
        return t

    backup = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))
    interrupted = trainer()
    with pytest.raises(RuntimeError, match="interrupted"):
        interrupted.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0, callbacks=[backup, StopAfterEpoch()])
    resumed = trainer()
    resumed.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0, callbacks=[backup])
    whole = trainer()
    whole.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    assert float(resumed.optimizer.loss_scale) == float(whole.optimizer.loss_scale) == 2.0**13
    assert int(resumed.optimizer.skipped_steps) == 2
    _assert_same_state(whole, resumed)


def test_the_tutorial_gans_old_names_still_work_with_a_deprecation_warning():
    with pytest.warns(
        DeprecationWarning, match="`tfmp.trainers.SEED_GAN` is deprecated; use `tfmp.trainers.TUTORIAL_GAN`"
    ):
        assert trainers.SEED_GAN is trainers.TUTORIAL_GAN
    with pytest.warns(
        DeprecationWarning, match="SeedGANTraining` is deprecated; use `tfmp.trainers.TutorialGANTraining`"
    ):
        from tfmp.trainers.gan import SeedGANTraining
    assert SeedGANTraining is trainers.TutorialGANTraining
    with pytest.raises(AttributeError, match="'tfmp.trainers' has no attribute 'NO_SUCH_NAME'"):
        _ = trainers.NO_SUCH_NAME


# --- a trainer of the user's own, written from the docstrings ------------------------------


def _own_trainer_fit(path, bad, rows, strategy=None):
    """The user's trainer fit on `rows` of three batches of 4; `bad`: NaN or a value beyond float16's range in row 5."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(12, 4)).astype(np.float32), rng.normal(size=(12, 1)).astype(np.float32)
    x[5, 1] = np.nan if bad == "nan" else 1e6
    precision = "float32" if bad == "nan" else "mixed_float16"
    with tfmp.precision_scope(precision), strategy.scope() if strategy else contextlib.nullcontext():
        keras.utils.set_random_seed(0)
        network = keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(8), keras.layers.BatchNormalization(), keras.layers.Dense(1)]
        )
        trainer = families.OwnTrainer(
            network, keras.losses.MeanSquaredError(), keras.metrics.MeanAbsoluteError(name="mae")
        )
        optimizer = tfmp.LossScaleOptimizer(
            keras.optimizers.SGD(0.1), initial_scale=256.0, xla_update=path == "compiled update"
        )
        trainer.compile(optimizer, jit_compile=path == "xla step")
    history = trainer.fit(x[rows], y[rows], batch_size=4, epochs=1, verbose=0, shuffle=False).history
    return history, [v.numpy() for v in network.variables], int(optimizer.skipped_steps)


@pytest.mark.parametrize("bad", ["nan", "float16 overflow"])
@pytest.mark.parametrize("path", ["branching update", "compiled update", "xla step"])
def test_a_users_own_trainer_leaves_a_skipped_step_out_of_its_loss_metrics_and_weights(path, bad):
    """Its metric updates list no variables; a skipped batch changes nothing, as if it had not been there."""
    history, weights, skipped = _own_trainer_fit(path, bad, rows=slice(None))
    without, expected, _ = _own_trainer_fit(path, bad, rows=[0, 1, 2, 3, 8, 9, 10, 11])
    assert skipped == 1
    for name in ("loss", "mae"):
        assert np.isfinite(history[name][0]), (name, history)
        np.testing.assert_allclose(history[name], without[name], rtol=1e-3, err_msg=name)
    for got, want in zip(weights, expected):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-6)


@pytest.mark.parametrize("bad", ["nan", "float16 overflow"])
def test_a_users_own_trainer_on_two_replicas_leaves_a_skipped_step_out_too(bad):
    """MirroredStrategy over two logical CPUs (the merge_call update): row 5 is in replica 1's half of batch 2."""
    from tfmp.run import distribute

    strategy = distribute.make_strategy("mirrored", devices=["/cpu:0", "/cpu:1"])
    history, weights, skipped = _own_trainer_fit("branching update", bad, slice(None), strategy)
    without, expected, _ = _own_trainer_fit("branching update", bad, [0, 1, 2, 3, 8, 9, 10, 11], strategy)
    assert skipped == 1
    for name in ("loss", "mae"):
        assert np.isfinite(history[name][0]), (name, history)
        np.testing.assert_allclose(history[name], without[name], rtol=1e-3, err_msg=name)
    for got, want in zip(weights, expected):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-6)


class _TwoOptimizers(trainers.MixedPrecisionTrainer):
    """A trainer of one's own as the contract asks: networks, and its optimizers held in attributes."""

    def __init__(self):
        super().__init__()
        self.generator = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
        self.discriminator = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])

    @property
    def networks(self):
        return {"generator": self.generator, "discriminator": self.discriminator}

    def compile(self, **kwargs):
        super().compile(optimizer=None, **kwargs)
        self.g_optimizer, self.d_optimizer = keras.optimizers.Adam(), keras.optimizers.SGD()


def test_a_trainers_optimizers_default_to_its_attributes_holding_one_and_its_loss_networks_to_networks():
    trainer = _TwoOptimizers()
    assert trainer.optimizers == {}  # none held before compile()
    trainer.compile()
    assert trainer.optimizers == {"g_optimizer": trainer.g_optimizer, "d_optimizer": trainer.d_optimizer}
    assert trainer.loss_networks == trainer.networks
    trainer.optimizer = keras.optimizers.RMSprop()  # as keras.Model.compile() without optimizer=None holds one
    assert list(trainer.optimizers) == ["optimizer", "g_optimizer", "d_optimizer"]  # in the order first set


@pytest.mark.parametrize(
    "piece, call",
    [
        ("networks, its models by name", lambda t: t.networks),
        ("objectives(data)", lambda t: t.objectives(None)),
        ("float32_copy()", lambda t: t.float32_copy()),
    ],
)
def test_what_a_subclass_must_define_is_named_with_the_guide(piece, call):
    trainer = trainers.MixedPrecisionTrainer(name="bare")
    with pytest.raises(NotImplementedError) as raised:
        call(trainer)
    assert str(raised.value) == (
        f"MixedPrecisionTrainer does not define {piece}; see docs/guides/own-model.md, 'A trainer of your own'."
    )
