"""Tests of tfmp.float32_layers: layer paths, layers kept in float32, and the float32 copy."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfmp import float32_layers, precision


def _mixed_mlp():
    with precision.precision_scope("mixed_bfloat16"):
        inputs = keras.Input((4,))
        x = keras.layers.Dense(8, name="dense_a")(inputs)
        x = keras.layers.BatchNormalization(name="block_bn")(x)
        x = keras.layers.Dense(8, name="dense_b")(x)
        return keras.Model(inputs, keras.layers.Activation("softmax", dtype="float32", name="out")(x), name="mlp")


def test_keep_float32_sets_per_layer_policies_on_matching_paths():
    model = _mixed_mlp()
    kept = float32_layers.keep_float32([model], r"_bn$|dense_b")
    assert kept == ["mlp/block_bn", "mlp/dense_b"]
    dtypes = {layer.name: layer.compute_dtype for layer in model.layers[1:]}
    assert dtypes == {"dense_a": "bfloat16", "block_bn": "float32", "dense_b": "float32", "out": "float32"}
    # The layer really computes in float32 now; the others still in bfloat16.
    x = tf.ones((2, 4))
    assert model.get_layer("dense_a")(x).dtype == tf.bfloat16
    assert model.get_layer("dense_b")(tf.ones((2, 8), tf.bfloat16)).dtype == tf.float32
    assert model(x).dtype == tf.float32


def test_keep_float32_refuses_bad_or_unmatched_patterns():
    model = _mixed_mlp()
    with pytest.raises(ValueError, match=r"not a valid regular expression .*Received: float32_layers='\('"):
        float32_layers.keep_float32([model], "(")
    with pytest.raises(ValueError, match=r"such as mlp/.*Received: 'conv'"):
        float32_layers.keep_float32([model], "conv")
    assert model.get_layer("dense_a").compute_dtype == "bfloat16"


def test_resolve_float32_layers_auto_applies_the_model_default_only_for_bfloat16_on_cpu():
    resolve = float32_layers.resolve_float32_layers
    assert resolve("auto", "mixed_bfloat16", "_depthwise$", has_gpu=False) == "_depthwise$"
    assert resolve("auto", "bf16", "_depthwise$", has_gpu=True) == ""  # cuDNN has the kernels
    assert resolve("auto", "float32", "_depthwise$", has_gpu=False) == ""
    assert resolve("auto", "mixed_float16", "_depthwise$", has_gpu=False) == ""
    assert resolve("auto", "mixed_bfloat16", "", has_gpu=False) == ""  # the model has no advice
    # The user's explicit setting wins.
    assert resolve("_BN$", "mixed_bfloat16", "_depthwise$", has_gpu=False) == "_BN$"
    assert resolve("none", "mixed_bfloat16", "_depthwise$", has_gpu=False) == ""
    assert resolve("", "mixed_bfloat16", "_depthwise$", has_gpu=False) == ""


def _residual_model():
    """A functional model with `+`: its `Add` is an operation, not a layer."""
    inputs = keras.Input((8,))
    hidden = keras.layers.Dense(8, name="hidden")(inputs)
    logits = keras.layers.Dense(4, name="logits")(hidden + inputs)
    return keras.Model(inputs, keras.layers.Activation("softmax", dtype="float32", name="probs")(logits), name="res")


def test_float32_copy_sets_dtype_on_layers_only_and_keeps_the_weights():
    keras.utils.set_random_seed(3)
    with precision.precision_scope("mixed_float16"):
        model = _residual_model()
    reference = _residual_model()  # the same model built in float32
    reference.set_weights(model.get_weights())
    copy = float32_layers.float32_copy(model)
    assert copy.name == "res"
    assert [layer.name for layer in copy.layers[1:]] == ["hidden", "logits", "probs"]
    assert {layer.compute_dtype for _, layer in float32_layers.layer_paths(copy)} == {"float32"}
    assert model.get_layer("hidden").compute_dtype == "float16"  # the original is untouched
    for original, copied in zip(model.get_weights(), copy.get_weights()):
        np.testing.assert_array_equal(original, copied)
    x = np.linspace(-2.0, 2.0, 24, dtype="float32").reshape(3, 8)
    np.testing.assert_allclose(copy(x), reference(x), rtol=1e-6, atol=1e-7)


def test_float32_copy_of_nested_models_and_concatenate():
    with precision.precision_scope("mixed_bfloat16"):
        inner = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4, name="inner_dense")], name="inner")
        inputs = keras.Input((4,))
        merged = keras.layers.Concatenate(name="merge")([inner(inputs), inputs])
        model = keras.Model(inputs, keras.layers.Dense(2, name="head")(merged), name="outer")
    copy = float32_layers.float32_copy(model)
    layers = float32_layers.layer_paths(copy)
    dtypes = {path: layer.compute_dtype for path, layer in layers if not isinstance(layer, keras.layers.InputLayer)}
    assert dtypes == {"outer/inner/inner_dense": "float32", "outer/merge": "float32", "outer/head": "float32"}
    assert copy(np.ones((2, 4), "float32")).dtype == tf.float32


def test_float32_copy_reaches_the_layer_a_wrapper_rebuilds():
    # TimeDistributed rebuilds its Dense from a config that still says mixed_float16.
    with precision.precision_scope("mixed_float16"):
        inputs = keras.Input((3, 4))
        outputs = keras.layers.TimeDistributed(keras.layers.Dense(8, name="step"), name="each")(inputs)
        model = keras.Model(inputs, outputs, name="td")
    copy = float32_layers.float32_copy(model)
    assert copy.get_layer("each").layer.compute_dtype == "float32"
    assert copy(np.ones((2, 3, 4), "float32")).dtype == tf.float32


def test_float32_copy_of_an_uncloneable_model_names_it():
    class Subclassed(keras.Model):
        def __init__(self):
            super().__init__(name="subclassed")
            self.dense = keras.layers.Dense(2)

        def call(self, x):
            return self.dense(x)

    subclassed = Subclassed()
    subclassed(np.zeros((1, 3), "float32"))
    with pytest.raises(ValueError, match=r"functional or sequential.*Received: model='subclassed'"):
        float32_layers.float32_copy(subclassed)

    class NoConfig(keras.layers.Layer):  # its __init__ takes no `name`/`dtype`: from_config cannot call it
        def __init__(self, units):
            super().__init__(name="no_config")
            self.units = units

        def call(self, x):
            return x[..., : self.units]

    inputs = keras.Input((4,))
    model = keras.Model(inputs, NoConfig(2)(inputs), name="custom")
    message = r"(?s)layer 'no_config' \(NoConfig\) cannot be rebuilt from its config.*Received: model='custom'"
    with pytest.raises(ValueError, match=message):
        float32_layers.float32_copy(model)
