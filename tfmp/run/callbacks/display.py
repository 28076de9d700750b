"""How a task's logs are shown: the console's fields, TensorBoard's layout, the throughput's unit, the data's name.

Each is derived from the task (`tfmp.run.tasks.Task`); a task that wants
another defines an attribute or method of the same name, which is used
instead:

* `console_fields`: `(label, log key)` pairs of each console line; by
  default the loss, and the first metric a task's `metrics()` gives, under
  the name Keras logs it by;
* `summary_route(key) -> (sub-run, name)`: where a log goes in TensorBoard;
  by default Keras's layout (`keras_route`);
* `example_unit`: what the throughput counts, `"img"` (`img/s` in the
  console and the benchmark, the `images_per_sec` tag) or `"ex"` (`ex/s`,
  `examples_per_sec`), the default;
* `describe_data() -> str`: the data in the run's description line
  (`dataset=digits`, say); by default nothing.

`announce_float32_layers` says which layers a built task keeps in float32.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

__all__ = ["announce_float32_layers", "console_fields", "describe_data", "example_unit", "keras_route", "summary_route"]

log = logging.getLogger(__name__)


def console_fields(task: Any) -> tuple[tuple[str, str], ...]:
    """The `(label, log key)` pairs of `task`'s console lines: its `console_fields`, or its loss and first metric."""
    if task.console_fields is not None:
        return tuple(task.console_fields)
    metrics = task.metrics()[:1]
    names = [m if isinstance(m, str) else getattr(m, "name", None) for m in metrics]
    return (("Loss", "loss"),) + tuple((n.replace("_", " ").title(), n) for n in names if n)


def keras_route(key: str) -> tuple[str, str]:
    """Keras's TensorBoard layout: `val_x` goes to `validation/epoch_x`, anything else to `train/batch_x`, `epoch_x`.

    `tfmp.run.callbacks.Summaries` prefixes the name with `batch_` or
    `epoch_`, as Keras's TensorBoard callback does.
    """
    if key.startswith("val_"):
        return "validation", key[4:]
    return "train", key


def summary_route(task: Any) -> Callable[[str], tuple[str, str]]:
    """Where each of `task`'s logs goes in TensorBoard: its `summary_route`, or `keras_route` where that says None."""

    def route(key: str) -> tuple[str, str]:
        return task.summary_route(key) or keras_route(key)

    return route


def example_unit(task: Any) -> str:
    """What `task`'s throughput counts: its `example_unit`, or `"ex"` (examples)."""
    return task.example_unit


def describe_data(task: Any) -> str:
    """`task`'s data in the run's description line: its `describe_data()`, or "" (nothing said)."""
    return task.describe_data()


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
