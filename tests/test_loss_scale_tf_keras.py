"""tfmp's two loss-scale optimizers against the real things: tf_keras 2.21 and Keras 3.

tf.keras 2 code (get_scaled_loss / get_unscaled_gradients) on tf.keras 2's
class, `tfmp.mixed_precision.LossScaleOptimizer`, must update the weights
exactly as `tf_keras.mixed_precision.LossScaleOptimizer` does; Keras 3 code
(scale_loss) on `tfmp.LossScaleOptimizer` exactly as
`keras.optimizers.LossScaleOptimizer` does. Which contract holds is decided by
the class, never by the calls a step made: tfmp 0.1's tf.keras 2 calls on
Keras 3's class still give the right update, with a `FutureWarning` before it.

The oracles run the same float32/float16 arithmetic on the same inputs, and
the loss scale is a power of two, so scaling and unscaling are exact: the
gradients each wrapper hands its inner optimizer are compared bit for bit,
and so are the weights wherever the inner optimizers themselves agree bit for
bit (SGD, Adam; RMSprop within a bound derived below).
"""

import contextlib
import functools
import logging
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import tfmp

INF = float("inf")
TF_KERAS2_LSO = (
    tfmp.mixed_precision.LossScaleOptimizer
)  # tf.keras 2's class, as `from tfmp import mixed_precision` gives

_OPTIMIZERS = {
    # The GAN tutorial's generator uses Adam(1e-3), its discriminator RMSprop(1e-4).
    "SGD": (lambda: keras.optimizers.SGD(0.1), lambda: tf_keras.optimizers.SGD(0.1)),
    "SGD_momentum": (
        lambda: keras.optimizers.SGD(0.1, momentum=0.9),
        lambda: tf_keras.optimizers.SGD(0.1, momentum=0.9),
    ),
    "RMSprop": (lambda: keras.optimizers.RMSprop(1e-4), lambda: tf_keras.optimizers.RMSprop(1e-4)),
    "Adam": (lambda: keras.optimizers.Adam(1e-3), lambda: tf_keras.optimizers.Adam(1e-3)),
}
# Keras 3's and tf_keras's SGD (with or without momentum) and Adam run the
# same float32 operations in the same order (see their update_step), so on
# the same gradients they give the same bits. RMSprop does not: Keras 3
# computes lr * g / sqrt(v + eps), tf_keras lr * g * rsqrt(v + eps). Those
# increments differ by a few roundings (relative 2**-20 covers the three
# roundings plus rsqrt's few-ulp error), and the variables they are
# subtracted from may then round one ulp (<= 2**-23 relative) apart, per step.
_EXACT = ("SGD", "SGD_momentum", "Adam")


def _rmsprop_tolerance(steps, lr=1e-4, rho=0.9):
    # |lr * g / sqrt(v)| <= lr / sqrt(1 - rho), since v >= (1 - rho) * g**2.
    return dict(rtol=steps * 2.0**-23, atol=steps * 2.0**-20 * lr / np.sqrt(1 - rho))


# The GAN tutorial's three runs (train_GAN_optimized.py): precision, use_scaled_loss.
_SEED_RUNS = {
    "float32": (tf.float32, False),
    "float16_no_loss_scaling": (tf.float16, False),
    "float16_loss_scaling": (tf.float16, True),
}


def _problem(steps, seed=0, bad_step=None):
    """Initial weights of a 6-8-1 tanh net and `steps` batches of a logistic task."""
    rng = np.random.default_rng(seed)
    weights = [rng.normal(0, 0.5, (6, 8)).astype(np.float32), rng.normal(0, 0.5, (8, 1)).astype(np.float32)]
    batches = []
    for step in range(steps):
        x = rng.uniform(-1, 1, (16, 6)).astype(np.float32)
        if step == bad_step:
            x[3, 1] = np.inf  # every gradient of the step becomes non-finite
        batches.append((x, (rng.uniform(size=(16, 1)) < 0.5).astype(np.float32)))
    return weights, batches


def _loss(variables, x, y, dtype):
    # The GAN tutorial's discriminator loss in miniature: sigmoid cross-entropy on
    # logits, computed in the policy's dtype (float16 under mixed precision).
    w1, w2 = (tf.cast(v, dtype) for v in variables)
    logits = tf.tanh(tf.cast(x, dtype) @ w1) @ w2
    return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.cast(y, dtype), logits=logits))


