"""Tests for tfmp/transaction.py: a skipped step leaves the forward pass's state as it was, in any loop."""

import contextlib

import families
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfmp
from tfmp import transaction

FAMILIES = {"bn_cnn": families.bn_cnn, "transformer": families.transformer, "gru": families.gru}


def _batch(family, n=16, nan_row=None):
    x, y, _, _ = families.digits(n_train=n)
    if family != "bn_cnn":
        x = families.tokens(x)
    weights = np.ones(n, np.float32)
    if nan_row is not None and family == "bn_cnn":
        x = x.copy()
        x[nan_row] = np.nan  # reaches BatchNormalization's statistics in the forward pass
    elif nan_row is not None:
        weights[nan_row] = np.nan  # tokens cannot be NaN: a NaN weight makes the loss and gradients NaN
    return x, y, weights


def _values(model, optimizer):
    inner = optimizer.inner_optimizer
    return [(v.path, v.numpy().copy()) for v in [*model.variables, *inner.variables]]


def _custom_step(model, optimizer, guarded, jit_compile=False):
    loss_fn = keras.losses.SparseCategoricalCrossentropy()

    def step(x, y, w):
        with tfmp.undo_if_skipped(model, optimizer) if guarded else contextlib.nullcontext():
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True), sample_weight=w)
                scaled = optimizer.scale_loss(loss)
            optimizer.apply(tape.gradient(scaled, model.trainable_variables), model.trainable_variables)
        return loss

    return tf.function(step, jit_compile=jit_compile)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_nan_batch_in_a_guarded_custom_loop_leaves_every_variable_bit_for_bit(family):
    with tfmp.precision_scope("mixed_float16"):
        keras.utils.set_random_seed(0)
        model = FAMILIES[family]()
        optimizer = tfmp.LossScaleOptimizer(keras.optimizers.Adam(1e-2))
        step = _custom_step(model, optimizer, guarded=True)
        step(*_batch(family))  # a real step first: slots and statistics hold values
        before = _values(model, optimizer)
        step(*_batch(family, nan_row=3))
    assert int(optimizer.skipped_steps) >= 1 and bool(optimizer.last_step_skipped)
    after = _values(model, optimizer)
    changed = [path for (path, a), (_, b) in zip(before, after) if not np.array_equal(a, b)]
    assert changed == [], changed


def test_without_the_guard_the_nan_batch_reaches_batch_norm_and_with_it_not_eagerly_either():
    x, y, w = _batch("bn_cnn", nan_row=0)
    results = {}
    for guarded in (False, True):
        with tfmp.precision_scope("mixed_float16"):
            keras.utils.set_random_seed(0)
            model = families.bn_cnn()
            optimizer = tfmp.LossScaleOptimizer(keras.optimizers.SGD(0.1))
            step = _custom_step(model, optimizer, guarded).python_function  # eagerly
            step(x, y, w)
        statistics = [v.numpy() for v in transaction.state_variables(model)]
        results[guarded] = all(np.isfinite(s).all() for s in statistics)
        assert len(statistics) == 4 and int(optimizer.skipped_steps) == 1
    assert results == {False: False, True: True}


def test_the_guard_restores_under_xla_too():
    with tfmp.precision_scope("mixed_float16"):
        keras.utils.set_random_seed(0)
        model = families.bn_cnn()
        optimizer = tfmp.LossScaleOptimizer(keras.optimizers.Adam(1e-2))
        optimizer.build(model.trainable_variables)
        step = _custom_step(model, optimizer, guarded=True, jit_compile=True)
        before = [v.numpy().copy() for v in transaction.state_variables(model)]
        step(*_batch("bn_cnn", nan_row=5))
    for a, v in zip(before, transaction.state_variables(model)):
        np.testing.assert_array_equal(a, v.numpy(), err_msg=v.path)


def test_state_variables_are_the_weights_layers_make_non_trainable_frozen_or_not():
    model = families.bn_cnn()
    assert [v.path.rsplit("/", 1)[1] for v in transaction.state_variables(model)] == [
        "moving_mean",
        "moving_variance",
    ] * 2
    # A frozen layer's statistics are kept too (a layer may write them in call whatever its `trainable`);
    # a frozen layer's kernel and bias, made trainable, are not.
    model.layers[2].trainable = False
    model.layers[1].trainable = False
    assert len(transaction.state_variables(model)) == 4
    assert transaction.state_variables([families.gru(), families.transformer()]) == []


