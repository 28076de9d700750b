"""tfmp: mixed-precision training for TensorFlow/Keras 3.

The public names most users need:

* `tfmp.set_precision`, `tfmp.precision_scope`: the global Keras dtype policy
  (`float32`, `mixed_float16`, `mixed_bfloat16`, `auto`).
* `tfmp.LossScaleOptimizer`: loss scaling with both the tf.keras 2 and the
  Keras 3 custom-loop API.
* `tfmp.wrap_optimizer`: the optimizer a precision needs.
* `tfmp.ClassifierTrainer`, `tfmp.GANTrainer`: `keras.Model`s whose
  `train_step` is the loss-scaled custom step (`tfmp.trainers`).
* `tfmp.mixed_precision`: a drop-in for tf.keras 2's
  `tf.keras.mixed_precision` (`Policy`, `set_global_policy`,
  `global_policy`, `LossScaleOptimizer`).

Whole runs (data, model, callbacks, TensorBoard) are in `tfmp.training`, built from
`tfmp.config` (settings), `tfmp.tasks` (one Task per model) and `tfmp.runner` (one run).
"""

from tfmp import mixed_precision, trainers
from tfmp.loss_scale import LossScaleOptimizer, parse_loss_scale, wrap_optimizer
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
from tfmp.trainers import ClassifierTrainer, GANTrainer

__version__ = "0.1.0"

__all__ = [
    "ClassifierTrainer",
    "GANTrainer",
    "LossScaleOptimizer",
    "PRECISIONS",
    "canonical_precision",
    "mixed_precision",
    "parse_loss_scale",
    "precision_scope",
    "resolve_jit_compile",
    "resolve_precision",
    "set_precision",
    "set_tf32",
    "tf32_scope",
    "trainers",
    "wrap_optimizer",
]
