"""Tests for tfmp/run/runner.py: what `Runner(task).run()` itself does.

Whole runs of every precision, `auto`'s measurement, exact resume, the
checkpoint signature and a directory held by another run are tested through
`tfmp.run.training` (tests/run/test_training.py, test_checkpoint.py); here are
the Runner's own decisions: the directory it claims, the locks it releases
however the run ends, the callbacks and hyperparameters it assembles, the
`fit()` segments of a resumed run and what `RunResult` reports.
"""

import dataclasses
import os
import re
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorboard.plugins.hparams import plugin_data_pb2
from tiny import TINY_GAN, quiet, tiny

from tfmp import trainers
from tfmp.run import directories, memory_meters, runner, shipped


def _record_fits(monkeypatch):
    """Records each `fit()` call of the run: its epochs and steps, and the callbacks each `RunSegment` wraps."""
    fits = []
    real_fit = trainers.MixedPrecisionTrainer.fit

    def fit(model, *args, **kwargs):
        segments = kwargs["callbacks"]
        fits.append(
            {
                "epochs": (kwargs["initial_epoch"], kwargs["epochs"]),
                "steps_per_epoch": kwargs["steps_per_epoch"],
                "first_last_offset": (segments[0].first, segments[0].last, segments[0].batch_offset),
                "callbacks": [type(segment.callback).__name__ for segment in segments],
            }
        )
        return real_fit(model, *args, **kwargs)

    monkeypatch.setattr(trainers.MixedPrecisionTrainer, "fit", fit)
    return fits


# --- whole runs ---------------------------------------------------------------------------


def test_a_run_claims_a_new_directory_beside_one_taken_in_the_same_second(tmp_path, monkeypatch):
    monkeypatch.setattr(directories, "default_run_name", lambda precision, loss_scale, name="": "same-second")
    taken = tmp_path / "same-second"
    taken.mkdir()
    (taken / "other-run.txt").write_text("another run's file")
    result = runner.Runner(tiny(tmp_path), print_fn=quiet).run()
    assert result.tensorboard_dir == str(tmp_path / "same-second-2")
    assert os.path.isfile(tmp_path / "same-second-2" / "checkpoints" / "ckpt-2.index")
    assert os.listdir(taken) == ["other-run.txt"]


