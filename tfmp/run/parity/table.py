"""The Markdown table of a parity experiment: per-unit results, then the paired gaps."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from tfmp.run.parity.design import REFERENCE
from tfmp.run.parity.gaps import by_arm, paired_gaps
from tfmp.run.parity.record import ParityRecord
from tfmp.run.reporting import Gap

__all__ = ["parity_table", "scale_text"]


def scale_text(scale: float | None) -> str:
    """A loss scale as a table shows it: `-` for none."""
    return "-" if scale is None else f"{scale:g}"


def _signed(value: float, digits: int) -> str:
    return "n/a" if math.isnan(value) else f"{value:+.{digits}f}"


def _summary(gap: Gap, digits: int) -> str:
    low, high = gap.interval
    return (
        f"{_signed(gap.mean, digits)} | {'n/a' if math.isnan(gap.stderr) else f'{gap.stderr:.{digits}f}'} | "
        f"{_signed(low, digits)}..{_signed(high, digits)}"
    )


def parity_table(records: Sequence[ParityRecord]) -> str:
    """Markdown: per-unit accuracies (or losses, for a model without accuracy), then the paired gaps.

    float16 cells add the skipped steps and the final loss scale.
    """
    table = by_arm(records)
    arms = sorted(table, key=lambda name: name != REFERENCE)
    units = sorted({(record.seed, record.fold) for record in records})
    by_accuracy = all(r.val_accuracy is not None for r in records)

    def value(record: ParityRecord) -> float:
        return record.val_accuracy if by_accuracy else record.val_loss

    lines = ["| seed | fold | " + " | ".join(arms) + " |", "|---" * (len(arms) + 2) + "|"]
    for seed, fold in units:
        cells = []
        for arm in arms:
            record = table[arm].get((seed, fold))
            if record is None:
                cells.append("-")
                continue
            cell = f"{value(record):.4f}"
            if record.final_loss_scale is not None:
                cell += f" ({record.skipped_steps} skipped, scale {scale_text(record.final_loss_scale)})"
            cells.append(cell)
        lines.append(f"| {seed} | {fold} | " + " | ".join(cells) + " |")
    means = [statistics.fmean(value(r) for r in table[a].values()) for a in arms]
    label = "mean" if by_accuracy else "mean loss"
    lines.append(f"| {label} | | " + " | ".join(f"{m:.4f}" for m in means) + " |")
    lines += [
        "",
        "| arm | units | accuracy gap to float32 (points) | standard error | 95% interval | "
        "loss gap | standard error | 95% interval |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for arm, gap in paired_gaps(records).items():
        accuracy = "n/a | n/a | n/a" if gap.accuracy is None else _summary(gap.accuracy, 2)
        lines.append(f"| {arm} | {len(gap.units)} | {accuracy} | {_summary(gap.loss, 4)} |")
    return "\n".join(lines)
