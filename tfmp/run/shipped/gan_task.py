"""The original tutorial's GAN as a task: `tfmp.models.gan`'s networks, trained by `tfmp.GANTrainer`."""

from __future__ import annotations

import os
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tfmp import _deprecated, trainers
from tfmp.models.gan import build_discriminator, build_generator
from tfmp.run import data as data_lib
from tfmp.run.callbacks.tensorboard import GeneratorSamples
from tfmp.run.config import GANConfig
from tfmp.run.shipped.image_task import ImageTask, synthetic_batch

__all__ = ["GANTask", "gan_route"]


def gan_route(key: str) -> tuple[str, str]:
    """The tutorial's TensorBoard layout: the generator's and discriminator's curves overlay.

    `g_x` goes to `generator/x`, `d_x` to `discriminator/x` (tags `batch_x`
    and `epoch_x`, see `tfmp.run.callbacks.Summaries`); other keys
    (throughput) to the run's root. Validation keys get a `_validation`
    sub-run of their own.
    """
    validation = key.startswith("val_")
    if validation:
        key = key[4:]
    for prefix, run in (("g_", "generator"), ("d_", "discriminator")):
        if key.startswith(prefix):
            return (f"{run}_validation" if validation else run), key[len(prefix) :]
    return ("validation" if validation else ""), key


class GANTask(ImageTask):
    """The original tutorial's GAN (`tfmp.models.gan`, `tfmp.GANTrainer`) on an image dataset loaded by name.

    Images only, incomplete batches dropped, as the tutorial. The benchmark's
    batch is synthetic, so no dataset is loaded for it.

    Args:
        config: The run's settings; default `GANConfig()`.
        name: The model's name.
    """

    name = "gan"
    config: GANConfig
    drop_remainder = True  # as the tutorial
    labelled = False

    def __init__(self, config: GANConfig | None = None, name: str | None = None):
        super().__init__(GANConfig() if config is None else config, name)

    def train_data(self, data: data_lib.Split) -> tf.data.Dataset:
        c = self.config
        return data_lib.make_dataset(
            data.x_train, batch_size=c.batch_size, drop_remainder=self.drop_remainder, seed=c.seed
        )

    def optimizers(self, steps_per_epoch: int) -> tuple[keras.optimizers.Optimizer, ...]:
        c = self.config
        return (
            trainers.TUTORIAL_GAN.generator_optimizer(c.generator_learning_rate),
            trainers.TUTORIAL_GAN.discriminator_optimizer(c.discriminator_learning_rate),
        )

    def build_trainer(
        self, loss_scale: str | float, xla: bool, steps_per_epoch: int, data: Any
    ) -> trainers.MixedPrecisionTrainer:
        c = self.config
        trainer = trainers.GANTrainer(
            build_generator(c.latent_dim, c.generator_widths),
            build_discriminator(c.discriminator_widths),
            c.label_softening,
            c.label_swap_fraction,
            seed=c.seed,
        )
        trainer.compile(*self.optimizers(steps_per_epoch), loss_scale=loss_scale, skip_nonfinite=True, jit_compile=xla)
        return trainer

    def hparams(self) -> dict[str, Any]:
        c = self.config
        return {
            "dataset": c.dataset,
            "latent_dim": c.latent_dim,
            "generator_learning_rate": c.generator_learning_rate,
            "discriminator_learning_rate": c.discriminator_learning_rate,
        }

    @_deprecated.renamed_argument("Task.callbacks(run_dir)")
    def callbacks(
        self, trainer: trainers.MixedPrecisionTrainer, tensorboard_dir: str
    ) -> list[keras.callbacks.Callback]:
        """A grid of generated images per epoch, from fixed noise, in the `generator` sub-run
        (`tfmp.run.callbacks.GeneratorSamples`)."""
        c = self.config
        noise = np.random.default_rng(c.seed).uniform(-1, 1, (c.num_samples, c.latent_dim))
        return [GeneratorSamples(os.path.join(tensorboard_dir, "generator"), trainer.generator, noise)]

    # -- how the run framework shows it (see tfmp.run.tasks) --------------------

    def console_fields(self) -> tuple[tuple[str, str], ...]:
        return (("G Loss", "g_loss"), ("D Loss", "d_loss"))

    def summary_route(self, key: str) -> tuple[str, str]:
        """`gan_route`: the tutorial's layout."""
        return gan_route(key)

    def benchmark_batch(self) -> Any:
        """Synthetic uniform [0, 1] images, seeded by `config.seed`."""
        return synthetic_batch(self.config, self.image_shape, None)
