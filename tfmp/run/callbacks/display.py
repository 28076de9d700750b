"""What a run says about a built task: which layers it keeps in float32, and why.

How a task's logs are shown (its console fields, TensorBoard layout,
throughput unit and data description) is the task's own: see its hooks in
`tfmp.run.tasks.Task`.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["announce_float32_layers"]

log = logging.getLogger(__name__)


def announce_float32_layers(task: Any, built: Any, precision: str) -> None:
    """Logs which layers `built` (a `tfmp.run.tasks.Built`) keeps in float32, and whether that was asked for or
    the model's default."""
    if not built.float32_pattern:
        return
    kept = built.float32_layers
    shown = ", ".join(kept[:3]) + (", ..." if len(kept) > 3 else "")
    if built.float32_pattern == task.config.float32_layers:
        log.info(f"float32 layers: {len(kept)} matching {built.float32_pattern!r} ({shown})")
    else:
        log.info(
            f"float32 layers: {len(kept)}, the model's default for {precision} on CPU "
            f"(float32_layers=none turns it off): {shown}"
        )
