"""The statistics of a parity experiment: each arm's paired differences to float32 over the units."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from tfmp.run.parity.design import REFERENCE
from tfmp.run.parity.record import ParityRecord
from tfmp.run.reporting import Gap

__all__ = ["PairedGap", "by_arm", "paired_gaps"]


@dataclasses.dataclass(frozen=True)
class PairedGap:
    """An arm against float32 on the same units.

    Attributes:
        arm: The arm compared with float32.
        units: `(seed, fold)` of the units run in both.
        accuracy: Accuracy differences in percentage points (negative: below
            float32); None for a model that logs no accuracy.
        loss: Validation-loss differences (for a classifier, NLL in nats;
            positive: worse than float32).
    """

    arm: str
    units: tuple[tuple[int, int], ...]
    accuracy: Gap | None
    loss: Gap


def by_arm(records: Sequence[ParityRecord]) -> dict[str, dict[tuple[int, int], ParityRecord]]:
    """The records by arm name, then by unit `(seed, fold)`."""
    table: dict[str, dict[tuple[int, int], ParityRecord]] = {}
    for record in records:
        table.setdefault(record.arm, {})[(record.seed, record.fold)] = record
    return table


def paired_gaps(records: Sequence[ParityRecord]) -> dict[str, PairedGap]:
    """Per arm other than float32, its paired differences to float32.

    Only units run in both the arm and float32 count.
    """
    table = by_arm(records)
    reference = table.get(REFERENCE, {})
    gaps = {}
    for arm, runs in table.items():
        if arm == REFERENCE:
            continue
        units = tuple(unit for unit in runs if unit in reference)
        if units:
            accuracy = None
            if all(r.val_accuracy is not None for r in (*runs.values(), *reference.values())):
                accuracy = Gap(tuple(100.0 * (runs[u].val_accuracy - reference[u].val_accuracy) for u in units))
            loss = Gap(tuple(runs[u].val_loss - reference[u].val_loss for u in units))
            gaps[arm] = PairedGap(arm, units, accuracy, loss)
    return gaps
