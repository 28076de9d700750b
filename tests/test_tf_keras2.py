"""Tests for tfmp/tf_keras2.py: tf.keras 2's LossScaleOptimizer, its contract and its refusals.

The updates against tf_keras 2.21 itself, bit for bit, are in tests/test_loss_scale_tf_keras.py.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfmp
from tfmp import mixed_precision


def _sgd(**kwargs):
    return mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(1.0), **kwargs)


def test_it_is_tfmps_optimizer_with_tf_keras_2s_contract():
    opt = _sgd(hysteresis=2, max_scale=2.0**20)
    assert isinstance(opt, tfmp.LossScaleOptimizer) and isinstance(opt, keras.optimizers.LossScaleOptimizer)
    assert type(opt) is not tfmp.LossScaleOptimizer
    # Its update applies what it is given: the step unscaled the gradients itself.
    var = keras.Variable([0.0])
    opt.apply_gradients(zip([tf.constant([3.0])], [var]))
    assert var.numpy().tolist() == [-3.0]
    opt.apply([tf.constant([1.0])], [var])
    assert var.numpy().tolist() == [-4.0]


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_scale_loss_is_refused_before_any_update(mode):
    opt = _sgd()
    var = keras.Variable([1.0])

    def step():
        with tf.GradientTape() as tape:
            scaled = opt.scale_loss(tf.reduce_sum(var * 3.0))
        opt.apply_gradients(zip(tape.gradient(scaled, [var]), [var]))

    with pytest.raises(TypeError) as info:
        (tf.function(step) if mode == "function" else step)()
    message = str(info.value)
    assert f"LossScaleOptimizer {opt.name!r} is tf.keras 2's class" in message
    assert "scale_loss() result (Keras 3's API) would be applied the loss scale times too large" in message
    assert "Use get_scaled_loss() and get_unscaled_gradients(), as tf.keras 2 does" in message
    assert "construct tfmp.LossScaleOptimizer, Keras 3's class, for scale_loss() and Keras's own fit()" in message
    assert var.numpy().tolist() == [1.0] and int(opt.iterations) == 0


def test_keras_fit_with_it_is_refused_naming_keras_3s_class():
    # Keras's own train_step calls scale_loss(), then apply_gradients(): it needs the class that divides.
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(_sgd(), loss="mse")
    with pytest.raises(TypeError, match="Keras's own fit"):
        model.fit(np.ones((4, 2), np.float32), np.ones((4, 1), np.float32), verbose=0)


def test_get_scaled_loss_accepts_callable():
    opt = _sgd(initial_scale=16)
    scaled = opt.get_scaled_loss(lambda: tf.constant(0.5))
    assert callable(scaled) and float(scaled()) == 8.0
    assert float(opt.get_scaled_loss(tf.constant(0.5))) == 8.0


def test_float16_gradients_unscale_by_scales_beyond_float16_range():
    opt = _sgd(initial_scale=2.0**20)
    g16 = tf.constant([2.0**-4], tf.float16)  # a float16 gradient at scale 2**20
    (out,) = opt.get_unscaled_gradients([g16])
    assert out.dtype == tf.float16 and float(out[0]) == 2.0**-24


def test_get_unscaled_gradients_passes_none_and_indexed_slices():
    opt = _sgd(initial_scale=1024)
    sparse = tf.IndexedSlices(tf.constant([[1024.0, 2048.0]]), tf.constant([1]), tf.constant([3, 2]))
    out = opt.get_unscaled_gradients([None, sparse, tf.constant([512.0])])
    assert out[0] is None
    assert isinstance(out[1], tf.IndexedSlices)
    np.testing.assert_array_equal(out[1].values.numpy(), [[1.0, 2.0]])
    np.testing.assert_array_equal(out[1].indices.numpy(), [1])
    np.testing.assert_array_equal(out[2].numpy(), [0.5])


def test_a_non_finite_step_is_skipped_whole_and_the_scale_backs_off():
    opt = _sgd(initial_scale=8)
    var = keras.Variable([1.0, 2.0])
    opt.apply_gradients(zip([tf.constant([1.0, np.inf])], [var]))
    assert var.numpy().tolist() == [1.0, 2.0]
    assert (int(opt.skipped_steps), float(opt.loss_scale)) == (1, 4.0)


def test_get_config_round_trip_keeps_the_class_and_its_settings():
    opt = _sgd(initial_scale=64, hysteresis=3, xla_update=False)
    config = keras.saving.serialize_keras_object(opt)
    assert config["registered_name"] == "tfmp>TFKeras2LossScaleOptimizer"
    again = keras.saving.deserialize_keras_object(config)
    assert type(again) is mixed_precision.LossScaleOptimizer
    assert (again.initial_scale, again.hysteresis, again.xla_update) == (64.0, 3, False)
