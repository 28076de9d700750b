"""`LogLossScale`: the loss scale and skipped steps of every loss-scaled optimizer in plain `model.fit()`'s logs.

`tfmp.Trainer` returns `loss_scale` and `skipped_steps` from its step. A
model compiled with a `tfmp.LossScaleOptimizer`, or one with its own
`train_step` that holds its optimizers as attributes (a GAN's
`d_optimizer` and `g_optimizer`), trained with its own `fit()`, returns only
its losses and metrics; this callback adds them, as Keras's
`LearningRateScheduler` adds `learning_rate`, so that Keras's `TensorBoard`,
`CSVLogger`, `History` and progress bar show them.
"""

from __future__ import annotations

import warnings
from typing import Any

import keras
import numpy as np

from tfmp import float32_layers, transaction
from tfmp import loss_scale as loss_scale_lib
from tfmp.trainers.base import MixedPrecisionTrainer

__all__ = ["LogLossScale"]


class LogLossScale(keras.callbacks.Callback):
    """Adds each `tfmp.LossScaleOptimizer`'s loss scale and skipped steps to `fit()`'s batch and epoch logs.

    The model's compiled optimizer (`model.optimizer`) logs `loss_scale` and
    `skipped_steps`; every other attribute of the model that holds a
    `tfmp.LossScaleOptimizer` logs under its attribute's name
    (`d_optimizer_loss_scale`, `d_optimizer_skipped_steps`). Each optimizer
    is logged once. Put the callback before the callbacks that read the logs
    (`keras.callbacks.TensorBoard`, `CSVLogger`): Keras calls callbacks in the
    order given, and `History` and the progress bar come last.

    ```python
    model.compile(optimizer=tfmp.LossScaleOptimizer(keras.optimizers.Adam()), loss=...)
    board = keras.callbacks.TensorBoard("logs", update_freq=1)
    model.fit(x, y, callbacks=[tfmp.LogLossScale(), board])
    ```

    A GAN written as keras-io's "DCGAN overriding `train_step`" compiles
    without an optimizer (`super().compile()`) and keeps its two as
    attributes; each logs under its own name:

    ```python
    class GAN(keras.Model):
        def __init__(self, discriminator, generator, latent_dim):
            super().__init__()
            self.discriminator, self.generator, self.latent_dim = discriminator, generator, latent_dim
            self.d_loss_tracker = keras.metrics.Mean(name="d_loss")
            self.g_loss_tracker = keras.metrics.Mean(name="g_loss")

        def compile(self, d_optimizer, g_optimizer, loss_fn):
            super().compile()
            self.d_optimizer, self.g_optimizer, self.loss_fn = d_optimizer, g_optimizer, loss_fn

        def train_step(self, real_images):
            ...
            with tfmp.undo_if_skipped([self.generator, self.discriminator], self.d_optimizer) as d_step:
                with tf.GradientTape() as tape:
                    d_loss = self.loss_fn(labels, self.discriminator(images))
                    scaled = self.d_optimizer.scale_loss(d_loss)
                grads = tape.gradient(scaled, self.discriminator.trainable_weights)
                self.d_optimizer.apply_gradients(zip(grads, self.discriminator.trainable_weights), step=d_step)
            ...  # the generator's step, the same with g_optimizer and g_step
            d_step.unless_skipped(lambda: self.d_loss_tracker.update_state(d_loss))  # not a skipped step's loss
            g_step.unless_skipped(lambda: self.g_loss_tracker.update_state(g_loss))
            return {"d_loss": self.d_loss_tracker.result(), "g_loss": self.g_loss_tracker.result()}

    gan.compile(
        d_optimizer=tfmp.LossScaleOptimizer(keras.optimizers.Adam(3e-4)),
        g_optimizer=tfmp.LossScaleOptimizer(keras.optimizers.Adam(3e-4)),
        loss_fn=keras.losses.BinaryCrossentropy(from_logits=True),
    )
    board = keras.callbacks.TensorBoard("logs", update_freq=1)
    gan.fit(dataset, epochs=3, callbacks=[tfmp.LogLossScale(), board])
    # batch_/epoch_ d_optimizer_loss_scale, d_optimizer_skipped_steps, g_optimizer_loss_scale, ...
    ```

    `skipped_steps` counts the steps whose gradients were not all finite
    since the optimizer was made. An optimizer that only skips (a fixed scale
    of 1) logs no loss scale. A `tfmp.Trainer` or `tfmp.GANTrainer` logs both
    itself, so the callback adds nothing there. When the model holds no
    `tfmp.LossScaleOptimizer` at all, the callback warns once, at
    `on_train_begin`, and adds nothing.

    When a skipped step leaves non-finite values in the model's forward-pass
    state (BatchNormalization's moving statistics, which Keras's `fit()`
    cannot put back), it warns once, naming the variables and the fixes:
    `tfmp.Trainer(model)`, or `tfmp.undo_if_skipped` in a custom `train_step`.

    Args:
        check_outputs: Whether to check, at `on_train_begin`, that the
            model's networks (the model, or for a subclassed model such as a
            GAN, the functional models it holds) keep their outputs and
            softmax/sigmoid layers in float32, warning before the first step
            otherwise (`tfmp.float32_layers.check_outputs`). On by default:
            it reads layer dtypes only, so it costs nothing per step and
            finds nothing under the float32 policy, and a float16 output
            otherwise surfaces as a `TypeError` inside the first step or as
            a silent loss of precision.
    """

    def __init__(self, check_outputs: bool = True) -> None:
        super().__init__()
        self.check_outputs = check_outputs
        self._optimizers: dict[str, loss_scale_lib.LossScaleOptimizer] | None = None
        self._skipped: dict[str, int] = {}
        self._warned_none = False
        self._warned_leak = False

    def _find_optimizers(self) -> dict[str, loss_scale_lib.LossScaleOptimizer]:
        """Each tfmp optimizer of the model by its log keys' prefix: "" for `model.optimizer`, else "<attribute>_"."""
        if isinstance(self.model, MixedPrecisionTrainer):
            return {}  # logs them itself
        candidates = [("", getattr(self.model, "optimizer", None))]
        candidates += [(f"{name}_", value) for name, value in vars(self.model).items() if name != "optimizer"]
        found: dict[str, loss_scale_lib.LossScaleOptimizer] = {}
        for prefix, value in candidates:
            if isinstance(value, loss_scale_lib.LossScaleOptimizer) and all(value is not f for f in found.values()):
                found[prefix] = value
        return found

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._optimizers = self._find_optimizers()
        self._skipped = {prefix: int(optimizer.skipped_steps) for prefix, optimizer in self._optimizers.items()}
        if not self._optimizers and not isinstance(self.model, MixedPrecisionTrainer) and not self._warned_none:
            self._warned_none = True
            compiled = getattr(self.model, "optimizer", None)
            received = "None" if compiled is None else f"{type(compiled).__module__}.{type(compiled).__name__}"
            warnings.warn(
                f"LogLossScale found no tfmp.LossScaleOptimizer on model {self.model.name!r}, so it logs no loss "
                "scale and no skipped steps. Compile the model with optimizer=tfmp.LossScaleOptimizer(...), or, "
                "for a model with its own train_step and optimizers (a GAN), keep each as an attribute of the model "
                "(self.d_optimizer = tfmp.LossScaleOptimizer(...), logged as d_optimizer_loss_scale). "
                f"Received: model.optimizer={received}, and no attribute holding a tfmp.LossScaleOptimizer",
                RuntimeWarning,
                stacklevel=2,
            )
        if self.check_outputs:
            float32_layers.check_outputs(self.model)

    def _add(self, logs: dict[str, Any] | None) -> None:
        if self._optimizers is None:
            self._optimizers = self._find_optimizers()
        if logs is None:
            return
        for prefix, optimizer in self._optimizers.items():
            for key, value in MixedPrecisionTrainer.loss_scale_logs(optimizer, prefix).items():
                logs[key] = int(value) if key.endswith("skipped_steps") else float(value)

    def _check_skips(self, logs: dict[str, Any] | None) -> None:
        """Warns once when a step was skipped and the model's forward-pass state holds non-finite values."""
        if logs is None:
            return
        grown = []
        for prefix, optimizer in (self._optimizers or {}).items():
            skipped = logs[f"{prefix}skipped_steps"]
            if skipped > self._skipped.get(prefix, 0):
                grown.append((prefix, optimizer, skipped))
            self._skipped[prefix] = skipped
        if not grown or self._warned_leak:
            return
        leaked = [
            v
            for v in transaction.state_variables(self.model)
            if keras.backend.is_float_dtype(v.dtype) and not np.isfinite(keras.ops.convert_to_numpy(v)).all()
        ]
        if not leaked:
            return  # nothing written, or put back (tfmp.undo_if_skipped in the model's train_step)
        self._warned_leak = True
        prefix, optimizer, skipped = grown[0]
        attribute = f"model.{prefix[:-1]}" if prefix else "model.optimizer"
        shown = ", ".join(repr(v.path) for v in leaked[:2]) + (", ..." if len(leaked) > 2 else "")
        warnings.warn(
            f"LossScaleOptimizer '{optimizer.name}' ({attribute}) skipped a step with non-finite gradients "
            f"({skipped} so far): the weights and optimizer state are unchanged, but the step's forward pass left "
            f"non-finite values in {len(leaked)} non-trainable variables ({shown}; e.g. BatchNormalization's moving "
            f"statistics), which model.fit() cannot put back. Train through tfmp.Trainer({self.model.name}) instead "
            "of the model's own fit() (one line: trainer = tfmp.Trainer(model), then compile and fit the trainer), "
            "or, in a custom train_step, run the step inside tfmp.undo_if_skipped(model, optimizer).",
            RuntimeWarning,
            stacklevel=2,
        )

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._add(logs)
        self._check_skips(logs)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._add(logs)
