"""Tests for tfmp.run.diagnostics: the four reports, on the seed's models and on
tiny models whose answers are known exactly."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

import tfmp
from tfmp.models.gan import build_discriminator, build_generator
from tfmp.run import diagnostics
from tfmp import trainers

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


# -- Tensor Core alignment ---------------------------------------------------


@pytest.mark.parametrize("precision", ["mixed_float16", "mixed_bfloat16"])
def test_seed_bad_sizes_generator_is_flagged_layer_by_layer(precision):
    with tfmp.precision_scope(precision):
        generator = build_generator(widths=(63, 31, 7))
    lines = []
    report = diagnostics.tensor_core_report(generator, batch_size=4090, print_fn=lines.append)
    assert _warnings(report) == _SEED_BAD_SIZES_WARNINGS
    # The data's 100 noise values and the 1-channel image are info, with the reason.
    infos = {(f.layer, f.dimension, f.value, f.reason) for f in report.findings if f.severity == "info"}
    assert infos == {
        ("generator/dense", "input features", 100, "set by the model input"),
        ("generator/conv_final", "filters", 1, "set by the model output"),
    }
    printed = "\n".join(lines)
    assert "generator/conv_2" in printed and "4090" in printed and "9 warning(s)" in printed
    # What misalignment costs today, not the seed's 2021 slowdown.
    assert printed.endswith(f"\n  {diagnostics.MISALIGNMENT_COST}") and "about 2% slower" in printed
    assert "H100 with current cuDNN" in printed


def test_seed_original_gan_has_no_warnings():
    with tfmp.precision_scope("mixed_float16"):
        trainer = trainers.GANTrainer(build_generator(), build_discriminator())
    report = diagnostics.tensor_core_report(trainer, batch_size=4096, print_fn=None)
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
    report = diagnostics.tensor_core_report(model, batch_size=16, print_fn=None)
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
    report = diagnostics.tensor_core_report(model, print_fn=None)
    assert {(f.severity, f.layer, f.dimension) for f in report.findings} == {
        ("info", "mlp/hidden", "input features"),
        ("warn", "mlp/hidden", "units"),
        ("warn", "mlp/out", "input features"),
        ("info", "mlp/out", "units"),
    }


def test_alignment_bad_arguments_name_the_value():
    with pytest.raises(ValueError, match="multiple=0"):
        diagnostics.tensor_core_report(build_discriminator(), multiple=0, print_fn=None)
    with pytest.raises(ValueError, match="unbuilt model: 'lazy'"):
        diagnostics.tensor_core_report(keras.Sequential([keras.layers.Dense(3)], name="lazy"), print_fn=None)
    with pytest.raises(TypeError, match="Received: str"):
        diagnostics.tensor_core_report("generator", print_fn=None)


# -- float32 outputs ---------------------------------------------------------


def _classifier(final_dtype=None, activation="softmax"):
    inputs = keras.Input((4,))
    x = keras.layers.Dense(8, name="hidden")(inputs)
    if final_dtype is None:  # the pitfall: softmax inside the 16-bit Dense
        outputs = keras.layers.Dense(3, activation=activation, name="probs")(x)
    else:
        x = keras.layers.Dense(3, name="logits")(x)
        outputs = keras.layers.Activation(activation, dtype=final_dtype, name="probs")(x)
    return keras.Model(inputs, outputs, name="clf")


def test_low_precision_softmax_output_and_loss_are_flagged():
    with tfmp.precision_scope("mixed_bfloat16"):
        model = _classifier()
    report = diagnostics.float32_output_report(model, loss="sparse_categorical_crossentropy", print_fn=None)
    assert [(f.where, f.what, f.dtype) for f in report.findings] == [
        ("clf/probs", "softmax", "bfloat16"),
        ("clf output 0", "model output", "bfloat16"),
        ("clf output 0", "loss input (logits/probabilities)", "bfloat16"),
    ]
    assert "dtype='float32'" in str(report)


def test_float32_head_passes_and_sigmoid_is_checked_too():
    with tfmp.precision_scope("mixed_float16"):
        good = _classifier(final_dtype="float32")
        sigmoid = _classifier(activation="sigmoid")
    assert diagnostics.float32_output_report(good, loss="mse", print_fn=None).findings == []
    # Without a loss, only the layer and the output are flagged.
    whats = [f.what for f in diagnostics.float32_output_report(sigmoid, print_fn=None).findings]
    assert whats == ["sigmoid", "model output"]


def test_seed_gan_outputs_are_float32_under_every_policy():
    for precision in ("mixed_float16", "mixed_bfloat16"):
        with tfmp.precision_scope(precision):
            trainer = trainers.GANTrainer(build_generator(), build_discriminator())
        assert diagnostics.float32_output_report(trainer, print_fn=None).findings == []


def test_trainer_loss_on_low_precision_logits_is_flagged():
    with tfmp.precision_scope("mixed_float16"):
        images = keras.Input((28, 28, 1))
        logits = keras.layers.Dense(1, name="logits")(keras.layers.Flatten()(images))
        trainer = trainers.GANTrainer(build_generator(), keras.Model(images, logits, name="discriminator"))
    findings = diagnostics.float32_output_report(trainer, print_fn=None).findings
    assert [(f.where, f.what) for f in findings] == [
        ("discriminator output 0", "model output"),
        ("discriminator output 0", "loss input (logits/probabilities)"),
    ]


# -- gradient numerics -------------------------------------------------------


def _sum_model(values, precision="mixed_float16"):
    """y = sum(w * x) with w = 1: the kernel's gradient is x, exactly."""
    with tfmp.precision_scope(precision):
        inputs = keras.Input((len(values),))
        outputs = keras.layers.Dense(1, use_bias=False, kernel_initializer="ones", name="w")(inputs)
        outputs = keras.layers.Activation("linear", dtype="float32")(outputs)
        model = keras.Model(inputs, outputs, name="sum")
    x = np.array([values], np.float32)
    return model, (x, np.zeros((1, 1), np.float32))


