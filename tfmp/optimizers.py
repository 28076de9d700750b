"""The optimizer a precision needs, from a loss-scale setting.

Only `mixed_float16` has a range narrow enough to need loss scaling:
`wrap_optimizer` gives it a `tfmp.LossScaleOptimizer` and leaves every other
precision's optimizer bare, and `parse_loss_scale` reads the setting
(`"dynamic"`, `"none"` or a fixed scale, as a flag or a number). This is
TF Model Garden's `performance.configure_optimizer`, for tfmp's optimizer.
"""

from __future__ import annotations

from typing import Any

import keras

from tfmp import precision as precision_lib
from tfmp._arguments import DEFAULT_MAX_SCALE, check_positive_number
from tfmp.loss_scale import LossScaleOptimizer

__all__ = ["LOSS_SCALE_NAMES", "parse_loss_scale", "wrap_optimizer"]

LOSS_SCALE_NAMES = ("dynamic", "none")


def parse_loss_scale(loss_scale: str | float | int | None, max_scale: float = DEFAULT_MAX_SCALE) -> str | float:
    """Normalises a loss-scale setting to `"dynamic"`, `"none"` or a float.

    Args:
        loss_scale: `"dynamic"`, `"none"` (or `None`), a positive number, or a
            string holding one (as a command-line flag does, e.g. `"128"`).
        max_scale: The largest fixed scale accepted; `LossScaleOptimizer`'s
            `max_scale` (2**24 by default, see `DEFAULT_MAX_SCALE`).

    Returns:
        `"dynamic"`, `"none"`, or the fixed scale as a float.

    Raises:
        ValueError: for an unknown string, or a number outside (0, max_scale].
    """
    value = "none" if loss_scale is None else loss_scale
    if isinstance(value, str):
        value = value.strip().lower()
        if value in LOSS_SCALE_NAMES:
            return value
        try:
            value = float(value)
        except ValueError:
            raise ValueError(
                f"Unknown loss scale. Use 'dynamic', 'none' or a positive number. Received: loss_scale={loss_scale!r}"
            ) from None
    return check_positive_number("loss_scale", value, max_scale, received=loss_scale)


def wrap_optimizer(
    optimizer: keras.optimizers.Optimizer,
    precision: str,
    loss_scale: str | float | int | None = "dynamic",
    **loss_scale_kwargs: Any,
) -> keras.optimizers.Optimizer:
    """Returns the optimizer a precision needs: loss-scaled only for float16.

    Only `mixed_float16` has a range narrow enough to need loss scaling, so
    it gets a dynamic (`"dynamic"`) or fixed (a number) `LossScaleOptimizer`;
    anything else (`"none"`, bfloat16, float32) gets the bare optimizer. An
    optimizer that is already a Keras or tfmp `LossScaleOptimizer` is
    unwrapped first, so the result always matches the request. When the bare
    optimizer is returned under `mixed_float16`, compile the model with
    `auto_scale_loss=False`, or Keras 3 will wrap it again.

    Args:
        optimizer: A Keras optimizer.
        precision: A precision name or alias accepted by
            `tfmp.precision.canonical_precision` (`"hardware"` is resolved by the compute-capability rule).
        loss_scale: `"dynamic"`, `"none"`, or a positive fixed scale.
        **loss_scale_kwargs: Extra `LossScaleOptimizer` keywords
            (e.g. `hysteresis=2`).

    Returns:
        The optimizer to train with.
    """
    policy = precision_lib.resolve_precision(precision)
    loss_scale = parse_loss_scale(loss_scale, loss_scale_kwargs.get("max_scale", DEFAULT_MAX_SCALE))
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        optimizer = optimizer.inner_optimizer
    if policy != "mixed_float16" or loss_scale == "none":
        return optimizer
    fixed = {} if loss_scale == "dynamic" else {"dynamic": False, "initial_scale": loss_scale}
    return LossScaleOptimizer(optimizer, **fixed, **loss_scale_kwargs)
