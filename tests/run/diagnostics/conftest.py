"""The float16 GAN trainer the gradient, non-finite and whole-diagnosis tests share."""

import pytest

import tfmp
from tfmp import trainers
from tfmp.models.gan import build_discriminator, build_generator


@pytest.fixture(scope="module")
def float16_gan():
    with tfmp.precision_scope("mixed_float16"):
        trainer = trainers.GANTrainer(build_generator(), build_discriminator(), seed=1)
        trainer.compile(loss_scale="dynamic")
    return trainer
