"""Tests for tfmp/run/diagnostics/alignment.py: Tensor Core alignment, on the tutorial's models and on
tiny models whose answers are known exactly."""

import keras
import numpy as np
import pytest

import tfmp
from tfmp import trainers
from tfmp.models.gan import build_discriminator, build_generator
from tfmp.run import diagnostics

_SEED_BAD_SIZES_WARNINGS = {
    ("(batch)", "batch size", 4090, 4088),
    ("generator/dense", "units", 3087, 3088),
    ("generator/conv_1", "filters", 63, 64),
    ("generator/conv_1", "input channels", 63, 64),
    ("generator/conv_2", "filters", 31, 32),
    ("generator/conv_2", "input channels", 63, 64),
    ("generator/conv_3", "filters", 7, 8),
    ("generator/conv_3", "input channels", 31, 32),
    ("generator/conv_final", "input channels", 7, 8),
}


def _warnings(report):
    return {(f.layer, f.dimension, f.value, f.aligned) for f in report.warnings}


@pytest.mark.parametrize("precision", ["mixed_float16", "mixed_bfloat16"])
def test_seed_bad_sizes_generator_is_flagged_layer_by_layer(precision):
    with tfmp.precision_scope(precision):
        generator = build_generator(widths=(63, 31, 7))
    report = diagnostics.tensor_core_report(generator, batch_size=4090)
    lines = [str(report)]  # its table, as printed
    assert _warnings(report) == _SEED_BAD_SIZES_WARNINGS
    # The data's 100 noise values and the 1-channel image are info, with the reason.
    infos = {(f.layer, f.dimension, f.value, f.reason) for f in report.findings if f.severity == "info"}
    assert infos == {
        ("generator/dense", "input features", 100, "set by the model input"),
        ("generator/conv_final", "filters", 1, "set by the model output"),
    }
    printed = "\n".join(lines)
    assert "generator/conv_2" in printed and "4090" in printed and "9 warning(s)" in printed
    # What misalignment costs today, not the tutorial's 2021 slowdown.
    assert printed.endswith(f"\n  {diagnostics.MISALIGNMENT_COST}") and "about 2% slower" in printed
    assert "H100 with current cuDNN" in printed
    # Said in words a user who never read the tutorials' numbering follows.
    assert "the original tutorial's GAN" in printed and "seed" not in printed


def test_seed_original_gan_has_no_warnings():
    with tfmp.precision_scope("mixed_float16"):
        trainer = trainers.GANTrainer(build_generator(), build_discriminator())
    report = diagnostics.tensor_core_report(trainer, batch_size=4096)
    assert report.warnings == [] and diagnostics.MISALIGNMENT_COST not in str(report)
    assert {(f.layer, f.dimension) for f in report.findings} == {
        ("generator/dense", "input features"),
        ("generator/conv_final", "filters"),
        ("discriminator/conv_1", "input channels"),
        ("discriminator/logits", "units"),
    }


def test_alignment_covers_rnn_transpose_separable_and_nested_models():
    inner = keras.Sequential([keras.Input((6, 6, 12)), keras.layers.Conv2DTranspose(12, 3, name="up")], name="inner")
    images = keras.Input((6, 6, 3))
    x = keras.layers.Rescaling(1 / 255)(images)  # weightless: the 3 channels are still the data's
    x = keras.layers.Conv2D(12, 3, padding="same", name="stem")(x)
    x = keras.layers.DepthwiseConv2D(3, padding="same", name="depthwise")(x)  # not a GEMM: ignored
    x = inner(x)
    x = keras.layers.SeparableConv2D(20, 3, name="separable")(x)
    x = keras.layers.Reshape((-1, 20))(x)
    x = keras.layers.LSTM(30, name="lstm")(x)
    outputs = keras.layers.Dense(3, name="head")(x)
    model = keras.Model(images, outputs, name="m")
    report = diagnostics.tensor_core_report(model, batch_size=16)
    found = {(f.severity, f.layer, f.dimension, f.value) for f in report.findings}
    assert found == {
        ("info", "m/stem", "input channels", 3),
        ("warn", "m/stem", "filters", 12),
        ("warn", "m/inner/up", "filters", 12),
        ("warn", "m/inner/up", "input channels", 12),
        ("warn", "m/separable", "pointwise input channels", 12),
        ("warn", "m/separable", "filters", 20),
        ("warn", "m/lstm", "input features", 20),
        ("warn", "m/lstm", "units", 30),
        ("warn", "m/head", "input features", 30),
        ("info", "m/head", "units", 3),
    }
    assert {(f.layer, f.aligned) for f in report.findings if f.value == 30} == {("m/lstm", 32), ("m/head", 32)}


def test_alignment_of_subclassed_model_assumes_first_input_and_last_output():
    class Mlp(keras.Model):
        def __init__(self):
            super().__init__(name="mlp")
            self.hidden = keras.layers.Dense(30, name="hidden")
            self.out = keras.layers.Dense(1, name="out")

        def call(self, x):
            return self.out(self.hidden(x))

    model = Mlp()
    model(np.zeros((2, 5), "float32"))
    report = diagnostics.tensor_core_report(model)
    assert {(f.severity, f.layer, f.dimension) for f in report.findings} == {
        ("info", "mlp/hidden", "input features"),
        ("warn", "mlp/hidden", "units"),
        ("warn", "mlp/out", "input features"),
        ("info", "mlp/out", "units"),
    }


