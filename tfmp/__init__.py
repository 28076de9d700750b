"""tfmp: mixed-precision training for TensorFlow/Keras 3.

The public names most users need:

* `tfmp.set_precision`, `tfmp.precision_scope`: the global Keras dtype policy
  (`float32`, `mixed_float16`, `mixed_bfloat16`, `auto`).
* `tfmp.LossScaleOptimizer`: loss scaling with both the tf.keras 2 and the
  Keras 3 custom-loop API.
* `tfmp.wrap_optimizer`: the optimizer a precision needs.
* `tfmp.Trainer`, `tfmp.GANTrainer`: `keras.Model`s whose `train_step` is the
  loss-scaled custom step (`tfmp.trainers`); `tfmp.Trainer` wraps any
  supervised model.
* `tfmp.undo_if_skipped`: a custom loop's step as a transaction, so that a
  skipped step also leaves BatchNorm's statistics as they were.
* `tfmp.LogLossScale`: `loss_scale` and `skipped_steps` in plain `fit()`'s logs.
* `tfmp.cpu_kernels`: what this CPU's float16 and bfloat16 kernels cost,
  and float16 gradients computed in float32 where its float16 kernel is
  pathological (the trainers do it by themselves).
* `tfmp.mixed_precision`: a drop-in for tf.keras 2's
  `tf.keras.mixed_precision` (`Policy`, `set_global_policy`,
  `global_policy`, `LossScaleOptimizer`).

This package is the core: it imports nothing of the run framework. Whole runs
(data, model, callbacks, TensorBoard, checkpoints) are in `tfmp.run`:
`tfmp.run.training` is their entry point, built from `tfmp.run.config` (settings),
`tfmp.run.tasks` (one Task per model) and `tfmp.run.runner` (one run). The models
are `tfmp.models`.
"""

from tfmp import _moved, cpu_kernels, mixed_precision, trainers
from tfmp.fit_logs import LogLossScale
from tfmp.loss_scale import LossScaleOptimizer
from tfmp.optimizers import parse_loss_scale, wrap_optimizer
from tfmp.precision import (
    PRECISIONS,
    canonical_precision,
    precision_scope,
    resolve_jit_compile,
    resolve_precision,
    set_precision,
    set_tf32,
    tf32_scope,
)
from tfmp.trainers import ClassifierTrainer, GANTrainer, Trainer
from tfmp.transaction import undo_if_skipped

__version__ = "0.2.0"

_moved.install()

__all__ = [
    "ClassifierTrainer",
    "GANTrainer",
    "LogLossScale",
    "LossScaleOptimizer",
    "PRECISIONS",
    "canonical_precision",
    "cpu_kernels",
    "mixed_precision",
    "parse_loss_scale",
    "precision_scope",
    "resolve_jit_compile",
    "resolve_precision",
    "set_precision",
    "set_tf32",
    "tf32_scope",
    "Trainer",
    "trainers",
    "undo_if_skipped",
    "wrap_optimizer",
]
