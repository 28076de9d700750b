"""Tests for tfmp/loss_scale.py: arithmetic, skipping, both loop flows, state."""

import json
import math
import warnings
import zipfile

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfmp
from tfmp import loss_scale as ls
from tfmp.run import distribute

INF, NAN = float("inf"), float("nan")


def _sgd_lso(**kwargs):
    return tfmp.LossScaleOptimizer(keras.optimizers.SGD(1.0), **kwargs)


def _make_step(opt, var, mode):
    """One Keras 3-flow step on `var`: loss = sum(var * c), so grad = c * scale."""

    def step(c):
        with tf.GradientTape() as tape:
            scaled = opt.scale_loss(tf.reduce_sum(var * c))
        grads = tape.gradient(scaled, [var])
        opt.apply_gradients(zip(grads, [var]))

    if mode == "eager":
        return step
    return tf.function(step, jit_compile=(mode == "xla"))


def _run(opt, pattern, mode="eager", var=None):
    """Runs one step per character: F finite, N inf, n nan. Records the state."""
    var = var if var is not None else keras.Variable(np.zeros(2, np.float32))
    opt.build([var])
    step = _make_step(opt, var, mode)
    record = []
    for ch in pattern:
        c = {"F": 1.0, "N": INF, "n": NAN}[ch]
        step(tf.constant(c, tf.float32))
        record.append((float(opt.loss_scale), int(opt.skipped_steps), bool(opt.last_step_skipped)))
    return record, var


# -- scale trajectories: exact numbers -------------------------------------


@pytest.mark.parametrize("mode", ["eager", "function", "xla"])
def test_growth_after_growth_steps(mode):
    record, var = _run(_sgd_lso(initial_scale=4, dynamic_growth_steps=2), "FFFFF", mode)
    assert [r[0] for r in record] == [4, 8, 8, 16, 16]
    assert all(r[1:] == (0, False) for r in record)
    # SGD(1.0) with unscaled gradient 1 per finite step.
    np.testing.assert_array_equal(var.numpy(), [-5, -5])


@pytest.mark.parametrize("mode", ["eager", "function", "xla"])
def test_backoff_halves_on_each_overflow(mode):
    # Four non-finite steps from 400 leave the scale at 25.
    record, var = _run(_sgd_lso(initial_scale=400), "NnNn", mode)
    assert [r[0] for r in record] == [200, 100, 50, 25]
    assert [r[1] for r in record] == [1, 2, 3, 4]
    assert all(r[2] for r in record)
    np.testing.assert_array_equal(var.numpy(), [0, 0])


def test_overflow_restarts_the_growth_count():
    record, _ = _run(_sgd_lso(initial_scale=8, dynamic_growth_steps=3), "FFNFFF")
    assert [r[0] for r in record] == [8, 8, 4, 4, 4, 8]
    assert [r[2] for r in record] == [False, False, True, False, False, False]


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_hysteresis_delays_backoff_until_the_scale_grows_again(mode):
    opt = _sgd_lso(initial_scale=64, dynamic_growth_steps=2, hysteresis=3)
    record, var = _run(opt, "NNNNFFNNN", mode)
    # Two overflows only skip, then each overflow lowers the scale; growth
    # refills the budget of two skip-only overflows.
    assert [r[0] for r in record] == [64, 64, 32, 16, 16, 32, 32, 32, 16]
    assert [r[1] for r in record] == [1, 2, 3, 4, 4, 4, 5, 6, 7]
    np.testing.assert_array_equal(var.numpy(), [-2, -2])


def test_hysteresis_counter_is_not_refilled_by_finite_steps_alone():
    opt = _sgd_lso(initial_scale=64, dynamic_growth_steps=100, hysteresis=2)
    record, _ = _run(opt, "NFNFN", mode="eager")
    assert [r[0] for r in record] == [64, 64, 32, 32, 16]


def test_min_scale_bounds_backoff():
    record, _ = _run(_sgd_lso(initial_scale=4, min_scale=2), "NNNN")
    assert [r[0] for r in record] == [2, 2, 2, 2]
    # The default floor is 1, as in tf.keras 2.
    record, _ = _run(_sgd_lso(initial_scale=2), "NNN")
    assert [r[0] for r in record] == [1, 1, 1]


def test_max_scale_bounds_growth():
    record, _ = _run(_sgd_lso(initial_scale=8, dynamic_growth_steps=1, max_scale=16), "FFF")
    assert [r[0] for r in record] == [16, 16, 16]


def test_growth_and_backoff_factors():
    opt = _sgd_lso(initial_scale=9, dynamic_growth_steps=1, growth_factor=3, backoff_factor=0.25)
    record, _ = _run(opt, "FNN")
    assert [r[0] for r in record] == [27, 6.75, 1.6875]


@pytest.mark.parametrize("mode", ["eager", "function", "xla"])
def test_fixed_scale_never_changes_and_still_skips(mode):
    opt = _sgd_lso(dynamic=False, initial_scale=128)
    record, var = _run(opt, "FNFnF", mode)
    assert [r[0] for r in record] == [128] * 5
    assert [r[1] for r in record] == [0, 1, 1, 2, 2]
    # tf.keras 2 applied non-finite gradients with dynamic=False; tfmp skips.
    np.testing.assert_array_equal(var.numpy(), [-3, -3])


