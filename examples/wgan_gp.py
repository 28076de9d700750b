"""keras-io's "WGAN-GP overriding `Model.train_step`", in float16 with tfmp.

A Wasserstein GAN with gradient penalty, written as keras-io writes it: a
`keras.Model` holding a `discriminator` (the critic) and a `generator`,
whose `compile()` calls `super().compile()` and keeps the two optimizers as
attributes, and whose `train_step` makes `d_steps` critic updates, then one
generator update. What tfmp changes, under `mixed_float16`:

- each optimizer is a `tfmp.LossScaleOptimizer`: the loss is scaled inside
  the tape (`scale_loss`), and `apply_gradients` divides the gradients by
  the scale, or skips the update if one is not finite;
- each update is its own step, `with tfmp.undo_if_skipped(...) as step`,
  handed to `apply_gradients(..., step=step)`: a skipped step also puts
  back the generator's BatchNorm statistics its forward pass wrote;
- the loss trackers are updated at the end of `train_step`, through each
  step's `unless_skipped`, so a skipped step stays out of the epoch's mean;
- the gradient penalty is computed in float32, and the one `scale_loss`,
  on the critic's whole loss, also scales its second-order gradients.

One batch holds a NaN: its critic steps are skipped, and the epoch's losses
stay finite. It trains on the digits that ship with tfmp (no download),
resized to 16x16. Run it with

    python3 examples/wgan_gp.py
    TFMP_EXAMPLE_STEPS=10 python3 examples/wgan_gp.py   # shorter
"""

import functools
import math
import os

import keras
import numpy as np
import tensorflow as tf

import tfmp
from tfmp.run.data import load_digits

LATENT = 32
BATCH_SIZE = 64


def build_generator():
    noise = keras.Input((LATENT,))
    x = keras.layers.Dense(4 * 4 * 32, use_bias=False)(noise)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.LeakyReLU(0.2)(keras.layers.Reshape((4, 4, 32))(x))
    x = keras.layers.UpSampling2D()(x)
    x = keras.layers.Conv2D(16, 3, padding="same", use_bias=False)(x)
    x = keras.layers.LeakyReLU(0.2)(keras.layers.BatchNormalization()(x))
    x = keras.layers.UpSampling2D()(x)
    # The output stays float32: fake minus real images would otherwise be
    # float16 minus float32, a TypeError inside the first step.
    images = keras.layers.Conv2D(
        1, 3, padding="same", activation="tanh", dtype="float32"
    )(x)
    return keras.Model(noise, images, name="generator")


def build_discriminator():
    images = keras.Input((16, 16, 1))
    x = keras.layers.Conv2D(16, 3, strides=2, padding="same")(images)
    x = keras.layers.LeakyReLU(0.2)(x)
    x = keras.layers.Conv2D(32, 3, strides=2, padding="same")(x)
    x = keras.layers.LeakyReLU(0.2)(x)
    # No BatchNormalization in a WGAN-GP critic: the penalty is per image.
    x = keras.layers.Dropout(0.3)(keras.layers.Flatten()(x))
    scores = keras.layers.Dense(1, dtype="float32")(x)  # float32, as the loss
    return keras.Model(images, scores, name="discriminator")


def discriminator_loss(real_img, fake_img):
    return tf.reduce_mean(fake_img) - tf.reduce_mean(real_img)


def generator_loss(fake_img):
    return -tf.reduce_mean(fake_img)