def _seed_step(opt, variables, x, y, dtype, use_scaled_loss):
    """The GAN tutorial's train step, as written in train_GAN_optimized.py."""
    with tf.GradientTape() as tape:
        loss = _loss(variables, x, y, dtype)
        scaled_loss = opt.get_scaled_loss(loss)  # new line; not used if use_scaled_loss=False
    if use_scaled_loss:
        scaled_grads = tape.gradient(scaled_loss, variables)
        grads = opt.get_unscaled_gradients(scaled_grads)
    else:
        grads = tape.gradient(loss, variables)
    opt.apply_gradients(zip(grads, variables))


def _keras3_step(opt, variables, x, y, dtype):
    with tf.GradientTape() as tape:
        scaled_loss = opt.scale_loss(_loss(variables, x, y, dtype))
    opt.apply_gradients(zip(tape.gradient(scaled_loss, variables), variables))


def _train(step_fn, opt, weights, batches, mode):
    """Runs `step_fn` over `batches`; returns the weights after each step."""
    if isinstance(opt, keras.optimizers.Optimizer):
        variables = [keras.Variable(w) for w in weights]
    else:
        variables = [tf.Variable(w) for w in weights]
    step = functools.partial(step_fn, opt, variables)
    if mode == "function":
        step = tf.function(step)
    history = []
    for x, y in batches:
        step(tf.constant(x), tf.constant(y))
        history.append([np.array(v.numpy()) for v in variables])
    return history


def _assert_same_bits(history_a, history_b):
    assert len(history_a) == len(history_b)
    for step, (a, b) in enumerate(zip(history_a, history_b)):
        for va, vb in zip(a, b):
            assert va.tobytes() == vb.tobytes(), f"step {step}: max diff {np.max(np.abs(va - vb))}"


class _Capture(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def _tf_log():
    """Collects what tf.keras 2 would print through TensorFlow's logger."""
    handler = _Capture()
    logger = tf.get_logger()
    logger.addHandler(handler)
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)


def _scaling_warnings(messages):
    return [m for m in messages if "LossScaleOptimizer" in m and "forgot" in m]


@contextlib.contextmanager
def _no_scaling_warnings():
    """Asserts that no scaling warning of either kind is issued."""
    with _tf_log() as log, warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        yield
    assert _scaling_warnings(log) == []


# -- the GAN tutorial's three runs, tf.keras 2 flow ------------------------------------------------


def _record_inner_gradients(opt):
    """Records (eagerly) the gradients each step hands the inner optimizer."""
    record = []
    inner = opt.inner_optimizer
    if isinstance(inner, keras.optimizers.Optimizer):
        original = inner.apply

        def apply(grads, trainable_variables=None):
            record.append([np.array(g) for g in grads])
            return original(grads, trainable_variables)

        inner.apply = apply
    else:
        original = inner.apply_gradients

        def apply_gradients(grads_and_vars, **kwargs):
            grads_and_vars = list(grads_and_vars)
            record.append([np.array(g) for g, _ in grads_and_vars])
            return original(grads_and_vars, **kwargs)

        inner.apply_gradients = apply_gradients
    return record