def test_next_loss_scale_pure_function():
    state = ls.LossScaleState(tf.constant(8.0), tf.constant(1, tf.int64), tf.constant(2, tf.int64))
    kwargs = dict(
        dynamic=True,
        growth_steps=2,
        growth_factor=2.0,
        backoff_factor=0.5,
        hysteresis=2,
        min_scale=1.0,
        max_scale=2.0**24,
    )
    grown = ls.next_loss_scale(state, tf.constant(True), **kwargs)
    assert (float(grown.scale), int(grown.growth_count), int(grown.hysteresis_left)) == (16, 0, 2)
    spent = ls.next_loss_scale(state, tf.constant(False), **kwargs)
    assert (float(spent.scale), int(spent.growth_count), int(spent.hysteresis_left)) == (8, 0, 1)
    lowered = ls.next_loss_scale(spent, tf.constant(False), **kwargs)
    assert (float(lowered.scale), int(lowered.hysteresis_left)) == (4, 1)
    fixed = ls.next_loss_scale(state, tf.constant(False), **{**kwargs, "dynamic": False})
    assert fixed is state


# -- the state machine against a plain-Python model ------------------------------


def _reference_step(state, finite, p):
    """One step of the documented rule, in plain Python (float32 like the variable).

    Finite: count it; at `growth_steps` in a row, grow (capped at max_scale),
    restart the count, refill the hysteresis budget. Non-finite: restart the
    count; spend one unit of hysteresis while more than one is left,
    otherwise back off (floored at min_scale). A fixed scale never changes.
    """
    scale, count, hyst = state
    if not p["dynamic"]:
        return state
    f32 = np.float32
    if finite:
        if count + 1 >= p["growth_steps"]:
            return min(f32(scale * f32(p["growth_factor"])), f32(p["max_scale"])), 0, p["hysteresis"]
        return scale, count + 1, hyst
    if hyst > 1:
        return scale, 0, hyst - 1
    return max(f32(scale * f32(p["backoff_factor"])), f32(p["min_scale"])), 0, hyst


def _random_settings(rng, n):
    settings = []
    for _ in range(n):
        min_scale = float(rng.choice([0.5, 1.0, 3.0]))
        max_scale = float(rng.choice([48.0, 2.0**10, 5000.0]))
        settings.append(
            dict(
                dynamic=bool(rng.random() < 0.9),
                growth_steps=int(rng.choice([1, 2, 3, 5])),
                growth_factor=float(rng.choice([2.0, 3.0, 1.5])),
                backoff_factor=float(rng.choice([0.5, 0.25, 0.7])),
                hysteresis=int(rng.choice([1, 2, 3])),
                min_scale=min_scale,
                max_scale=max_scale,
                initial_scale=float(rng.choice([min_scale, 16.0, max_scale])),
            )
        )
    return settings


def test_next_loss_scale_matches_a_reference_model_on_random_sequences():
    # 12 random settings x 32 random sequences of 30 steps (384 sequences),
    # each setting run as one batch: next_loss_scale is elementwise.
    rng = np.random.default_rng(12)
    for p in _random_settings(rng, 12):
        finite = rng.random((30, 32)) < rng.choice([0.3, 0.7, 0.95])
        state = ls.LossScaleState(
            tf.fill([32], tf.constant(p["initial_scale"], tf.float32)),
            tf.zeros([32], tf.int64),
            tf.fill([32], tf.constant(p["hysteresis"], tf.int64)),
        )
        reference = [(np.float32(p["initial_scale"]), 0, p["hysteresis"])] * 32
        kwargs = {k: v for k, v in p.items() if k != "initial_scale"}
        for step in range(30):
            state = ls.next_loss_scale(state, tf.constant(finite[step]), **kwargs)
            reference = [_reference_step(r, f, p) for r, f in zip(reference, finite[step])]
            got = list(zip(state.scale.numpy(), state.growth_count.numpy(), state.hysteresis_left.numpy()))
            assert got == [(np.float32(a), b, c) for a, b, c in reference], (p, step)
            assert all(p["min_scale"] <= a <= p["max_scale"] for a, _, _ in got) or not p["dynamic"]


def test_optimizer_follows_the_reference_model_on_random_sequences():
    # The same model, through the real optimizer (Keras 3 flow, eager): scale,
    # counters, skips and the weight, which moves by -1 on each finite step.
    rng = np.random.default_rng(34)
    for p in _random_settings(rng, 3):
        opt = tfmp.LossScaleOptimizer(
            keras.optimizers.SGD(1.0),
            dynamic=p["dynamic"],
            initial_scale=p["initial_scale"],
            dynamic_growth_steps=p["growth_steps"],
            growth_factor=p["growth_factor"],
            backoff_factor=p["backoff_factor"],
            hysteresis=p["hysteresis"],
            min_scale=p["min_scale"],
            max_scale=p["max_scale"],
        )
        pattern = "".join(rng.choice(list("FFN")) for _ in range(16))
        record, var = _run(opt, pattern)
        state, skipped, moved = (np.float32(p["initial_scale"]), 0, p["hysteresis"]), 0, 0
        for ch, (scale, n_skipped, last_skipped) in zip(pattern, record):
            state = _reference_step(state, ch == "F", p)
            skipped += ch != "F"
            moved += ch == "F"
            assert (scale, n_skipped, last_skipped) == (state[0], skipped, ch != "F"), (p, pattern)
        assert (int(opt.dynamic_counter), int(opt.hysteresis_counter)) == state[1:]
        np.testing.assert_array_equal(var.numpy(), [-moved, -moved])


# -- constructors -----------------------------------------------------------


