"""What one benchmark row times: the trainer training builds, and the hand-written step it is measured against.

`build_workload` builds both from a model's `tfmp.run.tasks.Task`: the
trainer is `task.build(...)`, as in a training run; the hand-written step is
the task's baseline (`Task.hand_written_step`), a
minimal `tf.function` update of the same networks that deliberately shares
no code with `tfmp.trainers` ("The hand-written step" in
docs/guides/benchmark-methodology.md shows it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import keras

from tfmp import trainers
from tfmp.run import baseline, tasks
from tfmp.run import config as config_lib

__all__ = ["Workload", "build_workload"]


@dataclasses.dataclass
class Workload:
    """A compiled trainer, the matching hand-written step, and their data.

    Attributes:
        trainer: The compiled `tfmp.trainers` model (not yet traced), built by
            the model's `tfmp.run.tasks.Task` exactly as training builds it.
        hand_written_step: `tf.function(jit_compile=xla)` taking one batch and
            running one update of the same network (see "The hand-written
            step" in [How the benchmark measures](../../guides/benchmark-methodology.md)); None when not
            built, or when the task has none.
        hand_written_optimizers: The hand-written step's optimizers (one for a
            supervised model, generator's then discriminator's for the GAN).
        batch: The batch both are fed (`Task.benchmark_batch`).
        images_per_step: Examples one step processes (`batch_size *
            trainer.images_per_example`).
        float32_layers: Paths of the layers kept in float32
            (`tfmp.float32_layers.keep_float32`); empty for none.
        plain_fit: The trainer's network compiled by Keras's own `compile()`
            (`tfmp.run.baseline.plain_fit_model`), what a user would `fit()`
            instead; None when not built, or for a GAN.
    """

    trainer: trainers.MixedPrecisionTrainer
    hand_written_step: Callable[[Any], Any] | None
    hand_written_optimizers: tuple[keras.optimizers.Optimizer, ...]
    batch: Any
    images_per_step: int
    float32_layers: tuple[str, ...] = ()
    plain_fit: keras.Model | None = None


def build_workload(
    task: tasks.Task,
    precision: str,
    xla: bool,
    steps: int = 1,
    hand_written: bool = True,
) -> Workload:
    """Builds one row's workload from `task`, under the current dtype policy (which must be `precision`'s).

    The trainer is `task.build(...)`: the networks, optimizers, learning-rate
    schedule (over `steps`), loss, metrics, non-finite skipping and float32
    layers exactly as a training run of `task.config` has them; the loss
    scale is the config's (dynamic under `mixed_float16` by default, none
    otherwise). The hand-written step (`hand_written`) is the task's
    `hand_written_step`, updating the same networks with
    fresh copies of the task's optimizers, and so is the plain `fit()` model
    (`tfmp.run.baseline.plain_fit_model`). The batch is `task.benchmark_batch()`.
    """
    loss_scale = config_lib.loss_scale_for(task.config.parsed("loss_scale"), precision)
    built = task.build(precision, loss_scale, xla, steps)
    trainer = built.trainer
    step = task.hand_written_step(trainer, precision, xla, steps) if hand_written else None
    plain = baseline.plain_fit_model(task, trainer, xla, steps) if hand_written else None
    return Workload(
        trainer,
        None if step is None else step.step,
        () if step is None else step.optimizers,
        task.benchmark_batch(),
        task.config.batch_size * trainer.images_per_example,
        built.float32_layers,
        plain,
    )