class _BlockWithAFrozenNorm(keras.layers.Layer):
    """A custom layer whose sub-layers are attributes, one of them a frozen BatchNormalization."""

    def __init__(self):
        super().__init__(name="block")
        self.dense, self.norm = keras.layers.Dense(4), keras.layers.BatchNormalization(name="norm")
        self.frozen = keras.layers.BatchNormalization(name="frozen")
        self.frozen.trainable = False

    def call(self, x, training=False):
        return self.frozen(self.norm(self.dense(x), training=training), training=training)


def test_state_variables_see_a_custom_layers_own_sub_layers():
    inputs = keras.Input((3,))
    model = keras.Model(inputs, _BlockWithAFrozenNorm()(inputs))
    paths = sorted(v.path for v in transaction.state_variables(model))
    assert paths == [f"block/{norm}/moving_{stat}" for norm in ("frozen", "norm") for stat in ("mean", "variance")]


def test_a_plain_optimizer_is_neither_read_nor_restored_and_its_updates_simply_run():
    model = families.bn_cnn()
    counter = keras.Variable(0.0)
    with tfmp.undo_if_skipped(model, keras.optimizers.SGD(0.1)) as step:
        step.unless_skipped(lambda: counter.assign_add(1.0))
    assert (step.skips, step.choices, step.updates, float(counter)) == (False, [], [], 1.0)


def test_a_step_belongs_to_one_update():
    var = keras.Variable([1.0])
    optimizer = tfmp.LossScaleOptimizer(keras.optimizers.SGD(0.1))
    step = transaction.Step(optimizer)
    optimizer.apply([tf.constant([1.0])], [var], step=step)
    with pytest.raises(ValueError, match="decided by one update: open a new one. Received: step of 'loss_scale"):
        optimizer.apply([tf.constant([1.0])], [var], step=step)


def test_every_replica_keeps_its_statistics_when_one_replica_sees_nan():
    """MirroredStrategy on 2 logical CPUs: NaN only in replica 1's half of the batch; both replicas skip."""
    from tfmp.run import distribute

    # The process's one MirroredStrategy over its two logical CPUs: two strategies over the same devices clash.
    strategy = distribute.make_strategy("mirrored", devices=["/cpu:0", "/cpu:1"])
    x, y, w = _batch("bn_cnn", n=16)
    w[12] = np.nan  # rows 8..15 are replica 1's
    with tfmp.precision_scope("mixed_float16"):
        keras.utils.set_random_seed(0)
        with strategy.scope():
            model = families.bn_cnn()
            optimizer = tfmp.LossScaleOptimizer(keras.optimizers.Adam(1e-2))
            optimizer.build(model.trainable_variables)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(reduction="sum")

        @tf.function
        def step(batch):
            def replica_step(x, y, w):
                with tfmp.undo_if_skipped(model, optimizer):
                    with tf.GradientTape() as tape:
                        loss = loss_fn(y, model(x, training=True), sample_weight=w) / 16.0
                        scaled = optimizer.scale_loss(loss)
                    optimizer.apply(tape.gradient(scaled, model.trainable_variables), model.trainable_variables)

            strategy.run(replica_step, args=batch)

        dataset = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensors((x, y, w)))
        before = {v.path: [r.numpy().copy() for r in strategy.experimental_local_results(v)] for v in model.variables}
        step(next(iter(dataset)))
    assert int(optimizer.skipped_steps) == 1
    for v in model.variables:
        for replica, (a, b) in enumerate(zip(before[v.path], strategy.experimental_local_results(v))):
            np.testing.assert_array_equal(a, b.numpy(), err_msg=f"{v.path} on replica {replica}")


# -- a Keras user's own train_step, as keras-io writes a GAN, through fit() on every path ------------------------


