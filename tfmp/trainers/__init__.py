"""Trainers: `keras.Model`s whose `train_step` is the mixed-precision step.

One concept per module: `base` (`MixedPrecisionTrainer`, `Objective`,
`prepare_optimizer`), `supervised` (`Trainer`, any supervised model) and `gan`
(`GANTrainer`, the original tutorial's GAN settings `TUTORIAL_GAN`,
`discriminator_labels`).

`Trainer` and `GANTrainer` override `train_step` with a loss-scaled custom
step, so `fit()`, callbacks, the progress bar and `evaluate()` all work as in
Keras. The step is pure model math; everything precision-specific lives
once, in `MixedPrecisionTrainer.optimize`, Keras 3's flow with a `Step`:

```python
step = tfmp.transaction.Step(optimizer)
step.keep(forward_pass_state)                            # BatchNorm statistics
with tf.GradientTape() as tape:
    loss = forward(step)                                 # metrics: step.unless_skipped
    scaled_loss = optimizer.scale_loss(loss)             # the loss itself if not loss-scaled
grads = tape.gradient(scaled_loss, variables)
optimizer.apply(grads, variables, step=step)             # divides by the scale; skips a non-finite step
```

`compile()` picks the optimizer (`prepare_optimizer`): a
`tfmp.LossScaleOptimizer` when the model computes in float16 (as Keras 3's
`compile()` does), honouring `loss_scale`, and in every other precision one
at the fixed scale 1 that skips non-finite steps (`skip_nonfinite=False`:
the bare optimizer). Side effects (console lines, TensorBoard, sample images)
belong in callbacks.
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
