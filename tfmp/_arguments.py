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

__all__ = ["OWN_SETTINGS", "Arguments", "check_positive_number", "checked"]

# LossScaleOptimizer's defaults, which tf.keras 2 and Keras 3 share.
DEFAULT_INITIAL_SCALE = 2.0**15
DEFAULT_GROWTH_STEPS = 2000
# The highest scale dynamic scaling reaches by default, and the highest fixed
# scale accepted: at 2**24, any float16 gradient above 65504 / 2**24 (about
# 0.004) already overflows, so a larger scale skips nearly every step.
DEFAULT_MAX_SCALE = 2.0**24
_FLOAT32_MAX = 3.4028234663852886e38  # float(tf.float32.max): the loss scale is a float32


def _require(ok: bool, name: str, value: Any, problem: str, **others: Any) -> None:
    """Unless `ok`, raises ValueError: "`name` problem. Received: name=value, other=value, ..."."""
    if not ok:
        received = ", ".join(f"{key}={item!r}" for key, item in {name: value, **others}.items())
        raise ValueError(f"`{name}` {problem}. Received: {received}")


def check_positive_number(name: str, value: Any, max_scale: float | None = None, received: Any = None) -> float:
    """`value` as a float, if it is a positive number that float32 (the loss scale's dtype) holds; else ValueError.

    Given `max_scale`, `value` is a loss scale and the bound is `max_scale`
    instead, which the message explains. The message names `received` when
    given (the string `parse_loss_scale` parsed), else `value`.
    """
    high = _FLOAT32_MAX if max_scale is None else max_scale
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value <= high:
        bound, why = "float32's range", ""
        if max_scale is not None:
            bound = "2**24" if max_scale == DEFAULT_MAX_SCALE else f"max_scale={max_scale!r}"
            why = (
                f": the largest scale dynamic loss scaling reaches (`max_scale`). At {high:.9g}, any float16 gradient "
                f"above 65504 / {high:.9g} already overflows, so a larger scale would skip nearly every step"
            )
        received = value if received is None else received
        raise ValueError(f"`{name}` must be a number in (0, {high:.9g}] ({bound}){why}. Received: {name}={received!r}")
    return float(value)


# tfmp's settings beyond Keras 3's `initial_scale` and `dynamic_growth_steps`.
OWN_SETTINGS = ("dynamic", "growth_factor", "backoff_factor", "hysteresis", "min_scale", "max_scale")
Arguments = collections.namedtuple("Arguments", ("initial_scale", "dynamic_growth_steps", *OWN_SETTINGS, "xla_update"))


def checked(optimizer: Any, args: tuple[Any, ...], dynamic: Any, initial_scale: Any, *rest: Any) -> Arguments:
    """Checks `LossScaleOptimizer`'s arguments; returns them normalised, defaults filled in.

    `optimizer` is `inner_optimizer`; `rest` is `dynamic_growth_steps,
    growth_factor, backoff_factor, hysteresis, min_scale, max_scale, xla_update`.
    Positional arguments after `inner_optimizer` follow tf.keras 2
    (`dynamic, initial_scale, dynamic_growth_steps`) when the first is a bool
    and Keras 3 (`initial_scale, dynamic_growth_steps`) otherwise.
    """
    given = {"dynamic": dynamic, "initial_scale": initial_scale, "dynamic_growth_steps": rest[0]}
    names = list(given)[0 if args and isinstance(args[0], bool) else 1 :]
    _require(len(args) <= len(names), "args", args, f"after inner_optimizer may only be {', '.join(names)}")
    for name, value in zip(names, args):
        _require(given[name] is None, name, value, f"was also given by keyword ({name}={given[name]!r}): pass it once")
        given[name] = value
    (dynamic, initial_scale, growth_steps), (growth, backoff, hysteresis, low, high, xla_update) = (
        given.values(),
        rest[1:],
    )
    is_optimizer = isinstance(optimizer, keras.optimizers.Optimizer)
    _require(is_optimizer, "inner_optimizer", optimizer, "must be a keras.optimizers.Optimizer")
    twice = "is already a LossScaleOptimizer; wrapping it again would scale the loss twice. Pass its `inner_optimizer`"
    wrapped = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    _require(not wrapped, "inner_optimizer", getattr(optimizer, "name", optimizer), f"{twice} instead")
    dynamic = True if dynamic is None else dynamic
    _require(isinstance(dynamic, bool), "dynamic", dynamic, "must be a bool")
    _require(initial_scale is not None or dynamic, "initial_scale", None, "is needed for a fixed scale", dynamic=False)
    growth_steps = DEFAULT_GROWTH_STEPS if growth_steps is None else growth_steps
    for name, count in (("dynamic_growth_steps", growth_steps), ("hysteresis", hysteresis)):
        is_count = isinstance(count, numbers.Integral) and not isinstance(count, bool) and count >= 1
        _require(is_count, name, count, "must be an integer >= 1")
    growth, backoff = check_positive_number("growth_factor", growth), check_positive_number("backoff_factor", backoff)
    _require(growth > 1, "growth_factor", growth, "must be > 1")
    _require(backoff < 1, "backoff_factor", backoff, "must be in (0, 1)")
    low, high = check_positive_number("min_scale", low), check_positive_number("max_scale", high)
    _require(low <= high, "min_scale", low, "must not exceed `max_scale`", max_scale=high)
    scale = DEFAULT_INITIAL_SCALE if initial_scale is None else initial_scale
    scale = check_positive_number("initial_scale", scale, max_scale=high)
    _require(scale >= low or not dynamic, "initial_scale", scale, "must be >= `min_scale` when dynamic", min_scale=low)
    valid_xla_update = xla_update is True or xla_update is False or xla_update == "auto"
    _require(valid_xla_update, "xla_update", xla_update, 'must be True, False or "auto"')
    return Arguments(scale, int(growth_steps), dynamic, growth, backoff, int(hysteresis), low, high, xla_update)
