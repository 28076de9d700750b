"""What one benchmark row times: the trainer training builds, and the hand-written step it is measured against.

`build_workload` builds both from a model's `tfmp.run.tasks.Task`: the
trainer is `task.build(...)`, as in a training run; the hand-written step is
the baseline, a minimal `tf.function` update of the same networks that
deliberately shares no code with `tfmp.trainers` ("The hand-written step" in
docs/guides/benchmark-methodology.md shows it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tfmp import loss_scale as loss_scale_lib
from tfmp import trainers
from tfmp.run import config as config_lib
from tfmp.run import tasks

__all__ = ["Workload", "build_workload"]


@dataclasses.dataclass
class Workload:
    """A compiled trainer, the matching hand-written step, and their data.

    Attributes:
        trainer: The compiled `tfmp.trainers` model (not yet traced), built by
            the model's `tfmp.run.tasks.Task` exactly as training builds it.
        hand_written_step: `tf.function(jit_compile=xla)` taking one batch and
            running one update of the same network (see "The hand-written
            step" in docs/guides/benchmark-methodology.md); None when not
            built.
        hand_written_optimizers: The hand-written step's optimizers (one for a
            classifier, generator's then discriminator's for the GAN).
        batch: The synthetic batch both are fed: images, or
            `(images, labels)`.
        images_per_step: Images one step processes (`batch_size *
            trainer.images_per_example`).
        float32_layers: Paths of the layers kept in float32
            (`tfmp.precision.keep_float32`); empty for none.
    """

    trainer: trainers.MixedPrecisionTrainer
    hand_written_step: Callable[[Any], Any] | None
    hand_written_optimizers: tuple[keras.optimizers.Optimizer, ...]
    batch: Any
    images_per_step: int
    float32_layers: tuple[str, ...] = ()


def _hand_written_optimizer(
    optimizer: keras.optimizers.Optimizer, precision: str, variables: Sequence[keras.Variable]
) -> keras.optimizers.Optimizer:
    """The bare optimizer, or a dynamic `tfmp.LossScaleOptimizer` under float16; built."""
    if precision == "mixed_float16":
        optimizer = loss_scale_lib.LossScaleOptimizer(optimizer)
    # Built eagerly: slot variables must exist before an XLA trace.
    optimizer.build(variables)
    return optimizer


def _hand_written_update(
    optimizer: keras.optimizers.Optimizer, variables: Sequence[keras.Variable], loss_fn: Callable[[], tf.Tensor]
) -> tf.Tensor:
    # Written out rather than shared with tfmp.trainers: this is the baseline
    # the trainer is measured against, so it must not run the trainer's code.
    scaled = isinstance(optimizer, loss_scale_lib.LossScaleOptimizer)
    with tf.GradientTape() as tape:
        loss = loss_fn()
        target = optimizer.get_scaled_loss(loss) if scaled else loss
    grads = tape.gradient(target, variables)
    if scaled:
        grads = optimizer.get_unscaled_gradients(grads)
    optimizer.apply_gradients(zip(grads, variables))
    return loss


def _hand_written_classifier(
    task: tasks.ClassifierTask, network: keras.Model, precision: str, jit_compile: bool, steps: int
):
    variables = network.trainable_variables
    (optimizer,) = task.optimizers(steps)  # the run's optimizer and schedule, a fresh copy
    optimizer = _hand_written_optimizer(optimizer, precision, variables)
    loss_fn = task.loss()

    @tf.function(jit_compile=jit_compile)
    def step(batch):
        x, y = batch
        return _hand_written_update(optimizer, variables, lambda: loss_fn(y, network(x, training=True)))

    return step, (optimizer,)


def _hand_written_gan(task: tasks.GANTask, trainer: trainers.GANTrainer, precision: str, jit_compile: bool, steps: int):
    generator, discriminator = trainer.generator, trainer.discriminator
    g_vars, d_vars = generator.trainable_variables, discriminator.trainable_variables
    g_opt, d_opt = task.optimizers(steps)
    g_opt = _hand_written_optimizer(g_opt, precision, g_vars)
    d_opt = _hand_written_optimizer(d_opt, precision, d_vars)
    bce = keras.losses.BinaryCrossentropy(from_logits=True)
    noise_seed = keras.random.SeedGenerator(task.config.seed)
    latent_dim = int(generator.input_shape[-1])
    softening, swap = task.config.label_softening, task.config.label_swap_fraction

    def noise(batch_size):
        return keras.random.uniform((batch_size, latent_dim), minval=-1.0, maxval=1.0, seed=noise_seed)

    def logits(images):
        return tf.cast(discriminator(images, training=True), tf.float32)

    @tf.function(jit_compile=jit_compile)
    def step(real):
        batch_size = tf.shape(real)[0]
        real_target = tf.fill((batch_size, 1), tf.constant(softening, tf.float32))
        g_loss = _hand_written_update(
            g_opt, g_vars, lambda: bce(real_target, logits(generator(noise(batch_size), training=True)))
        )
        fake = generator(noise(batch_size), training=True)
        real_labels, fake_labels = trainers.discriminator_labels(batch_size, softening, swap)
        d_loss = _hand_written_update(
            d_opt, d_vars, lambda: 0.5 * (bce(real_labels, logits(real)) + bce(fake_labels, logits(fake)))
        )
        return g_loss, d_loss

    return step, (g_opt, d_opt)


def build_workload(
    task: tasks.Task,
    precision: str,
    jit_compile: bool,
    steps: int = 1,
    hand_written: bool = True,
) -> Workload:
    """Builds one row's workload from `task`, under the current dtype policy (which must be `precision`'s).

    The trainer is `task.build(...)`: the networks, optimizers, learning-rate
    schedule (over `steps`), loss, metrics, non-finite skipping and float32
    layers exactly as a training run of `task.config` has them; the loss
    scale is the config's (dynamic under `mixed_float16` by default, none
    otherwise). The hand-written step (`hand_written`) updates the same
    networks with fresh copies of the task's optimizers. The batch is
    synthetic: uniform [0, 1] images of `task.image_shape`, int32 labels
    for a classifier, seeded by `task.config.seed`.

    Raises:
        TypeError: for a task that is neither a GAN nor a classifier task.
    """
    if not isinstance(task, (tasks.GANTask, tasks.ClassifierTask)):
        raise TypeError(f"No hand-written step for this task; use a GANTask or a ClassifierTask. Received: {task!r}")
    loss_scale = config_lib.resolved_loss_scale(task.config.loss_scale) if precision == "mixed_float16" else "none"
    built = task.build(precision, loss_scale, jit_compile, steps)
    trainer, batch_size = built.trainer, task.config.batch_size
    rng = np.random.default_rng(task.config.seed)
    images = tf.constant(rng.uniform(0.0, 1.0, (batch_size, *task.image_shape)).astype(np.float32))
    step, optimizers = None, ()
    if isinstance(task, tasks.GANTask):
        batch = images
        if hand_written:
            step, optimizers = _hand_written_gan(task, trainer, precision, jit_compile, steps)
    else:
        batch = (images, tf.constant(rng.integers(0, task.num_classes, batch_size).astype(np.int32)))
        if hand_written:
            (network,) = trainer.networks.values()
            step, optimizers = _hand_written_classifier(task, network, precision, jit_compile, steps)
    return Workload(trainer, step, optimizers, batch, batch_size * trainer.images_per_example, built.float32_layers)
