"""The hand-written step: the baseline the benchmark measures a trainer against.

A minimal `tf.function` update of a trainer's networks, of the kind a user
would write by hand, that deliberately shares no code with `tfmp.trainers`:
the benchmark's `ratio_to_hand_written` is the trainer's cost over it. A
task's is its `hand_written_step` (`tfmp.run.tasks.Task`), by default
`for_trainer_kind`: `supervised` for a `tfmp.Trainer` (any model with one
loss), `gan` for the original tutorial's GAN.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import keras
import tensorflow as tf

from tfmp import cpu_kernels, trainers
from tfmp import loss_scale as loss_scale_lib

__all__ = ["HandWritten", "gan", "for_trainer_kind", "plain_fit_model", "supervised"]


@dataclasses.dataclass
class HandWritten:
    """A hand-written step and its optimizers.

    Attributes:
        step: `tf.function(jit_compile=...)` taking one batch and running one
            update.
        optimizers: Its optimizers, fresh copies of the trainer's.
    """

    step: Callable[[Any], Any]
    optimizers: tuple[keras.optimizers.Optimizer, ...]


def _routing(precision: str) -> cpu_kernels.Routing:
    """What a user's step on this machine computes in float32 from 16-bit values, as the trainer's does."""
    return cpu_kernels.routing({keras.DTypePolicy(precision).compute_dtype})


def _optimizer(
    optimizer: keras.optimizers.Optimizer, precision: str, variables: Sequence[keras.Variable]
) -> keras.optimizers.Optimizer:
    """The bare optimizer, or a dynamic `tfmp.LossScaleOptimizer` under float16; built."""
    if precision == "mixed_float16":
        optimizer = loss_scale_lib.LossScaleOptimizer(optimizer)
    # Built eagerly: slot variables must exist before an XLA trace.
    optimizer.build(variables)
    return optimizer


def _update(
    optimizer: keras.optimizers.Optimizer,
    variables: Sequence[keras.Variable],
    loss_fn: Callable[[], tf.Tensor],
    routing: cpu_kernels.Routing,
) -> tf.Tensor:
    # Written out rather than shared with tfmp.trainers: this is the baseline
    # the trainer is measured against, so it must not run the trainer's code.
    with tf.GradientTape() as tape, cpu_kernels.float32_forward(routing.forward):
        loss = loss_fn()
        scaled_loss = optimizer.scale_loss(loss)  # the loss as it is for an optimizer that is not loss-scaled
    with cpu_kernels.float32_gradients(routing.gradients):
        grads = tape.gradient(scaled_loss, variables)
    optimizer.apply(grads, variables)  # a LossScaleOptimizer divides by the scale
    return loss


def supervised(
    network: keras.Model,
    optimizer: keras.optimizers.Optimizer,
    loss: Any,
    precision: str,
    xla: bool,
) -> HandWritten:
    """The hand-written step of a supervised model: `loss(y, network(x))`, weighted if the batch says so.

    Args:
        network: The trainer's network (the step updates its variables).
        optimizer: A fresh copy of the trainer's inner optimizer.
        loss: A Keras loss (name or object) taking `(y_true, y_pred)`.
        precision: The row's precision (float16 gets dynamic loss scaling).
        xla: Compile the whole step with XLA.
    """
    variables = network.trainable_variables
    optimizer = _optimizer(optimizer, precision, variables)
    routing = _routing(precision)
    loss_fn = keras.losses.get(loss)
    if not isinstance(loss_fn, keras.losses.Loss):  # a loss function, by name: the batch's mean, as Keras's Loss
        per_example = loss_fn

        def loss_fn(y, y_pred, sample_weight=None):
            values = per_example(y, y_pred)
            if sample_weight is not None:
                values = values * tf.cast(sample_weight, values.dtype)
            return tf.reduce_mean(values)

    @tf.function(jit_compile=xla)
    def step(batch):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(batch)
        return _update(
            optimizer, variables, lambda: loss_fn(y, network(x, training=True), sample_weight=sample_weight), routing
        )

    return HandWritten(step, (optimizer,))


def gan(
    trainer: trainers.GANTrainer,
    optimizers: Sequence[keras.optimizers.Optimizer],
    precision: str,
    xla: bool,
    seed: int,
) -> HandWritten:
    """The hand-written step of the original tutorial's GAN: generator update, then discriminator update.

    Args:
        trainer: The GAN trainer whose networks the step updates (its label
            settings are read, not its code).
        optimizers: Fresh copies of the generator's and the discriminator's optimizers.
        precision: The row's precision (float16 gets dynamic loss scaling).
        xla: Compile the whole step with XLA.
        seed: Seed of the step's noise.
    """
    generator, discriminator = trainer.generator, trainer.discriminator
    g_vars, d_vars = generator.trainable_variables, discriminator.trainable_variables
    g_opt, d_opt = (_optimizer(o, precision, v) for o, v in zip(optimizers, (g_vars, d_vars)))
    bce = keras.losses.BinaryCrossentropy(from_logits=True)
    noise_seed = keras.random.SeedGenerator(seed)
    latent_dim = int(generator.input_shape[-1])
    softening, swap = trainer.label_softening, trainer.label_swap_fraction
    routing = _routing(precision)

    def noise(batch_size):
        return keras.random.uniform((batch_size, latent_dim), minval=-1.0, maxval=1.0, seed=noise_seed)

    def logits(images):
        return tf.cast(discriminator(images, training=True), tf.float32)

    @tf.function(jit_compile=xla)
    def step(real):
        batch_size = tf.shape(real)[0]
        real_target = tf.fill((batch_size, 1), tf.constant(softening, tf.float32))
        g_loss = _update(
            g_opt, g_vars, lambda: bce(real_target, logits(generator(noise(batch_size), training=True))), routing
        )
        with cpu_kernels.float32_forward(routing.forward):
            fake = generator(noise(batch_size), training=True)
        real_labels, fake_labels = trainers.discriminator_labels(batch_size, softening, swap)
        d_loss = _update(
            d_opt, d_vars, lambda: 0.5 * (bce(real_labels, logits(real)) + bce(fake_labels, logits(fake))), routing
        )
        return g_loss, d_loss

    return HandWritten(step, (g_opt, d_opt))


def for_trainer_kind(
    task: Any, trainer: trainers.MixedPrecisionTrainer, precision: str, xla: bool, steps_per_epoch: int
) -> HandWritten | None:
    """The hand-written step for `trainer`'s kind, built by `task` (a `tfmp.run.tasks.Task`); None for another kind.

    `Task.hand_written_step`'s default. Made from fresh copies of the task's
    optimizers (`task.optimizers`): `supervised` for a `tfmp.Trainer` (with
    the task's `loss()`, or the trainer's compiled loss), `gan` for a
    `tfmp.GANTrainer` (seeded by `config.seed`), and None for any other trainer.
    """
    optimizers = tuple(task.optimizers(steps_per_epoch))
    if isinstance(trainer, trainers.GANTrainer):
        return gan(trainer, optimizers, precision, xla, task.config.seed)
    if isinstance(trainer, trainers.Trainer):
        (optimizer,) = optimizers
        return supervised(trainer.network, optimizer, _loss(task, trainer), precision, xla)
    return None


def _loss(task: Any, trainer: trainers.Trainer) -> Any:
    """The task's loss, or the trainer's compiled loss where the task gives none."""
    loss = task.loss()
    return trainer.loss if loss is None else loss


def plain_fit_model(
    task: Any, trainer: trainers.MixedPrecisionTrainer, xla: bool, steps_per_epoch: int
) -> keras.Model | None:
    """What a user would train instead of `trainer`: its network compiled by Keras's own `compile()`; None for a GAN.

    For a `tfmp.Trainer` only: its network (the same object, so the same
    weights and policy) compiled with the task's loss (or the trainer's), the
    trainer's metrics and a fresh copy of the task's optimizer. Keras's
    `compile()` wraps that optimizer in its own `LossScaleOptimizer` under
    float16, with no exact skip and no transaction: plain `model.fit()`.
    """
    if not isinstance(trainer, trainers.Trainer):
        return None
    (optimizer,) = tuple(task.optimizers(steps_per_epoch))
    network = trainer.network
    metrics = task.metrics() or None
    network.compile(optimizer, loss=_loss(task, trainer), metrics=metrics, jit_compile=xla)
    return network
