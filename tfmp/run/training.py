"""Training runs: a task (or a config) in, a trained model and its logs out.

`train(task)` trains any `tfmp.run.tasks.Task`: a model of your own
(`tasks.SupervisedTask`, or a subclass of `Task`) or a shipped one.
`train_gan(GANConfig(...))` trains the original tutorial's GAN and
`train_classifier(ClassifierConfig(...))` the MobileNetV2 classifier. Each:

1. validate the config and refuse impossible settings before any training
   (`ConfigError`, naming the value);
2. resolve the precision, loss scale and XLA, and print a one-line note
   when a loss scale is given that the precision does not use;
3. load the data (`tfmp.run.data`), build the model under the precision's
   global policy (restored afterwards), and `fit()` a `tfmp.trainers`
   trainer with the callbacks of `tfmp.run.callbacks`: the tutorial's console line,
   per-epoch TensorBoard curves and the run's hyperparameters under
   `<logdir>/<run_name>/`.

Under mixed precision a run first prints the `tfmp.run.diagnostics` pitfalls it
finds (Tensor Core alignment, 16-bit outputs); `diagnose_every` logs the
gradients' float16 underflow and overflow fractions during training.

`compare_loss_scaling` runs the tutorial's three GAN configurations side by
side; `diagnose` builds a task's run and diagnoses its first batch without
training (`diagnose_run` does so for a shipped model's config).

This module is the entry point; the work is done by `tfmp.run.config` (the
settings), `tfmp.run.tasks` (what a config builds) and `tfmp.run.runner` (the run).
The scripts in `scripts/` are thin absl front ends to these functions.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Callable, Sequence

import keras
import tensorflow as tf

from tfmp import precision as precision_lib
from tfmp.run import callbacks, checkpoint, data, diagnostics, directories, output, shipped, tasks, trainer_contract
from tfmp.run import runner as runner_lib
from tfmp.run import settled as settled_lib
from tfmp.run.callbacks import display
from tfmp.run.config import (
    LR_SCHEDULES,
    ON_NONFINITE,
    ClassifierConfig,
    ConfigError,
    GANConfig,
    ImageConfig,
    TrainConfig,
)
from tfmp.run.directories import default_run_name
from tfmp.run.runner import Interrupted, RunResult

__all__ = [
    "COMPARISON",
    "ClassifierConfig",
    "ConfigError",
    "GANConfig",
    "ImageConfig",
    "Interrupted",
    "LR_SCHEDULES",
    "ON_NONFINITE",
    "RUN_ERRORS",
    "RunResult",
    "TrainConfig",
    "compare_loss_scaling",
    "comparison_table",
    "default_run_name",
    "diagnose",
    "diagnose_run",
    "train",
    "train_classifier",
    "train_gan",
]

log = logging.getLogger(__name__)

# What a run raises for a cause outside tfmp's code, each message saying what to do about it: missing or corrupt
# data, a checkpoint it cannot write or resume from, a run directory another run holds, a non-finite stop, a
# trainer of the user's own that lacks a piece of its contract.
RUN_ERRORS = (
    data.DatasetNotFoundError,
    data.CorruptDatasetError,
    checkpoint.CheckpointError,
    directories.RunDirInUseError,
    callbacks.NonFiniteStepError,
    trainer_contract.TrainerContractError,
)


def train(
    task: tasks.Task, print_fn: Callable[[str], None] | None = print, *, strategy: tf.distribute.Strategy | None = None
) -> RunResult:
    """Trains `task` as its config says; see the module docstring.

    Args:
        task: The model and its config.
        print_fn: Where the run's lines go (`tfmp.run.output.lines_to`); None: nowhere.
        strategy: The `tf.distribute` strategy to train under, of the kind
            `task.config.strategy` names, made before the task (a
            `MultiWorkerMirroredStrategy` must come before any other
            TensorFlow operation, and a task module may build its optimizer
            when imported):

            ```python
            strategy = distribute.make_strategy("multi_worker")
            task = task_loader.load("my_tasks.py:TASK").with_config(strategy="multi_worker")
            training.train(task, strategy=strategy)
            ```

            None: the run makes the one the config names
            (`tfmp.run.distribute.make_strategy`, which returns the one this
            process made before, if any).

    Raises:
        ConfigError: for an impossible setting, before training.
        tfmp.run.data.DatasetNotFoundError: when a shipped dataset is not available.
        tfmp.run.trainer_contract.TrainerContractError: when the task's trainer lacks a piece of its
            contract (a trainer of your own), before training.
        tfmp.run.runner.Interrupted, tfmp.run.preemption.Preempted: see `tfmp.run.runner.Runner.run`.
    """
    return runner_lib.Runner(task, print_fn, strategy=strategy).run()


def train_gan(
    config: GANConfig, print_fn: Callable[[str], None] | None = print, *, strategy: tf.distribute.Strategy | None = None
) -> RunResult:
    """Trains the original tutorial's GAN as `config` says; see the module docstring.

    Args:
        config: The run's settings.
        print_fn: Where the run's lines go (`tfmp.run.output.lines_to`); None: nowhere.
        strategy: The strategy to train under, made before (see `train`); None: the one `config.strategy` names.

    Raises:
        ConfigError: for an impossible setting, before training.
        tfmp.run.data.DatasetNotFoundError: when the dataset is not available.
    """
    return train(shipped.GANTask(config), print_fn, strategy=strategy)


def train_classifier(
    config: ClassifierConfig,
    print_fn: Callable[[str], None] | None = print,
    *,
    strategy: tf.distribute.Strategy | None = None,
) -> RunResult:
    """Trains the MobileNetV2 classifier as `config` says; see the module docstring.

    Args:
        config: The run's settings.
        print_fn: Where the run's lines go (`tfmp.run.output.lines_to`); None: nowhere.
        strategy: The strategy to train under, made before (see `train`); None: the one `config.strategy` names.

    Raises:
        ConfigError: for an impossible setting, before training.
        tfmp.run.data.DatasetNotFoundError: when the dataset is not available.
    """
    return train(shipped.ClassifierTask(config), print_fn, strategy=strategy)


def diagnose_run(config: TrainConfig, print_fn: Callable[[str], None] | None = print) -> diagnostics.Diagnosis:
    """`diagnose` of the shipped model `config` describes (`tfmp.run.shipped.task_for`)."""
    return diagnose(shipped.task_for(config), print_fn)


def diagnose(task: tasks.Task, print_fn: Callable[[str], None] | None = print) -> diagnostics.Diagnosis:
    """Builds the run of `task` and diagnoses it on its first batch.

    Nothing is trained. The trainer is built and compiled exactly as
    `train` would build it, under the config's precision and loss scale, on
    one device (`config.strategy` is not used: the reports concern one
    batch's numerics); `tfmp.run.diagnostics.diagnose` then runs the four
    reports on the task's probe batch (its first `batch_size` training
    examples; the alignment report checks `batch_size` itself). With
    `config.run_name` set, the gradient histograms are also written to
    `<logdir>/<run_name>`, holding that directory
    (`tfmp.run.directories.RunDirLock`) as a training run does, so that neither
    writes into the other's.

    Args:
        task: The model and its config.
        print_fn: Where the lines go (the settling's notes, the diagnosis's
            tables, `tfmp.run.output.lines_to`); None: nowhere.

    Raises:
        ConfigError: for an impossible setting.
        tfmp.run.data.DatasetNotFoundError: when a shipped dataset is not available.
        tfmp.run.directories.RunDirInUseError: when another run (a training run)
            holds `<logdir>/<run_name>`, naming it, before anything is built.
        tfmp.run.trainer_contract.TrainerContractError: when the task's trainer
            lacks a piece of its contract, `objectives` and `float32_copy` included.
    """
    config = task.config
    with output.lines_to(print_fn), contextlib.ExitStack() as held:
        settled = settled_lib.resolve(task, check_steps=False)
        run_dir = os.path.join(config.logdir, settled.run_name)  # only when the user named it: no run claims it
        if config.run_name:
            runner_lib.make_writable_dir("logdir", run_dir)
            held.enter_context(directories.RunDirLock(run_dir))
        keras.utils.set_random_seed(config.seed)
        with precision_lib.precision_scope(settled.precision):
            built = task.build(settled.precision, settled.loss_scale, False, 1, settled.data)
            needed = dict.fromkeys(("objectives", "float32_copy"), "tfmp.run.training.diagnose")
            trainer_contract.check_trainer(built.trainer, needed)
            display.announce_float32_layers(task, built, settled.precision)
            described_data = f" {described}" if (described := task.describe_data()) else ""
            log.info(
                f"diagnosing {task.name}: precision={settled.precision} "
                f"loss_scale={settled.loss_scale} batch_size={config.batch_size}{described_data}\n"
            )
            diagnosis = diagnostics.diagnose(built.trainer, task.probe(settled.data), batch_size=config.batch_size)
            log.info(str(diagnosis))
        if config.run_name:
            diagnostics.write_gradient_summaries(diagnosis.gradients, run_dir, step=0)
            log.info(f"\nlog2|g| histograms: tensorboard --logdir {run_dir}")
    return diagnosis


COMPARISON = (
    ("float32", "float32", "none"),
    ("mixed_float16_no_loss_scale", "mixed_float16", "none"),
    ("mixed_float16_dynamic_loss_scale", "mixed_float16", "dynamic"),
)


def compare_loss_scaling(
    config: GANConfig, print_fn: Callable[[str], None] | None = print
) -> list[tuple[str, RunResult]]:
    """Runs the tutorial's three GAN configurations under one parent directory.

    float32; mixed_float16 without loss scaling; mixed_float16 with dynamic
    loss scaling. Everything else comes from `config`; the runs are written
    to `<config.logdir>/<name>` so TensorBoard overlays them.

    Args:
        config: The settings the three runs share.
        print_fn: Where the lines of all three runs go, each run after a
            `== name ==` line.

    Returns:
        `(name, RunResult)` per configuration, in the order above.
    """
    results = []
    with output.lines_to(print_fn):
        for name, precision, loss_scale in COMPARISON:
            log.info(f"== {name} ==")
            variant = dataclasses.replace(config, precision=precision, loss_scale=loss_scale, run_name=name)
            results.append((name, train_gan(variant, print_fn=print_fn)))
    return results


def comparison_table(results: Sequence[tuple[str, RunResult]]) -> str:
    """A markdown table of final G/D loss, skipped steps and throughput."""
    lines = [
        "| run | final G loss | final D loss | skipped steps (G/D) | img/s |",
        "|---|---|---|---|---|",
    ]
    for name, result in results:
        logs = result.logs
        skipped = "/".join(str(int(logs[k])) for k in ("g_skipped_steps", "d_skipped_steps") if k in logs) or "-"
        ips = f"{result.throughput:.0f}" if result.throughput is not None else "n/a"
        lines.append(f"| {name} | {logs['g_loss']:.4f} | {logs['d_loss']:.4f} | {skipped} | {ips} |")
    return "\n".join(lines)
