"""One training run of a `tfmp.run.tasks.Task`, from a checked config to a trained model.

`Runner(task).run()` is what `tfmp.run.training.train_gan` and
`train_classifier` do. In order:

1. `config.validate()` (pure, once), then the `tf.distribute` strategy
   (`build_strategy`): the one the runner was handed, or else made here
   (first: `MultiWorkerMirroredStrategy` must precede other TensorFlow ops,
   so a caller that imports user code first makes it before that and hands
   it on, as `scripts/train.py` does for `--task`);
2. `tfmp.run.setting.settle`: the data, the steps of an epoch, and the
   precision, loss scale and XLA setting (`auto` precision measured on this
   device by training each candidate briefly, cached per device and model);
   from here on the run reads this one `Setting` (and its `config`);
3. the directories (`build_directories`): created once, each checked writable as it is made,
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

Each part is built by a method a subclass may override (`Runner.build_*`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tfmp import float32_layers, trainers
from tfmp import precision as precision_lib
from tfmp.run import callbacks as callbacks_lib
from tfmp.run import checkpoint as checkpoint_lib
from tfmp.run import determinism, diagnostics, directories, distribute, memory_meters, output, preemption
from tfmp.run import epochs as epochs_lib
from tfmp.run.callbacks.display import (
    announce_float32_layers,
    console_fields,
    describe_data,
    example_unit,
    summary_route,
)
from tfmp.run.config import RESUMABLE, ConfigError, TrainConfig
from tfmp.run.directories import Directories, make_writable_dir
from tfmp.run.setting import Setting, settle
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
        images_per_sec: Mean throughput after the warm-up steps, in the
            task's unit (images or examples per second; None if every step
            was warm-up).
        steps: Training steps run.
        warmup_steps: Steps left out of `images_per_sec`.
        logdir: The run's TensorBoard directory.
        precision: The precision used (`auto` resolved).
        loss_scale: `"dynamic"`, `"none"` or the fixed scale in force
            (`"none"` unless the precision is `mixed_float16`).
        jit_compile: Whether the step was XLA-compiled.
        trainer: The trained `tfmp.trainers` model.
    """

    logs: dict[str, Any]
    images_per_sec: float | None
    steps: int
    warmup_steps: int
    logdir: str
    precision: str
    loss_scale: str | float
    jit_compile: bool
    trainer: trainers.MixedPrecisionTrainer

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


def _network_signature(network: keras.Model) -> dict[str, Any]:
    """A network's architecture and per-layer dtype policies, independent of auto-generated layer names."""
    layers = [
        (type(layer).__name__, layer.dtype_policy.name, [list(w.shape) for w in layer.weights])
        for _, layer in float32_layers.layer_paths(network)
    ]
    policies: dict[str, int] = {}
    for _, policy, _ in layers:
        policies[policy] = policies.get(policy, 0) + 1
    return {
        "layers": len(layers),
        "parameters": int(sum(np.prod(w.shape) for w in network.weights)),
        "dtype_policies": policies,
        "structure": hashlib.sha256(json.dumps(layers).encode()).hexdigest()[:16],
    }


def _signature(config: TrainConfig, setting: Setting, trainer: trainers.MixedPrecisionTrainer) -> dict[str, Any]:
    """What a resumed run must share with the run that wrote its checkpoint."""
    return {
        "trainer": type(trainer).__name__,
        checkpoint_lib.SETTINGS_KEY: {k: v for k, v in dataclasses.asdict(config).items() if k not in RESUMABLE},
        "precision": setting.precision,
        "loss_scale": str(setting.loss_scale),
        "networks": {name: _network_signature(network) for name, network in trainer.networks.items()},
        "optimizers": {
            name: type(opt.inner_optimizer if isinstance(opt, keras.optimizers.LossScaleOptimizer) else opt).__name__
            for name, opt in trainer.optimizers.items()
        },
    }


