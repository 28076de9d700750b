"""Tasks: what a run of one model is, as the user writes it; every hook the run framework calls, in one file.

A `Task` is a model's part of a run and nothing else: its name and config,
the data it loads and its training and validation pipelines, the trainer it
builds (networks, loss, optimizers, metrics), its hyperparameters and its
callbacks. Training (`tfmp.run.runner`), `auto` precision, the benchmark
(`tfmp.run.benchmark`), the parity check (`tfmp.run.parity`) and the
diagnosis (`tfmp.run.training.diagnose`) take a Task and call its methods,
nothing else: so a model of your own gets console, TensorBoard and HParams,
checkpoints and exact resume, SIGTERM/SIGINT, several GPUs and hosts,
`auto`, the benchmark, parity and the diagnosis.

Two ways to make one:

* `SupervisedTask`: any Keras model with one loss, from a model-building
  function and the data (arrays, dicts of arrays, a `tf.data.Dataset` of
  examples, or a function returning batches):

  ```python
  TASK = tasks.SupervisedTask(
      name="my_model",
      model=build_model,                # () -> keras.Model, built per run
      train_data=(x_train, y_train),
      validation_data=(x_val, y_val),
      loss="sparse_categorical_crossentropy",
      optimizer=keras.optimizers.Adam(1e-3),
      metrics=["accuracy"],
      config=config.TrainConfig(epochs=5, batch_size=64),
  )
  training.train(TASK)                  # or: tfmp-train --task=my_module:TASK
  ```

* a subclass of `Task` for another kind of model (a GAN, say): implement
  `train_data` and `build_trainer`, and override `load_data`,
  `validation_data`, `optimizers`, `hparams` or `callbacks` where the model
  has them. The shipped GAN and image classifiers are such subclasses
  (`tfmp.run.shipped`).

Every other method is an optional hook whose body is what the framework
does when a task does not override it; its docstring says who calls it.
`Task.hooks()` names them. A Task is cheap to make and holds no TensorFlow
state: `build` makes new networks each call, under the dtype policy the
caller has set (`tfmp.precision_scope`); `load_data` loads what the
pipelines are made from, and the framework passes it back to the task's
methods without looking inside it. `xla` (in `build`, `build_trainer`) is
the run's setting: compile the whole step, Keras's `compile(jit_compile=xla)`.
"""

from __future__ import annotations

import abc
import copy
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import keras
import tensorflow as tf
from keras.callbacks import Callback

from tfmp import _deprecated, float32_layers, trainers
from tfmp.run import baseline, trainer_contract
from tfmp.run import data as data_lib
from tfmp.run.config import ConfigError, TrainConfig

__all__ = ["Built", "SupervisedTask", "Task", "float32_pattern"]


def float32_pattern(task: Task, precision: str) -> str:
    """The `float32_layers` pattern a run of `task` at `precision` applies ("" = none).

    The task's `config.float32_layers`, where `"auto"` is the model's advice
    for bfloat16 on a CPU, the task's `auto_float32_layers`
    (`tfmp.float32_layers.resolve_float32_layers`).
    """
    return float32_layers.resolve_float32_layers(task.config.float32_layers, precision, task.auto_float32_layers)


@dataclasses.dataclass
class Built:
    """What `Task.build` returns.

    Attributes:
        trainer: The compiled `tfmp.trainers` trainer (not yet traced).
        float32_pattern: The `float32_layers` pattern applied ("" = none).
        float32_layers: Paths of the layers it kept in float32.
    """

    trainer: trainers.MixedPrecisionTrainer
    float32_pattern: str = ""
    float32_layers: tuple[str, ...] = ()


