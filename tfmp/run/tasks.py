"""Tasks: what a run of one model is, as the user writes it.

A `Task` is a model's part of a run and nothing else: its name and config,
the data it loads and its training and validation pipelines, the trainer it
builds (networks, loss, optimizers, metrics), its hyperparameters and its
callbacks. Training (`tfmp.run.runner`), `auto` precision, the benchmark
(`tfmp.run.benchmark`), the parity check (`tfmp.run.parity`) and the
diagnosis (`tfmp.run.training.diagnose`) take a Task and derive all else
from those: so a model of your own gets console, TensorBoard and HParams,
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
  has them. The shipped GAN and image classifier are such subclasses
  (`tfmp.run.shipped`).

What the run framework derives, a task may also customise: `Task` declares
each optional hook with a default that says "derive it" (None, or the
common value), and the module that uses it derives what the default leaves
open. Display: `console_fields`, `example_unit`, `summary_route`,
`describe_data` (`tfmp.run.callbacks.display`). Epochs and resume:
`steps_per_epoch`, `stream` (`tfmp.run.epochs`). Diagnosis and benchmark:
`probe` (`tfmp.run.diagnostics.probe`), `benchmark_batch`,
`drop_remainder` (`tfmp.run.benchmark`), `hand_written_step`
(`tfmp.run.baseline`). Precision: `cpu_bfloat16_float32_layers`
(`float32_pattern`). `Task.hooks()` names them all.

A Task is cheap to make and holds no TensorFlow state: `build` makes new
networks each call, under the dtype policy the caller has set
(`tfmp.precision_scope`); `load_data` loads what the pipelines are made from.

This module also gives the shipped tasks (`GANTask`, `ClassifierTask`,
`resnet50_task`, `task_for`, from `tfmp.run.shipped`) and the `MODULE:NAME`
loader (`load`, from `tfmp.run.task_loader`) under their long-standing
names; they are imported when first used.
"""

from __future__ import annotations

import abc
import copy
import dataclasses
import importlib
from collections.abc import Callable, Sequence
from typing import Any

import keras
import tensorflow as tf

from tfmp import _deprecated, float32_layers, trainers
from tfmp.run import data as data_lib
from tfmp.run.config import ConfigError, TrainConfig

__all__ = ["Built", "SupervisedTask", "Task", "float32_pattern"]

# Names this module has always given, defined where they live now: name -> module.
_ELSEWHERE = {
    "ClassifierTask": "tfmp.run.shipped",
    "GANTask": "tfmp.run.shipped",
    "NetworkBuilder": "tfmp.run.shipped",
    "resnet50_task": "tfmp.run.shipped",
    "task_for": "tfmp.run.shipped",
    "load": "tfmp.run.task_loader",
    "build_mobilenet_v2_classifier": "tfmp.models.mobilenet_v2",
    "cpu_bfloat16_float32_layers": "tfmp.models.mobilenet_v2",
}


