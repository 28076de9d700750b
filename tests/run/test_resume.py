"""Tests for resuming a run from its checkpoints through tfmp.run.training: bit-exact, refused, the run directory."""

import dataclasses
import json
import os
import signal

import numpy as np
import pytest
import tensorflow as tf
import tiny

from tfmp.run import checkpoint, preemption, training

TINY_GAN = dataclasses.replace(
    tiny.TINY_GAN,
    epochs=2,
    steps_per_epoch=3,
    warmup_steps=0,
    precision="mixed_float16",
    loss_scale="dynamic",
    deterministic=True,
)


TINY_CLASSIFIER = training.ClassifierConfig(
    dataset="digits",
    batch_size=32,
    epochs=2,
    steps_per_epoch=2,
    warmup_steps=0,
    alpha=0.35,
    validation_batch_size=512,
    precision="mixed_bfloat16",
    deterministic=True,
)


def _stop_at(line_prefix, lines):
    """A print_fn that sends this process SIGTERM when the run prints `line_prefix`."""

    def print_fn(line):
        lines.append(line)
        if line.startswith(line_prefix):
            signal.raise_signal(signal.SIGTERM)

    return print_fn


def _checkpoint_tensors(path):
    reader = tf.train.load_checkpoint(path)
    return {
        k: reader.get_tensor(k)
        for k in reader.get_variable_to_shape_map()
        if "save_counter" not in k and k != "_CHECKPOINTABLE_OBJECT_GRAPH"
    }  # graph: auto names


