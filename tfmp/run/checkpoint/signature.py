"""What a checkpoint holds beside the variables: its step and its run signature, made, read and compared.

`run_signature` is what a resumed run must share with the run that wrote
its checkpoint. A checkpoint is `Found` when every tensor of it reads back;
a resume whose signature differs from the checkpoint's is refused with
`CheckpointError`, naming each difference (`differences`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tfmp import float32_layers
from tfmp.run.options import resumable_fields

__all__ = [
    "SETTINGS_KEY",
    "SIGNATURE_KEY",
    "STEP_KEY",
    "CheckpointError",
    "Found",
    "SettingsDiffer",
    "differences",
    "read_all",
    "run_signature",
]

STEP_KEY = "step/.ATTRIBUTES/VARIABLE_VALUE"
SIGNATURE_KEY = "signature/.ATTRIBUTES/VARIABLE_VALUE"
# The signature entry holding the run's settings (`tfmp.run.config` fields), whose differences name the setting.
SETTINGS_KEY = "config"


class CheckpointError(ValueError):
    """A checkpoint that cannot be written or resumed from; the message names the file or variables."""


class SettingsDiffer(CheckpointError):
    """A checkpoint written by a run with other settings.

    Attributes:
        path: The checkpoint's prefix.
        settings: `(setting, value in the checkpoint, value in this run)` for
            each differing setting of the config.
        others: One line for each other differing part of the signature.
    """

    def __init__(self, path: str, settings: Sequence[tuple[str, Any, Any]], others: Sequence[str]):
        self.path, self.settings, self.others = path, tuple(settings), tuple(others)
        super().__init__(self.render(str))

    def render(self, name: Callable[[str], str]) -> str:
        """The message, each setting called `name(setting)` (the scripts pass `--setting`)."""
        lines = [
            f"{name(setting)}={saved!r} in the checkpoint, {name(setting)}={current!r} in this run"
            for setting, saved, current in self.settings
        ]
        return (
            f"Checkpoint {self.path} was written by a different run; resume with the same settings, or start a new "
            f"run (another {name('run_name')} or {name('checkpoint_dir')}). Differences: "
            + "; ".join(lines + list(self.others))
        )


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


def differences(saved: Any, current: Any, key: str = "") -> tuple[list[tuple[str, Any, Any]], list[str]]:
    """The differing leaves of two signatures: settings, and one line for each other part.

    A setting (a key under `SETTINGS_KEY`) comes back as `(setting, saved,
    current)`, so that a message can name it as a config or a command line
    does; any other leaf as `key: checkpoint <value>, this run <value>`,
    nested keys joined with dots, both values in full.
    """
    if isinstance(saved, Mapping) and isinstance(current, Mapping):
        settings: list[tuple[str, Any, Any]] = []
        others: list[str] = []
        for name in sorted(set(saved) | set(current), key=str):
            more, lines = differences(saved.get(name), current.get(name), f"{key}.{name}" if key else str(name))
            settings += more
            others += lines
        return settings, others
    if saved == current:
        return [], []
    group, _, setting = key.partition(".")
    if group == SETTINGS_KEY and setting:
        return [(setting, saved, current)], []
    return [], [
        f"{key}: checkpoint {json.dumps(saved, sort_keys=True)}, this run {json.dumps(current, sort_keys=True)}"
    ]


def _network_signature(network: keras.Model) -> dict[str, Any]:
    """A network's architecture and per-layer dtype policies, independent of auto-generated layer names."""
    layers = [
        (type(layer).__name__, layer.dtype_policy.name, [list(w.shape) for w in layer.weights])
        for _, layer in float32_layers.layer_paths(network)
    ]
    policies: dict[str, int] = {}
    for _, policy, _ in layers:
        policies[policy] = policies.get(policy, 0) + 1
    return {
        "layers": len(layers),
        "parameters": int(sum(np.prod(w.shape) for w in network.weights)),
        "dtype_policies": policies,
        "structure": hashlib.sha256(json.dumps(layers).encode()).hexdigest()[:16],
    }


def run_signature(config: Any, precision: str, loss_scale: str | float, trainer: Any) -> dict[str, Any]:
    """What a resumed run must share with the run that wrote its checkpoint.

    Args:
        config: The run's `tfmp.run.config.TrainConfig`: every setting but
            those a resumed run may change (`resumable=True` in their
            `option`, `tfmp.run.options.resumable_fields`), under `SETTINGS_KEY`.
        precision: The resolved precision.
        loss_scale: The resolved loss scale.
        trainer: The `tfmp.trainers` trainer: its class, each network's
            architecture and dtype policies, each optimizer's class.
    """
    return {
        "trainer": type(trainer).__name__,
        SETTINGS_KEY: {k: v for k, v in dataclasses.asdict(config).items() if k not in resumable_fields(config)},
        "precision": precision,
        "loss_scale": str(loss_scale),
        "networks": {name: _network_signature(network) for name, network in trainer.networks.items()},
        "optimizers": {
            name: type(opt.inner_optimizer if isinstance(opt, keras.optimizers.LossScaleOptimizer) else opt).__name__
            for name, opt in trainer.optimizers.items()
        },
    }
