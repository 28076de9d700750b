"""Trainers: `keras.Model`s whose `train_step` is the mixed-precision step.

One concept per module: `base` (`MixedPrecisionTrainer`, `Objective`,
`prepare_optimizer`), `classifier` (`ClassifierTrainer`) and `gan`
(`GANTrainer`, the seed GAN's settings `SEED_GAN`, `discriminator_labels`).

`ClassifierTrainer` and `GANTrainer` override `train_step` with the custom
loop of the seed tutorials, so `fit()`, callbacks, the progress bar and
`evaluate()` all work as in Keras. The step is pure model math; everything
precision-specific lives once, in `MixedPrecisionTrainer.optimize`:

```python
with tf.GradientTape() as tape:
    loss = forward()
    scaled_loss = optimizer.get_scaled_loss(loss)    # float16 only
grads = tape.gradient(scaled_loss, variables)
grads = optimizer.get_unscaled_gradients(grads)      # float16 only
optimizer.apply_gradients(zip(grads, variables))
```

With float32, bfloat16 or `loss_scale="none"` the optimizer is a plain Keras
optimizer and the two scaling lines are skipped. `compile()` decides which:
it wraps the optimizer in `tfmp.LossScaleOptimizer` when the model computes
in float16 (as Keras 3's `compile()` does), honouring `loss_scale`.

`MixedPrecisionTrainer.make_train_function` runs the step on one device as
one `tf.function` that draws the batch and calls `train_step`; under a
strategy, with XLA (`jit_compile=True`), eagerly or with several steps per
execution it is Keras's. Side effects (console lines, TensorBoard, sample
images) belong in `tfmp.run.callbacks`.
"""

from tfmp.trainers.base import MixedPrecisionTrainer, Objective, computes_in_float16, prepare_optimizer
from tfmp.trainers.classifier import ClassifierTrainer
from tfmp.trainers.gan import SEED_GAN, GANTrainer, SeedGANTraining, discriminator_labels

__all__ = [
    "ClassifierTrainer",
    "GANTrainer",
    "MixedPrecisionTrainer",
    "Objective",
    "SEED_GAN",
    "SeedGANTraining",
    "computes_in_float16",
    "discriminator_labels",
    "prepare_optimizer",
]