def test_keras3_form_defaults():
    opt = tfmp.LossScaleOptimizer(keras.optimizers.SGD())
    assert isinstance(opt, keras.optimizers.LossScaleOptimizer)
    assert float(opt.loss_scale) == 2.0**15
    assert opt.dynamic_growth_steps == 2000 and opt.dynamic
    assert (opt.growth_factor, opt.backoff_factor, opt.hysteresis) == (2.0, 0.5, 1)
    assert (opt.min_scale, opt.max_scale) == (1.0, 2.0**24)
    assert int(opt.skipped_steps) == 0 and not bool(opt.last_step_skipped)


def test_keras3_and_tf_keras2_forms():
    k3 = tfmp.LossScaleOptimizer(keras.optimizers.SGD(), initial_scale=64.0, dynamic_growth_steps=10)
    assert (float(k3.loss_scale), k3.dynamic_growth_steps, k3.dynamic) == (64.0, 10, True)
    k2 = tfmp.LossScaleOptimizer(keras.optimizers.SGD(), dynamic=True, initial_scale=None, dynamic_growth_steps=None)
    assert (float(k2.loss_scale), k2.dynamic_growth_steps) == (2.0**15, 2000)
    fixed = tfmp.LossScaleOptimizer(keras.optimizers.SGD(), dynamic=False, initial_scale=1024)
    assert (float(fixed.loss_scale), fixed.dynamic) == (1024.0, False)


def test_positional_forms_of_both_apis():
    k2 = tfmp.LossScaleOptimizer(keras.optimizers.SGD(), False, 64.0)
    assert (k2.dynamic, float(k2.loss_scale)) == (False, 64.0)
    k3 = tfmp.LossScaleOptimizer(keras.optimizers.SGD(), 64.0, 10)
    assert (k3.dynamic, float(k3.loss_scale), k3.dynamic_growth_steps) == (True, 64.0, 10)
    with pytest.raises(ValueError, match="initial_scale"):
        tfmp.LossScaleOptimizer(keras.optimizers.SGD(), 64.0, initial_scale=32.0)


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        (dict(initial_scale=0), "initial_scale=0"),
        (dict(initial_scale=-1.0), "initial_scale=-1.0"),
        (dict(initial_scale=INF), "initial_scale=inf"),
        (dict(growth_factor=1.0), "growth_factor=1.0"),
        (dict(growth_factor=0.5), "growth_factor=0.5"),
        (dict(backoff_factor=1.0), "backoff_factor=1.0"),
        (dict(backoff_factor=0.0), "backoff_factor=0.0"),
        (dict(backoff_factor=1.5), "backoff_factor=1.5"),
        (dict(hysteresis=0), "hysteresis=0"),
        (dict(hysteresis=1.5), "hysteresis=1.5"),
        (dict(min_scale=4.0, max_scale=2.0), "min_scale=4.0, max_scale=2.0"),
        (dict(dynamic=False), "initial_scale=None"),
        (dict(dynamic_growth_steps=0), "dynamic_growth_steps=0"),
        (dict(initial_scale=2.0**30), "initial_scale=1073741824.0"),
        (dict(dynamic="yes"), "dynamic='yes'"),
        (dict(dynamic=False, initial_scale=2.0**25), "initial_scale=33554432.0"),
        (dict(max_scale=1e40), "max_scale=1e+40"),
    ],
)
def test_bad_arguments_name_the_value(kwargs, fragment):
    with pytest.raises(ValueError) as info:
        tfmp.LossScaleOptimizer(keras.optimizers.SGD(), **kwargs)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    "args, kwargs, fragment",
    [
        ((64.0, 10, 3), {}, "may only be initial_scale, dynamic_growth_steps. Received: args=(64.0, 10, 3)"),
        ((True, 64.0, 10, 3), {}, "dynamic, initial_scale, dynamic_growth_steps. Received: args=(True, 64.0, 10, 3)"),
        ((), dict(initial_scale=0.5), "Received: initial_scale=0.5, min_scale=1.0"),
        ((), dict(initial_scale=2**21, max_scale=2.0**20), "(0, 1048576] (max_scale=1048576.0): the largest scale"),
        ((), dict(initial_scale="128"), "Received: initial_scale='128'"),
        ((), dict(growth_factor=INF), "(0, 3.40282347e+38] (float32's range). Received: growth_factor=inf"),
    ],
)
def test_bad_arguments_give_the_bound_and_the_values(args, kwargs, fragment):
    with pytest.raises(ValueError) as info:
        tfmp.LossScaleOptimizer(keras.optimizers.SGD(), *args, **kwargs)
    assert fragment in str(info.value)


def test_only_a_dynamic_scale_starts_at_min_scale_or_above():
    opt = tfmp.LossScaleOptimizer(keras.optimizers.SGD(), dynamic=False, initial_scale=0.5)
    assert (opt.dynamic, float(opt.loss_scale)) == (False, 0.5)


def test_rejects_wrapping_twice_and_non_optimizers():
    with pytest.raises(ValueError, match="already a LossScaleOptimizer"):
        tfmp.LossScaleOptimizer(tfmp.LossScaleOptimizer(keras.optimizers.SGD()))
    with pytest.raises(ValueError, match="inner_optimizer='sgd'"):
        tfmp.LossScaleOptimizer("sgd")


# -- skipping leaves everything untouched -----------------------------------------


def _tiny_model(seed=1):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(8, activation="relu"),
            keras.layers.Dense(1, dtype="float32"),
        ]
    )
    return model


def _bits(values):
    return [np.atleast_1d(np.asarray(v)).view(np.uint8).copy() for v in values]


