"""Loss scaling for float16 training: `tfmp.LossScaleOptimizer`.

All of tfmp's loss-scale arithmetic lives in this module:

* `next_loss_scale` is the pure state transition (growth, backoff,
  hysteresis, bounds) applied once per step;
* `LossScaleOptimizer` wraps a Keras optimizer, scales the loss, unscales the
  gradients (as tf.keras 2 or as Keras 3 did, following the API a step
  used), skips non-finite steps and keeps the state in tracked variables;
* `wrap_optimizer` decides whether a precision needs loss scaling at all.

The optimizer is a subclass of Keras 3's `keras.optimizers.LossScaleOptimizer`,
so `Model.compile()` accepts it as is (Keras does not wrap it a second time)
and `Model.fit()` drives it through `scale_loss` and `apply_gradients`. On top
of Keras it restores the tf.keras 2 custom-loop API (`get_scaled_loss`,
`get_unscaled_gradients`, `dynamic=False`), and adds hysteresis, scale bounds,
a skipped-step counter and a finite check that all replicas agree on.
"""

from __future__ import annotations

import numbers
import os
import sys
import threading
import warnings
import weakref
from typing import Any, Callable, Iterable, NamedTuple, Sequence

import keras
import tensorflow as tf

from tfmp import _compat
from tfmp import precision as precision_lib

__all__ = [
    "LossScaleOptimizer",
    "LossScaleState",
    "next_loss_scale",
    "parse_loss_scale",
    "wrap_optimizer",
]

DEFAULT_INITIAL_SCALE = 2.0**15
DEFAULT_GROWTH_STEPS = 2000
# The highest scale dynamic scaling reaches by default, and the highest fixed
# scale accepted: at 2**24, any float16 gradient above 65504 / 2**24 (about
# 0.004) already overflows, so a larger scale skips nearly every step.
DEFAULT_MAX_SCALE = 2.0**24
_FLOAT32_MAX = float(tf.float32.max)
LOSS_SCALE_NAMES = ("dynamic", "none")


class LossScaleState(NamedTuple):
    """The part of the loss-scale state that changes from step to step.

    Attributes:
        scale: float32 scalar, the current loss scale.
        growth_count: int64 scalar, finite steps since the scale last changed
            upwards or since the last overflow.
        hysteresis_left: int64 scalar, overflows still tolerated (skipped
            without lowering the scale) before the scale backs off.
    """

    scale: tf.Tensor
    growth_count: tf.Tensor
    hysteresis_left: tf.Tensor


def next_loss_scale(
    state: LossScaleState,
    finite: tf.Tensor,
    *,
    dynamic: bool,
    growth_steps: int,
    growth_factor: float,
    backoff_factor: float,
    hysteresis: int,
    min_scale: float,
    max_scale: float,
) -> LossScaleState:
    """Returns the loss-scale state after one step.

    The rule, per step:

    * finite gradients: count the step; after `growth_steps` finite steps in a
      row, multiply the scale by `growth_factor` (capped at `max_scale`),
      restart the count and refill the hysteresis budget;
    * non-finite gradients: restart the count; while more than one unit of
      hysteresis is left, spend one and keep the scale (DeepSpeed's
      `hysteresis`); otherwise multiply the scale by `backoff_factor`
      (floored at `min_scale`).

    A fixed scale (`dynamic=False`) never changes. The function is branch-free
    so that it runs unchanged eagerly, in `tf.function` and under XLA.

    Args:
        state: The state before the step.
        finite: bool scalar, whether every gradient of the step was finite.
        dynamic: Whether the scale adapts at all.
        growth_steps: Finite steps between two growths.
        growth_factor: Multiplier on growth, > 1.
        backoff_factor: Multiplier on backoff, in (0, 1).
        hysteresis: Overflows, counted since the last growth, before the scale
            backs off; 1 backs off on every overflow.
        min_scale: Lower bound of the scale.
        max_scale: Upper bound of the scale.

    Returns:
        The new `LossScaleState`.
    """
    if not dynamic:
        return state
    scale, count, hyst = state
    count = tf.where(finite, count + 1, tf.zeros_like(count))
    grow = tf.logical_and(finite, count >= growth_steps)
    overflow = tf.logical_not(finite)
    back_off = tf.logical_and(overflow, hyst <= 1)
    grown = tf.minimum(scale * growth_factor, max_scale)
    lowered = tf.maximum(scale * backoff_factor, min_scale)
    scale = tf.where(grow, grown, tf.where(back_off, lowered, scale))
    count = tf.where(grow, tf.zeros_like(count), count)
    refill = tf.constant(hysteresis, dtype=hyst.dtype)
    spend = tf.logical_and(overflow, hyst > 1)
    hyst = tf.where(grow, refill, tf.where(spend, hyst - 1, hyst))
    return LossScaleState(scale, count, hyst)