def _sum_loss(y_true, y_pred):
    return ops.sum(y_pred, axis=-1)


def test_gradient_fractions_and_suggested_scale_are_exact():
    model, batch = _sum_model([2.0**-30, 2.0**-20, 2.0**-10, 1.0, 2.0**17])
    lines = []
    report = diagnostics.gradient_report(model, batch, loss=_sum_loss, loss_scale=2.0**10, print_fn=lines.append)
    (objective,) = report.objectives
    (kernel,) = objective.variables
    assert (kernel.name, kernel.count, kernel.max_abs, kernel.nonfinite) == ("w/kernel", 5, 2.0**17, 0)
    assert (kernel.underflow, kernel.subnormal, kernel.overflow) == (0.2, 0.2, 0.2)
    # x 2^10: 2^-20 is subnormal, nothing flushes, 2^27 overflows.
    assert (kernel.scaled_underflow, kernel.scaled_subnormal, kernel.scaled_overflow) == (0.0, 0.2, 0.2)
    # 2^17 * S * 8 <= 65504 -> S = 2^-5 (2^-4 would give exactly 65536 > 65504).
    assert objective.suggested_scale == 2.0**-5
    assert objective.margin == diagnostics.SCALE_MARGIN == 8
    printed = "\n".join(lines)
    assert "float32 copy" in printed and "2^-5" in printed and "x1024" in printed
    # Without a margin: 2^17 * 2^-1 = 65536 overflows, so 2^-2.
    report = diagnostics.gradient_report(model, batch, loss=_sum_loss, loss_scale=None, margin=1, print_fn=None)
    assert report.objectives[0].suggested_scale == 2.0**-2
    assert report.objectives[0].scaled is None