def __getattr__(name: str) -> Any:
    """The shipped tasks and `load`, imported on first use (they import this module)."""
    if name in _ELSEWHERE:
        return getattr(importlib.import_module(_ELSEWHERE[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def float32_pattern(task: Any, precision: str) -> str:
    """The `float32_layers` pattern a run of `task` at `precision` applies ("" = none).

    The task's `config.float32_layers`, where `"auto"` is the model's advice
    for bfloat16 on a CPU: the task's `cpu_bfloat16_float32_layers`
    attribute ("" for none, `Task`'s default)
    (`tfmp.float32_layers.resolve_float32_layers`).
    """
    advice = task.cpu_bfloat16_float32_layers
    return float32_layers.resolve_float32_layers(task.config.float32_layers, precision, advice)


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

    Optional hooks, each with a default that lets the framework derive it:
    for display `console_fields`, `example_unit`, `summary_route`,
    `describe_data`; for epochs and resume `steps_per_epoch`, `stream`; for
    diagnosis and the benchmark `probe`, `benchmark_batch`,
    `drop_remainder`, `hand_written_step`; for precision
    `cpu_bfloat16_float32_layers`. `hooks()` names them.

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

    def replace(self, **changes: Any) -> Task:
        """Deprecated name of `with_config` (it replaced the config, not the task); removed in tfmp 0.3."""
        _deprecated.warn("Task.replace", received=f"replace(**{changes!r})")
        return self.with_config(**changes)

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
        self, loss_scale: str | float, jit_compile: bool, steps_per_epoch: int, data: Any
    ) -> trainers.MixedPrecisionTrainer:
        """Builds the networks and returns the compiled trainer (a `tfmp.Trainer`, say).

        Called under the precision's dtype policy (and the strategy's scope).
        Compile with `loss_scale`, `skip_nonfinite=True` (every step with a
        non-finite gradient is skipped and counted) and `jit_compile`.

        Args:
            loss_scale: `"dynamic"`, `"none"` or a fixed scale.
            jit_compile: Compile the step with XLA.
            steps_per_epoch: Steps of an epoch (a learning-rate schedule's length).
            data: What `load_data` returned (None for a benchmark row).
        """

    def build(
        self,
        precision: str,
        loss_scale: str | float,
        jit_compile: bool,
        steps_per_epoch: int = 1,
        data: Any = None,
    ) -> Built:
        """Builds the networks and compiles the trainer, under the current dtype policy.

        The caller sets `precision`'s policy around the call
        (`tfmp.precision_scope`) and seeds (`keras.utils.set_random_seed`).
        Every optimizer skips (and counts) non-finite steps; then the layers
        `float32_pattern` gives for `precision` are kept in
        float32.

        Args:
            precision: The resolved precision (picks the float32 layers).
            loss_scale: `"dynamic"`, `"none"` or a fixed scale.
            jit_compile: Compile the step with XLA.
            steps_per_epoch: Steps of an epoch (the learning-rate schedule's length).
            data: What `load_data` returned; None for a workload without data.

        Raises:
            ConfigError: when the float32_layers pattern matches no layer.
        """
        trainer = self.build_trainer(loss_scale, jit_compile, steps_per_epoch, data)
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

    def callbacks(self, trainer: trainers.MixedPrecisionTrainer, run_dir: str) -> list[keras.callbacks.Callback]:
        """The model's own callbacks of a run writing to `run_dir`."""
        return []

    def loss(self) -> Any:
        """The loss, as `compile()` takes it; None: the trainer's compiled loss (`SupervisedTask` gives its own)."""
        return None

    def metrics(self) -> list[Any]:
        """The metrics, as `compile()` takes them; none by default (`SupervisedTask` gives its own)."""
        return []

    # -- optional hooks: display -------------------------------------------------
    # Each default says "derive it": the module named uses the hook and derives what a None leaves open.

    #: The console's `(label, log key)` pairs; None: the loss and the first metric (`tfmp.run.callbacks.display`).
    console_fields: tuple[tuple[str, str], ...] | None = None
    #: What the throughput counts, printed as `<unit>/s`: `"ex"` (examples); the image tasks say `"img"`.
    example_unit: str = "ex"

    def summary_route(self, key: str) -> tuple[str, str] | None:
        """TensorBoard's `(run, name)` for the log `key`; None: Keras's layout (`display.keras_route`)."""
        return None

    def describe_data(self) -> str:
        """The data, as the run's first line names it (`"dataset=digits"`); "" says nothing."""
        return ""

    # -- optional hooks: epochs and resume --------------------------------------

    def steps_per_epoch(self, data: Any) -> int | None:
        """The training steps of an epoch; None: counted from the pipeline (`tfmp.run.epochs.steps_per_epoch`)."""
        return None

    def stream(self, data: Any, position: int) -> tf.data.Dataset | None:
        """The training batches from global step `position` on, epoch after epoch; None: `train_data` repeated.

        A resumed run continues this stream where it stopped (`tfmp.run.epochs.stream`).
        """
        return None

    # -- optional hooks: diagnosis and benchmark --------------------------------

    def probe(self, data: Any) -> Any:
        """The batch the diagnosis and `auto` measure on; None: the pipeline's first (`tfmp.run.diagnostics.probe`)."""
        return None

    def benchmark_batch(self) -> Any:
        """The batch a benchmark row feeds; None: `probe` over `load_data()` (`tfmp.run.benchmark.benchmark_batch`)."""
        return None

    #: Whether the training pipeline drops a last partial batch (the benchmark's input pipeline counts batches so).
    drop_remainder: bool = False

    def hand_written_step(
        self, trainer: trainers.MixedPrecisionTrainer, precision: str, jit_compile: bool, steps_per_epoch: int
    ) -> Any:
        """The benchmark's baseline; None: made from the trainer's kind (`tfmp.run.baseline.hand_written_step`)."""
        return None

    # -- optional hooks: precision -----------------------------------------------

    #: The `float32_layers` pattern `"auto"` keeps in float32 for bfloat16 on a CPU ("" for none; `float32_pattern`).
    cpu_bfloat16_float32_layers: str = ""

    @classmethod
    def hooks(cls) -> tuple[str, ...]:
        """The names of the optional hooks the run framework calls, as this class declares them."""
        return _HOOKS


# The optional hooks, in the order `Task` declares them; `Task.hooks()` and the docstring list them.
_HOOKS = (
    "console_fields",
    "example_unit",
    "summary_route",
    "describe_data",
    "steps_per_epoch",
    "stream",
    "probe",
    "benchmark_batch",
    "drop_remainder",
    "hand_written_step",
    "cpu_bfloat16_float32_layers",
)


def _clone_optimizer(optimizer: str | keras.optimizers.Optimizer) -> keras.optimizers.Optimizer:
    """A fresh optimizer: from its name, or a copy of `optimizer`'s config (so no state is shared between builds)."""
    if isinstance(optimizer, keras.optimizers.Optimizer):
        return optimizer.__class__.from_config(optimizer.get_config())
    return keras.optimizers.get(optimizer)


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
        cpu_bfloat16_float32_layers: A `float32_layers` pattern that
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
        cpu_bfloat16_float32_layers: str = "",
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
        self._advice = cpu_bfloat16_float32_layers

    @property
    def cpu_bfloat16_float32_layers(self) -> str:
        """The model's float32 advice for bfloat16 on a CPU (`float32_pattern`); "" for none."""
        return self._advice

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
        return (_clone_optimizer(self._optimizer),)

    def hparams(self) -> dict[str, Any]:
        return dict(self._hparams)

    def build_trainer(
        self, loss_scale: str | float, jit_compile: bool, steps_per_epoch: int, data: Any
    ) -> trainers.MixedPrecisionTrainer:
        trainer = trainers.Trainer(self.build_model(data))
        (optimizer,) = self.optimizers(steps_per_epoch)
        trainer.compile(
            optimizer,
            loss=self.loss(),
            metrics=self.metrics(),
            loss_scale=loss_scale,
            skip_nonfinite=True,
            jit_compile=jit_compile,
        )
        return trainer