def all_finite(grads: Iterable[Any]) -> tf.Tensor:
    """Returns a bool scalar: True when every gradient value is finite.

    `None` entries are ignored and `tf.IndexedSlices` are checked through
    their values.
    """
    checks = []
    for g in grads:
        if g is None:
            continue
        if isinstance(g, tf.IndexedSlices):
            g = g.values
        checks.append(tf.reduce_all(tf.math.is_finite(g)))
    if not checks:
        return tf.constant(True)
    return tf.reduce_all(tf.stack(checks))


def _map_gradients(grads: Sequence[Any], fn: Callable[[tf.Tensor], tf.Tensor], keep: Sequence[bool] = ()) -> list[Any]:
    """Applies `fn` to each gradient's values.

    `None` entries pass through, `tf.IndexedSlices` keep their indices, and
    entries whose `keep` flag is set (gradients of variables with
    `overwrite_with_gradient`, which carry a new value rather than a
    gradient) are returned unchanged.
    """
    keep = list(keep) + [False] * (len(grads) - len(keep))
    out = []
    for g, kept in zip(grads, keep):
        if g is None or kept:
            out.append(g)
        elif isinstance(g, tf.IndexedSlices):
            out.append(tf.IndexedSlices(fn(g.values), g.indices, g.dense_shape))
        else:
            out.append(fn(tf.convert_to_tensor(g)))
    return out


def _divide_gradients(grads: Sequence[Any], scale: tf.Tensor, keep: Sequence[bool] = ()) -> list[Any]:
    """Divides gradients by `scale`, as Keras 3's `apply` unscales them (see `_map_gradients`)."""
    return _map_gradients(grads, lambda x: _divide(x, scale), keep)


def _divide(x: tf.Tensor, scale: tf.Tensor) -> tf.Tensor:
    # A 16-bit gradient is divided in float32: a scale above 65504 (float16's
    # max) would otherwise turn into inf and every gradient into zero.
    if x.dtype in (tf.float16, tf.bfloat16):
        return tf.cast(tf.cast(x, tf.float32) / scale, x.dtype)
    return x / tf.cast(scale, x.dtype)


def _multiply_gradients(grads: Sequence[Any], factor: tf.Tensor) -> list[Any]:
    """Multiplies gradients by `factor`, as tf.keras 2's `get_unscaled_gradients`.

    tf.keras 2 multiplies by the float32 reciprocal of the scale rather than
    dividing; for a power-of-two scale the two are the same bits, for any
    other scale only the product matches tf.keras 2 bit for bit.
    """
    return _map_gradients(grads, lambda x: _multiply(x, factor))


def _multiply(x: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
    # In float32 for 16-bit gradients, where tf.keras 2 cast the reciprocal
    # to float16 (1/2**25 and below flush to zero there). For a power-of-two
    # scale up to 2**24, whose reciprocal float16 holds exactly, both round
    # the same exact product once: the same bits.
    if x.dtype in (tf.float16, tf.bfloat16):
        return tf.cast(tf.cast(x, tf.float32) * factor, x.dtype)
    return x * tf.cast(factor, x.dtype)


def _scale(loss: tf.Tensor, scale: tf.Tensor) -> tf.Tensor:
    # A 16-bit loss is scaled in float32: a float16 loss of 2.0 times 2**15
    # would overflow the forward value itself and force a needless skip.
    if loss.dtype in (tf.float16, tf.bfloat16):
        loss = tf.cast(loss, tf.float32)
    return loss * tf.cast(scale, loss.dtype)


def _check_positive_number(name: str, value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not value > 0
        or value == float("inf")
    ):
        raise ValueError(
            f"`{name}` must be a finite positive number. Received: "
            f"{name}={value!r}"
        )
    return float(value)


def _check_count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"`{name}` must be an integer >= 1. Received: {name}={value!r}")
    return int(value)


# -- which API a step used -----------------------------------------------------
#
# tf.keras 2's apply_gradients applies gradients as given (the caller unscales
# them with get_unscaled_gradients); Keras 3's apply divides them by the scale
# itself. The same gradients must not get both treatments, so each apply looks
# at the scaling calls made since the previous apply *in the same context*:
# eagerly, or while tracing the same outermost tf.function. Those are Python
# calls, so the decision is made once per trace and baked into the graph.

_SCALE_LOSS = "scale_loss"  # Keras 3
_GET_SCALED_LOSS = "get_scaled_loss"  # tf.keras 2
_GET_UNSCALED_GRADIENTS = "get_unscaled_gradients"  # tf.keras 2


class _Flow(NamedTuple):
    seen: str  # what the step called, for messages
    unscale: bool  # whether apply divides the gradients by the scale


_FLOWS = {
    "keras3": _Flow("scale_loss()", True),
    "tf_keras2": _Flow("get_scaled_loss() and get_unscaled_gradients()", False),
    "tf_keras2_scaled_only": _Flow("get_scaled_loss() without get_unscaled_gradients()", False),
    "tf_keras2_unscaled_only": _Flow("get_unscaled_gradients() without get_scaled_loss()", False),
    "none": _Flow("no scale_loss(), get_scaled_loss() or get_unscaled_gradients() call", False),
    "mixed_unscaled": _Flow("scale_loss() (Keras 3) and get_unscaled_gradients() (tf.keras 2)", False),
    "mixed_scaled": _Flow(
        "scale_loss() (Keras 3) and get_scaled_loss() (tf.keras 2), without get_unscaled_gradients()", True
    ),
    "scaled_inputs": _Flow("the very gradients that went into get_unscaled_gradients()", True),
}
# The two complete, unambiguous flows: switching between them is not a mistake.
_CLEAN_FLOWS = ("keras3", "tf_keras2")


