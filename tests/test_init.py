"""Tests for tfmp/__init__.py: the top level holds what a user reaches for, and tfmp 0.1's names still work."""

import warnings

import pytest

import tfmp

# Internal helpers and the deprecated alias that tfmp 0.1 exported at the top level.
MOVED = {
    "ClassifierTrainer": lambda: tfmp.trainers.Trainer,
    "canonical_precision": lambda: tfmp.precision.canonical_precision,
    "resolve_jit_compile": lambda: tfmp.precision.resolve_jit_compile,
    "parse_loss_scale": lambda: tfmp.optimizers.parse_loss_scale,
}


def test_the_top_level_exports_no_internal_helper_and_no_deprecated_alias():
    assert not set(MOVED) & set(tfmp.__all__)
    assert not set(MOVED) & set(dir(tfmp))
    for name in tfmp.__all__:
        assert getattr(tfmp, name) is not None, name
    needed = {"Trainer", "GANTrainer", "LossScaleOptimizer", "set_precision", "cpu_kernels", "float32_layers"}
    assert needed <= set(tfmp.__all__)


@pytest.mark.parametrize("name", sorted(MOVED))
def test_a_name_tfmp_0_1_exported_still_works_with_a_warning_naming_its_place(name):
    with pytest.warns(DeprecationWarning, match=rf"`tfmp\.{name}` is deprecated; use `tfmp\."):
        value = getattr(tfmp, name)
    assert value is MOVED[name]()


def test_an_unknown_name_is_an_attribute_error_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
            tfmp.nonsense  # noqa: B018
