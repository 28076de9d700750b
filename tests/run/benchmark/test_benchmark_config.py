"""Tests for tfmp/run/benchmark/benchmark_config.py: what a benchmark measures, checked as given."""

import dataclasses
import re

import pytest
from benchmark_tiny import tiny_config

from tfmp import precision
from tfmp.run import benchmark
from tfmp.run.options import ConfigError


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"models": ()}, "models=()"),
        ({"models": "tiny"}, "models='tiny'"),
        ({"precisions": ("float32", "fp8")}, "unknown precision, 'fp8'"),
        ({"precisions": ("auto",)}, "unknown precision, 'auto'"),
        ({"precisions": "fp16"}, "precisions='fp16'"),
        ({"xla": ()}, "xla=()"),
        ({"batch_sizes": (8, 0)}, "batch_sizes must hold integers >= 1. Received: batch_sizes=(8, 0)"),
        ({"batch_sizes": ("8",)}, "batch_sizes must be a tuple of integers. Received: batch_sizes=('8',)"),
        ({"runs": 0}, "runs must be an integer >= 1. Received: runs=0"),
        ({"dataset": "imagenet"}, "dataset must be one of: "),
        ({"float32_layers": "("}, "float32_layers is not a valid regular expression"),
        ({"isolate": "yes"}, "isolate must be a boolean. Received: isolate='yes'"),
    ],
)
def test_config_tuples_are_checked_as_given_not_parsed(changes, message):
    # The config holds tuples; comma-separated text is the script's to parse (tests/scripts/test_benchmark_script.py).
    with pytest.raises(ConfigError, match=re.escape(message)) as error:
        tiny_config(**changes).validate(valid_models=("tiny", "tiny_gan"))
    assert isinstance(error.value, ValueError) and error.value.field == next(iter(changes))


def test_an_unknown_model_is_one_of_the_specs_it_is_validated_against():
    with pytest.raises(ConfigError, match=re.escape("models has an unknown model, 'resnet50'. Valid: tiny, tiny_gan.")):
        tiny_config(models=("tiny", "resnet50")).validate(valid_models=("tiny", "tiny_gan"))


def test_the_benchmark_measures_the_concrete_precisions_in_the_one_list():
    assert benchmark.PRECISIONS is precision.CONCRETE_PRECISIONS
    assert benchmark.BenchmarkConfig().precisions == precision.CONCRETE_PRECISIONS
    assert "auto" not in benchmark.PRECISIONS


def test_every_setting_is_an_option_with_its_help():
    for field in dataclasses.fields(benchmark.BenchmarkConfig):
        assert field.metadata["help"], field.name


def test_config_names_are_canonicalised_in_order_once():
    assert benchmark.canonical_precisions(("bf16", "fp32", "FP16", "mixed_bfloat16")) == (
        "mixed_bfloat16",
        "float32",
        "mixed_float16",
    )
    assert benchmark.canonical_models(("resnet50", "GAN", "gan")) == ("resnet50", "gan")
