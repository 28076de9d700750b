"""Tests for tfmp/layers.py: FusedBatchNormalization against keras.layers.BatchNormalization.

Each comparison builds both layers with the same weights (random gamma,
beta and moving statistics, so a swapped variable shows) and feeds them the
same inputs: three training steps (outputs, gradients with respect to the
inputs, gamma and beta, then the moving statistics), then inference.
"""

import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfmp
from tfmp import layers as layers_lib
from tfmp.layers import FusedBatchNormalization, fuse_batch_norms

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Relative to the largest magnitude of the reference: float32 round-off, and
# one bfloat16 rounding (8 bits of mantissa, 2**-8 = 0.004) plus a margin.
TOLERANCE = {"float32": 2e-5, "mixed_bfloat16": 2e-2}


def _pair(precision, shape, **kwargs):
    """A Keras BatchNormalization and a FusedBatchNormalization with the same random weights."""
    rng = np.random.default_rng(0)
    with tfmp.precision_scope(precision):
        keras_bn = keras.layers.BatchNormalization(momentum=0.8, **kwargs)
        fused_bn = FusedBatchNormalization(momentum=0.8, **kwargs)
    for layer in (keras_bn, fused_bn):
        layer.build(shape)
    channels = shape[kwargs.get("axis", -1)]
    weights = []
    for variable in keras_bn.weights:
        if variable.path.endswith(("gamma", "moving_variance")):
            weights.append(rng.uniform(0.5, 1.5, channels).astype(np.float32))
        else:
            weights.append(rng.normal(0.0, 1.0, channels).astype(np.float32))
    keras_bn.set_weights(weights)
    fused_bn.set_weights(weights)
    return keras_bn, fused_bn


def _run(layer, batches, mask=None, jit_compile=False):
    """Three training steps then inference; every tensor cast to float32 numpy."""

    def train(x, dy):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=True, mask=mask)
            loss = tf.reduce_sum(tf.cast(y, tf.float32) * dy)
        grads = tape.gradient(loss, [x] + layer.trainable_weights)
        return [y] + grads

    train = tf.function(train, jit_compile=jit_compile)
    out = {}
    for i, (x, dy) in enumerate(batches):
        y, *grads = train(x, dy)
        out[f"y{i}"], out[f"dx{i}"] = y, grads[0]
        for variable, grad in zip(layer.trainable_weights, grads[1:]):
            out[f"d{variable.name}{i}"] = grad
    out["moving_mean"], out["moving_variance"] = layer.moving_mean, layer.moving_variance
    out["inference"] = layer(batches[0][0], training=False, mask=mask)
    return {key: np.asarray(tf.cast(value, tf.float32)) for key, value in out.items()}, y.dtype


def _batches(shape, n=3):
    rng = np.random.default_rng(1)
    return [
        (
            tf.constant(rng.normal(1.5, 3.0, shape).astype(np.float32)),
            tf.constant(rng.normal(0.0, 1.0, shape).astype(np.float32)),
        )
        for _ in range(n)
    ]


def _assert_close(reference, result, tolerance):
    assert reference.keys() == result.keys()
    for key in reference:
        scale = max(np.abs(reference[key]).max(), 1e-6)
        error = np.abs(reference[key] - result[key]).max() / scale
        assert error <= tolerance, f"{key}: relative error {error:.2e} > {tolerance:.0e}"


def _op_types(layer, shape, dtype=tf.float32):
    fn = tf.function(lambda x: layer(x, training=True))
    graph = fn.get_concrete_function(tf.TensorSpec(shape, dtype)).graph
    return [op.type for op in graph.get_operations()]