def test_skipped_step_leaves_weights_and_slots_bit_identical():
    with tfmp.precision_scope("mixed_float16"):
        model = _tiny_model()
    opt = tfmp.LossScaleOptimizer(keras.optimizers.Adam(1e-2), initial_scale=2.0**10)
    opt.build(model.trainable_variables)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            loss = opt.get_scaled_loss(tf.reduce_mean(tf.square(model(x))))
        grads = opt.get_unscaled_gradients(tape.gradient(loss, model.trainable_variables))
        opt.apply_gradients(zip(grads, model.trainable_variables))

    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4)
    step(x)
    step(x)
    before = _bits([v.numpy() for v in model.variables + opt.inner_optimizer.variables])
    x_bad = x.copy()
    x_bad[3, 2] = np.nan
    step(x_bad)
    after = _bits([v.numpy() for v in model.variables + opt.inner_optimizer.variables])
    assert all(np.array_equal(a, b) for a, b in zip(before, after))
    assert int(opt.inner_optimizer.iterations) == 2
    assert bool(opt.last_step_skipped) and int(opt.skipped_steps) == 1
    assert float(opt.loss_scale) == 2.0**9


# -- the two custom-loop flows: each class keeps one contract ------------------------------------


def _optimizer_of(flow, inner, **kwargs):
    """tf.keras 2's class for its flow, Keras 3's class for its own."""
    make = tfmp.mixed_precision.LossScaleOptimizer if flow == "tf_keras2" else tfmp.LossScaleOptimizer
    return make(inner, **kwargs)


def test_both_flows_unscale_exactly_once():
    for flow in ("tf_keras2", "keras3"):
        var = keras.Variable(np.zeros(1, np.float32))
        opt = _optimizer_of(flow, keras.optimizers.SGD(1.0), initial_scale=1024)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(3.0 * var)
            scaled = opt.get_scaled_loss(loss) if flow == "tf_keras2" else opt.scale_loss(loss)
        grads = tape.gradient(scaled, [var])
        assert float(grads[0][0]) == 3072.0
        if flow == "tf_keras2":
            grads = opt.get_unscaled_gradients(grads)
            assert float(grads[0][0]) == 3.0
        opt.apply_gradients(zip(grads, [var]))
        assert var.numpy().tolist() == [-3.0], flow


def _train_with_flow(flow, batches):
    with tfmp.precision_scope("mixed_float16"):
        model = _tiny_model(seed=7)
    opt = _optimizer_of(flow, keras.optimizers.Adam(1e-2), initial_scale=2.0**12, dynamic_growth_steps=2)
    opt.build(model.trainable_variables)
    variables = model.trainable_variables

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
            scaled = opt.get_scaled_loss(loss) if flow == "tf_keras2" else opt.scale_loss(loss)
        grads = tape.gradient(scaled, variables)
        if flow == "tf_keras2":
            grads = opt.get_unscaled_gradients(grads)
            opt.apply_gradients(zip(grads, variables))
        else:
            opt.apply(grads, variables)

    scales = []
    for x, y in batches:
        step(x, y)
        scales.append(float(opt.loss_scale))
    return [v.numpy() for v in model.variables + opt.inner_optimizer.variables], scales, int(opt.skipped_steps)


def test_both_flows_give_identical_updates():
    rng = np.random.default_rng(0)
    batches = []
    for i in range(6):
        x = rng.normal(size=(16, 4)).astype(np.float32)
        if i == 2:
            x[0, 0] = np.inf  # one overflowing step, skipped by both
        batches.append((x, rng.normal(size=(16, 1)).astype(np.float32)))
    state_a, scales_a, skipped_a = _train_with_flow("tf_keras2", batches)
    state_b, scales_b, skipped_b = _train_with_flow("keras3", batches)
    assert scales_a == scales_b == [4096, 8192, 4096, 4096, 8192, 8192]
    assert skipped_a == skipped_b == 1
    assert all(np.array_equal(a, b) for a, b in zip(_bits(state_a), _bits(state_b)))


def test_scale_loss_in_one_function_and_apply_gradients_in_another_give_keras_3s_update():
    """Gradient accumulation's layout: the gradients are made in one tf.function, applied in another."""

    def run(optimizer):
        keras.utils.set_random_seed(3)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)])
        x = np.random.default_rng(3).normal(size=(16, 4)).astype(np.float32)

        @tf.function
        def gradients(x):
            with tf.GradientTape() as tape:
                scaled = optimizer.scale_loss(tf.reduce_mean(tf.square(model(x))))
            return tape.gradient(scaled, model.trainable_variables)

        @tf.function
        def apply(grads):
            optimizer.apply_gradients(zip(grads, model.trainable_variables))

        before = [v.numpy() for v in model.trainable_variables]
        apply(gradients(x))
        return [v.numpy() - b for v, b in zip(model.trainable_variables, before)]

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours = run(tfmp.LossScaleOptimizer(keras.optimizers.SGD(0.1)))
    keras3 = run(keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1)))
    for a, b in zip(ours, keras3):
        np.testing.assert_array_equal(a, b)
    assert 1e-4 < max(np.abs(change).max() for change in ours) < 1.0  # divided by 2**15 once, not 0 or 2**15 times


