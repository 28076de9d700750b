"""A real, small demo of the loss-scaled custom training loop.

It trains `models.small_cnn` on the embedded digits with the tf.keras 2 loop
the seed tutorials teach (`get_scaled_loss` -> `tape.gradient` ->
`get_unscaled_gradients` -> `apply_gradients`) on Keras 3, and writes
per-epoch TensorBoard curves. `scripts/demo_custom_loop.py` is its
command-line front end.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import time
from typing import Any

import keras
import tensorflow as tf

from models.small_cnn import build_small_cnn
from tfmp import data as data_lib
from tfmp import loss_scale as loss_scale_lib
from tfmp import precision as precision_lib

__all__ = ["DemoConfig", "run_demo"]

_logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class DemoConfig:
    """Settings of the demo run.

    Attributes:
        precision: A precision name or alias (see `tfmp.precision`).
        loss_scale: `"dynamic"`, `"none"` or a fixed positive scale; only used
            under `mixed_float16`.
        epochs: Passes over the training split.
        batch_size: Images per step.
        learning_rate: Adam's learning rate.
        width: Width of the small CNN.
        xla: `"auto"`, `"true"` or `"false"` (see `resolve_jit_compile`).
        logdir: Parent directory of the TensorBoard runs.
        run_name: The run's sub-directory; a timestamp and the settings when empty.
        seed: Seed of weights, shuffling and split.
        steps_per_epoch: Optional cap on steps per epoch.
    """

    precision: str = "mixed_float16"
    loss_scale: str | float = "dynamic"
    epochs: int = 3
    batch_size: int = 64
    learning_rate: float = 2e-3
    width: int = 16
    xla: str | bool = "auto"
    logdir: str = "logs"
    run_name: str = ""
    seed: int = 0
    steps_per_epoch: int | None = None

    def validate(self) -> None:
        """Raises ValueError, naming the value, for an impossible setting."""
        precision_lib.canonical_precision(self.precision)
        loss_scale_lib.parse_loss_scale(self.loss_scale)
        precision_lib.resolve_jit_compile(self.xla, has_gpu=False)
        for name in ("epochs", "batch_size", "width"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1. Received: {name}={value!r}")
        if self.steps_per_epoch is not None and self.steps_per_epoch < 1:
            raise ValueError(
                f"steps_per_epoch must be >= 1 or None. Received: steps_per_epoch={self.steps_per_epoch!r}"
            )
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0. Received: learning_rate={self.learning_rate!r}")


def default_run_name(precision: str, loss_scale: str | float) -> str:
    """A timestamp plus the precision and loss-scale settings."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{stamp}_{precision}_ls-{loss_scale}"


def make_train_step(model: keras.Model, optimizer: keras.optimizers.Optimizer, jit_compile: bool):
    """Returns a compiled step: forward, float32 loss, scale, grads, unscale, apply."""
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    scaled = isinstance(optimizer, loss_scale_lib.LossScaleOptimizer)

    @tf.function(jit_compile=jit_compile)
    def train_step(x, y):
        with tf.GradientTape() as tape:
            probs = model(x, training=True)
            loss = loss_fn(y, probs)
            if scaled:
                scaled_loss = optimizer.get_scaled_loss(loss)
        if scaled:
            scaled_grads = tape.gradient(scaled_loss, model.trainable_variables)
            grads = optimizer.get_unscaled_gradients(scaled_grads)
        else:
            grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss, probs

    return train_step


