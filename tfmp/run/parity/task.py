"""The classifier task of one parity run, and the task of any run of an experiment (`parity_task`)."""

from __future__ import annotations

import dataclasses

import keras

from tfmp import loss_scale as loss_scale_lib
from tfmp.models.mobilenet_v2 import build_mobilenet_v2_classifier, cpu_bfloat16_float32_layers
from tfmp.run import data, tasks, training
from tfmp.run.parity.design import Arm, ParityConfig, fold_split
from tfmp.run.shipped import ClassifierTask

__all__ = ["parity_task"]


class _ParityTask(ClassifierTask):
    """The classifier task of one parity run: its fold, warm-up, BatchNorm and initial loss scale."""

    def __init__(self, config: training.ClassifierConfig, arm: Arm, fold: int, folds: int, lr_warmup_steps: int):
        network = None
        if arm.keras_batch_norm:

            def network(shape: tuple[int, int, int], classes: int) -> keras.Model:
                return build_mobilenet_v2_classifier(
                    shape,
                    num_classes=classes,
                    alpha=config.alpha,
                    from_logits=config.from_logits,
                    batch_norm_momentum=config.batch_norm_momentum,
                    fused_batch_norm=False,
                )

        advice = cpu_bfloat16_float32_layers(config.image_shape)
        super().__init__(config, network=network, auto_float32_layers=advice)
        self.arm, self.fold, self.folds, self.lr_warmup_steps = arm, fold, folds, lr_warmup_steps

    def load_data(self) -> data.Split:
        return fold_split(super().load_data(), self.config.seed, self.fold, self.folds)

    def optimizers(self, steps_per_epoch: int) -> tuple[keras.optimizers.Optimizer, ...]:
        c = self.config
        if self.lr_warmup_steps:
            total = c.epochs * steps_per_epoch
            warmup = min(self.lr_warmup_steps, total - 1)
            schedule = keras.optimizers.schedules.CosineDecay(
                0.0, decay_steps=total - warmup, warmup_target=c.learning_rate, warmup_steps=warmup
            )
            optimizer = keras.optimizers.Adam(schedule)
        else:
            (optimizer,) = super().optimizers(steps_per_epoch)
        if self.arm.initial_scale is not None:
            # Passed through as it is by the trainer's compile (loss_scale="dynamic").
            optimizer = loss_scale_lib.LossScaleOptimizer(optimizer, dynamic=True, initial_scale=self.arm.initial_scale)
        return (optimizer,)


def parity_task(config: ParityConfig, seed: int, fold: int, arm: Arm) -> tasks.Task:
    """The task of one run: `config.task` (or the classifier) at `seed` and `arm.precision`, on fold `fold`."""
    if config.task is not None:
        return config.task.with_config(seed=int(seed), precision=arm.precision)
    run = dataclasses.replace(config.classifier, seed=int(seed), precision=arm.precision)
    return _ParityTask(run, arm, fold, config.folds, config.lr_warmup_steps)
