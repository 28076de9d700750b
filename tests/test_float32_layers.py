"""Tests of tfmp.float32_layers: layer paths, layers kept in float32, the float32 copy, and the output check."""

import warnings

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


# -- the output check --------------------------------------------------------------------------

OUTPUT_FIX = (
    "give the model's last layer dtype='float32', or end it with keras.layers.Activation('linear', dtype='float32')"
)


class Holder(keras.Model):
    """A subclassed model that holds its networks as attributes, as a keras-io GAN does."""

    def __init__(self, generator, discriminator):
        super().__init__(name="holder")
        self.generator = generator
        self.discriminator = discriminator

    def call(self, noise):
        return self.discriminator(self.generator(noise))


def _networks(generator_dtype):
    with precision.precision_scope("mixed_float16"):
        generator = keras.Sequential(
            [keras.Input((2,)), keras.layers.Dense(4, dtype=generator_dtype, name="image")], name="generator"
        )
        discriminator = keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(1, dtype="float32", name="logit")], name="discriminator"
        )
    return generator, discriminator


def test_check_outputs_names_a_float16_output_of_a_held_sub_model_and_passes_a_float32_one():
    holder = Holder(*_networks(generator_dtype=None))  # the generator's last Dense follows mixed_float16
    with pytest.warns(RuntimeWarning) as caught:
        findings = float32_layers.check_outputs(holder)
    assert findings == [float32_layers.OutputFinding("generator output 0", "model output", "float16", OUTPUT_FIX)]
    (message,) = [str(w.message) for w in caught]
    assert message.startswith("Model 'holder': what should stay float32 is computed in 16 bits. A float16 output")
    assert message.endswith(f"\n  generator output 0: model output in float16; fix: {OUTPUT_FIX}")
    assert caught[0].filename == __file__  # the warning points at the caller
    # The networks named too: the same finding, once, and the message names each model.
    with pytest.warns(RuntimeWarning, match=r"^Models 'generator', 'discriminator', 'holder': "):
        assert float32_layers.check_outputs(holder.generator, holder.discriminator, holder) == findings
    # Fixed as the message says: nothing found, nothing said.
    fixed = Holder(*_networks(generator_dtype="float32"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert float32_layers.check_outputs(fixed) == []
        assert float32_layers.check_outputs(_mixed_mlp()) == []  # float32 softmax head under mixed_bfloat16


def test_output_findings_of_a_subclassed_model_include_its_own_squashing_layers():
    class Classifier(keras.Model):
        def __init__(self):
            super().__init__(name="classifier")
            self.hidden = keras.layers.Dense(8, name="hidden")
            self.probs = keras.layers.Dense(3, activation="softmax", name="probs")

        def call(self, x):
            return self.probs(self.hidden(x))

    with precision.precision_scope("mixed_bfloat16"):
        model = Classifier()
    model(np.ones((1, 4), "float32"))
    (finding,) = float32_layers.output_findings(model)
    assert finding == float32_layers.OutputFinding(
        "classifier/probs", "softmax", "bfloat16", "give this layer dtype='float32'"
    )


def test_check_outputs_runs_in_ones_own_train_step_and_names_its_line():
    class GAN(Holder):
        def train_step(self, real):
            findings = float32_layers.check_outputs(self)  # the one call
            fake = keras.ops.cast(self.generator(keras.ops.ones((keras.ops.shape(real)[0], 2))), "float32")
            return {"findings": len(findings), "difference": keras.ops.mean(fake - real)}

    gan = GAN(*_networks(generator_dtype=None))
    gan.compile()
    real = tf.data.Dataset.from_tensor_slices(np.zeros((16, 4), "float32")).batch(8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = gan.fit(real, epochs=2, verbose=0)
    found = [w for w in caught if "should stay float32" in str(w.message)]
    assert len(found) == 1, [str(w.message) for w in found]  # once, when the step is traced
    assert found[0].filename == __file__ and "generator output 0: model output in float16" in str(found[0].message)
    assert history.history["findings"] == [1, 1]


def test_check_outputs_refuses_what_is_not_a_keras_model_naming_it():
    with pytest.raises(TypeError, match=r"takes Keras models or layers\. Received: str 'generator'"):
        float32_layers.check_outputs("generator")