def test_alignment_bad_arguments_name_the_value():
    with pytest.raises(ValueError, match="multiple=0"):
        diagnostics.tensor_core_report(build_discriminator(), multiple=0)
    with pytest.raises(ValueError, match="unbuilt model: 'lazy'"):
        diagnostics.tensor_core_report(keras.Sequential([keras.layers.Dense(3)], name="lazy"))
    with pytest.raises(TypeError, match="Received: str"):
        diagnostics.tensor_core_report("generator")


def _attention_model(num_heads, key_dim, features, **kwargs):
    with tfmp.precision_scope("mixed_float16"):
        tokens = keras.Input((4, features))
        attended = keras.layers.MultiHeadAttention(num_heads, key_dim, name="mha", **kwargs)(tokens, tokens)
        hidden = keras.layers.Dense(63, name="hidden")(attended)  # truly misaligned
        return keras.Model(tokens, keras.layers.Dense(8, name="head")(hidden), name="t")


def test_attention_is_checked_on_heads_times_key_dim_not_on_the_head_count():
    # 2 heads x 16 = 32 values per projection: aligned, although 2 is not a multiple of 8.
    report = diagnostics.tensor_core_report(_attention_model(2, 16, 32), batch_size=8)
    assert _warnings(report) == {("t/hidden", "units", 63, 64), ("t/head", "input features", 63, 64)}
    assert not [f for f in report.findings if f.layer.startswith("t/mha")]


def test_misaligned_attention_names_its_arguments():
    model = _attention_model(3, 10, 30, value_dim=12, output_shape=20)
    report = diagnostics.tensor_core_report(model)
    found = {(f.severity, f.layer, f.dimension, f.value, f.aligned) for f in report.findings}
    assert {f for f in found if f[1] == "t/mha"} == {
        ("info", "t/mha", "query/key/value input features", 30, 32),
        ("warn", "t/mha", "heads x key_dim", 30, 32),
        ("warn", "t/mha", "heads x value_dim", 36, 40),
        ("warn", "t/mha", "key_dim (per head)", 10, 8),
        ("warn", "t/mha", "value_dim (per head)", 12, 16),
        ("warn", "t/mha", "output features", 20, 24),
    }
    assert ("warn", "t/hidden", "units", 63, 64) in found


def test_a_residual_add_passes_on_the_input_width():
    # `x + inputs` is as wide as the inputs: the next layer's 12 input features are the data's.
    with tfmp.precision_scope("mixed_float16"):
        inputs = keras.Input((12,))
        x = keras.layers.Dense(12, name="block")(inputs) + inputs
        x = keras.layers.Dense(63, name="wide")(x)
        model = keras.Model(inputs, keras.layers.Dense(3, name="head")(x), name="res")
    report = diagnostics.tensor_core_report(model)
    assert {(f.severity, f.layer, f.dimension, f.value) for f in report.findings} == {
        ("info", "res/block", "input features", 12),
        ("warn", "res/block", "units", 12),
        ("info", "res/wide", "input features", 12),
        ("warn", "res/wide", "units", 63),
        ("warn", "res/head", "input features", 63),
        ("info", "res/head", "units", 3),
    }


def test_einsum_dense_is_checked_on_its_contracted_and_produced_sizes():
    with tfmp.precision_scope("mixed_bfloat16"):
        tokens = keras.Input((4, 16))
        # kernel (16, 2, 12): contracts 16 features into 2 x 12 = 24 values.
        x = keras.layers.EinsumDense("abc,cde->abde", output_shape=(None, 2, 12), name="split")(tokens)
        x = keras.layers.Reshape((4, 24))(x)
        model = keras.Model(tokens, keras.layers.Dense(8, name="head")(x), name="e")
    assert diagnostics.tensor_core_report(model).findings == []


def test_a_frozen_layer_does_not_pass_on_the_input_width():
    with tfmp.precision_scope("mixed_float16"):
        inputs = keras.Input((3,))
        frozen = keras.layers.Dense(12, name="frozen", trainable=False)
        x = keras.layers.Dense(63, name="wide")(frozen(inputs))
        model = keras.Model(inputs, keras.layers.Dense(3, name="head")(x), name="f")
    found = {(f.severity, f.layer, f.dimension) for f in diagnostics.tensor_core_report(model).findings}
    assert ("warn", "f/wide", "input features") in found  # 12 is the frozen layer's choice, not the data's


def test_tfmp_0_1s_print_fn_still_prints_the_report_with_a_deprecation_warning():
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(5)])
    lines = []
    with pytest.warns(
        DeprecationWarning, match=r"`tensor_core_report\(print_fn\)` is deprecated and will be removed in tfmp 0\.3"
    ):
        report = diagnostics.tensor_core_report(model, 8, 8, lines.append)
    assert lines == [str(report)]
    with pytest.warns(DeprecationWarning):
        assert str(diagnostics.tensor_core_report(model, 8, print_fn=None)) == str(report)  # None: quiet, as in 0.1