def test_apply_divides_gradients_made_without_a_scaling_call_as_keras_3s_does():
    # What the object is decides: Keras 3's class always divides, with no record of which calls a step made.
    var = keras.Variable(np.zeros(1, np.float32))
    opt = _sgd_lso(initial_scale=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opt.apply_gradients(zip([tf.constant([8.0])], [var]))
    assert var.numpy().tolist() == [-1.0]


def test_tf_keras_2s_calls_on_keras_3s_class_warn_before_the_update_and_divide_once():
    # tfmp 0.1's tf.keras 2 flow on tfmp.LossScaleOptimizer: the update is right, and the changed meaning is said.
    var = keras.Variable(np.zeros(1, np.float32))
    opt = _sgd_lso(initial_scale=1024)
    with pytest.warns(FutureWarning, match=r"get_scaled_loss` is `scale_loss` on tfmp.LossScaleOptimizer"):
        with tf.GradientTape() as tape:
            scaled = opt.get_scaled_loss(tf.reduce_sum(3.0 * var))
    grads = tape.gradient(scaled, [var])
    with pytest.warns(FutureWarning, match=r"returns the gradients as given, still scaled.*mixed_precision"):
        inspected = opt.get_unscaled_gradients(grads)
    assert float(inspected[0][0]) == 3072.0 and int(opt.iterations) == 0  # said before any update
    opt.apply_gradients(zip(inspected, [var]))
    assert var.numpy().tolist() == [-3.0]
    assert callable(opt.get_scaled_loss(lambda: tf.constant(0.5)))


# -- API details ----------------------------------------------------------------


def test_float16_loss_is_scaled_in_float32_without_overflow():
    # The loss value 4 times 2**15 exceeds 65504, its gradient (2**15) does not.
    var = keras.Variable(np.full(1, 4.0, np.float32))
    opt = _sgd_lso(initial_scale=2.0**15)
    with tf.GradientTape() as tape:
        loss16 = tf.reduce_sum(tf.cast(var, tf.float16))
        scaled = opt.scale_loss(loss16)
    assert scaled.dtype == tf.float32 and float(scaled) == 131072.0
    opt.apply_gradients(zip(tape.gradient(scaled, [var]), [var]))
    assert not bool(opt.last_step_skipped)
    assert var.numpy().tolist() == [3.0]


def test_sparse_gradients_are_applied_and_skipped():
    embedding = keras.layers.Embedding(4, 2, embeddings_initializer="zeros")
    embedding.build((None,))
    opt = _sgd_lso(initial_scale=256)
    opt.build(embedding.trainable_variables)

    def step(c):
        with tf.GradientTape() as tape:
            loss = opt.scale_loss(tf.reduce_sum(embedding(tf.constant([2])) * c))
        grads = tape.gradient(loss, embedding.trainable_variables)
        assert isinstance(grads[0], tf.IndexedSlices)
        opt.apply_gradients(zip(grads, embedding.trainable_variables))

    step(1.0)
    step(INF)
    table = embedding.embeddings.numpy()
    np.testing.assert_array_equal(table[2], [-1.0, -1.0])
    assert not table[[0, 1, 3]].any()
    assert int(opt.skipped_steps) == 1


@pytest.mark.parametrize("clip", [dict(clipnorm=1.0), dict(global_clipnorm=1.0), dict(clipvalue=0.5)])
def test_inner_clipping_acts_on_unscaled_gradients(clip):
    # Like PyTorch's unscale_() before clip_grad_norm_: the clip threshold is in
    # units of the true gradient, so results match an unscaled float32 run.
    def run(optimizer, scaled):
        a = keras.Variable(np.zeros(2, np.float32))
        b = keras.Variable(np.zeros(1, np.float32))
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(a * [3.0, 4.0]) + tf.reduce_sum(b * 12.0)
            if scaled:
                loss = optimizer.scale_loss(loss)
        optimizer.apply_gradients(zip(tape.gradient(loss, [a, b]), [a, b]))
        return np.concatenate([a.numpy(), b.numpy()])

    reference = run(keras.optimizers.SGD(1.0, **clip), scaled=False)
    scaled = run(tfmp.LossScaleOptimizer(keras.optimizers.SGD(1.0, **clip), initial_scale=2.0**14), scaled=True)
    np.testing.assert_allclose(scaled, reference, rtol=1e-6)
    unclipped = np.array([-3.0, -4.0, -12.0])
    assert not np.allclose(reference, unclipped)


def test_observable_state_inside_tf_function():
    var = keras.Variable(np.zeros(1, np.float32))
    opt = _sgd_lso(initial_scale=32)
    opt.build([var])

    @tf.function
    def step(c):
        with tf.GradientTape() as tape:
            loss = opt.scale_loss(tf.reduce_sum(var * c))
        opt.apply_gradients(zip(tape.gradient(loss, [var]), [var]))
        return opt.loss_scale, opt.skipped_steps, opt.last_step_skipped

    assert [float(t) for t in step(tf.constant(INF))] == [16.0, 1.0, 1.0]
    assert [float(t) for t in step(tf.constant(1.0))] == [16.0, 1.0, 0.0]


def test_scale_loss_traced_before_build_reads_the_variable():
    # Keras 3 bakes initial_scale into a graph traced before the first apply();
    # tfmp's scale lives in a variable from construction on.
    var = keras.Variable(np.zeros(1, np.float32))
    opt = _sgd_lso(initial_scale=64)
    scaled_loss = tf.function(lambda: opt.scale_loss(tf.constant(1.0)))
    assert float(scaled_loss()) == 64.0
    with tf.GradientTape() as tape:
        loss = opt.scale_loss(tf.reduce_sum(var * INF))
    opt.apply_gradients(zip(tape.gradient(loss, [var]), [var]))
    assert float(scaled_loss()) == 32.0


# -- the compiled update: selected, not branched ----------------------------------


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_a_compiled_update_keeps_the_scale_trajectory_and_the_weights(mode):
    """xla_update=True selects new or old values in one XLA cluster; the numbers are the branching update's."""
    kwargs = {"initial_scale": 4, "dynamic_growth_steps": 2, "hysteresis": 2}
    compiled, c_var = _run(_sgd_lso(xla_update=True, **kwargs), "FFNFnNFF", mode)
    branched, b_var = _run(_sgd_lso(xla_update=False, **kwargs), "FFNFnNFF", mode)
    assert compiled == branched
    assert compiled[2] == (8.0, 1, True) and compiled[5] == (2.0, 3, True)
    np.testing.assert_array_equal(c_var.numpy(), b_var.numpy())


def _adam_steps(xla_update, batches):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
    opt = tfmp.LossScaleOptimizer(keras.optimizers.Adam(0.01), initial_scale=2.0**10, xla_update=xla_update)
    opt.build(model.trainable_variables)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            scaled = opt.scale_loss(tf.reduce_mean(model(x) ** 2))
        opt.apply(tape.gradient(scaled, model.trainable_variables), model.trainable_variables)

    states = []
    for x in batches:
        step(tf.constant(x))
        states.append([v.numpy().copy() for v in model.variables + opt.inner_optimizer.variables])
        states[-1].append(int(opt.skipped_steps))
    return states


def test_a_compiled_adam_update_matches_the_uncompiled_one_and_a_skip_changes_nothing():
    rng = np.random.default_rng(0)
    batches = [rng.normal(size=(16, 4)).astype(np.float32) for _ in range(6)]
    batches[3][2, 1] = np.nan
    compiled, plain = _adam_steps(True, batches), _adam_steps(False, batches)
    for a, b in zip(compiled, plain):
        for x, y in zip(a, b):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-7)  # XLA may fuse Adam's arithmetic differently
    # The NaN step (the fourth) was skipped: every weight, slot and the inner optimizer's iterations are as they were.
    before, after = compiled[2], compiled[3]
    assert (before[-1], after[-1]) == (0, 1)
    for x, y in zip(before[:-1], after[:-1]):
        np.testing.assert_array_equal(x, y)