@pytest.mark.parametrize("optimizer", ["SGD", "RMSprop", "Adam"])
@pytest.mark.parametrize("run", list(_SEED_RUNS))
def test_seed_runs_update_exactly_as_tf_keras2(run, optimizer):
    dtype, use_scaled_loss = _SEED_RUNS[run]
    make_keras3, make_tf_keras = _OPTIMIZERS[optimizer]
    steps = 4
    weights, batches = _problem(steps)
    step = functools.partial(_seed_step, dtype=dtype, use_scaled_loss=use_scaled_loss)
    ours = TF_KERAS2_LSO(make_keras3())
    oracle = tf_keras.mixed_precision.LossScaleOptimizer(make_tf_keras())
    ours_inner, oracle_inner = _record_inner_gradients(ours), _record_inner_gradients(oracle)
    with _tf_log() as log:
        expected = _train(step, oracle, weights, batches, "eager")
        n_oracle = len(_scaling_warnings(log))
        got = _train(step, ours, weights, batches, "eager")
        n_ours = len(_scaling_warnings(log)) - n_oracle
    # The loss scaler hands the inner optimizer the very same gradients.
    exact_steps = steps if optimizer in _EXACT else 1  # RMSprop: until the trajectories part
    assert len(ours_inner) == len(oracle_inner) == steps
    for a, b in zip(ours_inner[:exact_steps], oracle_inner[:exact_steps]):
        assert all(x.tobytes() == y.tobytes() for x, y in zip(a, b))
    if optimizer in _EXACT:
        _assert_same_bits(got, expected)
    else:
        for k, (a, b) in enumerate(zip(got, expected), start=1):
            for x, y in zip(a, b):
                np.testing.assert_allclose(x, y, **_rmsprop_tolerance(k))
    assert float(ours.loss_scale) == float(oracle.loss_scale) == 2.0**15
    # tf.keras 2 warns on every eager apply_gradients without get_unscaled_gradients.
    assert n_ours == n_oracle == (0 if use_scaled_loss else steps)
    # A real update, not one divided by the loss scale (the old defect).
    assert np.abs(got[0][0] - weights[0]).max() > 1e-5


@pytest.mark.parametrize("run", list(_SEED_RUNS))
def test_seed_runs_in_tf_function_update_exactly_as_tf_keras2(run):
    # tf.keras 2's warning is logged at trace time, once per trace.
    dtype, use_scaled_loss = _SEED_RUNS[run]
    weights, batches = _problem(steps=3, seed=1)
    step = functools.partial(_seed_step, dtype=dtype, use_scaled_loss=use_scaled_loss)
    with _tf_log() as log:
        expected = _train(
            step,
            tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.Adam(1e-3)),
            weights,
            batches,
            "function",
        )
        oracle_log = _scaling_warnings(log)
        got = _train(step, TF_KERAS2_LSO(keras.optimizers.Adam(1e-3)), weights, batches, "function")
        ours_log = _scaling_warnings(log)[len(oracle_log) :]
    _assert_same_bits(got, expected)
    # Logged once per trace (the first call traces twice: variables are made).
    assert ours_log == oracle_log
    assert bool(oracle_log) == (not use_scaled_loss)


@pytest.mark.parametrize("use_scaled_loss", [False, True])
def test_seed_flow_with_growth_and_a_skipped_step_matches_tf_keras2(use_scaled_loss):
    # Growth every 2 finite steps, one overflow at step 3 (scale 1024 -> 2048
    # -> 1024 -> 2048): the weights follow tf_keras bit for bit. SGD only (with
    # and without momentum): it does not use `iterations`, which tf.keras 2
    # advanced on a skipped step and tfmp (like Keras 3) does not.
    weights, batches = _problem(steps=7, seed=2, bad_step=3)
    step = functools.partial(_seed_step, dtype=tf.float16, use_scaled_loss=use_scaled_loss)
    for make_keras3, make_tf_keras in (_OPTIMIZERS["SGD"], _OPTIMIZERS["SGD_momentum"]):
        ours = TF_KERAS2_LSO(make_keras3(), initial_scale=1024, dynamic_growth_steps=2)
        oracle = tf_keras.mixed_precision.LossScaleOptimizer(
            make_tf_keras(), initial_scale=1024, dynamic_growth_steps=2
        )
        with _tf_log():
            expected = _train(step, oracle, weights, batches, "eager")
            got = _train(step, ours, weights, batches, "eager")
        _assert_same_bits(got, expected)
        assert float(ours.loss_scale) == float(oracle.loss_scale) == 2048.0
        assert int(ours.skipped_steps) == 1
        assert int(ours.iterations) == 6 and int(oracle.iterations) == 7


def test_fixed_non_power_of_two_scale_unscales_with_tf_keras2_arithmetic():
    # tf.keras 2 multiplies by the float32 reciprocal; for a scale of 1000 that
    # differs from a division in the last bit for some gradients.
    weights, batches = _problem(steps=3, seed=3)
    step = functools.partial(_seed_step, dtype=tf.float32, use_scaled_loss=True)
    expected = _train(
        step,
        tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD(0.1), dynamic=False, initial_scale=1000),
        weights,
        batches,
        "eager",
    )
    got = _train(
        step,
        TF_KERAS2_LSO(keras.optimizers.SGD(0.1), dynamic=False, initial_scale=1000),
        weights,
        batches,
        "eager",
    )
    _assert_same_bits(got, expected)
    g = tf.constant([3.0, 7.0, 0.1, 1e-3], tf.float32) * 1000.0
    divided = (g / 1000.0).numpy()
    multiplied = (g * (1.0 / tf.constant(1000.0))).numpy()
    assert not np.array_equal(divided, multiplied)  # the test can tell the two apart


