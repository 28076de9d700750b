"""Tests for tfmp/run/benchmark/benchmark_config.py: what a benchmark measures, checked as given."""

import dataclasses
import re

import pytest
from benchmark_tiny import tiny_config

from tfmp import precision
from tfmp.run import autotune, benchmark
from tfmp.run.options import ConfigError


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"models": ()}, "models=()"),
        ({"models": "tiny"}, "models='tiny'"),
        ({"precisions": ("float32", "fp8")}, "unknown precision, 'fp8'"),
        ({"precisions": ("auto",)}, "unknown precision, 'auto'"),
        ({"precisions": "fp16"}, "precisions='fp16'"),
        ({"xla": ("on",)}, "xla must be a tuple of booleans. Received: xla=('on',)"),
        ({"interval": 0}, "interval must be a number from 0.001 to 1.0. Received: interval=0"),
        ({"time_budget": 0.5}, "time_budget must be a number >= 1.0. Received: time_budget=0.5"),
        ({"steps": 0}, "steps must be an integer >= 1. Received: steps=0"),
        ({"console": "bar"}, "console must be one of: auto, progress, lines. Received: console='bar'"),
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
    assert "auto" not in benchmark.PRECISIONS


_AVX2 = autotune.Hardware(machine="avx2")
_AVX512_BF16 = autotune.Hardware(cpu_bfloat16=True, machine="zen4")
_AMX = autotune.Hardware(cpu_bfloat16=True, cpu_float16=True, machine="sapphire rapids")
_H200 = autotune.Hardware(gpus=(autotune.GPU("NVIDIA H200", (9, 0)),), machine="h200")
_V100 = autotune.Hardware(gpus=(autotune.GPU("Tesla V100", (7, 0)),), machine="v100")


@pytest.mark.parametrize(
    "hardware, precisions, xla, why",
    [
        (_AVX2, ("float32",), (False,), "this CPU (no 16-bit arithmetic: float32 only)"),
        (_AVX512_BF16, ("float32", "mixed_bfloat16"), (False,), "(native bfloat16; float16 emulated, left out)"),
        (_AMX, ("float32", "mixed_bfloat16", "mixed_float16"), (False,), "(native bfloat16 and float16)"),
        (
            _H200,
            ("float32", "mixed_bfloat16", "mixed_float16"),
            (True,),
            "(NVIDIA H200, compute capability 9.0) (bfloat16 and float16 Tensor Cores)",
        ),
        (_V100, ("float32", "mixed_float16"), (True,), "(Tesla V100, compute capability 7.0) (float16 Tensor Cores)"),
    ],
)
def test_with_no_precisions_or_xla_given_the_benchmark_measures_what_a_run_here_chooses_among(
    hardware, precisions, xla, why
):
    config, plan = benchmark.fit_to_machine(benchmark.BenchmarkConfig(), hardware)
    assert (config.precisions, config.xla) == (precisions, xla)
    assert config.precisions == autotune.candidates(hardware)
    on = "on with a GPU" if hardware.gpus else "off on a CPU"
    assert plan.startswith(f"measuring gan, mobilenet_v2, resnet50 x {', '.join(precisions)} x XLA {on[:3].strip()}")
    assert why in plan and f"XLA as auto sets it ({on})" in plan


def test_what_is_given_is_kept_and_no_hardware_is_asked_for(monkeypatch):
    monkeypatch.setattr(autotune, "detect_hardware", lambda: pytest.fail("detected the hardware"))
    given = benchmark.BenchmarkConfig(precisions=("mixed_float16",), xla=(True, False))
    config, plan = benchmark.fit_to_machine(given)
    assert config == given
    assert plan == "measuring gan, mobilenet_v2, resnet50 x mixed_float16 x XLA on/off"


def test_only_the_unset_half_is_fitted_to_the_machine():
    config, plan = benchmark.fit_to_machine(benchmark.BenchmarkConfig(xla=(True,)), _AVX512_BF16)
    assert (config.precisions, config.xla) == (("float32", "mixed_bfloat16"), (True,))
    assert "XLA as auto" not in plan and "the precisions auto measures on this CPU" in plan


def test_the_fixed_counts_modes_take_the_given_ones_or_twenty_steps_five_rounds():
    assert benchmark.BenchmarkConfig().fixed_counts() == (20, 5)
    assert benchmark.BenchmarkConfig(steps=3, repeats=2).fixed_counts() == (3, 2)


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
