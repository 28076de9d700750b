"""Tasks: a model, its data and its training, as the whole run framework uses them.

A `Task` is what a run of one model needs, defined once: the data and its
pipelines, the networks and the compiled trainer, its hyperparameters and
callbacks, and how its logs are shown. Training (`tfmp.run.runner`), `auto`
precision, the benchmark (`tfmp.run.benchmark`), the parity check
(`tfmp.run.parity`) and the diagnosis (`tfmp.run.training.diagnose`) all take
a Task and use only the methods below, so a model of your own gets every one
of them: console, TensorBoard and HParams, checkpoints and exact resume,
SIGTERM/SIGINT, several GPUs and hosts, `auto`, the benchmark, parity and the
diagnosis.

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

* a subclass of `Task` (or of `SupervisedTask`) overriding the methods it
  needs, as TF Model Garden's tasks do. The shipped models are such
  subclasses: `GANTask` (the original tutorial's GAN) and `ClassifierTask`
  (MobileNetV2, or another image classifier, e.g. `resnet50_task`).

A Task is cheap to make and holds no TensorFlow state: `build` makes new
networks each call, under the dtype policy the caller has set
(`tfmp.precision_scope`); `load_data` loads what the pipelines are made from.
"""

from __future__ import annotations

import abc
import copy
import dataclasses
import functools
import inspect
import os
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tfmp import precision as precision_lib
from tfmp import trainers
from tfmp.models.gan import build_discriminator, build_generator
from tfmp.models.mobilenet_v2 import build_mobilenet_v2_classifier, cpu_bfloat16_float32_layers
from tfmp.models.resnet50 import build_resnet50_classifier
from tfmp.run import baseline
from tfmp.run import callbacks as callbacks_lib
from tfmp.run import data as data_lib
from tfmp.run.config import ClassifierConfig, ConfigError, GANConfig, ImageConfig, TrainConfig
from tfmp.run.task_loader import import_module, kind, task_error

__all__ = [
    "Built",
    "ClassifierTask",
    "GANTask",
    "ImageTask",
    "NetworkBuilder",
    "SupervisedTask",
    "Task",
    "load",
    "resnet50_task",
    "task_for",
]


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


def _first_batch(dataset: tf.data.Dataset) -> Any:
    for batch in dataset.take(1):
        return batch
    raise ConfigError("The training data is empty: its pipeline gave no batch.")


