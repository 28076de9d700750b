"""The optimizer a precision needs, from a loss-scale setting.

Only `mixed_float16` has a range narrow enough to need loss scaling:
`wrap_optimizer` gives it a `tfmp.LossScaleOptimizer`, and every other
precision one that only skips non-finite steps; `parse_loss_scale` reads the setting
(`"dynamic"`, `"none"` or a fixed scale, as a flag or a number). This is
TF Model Garden's `performance.configure_optimizer`, for tfmp's optimizer.
"""

from __future__ import annotations

from typing import Any

import keras

from tfmp import precision as precision_lib
from tfmp._arguments import DEFAULT_MAX_SCALE, OWN_SETTINGS, check_positive_number
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
    skip_nonfinite: bool = True,
    **loss_scale_kwargs: Any,
) -> keras.optimizers.Optimizer:
    """Returns the optimizer a precision needs: loss-scaled for float16, skipping non-finite steps in every precision.

    Only `mixed_float16` has a range narrow enough to need loss scaling: it
    gets a dynamic (`"dynamic"`) or fixed (a number) `LossScaleOptimizer`.
    Every other precision, and `loss_scale="none"`, gets one at the fixed
    scale 1, which multiplies nothing and skips (and counts) a step with a
    non-finite gradient instead of writing NaN into the weights, as tfmp's
    trainers do; `skip_nonfinite=False` gives the bare optimizer there
    (compile the model with `auto_scale_loss=False` under `mixed_float16`,
    or Keras wraps it again). A loss-scale optimizer handed in is
    unwrapped, and its settings (`hysteresis`, `max_scale`, `xla_update`,
    ...; of a Keras one, `initial_scale` and `dynamic_growth_steps`) carry
    over, so the result matches the request and keeps what was asked for
    before; `loss_scale_kwargs` override them.

    Args:
        optimizer: A Keras optimizer.
        precision: A precision name or alias accepted by
            `tfmp.precision.canonical_precision` (`"hardware"` is resolved by the compute-capability rule).
        loss_scale: `"dynamic"`, `"none"`, or a positive fixed scale.
        skip_nonfinite: Whether an optimizer that is not loss-scaled still skips non-finite steps.
        **loss_scale_kwargs: Extra `LossScaleOptimizer` keywords
            (e.g. `hysteresis=2`).

    Returns:
        The optimizer to train with.
    """
    settings = {**_settings(optimizer), **loss_scale_kwargs}
    loss_scale = parse_loss_scale(loss_scale, settings.get("max_scale", DEFAULT_MAX_SCALE))
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)  # a loss-scale optimizer's
    if precision_lib.resolve_precision(precision) != "mixed_float16" or loss_scale == "none":
        if not skip_nonfinite:
            return optimizer
        loss_scale = 1.0  # the skip's fixed scale
    fixed = {} if loss_scale == "dynamic" else {"dynamic": False, "initial_scale": loss_scale}
    return LossScaleOptimizer(optimizer, **{**settings, **fixed})


def _settings(optimizer: keras.optimizers.Optimizer) -> dict[str, Any]:
    """The settings of a loss-scale optimizer (tfmp's, or Keras's two) that `wrap_optimizer` carries over."""
    dynamic = getattr(optimizer, "dynamic", True)  # a fixed scale's initial_scale is no setting to carry
    names = ("dynamic_growth_steps", "xla_update", *OWN_SETTINGS[1:], *["initial_scale"] * dynamic)
    is_loss_scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    return {name: getattr(optimizer, name) for name in names if is_loss_scaled and hasattr(optimizer, name)}
