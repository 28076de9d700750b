"""Tests for tfmp/precision.py."""

import logging
import warnings

import keras
import pytest
import tensorflow as tf

import tfmp
from tfmp import precision


@pytest.mark.parametrize(
    "name, expected",
    [
        ("float32", "float32"),
        ("mixed_float16", "mixed_float16"),
        ("mixed_bfloat16", "mixed_bfloat16"),
        ("auto", "auto"),
        ("hardware", "hardware"),
        (" Hardware", "hardware"),
        ("fp32", "float32"),
        ("fp16", "mixed_float16"),
        ("bf16", "mixed_bfloat16"),
        ("  BF16 ", "mixed_bfloat16"),
    ],
)
def test_canonical_names_and_aliases(name, expected):
    assert precision.canonical_precision(name) == expected


def test_unknown_name_lists_valid_names_and_value():
    with pytest.raises(ValueError) as info:
        precision.canonical_precision("float8")
    message = str(info.value)
    assert "precision='float8'" in message
    for valid in ("float32", "mixed_float16", "mixed_bfloat16", "auto", "hardware", "fp32", "fp16", "bf16"):
        assert valid in message


def test_the_precision_names_are_the_concrete_precisions_and_the_names_that_choose_one():
    assert precision.CONCRETE_PRECISIONS == ("float32", "mixed_bfloat16", "mixed_float16")
    assert precision.PRECISIONS[: len(precision.CONCRETE_PRECISIONS)] == precision.CONCRETE_PRECISIONS
    assert precision.PRECISIONS[len(precision.CONCRETE_PRECISIONS) :] == ("auto", "hardware")
    assert tfmp.PRECISIONS is precision.PRECISIONS


@pytest.mark.parametrize(
    "capabilities, expected",
    [
        ([], "float32"),
        ([(9, 0)], "mixed_bfloat16"),
        ([(8, 0)], "mixed_bfloat16"),
        ([(8, 6)], "mixed_bfloat16"),
        ([(7, 0)], "mixed_float16"),
        ([(7, 5)], "mixed_float16"),
        ([(6, 0)], "float32"),
        ([(8, 0), (7, 0)], "mixed_float16"),  # the oldest GPU decides
    ],
)
def test_choose_precision_from_compute_capability(capabilities, expected):
    chosen, reason = precision.choose_precision(capabilities)
    assert chosen == expected
    assert reason


@pytest.mark.parametrize(
    "capabilities, expected, words",
    [([], "float32", "no GPU"), ([(9, 0)], "mixed_bfloat16", "9.0"), ([(7, 5)], "mixed_float16", "7.5")],
)
def test_hardware_resolves_by_the_rule_and_logs_one_line(capabilities, expected, words, caplog):
    with caplog.at_level(logging.INFO, logger="tfmp.precision"):
        assert precision.resolve_precision("hardware", compute_capabilities=capabilities) == expected
    lines = [r.getMessage() for r in caplog.records if r.name == "tfmp.precision"]
    assert len(lines) == 1
    assert expected in lines[0] and words in lines[0]


def test_hardware_on_this_machine_follows_its_gpus():
    # Holds with or without a GPU: the visible GPUs are what the rule is given.
    capabilities = precision.gpu_compute_capabilities()
    assert capabilities == [capability for _, capability in precision.visible_gpus()]
    assert len(capabilities) <= len(tf.config.list_physical_devices("GPU"))
    assert precision.resolve_precision("hardware") == precision.choose_precision(capabilities)[0]


AUTO_WARNING = (
    '`precision="auto"` is deprecated and will be removed in tfmp 0.3: outside a run (set_precision, '
    'precision_scope, resolve_precision, wrap_optimizer) nothing can be measured, so "auto" applies the '
    'compute-capability rule, whose name is "hardware": use "hardware".'
)


