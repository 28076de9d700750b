"""One training run of a `tfmp.run.tasks.Task`, from a checked config to a trained model.

`Runner(task).run()` is what `tfmp.run.training.train_gan` and
`train_classifier` do. In order:

1. `config.validate()` (pure, once), then the `tf.distribute` strategy
   (`build_strategy`): the one the runner was handed, or else made here
   (first: `MultiWorkerMirroredStrategy` must precede other TensorFlow ops,
   so a caller that imports user code first makes it before that and hands
   it on, as `scripts/train.py` does for `--task`);
2. `tfmp.run.settled.settle`: XLA, the data, the steps of an epoch, the
   precision (`auto` measured on this device by training each candidate
   briefly, cached per device and model), the loss scale and the run's name;
   from here on the run reads the task's config and this one `Settled`;
3. the directories (`build_directories`): the run directory decided here, once
   (`<logdir>/<run_name>`), created once, each checked writable as it is made,
   and held with a `tfmp.run.directories.RunDirLock` on the chief so no other run
   writes there; a failure or Ctrl-C before the first step removes what
   was created (`Interrupted`);
4. the task's trainer (`build_trainer`), built under the precision's global policy (restored
   after), TF32 and op-determinism settings, in the strategy's scope;
5. the checkpoint (`build_checkpoint`, `tfmp.run.checkpoint.RunCheckpoint`): a run without
   `resume` refuses a directory that already holds checkpoints; with it,
   the newest readable one is restored and the data stream replayed to its
   step;
6. the callbacks (`build_callbacks`): step timer, console, TensorBoard summaries, the task's
   own, diagnostics and profiling when asked, the non-finite stop, and the
   checkpointing that SIGTERM/SIGINT (`tfmp.run.preemption`) also trigger;
7. `fit()` in segments (`fit`), under the preemption guard
   (`build_preemption`): a run resumed mid-epoch first finishes that epoch
   (`tfmp.run.callbacks.RunSegment` shows the callbacks one run).

Each part is built by a method a subclass may override (`Runner.build_*`),
and kept on the runner (`Runner.settled`, `Runner.trainer`, `Runner.timer`...)
for the parts built after it: `run` and `_train` build them all, in this
order, in one place.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import keras
import tensorflow as tf

from tfmp import _deprecated, trainers
from tfmp import precision as precision_lib
from tfmp.run import callbacks as callbacks_lib
from tfmp.run import checkpoint as checkpoint_lib
from tfmp.run import determinism, diagnostics, directories, distribute, memory_meters, output, preemption
from tfmp.run.callbacks.display import announce_float32_layers
from tfmp.run.config import ConfigError
from tfmp.run.directories import Directories, make_writable_dir
from tfmp.run.settled import Settled, settle
from tfmp.run.tasks import Built, Task

__all__ = ["Interrupted", "RunResult", "Runner", "make_writable_dir"]

log = logging.getLogger(__name__)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) during a run's start-up, before its first step.

    Nothing was trained, and the run removed the lock and the empty
    directories it had made. (Once training runs, SIGINT instead finishes
    the step and checkpoints: `tfmp.run.preemption.Preempted`.)
    """


@dataclasses.dataclass
class RunResult:
    """What a training run returns.

    Attributes:
        logs: The last epoch's logs (losses, metrics, loss scales, skipped
            steps, learning rates, and the throughput: `images_per_sec`, or
            `examples_per_sec` for a task whose `example_unit` is `"ex"`).
        throughput: Mean throughput after the warm-up steps, in
            `throughput_unit` (None if every step was warm-up).
        throughput_unit: What `throughput` counts: `"img/s"` (images per
            second) or `"ex/s"` (examples per second), as the console shows it.
        steps: Training steps run.
        warmup_steps: Steps left out of `throughput`.
        tensorboard_dir: The run's TensorBoard directory (under the config's
            `logdir`, the parent of every run's).
        precision: The precision used (`auto` resolved).
        loss_scale: `"dynamic"`, `"none"` or the fixed scale in force
            (`"none"` unless the precision is `mixed_float16`).
        xla: Whether the whole step was compiled with XLA.
        trainer: The trained `tfmp.trainers` model.
    """

    logs: dict[str, Any]
    throughput: float | None
    throughput_unit: str
    steps: int
    warmup_steps: int
    tensorboard_dir: str
    precision: str
    loss_scale: str | float
    xla: bool
    trainer: trainers.MixedPrecisionTrainer

    @property
    def logdir(self) -> str:
        """Deprecated: `tensorboard_dir` (the config's `logdir` is the parent of every run's directory)."""
        _deprecated.warn("RunResult.logdir")
        return self.tensorboard_dir

    @property
    def jit_compile(self) -> bool:
        """Deprecated: `xla`, the setting's name."""
        _deprecated.warn("RunResult.jit_compile")
        return self.xla

    @property
    def images_per_sec(self) -> float | None:
        """Deprecated: `throughput` (in `throughput_unit`, examples for a task without images)."""
        _deprecated.warn("RunResult.images_per_sec")
        return self.throughput

    @property
    def skipped_steps(self) -> int:
        """Skipped steps summed over the run's loss-scaled optimizers."""
        return int(sum(v for k, v in self.logs.items() if k.endswith("skipped_steps") and not k.startswith("val_")))