def test_xla_update_takes_true_false_or_auto():
    assert _sgd_lso().xla_update == "auto"
    assert tfmp.LossScaleOptimizer.from_config(_sgd_lso(xla_update=False).get_config()).xla_update is False
    with pytest.raises(ValueError, match=r'`xla_update` must be True, False or "auto"\. Received: xla_update=\'yes\''):
        _sgd_lso(xla_update="yes")


def test_tfmp_0_1s_jit_compile_is_xla_update_with_a_deprecation_warning():
    expected = "`LossScaleOptimizer(jit_compile)` is deprecated; use `LossScaleOptimizer(xla_update)`. It will be"
    with pytest.warns(DeprecationWarning) as caught:
        opt = _sgd_lso(jit_compile=False)
    assert opt.xla_update is False and [str(w.message)[: len(expected)] for w in caught] == [expected]
    assert caught[0].filename == __file__  # the caller's line
    config = opt.get_config()
    assert "jit_compile" not in config and config["xla_update"] is False
    config["jit_compile"] = config.pop("xla_update")  # a config tfmp 0.1 wrote
    with pytest.warns(DeprecationWarning, match=r"LossScaleOptimizer\(jit_compile\)"):
        assert tfmp.LossScaleOptimizer.from_config(config).xla_update is False
    with pytest.warns(DeprecationWarning, match=r"`LossScaleOptimizer.jit_compile` is deprecated; use `Loss"):
        assert opt.jit_compile is False


# -- state: config, checkpoints, .keras files -------------------------------------


def test_get_config_round_trip():
    opt = tfmp.LossScaleOptimizer(
        keras.optimizers.Adam(3e-4, clipnorm=2.0),
        dynamic=True,
        initial_scale=256.0,
        dynamic_growth_steps=50,
        growth_factor=4.0,
        backoff_factor=0.25,
        hysteresis=3,
        min_scale=2.0,
        max_scale=2.0**20,
        name="my_lso",
    )
    config = opt.get_config()
    clone = tfmp.LossScaleOptimizer.from_config(dict(config))
    assert clone.get_config() == config
    assert isinstance(clone.inner_optimizer, keras.optimizers.Adam)
    assert clone.inner_optimizer.clipnorm == 2.0
    assert (clone.hysteresis, clone.min_scale, clone.max_scale) == (3, 2.0, 2.0**20)
    fixed = tfmp.LossScaleOptimizer(keras.optimizers.SGD(), dynamic=False, initial_scale=8.0)
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(fixed))
    assert isinstance(restored, tfmp.LossScaleOptimizer)
    assert not restored.dynamic and float(restored.loss_scale) == 8.0


def test_checkpoint_mid_trajectory_continues_identically(tmp_path):
    def fresh():
        var = keras.Variable(np.zeros(2, np.float32))
        opt = tfmp.LossScaleOptimizer(
            keras.optimizers.Adam(0.1), initial_scale=64, dynamic_growth_steps=3, hysteresis=2
        )
        opt.build([var])
        return var, opt

    var, opt = fresh()
    _run(opt, "FFNFNF", var=var)
    path = tf.train.Checkpoint(var=var, opt=opt).save(str(tmp_path / "ckpt"))
    expected, _ = _run(opt, "FFNNFFF", var=var)
    expected_state = [v.numpy() for v in [var] + opt.variables]

    var2, opt2 = fresh()
    tf.train.Checkpoint(var=var2, opt=opt2).restore(path).assert_consumed()
    resumed, _ = _run(opt2, "FFNNFFF", var=var2)
    assert resumed == expected
    assert all(
        np.array_equal(a, b) for a, b in zip(_bits(expected_state), _bits([v.numpy() for v in [var2] + opt2.variables]))
    )


