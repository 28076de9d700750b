"""Tests for tfmp/run/shipped/gan_task.py: the tutorial's GAN as a task."""

import dataclasses

import keras
import numpy as np
import pytest

import tfmp
from tfmp import trainers
from tfmp.models import gan as gan_model
from tfmp.run import config as config_lib
from tfmp.run import shipped

TINY_GAN = config_lib.GANConfig(
    dataset="digits", batch_size=32, latent_dim=8, generator_widths=(8, 8, 8), discriminator_widths=(8, 8, 8)
)
TINY_CLASSIFIER = config_lib.ClassifierConfig(dataset="digits", batch_size=16, alpha=0.35, epochs=3)


def test_gan_summary_route_is_the_tutorials_layout():
    route = shipped.GANTask(TINY_GAN).summary_route
    assert route("g_loss") == ("generator", "loss")
    assert route("d_loss") == ("discriminator", "loss")
    assert route("d_loss_scale") == ("discriminator", "loss_scale")
    assert route("images_per_sec") == ("", "images_per_sec")
    assert route("val_g_loss") == ("generator_validation", "loss")


def test_the_tutorial_gans_values_are_defined_once_and_everything_reads_them():
    # The tutorial: 100 noise values, widths (64, 32, 8) and (24, 64, 128), Adam(1e-3), RMSprop(1e-4), 0.01, 0.1.
    tutorial = trainers.TUTORIAL_GAN
    assert (tutorial.generator_learning_rate, tutorial.discriminator_learning_rate) == (1e-3, 1e-4)
    assert (tutorial.label_softening, tutorial.label_swap_fraction) == (0.01, 0.1)
    default = config_lib.GANConfig()
    assert (
        (default.latent_dim, default.generator_widths, default.discriminator_widths)
        == (gan_model.LATENT_DIM, gan_model.GENERATOR_WIDTHS, gan_model.DISCRIMINATOR_WIDTHS)
        == (100, (64, 32, 8), (24, 64, 128))
    )
    with tfmp.precision_scope("float32"):
        built = shipped.GANTask(
            dataclasses.replace(default, latent_dim=8, generator_widths=(8, 8, 8), discriminator_widths=(8, 8, 8))
        ).build("float32", "none", False)
        plain = trainers.GANTrainer(gan_model.build_generator(8, (8, 8, 8)), gan_model.build_discriminator((8, 8, 8)))
        plain.compile()
    for trainer in (built.trainer, plain):
        assert (trainer.label_softening, trainer.label_swap_fraction) == (0.01, 0.1)
        g, d = (
            opt.inner_optimizer if isinstance(opt, keras.optimizers.LossScaleOptimizer) else opt
            for opt in (trainer.generator_optimizer, trainer.discriminator_optimizer)
        )
        assert (type(g).__name__, type(d).__name__) == ("Adam", "RMSprop")
        assert (float(g.learning_rate), float(d.learning_rate)) == (np.float32(1e-3), np.float32(1e-4))


def test_the_gans_epochs_drop_the_last_incomplete_batch_and_refuse_none():
    gan = shipped.GANTask(TINY_GAN)
    assert gan.steps_per_epoch(100) == 3
    assert gan.with_config(steps_per_epoch=2).steps_per_epoch(100) == 2
    with pytest.raises(config_lib.ConfigError, match="batch_size=32"):
        gan.steps_per_epoch(31)
