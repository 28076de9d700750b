"""What a checkpoint holds beside the variables: its step and its run signature, read and compared.

A checkpoint is `Found` when every tensor of it reads back; a resume whose
signature differs from the checkpoint's is refused with `CheckpointError`,
naming each difference (`differences`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import tensorflow as tf

__all__ = ["SETTINGS_KEY", "SIGNATURE_KEY", "STEP_KEY", "CheckpointError", "Found", "differences", "read_all"]

STEP_KEY = "step/.ATTRIBUTES/VARIABLE_VALUE"
SIGNATURE_KEY = "signature/.ATTRIBUTES/VARIABLE_VALUE"
# The signature entry holding the run's settings (`tfmp.run.config` fields), whose differences name the setting.
SETTINGS_KEY = "config"


class CheckpointError(ValueError):
    """A checkpoint that cannot be written or resumed from; the message names the file or variables."""


@dataclasses.dataclass(frozen=True)
class Found:
    """A readable checkpoint.

    Attributes:
        path: The checkpoint's prefix (`<dir>/ckpt-N`).
        step: Training steps done when it was written.
        signature: The run signature it was written with.
    """

    path: str
    step: int
    signature: dict[str, Any]


def read_all(path: str) -> tuple[int, dict[str, Any]]:
    """Reads every tensor of a checkpoint; returns its step and signature.

    Raises:
        Exception: (tf.errors.OpError, IndexError, ValueError, ...) if any
        part is missing, truncated or corrupt.
    """
    reader = tf.train.load_checkpoint(path)
    for key in reader.get_variable_to_shape_map():
        reader.get_tensor(key)  # reads (and checksums) the data
    step = int(reader.get_tensor(STEP_KEY))
    signature = json.loads(reader.get_tensor(SIGNATURE_KEY).decode("utf-8"))
    return step, signature


def differences(saved: Any, current: Any, key: str = "") -> list[str]:
    """One line per differing leaf, naming both values in full.

    `key: checkpoint <value>, this run <value>`, nested keys joined with
    dots; a setting (a key under `SETTINGS_KEY`) as a config names it,
    `batch_size=32 in the checkpoint, batch_size=64 in this run`, which the
    scripts turn into flag names.
    """
    if isinstance(saved, Mapping) and isinstance(current, Mapping):
        return [
            line
            for name in sorted(set(saved) | set(current), key=str)
            for line in differences(saved.get(name), current.get(name), f"{key}.{name}" if key else str(name))
        ]
    if saved == current:
        return []
    group, _, setting = key.partition(".")
    if group == SETTINGS_KEY and setting:
        return [f"{setting}={saved!r} in the checkpoint, {setting}={current!r} in this run"]
    return [f"{key}: checkpoint {json.dumps(saved, sort_keys=True)}, this run {json.dumps(current, sort_keys=True)}"]
