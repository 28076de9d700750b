"""What a task's config settles to before its run builds the model: `settle(task)` and its `Settled`.

Settling reads the task's config (validated: `resolve` validates, then
settles) and decides, once each, what a run derives from it:

1. XLA (`xla="auto"`: on with a GPU) and the loss scale each precision
   would train with (`"none"` unless the precision is float16);
2. the data, `task.load_data()`, and the steps of an epoch
   (`task.steps_per_epoch`);
3. the precision: a concrete one as asked; `hardware` (and `auto` under
   `multi_worker`, where every worker must run one policy) by the
   compute-capability rule; `auto` measured on this device. Measuring
   builds the task's model in each candidate precision and trains it a few
   steps on the task's probe batch (`tfmp.run.trials.fastest`); the answer
   is cached per device and model (`tfmp.run.autotune`), so a second run
   measures nothing. Settling may so build and train models, though never
   the run's own;
4. the run's name: `config.run_name`, or one made from the precision and
   loss scale (`tfmp.run.directories.default_run_name`);
5. `log_every` (0: every step on a CPU, `GPU_LOG_EVERY` on a GPU).

The run directory, `<logdir>/<run_name>`, is claimed once, by the runner
(`tfmp.run.directories.hold`). The `Settled` is what the rest of a run reads
beside the task and its config: `Runner.run`, `diagnose_run` and the parity
check all start from it.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import tensorflow as tf

from tfmp import precision as precision_lib
from tfmp.run import autotune, directories, trials
from tfmp.run import config as config_lib
from tfmp.run.config import GPU_LOG_EVERY, ConfigError
from tfmp.run.tasks import Task

__all__ = ["Settled", "resolve", "resolve_log_every", "settle"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settled:
    """What a task's config settles to: what its run builds and trains the model with.

    The config itself stays the task's (`task.config`): this holds only what
    was derived from it, each decided once, by `settle`.

    Attributes:
        precision: The concrete precision (`auto` and `hardware` decided).
        loss_scale: `"dynamic"`, `"none"` or a fixed scale (`"none"` unless
            the precision is `mixed_float16`).
        xla: Whether the whole step is compiled with XLA.
        data: What the task's `load_data` returned.
        steps_per_epoch: The training steps of an epoch (None: not counted).
        run_name: The run's name, its directory under `config.logdir`.
        log_every: The steps between two logged steps (`log_every=0` resolved).
    """

    precision: str
    loss_scale: str | float
    xla: bool
    data: Any
    steps_per_epoch: int | None
    run_name: str
    log_every: int


def resolve(task: Task, check_steps: bool = True) -> Settled:
    """Validates the task's config, then `settle`s it.

    Raises:
        ConfigError: for an impossible setting, naming it.
        tfmp.run.data.DatasetNotFoundError: when the dataset is not available.
    """
    task.config.validate()
    return settle(task, check_steps)


def settle(task: Task, check_steps: bool = True) -> Settled:
    """Decides what a task whose config is valid trains with, in the order the module docstring gives.

    Each setting is parsed once, when the config is validated
    (`TrainConfig.parsed`), and the parsed value passed on. With
    `check_steps`, the steps of an epoch are counted (a batch size that
    leaves no training step is refused). A loss scale the precision ignores,
    and `auto` decided by rule under `multi_worker`, are logged
    (`tfmp.run.output`).

    Raises:
        ConfigError: for an impossible combination of settings, naming it.
        tfmp.run.data.DatasetNotFoundError: when the dataset is not available.
    """
    config = task.config
    log_every = resolve_log_every(config.log_every)
    # 1. Parsed once, when the config was validated. requested: None when not set.
    requested, asked, xla = config.parsed("loss_scale"), config.parsed("precision"), config.parsed("xla")
    scales = config_lib.loss_scales(requested)  # each precision's, by the one rule (`loss_scale_for`)
    xla = precision_lib.auto_jit_compile() if xla == "auto" else xla  # "auto": on with a GPU
    if asked == "auto" and config.strategy == "multi_worker":
        log.info(
            "note: precision=auto under strategy=multi_worker is chosen by the compute-capability rule, as "
            "precision=hardware is, not measured: every worker must choose the same precision."
        )
        asked = "hardware"
    # 2. The data, and what the run and `auto` read of it.
    data = task.load_data()
    steps = task.steps_per_epoch(data) if check_steps else None
    probe = task.probe(data) if asked == "auto" else None
    # 3. The precision, and the loss scale it trains with.
    if asked != "auto":
        precision = precision_lib.resolve_precision(asked)
    else:
        with precision_lib.tf32_scope(config.tf32):  # each candidate is timed as the run will train it
            precision = trials.fastest(task, data, probe, xla, scales, autotune.detect_hardware())
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
    # 4. The run's name.
    run_name = config.run_name or directories.default_run_name(precision, loss_scale, name=task.name)
    return Settled(
        precision=precision,
        loss_scale=loss_scale,
        xla=xla,
        data=data,
        steps_per_epoch=steps,
        run_name=run_name,
        log_every=log_every,
    )


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
