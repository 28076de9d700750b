"""Loss scaling on real data: float16 gradients flush to zero without it.

The model is a small CNN, trained briefly in float32 on the embedded
digits. Its weights are then copied into a mixed_float16 twin. We compare the
activation gradients (the quantity Micikevicius et al. measured) of one
batch: a value counts as flushed when the float32 reference is non-zero but
the float16 gradient is exactly zero.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfmp
from tfmp.models.small_cnn import build_small_cnn

_TAPS = ("conv1", "pool1", "conv2", "pool2", "hidden", "logits")


def _activation_gradients(model, x, y, optimizer=None):
    tapped = keras.Model(model.inputs, [model.get_layer(n).output for n in _TAPS] + [model.output])
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    with tf.GradientTape() as tape:
        outputs = tapped([x], training=True)
        loss = loss_fn(y, outputs[-1])
        if optimizer is not None:
            loss = optimizer.get_scaled_loss(loss)
    grads = tape.gradient(loss, outputs[:-1])
    if optimizer is not None:
        # Unscale in float32, where the small values are representable.
        grads = optimizer.get_unscaled_gradients([tf.cast(g, tf.float32) for g in grads])
    return [tf.cast(g, tf.float64).numpy() for g in grads]


def _flushed_fraction(reference, candidate):
    nonzero = sum(int((r != 0).sum()) for r in reference)
    flushed = sum(int(((r != 0) & (c == 0)).sum()) for r, c in zip(reference, candidate))
    return flushed / nonzero


@pytest.fixture(scope="module")
def trained_weights(digits):
    keras.utils.set_random_seed(0)
    model = build_small_cnn(width=8)
    model.compile(keras.optimizers.Adam(2e-3), "sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(digits.x_train, digits.y_train, batch_size=64, epochs=3, verbose=0)
    _, accuracy = model.evaluate(digits.x_val, digits.y_val, verbose=0)
    assert accuracy > 0.85  # a real, trained model
    return model.get_weights()


def test_float16_gradients_flush_without_loss_scaling_and_not_with_it(digits, trained_weights, record_property):
    x, y = digits.x_train[:256], digits.y_train[:256]
    reference_model = build_small_cnn(width=8)
    reference_model.set_weights(trained_weights)
    reference = _activation_gradients(reference_model, x, y)
    with tfmp.precision_scope("mixed_float16"):
        half_model = build_small_cnn(width=8)
    half_model.set_weights(trained_weights)
    assert half_model.get_layer("conv1").compute_dtype == "float16"

    unscaled = _activation_gradients(half_model, x, y)
    optimizer = tfmp.wrap_optimizer(keras.optimizers.Adam(), "mixed_float16", "dynamic")
    scaled = _activation_gradients(half_model, x, y, optimizer=optimizer)

    below = sum(int(((np.abs(r) < 2.0**-24) & (r != 0)).sum()) for r in reference)
    below /= sum(int((r != 0).sum()) for r in reference)
    flushed_unscaled = _flushed_fraction(reference, unscaled)
    flushed_scaled = _flushed_fraction(reference, scaled)
    record_property("reference_below_2**-24", below)
    record_property("flushed_without_scaling", flushed_unscaled)
    record_property("flushed_with_dynamic_scaling", flushed_scaled)
    print(
        f"float32 activation gradients below 2**-24: {below:.2%}; flushed in float16 "
        f"without scaling: {flushed_unscaled:.2%}; with scale {float(optimizer.loss_scale):.0f}: "
        f"{flushed_scaled:.3%}"
    )
    assert below > 0.01
    assert flushed_unscaled > 0.01
    assert flushed_scaled < 0.002
    assert flushed_scaled * 10 < flushed_unscaled