class Task(abc.ABC):
    """A model's run: its data, its trainer, and how its logs are shown.

    Subclasses implement `train_data` and `build_trainer`; everything else
    has a default that serves most models. The run framework passes `data`
    (whatever `load_data` returned) back to the data methods and never looks
    inside it.

    Args:
        config: The run's settings (precision, batch size, epochs, ...); the
            default `TrainConfig()` when None.
        name: The model's name, if not the class's.

    Attributes:
        name: The model's name (run descriptions, benchmark rows, messages).
        console_fields: `(label, log key)` pairs of each console line.
        example_unit: What the throughput counts: `"ex"` (examples per
            second: `ex/s` in the console and the benchmark, the
            `examples_per_sec` tag in TensorBoard), `"img"` for an image
            model (`img/s`, `images_per_sec`).
    """

    name: str = "task"
    console_fields: tuple[tuple[str, str], ...] = (("Loss", "loss"),)
    example_unit: str = "ex"

    def __init__(self, config: TrainConfig | None = None, name: str | None = None):
        self.config = TrainConfig() if config is None else config
        if name is not None:
            self.name = name

    def replace(self, **changes: Any) -> Task:
        """This task with `dataclasses.replace(config, **changes)` as its config."""
        other = copy.copy(self)
        other.config = dataclasses.replace(self.config, **changes)
        return other

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"

    @property
    def cpu_bfloat16_float32_layers(self) -> str:
        """The model's `float32_layers` advice for bfloat16 on a CPU (what `"auto"` applies there); "" for none."""
        return ""

    def float32_pattern(self, precision: str) -> str:
        """The `float32_layers` pattern a run at `precision` applies ("" = none)."""
        return precision_lib.resolve_float32_layers(
            self.config.float32_layers, precision, self.cpu_bfloat16_float32_layers
        )

    def describe_data(self) -> str:
        """The data, in the run's description line (`dataset=digits`, say); "" to say nothing."""
        return ""

    # -- data ------------------------------------------------------------------

    def load_data(self) -> Any:
        """What the pipelines are made from, loaded once per run (None if the pipelines load it themselves)."""
        return None

    @abc.abstractmethod
    def train_data(self, data: Any) -> tf.data.Dataset:
        """A fresh training pipeline: one epoch of batches of `config.batch_size`, in the order `config.seed` fixes.

        A fresh pipeline must repeat the same order (and `.repeat()` the same
        sequence of epochs): an exact resume replays it to the step it
        stopped at.
        """

    def validation_data(self, data: Any) -> tf.data.Dataset | None:
        """The validation pipeline, or None when the model has none."""
        return None

    def steps_per_epoch(self, data: Any) -> int:
        """Training steps per epoch: the training pipeline's batches, capped by `config.steps_per_epoch`.

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

    def stream(self, data: Any, position: int = 0) -> tf.data.Dataset:
        """The training batches from global step `position` on.

        Epoch after epoch in the seeded order; a fresh pipeline replays the
        same order, so skipping `position` batches lands where a stopped run
        left off.
        """
        return self.train_data(data).repeat().skip(position)

    def batch_at(self, data: Any, index: int) -> Any:
        """The training batch of 0-based global step `index`."""
        return next(iter(self.stream(data, index).take(1)))

    def probe(self, data: Any) -> Any:
        """One training batch of `config.batch_size` examples (for `auto` and the diagnostics): the first."""
        return _first_batch(self.train_data(data))

    def benchmark_batch(self) -> Any:
        """The batch the benchmark feeds the trainer and the hand-written step: by default the probe batch."""
        return self.probe(self.load_data())

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
        `float32_pattern(precision)` matches are kept in float32.

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
        pattern = self.float32_pattern(precision)
        if not pattern:
            return Built(trainer)
        try:
            kept = precision_lib.keep_float32(list(trainer.networks.values()), pattern)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        return Built(trainer, pattern, tuple(kept))

    def hand_written_step(
        self, trainer: trainers.MixedPrecisionTrainer, precision: str, jit_compile: bool, steps_per_epoch: int
    ) -> baseline.HandWritten | None:
        """The benchmark's baseline: a hand-written step updating `trainer`'s networks; None when there is none."""
        return None

    def hparams(self) -> dict[str, Any]:
        """The model's hyperparameters for TensorBoard's HParams (beside the run's settings)."""
        return {}

    def callbacks(self, trainer: trainers.MixedPrecisionTrainer, run_dir: str) -> list[keras.callbacks.Callback]:
        """The model's own callbacks of a run writing to `run_dir`."""
        return []

    # -- display ---------------------------------------------------------------

    def summary_route(self, key: str) -> tuple[str, str]:
        """Where a log goes in TensorBoard: `(sub-run, name)`.

        `tfmp.run.callbacks.Summaries` prefixes the name with `batch_` or
        `epoch_`, as Keras's TensorBoard callback does. Keras's layout:
        `val_x` goes to `validation/epoch_x`, anything else to
        `train/batch_x` and `train/epoch_x`.
        """
        if key.startswith("val_"):
            return "validation", key[4:]
        return "train", key


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
        # The loss and the first metric given, under the name Keras logs it by (a metric object's `name`).
        names = [m if isinstance(m, str) else getattr(m, "name", None) for m in self._metrics[:1]]
        if any(names):
            self.console_fields = (("Loss", "loss"),) + tuple((n.replace("_", " ").title(), n) for n in names if n)

    @property
    def cpu_bfloat16_float32_layers(self) -> str:
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

    def hand_written_step(
        self, trainer: trainers.MixedPrecisionTrainer, precision: str, jit_compile: bool, steps_per_epoch: int
    ) -> baseline.HandWritten | None:
        """`tfmp.run.baseline.supervised` with a fresh copy of the task's optimizer and its loss."""
        (network,) = trainer.networks.values()
        (optimizer,) = self.optimizers(steps_per_epoch)
        return baseline.supervised(network, optimizer, self.loss(), precision, jit_compile)


class ImageTask(Task):
    """A task on one of the image datasets tfmp loads by name (`config.dataset`, `tfmp.run.data.load_images`).

    `load_data` returns a `tfmp.run.data.Split` at the model's `image_shape`,
    split by the config's seed; the benchmark's batch is synthetic, so no
    dataset is loaded for it.

    Attributes:
        drop_remainder: Whether an incomplete last training batch is dropped.
    """

    config: ImageConfig
    drop_remainder: bool = False
    example_unit = "img"

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """`(height, width, channels)` of the model's images."""
        return self.config.image_shape

    def describe_data(self) -> str:
        return f"dataset={self.config.dataset}"

    def load_data(self) -> data_lib.Split:
        """The config's dataset at the model's image shape, split by its seed (`tfmp.run.data.load_images`)."""
        c = self.config
        return data_lib.load_images(c.dataset, self.image_shape, data_dir=c.data_dir, seed=c.seed)

    def steps_per_epoch(self, data: data_lib.Split | int) -> int:
        """Training steps per epoch over `data`'s training images (or that many), capped by `config.steps_per_epoch`.

        Raises:
            ConfigError: when the batch size leaves no step (incomplete
                batches dropped), naming it.
        """
        c = self.config
        num_examples = data if isinstance(data, int) else len(data.x_train)
        steps = num_examples // c.batch_size if self.drop_remainder else -(-num_examples // c.batch_size)
        if steps == 0:
            raise ConfigError(
                f"batch_size is larger than the {num_examples} training images of dataset {c.dataset!r}, and "
                f"incomplete batches are dropped; use a batch size <= {num_examples}. Received: "
                f"batch_size={c.batch_size}"
            )
        return min(steps, c.steps_per_epoch or steps)

    def _labels(self) -> bool:
        return True

    def probe(self, data: data_lib.Split) -> Any:
        """The first `batch_size` training examples, in the split's order, through the training pipeline."""
        n = min(self.config.batch_size, len(data.x_train))
        labels = data.y_train[:n] if self._labels() else None
        (batch,) = list(data_lib.make_dataset(data.x_train[:n], labels, batch_size=n, shuffle=False))
        return batch

    def benchmark_batch(self) -> Any:
        """Synthetic uniform [0, 1] images of `image_shape` (and int32 labels), seeded by `config.seed`."""
        c = self.config
        rng = np.random.default_rng(c.seed)
        images = tf.constant(rng.uniform(0.0, 1.0, (c.batch_size, *self.image_shape)).astype(np.float32))
        if not self._labels():
            return images
        return images, tf.constant(rng.integers(0, self.num_classes, c.batch_size).astype(np.int32))

    def hparams(self) -> dict[str, Any]:
        return {"dataset": self.config.dataset}


class GANTask(ImageTask):
    """The original tutorial's GAN (`tfmp.models.gan`, `tfmp.GANTrainer`): images only, incomplete batches dropped."""

    name = "gan"
    drop_remainder = True  # as the tutorial
    console_fields = (("G Loss", "g_loss"), ("D Loss", "d_loss"))
    config: GANConfig

    def __init__(self, config: GANConfig | None = None, name: str | None = None):
        super().__init__(GANConfig() if config is None else config, name)

    def _labels(self) -> bool:
        return False

    def train_data(self, data: data_lib.Split) -> tf.data.Dataset:
        c = self.config
        return data_lib.make_dataset(data.x_train, batch_size=c.batch_size, drop_remainder=True, seed=c.seed)

    def optimizers(self, steps_per_epoch: int) -> tuple[keras.optimizers.Optimizer, ...]:
        c = self.config
        return (
            trainers.TUTORIAL_GAN.generator_optimizer(c.generator_learning_rate),
            trainers.TUTORIAL_GAN.discriminator_optimizer(c.discriminator_learning_rate),
        )

    def build_trainer(
        self, loss_scale: str | float, jit_compile: bool, steps_per_epoch: int, data: Any
    ) -> trainers.MixedPrecisionTrainer:
        c = self.config
        trainer = trainers.GANTrainer(
            build_generator(c.latent_dim, c.generator_widths),
            build_discriminator(c.discriminator_widths),
            c.label_softening,
            c.label_swap_fraction,
            seed=c.seed,
        )
        trainer.compile(
            *self.optimizers(steps_per_epoch), loss_scale=loss_scale, skip_nonfinite=True, jit_compile=jit_compile
        )
        return trainer

    def hand_written_step(
        self, trainer: trainers.MixedPrecisionTrainer, precision: str, jit_compile: bool, steps_per_epoch: int
    ) -> baseline.HandWritten:
        """`tfmp.run.baseline.gan` with fresh copies of the GAN's optimizers."""
        return baseline.gan(trainer, self.optimizers(steps_per_epoch), precision, jit_compile, self.config.seed)

    def hparams(self) -> dict[str, Any]:
        c = self.config
        return {
            **super().hparams(),
            "latent_dim": c.latent_dim,
            "generator_learning_rate": c.generator_learning_rate,
            "discriminator_learning_rate": c.discriminator_learning_rate,
        }

    def callbacks(self, trainer: trainers.MixedPrecisionTrainer, run_dir: str) -> list[keras.callbacks.Callback]:
        """A grid of generated images per epoch, from fixed noise (`tfmp.run.callbacks.GeneratorSamples`)."""
        c = self.config
        noise = np.random.default_rng(c.seed).uniform(-1, 1, (c.num_samples, c.latent_dim))
        return [callbacks_lib.GeneratorSamples(os.path.join(run_dir, "generator"), trainer.generator, noise)]

    def summary_route(self, key: str) -> tuple[str, str]:
        """The tutorial's layout: the generator's and discriminator's curves overlay.

        `g_x` goes to `generator/x`, `d_x` to `discriminator/x` (tags
        `batch_x` and `epoch_x`, see `tfmp.run.callbacks.Summaries`); other keys
        (throughput) to the run's root. Validation keys get a
        `_validation` sub-run of their own.
        """
        validation = key.startswith("val_")
        if validation:
            key = key[4:]
        for prefix, run in (("g_", "generator"), ("d_", "discriminator")):
            if key.startswith(prefix):
                return (f"{run}_validation" if validation else run), key[len(prefix) :]
        return ("validation" if validation else ""), key


NetworkBuilder = Callable[[tuple[int, int, int], int], keras.Model]


class ClassifierTask(ImageTask, SupervisedTask):
    """An image classifier (`tfmp.Trainer`): labelled, shuffled, last batch kept.

    By default MobileNetV2 (`tfmp.models.mobilenet_v2`) as the config sets
    it up; another network with `network` (e.g. `resnet50_task`).

    Args:
        config: The run's settings.
        name: The model's name.
        network: `(image_shape, num_classes) -> keras.Model`, built under the
            current dtype policy; its output must be float32 (probabilities,
            or logits with `config.from_logits`). None: MobileNetV2 with the
            config's `alpha`, `from_logits` and `batch_norm_momentum`.
        image_shape: The network's input; None: the config's.
        cpu_bfloat16_float32_layers: The network's float32 advice for
            bfloat16 on a CPU; None: MobileNetV2's for the default network,
            none otherwise.
        num_classes: Classes when built without data (a synthetic workload);
            with data, the labels decide.
    """

    console_fields = (("Loss", "loss"), ("Accuracy", "accuracy"))
    config: ClassifierConfig

    def __init__(
        self,
        config: ClassifierConfig | None = None,
        name: str = "mobilenet_v2",
        network: NetworkBuilder | None = None,
        image_shape: tuple[int, int, int] | None = None,
        cpu_bfloat16_float32_layers: str | None = None,
        num_classes: int = 10,
    ):
        SupervisedTask.__init__(self, config=ClassifierConfig() if config is None else config, name=name)
        self._network = network
        self._image_shape = image_shape
        self._advice = cpu_bfloat16_float32_layers
        self.num_classes = num_classes

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return self._image_shape or self.config.image_shape

    @property
    def cpu_bfloat16_float32_layers(self) -> str:
        if self._advice is not None:
            return self._advice
        return cpu_bfloat16_float32_layers(self.image_shape) if self._network is None else ""

    def train_data(self, data: data_lib.Split) -> tf.data.Dataset:
        c = self.config
        return data_lib.make_dataset(data.x_train, data.y_train, batch_size=c.batch_size, seed=c.seed)

    def validation_data(self, data: data_lib.Split) -> tf.data.Dataset:
        return data_lib.make_dataset(
            data.x_val, data.y_val, batch_size=self.config.validation_batch_size, shuffle=False
        )

    def optimizers(self, steps_per_epoch: int) -> tuple[keras.optimizers.Optimizer, ...]:
        c = self.config
        learning_rate = c.learning_rate
        if c.lr_schedule == "cosine":
            learning_rate = keras.optimizers.schedules.CosineDecay(
                learning_rate, decay_steps=c.epochs * steps_per_epoch
            )
        return (keras.optimizers.Adam(learning_rate),)

    def loss(self) -> keras.losses.Loss:
        """The training loss (sparse categorical cross-entropy, from logits if the config says so)."""
        return keras.losses.SparseCategoricalCrossentropy(from_logits=self.config.from_logits)

    def metrics(self) -> list[Any]:
        return ["accuracy"]

    def build_model(self, data: data_lib.Split | None) -> keras.Model:
        c = self.config
        num_classes = self.num_classes if data is None else int(max(data.y_train.max(), data.y_val.max())) + 1
        if self._network is not None:
            return self._network(self.image_shape, num_classes)
        return build_mobilenet_v2_classifier(
            self.image_shape,
            num_classes=num_classes,
            alpha=c.alpha,
            from_logits=c.from_logits,
            batch_norm_momentum=c.batch_norm_momentum,
        )

    def hparams(self) -> dict[str, Any]:
        c = self.config
        return {
            **ImageTask.hparams(self),
            "alpha": c.alpha,
            "learning_rate": c.learning_rate,
            "lr_schedule": c.lr_schedule,
            "from_logits": c.from_logits,
            "batch_norm_momentum": c.batch_norm_momentum,
        }


def resnet50_task(config: ClassifierConfig | None = None, input_size: int = 64) -> ClassifierTask:
    """ResNet-50 (`tfmp.models.resnet50`) as a classifier variant, at `input_size` squared RGB."""
    return ClassifierTask(
        config,
        "resnet50",
        network=build_resnet50_classifier,  # (image_shape, num_classes); a function, so the task pickles
        image_shape=(input_size, input_size, 3),
    )


def task_for(config: TrainConfig) -> Task:
    """The shipped task a config describes: `GANTask` for a `GANConfig`, `ClassifierTask` for a `ClassifierConfig`.

    Raises:
        ConfigError: for another kind of config, naming it.
    """
    if isinstance(config, GANConfig):
        return GANTask(config)
    if isinstance(config, ClassifierConfig):
        return ClassifierTask(config)
    raise ConfigError(
        "No shipped model for this config; use GANConfig or ClassifierConfig, or give your model as a "
        f"tfmp.run.tasks.Task. Received: {type(config).__name__}"
    )


_NAME_MUST_BE = (
    "NAME must be a tfmp.run.tasks.Task, a Task subclass (made with its default config), or a function "
    "taking no arguments that returns a Task"
)


def load(spec: str) -> Task:
    """The task `spec` names: `"MODULE:NAME"` (a module on the Python path, or a path to a .py file).

    This is what `tfmp-train --task=...` (and the benchmark, diagnose and
    parity commands) call. `NAME` may be a `Task`, a `Task` subclass (made
    with its default config), or a function taking no arguments that
    returns a `Task`.

    Args:
        spec: e.g. `"my_tasks:TEXT_MODEL"` or `"path/to/my_tasks.py:TEXT_MODEL"`.

    Returns:
        The task.

    Raises:
        ConfigError: for a spec without `:`, a missing module or file, a
            module that does not import (a SyntaxError or an ImportError:
            the file, the line and the error), a missing attribute, or an
            attribute of the wrong kind (named as what it is), about the
            setting `task`, naming `spec` and what NAME must be.
    """
    if not isinstance(spec, str) or spec.count(":") < 1 or not all(spec.rpartition(":")[::2]):
        raise task_error(
            "must be MODULE:NAME (a module on the Python path or a .py file, and the name of its task); "
            f"{_NAME_MUST_BE}.",
            spec,
        )
    module_name, _, name = spec.rpartition(":")
    module = import_module(module_name, spec)
    if not hasattr(module, name):
        found = sorted(k for k, v in vars(module).items() if isinstance(v, Task) and not k.startswith("_"))
        listed = f" It defines these tasks: {', '.join(found)}." if found else " It defines no Task."
        raise task_error(f"module {module.__name__!r} has no attribute {name!r}.{listed}", spec)
    value = getattr(module, name)
    if inspect.isclass(value):
        if not issubclass(value, Task):
            raise task_error(f"{name} is {kind(value)} that is not a Task subclass; {_NAME_MUST_BE}.", spec)
        if inspect.isabstract(value):
            missing = ", ".join(sorted(value.__abstractmethods__))
            raise task_error(f"{name} is an abstract Task subclass (it lacks {missing}); {_NAME_MUST_BE}.", spec)
        return value()
    if inspect.isroutine(value) or isinstance(value, functools.partial):
        try:
            inspect.signature(value).bind()
        except (TypeError, ValueError):
            raise task_error(f"{name} is a function that takes arguments; {_NAME_MUST_BE}.", spec) from None
        result = value()
        if not isinstance(result, Task):
            raise task_error(f"{name} is a function that returned {kind(result)}, not a Task; {_fix(result)}", spec)
        return result
    if not isinstance(value, Task):
        raise task_error(f"{name} is {kind(value)}, not a Task; {_fix(value)}", spec)
    return value


def _fix(value: Any) -> str:
    """What to do about a NAME that is (or returned) `value` rather than a Task: for a model, wrap its builder."""
    if isinstance(value, keras.Model):
        return (
            "give the function that builds the model to tfmp.run.tasks.SupervisedTask(model=..., train_data=..., "
            "loss=...) and name that task."
        )
    return f"{_NAME_MUST_BE}."