def test_gradient_fraction_boundaries_follow_float16():
    # 2^-25 flushes; 2^-24 is the smallest subnormal; 2^-14 and 65504 are normal; 0 is not "lost".
    model, batch = _sum_model([2.0**-25, 2.0**-24, 2.0**-14, 65504.0, 0.0], precision="float32")
    kernel = diagnostics.gradient_report(model, batch, loss=_sum_loss, loss_scale=None, print_fn=None).objectives[0].variables[0]
    assert (kernel.underflow, kernel.subnormal, kernel.overflow) == (0.2, 0.2, 0.0)
    # The histogram holds log2|g| of the non-zero values.
    np.testing.assert_array_equal(np.sort(kernel.log2_abs), np.log2([2.0**-25, 2.0**-24, 2.0**-14, 65504.0]).astype("float32"))


def test_gradients_come_from_a_float32_copy_and_state_is_untouched():
    # In float16 the gradient 2^-30 would be 0; the report still sees it.
    model, batch = _sum_model([2.0**-30, 1.0])
    assert model.layers[1].compute_dtype == "float16"
    kernel = diagnostics.gradient_report(model, batch, loss=_sum_loss, loss_scale=None, print_fn=None).objectives[0].variables[0]
    assert kernel.underflow == 0.5
    with pytest.raises(ValueError, match="loss=None"):
        diagnostics.gradient_report(model, batch, print_fn=None)
    with pytest.raises(ValueError, match="loss_scale=-1"):
        diagnostics.gradient_report(model, batch, loss=_sum_loss, loss_scale=-1, print_fn=None)
    with pytest.raises(ValueError, match="margin=0.5"):
        diagnostics.gradient_report(model, batch, loss=_sum_loss, margin=0.5, print_fn=None)


@pytest.fixture(scope="module")
def float16_gan():
    with tfmp.precision_scope("mixed_float16"):
        trainer = trainers.GANTrainer(build_generator(), build_discriminator(), seed=1)
        trainer.compile(loss_scale="dynamic")
    return trainer


def test_gan_report_has_both_objectives_at_the_current_scale(float16_gan, digits, tmp_path):
    images = digits.x_train[:32]
    before = [v.numpy() for v in float16_gan.variables]
    report = diagnostics.gradient_report(float16_gan, images, print_fn=None)
    assert [o.name for o in report.objectives] == ["generator", "discriminator"]
    assert [o.loss_scale for o in report.objectives] == [2.0**15, 2.0**15]
    generator = report.objectives[0]
    assert [v.name for v in generator.variables] == [v.path for v in float16_gan.generator.trainable_variables]
    assert all(v.count > 0 and v.nonfinite == 0 for v in generator.variables)
    assert generator.suggested_scale * generator.max_abs * 8 <= 65504 < generator.suggested_scale * 2 * generator.max_abs * 8
    # Nothing moved: weights, BatchNorm statistics, noise and dropout seeds.
    for old, new in zip(before, float16_gan.variables):
        np.testing.assert_array_equal(old, new.numpy())

    diagnostics.write_gradient_summaries(report, str(tmp_path), step=7)
    tags = set()
    for root, _, files in os.walk(tmp_path / "diagnostics"):
        for name in files:
            for event in tf.compat.v1.train.summary_iterator(os.path.join(root, name)):
                tags.update((v.tag, event.step) for v in event.summary.value)
    assert ("generator/underflow_fraction", 7) in tags
    assert ("discriminator/overflow_fraction_at_loss_scale", 7) in tags
    assert ("generator/log2_abs_grad", 7) in tags
    assert ("discriminator/log2_abs_grad/conv_1/kernel", 7) in tags


# -- first non-finite layer --------------------------------------------------


