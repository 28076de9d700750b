"""A trainer of your own: two networks, two optimizers, the loss-scaled step from tfmp.

A small GAN on 2-D points, written as a `keras.Model` on
`tfmp.trainers.MixedPrecisionTrainer`, as the public docstrings describe
it: `train_step` is model math, `optimize` runs each network's update
(loss scaling, the finite check and the skip), and each loss tracker is
updated through the step's `unless_skipped` inside `forward(step)`. Nothing lists which
variables a metric writes: a skipped step (here a batch with a NaN)
leaves the weights, the BatchNorm statistics and the epoch's losses as if
the batch had not been there, on every path (a CPU's branching update, a
GPU's compiled update, a step compiled by XLA, several replicas).

    python3 examples/own_trainer.py
    TFMP_EXAMPLE_STEPS=10 python3 examples/own_trainer.py   # shorter
"""

import math
import os

import keras
import numpy as np
import tensorflow as tf

import tfmp
from tfmp.trainers import MixedPrecisionTrainer

LATENT = 4


class PointGAN(MixedPrecisionTrainer):
    """The generator maps noise to points; the discriminator tells them from real ones."""

    loss_scale_prefixes = ("g_", "d_")

    def __init__(self, generator, discriminator):
        super().__init__(name="point_gan")
        self.generator, self.discriminator = generator, discriminator
        self.g_loss = keras.metrics.Mean(name="g_loss")
        self.d_loss = keras.metrics.Mean(name="d_loss")
        self.bce = keras.losses.BinaryCrossentropy(from_logits=True)
        self.seed = keras.random.SeedGenerator(0)

    @property
    def metrics(self):
        return [self.g_loss, self.d_loss]  # so fit() resets them every epoch

    @property
    def networks(self):
        return {"generator": self.generator, "discriminator": self.discriminator}

    def compile(self, g_optimizer, d_optimizer, **kwargs):
        super().compile(**kwargs)
        # tfmp.LossScaleOptimizer for float16 networks, the bare optimizer otherwise.
        prepare = tfmp.trainers.prepare_optimizer
        self.g_optimizer = prepare(g_optimizer, self.generator)
        self.d_optimizer = prepare(d_optimizer, self.discriminator)

    def call(self, noise, training=False):
        return self.generator(noise, training=training)

    def _logits(self, points):
        return tf.cast(self.discriminator(points, training=True), tf.float32)

    def train_step(self, real):
        n = tf.shape(real)[0]

        def noise():
            return keras.random.normal((n, LATENT), seed=self.seed)

        def generator_forward(step):
            fake = self.generator(noise(), training=True)
            loss = self.bce(tf.ones((n, 1)), self._logits(fake))
            step.unless_skipped(lambda: self.g_loss.update_state(loss))
            return loss, None

        def discriminator_forward(step):
            fake = tf.stop_gradient(self.generator(noise(), training=True))
            loss = 0.5 * (
                self.bce(tf.ones((n, 1)), self._logits(real))
                + self.bce(tf.zeros((n, 1)), self._logits(fake))
            )
            step.unless_skipped(lambda: self.d_loss.update_state(loss))
            return loss, None

        g_variables = self.generator.trainable_variables
        d_variables = self.discriminator.trainable_variables
        self.optimize(self.g_optimizer, g_variables, generator_forward)
        self.optimize(self.d_optimizer, d_variables, discriminator_forward)
        logs = {metric.name: metric.result() for metric in self.metrics}
        logs.update(self.loss_scale_logs(self.g_optimizer, "g_"))
        logs.update(self.loss_scale_logs(self.d_optimizer, "d_"))
        return logs


def mlp(inputs, outputs):
    return keras.Sequential(
        [
            keras.Input((inputs,)),
            keras.layers.Dense(32),
            keras.layers.BatchNormalization(),
            keras.layers.ReLU(),
            keras.layers.Dense(outputs, dtype="float32"),
        ]
    )


def main():
    steps = int(os.environ.get("TFMP_EXAMPLE_STEPS", "200"))
    rng = np.random.default_rng(0)
    angles = rng.uniform(0, 2 * np.pi, size=64 * steps)
    points = np.stack([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)
    points[64 + 3, 0] = np.nan  # the second batch: its discriminator step is skipped
    keras.utils.set_random_seed(0)
    with tfmp.precision_scope("mixed_float16"):
        gan = PointGAN(mlp(LATENT, 2), mlp(2, 1))
        gan.compile(keras.optimizers.Adam(1e-3), keras.optimizers.Adam(1e-3))
    logs = gan.fit(points, batch_size=64, epochs=1, verbose=0, shuffle=False).history
    g_loss, d_loss = logs["g_loss"][-1], logs["d_loss"][-1]
    skipped = logs["g_skipped_steps"][-1], logs["d_skipped_steps"][-1]
    print(f"skipped steps: g {skipped[0]}, d {skipped[1]}")
    finite = math.isfinite(g_loss) and math.isfinite(d_loss)
    print(f"final loss: g {g_loss:.4f} d {d_loss:.4f} (finite: {finite})")


if __name__ == "__main__":
    main()