# -- the run ------------------------------------------------------------------------


def _cluster(strategy: tf.distribute.Strategy) -> dict[str, list[str]]:
    """The chief and worker addresses of a multi-worker strategy's cluster; empty with one worker."""
    if distribute.task(strategy)[0] is None:
        return {}
    spec = strategy.cluster_resolver.cluster_spec().as_dict()
    cluster = {role: list(spec[role]) for role in ("chief", "worker") if spec.get(role)}
    return cluster if sum(len(addresses) for addresses in cluster.values()) > 1 else {}


class Runner:
    """Runs one task, each part built by a method a subclass may override, and kept on `self`.

    `run` calls `build_strategy`, `build_directories` (the run directory and
    its lock), `build_trainer`, `build_checkpoint`, `build_timer`,
    `build_console`, `build_callbacks`, `build_preemption` and `fit`, in that
    order. Each takes no run state as arguments: it reads what the parts
    before it built, from the attributes below, the task's config
    (`task.config`, the run's one handle on it) and what that config settled
    to (`settled`, a `tfmp.run.settled.Settled`). So a subclass may reorder
    the callbacks, or add its own, by overriding `build_callbacks` alone:

    ```python
    class WithMyCallback(Runner):
        def build_callbacks(self):
            return [MyCallback(self.directories.tensorboard_dir), *super().build_callbacks()]
    ```

    Args:
        task: The model and its config.
        print_fn: Where the run's lines go (`tfmp.run.output.lines_to`); None: nowhere.
        callbacks: More callbacks for this run, after the task's own (they
            see every segment of a resumed run as one run).
        strategy: The run's `tf.distribute` strategy, made by the caller
            (`tfmp.run.distribute.make_strategy`) before anything that may
            run TensorFlow operations, such as importing the task's module;
            it must be of the kind `config.strategy` names
            (`tfmp.run.distribute.name_of`). None: the runner makes the one
            the config names (`make_strategy` returns the one this process
            made before, if any).

    Attributes, each set as `run` builds it:
        task: The model and its config.
        strategy: The handed strategy, then the run's (`build_strategy`).
        settled: What the task's config settled to (`tfmp.run.settled.settle`).
        directories: The `tfmp.run.directories.Directories` the run holds
            (its `run_dir` the one run directory).
        trainer, checkpoint: What `build_trainer` and `build_checkpoint` built.
        position: The global step the run starts from (a resumed run's).
        timer, console: The `StepTimer` and `ConsoleLogger` `RunResult` reads.
        checkpointing: The `Checkpointing` callback (`build_preemption`).
        callbacks: Every callback of the run, in the order `fit` hands them on.
    """

    # What `run` builds, in order; each is set by `run` or `_train`, never before.
    settled: Settled
    directories: Directories
    trainer: trainers.MixedPrecisionTrainer
    checkpoint: checkpoint_lib.RunCheckpoint
    position: int
    timer: callbacks_lib.StepTimer
    console: callbacks_lib.ConsoleLogger
    checkpointing: callbacks_lib.Checkpointing
    callbacks: list[keras.callbacks.Callback]

    def __init__(
        self,
        task: Task,
        print_fn: Callable[[str], None] | None = print,
        callbacks: Sequence[keras.callbacks.Callback] = (),
        strategy: tf.distribute.Strategy | None = None,
    ):
        self.task = task
        self.print_fn = print_fn
        self.extra_callbacks = list(callbacks)
        self.strategy = strategy

    def run(self) -> RunResult:
        """Trains the task as its config says; see the module docstring.

        Raises:
            ConfigError: for an impossible setting, before training.
            tfmp.run.data.DatasetNotFoundError: when the dataset is not available.
            Interrupted: Ctrl-C before the first step (nothing left behind).
            tfmp.run.preemption.Preempted: SIGTERM/SIGINT during training (to
                any worker of a multi-worker run), after the checkpoint is written.
            tfmp.run.preemption.WorkerLost: another worker of a multi-worker run
                stopped answering.
        """
        held: list[Directories] = []  # the directories, once held: Ctrl-C after the first step is not start-up
        with output.lines_to(self.print_fn):
            try:
                self.task.config.validate()
                self.strategy = self.build_strategy()  # first: MultiWorkerMirroredStrategy must precede other TF ops
                self.settled = settle(self.task)
                with self.build_directories() as self.directories:
                    held.append(self.directories)
                    return self._train()
            except KeyboardInterrupt:
                if held and held[0].training_started:
                    raise  # a second Ctrl-C while the first one's checkpoint was being written
                raise Interrupted(
                    "interrupted by SIGINT (Ctrl-C) during start-up, before the first training step: nothing was "
                    "trained or written. Run the same command again to start."
                ) from None

    def build_strategy(self) -> tf.distribute.Strategy:
        """The run's `tf.distribute` strategy (handed in, or made), with the global batch checked against its replicas.

        Raises:
            ConfigError: for a strategy `make_strategy` refuses, a handed
                strategy of another kind than `config.strategy`, or a global
                batch that does not split across the replicas.
        """
        config = self.task.config
        try:
            strategy = self.strategy
            if strategy is None:
                strategy = distribute.make_strategy_for(config)
            elif distribute.name_of(strategy) != config.strategy:
                # The config's name labels the run (start line, hparams, checkpoint settings): it must not lie.
                raise ConfigError(
                    f"names another kind of strategy than the {type(strategy).__name__} "
                    f"({distribute.name_of(strategy)!r}) handed to the run; make it with "
                    f"make_strategy(config.strategy) or set strategy={distribute.name_of(strategy)!r}.",
                    "strategy",
                    config.strategy,
                )
            distribute.per_replica_batch(config.batch_size, strategy)
        except ConfigError:
            raise
        except ValueError as e:
            raise ConfigError(str(e)) from None
        return strategy

    def build_directories(self) -> contextlib.AbstractContextManager[Directories]:
        """The run's directories, created and held while the block runs (`tfmp.run.directories.hold`).

        The directories' `run_dir` is the run's one run directory, decided
        here: `<logdir>/<run_name>`, or, for a default run name another run
        took in the same second, the same with a `-2` suffix.
        """
        config = self.task.config
        run_dir = os.path.join(config.logdir, self.settled.run_name)
        return directories.hold(run_dir, bool(config.run_name), config.checkpoint_dir, self.strategy)

    def build_trainer(self) -> Built:
        """The task's trainer, built in the strategy's scope under the run's precision (its scope is entered)."""
        settled = self.settled
        with self.strategy.scope():  # models, optimizers (and their loss scales), metrics: one copy per replica
            built = self.task.build(
                settled.precision, settled.loss_scale, settled.xla, settled.steps_per_epoch, settled.data
            )
        announce_float32_layers(self.task, built, settled.precision)
        return built

    def build_checkpoint(self) -> checkpoint_lib.RunCheckpoint:
        """The run's checkpoint, signed with what a resumed run must share with this one."""
        config, settled, dirs = self.task.config, self.settled, self.directories
        signature = checkpoint_lib.run_signature(config, settled.precision, settled.loss_scale, self.trainer)
        return checkpoint_lib.RunCheckpoint(
            dirs.checkpoint_dir, self.trainer, signature, config.keep_checkpoints, dirs.run_checkpoints
        )

    def build_timer(self) -> callbacks_lib.StepTimer:
        """The step timer: the throughput after the warm-up steps, in the task's unit."""
        config = self.task.config
        return callbacks_lib.StepTimer(
            config.batch_size * self.trainer.images_per_example, config.warmup_steps, self.task.example_unit
        )

    def build_console(self) -> callbacks_lib.ConsoleLogger:
        """The console: a line every `log_every` steps and one per epoch, or a progress bar."""
        return callbacks_lib.ConsoleLogger(
            self.timer,
            self.task.console_fields(),
            self.trainer.loss_scale_prefixes,
            self.settled.log_every,
            self.directories.run_dir,
            # A bar bypasses the lines (it writes to sys.stdout), so auto only picks it for print on a terminal.
            progress=callbacks_lib.console_mode(
                self.task.config.console, sys.stdout if self.print_fn is print else None
            )
            == "progress",
        )

    def build_callbacks(self) -> list[keras.callbacks.Callback]:
        """The step timer and the console first, the summaries, then replica statistics, the task's own and
        the extra callbacks, gradient diagnostics and profiling when asked, and the non-finite stop.

        The checkpointing comes last, from `build_preemption`.
        """
        settled, task, position = self.settled, self.task, self.position
        config, data, tensorboard_dir = task.config, settled.data, self.directories.tensorboard_dir
        # At the global step, so that a resumed run continues its per-step curves.
        summaries = callbacks_lib.Summaries(
            tensorboard_dir, task.summary_route, self._hparams(), settled.log_every, position, self.timer
        )
        # First of the callbacks that read the weights: every replica then holds the same BatchNorm statistics.
        callbacks = [self.timer, self.console, summaries, distribute.AverageReplicaStatistics()]
        callbacks += [*task.callbacks(self.trainer, tensorboard_dir), *self.extra_callbacks]
        if config.diagnose_every:
            probe = task.probe(data)
            callbacks.append(callbacks_lib.GradientDiagnostics(probe, config.diagnose_every, tensorboard_dir))
        if config.profile_steps:
            callbacks.append(callbacks_lib.ProfileSteps(*config.profile_steps, tensorboard_dir))
        if config.on_nonfinite == "stop":
            callbacks.append(
                callbacks_lib.NonFiniteStop(lambda step: next(iter(task.stream(data, step).take(1))), position)
            )
        allocator = memory_meters.AllocatorMemory.of_this_process()
        if allocator is not None:  # a GPU, or a CPU with TF_CPU_ALLOCATOR_USE_BFC=true
            callbacks.append(callbacks_lib.PeakMemory(tensorboard_dir, allocator))
        return callbacks

    def build_preemption(self, guard: preemption.PreemptionGuard) -> callbacks_lib.Checkpointing:
        """The checkpointing callback: every `checkpoint_every` steps, at each epoch end, and when `guard` is
        signalled (SIGTERM/SIGINT), for every worker of a multi-worker run at the same step."""
        cluster = _cluster(self.strategy)
        return callbacks_lib.Checkpointing(
            self.checkpoint,
            self.position,
            self.task.config.checkpoint_every,
            guard,
            cluster=preemption.ClusterStop(self.strategy, preemption.worker_names(cluster)) if cluster else None,
        )

    def _train(self) -> RunResult:
        """The run itself, once its directories are held."""
        config, settled, dirs, strategy = self.task.config, self.settled, self.directories, self.strategy
        keras.utils.set_random_seed(config.seed)
        with (
            precision_lib.precision_scope(settled.precision),
            precision_lib.tf32_scope(config.tf32),
            determinism.op_determinism(config.deterministic),
        ):
            self.trainer = self.build_trainer().trainer
            self.checkpoint = self.build_checkpoint()
            self._announce()
            self.position = self._restore(config.resume)
            self.timer = self.build_timer()
            self.console = self.build_console()
            callbacks = self.build_callbacks()
            dirs.training_started = True  # from here on SIGINT/SIGTERM finish the step and checkpoint
            with preemption.PreemptionGuard() as guard:
                self.checkpointing = self.build_preemption(guard)
                self.callbacks = [*callbacks, self.checkpointing]
                try:
                    self.fit()
                except (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.DeadlineExceededError) as e:
                    cluster = _cluster(strategy)
                    if not cluster:
                        raise
                    newest = self.checkpoint.checkpoints[-1] if self.checkpoint.checkpoints else None
                    step = self.checkpointing.step
                    raise preemption.worker_lost(
                        e, cluster, distribute.task(strategy), step, newest, config.worker_timeout
                    ) from None
        return RunResult(
            logs=self.console.final_logs,
            throughput=self.timer.mean_images_per_sec,
            throughput_unit=f"{self.timer.unit}/s",
            steps=len(self.timer.step_times),
            warmup_steps=config.warmup_steps,
            tensorboard_dir=dirs.tensorboard_dir,
            precision=settled.precision,
            loss_scale=settled.loss_scale,
            xla=settled.xla,
            trainer=self.trainer,
        )

    def _announce(self) -> None:
        """The run's start line, and the model's mixed-precision warnings."""
        config, settled = self.task.config, self.settled
        described_data = f"{described} " if (described := self.task.describe_data()) else ""
        log.info(
            f"training {self.task.name}: precision={settled.precision} loss_scale={settled.loss_scale} "
            f"xla={settled.xla} tf32={config.tf32} {described_data}batch_size={config.batch_size} "
            f"strategy={config.strategy} replicas={self.strategy.num_replicas_in_sync} "
            f"steps/epoch={settled.steps_per_epoch} run_dir={self.directories.run_dir}"
        )
        if settled.precision != "float32":
            warnings = diagnostics.startup_warnings(self.trainer, config.batch_size)
            if warnings:
                log.warning(warnings)

    def _hparams(self) -> dict[str, Any]:
        """The run's hyperparameters for TensorBoard's HParams: the task's name, the run's settings, the task's own."""
        config, settled = self.task.config, self.settled
        return {
            "task": self.task.name,
            "precision": settled.precision,
            "loss_scale": str(settled.loss_scale),
            "xla": settled.xla,
            "tf32": config.tf32,
            "batch_size": config.batch_size,
            "epochs": config.epochs,
            "seed": config.seed,
            "strategy": config.strategy,
            "replicas": self.strategy.num_replicas_in_sync,
            **self.task.hparams(),
        }

    def _restore(self, resume: bool) -> int:
        """Restores the newest readable checkpoint when resuming; returns the steps already done.

        Without `resume`, a checkpoint directory that already holds checkpoints
        is refused rather than overwritten.
        """
        checkpoint = self.checkpoint
        if not resume:
            # Listed in the state file or not: a lost state file must not let a new run overwrite them.
            if checkpoint.checkpoints:
                raise ConfigError(
                    f"{checkpoint.read_directory} already holds checkpoints of a run (newest: "
                    f"{checkpoint.checkpoints[-1]}). Pass resume=True to continue it, or choose another run_name or "
                    "checkpoint_dir."
                )
            return 0
        found = checkpoint.latest()
        if found is None:
            log.info(f"resume: no checkpoint in {checkpoint.directory} yet; starting from step 0")
            return 0
        step = checkpoint.restore(found)
        log.info(f"resumed from {found.path} at step {step}")
        return step

    def fit(self) -> None:
        """Trains `trainer` with `callbacks` from global step `position` to the end of the last epoch.

        A run resumed inside an epoch first finishes that epoch with its own
        `fit()`; `tfmp.run.callbacks.RunSegment` shows the callbacks one run.
        """
        settled, position, callbacks = self.settled, self.position, self.callbacks
        data, steps, epochs = settled.data, settled.steps_per_epoch, self.task.config.epochs
        validation = self.task.validation_data(data)
        epoch, offset = divmod(position, steps)
        segments = []
        if offset:
            segments.append((epoch, epoch + 1, steps - offset, offset))
            epoch += 1
        if epoch < epochs:
            segments.append((epoch, epochs, steps, 0))
        for i, (first_epoch, end_epoch, segment_steps, offset) in enumerate(segments):
            self.trainer.fit(
                self.task.stream(data, position),
                validation_data=validation,
                initial_epoch=first_epoch,
                epochs=end_epoch,
                steps_per_epoch=segment_steps,
                callbacks=[
                    callbacks_lib.RunSegment(
                        callback, i == 0, i == len(segments) - 1, offset, {"steps": steps, "epochs": epochs}
                    )
                    for callback in callbacks
                ],
                shuffle=False,  # the pipeline shuffles
                verbose=0,
            )
            position += (end_epoch - first_epoch) * segment_steps
