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

The trainer keeps the contract of `MixedPrecisionTrainer` (the guide "Your
own model", "A trainer of your own"): it defines `train_step` and `networks`,
and its `compile()` holds and builds both optimizers. So `TASK`, a
`tfmp.run.tasks.Task` of it, trains as a whole run, with the console, the
TensorBoard curves, checkpoints and `--resume`:

    python3 scripts/train.py --task=examples/own_trainer.py:TASK --run_name=points
    python3 scripts/train.py --task=examples/own_trainer.py:TASK --run_name=points \
        --epochs=4 --resume
"""

import math
import os

import keras
import numpy as np
import tensorflow as tf

import tfmp
from tfmp.run import config, tasks
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

    def compile(
        self,
        g_optimizer,
        d_optimizer,
        loss_scale="dynamic",
        skip_nonfinite=True,
        **kwargs,
    ):
        # optimizer=None: the trainer holds its own two (else Keras holds an RMSprop).
        super().compile(optimizer=None, **kwargs)
        # A tfmp.LossScaleOptimizer for float16 networks; otherwise one that skips
        # non-finite steps at the fixed scale 1 (skip_nonfinite=False: the bare one).
        prepare = tfmp.trainers.prepare_optimizer
        self.g_optimizer = prepare(
            g_optimizer, self.generator, loss_scale, skip_nonfinite
        )
        self.d_optimizer = prepare(
            d_optimizer, self.discriminator, loss_scale, skip_nonfinite
        )
        # Built now, on what each updates: a run checkpoints their state from the start.
        self.g_optimizer.build(self.generator.trainable_variables)
        self.d_optimizer.build(self.discriminator.trainable_variables)

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


def circle(n, seed=0):
    """`n` points on the unit circle, float32; the second batch of 64 holds a NaN."""
    angles = np.random.default_rng(seed).uniform(0, 2 * np.pi, size=n)
    points = np.stack([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)
    points[64 + 3, 0] = np.nan  # the second batch: its discriminator step is skipped
    return points


# --8<-- [start:task]
class PointGANTask(tasks.Task):
    """`PointGAN` as a run: its data, its optimizers, and the trainer the run asks for."""

    name = "point_gan"

    def load_data(self):
        return circle(64 * 50)

    def train_data(self, data):
        # Shuffled by the run's seed, so that a resumed run replays the same batches.
        return (
            tf.data.Dataset.from_tensor_slices(data)
            .shuffle(len(data), seed=self.config.seed)
            .batch(self.config.batch_size)
        )

    def optimizers(self, steps_per_epoch):
        return keras.optimizers.Adam(1e-3), keras.optimizers.Adam(1e-3)

    def build_trainer(self, loss_scale, xla, steps_per_epoch, data):
        gan = PointGAN(mlp(LATENT, 2), mlp(2, 1))
        gan.compile(
            *self.optimizers(steps_per_epoch),
            loss_scale=loss_scale,
            skip_nonfinite=True,
            jit_compile=xla,
        )
        return gan


TASK = PointGANTask(
    config.TrainConfig(precision="mixed_float16", epochs=2, batch_size=64, log_every=10)
)
# --8<-- [end:task]


def main():
    steps = int(os.environ.get("TFMP_EXAMPLE_STEPS", "200"))
    points = circle(64 * steps)
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