class WGAN(keras.Model):
    def __init__(self, discriminator, generator, d_steps=3, gp_weight=10.0):
        super().__init__()
        self.discriminator, self.generator = discriminator, generator
        self.d_steps, self.gp_weight = d_steps, gp_weight
        self.seed = keras.random.SeedGenerator(0)
        self.d_loss_tracker = keras.metrics.Mean(name="d_loss")
        self.g_loss_tracker = keras.metrics.Mean(name="g_loss")

    @property
    def metrics(self):
        return [self.d_loss_tracker, self.g_loss_tracker]  # so fit() resets them

    def compile(self, d_optimizer, g_optimizer, d_loss_fn, g_loss_fn):
        super().compile()
        self.d_optimizer, self.g_optimizer = d_optimizer, g_optimizer
        self.d_loss_fn, self.g_loss_fn = d_loss_fn, g_loss_fn

    # --8<-- [start:train_step]
    def gradient_penalty(self, batch_size, real_images, fake_images):
        """The mean of (|d critic / d interpolated image| - 1)^2, in float32."""
        alpha = keras.random.uniform((batch_size, 1, 1, 1), seed=self.seed)
        interpolated = real_images + alpha * (fake_images - real_images)
        with tf.GradientTape() as gp_tape:
            gp_tape.watch(interpolated)
            pred = self.discriminator(interpolated, training=True)
        # The gradient of the critic's own (unscaled) output: scaling it here
        # would make its norm the loss scale times too large. Its norm is
        # near 1, far above float16's underflow, so it needs no scale.
        grads = tf.cast(gp_tape.gradient(pred, interpolated), tf.float32)
        norm = tf.sqrt(tf.reduce_sum(tf.square(grads), axis=[1, 2, 3]))
        return tf.reduce_mean((norm - 1.0) ** 2)

    def train_step(self, real_images):
        batch_size = tf.shape(real_images)[0]
        critic = self.discriminator.trainable_variables
        # Making the fakes writes the generator's BatchNorm statistics: a
        # skipped critic step puts them back too.
        models = [self.generator, self.discriminator]
        d_updates = []
        for _ in range(self.d_steps):
            noise = keras.random.normal((batch_size, LATENT), seed=self.seed)
            with tfmp.undo_if_skipped(models, self.d_optimizer) as d_step:
                with tf.GradientTape() as tape:
                    fake_images = self.generator(noise, training=True)
                    fake_logits = self.discriminator(fake_images, training=True)
                    real_logits = self.discriminator(real_images, training=True)
                    d_cost = self.d_loss_fn(real_img=real_logits, fake_img=fake_logits)
                    gp = self.gradient_penalty(batch_size, real_images, fake_images)
                    d_loss = d_cost + gp * self.gp_weight
                    # One scale on the whole loss, inside the tape: it scales
                    # the penalty's second-order gradients too.
                    scaled_loss = self.d_optimizer.scale_loss(d_loss)
                grads = tape.gradient(scaled_loss, critic)
                # Divides by the scale, or skips the step if a gradient is NaN/Inf.
                self.d_optimizer.apply_gradients(zip(grads, critic), step=d_step)
            d_updates.append((d_step, d_loss))

        generator = self.generator.trainable_variables
        noise = keras.random.normal((batch_size, LATENT), seed=self.seed)
        with tfmp.undo_if_skipped(models, self.g_optimizer) as g_step:
            with tf.GradientTape() as tape:
                fake_images = self.generator(noise, training=True)
                g_loss = self.g_loss_fn(self.discriminator(fake_images, training=True))
                scaled_loss = self.g_optimizer.scale_loss(g_loss)
            grads = tape.gradient(scaled_loss, generator)
            self.g_optimizer.apply_gradients(zip(grads, generator), step=g_step)

        # Each tracker takes a step's loss only if that step was applied: a
        # skipped step's loss is NaN, and would make the epoch's mean NaN.
        for d_step, d_loss in d_updates:
            update = functools.partial(self.d_loss_tracker.update_state, d_loss)
            d_step.unless_skipped(update)
        g_step.unless_skipped(lambda: self.g_loss_tracker.update_state(g_loss))
        return {m.name: m.result() for m in self.metrics}
        # --8<-- [end:train_step]


def adam():  # keras-io's settings
    return keras.optimizers.Adam(learning_rate=2e-4, beta_1=0.5, beta_2=0.9)


def main():
    steps = int(os.environ.get("TFMP_EXAMPLE_STEPS", "40"))
    images = load_digits(image_size=(16, 16)).x_train * 2.0 - 1.0  # tanh's range
    images = np.resize(images, (steps * BATCH_SIZE, *images.shape[1:]))  # repeated
    nan_batch = steps // 2
    images[nan_batch * BATCH_SIZE + 5, 8, 8, 0] = np.nan  # its critic steps are skipped
    keras.utils.set_random_seed(0)
    with tfmp.precision_scope("mixed_float16"):
        wgan = WGAN(build_discriminator(), build_generator())
        wgan.compile(
            d_optimizer=tfmp.LossScaleOptimizer(adam()),
            g_optimizer=tfmp.LossScaleOptimizer(adam()),
            d_loss_fn=discriminator_loss,
            g_loss_fn=generator_loss,
        )
    # LogLossScale logs each optimizer's loss scale and skipped steps
    # (d_optimizer_loss_scale, ...), and before the first step checks that the
    # networks' outputs are float32 (tfmp.float32_layers.check_outputs): a
    # float16 output is named there, not met as a TypeError inside the step.
    history = wgan.fit(
        images,
        batch_size=BATCH_SIZE,
        epochs=1,
        shuffle=False,
        verbose=0,
        callbacks=[tfmp.LogLossScale()],
    ).history
    d_loss, g_loss = history["d_loss"][-1], history["g_loss"][-1]
    d_skipped = history["d_optimizer_skipped_steps"][-1]
    g_skipped = history["g_optimizer_skipped_steps"][-1]
    print(f"skipped steps: d {d_skipped}, g {g_skipped} (batch {nan_batch} held a NaN)")
    finite = math.isfinite(d_loss) and math.isfinite(g_loss)
    print(f"final loss: d {d_loss:.4f}, g {g_loss:.4f} (finite: {finite})")


if __name__ == "__main__":
    main()
