"""What a task's config resolves to before any model is built: `resolve` and its `Setting`.

`resolve(task)` validates the config, then `settle(task)` loads the task's
data, counts the steps of an epoch, and settles the precision (`auto`
measured on this device by training each candidate briefly, cached per
device and model), the loss scale (`"none"` unless the precision is float16)
and XLA. The `Setting` it returns is what the rest of a run reads: `Runner.run`
(which validates before making its strategy, then settles), `diagnose_run`
and the parity benchmark all start from it.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import os
import re
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from tfmp import precision as precision_lib
from tfmp import trainers
from tfmp.run import autotune, diagnostics
from tfmp.run import callbacks as callbacks_lib
from tfmp.run import epochs as epochs_lib
from tfmp.run.callbacks.display import example_unit
from tfmp.run.config import ConfigError, TrainConfig, requested_loss_scale
from tfmp.run.tasks import Built, Task

__all__ = ["Setting", "default_run_name", "loss_scale_for", "resolve", "settle"]

log = logging.getLogger(__name__)


def default_run_name(precision: str, loss_scale: str | float, name: str = "") -> str:
    """A timestamp, the task's name, then the precision and loss-scale settings.

    `20261126-185627_text_classifier_mixed_float16_ls-dynamic`: the timestamp
    first, so that runs sort by time. The name is made safe for one path
    component (each run of characters other than letters, digits, `.`, `_`
    and `-` becomes one `_`); without a name it is left out.

    Args:
        precision: The resolved precision.
        loss_scale: The resolved loss scale.
        name: The task's name (`tfmp.run.tasks.Task.name`).
    """
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")
    return f"{stamp}_{safe + '_' if safe else ''}{precision}_ls-{loss_scale}"


@dataclasses.dataclass
class Setting:
    """What a task's config resolves to before any model is built.

    Attributes:
        precision: The precision (`auto` resolved).
        loss_scale: `"dynamic"`, `"none"` or a fixed scale (`"none"` unless
            the precision is `mixed_float16`).
        jit_compile: Whether the step is XLA-compiled.
        data: What the task's `load_data` returned.
        run_dir: The run's TensorBoard directory (not created).
        steps_per_epoch: The training steps of an epoch (None: not counted).
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