class _FailingTask(shipped.GANTask):
    """The tiny GAN, with `error` raised while its model is built (`at="build"`) or after its first step."""

    def __init__(self, config, error, at):
        super().__init__(config)
        self.error, self.at = error, at

    def build(self, *args, **kwargs):
        if self.at == "build":
            raise self.error
        return super().build(*args, **kwargs)

    def callbacks(self, trainer, tensorboard_dir):
        task = self

        class RaiseAfterFirstStep(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                raise task.error

        return [*super().callbacks(trainer, tensorboard_dir), *([RaiseAfterFirstStep()] if self.at == "step" else [])]


@pytest.mark.parametrize(
    "error, at, raised, kept",
    [
        (None, None, None, True),
        (RuntimeError("boom"), "step", RuntimeError, True),
        # Once training runs, a KeyboardInterrupt is not start-up's Interrupted: the run may have written.
        (KeyboardInterrupt(), "step", KeyboardInterrupt, True),
        (RuntimeError("boom"), "build", RuntimeError, False),
        (KeyboardInterrupt(), "build", runner.Interrupted, False),
    ],
    ids=["finished", "failed-training", "interrupted-training", "failed-start-up", "interrupted-start-up"],
)
def test_the_directory_locks_are_released_however_the_run_ends(error, at, raised, kept, tmp_path):
    config = dataclasses.replace(TINY_GAN, logdir=str(tmp_path / "logs"), run_name="run")
    run = runner.Runner(_FailingTask(config, error, at), print_fn=quiet)
    if raised is None:
        run.run()
    else:
        with pytest.raises(raised) as caught:
            run.run()
        assert type(caught.value) is raised
    run_dir = tmp_path / "logs" / "run"
    if kept:
        assert not os.path.exists(run_dir / directories.LOCK_FILE)
        assert not os.path.exists(run_dir / "checkpoints" / directories.LOCK_FILE)
        with directories.RunDirLock(str(run_dir)):  # free for the next run
            pass
    else:
        assert os.listdir(tmp_path) == []  # before the first step: the directories made and the locks, all gone


@pytest.mark.parametrize(
    "changes, asked",
    [
        ({}, []),
        (
            {"diagnose_every": 1, "profile_steps": (1, 1), "on_nonfinite": "stop"},
            ["GradientDiagnostics", "ProfileSteps", "NonFiniteStop"],
        ),
    ],
    ids=["plain", "diagnostics-profile-stop"],
)
def test_the_run_has_the_callbacks_its_config_asks_for_and_no_others(changes, asked, tmp_path, monkeypatch):
    fits = _record_fits(monkeypatch)
    runner.Runner(tiny(tmp_path, steps_per_epoch=1, **changes), print_fn=quiet).run()
    (fit,) = fits
    # The timer first (the others read it), the checkpointing last (it saves what the others did).
    assert fit["callbacks"] == [
        "StepTimer",
        "ConsoleLogger",
        "Summaries",
        "AverageReplicaStatistics",
        "GeneratorSamples",
        *asked,
        # The peak memory where this machine's allocator keeps statistics (a GPU, the CPU's BFC allocator, or a
        # CPU allocator TensorFlow's CUDA platform switched on): asked of the allocator, as the runner asks.
        *(["PeakMemory"] if memory_meters.AllocatorMemory.of_this_process() is not None else []),
        "Checkpointing",
    ]


def _recorded_hparams(logdir):
    """The hyperparameters a run recorded with the HParams plugin in `logdir`, by name."""
    recorded = {}
    for name in os.listdir(logdir):
        if name.startswith("events"):
            for event in tf.compat.v1.train.summary_iterator(os.path.join(logdir, name)):
                for value in event.summary.value:
                    if value.metadata.plugin_data.plugin_name == "hparams":
                        data = plugin_data_pb2.HParamsPluginData.FromString(value.metadata.plugin_data.content)
                        for key, hparam in data.session_start_info.hparams.items():
                            recorded[key] = getattr(hparam, hparam.WhichOneof("kind"))
    return recorded


def test_the_hparams_are_the_run_settings_and_the_tasks_own(tmp_path):
    result = runner.Runner(tiny(tmp_path, run_name="run", steps_per_epoch=1, tf32=False, seed=3), print_fn=quiet).run()
    recorded = _recorded_hparams(result.tensorboard_dir)
    assert recorded == {
        "task": "gan",
        "precision": "float32",
        "loss_scale": "none",
        "xla": False,
        "tf32": False,
        "batch_size": 32.0,
        "dataset": "digits",
        "epochs": 1.0,
        "seed": 3.0,
        "strategy": "default",
        "replicas": 1.0,
        "latent_dim": 100.0,
        "generator_learning_rate": pytest.approx(1e-3),
        "discriminator_learning_rate": pytest.approx(1e-4),
    }


def test_the_tasks_name_leads_the_first_line_and_names_the_run_directory_and_hparams(tmp_path):
    # Not the trainer's Keras name (gan_trainer): the task's, made safe for a directory name.
    config = dataclasses.replace(TINY_GAN, logdir=str(tmp_path), steps_per_epoch=1)
    lines = []
    result = runner.Runner(shipped.GANTask(config, name="digits gan/v2"), print_fn=lines.append).run()
    assert lines[0].startswith("training digits gan/v2: precision=float32 loss_scale=none ")
    assert re.fullmatch(r"\d{8}-\d{6}_digits_gan_v2_float32_ls-none", os.path.basename(result.tensorboard_dir))
    assert lines[0].endswith(f" run_dir={result.tensorboard_dir}")  # the run directory, its TensorBoard folder here
    assert _recorded_hparams(result.tensorboard_dir)["task"] == "digits gan/v2"


def _scalars(directory):
    """`{tag: [(step, value), ...]}` of the scalars in the event files of `directory`."""
    values = {}
    for name in sorted(os.listdir(directory)):
        if name.startswith("events"):
            for event in tf.compat.v1.train.summary_iterator(os.path.join(directory, name)):
                for value in event.summary.value:
                    if value.metadata.plugin_data.plugin_name == "scalars":
                        values.setdefault(value.tag, []).append((event.step, float(tf.make_ndarray(value.tensor))))
    return values


def test_each_optimizers_learning_rate_is_a_curve_beside_its_loss_scale_and_in_the_epoch_line(tmp_path):
    lines = []
    result = runner.Runner(tiny(tmp_path, run_name="run", log_every=1), print_fn=lines.append).run()
    rates = {"generator": np.float32(1e-3), "discriminator": np.float32(1e-4)}  # the tutorial's, as float32
    for run, rate in rates.items():
        scalars = _scalars(os.path.join(result.tensorboard_dir, run))
        assert scalars["batch_learning_rate"] == [(1, rate), (2, rate)], run
        assert scalars["epoch_learning_rate"] == [(0, rate)], run
    assert "learning_rate" not in " ".join(_scalars(result.tensorboard_dir))  # not at the run's root
    (epoch_line,) = [line for line in lines if line.startswith("epoch 1/1: ")]
    assert "d_learning_rate 0.0001" in epoch_line and "g_learning_rate 0.001" in epoch_line, epoch_line


def test_a_task_of_your_own_counts_examples_in_the_console_tensorboard_and_its_logs(tmp_path):
    import families

    task = families.CNN_TASK.replace(logdir=str(tmp_path), run_name="run", epochs=1, warmup_steps=0)
    lines = []
    result = runner.Runner(task, print_fn=lines.append).run()
    assert "examples_per_sec" in result.logs and "images_per_sec" not in result.logs
    tags = set(_scalars(os.path.join(result.tensorboard_dir, "train")))
    assert {"batch_examples_per_sec", "epoch_examples_per_sec"} <= tags and not [t for t in tags if "images" in t]
    shown = "\n".join(lines)
    assert "ex/s" in shown and "img/s" not in shown and "images_per_sec" not in shown


@pytest.fixture(scope="module")
def stopped_at_step_3(tmp_path_factory):
    """The directory of a tiny GAN run of one 3-step epoch, which both cases below resume (a copy of it each)."""
    logdir = tmp_path_factory.mktemp("stopped")
    config = dataclasses.replace(TINY_GAN, logdir=str(logdir), run_name="run", steps_per_epoch=3)
    runner.Runner(shipped.GANTask(config), print_fn=quiet).run()  # stops at step 3
    return logdir / "run"


@pytest.mark.parametrize(
    "steps_per_epoch, epochs, expected_fits",
    [
        # Step 3 of 2-step epochs: one step finishes epoch 1 (its batch 0 done), then epoch 2 whole.
        (
            2,
            3,
            [
                {"epochs": (1, 2), "steps_per_epoch": 1, "first_last_offset": (True, False, 1)},
                {"epochs": (2, 3), "steps_per_epoch": 2, "first_last_offset": (False, True, 0)},
            ],
        ),
        # Step 3 of 3-step epochs: an epoch boundary, one fit() for the epochs left.
        (3, 3, [{"epochs": (1, 3), "steps_per_epoch": 3, "first_last_offset": (True, True, 0)}]),
    ],
    ids=["mid-epoch", "epoch-boundary"],
)
def test_a_resumed_run_finishes_a_partial_epoch_in_its_own_fit(
    steps_per_epoch, epochs, expected_fits, stopped_at_step_3, tmp_path, monkeypatch
):
    config = dataclasses.replace(TINY_GAN, logdir=str(tmp_path), run_name="run", steps_per_epoch=3)
    shutil.copytree(stopped_at_step_3, tmp_path / "run")  # a copy: each resume writes into its run
    fits = _record_fits(monkeypatch)
    lines = []
    resumed = dataclasses.replace(config, resume=True, steps_per_epoch=steps_per_epoch, epochs=epochs)
    result = runner.Runner(shipped.GANTask(resumed), print_fn=lines.append).run()
    assert f"resumed from {tmp_path / 'run' / 'checkpoints' / 'ckpt-3'} at step 3" in lines
    assert [{k: v for k, v in fit.items() if k != "callbacks"} for fit in fits] == expected_fits
    assert result.steps == steps_per_epoch * epochs - 3  # this run's steps, not the checkpoint's


def test_the_result_reports_the_steps_and_skipped_steps_of_the_run(tmp_path):
    # 2**24, the largest fixed scale: float16 gradients overflow, and those steps are skipped and counted.
    result = runner.Runner(tiny(tmp_path, precision="fp16", loss_scale=2**24, epochs=2), print_fn=quiet).run()
    assert (result.steps, result.warmup_steps) == (4, 1)
    assert (result.precision, result.loss_scale, result.xla) == ("mixed_float16", 2.0**24, False)
    skipped = sum(int(optimizer.skipped_steps) for optimizer in result.trainer.optimizers.values())
    assert skipped > 0 and result.skipped_steps == skipped
    assert result.throughput > 0 and result.throughput_unit == "img/s"
    with pytest.warns(DeprecationWarning, match=r"`RunResult.images_per_sec` is deprecated; use `RunResult.thr"):
        assert result.images_per_sec == result.throughput
    with pytest.warns(DeprecationWarning, match=r"`RunResult.logdir` is deprecated; use `RunResult.tensorboard_dir`"):
        assert result.logdir == result.tensorboard_dir
    with pytest.warns(DeprecationWarning, match=r"`RunResult.jit_compile` is deprecated; use `RunResult.xla`"):
        assert result.jit_compile is result.xla


class _Recorder(keras.callbacks.Callback):
    """Counts the steps it sees."""

    def __init__(self):
        super().__init__()
        self.steps = 0

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1


class _ReorderingRunner(runner.Runner):
    """A subclass that puts a callback of its own first, and the console after the others (still after the timer,
    whose step time it reads)."""

    def build_callbacks(self):
        self.recorder = _Recorder()
        timer, console, *rest = super().build_callbacks()
        return [self.recorder, timer, *rest, console]


def test_a_runner_subclass_may_reorder_and_add_callbacks(tmp_path, monkeypatch):
    fits = _record_fits(monkeypatch)
    run = _ReorderingRunner(tiny(tmp_path, steps_per_epoch=2, warmup_steps=0), print_fn=quiet)
    result = run.run()
    assert fits[0]["callbacks"][:3] == ["_Recorder", "StepTimer", "Summaries"]
    assert fits[0]["callbacks"][-2:] == ["ConsoleLogger", "Checkpointing"]
    # The result reads the timer and the console the runner keeps, wherever they sit among the callbacks.
    assert (result.steps, run.recorder.steps) == (2, 2) and result.throughput > 0
    assert result.logs is run.console.final_logs and "g_loss" in result.logs
    assert (run.timer, run.console, run.checkpointing) == tuple(run.callbacks[i] for i in (1, -2, -1))
