"""The probe batch: the one training batch the diagnosis, the gradient reports and `auto` precision look at."""

from __future__ import annotations

from typing import Any

from tfmp.run.config import ConfigError

__all__ = ["probe"]


def probe(task: Any, data: Any) -> Any:
    """One training batch of `task` (a `tfmp.run.tasks.Task`) over `data`: the first of its training pipeline.

    A task that defines `probe(data)` gives its own (the shipped image tasks:
    the first `batch_size` examples in the split's order, unshuffled).

    Raises:
        ConfigError: when the training pipeline gives no batch.
    """
    own = task.probe(data)
    if own is not None:
        return own
    for batch in task.train_data(data).take(1):
        return batch
    raise ConfigError(f"The training data of {task.name!r} is empty: its pipeline gave no batch.")