class _StepCalls:
    """The scaling calls one context made since its last apply."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        # Inputs and outputs of get_unscaled_gradients, by position.
        self.scaled: list[Any] = []
        self.unscaled: list[Any] = []


def _outermost_graph() -> Any:
    """None when eager; else the outermost graph being traced.

    Nested tf.functions and control-flow branches trace into graphs of their
    own; a scale call inside one and the apply outside it belong to one step.
    """
    if tf.executing_eagerly():
        return None
    graph = tf.compat.v1.get_default_graph()
    while True:
        outer = getattr(graph, "outer_graph", None)
        if outer is None or not getattr(outer, "building_function", False):
            return graph
        graph = outer


_TF_KERAS2_EXAMPLE = """
    with tf.GradientTape() as tape:
      loss = loss_fn()
      scaled_loss = opt.get_scaled_loss(loss)
    scaled_grads = tape.gradient(scaled_loss, vars)
    grads = opt.get_unscaled_gradients(scaled_grads)
    opt.apply_gradients([(grads, var)])"""
_TF_KERAS2_DOCS = "https://www.tensorflow.org/api_docs/python/tf/tf_keras/mixed_precision/LossScaleOptimizer"


def _tf_keras2_scaling_warning(loss_has_been_scaled: bool, gradients_have_been_unscaled: bool) -> str | None:
    """Returns the warning tf.keras 2's `apply_gradients` logged, or None.

    The text of `_maybe_warn_about_scaling` in
    tf_keras/src/mixed_precision/loss_scale_optimizer.py (tf_keras 2.21),
    character for character. As there, the two flags say whether
    `get_scaled_loss` / `get_unscaled_gradients` were *ever* called on the
    optimizer. At least one was: a step that called neither gets tfmp's own
    warning instead.
    """
    if loss_has_been_scaled and gradients_have_been_unscaled:
        return None
    if not loss_has_been_scaled:
        return (
            "You forgot to call LossScaleOptimizer.get_scaled_loss() before "
            "calling LossScaleOptimizer.apply_gradients() (you did call "
            "get_unscaled_gradients() however). This will likely result in "
            "worse model quality, so please call get_scaled_loss() in the "
            f"correct place! For example:{_TF_KERAS2_EXAMPLE}\nFor more information, "
            f"see {_TF_KERAS2_DOCS}"
        )
    return (
        "You forgot to call LossScaleOptimizer.get_unscaled_gradients() "
        "before calling LossScaleOptimizer.apply_gradients() (you did call "
        "get_scaled_loss() however). This will likely result in worse "
        "model quality, so please call get_unscaled_gradients() in the "
        f"correct place! For example:{_TF_KERAS2_EXAMPLE}\nFor more information, "
        f"see {_TF_KERAS2_DOCS}"
    )


_INTERNAL_PREFIXES = tuple(
    os.path.dirname(module.__file__) + os.sep for module in (keras, tf) if getattr(module, "__file__", None)
)


def _warn(message: str) -> None:
    """Issues a `RuntimeWarning` attributed to the first frame outside tfmp's
    loss scaling, Keras and TensorFlow: the user's apply_gradients line."""
    frame, level = sys._getframe(0), 1
    while frame is not None and (
        frame.f_code.co_filename == __file__ or frame.f_code.co_filename.startswith(_INTERNAL_PREFIXES)
    ):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, RuntimeWarning, stacklevel=level)