@pytest.mark.parametrize(
    "train, config, stop_line, final_key",
    [
        # Inside epoch 0: the resumed run finishes a partial epoch, then a whole one.
        (training.train_gan, TINY_GAN, "(0, 1)", "g_loss"),
        # Inside epoch 1, after a validation pass.
        pytest.param(training.train_classifier, TINY_CLASSIFIER, "(1, 0)", "val_loss", marks=pytest.mark.slow),
        # Two replicas, each with its own BatchNorm statistics until the epoch's end.
        pytest.param(
            training.train_gan,
            dataclasses.replace(TINY_GAN, strategy="mirrored"),
            "(0, 1)",
            "g_loss",
            marks=pytest.mark.slow,
        ),
        # Two replicas, stopped in an epoch's last step: the checkpoint holds the epoch's end (the replicas'
        # statistics averaged), from which the next epoch starts as the uninterrupted run's did.
        pytest.param(
            training.train_classifier,
            dataclasses.replace(TINY_CLASSIFIER, strategy="mirrored"),
            "(0, 1)",
            "val_loss",
            marks=pytest.mark.slow,
        ),
    ],
    ids=[
        "gan-float16-mid-epoch",
        "classifier-bfloat16-second-epoch",
        "gan-float16-mirrored-mid-epoch",
        "classifier-bfloat16-mirrored-epochs-last-step",
    ],
)
def test_stop_and_resume_equals_the_uninterrupted_run(train, config, stop_line, final_key, tmp_path):
    config = dataclasses.replace(config, logdir=str(tmp_path))
    full = train(dataclasses.replace(config, run_name="full"), print_fn=lambda line: None)

    lines = []
    cut = dataclasses.replace(config, run_name="cut")
    handler = signal.getsignal(signal.SIGTERM)
    with pytest.raises(preemption.Preempted) as stopped:
        train(cut, print_fn=_stop_at(stop_line, lines))
    assert signal.getsignal(signal.SIGTERM) is handler  # the guard put the handler back
    steps = config.steps_per_epoch
    epoch, batch = (int(n) for n in stop_line.strip("()").split(", "))
    done = epoch * steps + batch + 1
    assert stopped.value.step == done and stopped.value.exit_code == 128 + signal.SIGTERM
    assert stopped.value.checkpoint.endswith(f"ckpt-{done}") and "resume=True" in str(stopped.value)

    lines = []
    resumed = train(dataclasses.replace(cut, resume=True), print_fn=lines.append)
    assert f"resumed from {stopped.value.checkpoint} at step {done}" in lines
    step_lines = [line.split(",")[0] + "," + line.split(",")[1] for line in lines if line.startswith("(")]
    # The console carries on with the epoch's real step numbers.
    assert step_lines[0] == f"({done // steps}, {done % steps})" and step_lines[-1] == f"(1, {steps - 1})"
    assert len(step_lines) == 2 * steps - done

    for a, b in zip(full.trainer.variables, resumed.trainer.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    for name, optimizer in full.trainer.optimizers.items():
        for a, b in zip(optimizer.variables, resumed.trainer.optimizers[name].variables):
            np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
    # And the final checkpoints hold the same tensors.
    final_full = _checkpoint_tensors(os.path.join(str(tmp_path), "full", "checkpoints", f"ckpt-{2 * steps}"))
    final_cut = _checkpoint_tensors(os.path.join(str(tmp_path), "cut", "checkpoints", f"ckpt-{2 * steps}"))
    assert final_full.keys() == final_cut.keys()
    for key in final_full:
        np.testing.assert_array_equal(final_full[key], final_cut[key], err_msg=key)
    # A whole epoch after the resume (GAN), or validation of the final weights (classifier), logs the
    # same. (A partially resumed epoch's training means cover only the steps run after the resume.)
    assert resumed.logs[final_key] == full.logs[final_key]


def test_resuming_with_another_model_or_precision_names_the_mismatch(tmp_path):
    config = dataclasses.replace(TINY_GAN, logdir=str(tmp_path), run_name="run", epochs=1, steps_per_epoch=1)
    training.train_gan(config, print_fn=lambda line: None)
    checkpoint_file = os.path.join(str(tmp_path), "run", "checkpoints", "ckpt-1")
    with pytest.raises(checkpoint.CheckpointError) as error:
        training.train_gan(dataclasses.replace(config, resume=True, precision="float32"), print_fn=lambda line: None)
    assert checkpoint_file in str(error.value) and "precision" in str(error.value)
    assert "float32" in str(error.value) and "mixed_float16" in str(error.value)
    with pytest.raises(checkpoint.CheckpointError) as error:
        training.train_gan(
            dataclasses.replace(config, resume=True, generator_widths=(16, 8, 8)), print_fn=lambda line: None
        )
    assert checkpoint_file in str(error.value)
    assert "generator_widths=[8, 8, 8] in the checkpoint, generator_widths=[16, 8, 8] in this run" in str(error.value)
    # Without --resume the run's checkpoints are not overwritten.
    with pytest.raises(training.ConfigError, match="already holds checkpoints"):
        training.train_gan(config, print_fn=lambda line: None)
    # More epochs is a legitimate resume: it carries on from step 1.
    lines = []
    result = training.train_gan(dataclasses.replace(config, resume=True, epochs=2), print_fn=lines.append)
    assert any(line.startswith("resumed from") and line.endswith("at step 1") for line in lines)
    assert result.steps == 1


def test_resume_needs_a_run_to_continue(tmp_path):
    with pytest.raises(training.ConfigError, match="resume needs the run to continue"):
        dataclasses.replace(TINY_GAN, logdir=str(tmp_path), resume=True).validate()


@pytest.mark.parametrize(
    "change, message",
    [
        ({"on_nonfinite": "ignore"}, "on_nonfinite='ignore'"),
        ({"keep_checkpoints": 0}, "keep_checkpoints=0"),
        ({"checkpoint_every": -1}, "checkpoint_every=-1"),
    ],
)
def test_bad_checkpoint_settings_are_refused(change, message, tmp_path):
    with pytest.raises(training.ConfigError) as error:
        dataclasses.replace(TINY_GAN, logdir=str(tmp_path), **change).validate()
    assert message in str(error.value)


def test_an_unwritable_checkpoint_dir_is_refused(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    # validate() is pure: the run finds it when it creates its directories, before any training.
    with pytest.raises(training.ConfigError) as error:
        training.train_gan(
            dataclasses.replace(
                TINY_GAN, logdir=str(tmp_path / "logs"), run_name="run", checkpoint_dir=str(blocker / "ckpt")
            ),
            print_fn=lambda line: None,
        )
    assert f"checkpoint_dir='{blocker}/ckpt'" in str(error.value)
    assert sorted(os.listdir(tmp_path)) == ["file"]  # the run directory it had made is gone again


def test_stop_on_nonfinite_is_refused_with_dynamic_loss_scaling(tmp_path):
    config = dataclasses.replace(TINY_GAN, logdir=str(tmp_path), on_nonfinite="stop")
    with pytest.raises(training.ConfigError, match="on_nonfinite='stop'"):
        training.train_gan(config, print_fn=lambda line: None)
    assert not os.listdir(tmp_path)


def test_after_a_crash_a_stale_lock_and_a_lost_state_file_neither_block_nor_hide_the_resume(tmp_path):
    import socket
    import subprocess
    import sys

    from tfmp.run import directories

    config = dataclasses.replace(
        TINY_GAN,
        logdir=str(tmp_path),
        run_name="run",
        epochs=1,
        steps_per_epoch=2,
        checkpoint_every=1,
        precision="float32",
        loss_scale="none",
        deterministic=False,
    )
    training.train_gan(config, print_fn=lambda line: None)
    run_dir, checkpoints = tmp_path / "run", tmp_path / "run" / "checkpoints"
    os.remove(checkpoints / "checkpoint")
    before = {name: (checkpoints / name).read_bytes() for name in os.listdir(checkpoints)}
    assert sorted(before) == [
        "ckpt-1.data-00000-of-00001",
        "ckpt-1.index",
        "ckpt-2.data-00000-of-00001",
        "ckpt-2.index",
    ]
    # A new run is refused as for any directory holding checkpoints.
    with pytest.raises(training.ConfigError, match=f"{checkpoints} already holds checkpoints"):
        training.train_gan(config, print_fn=lambda line: None)
    # The process that held the run directory was killed: its lock file stayed.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (run_dir / directories.LOCK_FILE).write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname()}))

    lines = []
    result = training.train_gan(dataclasses.replace(config, resume=True, epochs=2), print_fn=lines.append)
    assert result.steps == 2
    assert [line for line in lines if line.startswith("note:")] == [
        f"note: taking over the run directory {run_dir} from pid {dead.pid} on host {socket.gethostname()}, which "
        f"is no longer running (it was killed or crashed); lock file {run_dir / directories.LOCK_FILE}"
    ]
    assert any(
        line.startswith(
            f"warning: the state file {checkpoints / 'checkpoint'} that lists the checkpoints is "
            f"missing; found 2 checkpoint(s) by their files; resuming from the newest readable "
            f"one, {checkpoints / 'ckpt-2'}"
        )
        for line in lines
    ), lines
    assert f"resumed from {checkpoints / 'ckpt-2'} at step 2" in lines
    for name, content in before.items():  # still there, unchanged
        assert (checkpoints / name).read_bytes() == content, name
    assert not os.path.exists(run_dir / directories.LOCK_FILE) and not os.path.exists(
        checkpoints / directories.LOCK_FILE
    )


def test_a_run_directory_held_by_another_run_is_refused_before_any_training(tmp_path):
    from tfmp.run import directories

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    lines = []
    with directories.RunDirLock(str(run_dir)):
        with pytest.raises(directories.RunDirInUseError) as error:
            training.train_gan(
                dataclasses.replace(TINY_GAN, logdir=str(tmp_path), run_name="run"), print_fn=lines.append
            )
        # Its own checkpoint directory too, when another run names it as its checkpoint_dir.
        with pytest.raises(directories.RunDirInUseError, match=str(run_dir)):
            training.train_gan(
                dataclasses.replace(TINY_GAN, logdir=str(tmp_path), run_name="other", checkpoint_dir=str(run_dir)),
                print_fn=lines.append,
            )
    assert f"{run_dir} is in use by another run: pid {os.getpid()} on host" in str(error.value)
    assert not any(line.startswith("training") for line in lines)
    assert os.listdir(run_dir) == [] and os.listdir(tmp_path) == ["run"]  # nothing left of the refused runs


@pytest.mark.parametrize("run_name", ["../x", "a/../../x", "/tmp/x", ".", "a/.."])
def test_a_run_name_must_stay_inside_the_logdir(run_name, tmp_path):
    with pytest.raises(training.ConfigError) as error:
        dataclasses.replace(TINY_GAN, logdir=str(tmp_path / "logs"), run_name=run_name).validate()
    assert f"Received: run_name={run_name!r}" in str(error.value)
    assert not os.listdir(tmp_path)  # validating creates nothing


def test_a_nested_run_name_is_a_directory_inside_the_logdir(tmp_path):
    config = dataclasses.replace(TINY_GAN, logdir=str(tmp_path), run_name="sweep/lr-3", epochs=1, steps_per_epoch=1)
    config.validate()
    result = training.train_gan(config, print_fn=lambda line: None)
    assert result.tensorboard_dir == str(tmp_path / "sweep" / "lr-3")
    assert os.listdir(tmp_path) == ["sweep"] and os.listdir(tmp_path / "sweep") == ["lr-3"]
    assert os.path.isfile(tmp_path / "sweep" / "lr-3" / "checkpoints" / "ckpt-1.index")


@pytest.mark.parametrize(
    "family, precision",
    [
        ("bn_cnn", "mixed_float16"),
        pytest.param("transformer", "mixed_bfloat16", marks=pytest.mark.slow),
        pytest.param("gru", "mixed_float16", marks=pytest.mark.slow),
    ],
)
def test_a_model_of_your_own_stops_and_resumes_bit_for_bit(family, precision, tmp_path):
    """A task tfmp does not ship (tests/families.py), stopped by SIGTERM inside its first epoch and resumed."""
    import families

    task = families.TASKS[family].replace(precision=precision, logdir=str(tmp_path), deterministic=True)
    full = training.train(task.replace(run_name="full"), print_fn=lambda line: None)
    cut = task.replace(run_name="cut")
    with pytest.raises(preemption.Preempted) as stopped:
        training.train(cut, print_fn=_stop_at("(0, 1)", []))
    assert stopped.value.step == 2
    lines = []
    resumed = training.train(cut.replace(resume=True), print_fn=lines.append)
    assert f"resumed from {stopped.value.checkpoint} at step 2" in lines
    steps = task.config.steps_per_epoch * task.config.epochs
    final_full = _checkpoint_tensors(os.path.join(str(tmp_path), "full", "checkpoints", f"ckpt-{steps}"))
    final_cut = _checkpoint_tensors(os.path.join(str(tmp_path), "cut", "checkpoints", f"ckpt-{steps}"))
    assert final_full.keys() == final_cut.keys() and any("moving_mean" in k for k in final_full) == (family == "bn_cnn")
    for key in final_full:
        np.testing.assert_array_equal(final_full[key], final_cut[key], err_msg=key)
    assert resumed.logs["val_loss"] == full.logs["val_loss"] and resumed.steps == steps - 2