@pytest.mark.parametrize("precision", ["float32", "mixed_bfloat16"])
@pytest.mark.parametrize("shape", [(8, 5, 5, 16), (6, 3, 4, 24), (4, 1, 1, 32)], ids=["c16", "c24", "1x1"])
def test_matches_keras_batch_norm_in_training_and_inference(precision, shape):
    keras_bn, fused_bn = _pair(precision, shape)
    batches = _batches(shape)
    reference, reference_dtype = _run(keras_bn, batches)
    result, dtype = _run(fused_bn, batches)
    assert dtype == reference_dtype == ("bfloat16" if precision == "mixed_bfloat16" else "float32")
    assert fused_bn.moving_mean.dtype == fused_bn.gamma.dtype == "float32"
    _assert_close(reference, result, TOLERANCE[precision])
    # The statistics are float32 in both layers, so they agree closely even under bfloat16.
    for key in ("moving_mean", "moving_variance"):
        np.testing.assert_allclose(result[key], reference[key], rtol=1e-5, atol=1e-6)


def test_leaves_the_fusing_to_xla_under_jit_compile():
    # XLA fuses Keras's ops itself, faster than it runs FusedBatchNormV3.
    shape = (8, 4, 4, 16)
    keras_bn, fused_bn = _pair("float32", shape)
    fn = tf.function(lambda x: fused_bn(x, training=True), jit_compile=True)
    ops = [op.type for op in fn.get_concrete_function(tf.TensorSpec(shape)).graph.get_operations()]
    assert "FusedBatchNormV3" not in ops and "Mean" in ops
    batches = _batches(shape)
    reference, result = _run(keras_bn, batches, jit_compile=True)[0], _run(fused_bn, batches, jit_compile=True)[0]
    for key in reference:
        if key != "inference":  # _run's inference call is eager: fused there
            np.testing.assert_array_equal(result[key], reference[key], err_msg=key)
    _assert_close(reference, result, TOLERANCE["float32"])