def test_fixed_scale_skips_non_finite_steps_where_tf_keras2_applied_them():
    # tfmp's documented safety difference: tf.keras 2 with dynamic=False
    # applies a non-finite gradient, tfmp skips the step.
    weights, batches = _problem(steps=2, seed=4, bad_step=1)
    step = functools.partial(_seed_step, dtype=tf.float32, use_scaled_loss=True)
    expected = _train(
        step,
        tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD(0.1), dynamic=False, initial_scale=128),
        weights,
        batches,
        "eager",
    )
    ours = TF_KERAS2_LSO(keras.optimizers.SGD(0.1), dynamic=False, initial_scale=128)
    got = _train(step, ours, weights, batches, "eager")
    _assert_same_bits(got[:1], expected[:1])
    assert not np.isfinite(expected[1][0]).all()
    _assert_same_bits(got[1:], got[:1])
    assert int(ours.skipped_steps) == 1


# -- tf.keras 2's warnings, character for character -----------------------------------------


def _warning_of(opt, calls, variables):
    """Runs one eager step calling `calls`; returns the scaling warnings logged."""
    with _tf_log() as log:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(variables[0] * 3.0)
            scaled = opt.get_scaled_loss(loss) if "scaled" in calls else loss
        grads = tape.gradient(scaled if "unscaled" in calls else loss, variables)
        if "unscaled" in calls:
            grads = opt.get_unscaled_gradients(grads)
        opt.apply_gradients(zip(grads, variables))
    return _scaling_warnings(log)


@pytest.mark.parametrize("calls", [(), ("scaled",), ("unscaled",), ("scaled", "unscaled")])
def test_tf_keras2_warning_text_is_tf_keras2s(calls):
    oracle = _warning_of(
        tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD(0.1)), calls, [tf.Variable([1.0])]
    )
    ours = _warning_of(TF_KERAS2_LSO(keras.optimizers.SGD(0.1)), calls, [keras.Variable([1.0])])
    assert ours == oracle
    if calls == ("scaled",):
        assert len(ours) == 1 and ours[0].startswith(
            "You forgot to call LossScaleOptimizer.get_unscaled_gradients() before calling "
            "LossScaleOptimizer.apply_gradients() (you did call get_scaled_loss() however)."
        )
    elif calls == ("scaled", "unscaled"):
        assert ours == []


def test_tf_keras2_warning_stops_once_get_unscaled_gradients_was_ever_called():
    # tf.keras 2's flags are sticky: after one full step, a step that forgets
    # get_unscaled_gradients is no longer warned about.
    oracle = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD(0.1))
    ours = TF_KERAS2_LSO(keras.optimizers.SGD(0.1))
    oracle_vars, ours_vars = [tf.Variable([1.0])], [keras.Variable([1.0])]
    assert _warning_of(oracle, ("scaled", "unscaled"), oracle_vars) == []
    assert _warning_of(ours, ("scaled", "unscaled"), ours_vars) == []
    assert _warning_of(oracle, ("scaled",), oracle_vars) == []
    assert _warning_of(ours, ("scaled",), ours_vars) == []


# -- the Keras 3 flow against Keras 3's own LossScaleOptimizer -------------------------------


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("dtype", [tf.float32, tf.float16])
def test_keras3_flow_updates_exactly_as_keras3(dtype, mode):
    weights, batches = _problem(steps=3, seed=5)
    step = functools.partial(_keras3_step, dtype=dtype)
    oracle = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(1e-3))
    ours = tfmp.LossScaleOptimizer(keras.optimizers.Adam(1e-3))
    with _no_scaling_warnings():
        expected = _train(step, oracle, weights, batches, mode)
        got = _train(step, ours, weights, batches, mode)
    _assert_same_bits(got, expected)
    assert np.abs(got[0][0] - weights[0]).max() > 1e-5