class Task(abc.ABC):
    """A model's part of a run: its data and the trainer it builds.

    Implement `train_data` and `build_trainer`; override `load_data`,
    `validation_data`, `optimizers`, `hparams`, `callbacks`, `loss` and
    `metrics` where the model has them. The run framework passes `data`
    (whatever `load_data` returned) back to the data methods and never looks
    inside it. `build` is what the framework calls; it is not meant to be
    overridden.

    Optional hooks, each doing by default what its body says: for display
    `console_fields`, `example_unit`, `summary_route`, `describe_data`; for
    epochs and resume `steps_per_epoch`, `stream`; for diagnosis and the
    benchmark `probe`, `benchmark_batch`, `hand_written_step`; for precision
    `auto_float32_layers`. `hooks()` names them.

    Args:
        config: The run's settings (precision, batch size, epochs, ...); the
            default `TrainConfig()` when None.
        name: The model's name, if not the class's.

    Attributes:
        name: The model's name (run descriptions, benchmark rows, messages).
        config: The run's settings.
    """

    name: str = "task"

    def __init__(self, config: TrainConfig | None = None, name: str | None = None):
        self.config = TrainConfig() if config is None else config
        if name is not None:
            self.name = name

    def with_config(self, **changes: Any) -> Task:
        """A copy of this task whose config is `dataclasses.replace(config, **changes)`; this task is unchanged."""
        other = copy.copy(self)
        other.config = dataclasses.replace(self.config, **changes)
        return other

    replace = _deprecated.renamed_attribute("Task.replace")  # it replaced the config, not the task

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"

    # -- data ------------------------------------------------------------------

    def load_data(self) -> Any:
        """What the pipelines are made from, loaded once per run (None if the pipelines load it themselves)."""
        return None

    @abc.abstractmethod
    def train_data(self, data: Any) -> tf.data.Dataset:
        """A fresh training pipeline: one epoch of batches of `config.batch_size`, in the order `config.seed` fixes.

        One finite epoch: a pipeline that repeats forever needs
        `config.steps_per_epoch`. A fresh pipeline must repeat the same
        order: an exact resume replays it to the step it stopped at.
        """

    def validation_data(self, data: Any) -> tf.data.Dataset | None:
        """The validation pipeline, or None when the model has none."""
        return None

    # -- model -----------------------------------------------------------------

    def optimizers(self, steps_per_epoch: int) -> tuple[keras.optimizers.Optimizer, ...]:
        """Fresh optimizers, in the trainer's `compile` order, as the run configures them."""
        raise NotImplementedError(f"{type(self).__name__} does not say its optimizers; override optimizers().")

    @abc.abstractmethod
    def build_trainer(
        self, loss_scale: str | float, xla: bool, steps_per_epoch: int, data: Any
    ) -> trainers.MixedPrecisionTrainer:
        """Builds the networks and returns the compiled trainer (a `tfmp.Trainer`, say).

        Called under the precision's dtype policy (and the strategy's scope).
        Compile with `loss_scale`, `skip_nonfinite=True` (every step with a
        non-finite gradient is skipped and counted) and `jit_compile=xla`.

        Args:
            loss_scale: `"dynamic"`, `"none"` or a fixed scale.
            xla: Compile the whole step with XLA.
            steps_per_epoch: Steps of an epoch (a learning-rate schedule's length).
            data: What `load_data` returned (None for a benchmark row).
        """

    def build(
        self,
        precision: str,
        loss_scale: str | float,
        xla: bool,
        steps_per_epoch: int = 1,
        data: Any = None,
    ) -> Built:
        """Builds the networks and compiles the trainer, under the current dtype policy.

        The caller sets `precision`'s policy around the call
        (`tfmp.precision_scope`) and seeds (`keras.utils.set_random_seed`).
        Every optimizer skips (and counts) non-finite steps. The trainer is
        checked against what a run needs of it, and what the config's
        settings call on it (`tfmp.run.trainer_contract.check_trainer`); then
        the layers `float32_pattern` gives for `precision` are kept in float32.

        Args:
            precision: The resolved precision (picks the float32 layers).
            loss_scale: `"dynamic"`, `"none"` or a fixed scale.
            xla: Compile the whole step with XLA.
            steps_per_epoch: Steps of an epoch (the learning-rate schedule's length).
            data: What `load_data` returned; None for a workload without data.

        Raises:
            ConfigError: when the float32_layers pattern matches no layer.
            tfmp.run.trainer_contract.TrainerContractError: when the trainer
                lacks pieces of its contract, naming each.
        """
        trainer = self.build_trainer(loss_scale, xla, steps_per_epoch, data)
        trainer_contract.check_trainer(trainer, trainer_contract.needed_for(self.config))
        pattern = float32_pattern(self, precision)
        if not pattern:
            return Built(trainer)
        try:
            kept = float32_layers.keep_float32(list(trainer.networks.values()), pattern)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        return Built(trainer, pattern, tuple(kept))

    def hparams(self) -> dict[str, Any]:
        """The model's hyperparameters for TensorBoard's HParams (beside the run's settings)."""
        return {}

    @_deprecated.renamed_argument("Task.callbacks(run_dir)")
    def callbacks(self, trainer: trainers.MixedPrecisionTrainer, tensorboard_dir: str) -> list[Callback]:
        """The model's own callbacks: called once before `fit()` with the run's TensorBoard folder (once `run_dir=`)."""
        return []

    def loss(self) -> Any:
        """The loss, as `compile()` takes it; None: the trainer's compiled loss (`SupervisedTask` gives its own)."""
        return None

    def metrics(self) -> list[Any]:
        """The metrics, as `compile()` takes them; none by default (`SupervisedTask` gives its own)."""
        return []

    # -- optional hooks: display ------------------------------------------------

    #: What the throughput counts, as `<unit>/s` (console, benchmark, `auto`): `"ex"`; the image tasks say `"img"`.
    example_unit: str = "ex"

    def console_fields(self) -> tuple[tuple[str, str], ...]:
        """The `(label, log key)` pairs each console line shows first: the loss and the first of `metrics()`.

        Called by the runner for its console. A metric is logged by its name
        (`"accuracy"`, or a metric object's `name`), labelled in title case.
        Every other loss the trainer logs (a key ending in `loss`, a GAN's
        `g_loss` and `d_loss`) follows, labelled so too (`G Loss`).
        """
        names = [m if isinstance(m, str) else getattr(m, "name", None) for m in self.metrics()[:1]]
        return (("Loss", "loss"),) + tuple((n.replace("_", " ").title(), n) for n in names if n)

    def summary_route(self, key: str) -> tuple[str, str]:
        """TensorBoard's `(sub-run, name)` of log `key`: Keras's layout, `val_x` to `validation/x`, else `train/key`.

        Called by the runner's `tfmp.run.callbacks.Summaries` (which prefixes the name with `batch_` or `epoch_`).
        """
        if key.startswith("val_"):
            return "validation", key[4:]
        return "train", key

    def describe_data(self) -> str:
        """The data, as the run's first line names it (`"dataset=digits"`, say); "" (the default) says nothing.

        Called by the runner and `diagnose` for the line that starts a run.
        """
        return ""

    # -- optional hooks: epochs and resume --------------------------------------

    def steps_per_epoch(self, data: Any) -> int:
        """The training steps of an epoch: the pipeline's batches, capped by `config.steps_per_epoch`.

        Called once per run (training, `auto`, parity) before the trainer is
        built. Override it to count without building the pipeline.

        Raises:
            ConfigError: when the pipeline yields no batch, or repeats forever
                or has an unknown length and `config.steps_per_epoch` is not set.
        """
        c = self.config
        batches = int(self.train_data(data).cardinality())
        if batches == 0:
            raise ConfigError(
                f"The training data of {self.name!r} gives no batch of batch_size={c.batch_size}: use a smaller "
                f"batch size or more data. Received: batch_size={c.batch_size}"
            )
        if batches < 0 and c.steps_per_epoch is None:
            if batches == tf.data.INFINITE_CARDINALITY:
                raise ConfigError(
                    f"must be set: the training pipeline of {self.name!r} repeats forever, so an epoch has no "
                    "end. Set it to the steps of an epoch, or make the pipeline give one epoch (no repeat()).",
                    "steps_per_epoch",
                    None,
                )
            raise ConfigError(
                f"The length of {self.name!r}'s training pipeline is not known (tf.data cardinality "
                f"{batches}), so an epoch has no end: set steps_per_epoch, or give the dataset its length "
                "with tf.data.experimental.assert_cardinality. Received: steps_per_epoch=None"
            )
        if batches < 0:
            return c.steps_per_epoch
        return min(batches, c.steps_per_epoch or batches)

    def stream(self, data: Any, position: int) -> tf.data.Dataset:
        """The training batches from global step `position` on, epoch after epoch: `train_data` repeated.

        Called by the runner (`position` is where a resumed run stopped) and by
        the non-finite stop, which takes `stream(data, step)`'s first batch to
        find the step's first non-finite layer. Each epoch of the repeat is
        reshuffled in the seeded order, so a fresh stream skipped to a step
        lands where a stopped run left off.
        """
        return self.train_data(data).repeat().skip(position)

    # -- optional hooks: diagnosis and benchmark --------------------------------

    def probe(self, data: Any) -> Any:
        """The batch the diagnosis, the gradient reports and `auto` measure on: the pipeline's first.

        Called by `diagnose`, by the runner for `diagnose_every`, and by
        settling for `precision="auto"` (`tfmp.run.settled`).

        Raises:
            ConfigError: when the training pipeline gives no batch.
        """
        for batch in self.train_data(data).take(1):
            return batch
        raise ConfigError(f"The training data of {self.name!r} is empty: its pipeline gave no batch.")

    def benchmark_batch(self) -> Any:
        """The batch a benchmark row feeds the trainer and the hand-written step: `probe` over `load_data()`.

        Called by the benchmark (`tfmp.run.benchmark.build_workload`); the
        shipped image tasks give a synthetic batch, so no dataset is loaded.
        """
        return self.probe(self.load_data())

    def hand_written_step(
        self, trainer: trainers.MixedPrecisionTrainer, precision: str, xla: bool, steps_per_epoch: int
    ) -> baseline.HandWritten | None:
        """The benchmark's baseline for `trainer`, a minimal hand-written update of its networks; None for none.

        Called by the benchmark, which times the trainer against it. By
        default made from the trainer's kind and fresh copies of
        `optimizers()`: `baseline.supervised` for a `tfmp.Trainer` (with
        `loss()`, or the trainer's compiled loss), `baseline.gan` for a
        `tfmp.GANTrainer`, None for any other trainer.
        """
        return baseline.for_trainer_kind(self, trainer, precision, xla, steps_per_epoch)

    # -- optional hooks: precision -----------------------------------------------

    #: The pattern `float32_layers="auto"` keeps in float32 under bfloat16 on a CPU ("" none; `float32_pattern`).
    auto_float32_layers: str = ""

    @classmethod
    def hooks(cls) -> tuple[str, ...]:
        """The names of the optional hooks the run framework calls, as this class declares them."""
        return _HOOKS


