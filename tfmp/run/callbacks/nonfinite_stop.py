"""Stopping at the first non-finite step, naming the first non-finite layer (`tfmp.run.diagnostics`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import keras
import numpy as np

from tfmp.run import diagnostics

__all__ = ["NonFiniteStepError", "NonFiniteStop"]


class NonFiniteStepError(RuntimeError):
    """A training step met a non-finite value and the run was told to stop."""


class NonFiniteStop(keras.callbacks.Callback):
    """Stops training at the first skipped step, naming what went non-finite.

    The optimizers must skip non-finite steps (`skip_nonfinite=True` or loss
    scaling), so the offending update is not applied (and the trainers put
    back the BatchNorm statistics its forward pass wrote). When a step's
    skipped-step count goes up, from the first step of `fit()` on, the batch
    is fetched again with `batch_at(step_index)` and
    `tfmp.run.diagnostics.first_nonfinite` reports the input, layer output, loss
    or gradient where the first non-finite value appears;
    `NonFiniteStepError` then carries it, with the epoch and step. The
    message says whether the model's variables are finite: a skipped step
    leaves them as they were, which is not finite if an earlier, applied
    update (a learning rate of inf, say) already broke them.

    Args:
        batch_at: Returns the training batch of a 0-based global step index.
        step: Training steps done before this `fit()`.
    """

    def __init__(self, batch_at: Callable[[int], Any], step: int = 0):
        super().__init__()
        self.batch_at = batch_at
        self.step = int(step)
        self._skipped: int | None = None
        self._epoch = 0

    @staticmethod
    def _count(logs: Mapping[str, Any]) -> int:
        return int(
            sum(value for key, value in logs.items() if key.endswith("skipped_steps") and not key.startswith("val_"))
        )

    def _restored_count(self) -> int:
        """The optimizers' skipped steps now (restored from a checkpoint, or 0)."""
        return int(sum(int(getattr(o, "skipped_steps", 0)) for o in self.model.optimizers.values()))

    def _nonfinite_variables(self) -> list[str]:
        """Paths of the trainer's network variables holding NaN or Inf."""
        return [
            v.path
            for v in self.model.variables
            if v.dtype.startswith(("float", "bfloat")) and not np.isfinite(np.asarray(v.numpy(), np.float32)).all()
        ]

    def on_train_begin(self, logs=None):
        # Before the first step: a non-finite first step must count as one.
        self._skipped = self._restored_count()

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        count = self._count(logs or {})
        if self._skipped is None:  # on_train_begin was not called: no baseline but the counts now
            self._skipped = self._restored_count()
        if count > self._skipped:
            report = diagnostics.first_nonfinite(self.model, self.batch_at(self.step - 1))
            broken = self._nonfinite_variables()
            if broken:
                shown = ", ".join(broken[:3]) + (f" and {len(broken) - 3} more" if len(broken) > 3 else "")
                state = (
                    f"the optimizer skipped this step's update, but {len(broken)} of the model's variables already "
                    f"hold NaN or Inf ({shown}): an earlier, applied update wrote them (check the learning rate)"
                )
            else:
                state = "the optimizer skipped this step's update and every variable of the model is finite"
            raise NonFiniteStepError(
                f"Non-finite value at epoch {self._epoch + 1}, step {batch + 1} of the epoch (global step "
                f"{self.step}); {state}. First non-finite: {report.where()}. "
                "Check the input data, or set on_nonfinite=skip to skip such steps and go on."
            )
        self._skipped = count
