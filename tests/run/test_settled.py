"""Tests for tfmp/run/settled.py: what `resolve` settles before the run builds its model."""

import collections
import re
import sys
import warnings

import pytest
from tiny import HAS_GPU, tiny

import tfmp
from tfmp import optimizers
from tfmp import precision as precision_lib
from tfmp.run import autotune, output, settled, training, trials
from tfmp.run import config as config_lib
from tfmp.run.benchmark import workload

# --- resolve ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "precision, loss_scale, expected_precision, expected_scale, note",
    [
        ("fp32", "auto", "float32", "none", None),
        ("float32", "128", "float32", "none", "note: loss_scale=128.0 is ignored under float32"),
        ("bf16", "dynamic", "mixed_bfloat16", "none", "note: loss_scale=dynamic is ignored under mixed_bfloat16"),
        ("mixed_bfloat16", "none", "mixed_bfloat16", "none", None),
        ("fp16", "auto", "mixed_float16", "dynamic", None),  # not set: float16 scales dynamically
        ("mixed_float16", "none", "mixed_float16", "none", None),
        ("mixed_float16", 128, "mixed_float16", 128.0, None),
    ],
)
def test_resolve_keeps_a_loss_scale_only_under_float16_and_says_when_it_drops_one(
    precision, loss_scale, expected_precision, expected_scale, note, tmp_path
):
    lines = []
    with output.lines_to(lines.append):
        resolved = settled.resolve(tiny(tmp_path, precision=precision, loss_scale=loss_scale))
    assert (resolved.precision, resolved.loss_scale) == (expected_precision, expected_scale)
    expected_lines = [] if note is None else [f"{note}; only float16 needs loss scaling."]
    assert lines == expected_lines


@pytest.mark.parametrize(
    "xla, expected",
    [
        ("true", True),
        ("false", False),
        (True, True),
        (False, False),
        pytest.param("auto", False, marks=pytest.mark.skipif(HAS_GPU, reason="auto is off without a GPU")),
    ],
)
def test_resolve_turns_the_xla_setting_into_a_bool(xla, expected, tmp_path):
    assert settled.resolve(tiny(tmp_path, xla=xla)).xla is expected


def test_resolve_names_the_run_without_creating_its_directory(tmp_path):
    logdir = tmp_path / "logs"
    named = settled.resolve(tiny(logdir, run_name="sweep/a"))
    assert named.run_name == "sweep/a"
    default = settled.resolve(tiny(logdir, precision="fp16"))
    assert re.fullmatch(r"\d{8}-\d{6}_gan_mixed_float16_ls-dynamic", default.run_name)
    assert not logdir.exists()


def test_resolve_checks_the_steps_of_an_epoch_only_when_asked(tmp_path):
    task = tiny(tmp_path, batch_size=4096)  # more than the digits' training split
    with pytest.raises(config_lib.ConfigError, match="batch_size=4096"):
        settled.resolve(task)
    assert settled.resolve(task, check_steps=False).precision == "float32"


@pytest.mark.skipif(HAS_GPU, reason="the rule gives float32 without a GPU")
def test_resolve_decides_auto_by_rule_under_multi_worker_without_measuring(tmp_path, monkeypatch):
    def measured():
        raise AssertionError("auto was measured: every worker could choose differently")

    monkeypatch.setattr(autotune, "detect_hardware", measured)
    lines = []
    with warnings.catch_warnings(), output.lines_to(lines.append):
        warnings.simplefilter("error")  # the run's own choice: no warning about auto outside a run
        resolved = settled.resolve(tiny(tmp_path, precision="auto", strategy="multi_worker"))
    assert (resolved.precision, resolved.loss_scale) == ("float32", "none")
    assert lines == [
        "note: precision=auto under strategy=multi_worker is chosen by the compute-capability rule, as "
        "precision=hardware is, not measured: every worker must choose the same precision."
    ]


@pytest.mark.skipif(HAS_GPU, reason="the rule gives float32 without a GPU")
@pytest.mark.parametrize("strategy", ["default", "multi_worker"])
def test_hardware_is_the_rule_in_any_run_without_measuring_or_a_note(tmp_path, monkeypatch, strategy):
    monkeypatch.setattr(autotune, "detect_hardware", lambda: pytest.fail("hardware was measured"))
    lines = []
    with output.lines_to(lines.append):
        resolved = settled.resolve(tiny(tmp_path, precision="hardware", strategy=strategy))
    assert (resolved.precision, lines) == ("float32", [])


def test_the_loss_scale_rule_has_one_home_and_every_caller_follows_it(tmp_path, monkeypatch):
    """Patched, `config.loss_scale_for` changes what the run, `auto`'s candidates and the benchmark train with."""
    asked = []

    def rule(requested, precision):
        asked.append(precision)
        return 64.0 if precision == "mixed_float16" else "none"

    monkeypatch.setattr(config_lib, "loss_scale_for", rule)
    assert settled.resolve(tiny(tmp_path, precision="fp16")).loss_scale == 64.0
    assert settled.resolve(tiny(tmp_path, precision="bf16")).loss_scale == "none"

    built = []
    task = tiny(tmp_path / "auto", precision="auto")
    build = type(task).build

    def recording_build(self, precision, loss_scale, *args, **kwargs):
        built.append((precision, loss_scale))
        return build(self, precision, loss_scale, *args, **kwargs)

    monkeypatch.setattr(type(task), "build", recording_build)
    hardware = autotune.Hardware(cpu_bfloat16=True, cpu_float16=True, machine="test")
    scales = config_lib.loss_scales(None)
    data = task.load_data()
    trials.fastest(task, data, task.probe(data), False, scales, hardware, timer=lambda trainer, probe: 1.0)
    assert ("mixed_float16", 64.0) in built and ("float32", "none") in built

    with tfmp.precision_scope("mixed_float16"):
        trainer = workload.build_workload(tiny(tmp_path, precision="fp16"), "mixed_float16", False).trainer
    assert asked[-1] == "mixed_float16"
    assert float(trainer.generator_optimizer.loss_scale) == 64.0 and not trainer.generator_optimizer.dynamic


def test_a_run_parses_each_setting_once_and_passes_the_parsed_value_on(tmp_path, monkeypatch):
    """A tiny run's `precision`, `loss_scale` and `xla` are parsed once by the run framework, when it validates.

    The library functions the run hands the parsed values to (`precision_scope`,
    the trainers' `compile`) normalise their own arguments at their own
    boundary; those calls come from `tfmp` itself and are not the run's.
    """
    calls = collections.Counter()

    def counted(setting, parse):
        def wrapper(*args, **kwargs):
            if sys._getframe(1).f_globals["__name__"].startswith("tfmp.run"):
                calls[setting] += 1
            return parse(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(precision_lib, "canonical_precision", counted("precision", precision_lib.canonical_precision))
    monkeypatch.setattr(optimizers, "parse_loss_scale", counted("loss_scale", optimizers.parse_loss_scale))
    monkeypatch.setattr(precision_lib, "canonical_xla", counted("xla", precision_lib.canonical_xla))
    monkeypatch.setattr(precision_lib, "resolve_jit_compile", counted("xla", precision_lib.resolve_jit_compile))
    result = training.train(tiny(tmp_path, precision="fp16", loss_scale="128", xla="Off"), print_fn=None)
    assert (result.precision, result.loss_scale) == ("mixed_float16", 128.0)
    assert calls == {"precision": 1, "loss_scale": 1, "xla": 1}
