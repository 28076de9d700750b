"""Tests for tfmp/run/benchmark/benchmark_config.py: what a benchmark measures, checked as given."""

import pytest
from benchmark_tiny import tiny_config

from tfmp.run import benchmark


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"models": ()}, "models=()"),
        ({"models": "tiny"}, "models='tiny'"),
        ({"precisions": ("float32", "fp8")}, "precision='fp8'"),
        ({"precisions": ("auto",)}, "precision='auto'"),
        ({"precisions": "fp16"}, "precisions='fp16'"),
        ({"xla": ()}, "xla=()"),
        ({"batch_sizes": (8, 0)}, "batch_size=0"),
        ({"batch_sizes": ("8",)}, "batch_size='8'"),
    ],
)
def test_config_tuples_are_checked_as_given_not_parsed(changes, message):
    # The config holds tuples; comma-separated text is the script's to parse (tests/scripts/test_benchmark_script.py).
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        tiny_config(**changes).validate(valid_models=("tiny", "tiny_gan"))


def test_config_names_are_canonicalised_in_order_once():
    assert benchmark.canonical_precisions(("bf16", "fp32", "FP16", "mixed_bfloat16")) == (
        "mixed_bfloat16",
        "float32",
        "mixed_float16",
    )
    assert benchmark.canonical_models(("resnet50", "GAN", "gan")) == ("resnet50", "gan")
