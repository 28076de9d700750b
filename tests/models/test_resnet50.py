"""Tests for models/resnet50.py."""

import keras
import numpy as np
import pytest

import tfmp
from tfmp.models.resnet50 import build_resnet50_classifier


@pytest.mark.parametrize("precision, compute", [("float32", "float32"), ("bf16", "bfloat16"), ("fp16", "float16")])
def test_head_computes_in_policy_and_output_in_float32(precision, compute):
    with tfmp.precision_scope(precision):
        model = build_resnet50_classifier((32, 32, 3), num_classes=7)
    assert model.get_layer("logits").compute_dtype == compute
    assert model.get_layer("outputs").compute_dtype == "float32"
    assert model.output_shape == (None, 7) and model.output.dtype == "float32"
    probs = model(np.zeros((2, 32, 32, 3), np.float32), training=False)
    assert probs.dtype == "float32"
    np.testing.assert_allclose(np.sum(probs, axis=-1), 1.0, rtol=1e-5)


def test_backbone_is_keras_resnet50_without_top_or_weights():
    model = build_resnet50_classifier((64, 64, 3), from_logits=True)
    backbone = model.layers[1]
    assert backbone.name == "resnet50"
    assert backbone.output_shape == (None, 2, 2, 2048)
    assert model.get_layer("pool").__class__ is keras.layers.GlobalAveragePooling2D
    assert model.get_layer("outputs").activation.__name__ == "linear"
    # 23.5M backbone weights plus the 2048 x 10 head.
    assert model.count_params() == 23_587_712 + 2048 * 10 + 10


def test_bad_arguments_name_the_value():
    with pytest.raises(ValueError, match=r"input_shape=\(16, 16, 3\)"):
        build_resnet50_classifier((16, 16, 3))
    with pytest.raises(ValueError, match=r"input_shape=\(64, 64, 1\)"):
        build_resnet50_classifier((64, 64, 1))
    with pytest.raises(ValueError, match="num_classes=1"):
        build_resnet50_classifier(num_classes=1)