class Runner:
    """Runs one task, each part built by a method a subclass may override.

    `build_strategy`, `build_directories` (the run directory and its lock),
    `build_trainer`, `build_checkpoint`, `build_callbacks`,
    `build_preemption` and `fit` are called in that order by `run`; each
    reads the run's resolved `tfmp.run.setting.Setting` (and its `config`),
    never the task's config beside it.

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
    """

    def __init__(
        self,
        task: Task,
        print_fn: Callable[[str], None] | None = print,
        callbacks: Sequence[keras.callbacks.Callback] = (),
        strategy: tf.distribute.Strategy | None = None,
    ):
        self.task = task
        self.config = task.config
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
        dirs = None
        with output.lines_to(self.print_fn):
            try:
                self.config.validate()
                strategy = self.build_strategy()  # first: MultiWorkerMirroredStrategy must precede other TF ops
                setting = settle(self.task)
                with self.build_directories(setting, strategy) as dirs:
                    setting = dataclasses.replace(setting, run_dir=dirs.run_dir)
                    return self._train(strategy, setting, dirs)
            except KeyboardInterrupt:
                if dirs is not None and dirs.training_started:
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
        config = self.config
        try:
            strategy = self.strategy
            if strategy is None:
                strategy = distribute.make_strategy(
                    config.strategy,
                    cluster=config.cluster,
                    slurm_port_base=config.slurm_port_base,
                    worker_timeout=config.worker_timeout,
                )
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

    def build_directories(
        self, setting: Setting, strategy: tf.distribute.Strategy
    ) -> contextlib.AbstractContextManager[Directories]:
        """The run's directories, created and held while the block runs (`tfmp.run.directories.hold`).

        The directories' `run_dir` is the run's one run directory: the
        setting's, or, for a default run name another run took in the same
        second, the same with a `-2` suffix.
        """
        config = setting.config
        return directories.hold(setting.run_dir, bool(config.run_name), config.checkpoint_dir, strategy)

    def build_trainer(self, setting: Setting, strategy: tf.distribute.Strategy) -> Built:
        """The task's trainer, built in the strategy's scope under the run's precision (its scope is entered)."""
        with strategy.scope():  # models, optimizers (and their loss scales), metrics: one copy per replica
            built = self.task.build(
                setting.precision, setting.loss_scale, setting.jit_compile, setting.steps_per_epoch, setting.data
            )
        announce_float32_layers(self.task, built, setting.precision)
        return built

    def build_checkpoint(
        self, trainer: trainers.MixedPrecisionTrainer, setting: Setting, dirs: Directories
    ) -> checkpoint_lib.RunCheckpoint:
        """The run's checkpoint, signed with what a resumed run must share with this one."""
        signature = _signature(setting.config, setting, trainer)
        return checkpoint_lib.RunCheckpoint(
            dirs.checkpoint_dir, trainer, signature, setting.config.keep_checkpoints, dirs.run_checkpoints
        )

    def build_callbacks(
        self,
        trainer: trainers.MixedPrecisionTrainer,
        setting: Setting,
        strategy: tf.distribute.Strategy,
        dirs: Directories,
        position: int,
    ) -> list[keras.callbacks.Callback]:
        """The step timer and the console first, the summaries, then replica statistics, the task's own and
        the extra callbacks, gradient diagnostics and profiling when asked, and the non-finite stop.

        The checkpointing comes last, from `build_preemption`.
        """
        config, task, data = setting.config, self.task, setting.data
        timer = callbacks_lib.StepTimer(
            config.batch_size * trainer.images_per_example, config.warmup_steps, example_unit(task)
        )
        console = callbacks_lib.ConsoleLogger(
            timer,
            console_fields(task),
            trainer.loss_scale_prefixes,
            setting.log_every,
            setting.run_dir,
            # A bar bypasses the lines (it writes to sys.stdout), so auto only picks it for print on a terminal.
            progress=callbacks_lib.console_mode(config.console, sys.stdout if self.print_fn is print else None)
            == "progress",
        )
        # At the global step, so that a resumed run continues its per-step curves.
        summaries = callbacks_lib.Summaries(
            dirs.writes, summary_route(task), self._hparams(setting, strategy), setting.log_every, position, timer
        )
        # First of the callbacks that read the weights: every replica then holds the same BatchNorm statistics.
        callbacks = [timer, console, summaries, distribute.AverageReplicaStatistics()]
        callbacks += [*task.callbacks(trainer, dirs.writes), *self.extra_callbacks]
        if config.diagnose_every:
            probe = diagnostics.probe(task, data)
            callbacks.append(callbacks_lib.GradientDiagnostics(probe, config.diagnose_every, dirs.writes))
        if config.profile_steps:
            callbacks.append(callbacks_lib.ProfileSteps(*config.profile_steps, dirs.writes))
        if config.on_nonfinite == "stop":
            callbacks.append(callbacks_lib.NonFiniteStop(lambda step: epochs_lib.batch_at(task, data, step), position))
        allocator = memory_meters.AllocatorMemory.of_this_process()
        if allocator is not None:  # a GPU, or a CPU with TF_CPU_ALLOCATOR_USE_BFC=true
            callbacks.append(callbacks_lib.PeakMemory(dirs.writes, allocator))
        return callbacks

    def build_preemption(
        self,
        checkpoint: checkpoint_lib.RunCheckpoint,
        position: int,
        guard: preemption.PreemptionGuard,
        strategy: tf.distribute.Strategy,
        setting: Setting,
    ) -> callbacks_lib.Checkpointing:
        """The checkpointing callback: every `checkpoint_every` steps, at each epoch end, and when `guard` is
        signalled (SIGTERM/SIGINT), for every worker of a multi-worker run at the same step."""
        cluster = _cluster(strategy)
        return callbacks_lib.Checkpointing(
            checkpoint,
            position,
            setting.config.checkpoint_every,
            guard,
            cluster=preemption.ClusterStop(strategy, preemption.worker_names(cluster)) if cluster else None,
        )

    def _train(self, strategy: tf.distribute.Strategy, setting: Setting, dirs: Directories) -> RunResult:
        """The run itself, once its directories are held."""
        config = setting.config
        keras.utils.set_random_seed(config.seed)
        with (
            precision_lib.precision_scope(setting.precision),
            precision_lib.tf32_scope(config.tf32),
            determinism.op_determinism(config.deterministic),
        ):
            trainer = self.build_trainer(setting, strategy).trainer
            checkpoint = self.build_checkpoint(trainer, setting, dirs)
            self._announce(trainer, setting, strategy, dirs)
            position = self._restore(checkpoint, config.resume)
            callbacks = self.build_callbacks(trainer, setting, strategy, dirs, position)
            timer, console = callbacks[0], callbacks[1]
            dirs.training_started = True  # from here on SIGINT/SIGTERM finish the step and checkpoint
            with preemption.PreemptionGuard() as guard:
                saver = self.build_preemption(checkpoint, position, guard, strategy, setting)
                try:
                    self.fit(trainer, setting, position, [*callbacks, saver])
                except (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.DeadlineExceededError) as e:
                    cluster = _cluster(strategy)
                    if not cluster:
                        raise
                    newest = checkpoint.checkpoints[-1] if checkpoint.checkpoints else None
                    raise preemption.worker_lost(
                        e, cluster, distribute.task(strategy), saver.step, newest, config.worker_timeout
                    ) from None
        return RunResult(
            logs=console.final_logs,
            images_per_sec=timer.mean_images_per_sec,
            steps=len(timer.step_times),
            warmup_steps=config.warmup_steps,
            logdir=dirs.writes,
            precision=setting.precision,
            loss_scale=setting.loss_scale,
            jit_compile=setting.jit_compile,
            trainer=trainer,
        )

    def _announce(
        self,
        trainer: trainers.MixedPrecisionTrainer,
        setting: Setting,
        strategy: tf.distribute.Strategy,
        dirs: Directories,
    ) -> None:
        """The run's start line, and the model's mixed-precision warnings."""
        config = setting.config
        described_data = f"{described} " if (described := describe_data(self.task)) else ""
        log.info(
            f"training {self.task.name}: precision={setting.precision} loss_scale={setting.loss_scale} "
            f"xla={setting.jit_compile} tf32={config.tf32} {described_data}batch_size={config.batch_size} "
            f"strategy={config.strategy} replicas={strategy.num_replicas_in_sync} "
            f"steps/epoch={setting.steps_per_epoch} logdir={dirs.writes}"
        )
        if setting.precision != "float32":
            warnings = diagnostics.startup_warnings(trainer, config.batch_size)
            if warnings:
                log.warning(warnings)

    def _hparams(self, setting: Setting, strategy: tf.distribute.Strategy) -> dict[str, Any]:
        """The run's hyperparameters for TensorBoard's HParams: the task's name, the run's settings, the task's own."""
        config = setting.config
        return {
            "task": self.task.name,
            "precision": setting.precision,
            "loss_scale": str(setting.loss_scale),
            "xla": setting.jit_compile,
            "tf32": config.tf32,
            "batch_size": config.batch_size,
            "epochs": config.epochs,
            "seed": config.seed,
            "strategy": config.strategy,
            "replicas": strategy.num_replicas_in_sync,
            **self.task.hparams(),
        }

    def _restore(self, checkpoint: checkpoint_lib.RunCheckpoint, resume: bool) -> int:
        """Restores the newest readable checkpoint when resuming; returns the steps already done.

        Without `resume`, a checkpoint directory that already holds checkpoints
        is refused rather than overwritten.
        """
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

    def fit(
        self,
        trainer: trainers.MixedPrecisionTrainer,
        setting: Setting,
        position: int,
        callbacks: list[keras.callbacks.Callback],
    ) -> None:
        """Trains from global step `position` to the end of the last epoch.

        A run resumed inside an epoch first finishes that epoch with its own
        `fit()`; `tfmp.run.callbacks.RunSegment` shows the callbacks one run.
        """
        data, steps, epochs = setting.data, setting.steps_per_epoch, setting.config.epochs
        validation = self.task.validation_data(data)
        epoch, offset = divmod(position, steps)
        segments = []
        if offset:
            segments.append((epoch, epoch + 1, steps - offset, offset))
            epoch += 1
        if epoch < epochs:
            segments.append((epoch, epochs, steps, 0))
        for i, (first_epoch, end_epoch, segment_steps, offset) in enumerate(segments):
            trainer.fit(
                epochs_lib.stream(self.task, data, position),
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
