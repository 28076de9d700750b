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

__all__ = ["Arguments", "check_count", "check_positive_number", "check_xla_update", "checked"]

# LossScaleOptimizer's defaults, which tf.keras 2 and Keras 3 share.
DEFAULT_INITIAL_SCALE = 2.0**15
DEFAULT_GROWTH_STEPS = 2000
# The highest scale dynamic scaling reaches by default, and the highest fixed
# scale accepted: at 2**24, any float16 gradient above 65504 / 2**24 (about
# 0.004) already overflows, so a larger scale skips nearly every step.
DEFAULT_MAX_SCALE = 2.0**24
_FLOAT32_MAX = float(tf.float32.max)


def check_positive_number(name: str, value: Any) -> float:
    """`value` as a float, if it is a positive number that float32 (the loss scale's dtype) holds; else ValueError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value <= _FLOAT32_MAX:
        raise ValueError(
            f"`{name}` must be a positive number within float32's range (at most {_FLOAT32_MAX:g}). "
            f"Received: {name}={value!r}"
        )
    return float(value)


def check_count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"`{name}` must be an integer >= 1. Received: {name}={value!r}")
    return int(value)


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


Arguments = collections.namedtuple(
    "Arguments",
    "dynamic initial_scale dynamic_growth_steps growth_factor backoff_factor hysteresis min_scale max_scale",
)


def checked(inner_optimizer: Any, args: tuple[Any, ...], dynamic: Any, initial_scale: Any, *rest: Any) -> Arguments:
    """Checks `LossScaleOptimizer`'s arguments; returns them normalised, defaults filled in.

    `rest` is `dynamic_growth_steps, growth_factor, backoff_factor,
    hysteresis, min_scale, max_scale`. Positional arguments after
    `inner_optimizer` follow tf.keras 2 (`dynamic, initial_scale,
    dynamic_growth_steps`) when the first is a bool and Keras 3
    (`initial_scale, dynamic_growth_steps`) otherwise.
    """
    names = ("dynamic", "initial_scale", "dynamic_growth_steps")[0 if args and isinstance(args[0], bool) else 1 :]
    _require(
        len(args) <= len(names),
        f"LossScaleOptimizer takes at most {len(names)} positional arguments "
        f"after inner_optimizer ({', '.join(names)}). Received: {args!r}",
    )
    values = dict(zip(("dynamic", "initial_scale", "dynamic_growth_steps"), (dynamic, initial_scale, rest[0])))
    for name, value in zip(names, args):
        _require(
            values[name] is None,
            f"`{name}` was given both positionally and by keyword. "
            f"Received: {name}={value!r} and {name}={values[name]!r}",
        )
        values[name] = value
    (dynamic, initial_scale, growth_steps), (growth, backoff, hysteresis, low, high) = values.values(), rest[1:]
    _require(
        isinstance(inner_optimizer, keras.optimizers.Optimizer),
        f"`inner_optimizer` must be a keras.optimizers.Optimizer. Received: inner_optimizer={inner_optimizer!r}",
    )
    _require(
        not isinstance(inner_optimizer, keras.optimizers.LossScaleOptimizer),
        "`inner_optimizer` is already a LossScaleOptimizer; wrapping it again would scale the loss twice. "
        f"Pass its `inner_optimizer` instead. Received: inner_optimizer={getattr(inner_optimizer, 'name', None)!r}",
    )
    dynamic = True if dynamic is None else dynamic
    _require(isinstance(dynamic, bool), f"`dynamic` must be a bool. Received: dynamic={dynamic!r}")
    _require(
        initial_scale is not None or dynamic,
        "A fixed loss scale needs a value: pass `initial_scale` with `dynamic=False`. "
        "Received: dynamic=False, initial_scale=None",
    )
    scale = check_positive_number("initial_scale", DEFAULT_INITIAL_SCALE if initial_scale is None else initial_scale)
    growth_steps = check_count("dynamic_growth_steps", DEFAULT_GROWTH_STEPS if growth_steps is None else growth_steps)
    growth, backoff = check_positive_number("growth_factor", growth), check_positive_number("backoff_factor", backoff)
    _require(growth > 1, f"`growth_factor` must be > 1. Received: growth_factor={growth!r}")
    _require(backoff < 1, f"`backoff_factor` must be in (0, 1). Received: backoff_factor={backoff!r}")
    hysteresis = check_count("hysteresis", hysteresis)
    low, high = check_positive_number("min_scale", low), check_positive_number("max_scale", high)
    _require(low <= high, f"`min_scale` must not exceed `max_scale`. Received: min_scale={low!r}, max_scale={high!r}")
    _require(
        scale <= high and (low <= scale or not dynamic),
        f"`initial_scale` must not exceed `max_scale` = {high!r} (raise `max_scale` if you really mean it), nor, "
        f"for a dynamic scale, lie below `min_scale` = {low!r}. Received: initial_scale={scale!r}",
    )
    return Arguments(dynamic, scale, growth_steps, growth, backoff, hysteresis, low, high)


def check_xla_update(xla_update: Any) -> bool | str:
    if xla_update is True or xla_update is False or xla_update == "auto":
        return xla_update
    raise ValueError(f'`xla_update` must be True, False or "auto". Received: xla_update={xla_update!r}')
