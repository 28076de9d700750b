"""Reading checkpoints in tfmp 0.1.0's positional layout, so that runs checkpointed then still resume exactly.

tfmp 0.1.0 (up to commit 0f603b3) checkpointed `trainer.variables` and each
optimizer's `variables` as positional lists: keys `model/<i>/...` and
`optimizer_<name>/<i>/...`, a value tied to a variable only by its index.
`tfmp.run.checkpoint.RunCheckpoint.restore` recognises such a checkpoint by
its keys (`is_legacy`), checks that its lists fit the trainer
(`check_counts`) and reads it through `legacy_checkpoint`; saves always
write the object layout.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import tensorflow as tf

__all__ = ["LEGACY_PREFIX", "check_counts", "is_legacy", "legacy_checkpoint"]

# Only tfmp 0.1.0's positional layout has a top-level `model` (see legacy_checkpoint).
LEGACY_PREFIX = "model/"


def legacy_checkpoint(trainer: Any, step: tf.Variable, signature: tf.Variable) -> tf.train.Checkpoint:
    """A checkpoint object in the layout tfmp 0.1.0 wrote, to read its checkpoints; never saved.

    Args:
        trainer: The trainer to restore, its optimizers built.
        step: The variable the checkpoint's step goes to.
        signature: The variable the checkpoint's run signature goes to.

    Returns:
        A `tf.train.Checkpoint` holding `trainer.variables` as `model` and
        each optimizer's `variables` as `optimizer_<name>`, as lists.
    """
    return tf.train.Checkpoint(
        model=list(trainer.variables),
        step=step,
        signature=signature,
        **{f"optimizer_{name}": list(optimizer.variables) for name, optimizer in trainer.optimizers.items()},
    )


def check_counts(keys: Iterable[str], trainer: Any) -> None:
    """Raises ValueError unless a 0.1.0 checkpoint with these `keys` holds as many variables per list as `trainer`.

    Its lists match variables by index only: a count that differs means another model.

    Args:
        keys: The checkpoint's keys (`tf.train.load_checkpoint(...).get_variable_to_shape_map()`).
        trainer: The trainer to restore.

    Raises:
        ValueError: naming the first list whose count differs, and both counts.
    """
    counts: dict[str, int] = {}
    for key in keys:
        if m := re.match(r"^(model|optimizer_.+)/\d+/\.ATTRIBUTES/VARIABLE_VALUE$", key):
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    expected = {
        "model": len(trainer.variables),
        **{f"optimizer_{name}": len(o.variables) for name, o in trainer.optimizers.items()},
    }
    for name in sorted(set(counts) | set(expected)):
        if counts.get(name, 0) != expected.get(name, 0):
            raise ValueError(
                f"its {name} list holds {counts.get(name, 0)} variables, this trainer's {expected.get(name, 0)}"
            )


def is_legacy(keys: Iterable[str]) -> bool:
    """Whether a checkpoint with these `keys` has tfmp 0.1.0's positional layout (`model/<i>` keys).

    Args:
        keys: The checkpoint's keys.

    Returns:
        True for the 0.1.0 layout, False for the object layout.
    """
    return any(key.startswith(LEGACY_PREFIX) for key in keys)
