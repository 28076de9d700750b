"""Tests for tfmp/precision.py."""

import logging

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfmp
from tfmp import precision


@pytest.mark.parametrize(
    "name, expected",
    [
        ("float32", "float32"),
        ("mixed_float16", "mixed_float16"),
        ("mixed_bfloat16", "mixed_bfloat16"),
        ("auto", "auto"),
        ("fp32", "float32"),
        ("fp16", "mixed_float16"),
        ("bf16", "mixed_bfloat16"),
        ("  BF16 ", "mixed_bfloat16"),
    ],
)
def test_canonical_names_and_aliases(name, expected):
    assert precision.canonical_precision(name) == expected


def test_unknown_name_lists_valid_names_and_value():
    with pytest.raises(ValueError) as info:
        precision.canonical_precision("float8")
    message = str(info.value)
    assert "precision='float8'" in message
    for valid in ("float32", "mixed_float16", "mixed_bfloat16", "auto", "fp32", "fp16", "bf16"):
        assert valid in message


@pytest.mark.parametrize(
    "capabilities, expected",
    [
        ([], "float32"),
        ([(9, 0)], "mixed_bfloat16"),
        ([(8, 0)], "mixed_bfloat16"),
        ([(8, 6)], "mixed_bfloat16"),
        ([(7, 0)], "mixed_float16"),
        ([(7, 5)], "mixed_float16"),
        ([(6, 0)], "float32"),
        ([(8, 0), (7, 0)], "mixed_float16"),  # the oldest GPU decides
    ],
)
def test_choose_precision_from_compute_capability(capabilities, expected):
    chosen, reason = precision.choose_precision(capabilities)
    assert chosen == expected
    assert reason


@pytest.mark.parametrize(
    "capabilities, expected, words",
    [([], "float32", "no GPU"), ([(9, 0)], "mixed_bfloat16", "9.0"), ([(7, 5)], "mixed_float16", "7.5")],
)
def test_auto_resolves_by_the_rule_and_logs_one_line(capabilities, expected, words, caplog):
    with caplog.at_level(logging.INFO, logger="tfmp.precision"):
        assert precision.resolve_precision("auto", compute_capabilities=capabilities) == expected
    lines = [r.getMessage() for r in caplog.records if r.name == "tfmp.precision"]
    assert len(lines) == 1
    assert expected in lines[0] and words in lines[0]


def test_auto_on_this_machine_follows_its_gpus():
    # Holds with or without a GPU: the visible GPUs are what the rule is given.
    capabilities = precision.gpu_compute_capabilities()
    assert capabilities == [capability for _, capability in precision.visible_gpus()]
    assert len(capabilities) <= len(tf.config.list_physical_devices("GPU"))
    assert precision.resolve_precision("auto") == precision.choose_precision(capabilities)[0]


def test_set_precision_sets_the_global_policy():
    previous = keras.config.dtype_policy()
    try:
        assert tfmp.set_precision("bf16") == "mixed_bfloat16"
        assert keras.config.dtype_policy().name == "mixed_bfloat16"
        layer = keras.layers.Dense(2)
        assert layer.compute_dtype == "bfloat16" and layer.variable_dtype == "float32"
    finally:
        keras.config.set_dtype_policy(previous)


def test_scope_restores_previous_policy_and_layers_keep_theirs():
    before = keras.config.dtype_policy().name
    with tfmp.precision_scope("fp16") as name:
        assert name == "mixed_float16"
        inner = keras.layers.Dense(2)
        with tfmp.precision_scope("mixed_bfloat16"):
            assert keras.config.dtype_policy().name == "mixed_bfloat16"
        assert keras.config.dtype_policy().name == "mixed_float16"
    assert keras.config.dtype_policy().name == before
    assert inner.compute_dtype == "float16"
    assert keras.layers.Dense(2).compute_dtype == "float32"


