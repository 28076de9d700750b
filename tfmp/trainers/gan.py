"""The original tutorial's GAN training: `TUTORIAL_GAN`'s settings, `discriminator_labels` and `GANTrainer`."""

from __future__ import annotations

import dataclasses
from typing import Any

import keras
import tensorflow as tf

from tfmp import _deprecated, float32_layers
from tfmp.trainers.base import MixedPrecisionTrainer, Objective, prepare_optimizer
from tfmp.transaction import Step

__all__ = ["GANTrainer", "TUTORIAL_GAN", "TutorialGANTraining", "discriminator_labels"]


def _replica_rows(batch_size: int | tf.Tensor) -> tuple[int | tf.Tensor, int | tf.Tensor]:
    """`(offset, global_batch_size)`: where this replica's rows sit in the step's global batch.

    `fit()` under a strategy gives replica `i` rows `i*b .. (i+1)*b - 1` of
    each global batch (`b` rows each: an even split is assumed, as
    `tfmp.run.distribute.per_replica_batch` requires). `(0, batch_size)` outside
    a multi-replica step.
    """
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return 0, batch_size
    replica = tf.cast(context.replica_id_in_sync_group, tf.int32)
    return replica * batch_size, context.num_replicas_in_sync * batch_size


@dataclasses.dataclass(frozen=True)
class TutorialGANTraining:
    """How the original tutorial's GAN trains, defined once.

    `GANTrainer`'s defaults, `tfmp.run.config.GANConfig`'s, and through it the
    training runs, the benchmark and the diagnosis all read these values.
    (The architecture's own defaults are in `tfmp.models.gan`.)

    Attributes:
        generator_learning_rate: The generator's Adam rate.
        discriminator_learning_rate: The discriminator's RMSprop rate.
        label_softening: See `discriminator_labels`.
        label_swap_fraction: See `discriminator_labels`.
    """

    generator_learning_rate: float = 1e-3
    discriminator_learning_rate: float = 1e-4
    label_softening: float = 0.01
    label_swap_fraction: float = 0.1

    def generator_optimizer(self, learning_rate: float | None = None) -> keras.optimizers.Optimizer:
        """A fresh `Adam`, the tutorial generator's optimizer (at `learning_rate` if given)."""
        return keras.optimizers.Adam(self.generator_learning_rate if learning_rate is None else learning_rate)

    def discriminator_optimizer(self, learning_rate: float | None = None) -> keras.optimizers.Optimizer:
        """A fresh `RMSprop`, the tutorial discriminator's optimizer (at `learning_rate` if given)."""
        return keras.optimizers.RMSprop(self.discriminator_learning_rate if learning_rate is None else learning_rate)


TUTORIAL_GAN = TutorialGANTraining()

# tfmp 0.1's names, from when the docs called the original tutorials "seeds" (`tfmp._deprecated.MOVED_NAMES`).
__getattr__ = _deprecated.module_getattr(__name__)


def discriminator_labels(
    batch_size: int | tf.Tensor,
    softening: float,
    swap_fraction: float,
    offset: int | tf.Tensor = 0,
    global_batch_size: int | tf.Tensor | None = None,
) -> tuple[tf.Tensor, tf.Tensor]:
    """The tutorial's discriminator targets: softened, with a few rows swapped.

    The seed labels real images 0 and fake images 1, softened towards each
    other by `softening` (real `softening`, fake `1 - softening`). Its stated
    aim is to "invert a few of the discriminator labels" each step: the first
    `floor(batch_size * swap_fraction)` rows of each batch get the other
    class's label. (The published code, with `soften=0.1`, moved those rows to
    the hard labels 0 and 1 instead of inverting them; tfmp inverts them.)

    Args:
        batch_size: Images per batch (may be a scalar tensor).
        softening: Distance of each label from the hard 0/1 target.
        swap_fraction: Share of rows whose real and fake labels are swapped.
        offset: The first row's index in the step's global batch (a
            replica's share of it starts there under a distribution strategy).
        global_batch_size: The global batch, whose first rows are swapped;
            default `batch_size`.

    Returns:
        `(real_labels, fake_labels)`, float32 of shape `(batch_size, 1)`.
    """
    rows = tf.range(batch_size) + offset
    total = batch_size if global_batch_size is None else global_batch_size
    n_swap = tf.cast(tf.floor(tf.cast(total, tf.float32) * swap_fraction), tf.int32)
    swapped = (rows < n_swap)[:, None]
    real, fake = tf.constant(softening, tf.float32), tf.constant(1.0 - softening, tf.float32)
    return tf.where(swapped, fake, real), tf.where(swapped, real, fake)


