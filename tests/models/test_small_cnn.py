"""Tests for models/small_cnn.py."""

import pytest

import tfmp
from tfmp.models.small_cnn import build_small_cnn


@pytest.mark.parametrize("precision, compute", [("float32", "float32"), ("bf16", "bfloat16"), ("fp16", "float16")])
def test_output_is_float32_under_every_policy(precision, compute):
    with tfmp.precision_scope(precision):
        model = build_small_cnn(width=8)
    assert model.get_layer("conv1").compute_dtype == compute
    assert model.get_layer("logits").compute_dtype == compute
    assert model.output.dtype == "float32"
    assert all(v.dtype == "float32" for v in model.trainable_variables)


def test_rejects_bad_width():
    with pytest.raises(ValueError, match="width=0"):
        build_small_cnn(width=0)
