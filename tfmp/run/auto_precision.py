"""Precision `"auto"` for a task: each candidate trains the task's model for a few steps, and the fastest wins.

`fastest(task, data, ...)` builds the task's trainer in each candidate
precision of the device (`tfmp.run.autotune.candidates`) as the run will
build it (its float32 layers, XLA and TF32 settings; float16 with the run's
loss scale), times a few `fit()` steps on the task's probe batch, and
returns the fastest precision. `tfmp.run.autotune.choose` keeps the answer
per device and model, so the probe runs once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from tfmp import precision as precision_lib
from tfmp import trainers
from tfmp.run import autotune, diagnostics
from tfmp.run import callbacks as callbacks_lib
from tfmp.run import config as config_lib
from tfmp.run.callbacks.display import example_unit
from tfmp.run.tasks import Built, Task

__all__ = ["fastest", "time_steps"]

log = logging.getLogger(__name__)

_WARMUP_STEPS = 2
_STEPS = 6


def time_steps(trainer: trainers.MixedPrecisionTrainer, probe: Any) -> float:
    """Images (or examples) per second of a few `fit()` steps on one batch, warm-up (tracing, compiling) excluded."""
    batch_size = int(tf.nest.flatten(probe)[0].shape[0])
    timer = callbacks_lib.StepTimer(batch_size * trainer.images_per_example, _WARMUP_STEPS)
    trainer.fit(
        tf.data.Dataset.from_tensors(probe).repeat(),
        epochs=1,
        steps_per_epoch=_WARMUP_STEPS + _STEPS,
        callbacks=[timer],
        shuffle=False,
        verbose=0,
    )
    return timer.mean_images_per_sec


def fastest(
    task: Task,
    data: Any,
    jit_compile: bool,
    requested_loss_scale: str | float | None,
    hardware: autotune.Hardware,
    timer: Callable[[trainers.MixedPrecisionTrainer, Any], float] | None = None,
) -> str:
    """The fastest candidate precision for the task's model on `hardware`, measured once per device and model.

    Each candidate trains a fresh copy of the task's model for a few steps
    on its probe batch (`tfmp.run.diagnostics.probe`), timed by `timer`
    (default `time_steps`); one candidate's model is in memory at a time.
    The caller sets TF32 around the call (`tfmp.tf32_scope`), as the run
    will. The answer, with every figure, is logged.

    Args:
        task: The task whose model is measured (its config is valid).
        data: What the task's `load_data` returned.
        jit_compile: Whether the run's step is XLA-compiled.
        requested_loss_scale: The config's loss scale as `tfmp.run.config.requested_loss_scale`
            parsed it (None: not set); each candidate trains with `loss_scale_for` its precision.
        hardware: The device (`tfmp.run.autotune.detect_hardware`).
        timer: Times a trainer's steps on the probe batch (the tests inject one).
    """
    timer = timer or time_steps
    config = task.config
    candidates = autotune.candidates(hardware)
    built: dict[str, Built] = {}
    probe = diagnostics.probe(task, data)

    def build(precision: str) -> Built:
        if precision not in built:
            scale = config_lib.loss_scale_for(requested_loss_scale, precision)
            with precision_lib.precision_scope(precision):
                built[precision] = task.build(precision, scale, jit_compile, 1, data)
        return built[precision]

    def measure(precision: str) -> float:
        measured = timer(build(precision).trainer, probe)
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
            # What decides the float32 layers under bfloat16: the setting and the model's advice.
            "float32_layers": [config.float32_layers, task.cpu_bfloat16_float32_layers],
        }
        # Only where they change a measurement, so that CPU entries stay valid across loss-scale settings.
        if "mixed_float16" in candidates:
            described["loss_scale"] = str(config_lib.loss_scale_for(requested_loss_scale, "mixed_float16"))
        if hardware.gpus:
            described["tf32"] = bool(config.tf32)
        signature = json.dumps(described, sort_keys=True, default=str)
    capability = hardware.compute_capability
    tf32 = config.tf32 and capability is not None and capability >= (8, 0)
    labels = {"float32": "float32 with TF32"} if tf32 else None
    unit = f"{example_unit(task)}/s"
    choice = autotune.choose(signature, measure, hardware, labels=labels, unit=unit)
    log.info(str(choice))
    return choice.precision
