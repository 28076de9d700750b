"""`tfmp.LossScaleOptimizer`'s argument checks, in one place.

`checked(...)` reads tf.keras 2's and Keras 3's positional forms, fills in
the defaults and refuses an impossible combination, naming what it received;
the optimizer itself (`tfmp.loss_scale`) only stores the result.
"""

from __future__ import annotations

import collections
import numbers
from typing import Any

import keras
import tensorflow as tf

__all__ = ["Arguments", "check_count", "check_positive_number", "checked"]

# LossScaleOptimizer's defaults, which tf.keras 2 and Keras 3 share.
DEFAULT_INITIAL_SCALE = 2.0**15
DEFAULT_GROWTH_STEPS = 2000
# The highest scale dynamic scaling reaches by default, and the highest fixed
# scale accepted: at 2**24, any float16 gradient above 65504 / 2**24 (about
# 0.004) already overflows, so a larger scale skips nearly every step.
DEFAULT_MAX_SCALE = 2.0**24
_FLOAT32_MAX = float(tf.float32.max)


def check_positive_number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0 or value == float("inf"):
        raise ValueError(f"`{name}` must be a finite positive number. Received: {name}={value!r}")
    return float(value)


def check_count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"`{name}` must be an integer >= 1. Received: {name}={value!r}")
    return int(value)


Arguments = collections.namedtuple(
    "Arguments",
    "dynamic initial_scale dynamic_growth_steps growth_factor backoff_factor hysteresis min_scale max_scale",
)


def checked(
    inner_optimizer: Any,
    args: tuple[Any, ...],
    dynamic: Any,
    initial_scale: Any,
    dynamic_growth_steps: Any,
    growth_factor: Any,
    backoff_factor: Any,
    hysteresis: Any,
    min_scale: Any,
    max_scale: Any,
) -> Arguments:
    """Checks `LossScaleOptimizer`'s arguments; returns them normalised, defaults filled in.

    Positional arguments after `inner_optimizer` follow tf.keras 2
    (`dynamic, initial_scale, dynamic_growth_steps`) when the first is a bool
    and Keras 3 (`initial_scale, dynamic_growth_steps`) otherwise.
    """
    names = ("dynamic", "initial_scale", "dynamic_growth_steps")
    if args and not isinstance(args[0], bool):
        names = names[1:]
    if len(args) > len(names):
        raise ValueError(
            f"LossScaleOptimizer takes at most {len(names)} positional arguments "
            f"after inner_optimizer ({', '.join(names)}). Received: {args!r}"
        )
    values = {"dynamic": dynamic, "initial_scale": initial_scale, "dynamic_growth_steps": dynamic_growth_steps}
    for arg_name, value in zip(names, args):
        if values[arg_name] is not None:
            raise ValueError(
                f"`{arg_name}` was given both positionally and by keyword. "
                f"Received: {arg_name}={value!r} and {arg_name}={values[arg_name]!r}"
            )
        values[arg_name] = value
    dynamic, initial_scale, dynamic_growth_steps = values.values()
    if not isinstance(inner_optimizer, keras.optimizers.Optimizer):
        raise ValueError(
            f"`inner_optimizer` must be a keras.optimizers.Optimizer. Received: inner_optimizer={inner_optimizer!r}"
        )
    if isinstance(inner_optimizer, keras.optimizers.LossScaleOptimizer):
        raise ValueError(
            "`inner_optimizer` is already a LossScaleOptimizer; wrapping it again would scale the loss twice. "
            f"Pass its `inner_optimizer` instead. Received: inner_optimizer={inner_optimizer.name!r}"
        )
    dynamic = True if dynamic is None else dynamic
    if not isinstance(dynamic, bool):
        raise ValueError(f"`dynamic` must be a bool. Received: dynamic={dynamic!r}")
    if initial_scale is None and not dynamic:
        raise ValueError(
            "A fixed loss scale needs a value: pass `initial_scale` with `dynamic=False`. "
            "Received: dynamic=False, initial_scale=None"
        )
    initial_scale = check_positive_number(
        "initial_scale", DEFAULT_INITIAL_SCALE if initial_scale is None else initial_scale
    )
    dynamic_growth_steps = check_count(
        "dynamic_growth_steps", DEFAULT_GROWTH_STEPS if dynamic_growth_steps is None else dynamic_growth_steps
    )
    growth_factor = check_positive_number("growth_factor", growth_factor)
    if not growth_factor > 1:
        raise ValueError(f"`growth_factor` must be > 1. Received: growth_factor={growth_factor!r}")
    backoff_factor = check_positive_number("backoff_factor", backoff_factor)
    if not backoff_factor < 1:
        raise ValueError(f"`backoff_factor` must be in (0, 1). Received: backoff_factor={backoff_factor!r}")
    hysteresis = check_count("hysteresis", hysteresis)
    min_scale = check_positive_number("min_scale", min_scale)
    max_scale = check_positive_number("max_scale", max_scale)
    if min_scale > max_scale:
        raise ValueError(
            f"`min_scale` must not exceed `max_scale`. Received: min_scale={min_scale!r}, max_scale={max_scale!r}"
        )
    if max_scale > _FLOAT32_MAX:
        raise ValueError(
            f"`max_scale` must be representable in float32 (at most {_FLOAT32_MAX:g}). "
            f"Received: max_scale={max_scale!r}"
        )
    if not dynamic and initial_scale > max_scale:
        raise ValueError(
            f"A fixed `initial_scale` must not exceed `max_scale` = {max_scale!r}; raise `max_scale` if you "
            f"really mean it. Received: initial_scale={initial_scale!r}"
        )
    if dynamic and not min_scale <= initial_scale <= max_scale:
        raise ValueError(
            f"A dynamic `initial_scale` must lie within [min_scale, max_scale] = [{min_scale!r}, {max_scale!r}]. "
            f"Received: initial_scale={initial_scale!r}"
        )
    return Arguments(
        dynamic, initial_scale, dynamic_growth_steps, growth_factor, backoff_factor, hysteresis, min_scale, max_scale
    )