# -- each class keeps its contract through both entries --------------------------------------------

# Keras's own test_finite_step: SGD(0.5), the default scale 2**15, gradients [1, 6, 7, 2] scaled.
_SCALED_GRADIENT = [1.0 * 2**15, 6.0 * 2**15, 7.0 * 2**15, 2.0 * 2**15]


def _apply_scaled_gradients(make, entry, mode):
    """Applies `_SCALED_GRADIENT` to [1, 2, 3, 4] with no scaling call in the step, through `entry`."""
    optimizer = make(keras.optimizers.SGD(0.5))
    var = keras.Variable([1.0, 2.0, 3.0, 4.0])

    def step():
        grads = [tf.constant(_SCALED_GRADIENT)]
        if entry == "apply":
            optimizer.apply(grads, [var])
        else:
            optimizer.apply_gradients(zip(grads, [var]))

    (tf.function(step) if mode == "function" else step)()
    return var.numpy().tolist()


@pytest.mark.parametrize("entry", ["apply", "apply_gradients"])
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_keras_3s_class_divides_through_either_entry_as_keras_3s_does(entry, mode):
    keras3 = _apply_scaled_gradients(keras.optimizers.LossScaleOptimizer, entry, mode)
    with _no_scaling_warnings():
        ours = _apply_scaled_gradients(tfmp.LossScaleOptimizer, entry, mode)
    assert ours == keras3 == [0.5, -1.0, -0.5, 3.0]


@pytest.mark.parametrize("entry", ["apply", "apply_gradients"])
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_tf_keras_2s_class_applies_as_given_through_either_entry(entry, mode):
    with _tf_log():
        ours = _apply_scaled_gradients(TF_KERAS2_LSO, entry, mode)
    assert ours == [-16383.0, -98302.0, -114685.0, -32764.0]  # [1, 2, 3, 4] - 0.5 * 2**15 * [1, 6, 7, 2]


@pytest.mark.parametrize("entry", ["apply", "apply_gradients"])
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_scale_loss_then_either_entry_divides_once(entry, mode):
    optimizer = tfmp.LossScaleOptimizer(keras.optimizers.SGD(0.5))
    var = keras.Variable([1.0, 2.0, 3.0, 4.0])

    def step():
        with tf.GradientTape() as tape:
            loss = optimizer.scale_loss(tf.reduce_sum(var * [1.0, 6.0, 7.0, 2.0]))
        grads = tape.gradient(loss, [var])
        if entry == "apply":
            optimizer.apply(grads, [var])
        else:
            optimizer.apply_gradients(zip(grads, [var]))

    with _no_scaling_warnings():
        (tf.function(step) if mode == "function" else step)()
    assert var.numpy().tolist() == [0.5, -1.0, -0.5, 3.0]


@pytest.mark.parametrize("make", [tfmp.LossScaleOptimizer, TF_KERAS2_LSO], ids=["keras3", "tf_keras2"])
def test_each_replica_keeps_its_classs_contract(mirrored, make):
    # Two replicas, each applying the gradient [1, 6, 7, 2] at scale 4: the inner SGD sums them.
    with mirrored.scope():
        optimizer = make(keras.optimizers.SGD(0.5), initial_scale=4.0)
        var = keras.Variable([1.0, 2.0, 3.0, 4.0])
        optimizer.build([var])

        @tf.function
        def step():
            mirrored.run(lambda: optimizer.apply_gradients(zip([tf.constant([4.0, 24.0, 28.0, 8.0])], [var])))

        with _tf_log():
            step()
    expected = [0.0, -4.0, -4.0, 2.0] if make is tfmp.LossScaleOptimizer else [-3.0, -22.0, -25.0, -4.0]
    assert [t.numpy().tolist() for t in var.value.values] == [expected, expected]