def run_demo(config: DemoConfig) -> dict[str, Any]:
    """Trains the small CNN on the embedded digits and logs to TensorBoard.

    The global dtype policy is set for the run and restored afterwards.

    Args:
        config: The run's settings.

    Returns:
        Final metrics: `loss`, `accuracy`, `val_loss`, `val_accuracy`,
        `loss_scale` (None without loss scaling), `skipped_steps`,
        `images_per_sec` and the run's `logdir`.
    """
    config.validate()
    precision = precision_lib.resolve_precision(config.precision)
    loss_scale = loss_scale_lib.parse_loss_scale(config.loss_scale)
    jit_compile = precision_lib.resolve_jit_compile(config.xla)
    run_dir = os.path.join(config.logdir, config.run_name or default_run_name(precision, loss_scale))
    keras.utils.set_random_seed(config.seed)
    split = data_lib.load_digits(image_size=(28, 28), channels=1, seed=config.seed)
    train_ds = data_lib.make_dataset(split.x_train, split.y_train, batch_size=config.batch_size, seed=config.seed)
    val_ds = data_lib.make_dataset(split.x_val, split.y_val, batch_size=256, shuffle=False)

    with precision_lib.precision_scope(precision):
        model = build_small_cnn(split.x_train.shape[1:], width=config.width)
        optimizer = loss_scale_lib.wrap_optimizer(
            keras.optimizers.Adam(config.learning_rate), precision, loss_scale
        )
        train_step = make_train_step(model, optimizer, jit_compile)
        scaled = isinstance(optimizer, loss_scale_lib.LossScaleOptimizer)
        _logger.info(
            "demo: precision=%s loss_scale=%s xla=%s logdir=%s",
            precision, loss_scale if precision == "mixed_float16" else "n/a", jit_compile, run_dir,
        )
        train_writer = tf.summary.create_file_writer(os.path.join(run_dir, "train"))
        val_writer = tf.summary.create_file_writer(os.path.join(run_dir, "validation"))
        loss_mean = keras.metrics.Mean()
        accuracy = keras.metrics.SparseCategoricalAccuracy()
        results: dict[str, Any] = {}
        for epoch in range(config.epochs):
            loss_mean.reset_state()
            accuracy.reset_state()
            images, start = 0, time.perf_counter()
            for step, (x, y) in enumerate(train_ds):
                if config.steps_per_epoch is not None and step >= config.steps_per_epoch:
                    break
                loss, probs = train_step(x, y)
                loss_mean.update_state(loss)
                accuracy.update_state(y, probs)
                images += int(x.shape[0])
            seconds = time.perf_counter() - start
            val_loss, val_accuracy = evaluate(model, val_ds)
            results = {
                "loss": float(loss_mean.result()),
                "accuracy": float(accuracy.result()),
                "val_loss": val_loss,
                "val_accuracy": val_accuracy,
                "loss_scale": float(optimizer.loss_scale) if scaled else None,
                "skipped_steps": int(optimizer.skipped_steps) if scaled else 0,
                "images_per_sec": images / seconds,
                "logdir": run_dir,
            }
            with train_writer.as_default(step=epoch):
                tf.summary.scalar("epoch_loss", results["loss"])
                tf.summary.scalar("epoch_accuracy", results["accuracy"])
                tf.summary.scalar("images_per_sec", results["images_per_sec"])
                if scaled:
                    tf.summary.scalar("loss_scale", results["loss_scale"])
                    tf.summary.scalar("skipped_steps", results["skipped_steps"])
            with val_writer.as_default(step=epoch):
                tf.summary.scalar("epoch_loss", val_loss)
                tf.summary.scalar("epoch_accuracy", val_accuracy)
            print(
                f"epoch {epoch + 1}/{config.epochs}: loss {results['loss']:.4f}, "
                f"accuracy {results['accuracy']:.4f}, val_loss {val_loss:.4f}, "
                f"val_accuracy {val_accuracy:.4f}, loss_scale {results['loss_scale']}, "
                f"skipped {results['skipped_steps']}, {results['images_per_sec']:.0f} img/s",
                flush=True,
            )
        train_writer.close()
        val_writer.close()
    return results


def evaluate(model: keras.Model, dataset: tf.data.Dataset) -> tuple[float, float]:
    """Returns mean cross-entropy and accuracy of `model` over `dataset`."""
    loss_fn = keras.losses.SparseCategoricalCrossentropy(reduction="sum")
    total_loss, correct, count = 0.0, 0, 0
    for x, y in dataset:
        probs = model(x, training=False)
        total_loss += float(loss_fn(y, probs))
        correct += int(tf.reduce_sum(tf.cast(tf.argmax(probs, -1, output_type=tf.int32) == y, tf.int32)))
        count += int(y.shape[0])
    return total_loss / count, correct / count