def test_keras_file_round_trip_restores_loss_scale_state(tmp_path):
    with tfmp.precision_scope("mixed_float16"):
        model = _tiny_model()
    opt = tfmp.LossScaleOptimizer(
        keras.optimizers.Adam(1e-2), initial_scale=2.0**10, dynamic_growth_steps=3, hysteresis=2
    )
    with tfmp.precision_scope("mixed_float16"):
        model.compile(optimizer=opt, loss="mse")
    assert model.optimizer is opt  # Keras does not wrap it again
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(16, 4)
    y = np.ones((16, 1), np.float32)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    x_bad = x.copy()
    x_bad[:, 0] = np.nan
    model.fit(x_bad, y, batch_size=16, epochs=2, verbose=0)  # two overflows: one skip-only, one backoff
    assert int(opt.skipped_steps) == 2 and float(opt.loss_scale) == 2.0**9
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    lopt = loaded.optimizer
    assert isinstance(lopt, tfmp.LossScaleOptimizer)
    assert lopt.get_config() == opt.get_config()
    for name in ("dynamic_scale", "step_counter", "hysteresis_counter", "skipped_counter", "last_skipped_flag"):
        assert getattr(lopt, name).numpy() == getattr(opt, name).numpy(), name
    assert int(lopt.iterations) == int(opt.iterations) == 2
    for a, b in zip(loaded.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)


def _keras_file_of_the_previous_release(path, speculative_update):
    """A `.keras` file as the previous release wrote it: its optimizer config holds `speculative_update`."""
    model = _tiny_model()
    optimizer = tfmp.LossScaleOptimizer(keras.optimizers.Adam(1e-2), initial_scale=64.0, name="lso")
    model.compile(optimizer=optimizer, loss="mse")
    model.fit(np.ones((4, 4), np.float32), np.ones((4, 1), np.float32), verbose=0)
    model.save(str(path / "current.keras"))
    with zipfile.ZipFile(path / "current.keras") as current, zipfile.ZipFile(path / "previous.keras", "w") as previous:
        for item in current.infolist():
            data = current.read(item)
            if item.filename == "config.json":
                config = json.loads(data)
                config["compile_config"]["optimizer"]["config"]["speculative_update"] = speculative_update
                data = json.dumps(config)
            previous.writestr(item, data)
    return model, str(path / "previous.keras")


@pytest.mark.parametrize("speculative_update", [False, True])
def test_a_keras_file_of_the_previous_release_still_loads(tmp_path, speculative_update):
    # The speculative update is gone; a file that asks for it loads with the gated update, which gave the
    # same results, and says so once.
    model, path = _keras_file_of_the_previous_release(tmp_path, speculative_update)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = keras.saving.load_model(path)
    said = [str(w.message) for w in caught if "speculative_update" in str(w.message)]
    assert said == (
        [
            "LossScaleOptimizer 'lso': speculative_update no longer exists; the gated update (waiting for the "
            "finite check, with the same results) is used. Received: speculative_update=True"
        ]
        if speculative_update
        else []
    )
    assert loaded.optimizer.get_config() == model.optimizer.get_config()
    assert "speculative_update" not in loaded.optimizer.get_config()
    assert float(loaded.optimizer.loss_scale) == 64.0 and int(loaded.optimizer.iterations) == 1
    for a, b in zip(loaded.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_a_config_of_the_previous_release_still_deserializes():
    config = keras.optimizers.serialize(tfmp.LossScaleOptimizer(keras.optimizers.SGD(), initial_scale=8.0))
    config["config"]["speculative_update"] = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        restored = keras.optimizers.deserialize(config)
    assert isinstance(restored, tfmp.LossScaleOptimizer) and float(restored.loss_scale) == 8.0
    with pytest.raises(ValueError, match="speculative_update"):
        tfmp.LossScaleOptimizer(keras.optimizers.SGD(), speculative_update=False)  # only old configs keep it


def test_fit_drives_the_scale_and_counts_skips():
    with tfmp.precision_scope("mixed_float16"):
        model = _tiny_model()
        model.compile(
            optimizer=tfmp.LossScaleOptimizer(keras.optimizers.SGD(0.01), initial_scale=4, dynamic_growth_steps=2),
            loss="mse",
        )
    x = np.ones((8, 4), np.float32)
    model.fit(x, np.zeros((8, 1), np.float32), batch_size=2, epochs=1, verbose=0)
    assert float(model.optimizer.loss_scale) == 16.0  # 4 finite steps, growth every 2
    assert int(model.optimizer.iterations) == 4 and int(model.optimizer.skipped_steps) == 0
    assert not math.isnan(float(model.evaluate(x, np.zeros((8, 1)), verbose=0)))


def test_fit_with_jit_compile_skips_overflowing_batches():
    with tfmp.precision_scope("mixed_float16"):
        model = _tiny_model()
        opt = tfmp.LossScaleOptimizer(keras.optimizers.SGD(0.1), initial_scale=8, dynamic_growth_steps=2)
        model.compile(optimizer=opt, loss="mse", jit_compile=True)
    x = np.ones((6, 4), np.float32)
    x[2:4, 0] = np.nan  # the second of three batches
    model.fit(x, np.zeros((6, 1), np.float32), batch_size=2, epochs=1, verbose=0, shuffle=False)
    assert model.jit_compile
    assert (float(opt.loss_scale), int(opt.skipped_steps), int(opt.iterations)) == (4.0, 1, 2)
    assert all(np.isfinite(w).all() for w in model.get_weights())


# -- tf.distribute ------------------------------------------------------------------


@pytest.fixture(scope="session")
def mirrored():
    # One strategy per process, shared with the other test files through
    # make_strategy: separate MirroredStrategy objects reuse collective
    # instance keys, and eager collectives of one then clash with another's
    # ("Shape mismatch in the collective instance 100").
    return distribute.make_strategy("mirrored", ["/cpu:0", "/cpu:1"])


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("bad_replica", [0, 1, None])
def test_mirrored_any_bad_replica_makes_every_replica_skip(mirrored, bad_replica, mode):
    strategy = mirrored
    with strategy.scope():
        var = keras.Variable(np.ones(3, np.float32))
        opt = tfmp.LossScaleOptimizer(keras.optimizers.Adam(0.1), initial_scale=8.0)
        opt.build([var])

    def step(multiplier):
        def replica_fn(m):
            with tf.GradientTape() as tape:
                loss = opt.scale_loss(tf.reduce_sum(var * var) * m)
            opt.apply_gradients(zip(tape.gradient(loss, [var]), [var]))

        strategy.run(replica_fn, args=(multiplier,))

    if mode == "function":
        step = tf.function(step)
    multiplier = strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(INF if ctx.replica_id_in_sync_group == bad_replica else 1.0)
    )
    step(multiplier)
    weights = [t.numpy() for t in var.value.values]
    scales = [float(t.numpy()) for t in opt.dynamic_scale.value.values]
    assert len(weights) == 2
    if bad_replica is None:
        assert not np.array_equal(weights[0], np.ones(3))
        np.testing.assert_array_equal(weights[0], weights[1])
        assert scales == [8.0, 8.0] and int(opt.skipped_steps) == 0
    else:
        for w in weights:
            np.testing.assert_array_equal(w, np.ones(3))
        assert scales == [4.0, 4.0]
        assert int(opt.skipped_steps) == 1 and opt.inner_optimizer.iterations.numpy() == 0