def loss_scale_for(requested: str | float | None, precision: str) -> str | float:
    """The loss scale a run of `precision` uses, from the scale its config requests.

    Only `mixed_float16` is loss-scaled: there a scale the config leaves
    `"auto"` is `"dynamic"`; every other precision gets `"none"`.

    Args:
        requested: The config's `loss_scale`, parsed once by
            `tfmp.run.config.requested_loss_scale` (None: `"auto"`).
        precision: The resolved precision.
    """
    if precision != "mixed_float16":
        return "none"
    return "dynamic" if requested is None else requested


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
    task's model briefly), except under `multi_worker`, where the
    compute-capability rule decides (`tfmp.precision.choose_precision`):
    every worker must run one policy. With `check_steps`, the steps of an
    epoch are counted (a batch size that leaves no training step is refused).
    The measurement's answer, and a loss scale the precision ignores, are
    logged (`tfmp.run.output`).

    Raises:
        ConfigError: for an impossible combination of settings, naming it.
        tfmp.run.data.DatasetNotFoundError: when the dataset is not available.
    """
    config = task.config
    data = task.load_data()
    steps = epochs_lib.steps_per_epoch(task, data) if check_steps else None
    jit_compile = precision_lib.resolve_jit_compile(config.xla)
    precision = precision_lib.canonical_precision(config.precision)
    requested = requested_loss_scale(config.loss_scale)
    if precision == "auto" and config.strategy != "multi_worker":
        probe_scale = loss_scale_for(requested, "mixed_float16")  # float16 is timed with its loss scaling
        precision = _measured_precision(task, data, jit_compile, probe_scale, autotune.detect_hardware(), _time_steps)
    precision = precision_lib.resolve_precision(precision)
    loss_scale = loss_scale_for(requested, precision)
    # Only a scale the user set: the default ("auto") says nothing to ignore, nor does an auto precision.
    if (
        requested not in (None, "none")
        and loss_scale == "none"
        and precision_lib.canonical_precision(config.precision) != "auto"
    ):
        log.info(f"note: loss_scale={requested} is ignored under {precision}; only float16 needs loss scaling.")
    if config.on_nonfinite == "stop" and loss_scale == "dynamic":
        raise ConfigError(
            "cannot be 'stop' with mixed_float16 and dynamic loss scaling: there, overflowing steps are expected "
            "and skipped while the scale adapts. Use on_nonfinite='skip', or a fixed loss_scale.",
            "on_nonfinite",
            config.on_nonfinite,
        )
    run_dir = os.path.join(config.logdir, config.run_name or default_run_name(precision, loss_scale, name=task.name))
    return Setting(precision, loss_scale, jit_compile, data, run_dir, steps, config)


_PROBE_WARMUP_STEPS = 2
_PROBE_STEPS = 6


def _time_steps(trainer: trainers.MixedPrecisionTrainer, probe: Any) -> float:
    """Images per second of a few `fit()` steps on one batch, warm-up (tracing, compiling) excluded."""
    batch_size = int(tf.nest.flatten(probe)[0].shape[0])
    timer = callbacks_lib.StepTimer(batch_size * trainer.images_per_example, _PROBE_WARMUP_STEPS)
    trainer.fit(
        tf.data.Dataset.from_tensors(probe).repeat(),
        epochs=1,
        steps_per_epoch=_PROBE_WARMUP_STEPS + _PROBE_STEPS,
        callbacks=[timer],
        shuffle=False,
        verbose=0,
    )
    return timer.mean_images_per_sec


def _measured_precision(
    task: Task,
    data: Any,
    jit_compile: bool,
    loss_scale: str | float,
    hardware: autotune.Hardware,
    time_steps: Callable[[trainers.MixedPrecisionTrainer, Any], float],
) -> str:
    """`auto`: the fastest candidate precision for this model on `hardware`, measured once.

    The candidates come from the device (`tfmp.run.autotune.candidates`). Each
    trains a fresh copy of the task's model as the run will train it (its
    float32 layers, XLA and TF32 settings; float16 with the run's loss
    scale, dynamic by default) for a few steps on its probe batch, timed by
    `time_steps`. The answer is cached per device and model.
    """
    config = task.config
    candidates = autotune.candidates(hardware)
    built: dict[str, Built] = {}
    probe = diagnostics.probe(task, data)

    def build(precision: str) -> Built:
        if precision not in built:
            scale = loss_scale if precision == "mixed_float16" else "none"  # float16 is timed with its loss scaling
            with precision_lib.precision_scope(precision):
                built[precision] = task.build(precision, scale, jit_compile, 1, data)
        return built[precision]

    def measure(precision: str) -> float:
        with precision_lib.tf32_scope(config.tf32):
            measured = time_steps(build(precision).trainer, probe)
        del built[precision]  # one candidate's model and optimizer state in memory at a time
        return measured

    signature = ""  # a single candidate measures nothing and needs no model
    if len(candidates) > 1:
        trainer = build("float32").trainer
        described = {
            "trainer": type(trainer).__name__,
            "networks": {name: net.get_config() for name, net in trainer.networks.items()},
            "batch_size": config.batch_size,
            "xla": jit_compile,
            "float32_layers": autotune.float32_pattern(task, "mixed_bfloat16"),
        }
        # Only where they change a measurement, so that CPU entries stay valid across loss-scale settings.
        if "mixed_float16" in candidates:
            described["loss_scale"] = str(loss_scale)
        if hardware.gpus:
            described["tf32"] = bool(config.tf32)
        signature = json.dumps(described, sort_keys=True, default=str)
    capability = hardware.compute_capability
    tf32 = config.tf32 and capability is not None and capability >= (8, 0)
    labels = {"float32": "float32 with TF32"} if tf32 else None
    choice = autotune.choose(signature, measure, hardware, labels=labels, unit=f"{example_unit(task)}/s")
    log.info(str(choice))
    return choice.precision