# The optional hooks, in the order `Task` declares them; `Task.hooks()` and the docstring list them.
_HOOKS = (
    "example_unit",
    "console_fields",
    "summary_route",
    "describe_data",
    "steps_per_epoch",
    "stream",
    "probe",
    "benchmark_batch",
    "hand_written_step",
    "auto_float32_layers",
)


class SupervisedTask(Task):
    """Any Keras model with one loss, trained by `tfmp.Trainer`, from a model function and its data.

    The data may be NumPy arrays (`(x, y)` or `(x, y, sample_weight)`; `x`
    may be a dict of named inputs, `y` integer labels, one-hot rows or
    regression targets), a `tf.data.Dataset` of single examples, or a
    function `(batch_size, seed) -> tf.data.Dataset` of batches (see
    `tfmp.run.data.batched`). Arrays and datasets of examples are shuffled
    by `config.seed` and batched by `config.batch_size`; a function gets
    both and must give the same batches for the same seed, so that a
    resumed run replays them.

    Subclass it to compute any of these from the config instead (override
    `build_model`, `train_data`, `validation_data`, `loss`, `metrics`,
    `optimizers` or `hparams`).

    Args:
        model: `() -> keras.Model`, called each time a model is built, under
            the run's dtype policy. Its output should be float32 (a float32
            softmax, or logits with a `from_logits` loss), as for any
            mixed-precision Keras model.
        train_data: The training examples (see above).
        validation_data: The validation examples, in the same forms; None
            for none. Batched by `config.batch_size`, not shuffled.
        loss: A Keras loss, by name or object.
        optimizer: A Keras optimizer or its name; each build gets a fresh
            copy (from its config).
        metrics: Keras metrics, as for `compile()`.
        config: The run's settings; default `TrainConfig()`.
        name: The model's name in logs, checkpoints and benchmark rows.
        hparams: The model's own hyperparameters for TensorBoard's HParams.
        auto_float32_layers: A `float32_layers` pattern that
            `float32_layers="auto"` applies under bfloat16 on a CPU; "" for none.
    """

    def __init__(
        self,
        model: Callable[[], keras.Model] | None = None,
        train_data: Any = None,
        validation_data: Any = None,
        loss: Any = None,
        optimizer: str | keras.optimizers.Optimizer = "adam",
        metrics: Sequence[Any] | None = None,
        config: TrainConfig | None = None,
        name: str = "model",
        hparams: dict[str, Any] | None = None,
        auto_float32_layers: str = "",
    ):
        super().__init__(config, name)
        if isinstance(model, keras.Model):
            raise TypeError(
                "model must be a function that builds the model, not a model: each run builds it under its "
                f"precision's dtype policy. Received: model={model.name!r}"
            )
        if model is not None and not callable(model):
            raise TypeError(f"model must be a function () -> keras.Model. Received: model={model!r}")
        self._model = model
        self._train_data = train_data
        self._validation_data = validation_data
        self._loss = loss
        self._optimizer = optimizer
        self._metrics = list(metrics or [])
        self._hparams = dict(hparams or {})
        self._auto_float32_layers = auto_float32_layers

    @property
    def auto_float32_layers(self) -> str:
        """The model's float32 advice for bfloat16 on a CPU (`float32_pattern`); "" for none."""
        return self._auto_float32_layers

    def train_data(self, data: Any) -> tf.data.Dataset:
        if self._train_data is None:
            raise NotImplementedError(f"{self.name!r} has no training data: give train_data or override train_data().")
        c = self.config
        return data_lib.batched(self._train_data, batch_size=c.batch_size, seed=c.seed)

    def validation_data(self, data: Any) -> tf.data.Dataset | None:
        if self._validation_data is None:
            return None
        c = self.config
        return data_lib.batched(self._validation_data, batch_size=c.batch_size, seed=c.seed, shuffle=False)

    def build_model(self, data: Any) -> keras.Model:
        """The network, built under the current dtype policy."""
        if self._model is None:
            raise NotImplementedError(f"{self.name!r} has no model: give model or override build_model().")
        model = self._model()
        if not isinstance(model, keras.Model):
            raise TypeError(
                f"model must return a keras.Model. Received: {getattr(self._model, '__name__', self._model)!r} "
                f"returned {type(model).__name__}"
            )
        return model

    def loss(self) -> Any:
        """The training loss, as `compile()` takes it."""
        if self._loss is None:
            raise NotImplementedError(f"{self.name!r} has no loss: give loss or override loss().")
        return self._loss

    def metrics(self) -> list[Any]:
        """The metrics, as `compile()` takes them."""
        return list(self._metrics)

    def optimizers(self, steps_per_epoch: int) -> tuple[keras.optimizers.Optimizer, ...]:
        """A fresh optimizer: from its name, or a copy of the given one's config (no state shared between builds)."""
        optimizer = self._optimizer
        if isinstance(optimizer, keras.optimizers.Optimizer):
            return (optimizer.__class__.from_config(optimizer.get_config()),)
        return (keras.optimizers.get(optimizer),)

    def hparams(self) -> dict[str, Any]:
        return dict(self._hparams)

    def build_trainer(
        self, loss_scale: str | float, xla: bool, steps_per_epoch: int, data: Any
    ) -> trainers.MixedPrecisionTrainer:
        trainer = trainers.Trainer(self.build_model(data))
        (optimizer,) = self.optimizers(steps_per_epoch)
        trainer.compile(
            optimizer,
            loss=self.loss(),
            metrics=self.metrics(),
            loss_scale=loss_scale,
            skip_nonfinite=True,
            jit_compile=xla,
        )
        return trainer