def _one_step(opt, scale_with, unscale, apply_inputs=False, c=3.0):
    """loss = c * w, from w = 0; returns the change of w.

    Under SGD(1.0) the change is minus the gradient the inner optimizer got.
    """
    var = keras.Variable(np.zeros(1, np.float32))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(var * c)
        targets = {"none": loss}
        if "scale_loss" in scale_with:
            targets["scale_loss"] = opt.scale_loss(loss)
        if "get_scaled_loss" in scale_with:
            targets["get_scaled_loss"] = opt.get_scaled_loss(loss)
    grads = tape.gradient(targets[scale_with[-1]] if scale_with else loss, [var])
    if unscale:
        unscaled = opt.get_unscaled_gradients(grads)
        if not apply_inputs:
            grads = unscaled
    opt.apply_gradients(zip(grads, [var]))
    return float(var.numpy()[0])


@pytest.mark.parametrize(
    "scale_with, unscale, apply_inputs, warned",
    [
        # tfmp 0.1's tf.keras 2 flow: get_unscaled_gradients returns them as given, apply divides once.
        (("get_scaled_loss",), True, False, 2),
        (("get_scaled_loss",), False, False, 1),  # tf.keras 2 would have applied them scaled
        (("scale_loss",), True, False, 1),  # scale_loss, then get_unscaled_gradients: divided once, not twice
        (("get_scaled_loss", "scale_loss"), False, False, 1),
        (("scale_loss",), True, True, 1),  # the inputs of get_unscaled_gradients applied: divided once
        (("scale_loss",), False, False, 0),  # Keras 3's flow
    ],
)
def test_keras_3s_class_applies_the_true_gradient_once_whatever_calls_tfmp_0_1_code_made(
    scale_with, unscale, apply_inputs, warned
):
    opt = tfmp.LossScaleOptimizer(keras.optimizers.SGD(1.0), initial_scale=1024)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        change = _one_step(opt, scale_with, unscale, apply_inputs)
    assert change == -3.0  # the true gradient 3 exactly once: no 1/1024 or 1024x update
    texts = [str(w.message) for w in record if issubclass(w.category, FutureWarning)]
    assert len(texts) == warned and all("tfmp.mixed_precision.LossScaleOptimizer" in t for t in texts), texts
    assert all(w.filename == __file__ for w in record if issubclass(w.category, FutureWarning))  # the caller's line


def test_an_unscaled_loss_on_keras_3s_class_is_divided_as_keras_3s_is():
    # Nothing is inferred from the calls a step made: the class divides, as Keras 3's does, without a warning.
    ours = tfmp.LossScaleOptimizer(keras.optimizers.SGD(1.0), initial_scale=1024)
    theirs = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(1.0), initial_scale=1024)
    with _no_scaling_warnings():
        assert _one_step(ours, (), False) == _one_step(theirs, (), False) == -3.0 / 1024


def test_scaling_in_another_tf_function_is_divided_on_every_step():
    opt = tfmp.LossScaleOptimizer(keras.optimizers.SGD(1.0), initial_scale=4)
    var = keras.Variable(np.zeros(1, np.float32))

    @tf.function
    def grads_fn():
        with tf.GradientTape() as tape:
            loss = opt.scale_loss(tf.reduce_sum(var * 3.0))
        return tape.gradient(loss, [var])

    with _no_scaling_warnings():
        for _ in range(3):
            opt.apply_gradients(zip(grads_fn(), [var]))
    assert var.numpy().tolist() == [-9.0]  # 3 steps of the true gradient 3


def test_keras3_flow_under_mirrored_strategy_is_seen_in_each_replica_thread(mirrored):
    # tf.distribute runs each replica's step in a thread of its own; each must
    # see its own scale_loss call, or apply would not unscale. In float32 a
    # power-of-two scale is exact, so the result equals the bare optimizer's.
    weights, batches = _problem(steps=2, seed=6)

    def run(make_optimizer, step_fn):
        with mirrored.scope():
            variables = [keras.Variable(w) for w in weights]
            opt = make_optimizer()
            opt.build(variables)

        @tf.function
        def step(x, y):
            mirrored.run(lambda x, y: step_fn(opt, variables, x, y), args=(x, y))

        for x, y in batches:
            step(tf.constant(x), tf.constant(y))
        return [v.numpy() for v in variables]

    def bare_step(opt, variables, x, y):
        with tf.GradientTape() as tape:
            loss = _loss(variables, x, y, tf.float32)
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))

    expected = run(lambda: keras.optimizers.SGD(0.1), bare_step)
    with _no_scaling_warnings():
        got = run(
            lambda: tfmp.LossScaleOptimizer(keras.optimizers.SGD(0.1)),
            functools.partial(_keras3_step, dtype=tf.float32),
        )
    for a, b in zip(got, expected):
        assert a.tobytes() == b.tobytes()
    assert not np.array_equal(got[0], weights[0])


