"""Tests for tfmp/run/training.py: configs, real runs on the embedded digits."""

import dataclasses
import json
import math
import os

import pytest
import tensorflow as tf
import tiny

from tfmp.run import autotune, training, trials

# Tiny but real: the embedded digits, a few steps, narrow models.
TINY_GAN = dataclasses.replace(tiny.TINY_GAN, epochs=2, log_every=1, precision=training.GANConfig().precision)
TINY_CLASSIFIER = training.ClassifierConfig(
    dataset="digits",
    batch_size=16,
    epochs=1,
    steps_per_epoch=2,
    warmup_steps=1,
    alpha=0.35,
    validation_batch_size=128,
)
PRECISION_GRID = [
    ("float32", "none"),
    ("mixed_bfloat16", "dynamic"),
    ("mixed_float16", "dynamic"),
    ("mixed_float16", "none"),
    ("mixed_float16", "128"),
]


def _quiet(lines):
    return lines.append


# --- refused before training ----------------------------------------------------------


def test_an_unwritable_logdir_is_refused_before_training(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    config = dataclasses.replace(TINY_GAN, logdir=str(blocker / "logs"))
    with pytest.raises(training.ConfigError, match="logdir="):
        training.train_gan(config, print_fn=_quiet([]))


def test_a_batch_larger_than_the_data_is_refused(tmp_path):
    config = dataclasses.replace(TINY_GAN, batch_size=4096, logdir=str(tmp_path))
    with pytest.raises(training.ConfigError, match="batch_size=4096"):
        training.train_gan(config, print_fn=_quiet([]))
    assert not [f for _, _, files in os.walk(tmp_path) for f in files if f.startswith("events")]


# --- smoke runs: every precision, loss scaling on and off ------------------------------


@pytest.mark.parametrize("precision, loss_scale", PRECISION_GRID)
def test_train_gan_runs_for_every_precision(precision, loss_scale, tmp_path):
    lines = []
    config = dataclasses.replace(TINY_GAN, precision=precision, loss_scale=loss_scale, logdir=str(tmp_path))
    result = training.train_gan(config, print_fn=lines.append)
    scaled = precision == "mixed_float16" and loss_scale != "none"
    assert result.steps == 4 and result.precision == precision
    assert math.isfinite(result.logs["g_loss"]) and math.isfinite(result.logs["d_loss"])
    assert ("g_loss_scale" in result.logs) == scaled
    if scaled:
        expected = 32768.0 if loss_scale == "dynamic" else 128.0
        assert result.logs["g_loss_scale"] == result.logs["d_loss_scale"] == expected
    step_lines = [line for line in lines if line.startswith("(")]
    assert len(step_lines) == 4 and step_lines[0].startswith("(0, 0), G Loss: ")
    assert ("loss_scale: none" in step_lines[0]) == (not scaled)
    notes = [line for line in lines if line.startswith("note:")]
    assert len(notes) == (precision != "mixed_float16" and loss_scale != "none")
    assert not any(line.startswith("warning:") for line in lines)  # aligned sizes, float32 outputs
    assert os.path.isdir(os.path.join(result.tensorboard_dir, "generator"))
    assert os.path.isdir(os.path.join(result.tensorboard_dir, "discriminator"))
    assert os.path.basename(result.tensorboard_dir).endswith(f"{precision}_ls-{result.loss_scale}")


@pytest.mark.skipif(tiny.HAS_GPU, reason="a GPU is never routed")
def test_a_float16_gan_epoch_with_every_convolution_gradient_in_float32_trains_on_any_cpu(tmp_path, monkeypatch):
    # The AVX512-FP16 class's measurement, injected: its convolution gradient kernels are 100-800x float32's.
    from tfmp import cpu_kernels

    ms = {kernel: {"float32": 1.0, "float16": 1.0} for kernel in cpu_kernels.KERNELS}
    ms["conv2d d/filter"]["float16"], ms["depthwise d/filter"]["float16"] = 810.0, 133.0
    times = cpu_kernels.KernelTimes(cpu_kernels.machine_id(), ms, bfloat16_native=True, float16_native=True)
    monkeypatch.setenv("TFMP_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    entries = {times.machine: times.to_json()}
    cache = {"version": cpu_kernels._CACHE_VERSION, "entries": entries}
    (tmp_path / "cache" / "cpu_kernels.json").write_text(json.dumps(cache))
    lines = []
    config = dataclasses.replace(TINY_GAN, precision="mixed_float16", epochs=1, logdir=str(tmp_path / "logs"))
    result = training.train_gan(config, print_fn=lines.append)
    assert result.steps == 2  # one epoch of two steps: a bound on the work, not on the time
    assert math.isfinite(result.logs["g_loss"]) and math.isfinite(result.logs["d_loss"])
    assert result.logs["g_loss_scale"] == result.logs["d_loss_scale"] == 32768.0
    assert result.logs["g_skipped_steps"] == result.logs["d_skipped_steps"] == 0


@pytest.mark.slow
def test_mixed_run_warns_of_pitfalls_and_diagnostics_leave_training_unchanged(tmp_path):
    config = dataclasses.replace(
        TINY_GAN, precision="bf16", generator_widths=(8, 8, 7), batch_size=30, epochs=1, logdir=str(tmp_path)
    )
    lines = []
    diagnosed = training.train_gan(dataclasses.replace(config, diagnose_every=1, run_name="diag"), lines.append)
    plain = training.train_gan(dataclasses.replace(config, run_name="plain"), _quiet([]))
    (block,) = [line.splitlines() for line in lines if line.startswith("warning:")]
    assert block == [
        "warning: mixed-precision pitfalls found (details: tfmp.run.training.diagnose_run):",
        "  (batch): batch size 30 is not a multiple of 8 (use 32)",
        "  generator/conv_3: filters 7 is not a multiple of 8 (use 8)",
        "  generator/conv_final: input channels 7 is not a multiple of 8 (use 8)",
    ]
    # The gradient reports ran on steps 1 and 2 and changed nothing: same losses as without them.
    assert (diagnosed.logs["g_loss"], diagnosed.logs["d_loss"]) == (plain.logs["g_loss"], plain.logs["d_loss"])
    for a, b in zip(diagnosed.trainer.variables, plain.trainer.variables):
        assert (a.numpy() == b.numpy()).all(), a.path
    events = [f for f in os.listdir(os.path.join(diagnosed.tensorboard_dir, "diagnostics")) if f.startswith("events")]
    tags = {
        (value.tag, event.step)
        for name in events
        for event in tf.compat.v1.train.summary_iterator(os.path.join(diagnosed.tensorboard_dir, "diagnostics", name))
        for value in event.summary.value
    }
    assert {("generator/underflow_fraction", 1), ("discriminator/overflow_fraction", 2)} <= tags


def test_diagnose_run_refuses_a_run_directory_a_training_run_holds(tmp_path):
    from tfmp.run import directories

    config = dataclasses.replace(TINY_GAN, precision="float32", logdir=str(tmp_path), run_name="run")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    lines = []
    with directories.RunDirLock(str(run_dir)):  # the training run
        with pytest.raises(directories.RunDirInUseError) as error:
            training.diagnose_run(config, print_fn=lines.append)
    assert f"{run_dir} is in use by another run: pid {os.getpid()} on host" in str(error.value)
    assert not any(line.startswith("diagnosing") for line in lines)  # refused before building anything
    assert os.listdir(run_dir) == []  # no histograms written into the training run's directory
    # Once the run has ended, diagnosing there writes its histograms and lets the directory go again.
    training.diagnose_run(config, print_fn=None)
    assert os.listdir(run_dir) == ["diagnostics"] and directories.holder(str(run_dir)) is None


# `auto` measures on the device it sees. The tests inject the device (`autotune.detect_hardware`) and, but
# for one real tiny probe, the timing (`trials.time_steps`), so every branch runs the same on any machine.
H100 = autotune.GPU("NVIDIA H100 80GB HBM3", (9, 0))


def _inject_device(monkeypatch, tmp_path, hardware, figures=None):
    """`auto` sees `hardware` and times each candidate at `figures[policy]` (None: really, on this CPU).

    Returns the list of what each probe trained: (policy, {(dynamic, scale) of the optimizers}, TF32 on).
    """
    monkeypatch.setenv(autotune.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(autotune, "detect_hardware", lambda: hardware)
    real, probed = trials.time_steps, []

    def time_steps(trainer, probe):
        policy = next(iter(trainer.networks.values())).dtype_policy.name
        scales = {(opt.dynamic, float(opt.loss_scale)) for opt in trainer.optimizers.values()}
        probed.append((policy, scales, tf.config.experimental.tensor_float_32_execution_enabled()))
        return real(trainer, probe) if figures is None else figures[policy]

    monkeypatch.setattr(trials, "time_steps", time_steps)
    return probed


def _auto_line(lines):
    (line,) = [line for line in lines if line.startswith("auto precision:")]
    return line


def _diagnosed_precision(config, lines):
    """The precision `diagnose_run` resolves: it goes through the same `auto` as a run, without training."""
    training.diagnose_run(config, print_fn=lines.append)
    (line,) = [line for line in lines if line.startswith("diagnosing ")]
    return line.split("precision=")[1].split()[0]


@pytest.mark.parametrize("cpu_bfloat16", [True, False])
def test_auto_precision_on_cpu_is_measured_once_then_cached(cpu_bfloat16, tmp_path, monkeypatch):
    cpu = autotune.Hardware(cpu_bfloat16=cpu_bfloat16, machine="a test CPU")
    probed = _inject_device(monkeypatch, tmp_path, cpu, {"float32": 100.0, "mixed_bfloat16": 300.0})
    config = dataclasses.replace(TINY_GAN, precision="auto", epochs=1, logdir=str(tmp_path))
    cache = tmp_path / "cache" / "auto_precision.json"
    if cpu_bfloat16:
        lines = []
        assert training.train_gan(config, print_fn=lines.append).precision == "mixed_bfloat16"
        figures = "(float32 100 img/s, mixed_bfloat16 300 img/s (3.00x)"
        assert _auto_line(lines) == (
            f"auto precision: mixed_bfloat16, the fastest on this CPU for this model {figures}; measured now, "
            f"cached in {cache})"
        )
        # Each candidate is timed as it trains: fixed scale 1 (the non-finite check), no loss scaling.
        assert probed == [("float32", {(False, 1.0)}, True), ("mixed_bfloat16", {(False, 1.0)}, True)]
        again = []
        assert _diagnosed_precision(config, again) == "mixed_bfloat16"
        assert _auto_line(again) == (
            f"auto precision: mixed_bfloat16, the fastest on this CPU for this model {figures}; cached in {cache})"
        )
        assert len(probed) == 2  # the cached answer was not measured again
    else:
        lines = []
        assert _diagnosed_precision(config, lines) == "float32"
        assert _auto_line(lines) == (
            "auto precision: float32 (this CPU has no bfloat16 or float16 arithmetic; nothing to measure)"
        )
        assert probed == [] and not cache.exists()
    assert not any(line.startswith("note:") for line in lines)  # the default loss_scale is not nagged about


def test_auto_precision_on_a_gpu_measures_every_candidate_float16_with_its_loss_scale(tmp_path, monkeypatch):
    probed = _inject_device(
        monkeypatch,
        tmp_path,
        autotune.Hardware(gpus=(H100,), machine="a test host"),
        {"float32": 100.0, "mixed_bfloat16": 150.0, "mixed_float16": 200.0},
    )
    config = dataclasses.replace(TINY_GAN, precision="auto", epochs=1, logdir=str(tmp_path))
    lines = []
    assert _diagnosed_precision(config, lines) == "mixed_float16"
    assert _auto_line(lines).startswith(
        "auto precision: mixed_float16, the fastest on this GPU (NVIDIA H100 80GB HBM3, compute capability 9.0) "
        "for this model (float32 with TF32 100 img/s, mixed_bfloat16 150 img/s (1.50x), "
        "mixed_float16 200 img/s (2.00x); measured now"
    )
    assert probed == [
        ("float32", {(False, 1.0)}, True),
        ("mixed_bfloat16", {(False, 1.0)}, True),
        ("mixed_float16", {(True, 32768.0)}, True),
    ]
    assert any("precision=mixed_float16 loss_scale=dynamic" in line for line in lines)
    # The loss scale and TF32 are part of what was measured: other settings are measured again.
    probed.clear()
    lines = []
    assert _diagnosed_precision(dataclasses.replace(config, loss_scale="128", tf32=False), lines) == "mixed_float16"
    assert probed == [
        ("float32", {(False, 1.0)}, False),
        ("mixed_bfloat16", {(False, 1.0)}, False),
        ("mixed_float16", {(False, 128.0)}, False),
    ]
    assert "(float32 100 img/s, " in _auto_line(lines)  # no TF32 in float32 this time
    entries = json.load(open(tmp_path / "cache" / "auto_precision.json"))["entries"].values()
    assert [e["machine"] for e in entries] == ["a test host | GPU NVIDIA H100 80GB HBM3 9.0"] * 2


# Trains both candidates for real (float16 emulated on most CPUs). The fast twin: the injected probes above.
@pytest.mark.slow
def test_auto_precision_real_probe_on_a_volta_measures_float32_and_float16(tmp_path, monkeypatch):
    # The one real probe: both candidates train a few steps on this CPU (float16 emulated, so slower).
    volta = autotune.Hardware(gpus=(autotune.GPU("Tesla V100-SXM2-16GB", (7, 0)),), machine="a test host")
    probed = _inject_device(monkeypatch, tmp_path, volta)
    config = dataclasses.replace(TINY_GAN, precision="auto", logdir=str(tmp_path))
    lines = []
    chosen = _diagnosed_precision(config, lines)
    assert probed == [("float32", {(False, 1.0)}, True), ("mixed_float16", {(True, 32768.0)}, True)]
    (entry,) = json.load(open(tmp_path / "cache" / "auto_precision.json"))["entries"].values()
    figures = entry["images_per_sec"]
    assert set(figures) == {"float32", "mixed_float16"} and all(v > 0 for v in figures.values())
    assert chosen == entry["precision"] == max(figures, key=figures.get)
    assert f"float32 {figures['float32']:.0f} img/s, mixed_float16 {figures['mixed_float16']:.0f} img/s" in (
        _auto_line(lines)
    )


def _check_classifier_run(result, lines, precision, loss_scale, steps):
    assert result.steps == steps and result.precision == precision
    assert {"loss", "accuracy", "val_loss", "val_accuracy", "images_per_sec"} <= set(result.logs)
    assert ("loss_scale" in result.logs) == (precision == "mixed_float16" and loss_scale != "none")
    assert math.isfinite(result.logs["val_loss"])
    assert any(line.startswith("(0, 0), Loss: ") for line in lines)
    assert os.path.isdir(os.path.join(result.tensorboard_dir, "train"))
    assert os.path.isdir(os.path.join(result.tensorboard_dir, "validation"))


# float32 and float16 with dynamic scaling: tests/test_parity.py runs them through scripts/parity.py
# (and compares their accuracy, marked slow); bfloat16: the float32-layers test below.
@pytest.mark.slow
def test_train_classifier_runs_in_float16_without_loss_scaling(tmp_path):
    lines = []
    config = dataclasses.replace(TINY_CLASSIFIER, precision="fp16", loss_scale="none", logdir=str(tmp_path))
    result = training.train_classifier(config, print_fn=lines.append)
    _check_classifier_run(result, lines, "mixed_float16", "none", steps=2)


def test_compare_loss_scaling_runs_the_tutorials_three_configurations(tmp_path):
    lines = []
    config = dataclasses.replace(TINY_GAN, epochs=1, logdir=str(tmp_path))
    results = training.compare_loss_scaling(config, print_fn=lines.append)
    assert [name for name, _ in results] == [name for name, _, _ in training.COMPARISON]
    assert sorted(os.listdir(tmp_path)) == sorted(name for name, _, _ in training.COMPARISON)
    by_name = dict(results)
    assert by_name["float32"].precision == "float32"
    assert by_name["mixed_float16_no_loss_scale"].loss_scale == "none"
    assert by_name["mixed_float16_dynamic_loss_scale"].logs["g_loss_scale"] == 32768.0
    table = training.comparison_table(results).splitlines()
    assert table[0].startswith("| run | final G loss | final D loss | skipped steps")
    assert len(table) == 5
    assert table[4].startswith("| mixed_float16_dynamic_loss_scale |") and "| 0/0 |" in table[4]
    # float32 skips (and counts) non-finite steps too (on_nonfinite="skip"), with no loss scale.
    assert "| 0/0 |" in table[2] and "g_loss_scale" not in by_name["float32"].logs


# --- per-layer precision by default ------------------------------------------------------


# A whole bfloat16 run (emulated on most CPUs). The fast twins: tests/models/test_mobilenet_v2.py (the rule, on the
# built model) and tests/run/shipped/test_shipped_classifier.py (the run's default pattern).
@pytest.mark.slow
@pytest.mark.skipif(bool(tf.config.list_physical_devices("GPU")), reason="the default is for CPUs")
def test_bfloat16_on_cpu_keeps_the_depthwise_convolutions_in_float32_by_default(tmp_path):
    config = dataclasses.replace(TINY_CLASSIFIER, precision="bf16", steps_per_epoch=1, logdir=str(tmp_path))
    lines = []
    result = training.train_classifier(config, print_fn=lines.append)
    (line,) = [line for line in lines if line.startswith("float32 layers:")]
    assert line == (
        "float32 layers: 13, the model's default for mixed_bfloat16 on CPU (float32_layers=none turns "
        "it off): mobilenet_v2_classifier/mobilenetv2_0.35_32/block_1_depthwise, "
        "mobilenet_v2_classifier/mobilenetv2_0.35_32/block_3_depthwise, "
        "mobilenet_v2_classifier/mobilenetv2_0.35_32/block_6_depthwise, ..."
    )
    backbone = result.trainer.network.layers[1]
    dtypes = {layer.name: layer.compute_dtype for layer in backbone.layers if type(layer).__name__ == "DepthwiseConv2D"}
    # At 32x32: the stride-2 ones and those below 4x4 (models/mobilenet_v2.py).
    assert {name for name, dtype in dtypes.items() if dtype == "float32"} == {
        f"block_{i}_depthwise" for i in (1, 3, *range(6, 17))
    }
    assert result.trainer.network.get_layer("logits").compute_dtype == "bfloat16"
    # float32_layers="none" or a regex of the user's wins: tests/test_precision.py, tests/test_scripts.py.


@pytest.mark.parametrize("family", ["bn_cnn", "transformer", "gru"])
def test_a_model_of_your_own_is_diagnosed_on_its_first_batch(family, tmp_path):
    import families

    lines = []
    task = families.TASKS[family].replace(precision="mixed_float16", logdir=str(tmp_path), run_name="diagnosis")
    diagnosis = training.diagnose(task, print_fn=lines.append)
    text = "\n".join(lines)
    assert f"diagnosing {family}: precision=mixed_float16 loss_scale=dynamic batch_size=32" in text
    assert diagnosis.gradients is not None and "suggested static loss scale" in text
    assert os.listdir(tmp_path / "diagnosis")  # the log2|g| histograms