def test_auto_outside_a_run_is_the_rule_of_hardware_with_a_warning_blaming_the_callers_line():
    previous = keras.config.dtype_policy()
    try:
        with pytest.warns(DeprecationWarning) as caught:
            assert precision.resolve_precision("auto", compute_capabilities=[(7, 5)]) == "mixed_float16"
            chosen = tfmp.set_precision("auto")
            with tfmp.precision_scope("AUTO") as scoped:
                pass
    finally:
        keras.config.set_dtype_policy(previous)
    assert chosen == scoped == precision.resolve_precision("hardware")
    assert [str(w.message) for w in caught] == [AUTO_WARNING] * 3
    assert {w.filename for w in caught} == {__file__}  # the user's line, shown by Python's default filters
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        precision.resolve_precision("hardware")  # the rule's own name: no warning


def test_set_precision_sets_the_global_policy():
    previous = keras.config.dtype_policy()
    try:
        assert tfmp.set_precision("bf16") == "mixed_bfloat16"
        assert keras.config.dtype_policy().name == "mixed_bfloat16"
        layer = keras.layers.Dense(2)
        assert layer.compute_dtype == "bfloat16" and layer.variable_dtype == "float32"
    finally:
        keras.config.set_dtype_policy(previous)


def test_scope_restores_previous_policy_and_layers_keep_theirs():
    before = keras.config.dtype_policy().name
    with tfmp.precision_scope("fp16") as name:
        assert name == "mixed_float16"
        inner = keras.layers.Dense(2)
        with tfmp.precision_scope("mixed_bfloat16"):
            assert keras.config.dtype_policy().name == "mixed_bfloat16"
        assert keras.config.dtype_policy().name == "mixed_float16"
    assert keras.config.dtype_policy().name == before
    assert inner.compute_dtype == "float16"
    assert keras.layers.Dense(2).compute_dtype == "float32"


def test_scope_restores_policy_on_error():
    before = keras.config.dtype_policy().name
    with pytest.raises(RuntimeError):
        with tfmp.precision_scope("mixed_float16"):
            raise RuntimeError("boom")
    assert keras.config.dtype_policy().name == before


def test_scope_rejects_unknown_name_without_changing_policy():
    before = keras.config.dtype_policy().name
    with pytest.raises(ValueError, match="half"):
        with tfmp.precision_scope("half"):
            pass
    assert keras.config.dtype_policy().name == before


def test_tf32_switch_and_scope():
    original = tf.config.experimental.tensor_float_32_execution_enabled()
    with tfmp.tf32_scope(not original):
        assert tf.config.experimental.tensor_float_32_execution_enabled() == (not original)
    assert tf.config.experimental.tensor_float_32_execution_enabled() == original
    previous = tfmp.set_tf32(False)
    try:
        assert previous == original
        assert not tf.config.experimental.tensor_float_32_execution_enabled()
    finally:
        tfmp.set_tf32(original)


@pytest.mark.parametrize(
    "setting, has_gpu, expected",
    [
        ("auto", True, True),
        ("auto", False, False),
        ("true", False, True),
        ("false", True, False),
        ("TRUE", False, True),
        (True, False, True),
        (False, True, False),
    ],
)
def test_resolve_jit_compile(setting, has_gpu, expected):
    assert precision.resolve_jit_compile(setting, has_gpu=has_gpu) is expected


def test_resolve_jit_compile_auto_detects_cpu():
    assert precision.resolve_jit_compile("auto") is False


def test_resolve_jit_compile_rejects_unknown():
    with pytest.raises(ValueError, match="xla='maybe'"):
        precision.resolve_jit_compile("maybe")


@pytest.mark.parametrize(
    "setting, expected", [(True, True), (False, False), ("On", True), (" no ", False), ("AUTO", "auto")]
)
def test_canonical_xla_keeps_auto_for_the_run_to_decide(setting, expected):
    assert precision.canonical_xla(setting) == expected
    assert precision.canonical_xla(expected) == expected


def test_auto_jit_compile_is_on_with_a_gpu():
    assert precision.auto_jit_compile(has_gpu=True) is True
    assert precision.auto_jit_compile(has_gpu=False) is False


def test_the_float32_layer_functions_moved_are_reachable_here_with_a_warning():
    with pytest.warns(DeprecationWarning, match=r"tfmp\.float32_layers\.keep_float32"):
        assert precision.keep_float32 is tfmp.float32_layers.keep_float32
    with pytest.raises(AttributeError, match="no_such_name"):
        precision.no_such_name  # noqa: B018