@pytest.fixture(scope="module")
def mirrored():
    from tfmp.run import distribute

    return distribute.make_strategy("mirrored", ["/cpu:0", "/cpu:1"])


# -- overwrite_with_gradient (Keras's float8 scaling factors) -------------------------------


def test_keras_finite_step_with_overwrite_stateful():
    # Ported from keras/src/optimizers/loss_scale_optimizer_test.py (test_finite_step_with_overwrite, stateful).
    inner_optimizer = keras.optimizers.SGD(learning_rate=0.5)
    optimizer = tfmp.LossScaleOptimizer(inner_optimizer)
    grads = [keras.ops.array([1.0, 6.0, 7.0, 2.0])]
    vars = [keras.Variable([1.0, 2.0, 3.0, 4.0])]
    vars[0].overwrite_with_gradient = True
    with _no_scaling_warnings():
        optimizer.apply(grads, vars)
    np.testing.assert_allclose(vars[0].numpy(), grads[0].numpy())


def _overwrite_problem():
    """A normal variable `w` (loss 3 * w) and an overwritten one `s` whose
    gradient is its new value 5 (as float8 layers hand it through a custom
    gradient), at scale 1024."""
    w = keras.Variable(np.zeros(1, np.float32), name="w")
    s = keras.Variable(np.ones(1, np.float32), name="s")
    s.overwrite_with_gradient = True

    @tf.custom_gradient
    def new_value_as_gradient(v):
        return tf.zeros_like(v), lambda upstream: tf.fill(tf.shape(v), 5.0)

    def loss():
        return tf.reduce_sum(w * 3.0) + tf.reduce_sum(new_value_as_gradient(tf.identity(s.value)))

    return w, s, loss


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_overwrite_with_gradient_keras3_flow_matches_keras3(mode):
    results = {}
    for name, make in (("ours", tfmp.LossScaleOptimizer), ("keras", keras.optimizers.LossScaleOptimizer)):
        w, s, loss_fn = _overwrite_problem()
        opt = make(keras.optimizers.SGD(1.0), initial_scale=1024)
        opt.build([w, s])

        def step():
            with tf.GradientTape() as tape:
                loss = opt.scale_loss(loss_fn())
            opt.apply_gradients(zip(tape.gradient(loss, [w, s]), [w, s]))

        (tf.function(step) if mode == "function" else step)()
        results[name] = (w.numpy().tolist(), s.numpy().tolist())
    assert results["ours"] == results["keras"] == ([-3.0], [5.0])


def test_overwrite_with_gradient_is_refused_by_tf_keras_2s_class_before_the_update():
    # get_unscaled_gradients cannot tell a new value from a gradient, so it would divide it: Keras 3's flow can.
    w, s, loss_fn = _overwrite_problem()
    opt = TF_KERAS2_LSO(keras.optimizers.SGD(1.0), initial_scale=1024)
    with tf.GradientTape() as tape:
        scaled = opt.get_scaled_loss(loss_fn())
    grads = opt.get_unscaled_gradients(tape.gradient(scaled, [w, s]))
    with pytest.raises(ValueError, match=r"overwrite_with_gradient.*tfmp.LossScaleOptimizer.*Received: .*'s'"):
        opt.apply_gradients(zip(grads, [w, s]))
    assert (w.numpy().tolist(), s.numpy().tolist()) == ([0.0], [1.0])


def test_overwrite_with_gradient_step_is_skipped_when_non_finite():
    w, s, _ = _overwrite_problem()
    opt = tfmp.LossScaleOptimizer(keras.optimizers.SGD(1.0), initial_scale=1024)
    with tf.GradientTape() as tape:
        loss = opt.scale_loss(tf.reduce_sum(w * INF) + tf.reduce_sum(s))
    opt.apply_gradients(zip(tape.gradient(loss, [w, s]), [w, s]))
    assert (w.numpy().tolist(), s.numpy().tolist()) == ([0.0], [1.0])
    assert float(opt.loss_scale) == 512.0
