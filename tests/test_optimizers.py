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
    """Model Garden's grid: loss scaling only for float16; the exact skip of non-finite steps in every cell."""
    inner = keras.optimizers.Adam()
    wrapped = tfmp.wrap_optimizer(inner, precision, loss_scale)
    assert type(wrapped) is tfmp.LossScaleOptimizer and wrapped.inner_optimizer is inner
    scaled = tfmp.precision.canonical_precision(precision) == "mixed_float16" and loss_scale not in ("none", None)
    if not scaled:
        assert not wrapped.dynamic and float(wrapped.loss_scale) == 1.0
        assert tfmp.wrap_optimizer(inner, precision, loss_scale, skip_nonfinite=False) is inner
    elif loss_scale == "dynamic":
        assert wrapped.dynamic and float(wrapped.loss_scale) == 2.0**15
    else:
        assert not wrapped.dynamic and float(wrapped.loss_scale) == 128.0


def test_wrap_optimizer_unwraps_and_passes_keywords():
    inner = keras.optimizers.SGD()
    keras_lso = keras.optimizers.LossScaleOptimizer(inner, initial_scale=256)
    assert tfmp.wrap_optimizer(keras_lso, "float32", skip_nonfinite=False) is inner
    rewrapped = tfmp.wrap_optimizer(keras_lso, "mixed_float16", "dynamic", hysteresis=3)
    assert isinstance(rewrapped, tfmp.LossScaleOptimizer)
    assert rewrapped.inner_optimizer is inner and rewrapped.hysteresis == 3 and rewrapped.initial_scale == 256


_SETTINGS = ("hysteresis", "max_scale", "min_scale", "growth_factor", "backoff_factor", "dynamic_growth_steps")


@pytest.mark.parametrize("precision", ["mixed_float16", "mixed_bfloat16", "float32"])
def test_an_optimizer_handed_in_keeps_its_settings(precision):
    given = tfmp.LossScaleOptimizer(
        keras.optimizers.SGD(),
        initial_scale=2.0**10,
        hysteresis=3,
        max_scale=2.0**20,
        min_scale=2.0,
        growth_factor=4.0,
        backoff_factor=0.25,
        dynamic_growth_steps=100,
        xla_update=True,
    )
    got = tfmp.wrap_optimizer(given, precision)
    assert [getattr(got, name) for name in _SETTINGS] == [3, 2.0**20, 2.0, 4.0, 0.25, 100]
    assert got.xla_update is True and got.inner_optimizer is given.inner_optimizer
    # float16's dynamic scale starts where the given one did; elsewhere the scale is the skip's fixed 1.
    assert (got.dynamic, got.initial_scale) == ((True, 2.0**10) if precision == "mixed_float16" else (False, 1.0))
    fixed = tfmp.wrap_optimizer(given, "mixed_float16", 128, hysteresis=2)
    assert (fixed.dynamic, fixed.initial_scale, fixed.hysteresis, fixed.max_scale) == (False, 128.0, 2, 2.0**20)


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
