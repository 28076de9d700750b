"""Trial runs: precision `auto` for a task, its model trained a few steps in each candidate precision, timed.

`fastest(task, data, probe, ...)` builds the task's trainer in each candidate
precision of the device (`tfmp.run.autotune.candidates`) as the run will
build it (its float32 layers, XLA and TF32 settings; float16 with the run's
loss scale), times a few `fit()` steps on the task's probe batch
(`time_steps`), and hands the figures to `tfmp.run.autotune.choose`, which
caches them per device and model: a second run of the same model measures
nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf

from tfmp import precision as precision_lib
from tfmp import trainers
from tfmp.run import callbacks as callbacks_lib
from tfmp.run.autotune import Hardware, candidates, choose
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
    probe: Any,
    xla: bool,
    loss_scales: Mapping[str, str | float],
    hardware: Hardware,
    timer: Callable[[trainers.MixedPrecisionTrainer, Any], float] | None = None,
) -> str:
    """The fastest candidate precision for the task's model on `hardware`, measured once per device and model.

    Each candidate trains a fresh copy of the task's model for a few steps
    on `probe`, timed by `timer` (default `time_steps`); one candidate's
    model is in memory at a time.
    The caller sets TF32 around the call (`tfmp.tf32_scope`), as the run
    will. The answer, with every figure, is logged.

    Args:
        task: The task whose model is measured (its config is valid).
        data: What the task's `load_data` returned (the model is built from it).
        probe: The batch the candidates train on (`Task.probe` of `data`).
        xla: Whether the run compiles the whole step with XLA.
        loss_scales: The loss scale each candidate trains with, by precision
            (`tfmp.run.config.loss_scales` of the config's requested scale).
        hardware: The device (`detect_hardware`).
        timer: Times a trainer's steps on the probe batch (the tests inject one).
    """
    timer = timer or time_steps
    config = task.config
    measured = candidates(hardware)
    built: dict[str, Built] = {}

    def build(precision: str) -> Built:
        if precision not in built:
            with precision_lib.precision_scope(precision):
                built[precision] = task.build(precision, loss_scales[precision], xla, 1, data)
        return built[precision]

    def measure(precision: str) -> float:
        measured = timer(build(precision).trainer, probe)
        del built[precision]  # one candidate's model and optimizer state in memory at a time
        return measured

    signature = ""  # a single candidate measures nothing and needs no model
    if len(measured) > 1:
        trainer = build("float32").trainer
        described = {
            "trainer": type(trainer).__name__,
            "networks": {name: net.get_config() for name, net in trainer.networks.items()},
            "batch_size": config.batch_size,
            "xla": xla,
            # What decides the float32 layers under bfloat16: the setting and the model's advice.
            "float32_layers": [config.float32_layers, task.auto_float32_layers],
        }
        # Only where they change a measurement, so that CPU entries stay valid across loss-scale settings.
        if "mixed_float16" in measured:
            described["loss_scale"] = str(loss_scales["mixed_float16"])
        if hardware.gpus:
            described["tf32"] = bool(config.tf32)
        signature = json.dumps(described, sort_keys=True, default=str)
    capability = hardware.compute_capability
    tf32 = config.tf32 and capability is not None and capability >= (8, 0)
    labels = {"float32": "float32 with TF32"} if tf32 else None
    unit = f"{task.example_unit}/s"
    choice = choose(signature, measure, hardware, labels=labels, unit=unit)
    log.info(str(choice))
    return choice.precision