def test_without_scale_or_center_and_frozen():
    shape = (4, 3, 3, 16)
    keras_bn, fused_bn = _pair("float32", shape, scale=False, center=False)
    assert fused_bn.trainable_weights == []
    batches = _batches(shape)
    _assert_close(_run(keras_bn, batches)[0], _run(fused_bn, batches)[0], TOLERANCE["float32"])
    # A frozen layer normalises with its moving statistics, as Keras's does, and updates nothing.
    keras_bn, fused_bn = _pair("float32", shape)
    keras_bn.trainable = fused_bn.trainable = False
    before = fused_bn.get_weights()
    _assert_close(_run(keras_bn, batches)[0], _run(fused_bn, batches)[0], TOLERANCE["float32"])
    for a, b in zip(before, fused_bn.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_runs_one_fused_op_on_4d_channels_last_inputs():
    _, fused_bn = _pair("float32", (4, 3, 3, 16))
    ops = _op_types(fused_bn, (4, 3, 3, 16))
    assert ops.count("FusedBatchNormV3") == 1 and "Mean" not in ops


@pytest.mark.parametrize(
    "shape, kwargs",
    [
        ((6, 5, 8), {}),
        ((6, 8), {}),
        ((4, 8, 3, 3), {"axis": 1}),
        ((4, 3, 3, 8), {"synchronized": True}),
        ((4, 3, 3, 8), {"renorm": True}),
        ((4, 3, 3, 8), {"epsilon": 1e-6}),
    ],
    ids=["3d", "2d", "channels_first", "synchronized", "renorm", "tiny_epsilon"],
)
def test_falls_back_to_keras_where_the_fused_op_does_not_apply(shape, kwargs):
    keras_bn, fused_bn = _pair("float32", shape, **kwargs)
    assert "FusedBatchNormV3" not in _op_types(fused_bn, shape)
    batches = _batches(shape)
    reference, result = _run(keras_bn, batches)[0], _run(fused_bn, batches)[0]
    for key in reference:
        np.testing.assert_array_equal(result[key], reference[key], err_msg=key)


def test_falls_back_to_keras_with_a_mask():
    shape = (4, 6, 8)
    keras_bn, fused_bn = _pair("float32", shape)
    mask = tf.constant(np.arange(24).reshape(4, 6) % 5 != 0)
    batches = _batches(shape)
    reference, result = _run(keras_bn, batches, mask=mask)[0], _run(fused_bn, batches, mask=mask)[0]
    for key in reference:
        np.testing.assert_array_equal(result[key], reference[key], err_msg=key)


def test_cpu_half_precision_channel_rule():
    rule = layers_lib._half_in_float32
    # On a CPU: bfloat16 stays native for multiples of 16 (oneDNN's fast kernel), float16 never does.
    assert [rule("bfloat16", c, on_cpu=True) for c in (16, 32, 960)] == [False] * 3
    assert [rule("bfloat16", c, on_cpu=True) for c in (8, 24, 40, None)] == [True] * 4
    assert rule("float16", 32, on_cpu=True) and not rule("float32", 8, on_cpu=True)
    # On a GPU cuDNN takes 16-bit inputs of any width: never cast.
    assert not any(rule(d, c, on_cpu=False) for d in ("bfloat16", "float16") for c in (8, 16, 24))
    # What runs here (no GPU): 24 channels under bfloat16 go through the float32 kernel.
    with tfmp.precision_scope("mixed_bfloat16"):
        narrow, wide = FusedBatchNormalization(), FusedBatchNormalization()
    fn = tf.function(lambda x: narrow(x, training=True))
    graph = fn.get_concrete_function(tf.TensorSpec((2, 3, 3, 24), tf.bfloat16)).graph
    (op,) = [op for op in graph.get_operations() if op.type == "FusedBatchNormV3"]
    assert op.get_attr("T") == tf.float32 and narrow(tf.ones((2, 3, 3, 24))).dtype == tf.bfloat16
    graph = tf.function(lambda x: wide(x)).get_concrete_function(tf.TensorSpec((2, 3, 3, 32), tf.bfloat16)).graph
    (op,) = [op for op in graph.get_operations() if op.type == "FusedBatchNormV3"]
    assert op.get_attr("T") == tf.bfloat16


def test_config_round_trip_and_serialization():
    with tfmp.precision_scope("mixed_bfloat16"):
        layer = FusedBatchNormalization(axis=-1, momentum=0.9, epsilon=1e-4, center=False, name="bn")
    config = layer.get_config()
    assert config == {**keras.layers.BatchNormalization.from_config(config).get_config()}
    clone = FusedBatchNormalization.from_config(config)
    assert clone.get_config() == config and clone.dtype_policy.name == "mixed_bfloat16"
    restored = keras.layers.deserialize(keras.layers.serialize(layer))
    assert type(restored) is FusedBatchNormalization and restored.get_config() == config
    # A Keras BatchNormalization's config builds the fused layer, and back.
    keras_config = keras.layers.BatchNormalization(momentum=0.5, name="k").get_config()
    assert FusedBatchNormalization.from_config(keras_config).get_config() == keras_config


def _tiny(batch_norm):
    inputs = keras.Input((4, 4, 3))
    x = keras.layers.Conv2D(16, 3, padding="same", name="conv")(inputs)
    x = batch_norm(momentum=0.5, name="bn")(x)
    return keras.Model(inputs, keras.layers.GlobalAveragePooling2D()(x), name="tiny")


def test_weights_and_checkpoints_are_interchangeable_with_keras(tmp_path):
    keras.utils.set_random_seed(0)
    keras_model = _tiny(keras.layers.BatchNormalization)
    x = np.random.default_rng(0).normal(size=(8, 4, 4, 3)).astype(np.float32)
    keras_model(x, training=True)  # moves the statistics away from their initial values
    fused_model = _tiny(FusedBatchNormalization)
    assert [w.path for w in fused_model.weights] == [w.path for w in keras_model.weights]
    fused_model.set_weights(keras_model.get_weights())
    np.testing.assert_allclose(fused_model(x), keras_model(x), rtol=1e-5, atol=1e-6)
    # tf.train.Checkpoint (tfmp.run.checkpoint) keys variables by attribute: either way round.
    path = tf.train.Checkpoint(model=keras_model).write(str(tmp_path / "ckpt"))
    fused_model = _tiny(FusedBatchNormalization)
    tf.train.Checkpoint(model=fused_model).read(path).assert_consumed()
    np.testing.assert_allclose(fused_model(x), keras_model(x), rtol=1e-5, atol=1e-6)
    # .keras and .weights.h5 files key layers by class name: a fused model saves and loads
    # as itself, and a Keras-BatchNorm weights file loads into the Keras model, then fuses.
    fused_model.save(tmp_path / "fused.keras")
    loaded = keras.models.load_model(tmp_path / "fused.keras")
    assert type(loaded.get_layer("bn")) is FusedBatchNormalization
    np.testing.assert_array_equal(loaded(x), fused_model(x))
    keras_model.save_weights(tmp_path / "keras.weights.h5")
    old = _tiny(keras.layers.BatchNormalization)
    old.load_weights(tmp_path / "keras.weights.h5")
    np.testing.assert_allclose(fuse_batch_norms(old)(x), keras_model(x), rtol=1e-5, atol=1e-6)


def test_fuse_batch_norms_swaps_the_layers_and_keeps_the_weights():
    keras.utils.set_random_seed(0)
    with tfmp.precision_scope("mixed_bfloat16"):
        inner = _tiny(keras.layers.BatchNormalization)
        inputs = keras.Input((4, 4, 3))
        model = keras.Model(inputs, keras.layers.Dense(2, name="head")(inner(inputs)), name="outer")
    x = np.random.default_rng(0).normal(size=(8, 4, 4, 3)).astype(np.float32)
    fused = fuse_batch_norms(model)
    bn = fused.get_layer("tiny").get_layer("bn")
    assert type(bn) is FusedBatchNormalization and bn.momentum == 0.5
    assert bn.dtype_policy.name == "mixed_bfloat16"
    assert type(model.get_layer("tiny").get_layer("bn")) is keras.layers.BatchNormalization  # original unchanged
    assert [w.path for w in fused.weights] == [w.path for w in model.weights]
    np.testing.assert_allclose(
        np.asarray(fused(x, training=False), np.float32),
        np.asarray(model(x, training=False), np.float32),
        rtol=2e-2,
        atol=2e-2,
    )


def test_per_replica_statistics_under_mirrored_strategy():
    # A subprocess: one MirroredStrategy per process (see tests/test_loss_scale.py).
    script = textwrap.dedent("""
        import numpy as np, keras, tensorflow as tf
        from tfmp.layers import FusedBatchNormalization
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        x = np.random.default_rng(0).normal(2.0, 3.0, (8, 3, 3, 16)).astype(np.float32)
        x[4:] *= 2.0  # the two replicas see different statistics
        results = []
        for cls in (keras.layers.BatchNormalization, FusedBatchNormalization):
            with strategy.scope():
                layer = cls(momentum=0.5)
                layer.build((None, 3, 3, 16))
            step = tf.function(lambda b: strategy.run(lambda b: layer(b, training=True), args=(b,)))
            (batch,) = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensors(x))
            out = step(batch)
            results.append([t.numpy() for t in out.values] + [v.numpy() for v in layer.moving_mean.value.values]
                           + [v.numpy() for v in layer.moving_variance.value.values])
        keras_out, fused_out = results
        for a, b in zip(keras_out, fused_out):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)
        assert np.abs(fused_out[2] - fused_out[3]).max() > 0.1  # per-replica moving means
        print("ok")
    """)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


@pytest.mark.parametrize("shape", [(4, 3, 3, 16), (32, 8, 8, 64)])
def test_a_training_call_is_a_constant_handful_of_ops_whatever_the_size(shape):
    """The fused op, the variance's correction by a constant and one update per moving statistic."""
    _, fused_bn = _pair("float32", shape)
    ops = [op for op in _op_types(fused_bn, shape) if op not in ("Placeholder", "Const", "NoOp", "Identity")]
    assert sorted(ops) == sorted(
        ["FusedBatchNormV3", "Mul", "Sub", "Sub", "ResourceApplyGradientDescent", "ResourceApplyGradientDescent"]
        + ["ReadVariableOp"] * 4  # gamma, beta and the two statistics the updates start from
    )
