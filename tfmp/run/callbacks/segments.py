"""One run over several `fit()` calls (a resumed, partial epoch first), shown to a callback as one run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras

__all__ = ["RunSegment"]


class RunSegment(keras.callbacks.Callback):
    """Shows `callback` one `fit()` call of a run that takes several, as one run.

    A run resumed in the middle of an epoch finishes that epoch with a short
    `fit()` and then runs the remaining epochs with another. Wrapped in a
    `RunSegment` per call, a callback sees one `on_train_begin` (in the first
    segment) and one `on_train_end` (in the last), the epoch's real batch
    indices (`batch_offset` added) and the real `steps_per_epoch`.

    Args:
        callback: The callback to present the run to.
        first: Whether this is the run's first segment.
        last: Whether this is its last.
        batch_offset: Steps of the first epoch done before this segment.
        params: Values of the whole run that replace the segment's own in
            `params` (`{"steps": steps_per_epoch, "epochs": epochs}`).
    """

    def __init__(
        self,
        callback: keras.callbacks.Callback,
        first: bool,
        last: bool,
        batch_offset: int = 0,
        params: Mapping[str, Any] | None = None,
    ):
        super().__init__()
        self.callback = callback
        self.first = first
        self.last = last
        self.batch_offset = int(batch_offset)
        self.run_params = dict(params or {})

    def set_model(self, model):
        super().set_model(model)
        self.callback.set_model(model)

    def set_params(self, params):
        super().set_params(params)
        self.callback.set_params({**params, **self.run_params})

    def on_train_begin(self, logs=None):
        if self.first:
            self.callback.on_train_begin(logs)

    def on_train_end(self, logs=None):
        if self.last:
            self.callback.on_train_end(logs)

    def on_epoch_begin(self, epoch, logs=None):
        self.callback.on_epoch_begin(epoch, logs)

    def on_epoch_end(self, epoch, logs=None):
        self.batch_offset = 0  # later epochs of this segment start at batch 0
        self.callback.on_epoch_end(epoch, logs)

    def on_train_batch_begin(self, batch, logs=None):
        self.callback.on_train_batch_begin(batch + self.batch_offset, logs)

    def on_train_batch_end(self, batch, logs=None):
        self.callback.on_train_batch_end(batch + self.batch_offset, logs)

    def on_test_begin(self, logs=None):
        self.callback.on_test_begin(logs)

    def on_test_end(self, logs=None):
        self.callback.on_test_end(logs)

    def on_test_batch_begin(self, batch, logs=None):
        self.callback.on_test_batch_begin(batch, logs)

    def on_test_batch_end(self, batch, logs=None):
        self.callback.on_test_batch_end(batch, logs)
