"""The original tutorial's GAN step as a `keras.Model.train_step`, with loss scaling.

Two networks, two optimizers (generator Adam 1e-3, discriminator RMSprop
1e-4), one step: the generator learns to make the discriminator call its
images real, then the discriminator learns real from fake, with softened
labels (real 0.01, fake 0.99; 10% of them swapped). Under `mixed_float16`
each optimizer is a `tfmp.LossScaleOptimizer`, used with Keras 3's custom-step
API: `scale_loss` before differentiating, `apply` (which unscales, and skips
the update if a gradient is NaN/Inf) after, each update a transaction
(`tfmp.undo_if_skipped`) that keeps a skipped step out of the losses.
`tfmp.GANTrainer` is this step with checkpoints, distribution and diagnostics
around it.

It trains on the digits that ship with tfmp (no download), resized to
MNIST's 28x28. Run it with

    python3 examples/gan_train_step.py
    TFMP_EXAMPLE_STEPS=10 python3 examples/gan_train_step.py   # shorter

On a CPU float16 is for checking numerics: its convolution gradients are slow
there, so the step computes them in float32 (`tfmp.cpu_kernels`), and the
default run is short. bfloat16 needs no loss scaling.
"""

import math
import os

import keras
import tensorflow as tf

import tfmp
from tfmp.models.gan import build_discriminator, build_generator
from tfmp.run.data import load_digits
from tfmp.trainers import discriminator_labels

STEPS = int(os.environ.get("TFMP_EXAMPLE_STEPS", "50"))
BATCH_SIZE = 64
SOFTENING, SWAP_FRACTION = 0.01, 0.1


class GAN(keras.Model):
    """The tutorial's GAN: a generator step, then a discriminator step.

    Each has its own loss-scaled optimizer.
    """

    def __init__(self, generator, discriminator, seed=0):
        super().__init__()
        self.generator, self.discriminator = generator, discriminator
        self.noise_seed = keras.random.SeedGenerator(seed)
        self.bce = keras.losses.BinaryCrossentropy(from_logits=True)
        self.g_loss = keras.metrics.Mean(name="g_loss")
        self.d_loss = keras.metrics.Mean(name="d_loss")

    @property
    def metrics(self):
        return [self.g_loss, self.d_loss]  # so fit() resets them every epoch

    def compile(self, g_optimizer, d_optimizer):
        super().compile()
        self.g_optimizer = tfmp.LossScaleOptimizer(g_optimizer)
        self.d_optimizer = tfmp.LossScaleOptimizer(d_optimizer)
        # Created now, outside the traced step.
        self.g_optimizer.build(self.generator.trainable_variables)
        self.d_optimizer.build(self.discriminator.trainable_variables)
        # On a CPU: the float16 gradients whose kernels are slow there (measured
        # once, cached). Empty on a GPU.
        self.routed = tfmp.cpu_kernels.float16_gradient_ops()

    def _step(self, optimizer, variables, loss_fn, tracker):
        # A transaction: if the optimizer skips the step, the BatchNorm statistics
        # its forward pass wrote are put back, and its loss stays out of `tracker`.
        networks = [self.generator, self.discriminator]
        with tfmp.undo_if_skipped(networks, optimizer) as step:
            with tf.GradientTape() as tape:
                loss = loss_fn()
                # Keeps small float16 gradients from flushing to zero.
                scaled_loss = optimizer.scale_loss(loss)
            # Those computed in float32 from the float16 values, rounded to float16.
            with tfmp.cpu_kernels.float32_gradients(self.routed):
                grads = tape.gradient(scaled_loss, variables)
            # Unscales the gradients, and skips the update if one is NaN/Inf.
            optimizer.apply(grads, variables, step=step)
        step.unless_skipped(lambda: tracker.update_state(loss))

    def _noise(self, batch):
        shape = (batch, self.generator.input_shape[-1])
        return keras.random.uniform(shape, -1.0, 1.0, seed=self.noise_seed)

    def train_step(self, real):
        batch = tf.shape(real)[0]
        real_labels, fake_labels = discriminator_labels(batch, SOFTENING, SWAP_FRACTION)

        def generator_loss():  # the target is "real" (label 0, softened)
            fake = self.generator(self._noise(batch), training=True)
            logits = self.discriminator(fake, training=True)
            return self.bce(tf.fill((batch, 1), SOFTENING), logits)

        def discriminator_loss():
            fake = self.generator(self._noise(batch), training=True)
            return 0.5 * (
                self.bce(real_labels, self.discriminator(real, training=True))
                + self.bce(fake_labels, self.discriminator(fake, training=True))
            )

        g_variables = self.generator.trainable_variables
        d_variables = self.discriminator.trainable_variables
        self._step(self.g_optimizer, g_variables, generator_loss, self.g_loss)
        self._step(self.d_optimizer, d_variables, discriminator_loss, self.d_loss)
        return {"g_loss": self.g_loss.result(), "d_loss": self.d_loss.result()}


images = load_digits(image_size=(28, 28)).x_train
dataset = (
    tf.data.Dataset.from_tensor_slices(images)
    .shuffle(len(images), seed=0)
    .repeat()
    .batch(BATCH_SIZE)
)
with tfmp.precision_scope("mixed_float16"):
    gan = GAN(build_generator(), build_discriminator())
    gan.compile(keras.optimizers.Adam(1e-3), keras.optimizers.RMSprop(1e-4))
history = gan.fit(dataset, epochs=1, steps_per_epoch=STEPS, shuffle=False, verbose=1)

g_loss, d_loss = history.history["g_loss"][-1], history.history["d_loss"][-1]
g_scale, d_scale = float(gan.g_optimizer.loss_scale), float(gan.d_optimizer.loss_scale)
print(
    f"final loss: G {g_loss:.4f}, D {d_loss:.4f} "
    f"(finite: {math.isfinite(g_loss + d_loss)}), "
    f"loss scales {g_scale:.0f}/{d_scale:.0f}"
)
