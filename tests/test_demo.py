"""Tests for tfmp/demo.py and scripts/demo_custom_loop.py (the README's main job)."""

import glob
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from tfmp import demo

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "scripts", "demo_custom_loop.py")


def _scalars(run_dir):
    """{(sub_run, tag): [steps]} from the event files under `run_dir`."""
    found = {}
    for path in glob.glob(os.path.join(run_dir, "*", "events.out.tfevents.*")):
        sub_run = os.path.basename(os.path.dirname(path))
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                found.setdefault((sub_run, value.tag), []).append(event.step)
    return found


@pytest.mark.parametrize(
    "precision, loss_scale, scaled",
    [
        ("float32", "dynamic", False),
        ("mixed_bfloat16", "dynamic", False),
        ("mixed_float16", "dynamic", True),
        ("mixed_float16", "none", False),
        ("fp16", "256", True),
    ],
)
def test_run_demo_trains_under_each_setting(tmp_path, precision, loss_scale, scaled):
    config = demo.DemoConfig(precision=precision, loss_scale=loss_scale, epochs=2, steps_per_epoch=4,
                             batch_size=32, width=8, xla="false", logdir=str(tmp_path), run_name="run")
    results = demo.run_demo(config)
    assert results["logdir"] == str(tmp_path / "run")
    assert results["loss"] > 0 and 0 <= results["val_accuracy"] <= 1
    if scaled:
        expected = 2.0**15 if loss_scale == "dynamic" else 256.0
        assert results["loss_scale"] == expected and results["skipped_steps"] == 0
    else:
        assert results["loss_scale"] is None
    tags = _scalars(results["logdir"])
    assert tags[("train", "epoch_loss")] == [0, 1]
    assert tags[("validation", "epoch_accuracy")] == [0, 1]
    assert (("train", "loss_scale") in tags) == scaled


def test_demo_config_rejects_bad_values():
    for kwargs, fragment in [
        (dict(precision="fp8"), "precision='fp8'"),
        (dict(loss_scale="big"), "loss_scale='big'"),
        (dict(epochs=0), "epochs=0"),
        (dict(batch_size=-2), "batch_size=-2"),
        (dict(xla="sometimes"), "xla='sometimes'"),
    ]:
        with pytest.raises(ValueError) as info:
            demo.DemoConfig(**kwargs).validate()
        assert fragment in str(info.value)


def _script(*flags, cwd):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, SCRIPT, *flags], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_script_trains_to_real_accuracy_and_writes_tensorboard_logs(tmp_path):
    proc = _script("--precision=mixed_float16", "--loss_scale=dynamic", "--epochs=3",
                   "--logdir=logs", "--run_name=smoke", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("epoch ")]
    assert len(lines) == 3 and "loss_scale 32768.0" in lines[-1]
    final = [line for line in proc.stdout.splitlines() if line.startswith("final:")][0]
    val_accuracy = float(final.split("val_accuracy ")[1].split(",")[0])
    assert val_accuracy > 0.85, proc.stdout
    tags = _scalars(str(tmp_path / "logs" / "smoke"))
    assert tags[("train", "loss_scale")] == [0, 1, 2]
    assert tags[("validation", "epoch_loss")] == [0, 1, 2]


@pytest.mark.parametrize(
    "flag, fragment",
    [
        ("--loss_scale=static", "loss_scale='static'"),
        ("--precision=fp8", "fp8"),
        ("--batch_size=0", "batch_size"),
    ],
)
def test_script_refuses_bad_flags_before_training(tmp_path, flag, fragment):
    proc = _script(flag, "--logdir=logs", cwd=tmp_path)
    assert proc.returncode != 0
    assert fragment in proc.stderr
    assert "epoch 1/" not in proc.stdout
    assert not (tmp_path / "logs").exists()
