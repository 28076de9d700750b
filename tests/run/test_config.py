"""Tests for tfmp/run/config.py: the settings, refused before anything runs, and a pure validate()."""

import dataclasses
import os

import pytest

from tfmp.run import config as config_lib

TINY_GAN = config_lib.GANConfig(dataset="digits", batch_size=32)
TINY_CLASSIFIER = config_lib.ClassifierConfig(dataset="digits", batch_size=16)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"precision": "float8"}, "precision='float8'"),
        ({"loss_scale": "-4"}, "loss_scale='-4'"),
        ({"loss_scale": "huge"}, "loss_scale='huge'"),
        ({"xla": "maybe"}, "xla='maybe'"),
        ({"batch_size": 0}, "batch_size=0"),
        ({"epochs": -1}, "epochs=-1"),
        ({"steps_per_epoch": 0}, "steps_per_epoch=0"),
        ({"dataset": "cifar10"}, "dataset='cifar10'"),
        ({"dataset": "imagenet"}, "dataset='imagenet'"),
        ({"generator_learning_rate": 0.0}, "generator_learning_rate=0.0"),
        ({"generator_widths": (8, 8)}, "generator_widths=(8, 8)"),
        ({"label_softening": 0.5}, "label_softening=0.5"),
    ],
)
def test_gan_config_refuses_bad_values_naming_them(change, message, tmp_path):
    config = dataclasses.replace(TINY_GAN, logdir=str(tmp_path), **change)
    with pytest.raises(config_lib.ConfigError) as error:
        config.validate()
    assert message in str(error.value)


def test_classifier_config_refuses_bad_values(tmp_path):
    for change, message in [({"alpha": 0.0}, "alpha=0.0"), ({"dataset": "mnist"}, "dataset='mnist'"),
                            ({"batch_norm_momentum": 1.0}, "batch_norm_momentum=1.0"),
                            ({"lr_schedule": "linear"}, "lr_schedule='linear'")]:
        with pytest.raises(config_lib.ConfigError, match=message.replace("(", r"\(")):
            dataclasses.replace(TINY_CLASSIFIER, logdir=str(tmp_path), **change).validate()


def test_the_defaults_are_the_seeds():
    config = config_lib.GANConfig()
    assert (config.batch_size, config.dataset, config.latent_dim) == (4096, "mnist", 100)
    assert (config.generator_learning_rate, config.discriminator_learning_rate) == (1e-3, 1e-4)
    assert (config.label_softening, config.label_swap_fraction) == (0.01, 0.1)
    assert config_lib.ClassifierConfig().dataset == "cifar10"


def test_validate_is_pure_it_creates_nothing(tmp_path):
    logdir, checkpoints = tmp_path / "logs" / "deep", tmp_path / "checkpoints"
    dataclasses.replace(TINY_GAN, logdir=str(logdir), checkpoint_dir=str(checkpoints), run_name="a/b").validate()
    assert os.listdir(tmp_path) == []