@keras.saving.register_keras_serializable(package="tfmp")
class LossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
    """A Keras 3 loss-scale optimizer that also speaks tf.keras 2.

    Wraps `inner_optimizer`. The loss is multiplied by the loss scale before
    differentiation so that small float16 gradients do not flush to zero; the
    gradients are divided by it again before the inner optimizer sees them.
    Whenever any gradient is non-finite the whole update is skipped: the
    variables and the inner optimizer's slots stay untouched, the skip is
    counted, and (with a dynamic scale) the scale may back off.

    Both custom-loop flows work, each with its own API's semantics:

    ```python
    # tf.keras 2 flow: apply_gradients() applies the gradients as given
    with tf.GradientTape() as tape:
        loss = compute_loss()
        scaled_loss = opt.get_scaled_loss(loss)
    grads = opt.get_unscaled_gradients(tape.gradient(scaled_loss, variables))
    opt.apply_gradients(zip(grads, variables))

    # Keras 3 flow: apply_gradients() unscales by itself
    with tf.GradientTape() as tape:
        scaled_loss = opt.scale_loss(compute_loss())
    opt.apply_gradients(zip(tape.gradient(scaled_loss, variables), variables))
    ```

    Each `apply`/`apply_gradients` looks at the scaling calls made since the
    previous one in the same context (eagerly, or while tracing the same
    outermost `tf.function`) and decides:

    * only tf.keras 2 methods (`get_scaled_loss`, `get_unscaled_gradients`):
      tf.keras 2 exactly. The gradients are applied as given, and when one of
      the two methods was never called, tf.keras 2's own warning is logged
      (e.g. code that scales the loss but differentiates the unscaled one);
    * only `scale_loss`: Keras 3 exactly; `apply` divides by the scale;
    * no scaling call: applied as given (what tf.keras 2 did; gradients of an
      unscaled loss must not be divided), with a `RuntimeWarning`;
    * both APIs: gradients from `get_unscaled_gradients` are not divided
      again; otherwise `scale_loss` wins and they are divided. Handing
      `apply` the very tensors that went *into* `get_unscaled_gradients`
      divides them once. Each such step raises a `RuntimeWarning`.

    When an optimizer's decision changes from one apply to the next (other
    than between the two complete flows), a `RuntimeWarning` says so. For a
    power-of-two scale (every dynamic scale from the default start) the two
    complete flows give bit-identical updates.

    Args:
        inner_optimizer: The `keras.optimizers.Optimizer` to wrap.
        dynamic: bool, tf.keras 2's switch. `False` fixes the scale at
            `initial_scale` (non-finite steps are still skipped).
        initial_scale: float, the starting scale. Defaults to 2**15.
        dynamic_growth_steps: int, finite steps between two growths of a
            dynamic scale. Defaults to 2000.
        growth_factor: float > 1, the multiplier on growth.
        backoff_factor: float in (0, 1), the multiplier on backoff.
        hysteresis: int >= 1. After the scale last grew, the first
            `hysteresis - 1` overflows only skip their step; from the
            `hysteresis`-th on, each overflow also lowers the scale.
        min_scale: float, the lowest scale backoff may reach.
        max_scale: float, the highest scale growth may reach, and the
            highest fixed scale accepted.
        name: Optional name of the optimizer.

    Positional arguments after `inner_optimizer` follow tf.keras 2
    (`dynamic, initial_scale, dynamic_growth_steps`) when the first is a bool
    and Keras 3 (`initial_scale, dynamic_growth_steps`) when it is a number.

    Example:

    >>> opt = tfmp.LossScaleOptimizer(keras.optimizers.SGD(0.1),
    ...                               initial_scale=1024, hysteresis=2)
    >>> float(opt.loss_scale)
    1024.0
    """

    def __init__(
        self,
        inner_optimizer: keras.optimizers.Optimizer,
        *args: Any,
        dynamic: bool | None = None,
        initial_scale: float | None = None,
        dynamic_growth_steps: int | None = None,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        hysteresis: int = 1,
        min_scale: float = 1.0,
        max_scale: float = DEFAULT_MAX_SCALE,
        name: str | None = None,
        **kwargs: Any,
    ):
        dynamic, initial_scale, dynamic_growth_steps = _positional_forms(
            args, dynamic, initial_scale, dynamic_growth_steps
        )
        if not isinstance(inner_optimizer, keras.optimizers.Optimizer):
            raise ValueError(
                "`inner_optimizer` must be a keras.optimizers.Optimizer. "
                f"Received: inner_optimizer={inner_optimizer!r}"
            )
        if isinstance(inner_optimizer, keras.optimizers.LossScaleOptimizer):
            raise ValueError(
                "`inner_optimizer` is already a LossScaleOptimizer; wrapping "
                "it again would scale the loss twice. Pass its "
                "`inner_optimizer` instead. Received: "
                f"inner_optimizer={inner_optimizer.name!r}"
            )
        if dynamic is None:
            dynamic = True
        if not isinstance(dynamic, bool):
            raise ValueError(f"`dynamic` must be a bool. Received: dynamic={dynamic!r}")
        if initial_scale is None:
            if not dynamic:
                raise ValueError(
                    "A fixed loss scale needs a value: pass `initial_scale` "
                    "with `dynamic=False`. Received: dynamic=False, "
                    "initial_scale=None"
                )
            initial_scale = DEFAULT_INITIAL_SCALE
        initial_scale = _check_positive_number("initial_scale", initial_scale)
        if dynamic_growth_steps is None:
            dynamic_growth_steps = DEFAULT_GROWTH_STEPS
        dynamic_growth_steps = _check_count("dynamic_growth_steps", dynamic_growth_steps)
        growth_factor = _check_positive_number("growth_factor", growth_factor)
        if not growth_factor > 1:
            raise ValueError(
                "`growth_factor` must be > 1. Received: "
                f"growth_factor={growth_factor!r}"
            )
        backoff_factor = _check_positive_number("backoff_factor", backoff_factor)
        if not backoff_factor < 1:
            raise ValueError(
                "`backoff_factor` must be in (0, 1). Received: "
                f"backoff_factor={backoff_factor!r}"
            )
        hysteresis = _check_count("hysteresis", hysteresis)
        min_scale = _check_positive_number("min_scale", min_scale)
        max_scale = _check_positive_number("max_scale", max_scale)
        if min_scale > max_scale:
            raise ValueError(
                "`min_scale` must not exceed `max_scale`. Received: "
                f"min_scale={min_scale!r}, max_scale={max_scale!r}"
            )
        if max_scale > _FLOAT32_MAX:
            raise ValueError(
                "`max_scale` must be representable in float32 (at most "
                f"{_FLOAT32_MAX:g}). Received: max_scale={max_scale!r}"
            )
        if not dynamic and initial_scale > max_scale:
            raise ValueError(
                "A fixed `initial_scale` must not exceed `max_scale` = "
                f"{max_scale!r}; raise `max_scale` if you really mean it. "
                f"Received: initial_scale={initial_scale!r}"
            )
        if dynamic and not min_scale <= initial_scale <= max_scale:
            raise ValueError(
                "A dynamic `initial_scale` must lie within [min_scale, "
                f"max_scale] = [{min_scale!r}, {max_scale!r}]. Received: "
                f"initial_scale={initial_scale!r}"
            )
        super().__init__(
            inner_optimizer,
            initial_scale=initial_scale,
            dynamic_growth_steps=dynamic_growth_steps,
            name=name,
            **kwargs,
        )
        self.dynamic = dynamic
        self.growth_factor = growth_factor
        self.backoff_factor = backoff_factor
        self.hysteresis = hysteresis
        self.min_scale = min_scale
        self.max_scale = max_scale
        # Scaling calls per thread (tf.distribute runs each replica in a
        # thread of its own) and per context; see _step_calls.
        self._calls = threading.local()
        # tf.keras 2's flags: whether get_scaled_loss / get_unscaled_gradients
        # were ever called. Only its warnings depend on them.
        self._loss_has_been_scaled = False
        self._gradients_have_been_unscaled = False
        self._last_flow: str | None = None
        self._create_state_variables()

    @_compat.no_automatic_dependency_tracking
    def _create_state_variables(self) -> None:
        # Created at construction, not in build(): scale_loss() may run (and be
        # traced into a tf.function) before the first apply() builds the
        # optimizer, and must read the variable rather than bake in a constant.
        def state(name, dtype, value):
            return self.add_variable(
                shape=(),
                dtype=dtype,
                initializer=keras.initializers.Constant(value),
                aggregation="only_first_replica",
                name=name,
            )

        self.dynamic_scale = state("dynamic_scale", "float32", self.initial_scale)
        self.step_counter = state("step_counter", "int64", 0)
        self.hysteresis_counter = state("hysteresis_counter", "int64", self.hysteresis)
        self.skipped_counter = state("skipped_steps", "int64", 0)
        self.last_skipped_flag = state("last_step_skipped", "int64", 0)

    def build(self, var_list: Sequence[keras.Variable]) -> None:
        """Builds the inner optimizer; the loss-scale state already exists."""
        self.inner_optimizer.build(var_list)
        keras.optimizers.Optimizer.build(self, var_list)

    # -- observable state -------------------------------------------------

    @property
    def loss_scale(self) -> tf.Tensor:
        """float32 scalar tensor: the current loss scale."""
        return tf.convert_to_tensor(self.dynamic_scale)

    @property
    def skipped_steps(self) -> tf.Tensor:
        """int64 scalar tensor: how many steps were skipped, in total."""
        return tf.convert_to_tensor(self.skipped_counter)

    @property
    def last_step_skipped(self) -> tf.Tensor:
        """bool scalar tensor: whether the most recent step was skipped."""
        return tf.cast(self.last_skipped_flag, tf.bool)

    @property
    def dynamic_counter(self) -> tf.Tensor:
        """int64 scalar tensor: finite steps since the last growth (tf.keras 2)."""
        return tf.convert_to_tensor(self.step_counter)

    # -- scaling ----------------------------------------------------------

    def scale_loss(self, loss: Any) -> tf.Tensor:
        """Returns `loss` multiplied by the current loss scale (Keras 3 API).

        The next `apply`/`apply_gradients` in the same context divides the
        gradients by the scale. A float16 or bfloat16 loss is scaled in
        float32, so the scaled value itself cannot overflow.
        """
        self._note_call(_SCALE_LOSS)
        return _scale(tf.convert_to_tensor(loss), self.dynamic_scale)

    def get_scaled_loss(self, loss: Any) -> Any:
        """Scales `loss` by the loss scale (tf.keras 2 API).

        The next `apply_gradients` in the same context applies its gradients
        as given, as tf.keras 2 did: unscale them with
        `get_unscaled_gradients`. A float16 or bfloat16 loss is scaled in
        float32 (tf.keras 2 scaled it in its own dtype; the gradients are the
        same, only the returned value cannot overflow).

        Args:
            loss: A loss tensor, or a zero-argument callable returning one.

        Returns:
            The scaled loss, or a callable returning it if `loss` was callable.
        """
        self._loss_has_been_scaled = True
        self._note_call(_GET_SCALED_LOSS)
        if callable(loss):

            def scaled_loss() -> tf.Tensor:
                # Called later, maybe in another context: noted there too.
                self._note_call(_GET_SCALED_LOSS)
                return _scale(tf.convert_to_tensor(loss()), self.dynamic_scale)

            return scaled_loss
        return _scale(tf.convert_to_tensor(loss), self.dynamic_scale)

    def get_unscaled_gradients(self, grads: Sequence[Any]) -> list[Any]:
        """Multiplies gradients by 1 / loss scale (tf.keras 2 API).

        The arithmetic is tf.keras 2's (a multiplication by the float32
        reciprocal). `None` entries pass through and `tf.IndexedSlices` keep
        their indices. The next `apply_gradients` in the same context applies
        these gradients as given.

        Args:
            grads: A list of gradients of the scaled loss.

        Returns:
            The list of unscaled gradients.
        """
        grads = list(grads)
        self._gradients_have_been_unscaled = True
        calls = self._note_call(_GET_UNSCALED_GRADIENTS)
        reciprocal = 1.0 / tf.convert_to_tensor(self.dynamic_scale)
        unscaled = _multiply_gradients(grads, reciprocal)
        # Kept so that apply() can tell the scaled inputs from the unscaled
        # outputs, and give overwrite_with_gradient variables their inputs.
        calls.scaled.extend(grads)
        calls.unscaled.extend(unscaled)
        return unscaled

    # -- which flow a step used ------------------------------------------

    def _step_calls(self, pop: bool = False) -> _StepCalls:
        """This thread's scaling calls in the current context (eager or the
        outermost graph being traced); `pop` takes them away."""
        local = self._calls
        if not hasattr(local, "graphs"):
            local.eager = _StepCalls()
            # Weak keys: a trace that scales a loss but never applies does not
            # keep its graph alive (unless it holds its gradients, below).
            local.graphs = weakref.WeakKeyDictionary()
        graph = _outermost_graph()
        if graph is None:
            calls = local.eager
            if pop:
                local.eager = _StepCalls()
            return calls
        if pop:
            return local.graphs.pop(graph, None) or _StepCalls()
        return local.graphs.setdefault(graph, _StepCalls())

    def _note_call(self, name: str) -> _StepCalls:
        calls = self._step_calls()
        calls.seen.add(name)
        return calls

    def _flow(self, calls: _StepCalls, grads: Sequence[Any]) -> str:
        """Names the flow of a step (a key of `_FLOWS`)."""
        seen = calls.seen
        if _GET_UNSCALED_GRADIENTS in seen:
            scaled_ids = {id(g) for g in calls.scaled if g is not None}
            if any(id(g) in scaled_ids for g in grads if g is not None):
                return "scaled_inputs"
            if _SCALE_LOSS in seen:
                return "mixed_unscaled"
            if _GET_SCALED_LOSS in seen:
                return "tf_keras2"
            return "tf_keras2_unscaled_only"
        if _SCALE_LOSS in seen:
            return "mixed_scaled" if _GET_SCALED_LOSS in seen else "keras3"
        if _GET_SCALED_LOSS in seen:
            return "tf_keras2_scaled_only"
        return "none"

    def _report(self, flow: str) -> None:
        """Warns as tf.keras 2 did, or loudly where the flow is unclear."""
        if flow.startswith("tf_keras2"):
            message = _tf_keras2_scaling_warning(
                self._loss_has_been_scaled, self._gradients_have_been_unscaled
            )
            if message:
                tf.get_logger().warning(message)
        elif flow == "none":
            _warn(
                f"LossScaleOptimizer '{self.name}': apply_gradients() saw no "
                "scale_loss() (Keras 3), get_scaled_loss() or get_unscaled_gradients() "
                "(tf.keras 2) call in this step, so nothing says whether the gradients "
                "are scaled. tfmp applies them as given, not divided by the loss scale "
                "(tf.keras 2's behaviour; Keras 3 would divide). If they are gradients of "
                "a scale_loss() result, call scale_loss() in the same tf.function (or "
                "eagerly) as apply_gradients(); if of an unscaled loss, scale the loss, or "
                "float16 gradients may underflow."
            )
        elif flow == "scaled_inputs":
            _warn(
                f"LossScaleOptimizer '{self.name}': apply_gradients() received the very "
                "gradients that went into get_unscaled_gradients() (still scaled), not "
                "its output. tfmp divides them by the loss scale once, as Keras 3 does "
                "(tf.keras 2 would have applied them scaled). Apply the output of "
                "get_unscaled_gradients(), or use scale_loss() without it."
            )
        elif flow != "keras3":
            did = (
                "divides the gradients by the loss scale"
                if _FLOWS[flow].unscale
                else "applies the gradients as given, without dividing them by the loss scale"
            )
            _warn(
                f"LossScaleOptimizer '{self.name}': this step mixed the Keras 3 and "
                f"tf.keras 2 loss-scaling APIs: apply_gradients() saw {_FLOWS[flow].seen}. "
                f"tfmp {did}. Use one API: Keras 3 (scale_loss(), then apply_gradients() "
                "unscales) or tf.keras 2 (get_scaled_loss(), get_unscaled_gradients(), "
                "then apply_gradients())."
            )
        last, self._last_flow = self._last_flow, flow
        if (
            last is not None
            and _FLOWS[last].unscale != _FLOWS[flow].unscale
            and not (last in _CLEAN_FLOWS and flow in _CLEAN_FLOWS)
        ):

            def what(name: str) -> str:
                did = "divided them by the loss scale" if _FLOWS[name].unscale else "applied them as given"
                return f"saw {_FLOWS[name].seen} and {did}"

            _warn(
                f"LossScaleOptimizer '{self.name}' changed how it treats gradients: the "
                f"previous apply_gradients() {what(last)}; this one {what(flow)}. Scaling "
                "calls are only seen in the context of the apply (eagerly, or in the same "
                "tf.function trace): keep them in the same function as apply_gradients()."
            )

    # -- applying ---------------------------------------------------------

    def apply(self, grads: Sequence[Any], trainable_variables: Sequence[Any] | None = None) -> None:
        """Applies the gradients unless one is non-finite, then updates the scale.

        Whether the gradients are divided by the loss scale first depends on
        the scaling calls of the step (see the class docstring). Gradients
        of variables with `overwrite_with_gradient` (Keras's float8 scaling
        factors) are never divided: they carry the variable's new value.
        """
        grads = list(grads)
        if trainable_variables is not None:
            trainable_variables = list(trainable_variables)
        if not self.built:
            with keras.name_scope(self.name, caller=self):
                self.build(trainable_variables)
            self.built = True
        variables = trainable_variables if trainable_variables is not None else _compat.optimizer_variables(self)
        overwrite = [bool(getattr(v, "overwrite_with_gradient", False)) for v in variables]
        calls = self._step_calls(pop=True)
        flow = self._flow(calls, grads)
        self._report(flow)
        if any(overwrite) and calls.unscaled:
            # get_unscaled_gradients divided every gradient; an overwritten
            # variable gets the value it was handed, as in Keras 3.
            originals = {id(u): s for u, s in zip(calls.unscaled, calls.scaled) if u is not None}
            grads = [
                originals.get(id(g), g) if keep and g is not None else g
                for g, keep in zip(grads, overwrite)
            ]
        self._apply_if_finite(grads, trainable_variables, unscale=_FLOWS[flow].unscale, keep=overwrite)

    def _apply_if_finite(self, grads, trainable_variables=None, unscale=True, keep=()):
        if tf.distribute.in_cross_replica_context():
            raise ValueError("apply() must be called in a replica context.")
        finite = all_finite(grads)
        strategy = tf.distribute.get_strategy()
        replica_context = tf.distribute.get_replica_context()
        if strategy.num_replicas_in_sync > 1:
            # Keras 3 decides from replica 0's flag alone, so a non-finite
            # gradient on another replica is applied (weights become inf/nan
            # everywhere). Every replica must see the same decision.
            bad = replica_context.all_reduce(
                tf.distribute.ReduceOp.SUM, tf.cast(tf.logical_not(finite), tf.float32)
            )
            finite = tf.equal(bad, 0.0)

        if _compat.strategy_supports_no_merge_call():
            tf.cond(
                finite,
                lambda: self._apply_inner(grads, trainable_variables, unscale, keep),
                lambda: tf.constant(False),
            )
            self._update_state(finite)
            return

        def cross_replica(distribution, finite, grads, trainable_variables):
            # Every replica holds the same value after the all-reduce above.
            finite = distribution.experimental_local_results(finite)[0]

            def apply_fn():
                distribution.extended.call_for_each_replica(
                    self._apply_inner, args=(grads, trainable_variables, unscale, keep)
                )
                return tf.constant(True)

            # The cond must be built in cross-replica context: a replica-context
            # cond whose branch calls merge_call (as the inner optimizer's
            # apply does) is not supported by tf.distribute.
            tf.cond(finite, apply_fn, lambda: tf.constant(False))
            self._update_state(finite)

        replica_context.merge_call(cross_replica, args=(finite, grads, trainable_variables))

    def _apply_inner(self, grads, trainable_variables, unscale, keep):
        if unscale:
            grads = _divide_gradients(grads, self.dynamic_scale, keep)
        self.inner_optimizer.apply(grads, trainable_variables=trainable_variables)
        return tf.constant(True)

    def _update_state(self, finite: tf.Tensor) -> None:
        state = LossScaleState(
            tf.convert_to_tensor(self.dynamic_scale),
            tf.convert_to_tensor(self.step_counter),
            tf.convert_to_tensor(self.hysteresis_counter),
        )
        new = next_loss_scale(
            state,
            finite,
            dynamic=self.dynamic,
            growth_steps=self.dynamic_growth_steps,
            growth_factor=self.growth_factor,
            backoff_factor=self.backoff_factor,
            hysteresis=self.hysteresis,
            min_scale=self.min_scale,
            max_scale=self.max_scale,
        )
        skipped = tf.cast(tf.logical_not(finite), tf.int64)
        self.dynamic_scale.assign(new.scale)
        self.step_counter.assign(new.growth_count)
        self.hysteresis_counter.assign(new.hysteresis_left)
        self.skipped_counter.assign_add(skipped)
        self.last_skipped_flag.assign(skipped)

    def check_finite(self, grads: Sequence[Any]) -> tf.Tensor:
        """Returns a bool scalar: whether every gradient is finite."""
        return all_finite(grads)

    def stateless_apply(self, optimizer_variables, grads, trainable_variables):
        raise NotImplementedError(
            "tfmp.LossScaleOptimizer runs on the TensorFlow backend, which has "
            "no stateless_apply. Received a stateless_apply call."
        )

    # -- serialization ----------------------------------------------------

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            dynamic=self.dynamic,
            growth_factor=self.growth_factor,
            backoff_factor=self.backoff_factor,
            hysteresis=self.hysteresis,
            min_scale=self.min_scale,
            max_scale=self.max_scale,
        )
        return config


