"""The scripts in examples/, run as a user runs them (a subprocess), shortened to two steps."""

import glob
import math
import os
import pickle
import re
import sys

import pytest
import script_server

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize(
    "name, event_dirs",
    [
        ("custom_loop_tf_keras2.py", ()),
        ("fit_bfloat16.py", ("logs/fit_bfloat16/train", "logs/fit_bfloat16/validation")),
        ("gan_train_step.py", ()),
        ("own_trainer.py", ()),
        # A run of the run framework: its directory is named by the time it started.
        ("text_classifier.py", ("logs/*/train", "logs/*/validation")),
        ("wgan_gp.py", ()),
    ],
)
def test_example_runs_and_ends_with_a_finite_loss(name, event_dirs, tmp_path):
    env = dict(os.environ, TFMP_EXAMPLE_STEPS="2", CUDA_VISIBLE_DEVICES="")
    # cwd is a temporary directory because an example may write TensorBoard logs under ./logs.
    proc = script_server.run(
        [sys.executable, os.path.join(ROOT, "examples", name)],
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("final loss: ") and "(finite: True)" in last, proc.stdout[-3000:]
    losses = [float(v) for v in re.findall(r"(?<![\w.])(?:-?\d+\.\d+|nan|inf)", last.split("(finite:")[0])]
    assert losses and all(math.isfinite(loss) for loss in losses), last
    for pattern in event_dirs:
        assert glob.glob(str(tmp_path / pattern / "events*")), pattern


def test_the_text_classifier_is_a_task_module_for_the_command_line():
    from tfmp.run import task_loader, tasks

    task = task_loader.load(os.path.join(ROOT, "examples", "text_classifier.py") + ":TASK")
    assert isinstance(task, tasks.SupervisedTask) and task.name == "text_classifier"
    assert task.steps_per_epoch(task.load_data()) == 63  # 4,000 reviews in batches of 64
    pickle.loads(pickle.dumps(task))  # the benchmark measures each row in a process of its own


def _own_trainer_task(tmp_path, **changes):
    from tfmp.run import task_loader

    task = task_loader.load(os.path.join(ROOT, "examples", "own_trainer.py") + ":TASK")
    settings = dict(epochs=1, steps_per_epoch=3, batch_size=16, logdir=str(tmp_path), run_name="points")
    return task.with_config(**{**settings, "console": "lines", **changes})


def test_the_own_trainer_trains_as_a_task_with_tensorboard_and_a_checkpoint_it_resumes_from(tmp_path):
    """The fast twin of tests/scripts/test_train_task.py's run of `--task=examples/own_trainer.py:TASK`: the
    resumed run restores the checkpoint, with nothing left to train."""
    from tfmp.run import training

    lines = []
    result = training.train(_own_trainer_task(tmp_path), print_fn=lines.append)
    steps = [line for line in lines if line.startswith("(0, ")]
    assert steps and all(re.match(r"\(0, \d\), D Loss: [\d.]+, G Loss: [\d.]+, loss_scale: ", s) for s in steps)
    assert re.search(r"final D Loss [\d.]+, G Loss [\d.]+$", lines[-2]), lines[-3:]
    assert glob.glob(str(tmp_path / "points" / "train" / "events*"))
    assert os.path.exists(tmp_path / "points" / "checkpoints" / "ckpt-3.index")
    assert {"d_loss", "g_loss", "d_loss_scale", "g_skipped_steps"} <= set(result.logs)

    lines.clear()
    resumed = training.train(_own_trainer_task(tmp_path, resume=True), print_fn=lines.append)
    assert f"resumed from {tmp_path / 'points' / 'checkpoints' / 'ckpt-3'} at step 3" in lines
    weights = [w.numpy() for network in result.trainer.networks.values() for w in network.weights]
    restored = [w.numpy() for network in resumed.trainer.networks.values() for w in network.weights]
    assert all((a == b).all() for a, b in zip(weights, restored, strict=True))