@keras.saving.register_keras_serializable(package="tfmp")
class GANTrainer(MixedPrecisionTrainer):
    """Trains the original tutorial's GAN: generator step, then discriminator step.

    Each step draws fresh noise uniform in [-1, 1] and updates the generator
    (target: the discriminator calls its images real) and then the
    discriminator (real images against freshly generated ones), each with its
    own forward pass, optimizer and loss scale, as the tutorial does. The loss is
    the mean sigmoid cross-entropy on float32 logits; labels follow
    `discriminator_labels` (real 0, fake 1, softened, 10% swapped).

    `fit()` takes a dataset of real images (a `(images, labels)` dataset
    works; labels are ignored). Calling the trainer on noise runs the
    generator, so `predict(noise)` makes images.

    Args:
        generator: Maps `(batch, latent_dim)` noise to images.
        discriminator: Maps images to `(batch, 1)` float32 logits.
        label_softening: See `discriminator_labels` (the tutorial's: `TUTORIAL_GAN`).
        label_swap_fraction: See `discriminator_labels` (the tutorial's: `TUTORIAL_GAN`).
        seed: Seed of the noise generator.
        **kwargs: Passed to `keras.Model`.
    """

    loss_scale_prefixes = ("g_", "d_")
    images_per_example = 2

    def __init__(
        self,
        generator: keras.Model,
        discriminator: keras.Model,
        label_softening: float = TUTORIAL_GAN.label_softening,
        label_swap_fraction: float = TUTORIAL_GAN.label_swap_fraction,
        seed: int | None = None,
        **kwargs: Any,
    ):
        kwargs.setdefault("name", "gan_trainer")
        super().__init__(**kwargs)
        if not 0 <= label_softening < 0.5:
            raise ValueError(f"label_softening must be in [0, 0.5). Received: label_softening={label_softening!r}")
        if not 0 <= label_swap_fraction <= 1:
            raise ValueError(
                f"label_swap_fraction must be in [0, 1]. Received: label_swap_fraction={label_swap_fraction!r}"
            )
        self.generator = generator
        self.discriminator = discriminator
        self.latent_dim = int(generator.input_shape[-1])
        self.label_softening = float(label_softening)
        self.label_swap_fraction = float(label_swap_fraction)
        self.seed = seed
        self.noise_seed = keras.random.SeedGenerator(seed)
        self.g_loss_tracker = keras.metrics.Mean(name="g_loss")
        self.d_loss_tracker = keras.metrics.Mean(name="d_loss")
        self.bce = keras.losses.BinaryCrossentropy(from_logits=True)
        self.generator_optimizer = None
        self.discriminator_optimizer = None
        self.built = generator.built and discriminator.built

    def get_config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "generator": keras.saving.serialize_keras_object(self.generator),
            "discriminator": keras.saving.serialize_keras_object(self.discriminator),
            "label_softening": self.label_softening,
            "label_swap_fraction": self.label_swap_fraction,
            "seed": self.seed,
        }

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: dict[str, Any] | None = None) -> GANTrainer:
        config = dict(config)
        networks = [
            keras.saving.deserialize_keras_object(config.pop(name), custom_objects=custom_objects)
            for name in ("generator", "discriminator")
        ]
        return cls(*networks, **config)

    def get_compile_config(self) -> dict[str, Any]:
        """Keras's compile settings (`jit_compile`, ...) and the two optimizers, serialized."""
        config = super().get_compile_config()
        if config:
            config.pop("optimizer", None)
            config["generator_optimizer"] = keras.saving.serialize_keras_object(self.generator_optimizer)
            config["discriminator_optimizer"] = keras.saving.serialize_keras_object(self.discriminator_optimizer)
        return config

    @property
    def metrics(self) -> list[keras.metrics.Metric]:
        # Listed here so fit() and evaluate() reset them every epoch.
        return [self.g_loss_tracker, self.d_loss_tracker]

    def call(self, noise: Any, training: bool = False) -> Any:
        return self.generator(noise, training=training)

    def compile(
        self,
        generator_optimizer: str | keras.optimizers.Optimizer | None = None,
        discriminator_optimizer: str | keras.optimizers.Optimizer | None = None,
        loss_scale: str | float | None = "dynamic",
        skip_nonfinite: bool = True,
        **kwargs: Any,
    ) -> None:
        """Configures training.

        Args:
            generator_optimizer: Defaults to the tutorial's (`TUTORIAL_GAN.generator_optimizer()`).
            discriminator_optimizer: Defaults to the tutorial's (`TUTORIAL_GAN.discriminator_optimizer()`).
            loss_scale: `"dynamic"`, `"none"` or a fixed scale, applied to
                each optimizer separately when its model computes in float16.
            skip_nonfinite: Skip (and count) steps with a non-finite gradient
                under every precision (see `prepare_optimizer`); False gives
                float32 and bfloat16 the bare optimizer, which writes a NaN
                batch into the weights.
            **kwargs: Other `keras.Model.compile` arguments, e.g. `jit_compile`.
        """
        kwargs["auto_scale_loss"] = False
        for keras_only in ("loss", "loss_weights", "metrics", "weighted_metrics"):
            kwargs.pop(keras_only, None)  # None in a saved compile config: the GAN has its own losses
        super().compile(optimizer=None, **kwargs)
        self.generator_optimizer = prepare_optimizer(
            generator_optimizer or TUTORIAL_GAN.generator_optimizer(), self.generator, loss_scale, skip_nonfinite
        )
        self.discriminator_optimizer = prepare_optimizer(
            discriminator_optimizer or TUTORIAL_GAN.discriminator_optimizer(),
            self.discriminator,
            loss_scale,
            skip_nonfinite,
        )
        self.generator_optimizer.build(self.generator.trainable_variables)
        self.discriminator_optimizer.build(self.discriminator.trainable_variables)
        self.decide_routing()

    def sample_noise(self, batch_size: int | tf.Tensor) -> tf.Tensor:
        """Noise uniform in [-1, 1], float32 `(batch_size, latent_dim)`.

        In a multi-replica step every replica holds the same seed, so each
        draws the global batch's noise and keeps its own rows: replicas get
        different noise, the noise a single device would draw.
        """
        offset, total = _replica_rows(batch_size)
        noise = keras.random.uniform((total, self.latent_dim), minval=-1.0, maxval=1.0, seed=self.noise_seed)
        return noise if total is batch_size else noise[offset : offset + batch_size]

    def _loss(self, logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        return self.bce(labels, tf.cast(logits, tf.float32))

    def generator_loss(self, batch_size: int | tf.Tensor, training: bool) -> tf.Tensor:
        """The generator's loss on fresh noise: its images should pass as real."""
        fake_logits = self.discriminator(
            self.generator(self.sample_noise(batch_size), training=training), training=training
        )
        real_target = tf.fill((batch_size, 1), tf.constant(self.label_softening, tf.float32))
        return self._loss(fake_logits, real_target)

    def discriminator_loss(self, real: tf.Tensor, fake: tf.Tensor, training: bool) -> tf.Tensor:
        """The discriminator's loss: the mean of its real and fake losses."""
        batch_size = tf.shape(real)[0]
        offset, total = _replica_rows(batch_size)
        real_labels, fake_labels = discriminator_labels(
            batch_size, self.label_softening, self.label_swap_fraction, offset, total
        )
        real_loss = self._loss(self.discriminator(real, training=training), real_labels)
        fake_loss = self._loss(self.discriminator(fake, training=training), fake_labels)
        return 0.5 * (real_loss + fake_loss)

    @staticmethod
    def _real_images(data: Any) -> tf.Tensor:
        x, _, _ = keras.utils.unpack_x_y_sample_weight(data)
        return x

    @property
    def networks(self) -> dict[str, keras.Model]:
        return {"generator": self.generator, "discriminator": self.discriminator}

    @property
    def loss_networks(self) -> dict[str, keras.Model]:
        return {"discriminator": self.discriminator}

    @property
    def optimizers(self) -> dict[str, keras.optimizers.Optimizer]:
        return {"generator": self.generator_optimizer, "discriminator": self.discriminator_optimizer}

    def objectives(self, data: Any) -> list[Objective]:
        """The generator's and the discriminator's losses on one batch.

        The discriminator's fakes are drawn once, from the current generator
        (`train_step` draws them after the generator's update).
        """
        real = self._real_images(data)
        batch_size = tf.shape(real)[0]
        fake = self.generator(self.sample_noise(batch_size), training=True)
        return [
            Objective(
                "generator",
                self.generator_optimizer,
                self.generator.trainable_variables,
                lambda: self.generator_loss(batch_size, training=True),
            ),
            Objective(
                "discriminator",
                self.discriminator_optimizer,
                self.discriminator.trainable_variables,
                lambda: self.discriminator_loss(real, fake, training=True),
            ),
        ]

    def float32_copy(self) -> GANTrainer:
        copy = GANTrainer(
            float32_layers.float32_copy(self.generator),
            float32_layers.float32_copy(self.discriminator),
            self.label_softening,
            self.label_swap_fraction,
        )
        copy.noise_seed.state.assign(self.noise_seed.state)
        copy.compile(keras.optimizers.SGD(), keras.optimizers.SGD(), loss_scale="none")
        return copy

    def train_step(self, data: Any) -> dict[str, Any]:
        real = self._real_images(data)
        batch_size = tf.shape(real)[0]
        self.optimize(
            self.generator_optimizer,
            self.generator.trainable_variables,
            lambda step: self._recorded(step, self.g_loss_tracker, self.generator_loss(batch_size, training=True)),
        )
        self.optimize(
            self.discriminator_optimizer,
            self.discriminator.trainable_variables,
            lambda step: self._recorded(step, self.d_loss_tracker, self._discriminator_step_loss(real, batch_size)),
        )
        logs = self._logs()
        logs.update(
            self.undefined_until_counted(self.generator_optimizer, self.g_loss_tracker, {"g_loss": logs["g_loss"]})
        )
        logs.update(
            self.undefined_until_counted(self.discriminator_optimizer, self.d_loss_tracker, {"d_loss": logs["d_loss"]})
        )
        logs.update(self.learning_rate_logs(self.generator_optimizer, "g_"))
        logs.update(self.learning_rate_logs(self.discriminator_optimizer, "d_"))
        return logs

    def _recorded(self, step: Step, tracker: keras.metrics.Mean, loss: tf.Tensor) -> tuple[tf.Tensor, None]:
        """`(loss, None)` for `optimize`, with `loss` averaged into `tracker` unless the step is skipped."""
        step.unless_skipped(lambda: tracker.update_state(self._unscale_for_distribution(loss)))
        return loss, None

    def _discriminator_step_loss(self, real: tf.Tensor, batch_size: tf.Tensor) -> tf.Tensor:
        # The fakes come from the freshly updated generator, inside the
        # discriminator's update: a skipped discriminator step also undoes
        # what generating them wrote into the generator's BatchNorm
        # statistics. No gradient flows back into the generator. The noise is
        # drawn after the generator step's, as before, so the stream is the same.
        fake = tf.stop_gradient(self.generator(self.sample_noise(batch_size), training=True))
        return self.discriminator_loss(real, fake, training=True)

    def test_step(self, data: Any) -> dict[str, Any]:
        real = self._real_images(data)
        batch_size = tf.shape(real)[0]
        g_loss = self.generator_loss(batch_size, training=False)
        fake = self.generator(self.sample_noise(batch_size), training=False)
        d_loss = self.discriminator_loss(real, fake, training=False)
        self.g_loss_tracker.update_state(self._unscale_for_distribution(g_loss))
        self.d_loss_tracker.update_state(self._unscale_for_distribution(d_loss))
        return self._logs()

    def _logs(self) -> dict[str, Any]:
        logs = {m.name: m.result() for m in self.metrics}
        logs.update(self.loss_scale_logs(self.generator_optimizer, "g_"))
        logs.update(self.loss_scale_logs(self.discriminator_optimizer, "d_"))
        return logs