def test_scope_restores_policy_on_error():
    before = keras.config.dtype_policy().name
    with pytest.raises(RuntimeError):
        with tfmp.precision_scope("mixed_float16"):
            raise RuntimeError("boom")
    assert keras.config.dtype_policy().name == before


def test_scope_rejects_unknown_name_without_changing_policy():
    before = keras.config.dtype_policy().name
    with pytest.raises(ValueError, match="half"):
        with tfmp.precision_scope("half"):
            pass
    assert keras.config.dtype_policy().name == before


def test_tf32_switch_and_scope():
    original = tf.config.experimental.tensor_float_32_execution_enabled()
    with tfmp.tf32_scope(not original):
        assert tf.config.experimental.tensor_float_32_execution_enabled() == (not original)
    assert tf.config.experimental.tensor_float_32_execution_enabled() == original
    previous = tfmp.set_tf32(False)
    try:
        assert previous == original
        assert not tf.config.experimental.tensor_float_32_execution_enabled()
    finally:
        tfmp.set_tf32(original)


@pytest.mark.parametrize(
    "setting, has_gpu, expected",
    [
        ("auto", True, True),
        ("auto", False, False),
        ("true", False, True),
        ("false", True, False),
        ("TRUE", False, True),
        (True, False, True),
        (False, True, False),
    ],
)
def test_resolve_jit_compile(setting, has_gpu, expected):
    assert precision.resolve_jit_compile(setting, has_gpu=has_gpu) is expected


def test_resolve_jit_compile_auto_detects_cpu():
    assert precision.resolve_jit_compile("auto") is False


def test_resolve_jit_compile_rejects_unknown():
    with pytest.raises(ValueError, match="xla='maybe'"):
        precision.resolve_jit_compile("maybe")


def _mixed_mlp():
    with precision.precision_scope("mixed_bfloat16"):
        inputs = keras.Input((4,))
        x = keras.layers.Dense(8, name="dense_a")(inputs)
        x = keras.layers.BatchNormalization(name="block_bn")(x)
        x = keras.layers.Dense(8, name="dense_b")(x)
        return keras.Model(inputs, keras.layers.Activation("softmax", dtype="float32", name="out")(x), name="mlp")


def test_keep_float32_sets_per_layer_policies_on_matching_paths():
    model = _mixed_mlp()
    kept = precision.keep_float32([model], r"_bn$|dense_b")
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
    with pytest.raises(ValueError, match=r"Received: '\('"):
        precision.keep_float32([model], "(")
    with pytest.raises(ValueError, match=r"such as mlp/.*Received: 'conv'"):
        precision.keep_float32([model], "conv")
    assert model.get_layer("dense_a").compute_dtype == "bfloat16"


def test_resolve_float32_layers_auto_applies_the_model_default_only_for_bfloat16_on_cpu():
    resolve = precision.resolve_float32_layers
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
    copy = precision.float32_copy(model)
    assert copy.name == "res"
    assert [layer.name for layer in copy.layers[1:]] == ["hidden", "logits", "probs"]
    assert {layer.compute_dtype for _, layer in precision.layer_paths(copy)} == {"float32"}
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
    copy = precision.float32_copy(model)
    layers = precision.layer_paths(copy)
    dtypes = {path: layer.compute_dtype for path, layer in layers if not isinstance(layer, keras.layers.InputLayer)}
    assert dtypes == {"outer/inner/inner_dense": "float32", "outer/merge": "float32", "outer/head": "float32"}
    assert copy(np.ones((2, 4), "float32")).dtype == tf.float32


def test_float32_copy_reaches_the_layer_a_wrapper_rebuilds():
    # TimeDistributed rebuilds its Dense from a config that still says mixed_float16.
    with precision.precision_scope("mixed_float16"):
        inputs = keras.Input((3, 4))
        outputs = keras.layers.TimeDistributed(keras.layers.Dense(8, name="step"), name="each")(inputs)
        model = keras.Model(inputs, outputs, name="td")
    copy = precision.float32_copy(model)
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
        precision.float32_copy(subclassed)

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
        precision.float32_copy(model)
