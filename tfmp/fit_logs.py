"""`LogLossScale`: the loss scale and skipped steps in plain `model.fit()`'s logs.

`tfmp.Trainer` returns `loss_scale` and `skipped_steps` from its step. A
model compiled with a `tfmp.LossScaleOptimizer` and trained with its own
`fit()` returns only its losses and metrics; this callback adds the two, as
Keras's `LearningRateScheduler` adds `learning_rate`, so that Keras's
`TensorBoard`, `CSVLogger`, `History` and progress bar show them.
"""

from __future__ import annotations

import warnings
from typing import Any

import keras
import numpy as np

from tfmp import loss_scale as loss_scale_lib
from tfmp import transaction
from tfmp.trainers.base import MixedPrecisionTrainer

__all__ = ["LogLossScale"]


class LogLossScale(keras.callbacks.Callback):
    """Adds `loss_scale` and `skipped_steps` to `fit()`'s batch and epoch logs.

    Put it before the callbacks that read the logs (`keras.callbacks.TensorBoard`,
    `CSVLogger`): Keras calls callbacks in the order given, and `History` and
    the progress bar come last.

    ```python
    model.compile(optimizer=tfmp.LossScaleOptimizer(keras.optimizers.Adam()), loss=...)
    board = keras.callbacks.TensorBoard("logs", update_freq=1)
    model.fit(x, y, callbacks=[tfmp.LogLossScale(), board])
    ```

    `skipped_steps` counts the steps whose gradients were not all finite
    since the optimizer was made. An optimizer that only skips (a fixed scale
    of 1) logs no `loss_scale`; a model whose optimizer is not a
    `tfmp.LossScaleOptimizer` gets nothing added. A `tfmp.Trainer` or
    `tfmp.GANTrainer` logs both itself, so the callback adds nothing there.

    At the first skipped step of a model whose forward pass writes state
    (BatchNormalization's moving statistics), trained by its own `fit()`, it
    warns once: the optimizer kept the weights, but `fit()` cannot put that
    state back. The warning names the fix, `tfmp.Trainer(model)`.
    """

    def __init__(self) -> None:
        super().__init__()
        self._warned = False

    def _optimizer(self) -> loss_scale_lib.LossScaleOptimizer | None:
        """The model's tfmp optimizer, if it needs this callback."""
        if isinstance(self.model, MixedPrecisionTrainer):
            return None  # logs them itself
        optimizer = getattr(self.model, "optimizer", None)
        return optimizer if isinstance(optimizer, loss_scale_lib.LossScaleOptimizer) else None

    def _add(self, logs: dict[str, Any] | None) -> None:
        optimizer = self._optimizer()
        if optimizer is None or logs is None:
            return
        added = MixedPrecisionTrainer.loss_scale_logs(optimizer)
        logs["skipped_steps"] = int(added["skipped_steps"])
        if "loss_scale" in added:
            logs["loss_scale"] = float(added["loss_scale"])
        if logs["skipped_steps"] and not self._warned:
            self._warned = True
            self._warn_if_state_leaks(optimizer, logs["skipped_steps"])

    def _warn_if_state_leaks(self, optimizer: loss_scale_lib.LossScaleOptimizer, skipped: int) -> None:
        state = [v for v in transaction.state_variables(self.model) if not np.isfinite(v.numpy()).all()]
        if not state:
            return
        shown = ", ".join(repr(v.path) for v in state[:2]) + (", ..." if len(state) > 2 else "")
        warnings.warn(
            f"LossScaleOptimizer '{optimizer.name}' skipped a step with non-finite gradients ({skipped} so far): "
            "the weights and optimizer state are unchanged, but the step's forward pass already wrote "
            f"{len(state)} non-trainable variables ({shown}; BatchNormalization's moving statistics), which "
            f"model.fit() cannot put back. Train through tfmp.Trainer({self.model.name}) instead of the "
            "model's own fit() (one line: trainer = tfmp.Trainer(model), then compile and fit the trainer), "
            "or, in a custom train_step, run the step inside tfmp.undo_if_skipped(model, optimizer).",
            RuntimeWarning,
            stacklevel=2,
        )

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._add(logs)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._add(logs)
