"""One Task per model: everything one run config builds, defined once.

A `Task` turns a config (`tfmp.run.config.GANConfig`, `ClassifierConfig`) into
what every consumer of a model needs:

* the networks and the trainer, compiled with the run's choices (optimizers
  and learning-rate schedule, loss, metrics, loss scaling, XLA), and the
  layers kept in float32 (`build`);
* the input pipelines, in the seeded order (`train_data`,
  `validation_data`, `stream`), the batch `auto` and the diagnostics probe
  (`probe`), and the steps of an epoch (`steps_per_epoch`);
* the run's model-specific hyperparameters and callbacks (`hparams`,
  `callbacks`);
* how its logs are shown: the console's fields (`console_fields`) and the
  TensorBoard layout (`summary_route`).

Training (`tfmp.run.runner`), the diagnosis (`tfmp.run.training.diagnose_run`),
`auto`'s measurement, the benchmark (`tfmp.run.benchmark`) and the parity check
(`tfmp.run.parity`) all build from the same Task, so the benchmark measures what
training runs because it is the same code, not a copy of it.

A Task is cheap to make and holds no TensorFlow state: `build` makes new
networks each call, under the dtype policy the caller has set
(`tfmp.precision_scope`).

```python
task = tasks.task_for(config.GANConfig(dataset="digits"))
split = task.load_data()
with tfmp.precision_scope("mixed_bfloat16"):
    built = task.build("mixed_bfloat16", loss_scale="none", jit_compile=False,
                       steps_per_epoch=task.steps_per_epoch(len(split.x_train)), split=split)
built.trainer.fit(task.train_data(split))
```
"""

from __future__ import annotations

import abc
import copy
import dataclasses
import os
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tfmp import precision as precision_lib
from tfmp import trainers
from tfmp.models.gan import build_discriminator, build_generator
from tfmp.models.mobilenet_v2 import build_mobilenet_v2_classifier, cpu_bfloat16_float32_layers
from tfmp.models.resnet50 import build_resnet50_classifier
from tfmp.run import callbacks as callbacks_lib
from tfmp.run import data as data_lib
from tfmp.run.config import ClassifierConfig, ConfigError, GANConfig, TrainConfig

