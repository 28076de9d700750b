"""Tests for models/mobilenet_v2.py."""

import keras
import pytest

import tfmp
from tfmp.models.mobilenet_v2 import build_mobilenet_v2_classifier


@pytest.mark.parametrize("precision, compute", [("float32", "float32"), ("bf16", "bfloat16"), ("fp16", "float16")])
@pytest.mark.parametrize("from_logits", [False, True])
def test_head_computes_in_policy_and_output_in_float32(precision, compute, from_logits):
    with tfmp.precision_scope(precision):
        model = build_mobilenet_v2_classifier(num_classes=7, alpha=0.35, from_logits=from_logits)
    assert model.get_layer("logits").compute_dtype == compute
    assert model.get_layer("outputs").compute_dtype == "float32"
    assert model.get_layer("outputs").activation.__name__ == ("linear" if from_logits else "softmax")
    assert model.output_shape == (None, 7) and model.output.dtype == "float32"


def test_backbone_is_keras_mobilenet_v2_without_top_or_weights():
    model = build_mobilenet_v2_classifier(alpha=0.35)
    backbone = model.layers[1]
    assert backbone.name.startswith("mobilenetv2_0.35")
    assert backbone.output_shape == (None, 1, 1, 1280)
    assert model.get_layer("pool").__class__ is keras.layers.GlobalAveragePooling2D


def test_batch_norm_momentum_is_applied_to_every_backbone_batch_norm():
    model = build_mobilenet_v2_classifier(alpha=0.35, batch_norm_momentum=0.9)
    norms = [layer for layer in model.layers[1].layers if isinstance(layer, keras.layers.BatchNormalization)]
    assert norms and all(layer.momentum == 0.9 for layer in norms)
    default = build_mobilenet_v2_classifier(alpha=0.35)
    assert all(
        layer.momentum == 0.999
        for layer in default.layers[1].layers
        if isinstance(layer, keras.layers.BatchNormalization)
    )


def test_bad_arguments_name_the_value():
    with pytest.raises(ValueError, match="alpha=0"):
        build_mobilenet_v2_classifier(alpha=0)
    with pytest.raises(ValueError, match="num_classes=1"):
        build_mobilenet_v2_classifier(num_classes=1)
    with pytest.raises(ValueError, match="batch_norm_momentum=1.0"):
        build_mobilenet_v2_classifier(batch_norm_momentum=1.0)


def test_batch_norms_are_fused_with_the_keras_layers_weights_and_names():
    from tfmp.layers import FusedBatchNormalization

    keras.utils.set_random_seed(0)
    fused = build_mobilenet_v2_classifier(alpha=0.35, batch_norm_momentum=0.9)
    keras.utils.set_random_seed(0)
    plain = build_mobilenet_v2_classifier(alpha=0.35, batch_norm_momentum=0.9, fused_batch_norm=False)
    kinds = {type(layer).__name__ for layer in fused.layers[1].layers if "Normalization" in type(layer).__name__}
    assert kinds == {"FusedBatchNormalization"} and fused.layers[1].name == plain.layers[1].name
    assert all(
        isinstance(layer, FusedBatchNormalization)
        for layer in fused.layers[1].layers
        if isinstance(layer, keras.layers.BatchNormalization)
    )
    # Same paths and, from the same seed, the same initial weights.
    assert [w.path for w in fused.weights] == [w.path for w in plain.weights]
    assert all((a == b).all() for a, b in zip(fused.get_weights(), plain.get_weights()))
    x = keras.random.uniform((4, 32, 32, 3), seed=0)
    assert float(keras.ops.max(keras.ops.abs(fused(x) - plain(x)))) < 1e-5


@pytest.mark.parametrize("side", [32, 128])
def test_the_cpu_bfloat16_advice_names_the_depthwise_convolutions_onednn_lacks(side):
    from tfmp.models.mobilenet_v2 import cpu_bfloat16_float32_layers

    with tfmp.precision_scope("bf16"):
        model = build_mobilenet_v2_classifier((side, side, 3), alpha=0.35)
    kept = tfmp.float32_layers.keep_float32([model], cpu_bfloat16_float32_layers((side, side, 3)))
    depthwise = [layer for layer in model.layers[1].layers if isinstance(layer, keras.layers.DepthwiseConv2D)]
    # The rule, checked on the built model: stride 2, or an input below 4x4.
    expected = [layer.name for layer in depthwise if layer.strides != (1, 1) or min(layer.input.shape[1:3]) < 4]
    assert [path.rsplit("/", 1)[1] for path in kept] == expected
    assert len(expected) == {32: 13, 128: 4}[side]  # at 128x128 only the stride-2 ones
    assert {layer.compute_dtype for layer in depthwise if layer.name in expected} == {"float32"}
    assert {layer.compute_dtype for layer in depthwise if layer.name not in expected} == {"bfloat16"}
    assert model.layers[1].get_layer("block_1_depthwise_BN").compute_dtype == "bfloat16"


@pytest.mark.parametrize("alpha", [float("inf"), float("nan")])
def test_a_non_finite_alpha_is_refused_naming_it(alpha):
    # inf used to reach Keras, which failed turning alpha * 32 into a width (OverflowError).
    with pytest.raises(ValueError, match=f"alpha must be a finite number > 0. Received: alpha={alpha}"):
        build_mobilenet_v2_classifier(alpha=alpha)