def _chain(precision, middle):
    with tfmp.precision_scope(precision):
        inputs = keras.Input((4,))
        x = keras.layers.Dense(4, name="first", kernel_initializer="identity")(inputs)
        x = middle(x)
        x = keras.layers.Dense(2, name="last")(x)
        outputs = keras.layers.Activation("softmax", dtype="float32", name="probs")(x)
        return keras.Model(inputs, outputs, name="chain")


_BATCH = (np.array([[1.0, -2.0, 3.0, -4.0], [0.5, 0.5, -0.5, 0.5]], np.float32), np.array([0, 1]))


@pytest.mark.parametrize("precision", ["float32", "mixed_bfloat16"])
def test_planted_nan_layer_is_the_first_nonfinite_one(precision):
    model = _chain(precision, keras.layers.Dense(4, name="planted"))
    kernel = model.get_layer("planted").kernel
    kernel.assign(tf.tensor_scatter_nd_update(kernel, [[0, 0]], [np.nan]))
    before = [w.copy() for w in model.get_weights()]
    report = diagnostics.first_nonfinite(model, _BATCH, loss="sparse_categorical_crossentropy")
    assert (report.layer, report.tensor, report.dtype, report.shape) == (
        "chain/planted", "output", model.get_layer("planted").compute_dtype, (2, 4))
    assert report.nan == 2 and report.inf == 0
    assert "chain/planted" in str(report) and "2 NaN" in str(report)
    for old, new in zip(before, model.get_weights()):
        np.testing.assert_array_equal(old, new)


def test_backward_only_nonfinite_names_the_layer_whose_gradient_broke():
    # sqrt(relu(x)) is finite forward, but its derivative at 0 is infinite.
    root = keras.layers.Lambda(lambda t: ops.sqrt(ops.relu(t)), name="root")
    report = diagnostics.first_nonfinite(_chain("float32", root), _BATCH, loss="sparse_categorical_crossentropy")
    assert (report.layer, report.tensor) == ("chain/root", "gradient w.r.t. input")


def test_nan_input_batch_and_finite_step():
    model = _chain("float32", keras.layers.Dense(4, name="middle"))
    bad = (np.array([[1.0, np.nan, np.inf, 0.0]], np.float32), np.array([0]))
    report = diagnostics.first_nonfinite(model, bad, loss="sparse_categorical_crossentropy")
    assert (report.layer, report.nan, report.inf) == ("(input batch)", 1, 1)
    ok = diagnostics.first_nonfinite(model, _BATCH, loss="sparse_categorical_crossentropy")
    assert not ok.found and "none" in str(ok)


def test_float16_overflow_at_the_loss_scale_is_located(float16_gan, digits):
    images = digits.x_train[:8]
    assert not diagnostics.first_nonfinite(float16_gan, images).found
    # A scale no float16 gradient survives: the report names where it overflowed.
    report = diagnostics.first_nonfinite(float16_gan, images, loss_scale=2.0**40)
    assert report.found and report.objective == "generator" and report.loss_scale == 2.0**40
    assert report.tensor.startswith("gradient") and report.dtype == "float16"


# -- all together ------------------------------------------------------------


def test_startup_warnings_and_diagnose(float16_gan, digits):
    assert diagnostics.startup_warnings(float16_gan, 4096) == ""
    with tfmp.precision_scope("mixed_float16"):
        bad = trainers.GANTrainer(build_generator(widths=(63, 31, 7)), build_discriminator())
    block = diagnostics.startup_warnings(bad, 4090)
    assert block.startswith("warning:") and "generator/conv_2: filters 31" in block and "use 4088" in block
    assert "(details: tfmp.run.training.diagnose_run)" in block and "scripts/" not in block and "--" not in block
    lines = []
    diagnosis = diagnostics.diagnose(float16_gan, digits.x_train[:16], print_fn=lines.append)
    text = lines[0]
    for title in ("Tensor Core alignment", "Float32 outputs", "Gradient numerics", "First non-finite layer"):
        assert title in text
    assert not diagnosis.nonfinite.found