@pytest.mark.parametrize("bad_example", [0, 3])
def test_mirrored_fit_skips_when_either_replica_shard_is_non_finite(mirrored, bad_example):
    # A global batch of 4 splits as examples 0-1 on replica 0, 2-3 on replica 1.
    # Keras 3's own LossScaleOptimizer applies the step when only replica 1
    # overflows, turning every replica's weights non-finite.
    strategy = mirrored
    with tfmp.precision_scope("mixed_float16"), strategy.scope():
        model = _tiny_model()
        opt = tfmp.LossScaleOptimizer(keras.optimizers.SGD(0.1), initial_scale=8.0)
        model.compile(optimizer=opt, loss="mse")
    before = model.get_weights()
    x = np.ones((4, 4), np.float32)
    x[bad_example, 0] = np.nan
    ds = tf.data.Dataset.from_tensor_slices((x, np.zeros((4, 1), np.float32))).batch(4)
    model.fit(ds, epochs=1, verbose=0, shuffle=False)
    for variable in model.trainable_variables:
        for replica_value in variable.value.values:
            assert np.isfinite(replica_value.numpy()).all()
    for a, b in zip(model.get_weights(), before):
        np.testing.assert_array_equal(a, b)
    assert [float(t.numpy()) for t in opt.dynamic_scale.value.values] == [4.0, 4.0]
    assert int(opt.skipped_steps) == 1


def _op_types(fn, *args):
    graph = tf.function(fn).get_concrete_function(*args).graph
    return [op.type for op in graph.get_operations()]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_fixed_scale_1_adds_no_multiplication_and_keeps_the_values(dtype):
    # A skip-only optimizer (fixed scale 1) leaves loss and gradients as they are: multiplying by 1 is exact,
    # and a step of a bfloat16 or float32 model pays nothing per gradient for it.
    unit = ls.LossScaleOptimizer(keras.optimizers.SGD(), dynamic=False, initial_scale=1.0)
    unit_tf_keras2 = tfmp.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(), dynamic=False, initial_scale=1.0)
    two = tfmp.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(), dynamic=False, initial_scale=2.0)
    loss = tf.constant(3.0, dtype)
    grads = [tf.constant([1.5, -0.0, np.nan], dtype), tf.constant([[2.0]], dtype)]
    assert "Mul" not in _op_types(lambda g: unit_tf_keras2.get_unscaled_gradients(g), grads)
    assert "Mul" not in _op_types(lambda x: unit.scale_loss(x), loss)
    assert "Mul" in _op_types(lambda g: two.get_unscaled_gradients(g), grads)  # the check can fail
    scaled = unit.scale_loss(loss)
    assert scaled.dtype == tf.float32 and float(scaled) == 3.0  # a 16-bit loss comes back in float32, as scaled
    unscaled = unit_tf_keras2.get_unscaled_gradients(grads)
    for given, returned in zip(grads, unscaled):
        assert returned.dtype == given.dtype
        np.testing.assert_array_equal(
            tf.bitcast(returned, tf.int16 if dtype == "bfloat16" else tf.int32),
            tf.bitcast(given, tf.int16 if dtype == "bfloat16" else tf.int32),
        )
    # ...and the step with a NaN is still skipped, the weight untouched.
    var = keras.Variable([1.0, 2.0, 3.0])
    unit.build([var])
    step = lambda g: unit.apply(g, [var])  # noqa: E731
    assert not {"Mul", "RealDiv"} & set(_op_types(step, [tf.constant([1.0, 2.0, 3.0])]))
    step([tf.constant([1.0, np.nan, 1.0])])
    assert int(unit.skipped_steps) == 1 and var.numpy().tolist() == [1.0, 2.0, 3.0]
