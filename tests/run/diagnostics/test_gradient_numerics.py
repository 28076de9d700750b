"""Tests for tfmp/run/diagnostics/gradients.py: gradient numerics, exact on tiny models."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

import tfmp
from tfmp.run import diagnostics


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
    report = diagnostics.gradient_report(model, batch, loss=_sum_loss, loss_scale=2.0**10)
    lines = [str(report)]  # its table, as printed
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
    report = diagnostics.gradient_report(model, batch, loss=_sum_loss, loss_scale=None, margin=1)
    assert report.objectives[0].suggested_scale == 2.0**-2
    assert report.objectives[0].scaled is None


def test_gradient_fraction_boundaries_follow_float16():
    # 2^-25 flushes; 2^-24 is the smallest subnormal; 2^-14 and 65504 are normal; 0 is not "lost".
    model, batch = _sum_model([2.0**-25, 2.0**-24, 2.0**-14, 65504.0, 0.0], precision="float32")
    kernel = diagnostics.gradient_report(model, batch, loss=_sum_loss, loss_scale=None).objectives[0].variables[0]
    assert (kernel.underflow, kernel.subnormal, kernel.overflow) == (0.2, 0.2, 0.0)
    # The histogram holds log2|g| of the non-zero values.
    np.testing.assert_array_equal(
        np.sort(kernel.log2_abs), np.log2([2.0**-25, 2.0**-24, 2.0**-14, 65504.0]).astype("float32")
    )


def test_gradients_come_from_a_float32_copy_and_state_is_untouched():
    # In float16 the gradient 2^-30 would be 0; the report still sees it.
    model, batch = _sum_model([2.0**-30, 1.0])
    assert model.layers[1].compute_dtype == "float16"
    kernel = diagnostics.gradient_report(model, batch, loss=_sum_loss, loss_scale=None).objectives[0].variables[0]
    assert kernel.underflow == 0.5
    with pytest.raises(ValueError, match="loss=None"):
        diagnostics.gradient_report(model, batch)
    with pytest.raises(ValueError, match="loss_scale=-1"):
        diagnostics.gradient_report(model, batch, loss=_sum_loss, loss_scale=-1)
    with pytest.raises(ValueError, match="margin=0.5"):
        diagnostics.gradient_report(model, batch, loss=_sum_loss, margin=0.5)


def test_gan_report_has_both_objectives_at_the_current_scale(float16_gan, digits, tmp_path):
    images = digits.x_train[:32]
    before = [v.numpy() for v in float16_gan.variables]
    report = diagnostics.gradient_report(float16_gan, images)
    assert [o.name for o in report.objectives] == ["generator", "discriminator"]
    assert [o.loss_scale for o in report.objectives] == [2.0**15, 2.0**15]
    generator = report.objectives[0]
    assert [v.name for v in generator.variables] == [v.path for v in float16_gan.generator.trainable_variables]
    assert all(v.count > 0 and v.nonfinite == 0 for v in generator.variables)
    assert (
        generator.suggested_scale * generator.max_abs * 8
        <= 65504
        < generator.suggested_scale * 2 * generator.max_abs * 8
    )
    # Nothing moved: weights, BatchNorm statistics, noise and dropout seeds.
    for old, new in zip(before, float16_gan.variables):
        np.testing.assert_array_equal(old, new.numpy())

    diagnostics.write_gradient_summaries(report, tensorboard_dir=str(tmp_path), step=7)
    tags = set()
    for root, _, files in os.walk(tmp_path / "diagnostics"):
        for name in files:
            for event in tf.compat.v1.train.summary_iterator(os.path.join(root, name)):
                tags.update((v.tag, event.step) for v in event.summary.value)
    assert ("generator/underflow_fraction", 7) in tags
    assert ("discriminator/overflow_fraction_at_loss_scale", 7) in tags
    assert ("generator/log2_abs_grad", 7) in tags
    assert ("discriminator/log2_abs_grad/conv_1/kernel", 7) in tags


def test_logdir_is_the_deprecated_name_of_write_gradient_summaries_tensorboard_dir(tmp_path):
    with pytest.warns(
        DeprecationWarning,
        match=r"`write_gradient_summaries\(logdir\)` is deprecated; use `write_gradient_summaries\(tensorboard_dir\)`",
    ):
        diagnostics.write_gradient_summaries(diagnostics.GradientReport([], batch_size=8), logdir=str(tmp_path), step=0)
    assert os.listdir(tmp_path) == ["diagnostics"]