__all__ = [
    "Built",
    "ClassifierTask",
    "GANTask",
    "NetworkBuilder",
    "Task",
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


def _probe_batch(x: np.ndarray, y: np.ndarray | None, batch_size: int) -> Any:
    """The first `batch_size` training examples, through the training pipeline."""
    n = min(batch_size, len(x))
    (batch,) = list(data_lib.make_dataset(x[:n], None if y is None else y[:n], batch_size=n, shuffle=False))
    return batch


class Task(abc.ABC):
    """A model's run as one config describes it. Subclass `GANTask` or `ClassifierTask`.

    Args:
        config: The run's settings.
        name: The model's name, if not the class's.

    Attributes:
        name: The model's name (benchmark rows, messages).
        drop_remainder: Whether an incomplete last training batch is dropped.
        console_fields: `(label, log key)` pairs of each console line.
    """

    name: str
    drop_remainder: bool = False
    console_fields: tuple[tuple[str, str], ...] = (("Loss", "loss"),)

    def __init__(self, config: TrainConfig, name: str | None = None):
        self.config = config
        if name is not None:
            self.name = name

    def replace(self, **changes: Any) -> Task:
        """This task with `dataclasses.replace(config, **changes)` as its config."""
        other = copy.copy(self)
        other.config = dataclasses.replace(self.config, **changes)
        return other

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """`(height, width, channels)` of the model's images."""
        return self.config.image_shape

    @property
    def cpu_bfloat16_float32_layers(self) -> str:
        """The model's `float32_layers` advice for bfloat16 on a CPU (what `"auto"` applies there); "" for none."""
        return ""

    def float32_pattern(self, precision: str) -> str:
        """The `float32_layers` pattern a run at `precision` applies ("" = none)."""
        return precision_lib.resolve_float32_layers(
            self.config.float32_layers, precision, self.cpu_bfloat16_float32_layers
        )

    # -- data ------------------------------------------------------------------

    def load_data(self) -> data_lib.Split:
        """The config's dataset at the model's image shape, split by its seed (`tfmp.run.data.load_images`)."""
        c = self.config
        return data_lib.load_images(c.dataset, self.image_shape, data_dir=c.data_dir, seed=c.seed)

    def steps_per_epoch(self, num_examples: int) -> int:
        """Training steps per epoch over `num_examples`, capped by `config.steps_per_epoch`.

        Raises:
            ConfigError: when the batch size leaves no step (incomplete
                batches dropped), naming it.
        """
        c = self.config
        steps = num_examples // c.batch_size if self.drop_remainder else -(-num_examples // c.batch_size)
        if steps == 0:
            raise ConfigError(
                f"batch_size is larger than the {num_examples} training images of dataset {c.dataset!r}, and "
                f"incomplete batches are dropped; use a batch size <= {num_examples}. Received: "
                f"batch_size={c.batch_size}"
            )
        return min(steps, c.steps_per_epoch or steps)

    @abc.abstractmethod
    def train_data(self, split: data_lib.Split) -> tf.data.Dataset:
        """A fresh training pipeline: one epoch, in the seeded shuffle order."""

    def validation_data(self, split: data_lib.Split) -> tf.data.Dataset | None:
        """The validation pipeline, or None when the model has none."""
        return None

    def stream(self, split: data_lib.Split, position: int = 0) -> tf.data.Dataset:
        """The training batches from global step `position` on.

        Epoch after epoch in the seeded shuffle order; a fresh pipeline replays
        the same order, so skipping `position` batches lands where a stopped
        run left off.
        """
        return self.train_data(split).repeat().skip(position)

    def batch_at(self, split: data_lib.Split, index: int) -> Any:
        """The training batch of 0-based global step `index`."""
        return next(iter(self.stream(split, index).take(1)))

    @abc.abstractmethod
    def probe(self, split: data_lib.Split) -> Any:
        """The first `batch_size` training examples as one batch (for `auto` and the diagnostics)."""

    # -- model -----------------------------------------------------------------

    @abc.abstractmethod
    def optimizers(self, steps_per_epoch: int) -> tuple[keras.optimizers.Optimizer, ...]:
        """Fresh optimizers, in the trainer's `compile` order, as the run configures them."""

    @abc.abstractmethod
    def _trainer(
        self, loss_scale: str | float, jit_compile: bool, steps_per_epoch: int, split: data_lib.Split | None
    ) -> trainers.MixedPrecisionTrainer:
        """The networks and the compiled trainer."""

    def build(
        self,
        precision: str,
        loss_scale: str | float,
        jit_compile: bool,
        steps_per_epoch: int = 1,
        split: data_lib.Split | None = None,
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
            split: The data the run trains on (e.g. its number of classes);
                None for a synthetic workload.

        Raises:
            ConfigError: when the float32_layers pattern matches no layer.
        """
        trainer = self._trainer(loss_scale, jit_compile, steps_per_epoch, split)
        pattern = self.float32_pattern(precision)
        if not pattern:
            return Built(trainer)
        try:
            kept = precision_lib.keep_float32(list(trainer.networks.values()), pattern)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        return Built(trainer, pattern, tuple(kept))

    @abc.abstractmethod
    def hparams(self) -> dict[str, Any]:
        """The model's hyperparameters for TensorBoard's HParams."""

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


class GANTask(Task):
    """The seed's GAN (`tfmp.models.gan`, `tfmp.trainers.GANTrainer`): images only, incomplete batches dropped."""

    name = "gan"
    drop_remainder = True  # as the seed
    console_fields = (("G Loss", "g_loss"), ("D Loss", "d_loss"))
    config: GANConfig

    def train_data(self, split: data_lib.Split) -> tf.data.Dataset:
        c = self.config
        return data_lib.make_dataset(split.x_train, batch_size=c.batch_size, drop_remainder=True, seed=c.seed)

    def probe(self, split: data_lib.Split) -> Any:
        return _probe_batch(split.x_train, None, self.config.batch_size)

    def optimizers(self, steps_per_epoch: int) -> tuple[keras.optimizers.Optimizer, ...]:
        c = self.config
        return (
            trainers.SEED_GAN.generator_optimizer(c.generator_learning_rate),
            trainers.SEED_GAN.discriminator_optimizer(c.discriminator_learning_rate),
        )

    def _trainer(
        self, loss_scale: str | float, jit_compile: bool, steps_per_epoch: int, split: data_lib.Split | None
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

    def hparams(self) -> dict[str, Any]:
        c = self.config
        return {
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
        """The seed's layout: the generator's and discriminator's curves overlay.

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


class ClassifierTask(Task):
    """An image classifier (`tfmp.trainers.ClassifierTrainer`): labelled, shuffled, last batch kept.

    By default MobileNetV2 (`tfmp.models.mobilenet_v2`) as the config sets
    it up (seed 002); another network with `network` (e.g. `resnet50_task`).

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
        config: ClassifierConfig,
        name: str = "mobilenet_v2",
        network: NetworkBuilder | None = None,
        image_shape: tuple[int, int, int] | None = None,
        cpu_bfloat16_float32_layers: str | None = None,
        num_classes: int = 10,
    ):
        super().__init__(config, name)
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

    def train_data(self, split: data_lib.Split) -> tf.data.Dataset:
        c = self.config
        return data_lib.make_dataset(split.x_train, split.y_train, batch_size=c.batch_size, seed=c.seed)

    def validation_data(self, split: data_lib.Split) -> tf.data.Dataset:
        return data_lib.make_dataset(
            split.x_val, split.y_val, batch_size=self.config.validation_batch_size, shuffle=False
        )

    def probe(self, split: data_lib.Split) -> Any:
        return _probe_batch(split.x_train, split.y_train, self.config.batch_size)

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

    def _trainer(
        self, loss_scale: str | float, jit_compile: bool, steps_per_epoch: int, split: data_lib.Split | None
    ) -> trainers.MixedPrecisionTrainer:
        c = self.config
        num_classes = self.num_classes if split is None else int(max(split.y_train.max(), split.y_val.max())) + 1
        if self._network is None:
            network = build_mobilenet_v2_classifier(
                self.image_shape,
                num_classes=num_classes,
                alpha=c.alpha,
                from_logits=c.from_logits,
                batch_norm_momentum=c.batch_norm_momentum,
            )
        else:
            network = self._network(self.image_shape, num_classes)
        trainer = trainers.ClassifierTrainer(network)
        (optimizer,) = self.optimizers(steps_per_epoch)
        trainer.compile(
            optimizer,
            loss=self.loss(),
            metrics=["accuracy"],
            loss_scale=loss_scale,
            skip_nonfinite=True,
            jit_compile=jit_compile,
        )
        return trainer

    def hparams(self) -> dict[str, Any]:
        c = self.config
        return {
            "alpha": c.alpha,
            "learning_rate": c.learning_rate,
            "lr_schedule": c.lr_schedule,
            "from_logits": c.from_logits,
            "batch_norm_momentum": c.batch_norm_momentum,
        }


def resnet50_task(config: ClassifierConfig, input_size: int = 64) -> ClassifierTask:
    """ResNet-50 (`tfmp.models.resnet50`) as a classifier variant, at `input_size` squared RGB."""
    return ClassifierTask(
        config,
        "resnet50",
        network=build_resnet50_classifier,  # (image_shape, num_classes); a function, so the task pickles
        image_shape=(input_size, input_size, 3),
    )


def task_for(config: TrainConfig) -> Task:
    """The task a config describes: `GANTask` for a `GANConfig`, `ClassifierTask` for a `ClassifierConfig`.

    Raises:
        ConfigError: for another kind of config, naming it.
    """
    if isinstance(config, GANConfig):
        return GANTask(config)
    if isinstance(config, ClassifierConfig):
        return ClassifierTask(config)
    raise ConfigError(f"No model for this config; use GANConfig or ClassifierConfig. Received: {type(config).__name__}")