def _positional_forms(args, dynamic, initial_scale, dynamic_growth_steps):
    """Maps positional arguments of either API onto keywords."""
    if not args:
        return dynamic, initial_scale, dynamic_growth_steps
    if isinstance(args[0], bool):
        names = ("dynamic", "initial_scale", "dynamic_growth_steps")
    else:
        names = ("initial_scale", "dynamic_growth_steps")
    if len(args) > len(names):
        raise ValueError(
            f"LossScaleOptimizer takes at most {len(names)} positional arguments "
            f"after inner_optimizer ({', '.join(names)}). Received: {args!r}"
        )
    values = {"dynamic": dynamic, "initial_scale": initial_scale,
              "dynamic_growth_steps": dynamic_growth_steps}
    for arg_name, value in zip(names, args):
        if values[arg_name] is not None:
            raise ValueError(
                f"`{arg_name}` was given both positionally and by keyword. "
                f"Received: {arg_name}={value!r} and {arg_name}={values[arg_name]!r}"
            )
        values[arg_name] = value
    return values["dynamic"], values["initial_scale"], values["dynamic_growth_steps"]


def parse_loss_scale(
    loss_scale: str | float | int | None, max_scale: float = DEFAULT_MAX_SCALE
) -> str | float:
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
    if loss_scale is None:
        return "none"
    if isinstance(loss_scale, str):
        text = loss_scale.strip().lower()
        if text in LOSS_SCALE_NAMES:
            return text
        try:
            value = float(text)
        except ValueError:
            raise ValueError(
                "Unknown loss scale. Expected 'dynamic', 'none' or a positive "
                f"number. Received: loss_scale={loss_scale!r}"
            ) from None
    else:
        value = loss_scale
    try:
        value = _check_positive_number("loss_scale", value)
    except ValueError:
        value = None
    if value is None or value > max_scale:
        bound = "2**24" if max_scale == DEFAULT_MAX_SCALE else f"max_scale={max_scale!r}"
        raise ValueError(
            f"A fixed loss scale must be a number in (0, {max_scale:.0f}] ({bound}), "
            "or 'dynamic' / 'none'. The bound is the largest scale dynamic loss "
            f"scaling reaches: at {max_scale:.0f}, any float16 gradient above "
            f"65504 / {max_scale:.0f} already overflows, so a larger scale would skip "
            f"nearly every step. Received: loss_scale={loss_scale!r}"
        )
    return value


