"""Trainers: `keras.Model`s whose `train_step` is the mixed-precision step.

One concept per module: `base` (`MixedPrecisionTrainer`, `Objective`,
`prepare_optimizer`), `supervised` (`Trainer`, any supervised model) and `gan`
(`GANTrainer`, the original tutorial's GAN settings `TUTORIAL_GAN`,
`discriminator_labels`).

`Trainer` and `GANTrainer` override `train_step` with the custom loop of the
tf.keras 2 tutorials, so `fit()`, callbacks, the progress bar and
`evaluate()` all work as in Keras. The step is pure model math; everything
precision-specific lives once, in `MixedPrecisionTrainer.optimize`:

```python
step = tfmp.transaction.Step(optimizer)                  # a LossScaleOptimizer only
step.keep(forward_pass_state)                            # BatchNorm statistics
with tf.GradientTape() as tape:
    loss = forward()                                     # metrics: unless_skipped
    scaled_loss = optimizer.get_scaled_loss(loss)        # float16 only
grads = tape.gradient(scaled_loss, variables)
grads = optimizer.get_unscaled_gradients(grads)          # float16 only
optimizer.apply_gradients(zip(grads, variables), step=step)
```

With float32, bfloat16 or `loss_scale="none"` the optimizer is a plain Keras
optimizer and the two scaling lines are skipped. `compile()` decides which:
it wraps the optimizer in `tfmp.LossScaleOptimizer` when the model computes
in float16 (as Keras 3's `compile()` does), honouring `loss_scale`. Side
effects (console lines, TensorBoard, sample images) belong in callbacks.
"""

from tfmp import _deprecated
from tfmp.trainers.base import MixedPrecisionTrainer, Objective, computes_in_float16, prepare_optimizer
from tfmp.trainers.gan import TUTORIAL_GAN, GANTrainer, TutorialGANTraining, discriminator_labels
from tfmp.trainers.supervised import Trainer

__all__ = [
    "GANTrainer",
    "MixedPrecisionTrainer",
    "Objective",
    "TUTORIAL_GAN",
    "Trainer",
    "TutorialGANTraining",
    "computes_in_float16",
    "discriminator_labels",
    "prepare_optimizer",
]


# tfmp 0.1's names (`ClassifierTrainer`, `SEED_GAN`, `SeedGANTraining`), each with a DeprecationWarning.
__getattr__ = _deprecated.module_getattr(__name__)
