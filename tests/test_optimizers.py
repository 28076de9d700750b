"""Tests for tfmp/optimizers.py: the optimizer a precision needs, from a loss-scale setting."""

import keras
import pytest

import tfmp
from tfmp import optimizers

INF = float("inf")


# -- wrap_optimizer -----------------------------------------------------------


@pytest.mark.parametrize("precision", ["float32", "fp32", "mixed_bfloat16", "bf16", "mixed_float16", "fp16"])
@pytest.mark.parametrize("loss_scale", ["none", None, "dynamic", 128, "128"])
def test_wrap_optimizer_grid(precision, loss_scale):
    inner = keras.optimizers.Adam()
    wrapped = tfmp.wrap_optimizer(inner, precision, loss_scale)
    needs_scaling = tfmp.precision.canonical_precision(precision) == "mixed_float16" and loss_scale not in (
        "none",
        None,
    )
    if not needs_scaling:
        assert wrapped is inner
        return
    assert isinstance(wrapped, tfmp.LossScaleOptimizer)
    assert wrapped.inner_optimizer is inner
    if loss_scale == "dynamic":
        assert wrapped.dynamic and float(wrapped.loss_scale) == 2.0**15
    else:
        assert not wrapped.dynamic and float(wrapped.loss_scale) == 128.0


def test_wrap_optimizer_unwraps_and_passes_keywords():
    inner = keras.optimizers.SGD()
    keras_lso = keras.optimizers.LossScaleOptimizer(inner)
    assert tfmp.wrap_optimizer(keras_lso, "float32") is inner
    rewrapped = tfmp.wrap_optimizer(keras_lso, "mixed_float16", "dynamic", hysteresis=3)
    assert isinstance(rewrapped, tfmp.LossScaleOptimizer)
    assert rewrapped.inner_optimizer is inner and rewrapped.hysteresis == 3


@pytest.mark.parametrize("bad", ["static", "-8", "0", "nan", -1, 0, INF, "1e40", 1e40, 2.0**24 + 2, "inf"])
def test_wrap_optimizer_rejects_bad_loss_scale(bad):
    with pytest.raises(ValueError) as info:
        tfmp.wrap_optimizer(keras.optimizers.SGD(), "mixed_float16", bad)
    assert f"loss_scale={bad!r}" in str(info.value)


def test_fixed_loss_scale_bound_is_max_scale():
    # 2**24 (dynamic scaling's cap) is the largest fixed scale accepted; the
    # message gives the range and the value.
    assert optimizers.parse_loss_scale("16777216") == 2.0**24
    with pytest.raises(ValueError) as info:
        optimizers.parse_loss_scale("1e40")
    assert "(0, 16777216] (2**24)" in str(info.value) and "loss_scale='1e40'" in str(info.value)
    # A caller who raises max_scale may use a larger fixed scale.
    opt = tfmp.wrap_optimizer(keras.optimizers.SGD(), "mixed_float16", 2.0**26, max_scale=2.0**26)
    assert float(opt.loss_scale) == 2.0**26


def test_wrap_optimizer_rejects_bad_precision():
    with pytest.raises(ValueError, match="precision='int8'"):
        tfmp.wrap_optimizer(keras.optimizers.SGD(), "int8")