def wrap_optimizer(
    optimizer: keras.optimizers.Optimizer,
    precision: str,
    loss_scale: str | float | int | None = "dynamic",
    **loss_scale_kwargs: Any,
) -> keras.optimizers.Optimizer:
    """Returns the optimizer a precision needs: loss-scaled only for float16.

    Only `mixed_float16` has a range narrow enough to need loss scaling;
    bfloat16 has float32's exponent range and float32 needs none. So:

    * `mixed_float16` with `"dynamic"`: a dynamic `LossScaleOptimizer`;
    * `mixed_float16` with a number: a fixed-scale `LossScaleOptimizer`;
    * anything else (`"none"`, bfloat16, float32): the bare optimizer.

    An optimizer that is already a Keras or tfmp `LossScaleOptimizer` is
    unwrapped first, so the result always matches the request. When the bare
    optimizer is returned under `mixed_float16`, compile the model with
    `auto_scale_loss=False`, or Keras 3 will wrap it again.

    Args:
        optimizer: A Keras optimizer.
        precision: A precision name or alias accepted by
            `tfmp.precision.canonical_precision` (`"auto"` is resolved).
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
    if loss_scale == "dynamic":
        return LossScaleOptimizer(optimizer, **loss_scale_kwargs)
    return LossScaleOptimizer(
        optimizer, dynamic=False, initial_scale=loss_scale, **loss_scale_kwargs
    )
