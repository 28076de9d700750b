"""tf.keras 2's `LossScaleOptimizer` on Keras 3: the class `tfmp.mixed_precision` exports.

tf.keras 2's custom loop scales the loss with `get_scaled_loss`, unscales
the gradients with `get_unscaled_gradients`, and `apply_gradients` applies
what it is given. Keras 3's `apply` divides the gradients of a `scale_loss`
result instead. One class cannot keep both contracts without guessing which
gradients it was handed, so each class keeps one: `tfmp.LossScaleOptimizer`
divides, this one applies as given and refuses `scale_loss`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf

from tfmp import loss_scale
from tfmp.scaling import map_gradients, scale_loss
from tfmp.transaction import Step

__all__ = ["LossScaleOptimizer", "tf_keras2_warning"]

_TF_KERAS2_EXAMPLE = (  # tf.keras 2's example, line for line
    "\n    with tf.GradientTape() as tape:\n      loss = loss_fn()\n      scaled_loss = opt.get_scaled_loss(loss)"
    "\n    scaled_grads = tape.gradient(scaled_loss, vars)\n    grads = opt.get_unscaled_gradients(scaled_grads)"
    "\n    opt.apply_gradients([(grads, var)])"
)


def tf_keras2_warning(loss_has_been_scaled: bool, gradients_have_been_unscaled: bool) -> str | None:
    """Returns the warning tf.keras 2's `apply_gradients` logged, or None.

    The text of `_maybe_warn_about_scaling` in
    tf_keras/src/mixed_precision/loss_scale_optimizer.py (tf_keras 2.21),
    character for character. As there, the flags say whether
    `get_scaled_loss` / `get_unscaled_gradients` were *ever* called on the
    optimizer.
    """
    if loss_has_been_scaled and gradients_have_been_unscaled:
        return None
    scaled, unscaled = "get_scaled_loss()", "get_unscaled_gradients()"
    if not (loss_has_been_scaled or gradients_have_been_unscaled):
        forgot, called, fix = f"{scaled} and LossScaleOptimizer.{unscaled}", "", "them in the correct places"
    else:
        did, forgot = (scaled, unscaled) if loss_has_been_scaled else (unscaled, scaled)
        called, fix = f" (you did call {did} however)", f"{forgot} in the correct place"
    return (
        f"You forgot to call LossScaleOptimizer.{forgot} before calling LossScaleOptimizer.apply_gradients(){called}. "
        f"This will likely result in worse model quality, so please call {fix}! For example:{_TF_KERAS2_EXAMPLE}\n"
        "For more information, see https://www.tensorflow.org/api_docs/python/tf/tf_keras/mixed_precision/LossScaleOptimizer"
    )


@keras.saving.register_keras_serializable(package="tfmp", name="TFKeras2LossScaleOptimizer")
class LossScaleOptimizer(loss_scale.LossScaleOptimizer):
    """tf.keras 2's loss-scale optimizer: `get_scaled_loss`, `get_unscaled_gradients`, `apply_gradients`.

    tf.keras 2 code runs on it after one changed import,
    `from tfmp import mixed_precision`. Its arguments, state, skip of
    non-finite steps and settings are `tfmp.LossScaleOptimizer`'s; what
    differs is the contract of its update: `apply_gradients` (and `apply`)
    apply the gradients as given, as tf.keras 2's did, so the step unscales
    them itself. It warns as tf.keras 2 did when a step forgets one of the
    two calls. `scale_loss`, Keras 3's call, raises: its gradients would be
    applied scaled. Keras's own `fit()` calls `scale_loss`; compile a model
    that `fit()` trains with `tfmp.LossScaleOptimizer`.

    ```python
    from tfmp import mixed_precision

    opt = mixed_precision.LossScaleOptimizer(keras.optimizers.Adam())
    with tf.GradientTape() as tape:
        scaled_loss = opt.get_scaled_loss(loss_fn(y, model(x, training=True)))
    grads = opt.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
    opt.apply_gradients(zip(grads, model.trainable_variables))
    ```
    """

    _DIVIDES = False

    # tf.keras 2's flags: whether get_scaled_loss / get_unscaled_gradients were ever called (its warning only).
    loss_has_been_scaled = gradients_have_been_unscaled = False

    def scale_loss(self, loss: Any) -> tf.Tensor:
        """Raises `TypeError`: Keras 3's call, whose gradients this class would apply scaled."""
        raise TypeError(
            f"LossScaleOptimizer {self.name!r} is tf.keras 2's class: its apply_gradients() applies gradients as "
            "given, so those of a scale_loss() result (Keras 3's API) would be applied the loss scale times too large. "
            "Use get_scaled_loss() and get_unscaled_gradients(), as tf.keras 2 does, or construct "
            "tfmp.LossScaleOptimizer, Keras 3's class, for scale_loss() and Keras's own fit(). Received: scale_loss()"
        )

    def get_scaled_loss(self, loss: Any) -> Any:
        """Scales `loss` by the loss scale; the step then unscales its gradients with `get_unscaled_gradients`.

        A 16-bit loss is scaled in float32 (the gradients are tf.keras 2's;
        only the returned value cannot overflow).

        Args:
            loss: A loss tensor, or a zero-argument callable returning one.

        Returns:
            The scaled loss, or a callable returning it if `loss` was callable.
        """
        self.loss_has_been_scaled = True
        scaled = lambda: scale_loss(loss(), self._scale_or_none)  # noqa: E731
        return scaled if callable(loss) else scale_loss(loss, self._scale_or_none)

    def get_unscaled_gradients(self, grads: Sequence[Any]) -> list[Any]:
        """Multiplies gradients by 1 / loss scale, as tf.keras 2 did.

        Multiplying by the float32 reciprocal rather than dividing gives
        tf.keras 2's bits for any scale (for a power of two both agree).

        Args:
            grads: A list of gradients of the scaled loss; `None` entries pass through.

        Returns:
            The list of unscaled gradients.
        """
        self.gradients_have_been_unscaled = True
        if self._scale_or_none is None:  # the fixed scale 1: as given, at no cost
            return list(grads)
        reciprocal = 1.0 / tf.convert_to_tensor(self.dynamic_scale)
        return map_gradients(list(grads), lambda x: x * tf.cast(reciprocal, x.dtype))

    def apply(
        self, grads: Sequence[Any], trainable_variables: Sequence[Any] | None = None, step: Step | None = None
    ) -> None:
        """Applies the gradients as given, unless one is non-finite; updates the scale.

        Raises:
            ValueError: for a variable with `overwrite_with_gradient` (Keras's
                float8 scaling factors): `get_unscaled_gradients` would have
                divided the new value it carries. Keras 3's flow keeps it.
        """
        if message := tf_keras2_warning(self.loss_has_been_scaled, self.gradients_have_been_unscaled):
            tf.get_logger().warning(message)
        super().apply(grads, trainable_variables, step)
