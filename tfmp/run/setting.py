"""What a task's config settles to, up to the model the run trains: `resolve`, `settle` and their `Setting`.

`resolve(task)` validates the config, then `settle(task)` loads the task's
data, counts the steps of an epoch, and settles the precision, the loss
scale (`"none"` unless the precision is float16) and XLA. Precision `auto`
is measured on this device by training each candidate briefly
(`tfmp.run.auto_precision`, cached per device and model), so settling may
build and train models, though not the run's own; `hardware` (and `auto`
under `multi_worker`) is the compute-capability rule. The `Setting` it
returns is what the rest of a run reads: `Runner.run` (which validates
before making its strategy, then settles), `diagnose_run` and the parity
benchmark all start from it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

import tensorflow as tf

from tfmp import precision as precision_lib
from tfmp.run import auto_precision, directories
from tfmp.run import config as config_lib
from tfmp.run.config import GPU_LOG_EVERY, ConfigError, TrainConfig
from tfmp.run.tasks import Task

__all__ = ["Setting", "resolve", "resolve_log_every", "settle"]

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Setting:
    """What a task's config settles to: what the run builds and trains its model with.

    Attributes:
        precision: The concrete precision (`auto` and `hardware` decided).
        loss_scale: `"dynamic"`, `"none"` or a fixed scale (`"none"` unless
            the precision is `mixed_float16`).
        jit_compile: Whether the step is XLA-compiled.
        data: What the task's `load_data` returned.
        run_dir: The run's TensorBoard directory (not created).
        steps_per_epoch: The training steps of an epoch (None: not counted).
        log_every: The steps between two logged steps (`log_every=0` resolved).
        config: The task's config these were resolved from (validated):
            what the run reads for the settings it does not resolve.
    """

    precision: str
    loss_scale: str | float
    jit_compile: bool
    data: Any
    run_dir: str
    steps_per_epoch: int | None = None
    config: TrainConfig | None = None
    log_every: int = 1


def resolve(task: Task, check_steps: bool = True) -> Setting:
    """Validates the task's config, then `settle`s it.

    Raises:
        ConfigError: for an impossible setting, naming it.
        tfmp.run.data.DatasetNotFoundError: when the dataset is not available.
    """
    task.config.validate()
    return settle(task, check_steps)


def settle(task: Task, check_steps: bool = True) -> Setting:
    """Loads the data of a task whose config is valid and resolves precision, loss scale and XLA.

    `auto` precision is measured on this device (each candidate trains the
    task's model briefly, `tfmp.run.auto_precision`), except under
    `multi_worker`, where every worker must run one policy: there `auto`
    is decided as `hardware` is, by the compute-capability rule
    (`tfmp.precision.choose_precision`), and a `note:` line says so.
    Each setting is parsed once, when the config is validated
    (`TrainConfig.parsed`), and the parsed value passed on.
    With `check_steps`, the steps of an epoch are counted (a batch size that
    leaves no training step is refused). A loss scale the precision ignores
    is logged (`tfmp.run.output`).

    Raises:
        ConfigError: for an impossible combination of settings, naming it.
        tfmp.run.data.DatasetNotFoundError: when the dataset is not available.
    """
    config = task.config
    log_every = resolve_log_every(config.log_every)
    data = task.load_data()
    steps = task.steps_per_epoch(data) if check_steps else None
    # Parsed once, when the config was validated (loss scale, precision, XLA). requested: None when not set.
    requested, asked = config.parsed("loss_scale"), config.parsed("precision")
    scales = config_lib.loss_scales(requested)  # each precision's, by the one rule (`loss_scale_for`)
    xla = config.parsed("xla")  # True, False or "auto": on with a GPU
    jit_compile = precision_lib.auto_jit_compile() if xla == "auto" else xla
    if asked == "auto" and config.strategy == "multi_worker":
        log.info(
            "note: precision=auto under strategy=multi_worker is chosen by the compute-capability rule, as "
            "precision=hardware is, not measured: every worker must choose the same precision."
        )
        asked = "hardware"
    if asked != "auto":
        precision = precision_lib.resolve_precision(asked)
    else:
        with precision_lib.tf32_scope(config.tf32):  # each candidate is timed as the run will train it
            precision = auto_precision.fastest(task, data, jit_compile, scales, auto_precision.detect_hardware())
    loss_scale = scales[precision]
    # Only a scale the user set: the default ("auto") says nothing to ignore, nor does a precision chosen for it.
    if requested not in (None, "none") and loss_scale == "none" and asked in precision_lib.CONCRETE_PRECISIONS:
        log.info(f"note: loss_scale={requested} is ignored under {precision}; only float16 needs loss scaling.")
    if config.on_nonfinite == "stop" and loss_scale == "dynamic":
        raise ConfigError(
            "cannot be 'stop' with mixed_float16 and dynamic loss scaling: there, overflowing steps are expected "
            "and skipped while the scale adapts. Use on_nonfinite='skip', or a fixed loss_scale.",
            "on_nonfinite",
            config.on_nonfinite,
        )
    name = config.run_name or directories.default_run_name(precision, loss_scale, name=task.name)
    run_dir = os.path.join(config.logdir, name)
    return Setting(precision, loss_scale, jit_compile, data, run_dir, steps, config, log_every)


def resolve_log_every(log_every: int, has_gpu: bool | None = None) -> int:
    """The steps between two logged steps: `log_every`, or for 0 every step on a CPU and `GPU_LOG_EVERY` on a GPU.

    Args:
        log_every: The setting (`TrainConfig.log_every`).
        has_gpu: Whether a GPU is visible; detected when None.
    """
    if log_every:
        return log_every
    if has_gpu is None:
        has_gpu = bool(tf.config.list_physical_devices("GPU"))
    return GPU_LOG_EVERY if has_gpu else 1
