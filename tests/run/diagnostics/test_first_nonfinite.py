"""Tests for tfmp/run/diagnostics/first_nonfinite.py: the first non-finite layer."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

import tfmp
from tfmp.run import diagnostics


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
        "chain/planted",
        "output",
        model.get_layer("planted").compute_dtype,
        (2, 4),
    )
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


def test_a_nonfinite_input_is_named_by_its_key_or_its_place_in_x_y_sample_weight():
    def named(batch):
        report = diagnostics.first_nonfinite(model, batch, loss="sparse_categorical_crossentropy")
        return report.input, report.where()

    model = _chain("float32", keras.layers.Dense(4, name="middle"))
    x, y = np.ones((2, 4), np.float32), np.array([0.0, np.inf], np.float32)
    assert named((x, y)) == ("y", "the input batch's y (float32 [2]): 0 NaN and 1 Inf")
    assert named(([x, x + np.nan], np.array([0, 1]))) == (
        "x[1]",
        "the input batch's x[1] (float32 [2, 4]): 8 NaN and 0 Inf",
    )
    assert named((x, np.array([0, 1]), np.array([1.0, np.nan], np.float32)))[0] == "sample_weight"
    features = {"tokens": np.ones((2, 4), np.float32), "length": np.array([[1.0], [np.nan]], np.float32)}
    assert named((features, np.array([0, 1])))[0] == "'length'"
    assert named(features)[0] == "'length'"  # a dict batch: all of it is x
    assert named(({"tokens": x}, {"label": y}))[0] == "y['label']"
    report = diagnostics.first_nonfinite(model, (x + np.nan, np.array([0, 1])), loss="sparse_categorical_crossentropy")
    assert str(report) == (
        "First non-finite layer: none; before any layer, the input batch's x (float32 [2, 4]): 8 NaN and 0 Inf."
    )


def test_a_layers_finding_reads_once_with_its_objective_and_no_doubled_full_stop():
    model = _chain("float32", keras.layers.Dense(4, name="planted"))
    kernel = model.get_layer("planted").kernel
    kernel.assign(tf.tensor_scatter_nd_update(kernel, [[0, 0]], [np.nan]))
    report = diagnostics.first_nonfinite(model, _BATCH, loss="sparse_categorical_crossentropy")
    scale = f" at loss scale {report.loss_scale:g}"  # the fixed scale 1 of an unscaled float32 step
    where = f"layer chain/planted ({report.objective}), its output (float32 [2, 4]): 2 NaN and 0 Inf{scale}"
    assert report.objective and report.where() == where and str(report) == f"First non-finite layer: {where}."


def test_float16_overflow_at_the_loss_scale_is_located(float16_gan, digits):
    images = digits.x_train[:8]
    assert not diagnostics.first_nonfinite(float16_gan, images).found
    # A scale no float16 gradient survives: the report names where it overflowed.
    report = diagnostics.first_nonfinite(float16_gan, images, loss_scale=2.0**40)
    assert report.found and report.objective == "generator" and report.loss_scale == 2.0**40
    assert report.tensor.startswith("gradient") and report.dtype == "float16"
