"""Tiny benchmark models and settings shared by the benchmark's tests (tests/run/benchmark/test_*.py).

A small CNN on 8x8 images and a GAN with widths of 2 to 8, so nothing big is
traced; `tiny_config` times them as briefly as the benchmark allows.
"""

import os
import time

import numpy as np

from tfmp.models.small_cnn import build_small_cnn
from tfmp.run import benchmark, shipped
from tfmp.run import config as config_lib
from tfmp.run.benchmark import largest_batch

__all__ = [
    "BATCH",
    "CRASH_FROM",
    "LEAK_MB",
    "RESIDENT",
    "crashing_trial",
    "dying_network",
    "leaky_classifier",
    "small_classifier",
    "sleeping_trial",
    "small_network",
    "tiny_classifier",
    "tiny_config",
    "tiny_specs",
]

BATCH = 8
CRASH_FROM = 96
LEAK_MB = 256
RESIDENT: list = []  # what `leaky_network` left behind in this process


def leaky_network(shape, classes):
    """The tiny CNN, leaving `LEAK_MB` of touched memory resident, as TensorFlow keeps memory of every model."""
    RESIDENT.append(np.ones(LEAK_MB * 2**20 // 8))
    return build_small_cnn(shape, classes, width=4)


def dying_network(shape, classes):
    """Ends its process at once, as the kernel's out-of-memory killer would."""
    os._exit(9)


def small_network(shape, classes):
    """The tiny CNN, from a module-level function so that its task pickles."""
    return build_small_cnn(shape, classes, width=4)


def small_classifier(name="small"):
    """A tiny classifier that can be measured in a fresh process (its task pickles)."""
    return shipped.ClassifierTask(
        config_lib.ClassifierConfig(batch_size=BATCH), name, network=small_network, image_shape=(8, 8, 3)
    )


def crashing_trial(spec, precision, xla, batch_size, config, settings):
    """Ends its process as a segmentation fault would (exit 139) from batch `CRASH_FROM` up; below, a real trial."""
    if batch_size >= CRASH_FROM:
        os._exit(139)
    return largest_batch.train_at_batch(spec, precision, xla, batch_size, config, settings)


def sleeping_trial(*args):
    """Never returns in time."""
    time.sleep(600)


def leaky_classifier(name):
    """A tiny classifier built by `leaky_network`: a module-level function, so the task pickles."""
    return shipped.ClassifierTask(
        config_lib.ClassifierConfig(batch_size=BATCH), name, network=leaky_network, image_shape=(8, 8, 3)
    )


def tiny_classifier(**kwargs):
    return shipped.ClassifierTask(
        config_lib.ClassifierConfig(batch_size=BATCH),
        "tiny",
        network=lambda shape, classes: build_small_cnn(shape, classes, width=4),
        image_shape=(8, 8, 3),
        **kwargs,
    )


def tiny_specs():
    return {
        "tiny": tiny_classifier(),
        "tiny_gan": shipped.GANTask(
            config_lib.GANConfig(
                batch_size=BATCH, latent_dim=8, generator_widths=(8, 4, 2), discriminator_widths=(2, 2, 2)
            ),
            "tiny_gan",
        ),
    }


def tiny_config(**changes):
    config = benchmark.BenchmarkConfig(
        models=("tiny", "tiny_gan"),
        precisions=("float32", "mixed_bfloat16"),
        xla=(False,),
        warmup_steps=1,
        steps=2,
        repeats=1,
        isolate=False,  # the tiny specs hold lambdas, and most tests patch this process
        count_launches=True,  # on a CPU too: the tests check what the launch count finds
    )
    return benchmark.BenchmarkConfig(**{**config.__dict__, **changes})
