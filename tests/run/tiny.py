"""Tiny but real runs shared by the run framework's tests: the embedded digits, narrow models, a few steps.

`TINY_GAN` is the base each test derives its own config from
(`dataclasses.replace(TINY_GAN, epochs=2, ...)`), so what makes a run tiny is
written once.
"""

import dataclasses

import keras
import numpy as np
import tensorflow as tf

from tfmp.run import config as config_lib
from tfmp.run import shipped

__all__ = ["HAS_GPU", "TINY_GAN", "quiet", "tiny"]

# A fixed precision, so nothing is measured.
TINY_GAN = config_lib.GANConfig(
    dataset="digits",
    batch_size=32,
    epochs=1,
    steps_per_epoch=2,
    warmup_steps=1,
    num_samples=4,
    generator_widths=(8, 8, 8),
    discriminator_widths=(8, 8, 8),
    precision="float32",
)
HAS_GPU = bool(tf.config.list_physical_devices("GPU"))


def quiet(line):
    pass


def tiny(tmp_path, **changes):
    return shipped.GANTask(dataclasses.replace(TINY_GAN, logdir=str(tmp_path), **changes))


def dense_model(inputs=4, outputs=3, activation="softmax"):
    """A function building a one-Dense-layer model of `inputs` features (named `features`), seeded."""

    def build():
        x = keras.Input((inputs,), name="features")
        y = keras.layers.Dense(outputs, kernel_initializer=keras.initializers.GlorotUniform(0))(x)
        return keras.Model(x, keras.layers.Activation(activation, dtype="float32")(y))

    return build


def arrays(n=20, seed=0):
    """`n` examples of 4 normal features and a label of 3 classes, seeded."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 4)).astype(np.float32), rng.integers(0, 3, n).astype(np.int32)
