"""`ParityRecord`: the result of one run of a parity experiment."""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["ParityRecord"]


@dataclasses.dataclass(frozen=True)
class ParityRecord:
    """One run's result.

    Attributes:
        arm: The arm's name (`Arm.name`).
        precision: Canonical precision name.
        seed: The run's seed.
        fold: The validation fold (0 without folds).
        val_accuracy: Validation accuracy, averaged over the evaluations
            after the last `average_last` epochs; None for a model that logs
            no `accuracy`.
        val_loss: Validation loss (mean negative log-likelihood), averaged
            likewise.
        skipped_steps: Steps whose non-finite gradients were skipped.
        final_loss_scale: The loss scale at the end (`mixed_float16` with a
            loss scale); None otherwise.
        accuracy_by_epoch: The validation accuracy after every epoch.
        loss_by_epoch: The validation loss after every epoch.
        seconds: The run's wall time.
    """

    arm: str
    precision: str
    seed: int
    fold: int
    val_accuracy: float | None
    val_loss: float
    skipped_steps: int
    final_loss_scale: float | None
    accuracy_by_epoch: tuple[float, ...] = ()
    loss_by_epoch: tuple[float, ...] = ()
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