def _keras_io_gan_fit(path, rows):
    """`families.KerasIoGAN` fit on `rows` of 16 (noise, real) pairs in batches of 4, under mixed_float16.

    Row 5's noise is NaN, row 10's is 1e6, beyond float16's range: each reaches both updates of its batch.
    Returns the history, the discriminator's kernel sum after each batch that applied, and the networks.
    """
    rng = np.random.default_rng(0)
    noise, real = rng.normal(size=(16, 2)).astype(np.float32), rng.uniform(size=(16, 4)).astype(np.float32)
    noise[5, 0], noise[10, 1] = np.nan, 1e6
    strategy = None
    if path == "two replicas":
        from tfmp.run import distribute

        strategy = distribute.make_strategy("mirrored", devices=["/cpu:0", "/cpu:1"])
    with tfmp.precision_scope("mixed_float16"), strategy.scope() if strategy else contextlib.nullcontext():
        keras.utils.set_random_seed(0)
        generator = keras.Sequential(
            [
                keras.Input((2,)),
                keras.layers.Dense(8),
                keras.layers.BatchNormalization(),
                keras.layers.ReLU(),
                keras.layers.Dense(4, dtype="float32"),
            ]
        )
        frozen = families.RunningMean(name="frozen_writer")
        frozen.trainable = False
        discriminator = keras.Sequential(
            [
                keras.Input((4,)),
                frozen,
                keras.layers.Dense(8),
                keras.layers.BatchNormalization(),
                keras.layers.ReLU(),
                keras.layers.Dense(1, dtype="float32"),
            ]
        )
        gan = families.KerasIoGAN(discriminator, generator)
        xla_update = path == "compiled update"
        gan.compile(
            d_optimizer=tfmp.LossScaleOptimizer(keras.optimizers.SGD(0.1), xla_update=xla_update),
            g_optimizer=tfmp.LossScaleOptimizer(keras.optimizers.SGD(0.1), xla_update=xla_update),
            loss_fn=keras.losses.BinaryCrossentropy(from_logits=True),
            jit_compile=path == "xla step",
        )
    kernel_sums = []

    class AfterEachApplied(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if not bool(gan.d_optimizer.last_step_skipped):
                kernel_sums.append(float(tf.reduce_sum(discriminator.trainable_weights[0])))

    data = tf.data.Dataset.from_tensor_slices((noise[rows], real[rows])).batch(4)
    history = gan.fit(data, epochs=1, verbose=0, shuffle=False, callbacks=[AfterEachApplied()]).history
    return history, kernel_sums, gan


def _assert_as_if_the_bad_batches_had_not_been_there(path, run, clean_run):
    """Two bad batches (a NaN, a float16 overflow) changed nothing: `run` equals `clean_run`, made without them.

    And one order on every path: the update, then the step's other writes, so the tracker that reads the
    discriminator's kernel after its update averages the kernel as each applied step left it.
    """
    (history, kernel_sums, gan), (without, _, clean) = run, clean_run
    assert (int(gan.d_optimizer.skipped_steps), int(gan.g_optimizer.skipped_steps)) == (2, 2), path
    assert float(gan.d_optimizer.loss_scale) == 2.0**13, path  # the NaN and the overflow each halved it
    for name in ("d_loss", "g_loss", "d_kernel"):
        assert np.isfinite(history[name][0]), (path, name, history)
        np.testing.assert_allclose(history[name], without[name], rtol=1e-3, err_msg=f"{path}: {name}")
    for got, want in zip(gan.variables, clean.variables):  # the weights and every network's state
        assert np.isfinite(got.numpy()).all(), (path, got.path)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-3, atol=1e-6, err_msg=f"{path}: {got.path}")
    # The frozen layer that writes in call wrote, and a skipped step's writes were put back.
    written = gan.discriminator.get_layer("frozen_writer").mean.numpy()
    assert np.isfinite(written).all() and np.abs(written).max() > 0, path
    assert len(kernel_sums) == 2, path  # batches 0 and 3 applied
    np.testing.assert_allclose(history["d_kernel"][0], np.mean(kernel_sums), rtol=1e-6, err_msg=path)


WITHOUT_THE_BAD_BATCHES = [*range(4), *range(12, 16)]


def test_a_keras_io_gan_on_one_device_keeps_bad_batches_out_of_its_losses_weights_state_and_metrics():
    """The branching update, the compiled update and the step XLA compiles whole, each against one clean run."""
    clean_run = _keras_io_gan_fit("branching update", WITHOUT_THE_BAD_BATCHES)
    for path in ("branching update", "compiled update", "xla step"):
        _assert_as_if_the_bad_batches_had_not_been_there(path, _keras_io_gan_fit(path, slice(None)), clean_run)


def test_a_keras_io_gan_on_two_replicas_keeps_bad_batches_out_too():
    """Rows 5 and 10 are in replica 0's and replica 1's halves of their batches."""
    run = _keras_io_gan_fit("two replicas", slice(None))
    _assert_as_if_the_bad_batches_had_not_been_there(
        "two replicas", run, _keras_io_gan_fit("two replicas", WITHOUT_THE_BAD_BATCHES)
    )
