"""tfmp: mixed-precision training for TensorFlow/Keras 3.

The public names most users need:

* `tfmp.set_precision`, `tfmp.precision_scope`: the global Keras dtype policy
  (`float32`, `mixed_float16`, `mixed_bfloat16`, `auto`).
* `tfmp.LossScaleOptimizer`: Keras 3's loss-scale optimizer (`scale_loss`,
  then an update that divides by the scale), with hysteresis, scale bounds
  and an exact skip of non-finite steps. tf.keras 2's class is
  `tfmp.mixed_precision.LossScaleOptimizer`.
* `tfmp.wrap_optimizer`: the optimizer a precision needs.
* `tfmp.Trainer`, `tfmp.GANTrainer`: `keras.Model`s whose `train_step` is the
  loss-scaled custom step (`tfmp.trainers`); `tfmp.Trainer` wraps any
  supervised model.
* `tfmp.undo_if_skipped`: a custom loop's step as a transaction, so that a
  skipped step also leaves BatchNorm's statistics as they were; it yields
  the step, which the update takes (`step=step`) and which keeps metric
  updates out of a skipped step (`step.unless_skipped`).
* `tfmp.LogLossScale`: the loss scale and skipped steps of every
  `tfmp.LossScaleOptimizer` a model holds, in plain `fit()`'s logs.
* `tfmp.float32_layers`: the layers that compute in float32 under a mixed
  policy (`keep_float32`), a model's float32 copy, and the check that its
  outputs stay float32 (`check_outputs`).
* `tfmp.cpu_kernels`: what this CPU's float16 and bfloat16 kernels cost,
  and the 16-bit ops computed in float32 where their kernels are slow here
  (the trainers do it by themselves).
* `tfmp.mixed_precision`: a drop-in for tf.keras 2's
  `tf.keras.mixed_precision` (`Policy`, `set_global_policy`,
  `global_policy`, `LossScaleOptimizer`).

This package is the core: it imports nothing of the run framework. Whole runs
(data, model, callbacks, TensorBoard, checkpoints) are in `tfmp.run`:
`tfmp.run.training` is their entry point, built from `tfmp.run.config` (settings),
`tfmp.run.tasks` (one Task per model) and `tfmp.run.runner` (one run). The models
are `tfmp.models`.
"""

import os as _os

from tfmp import _deprecated, cpu_kernels, float32_layers, mixed_precision, trainers
from tfmp.fit_logs import LogLossScale
from tfmp.loss_scale import LossScaleOptimizer
from tfmp.optimizers import wrap_optimizer
from tfmp.precision import PRECISIONS, precision_scope, resolve_precision, set_precision, set_tf32, tf32_scope
from tfmp.trainers import GANTrainer, Trainer
from tfmp.transaction import undo_if_skipped

__version__ = "0.2.0"

# tfmp 0.1's paths of the run framework's modules (`import tfmp.training`) are small modules in `_deprecated/`
# that alias the new ones with a DeprecationWarning (`tfmp._deprecated.MOVED_MODULES`); the package's own
# search path finds them, so importing tfmp installs no import hook and loads none of them.
__path__.append(_os.path.join(_os.path.dirname(__file__), "_deprecated"))
del _os

__all__ = [
    "GANTrainer",
    "LogLossScale",
    "LossScaleOptimizer",
    "PRECISIONS",
    "cpu_kernels",
    "float32_layers",
    "mixed_precision",
    "precision_scope",
    "resolve_precision",
    "set_precision",
    "set_tf32",
    "tf32_scope",
    "Trainer",
    "trainers",
    "undo_if_skipped",
    "wrap_optimizer",
]

# tfmp 0.1's top-level names that moved (`tfmp._deprecated.MOVED_NAMES`), each with a DeprecationWarning.
__getattr__ = _deprecated.module_getattr(__name__)
