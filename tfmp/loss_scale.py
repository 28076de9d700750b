"""Loss scaling for float16 training: `tfmp.LossScaleOptimizer`.

All of tfmp's loss-scale arithmetic lives in this module:

* `next_loss_scale` is the pure state transition (growth, backoff,
  hysteresis, bounds) applied once per step;
* `LossScaleOptimizer` wraps a Keras optimizer, scales the loss, unscales the
  gradients, skips non-finite steps and keeps the state in tracked variables;
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
import threading
import warnings
from typing import Any, Iterable, NamedTuple, Sequence

import keras
import tensorflow as tf

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


def _unscale(grads: Sequence[Any], scale: tf.Tensor) -> list[Any]:
    """Divides every gradient by `scale`; the one unscaling routine of tfmp.

    Both custom-loop flows (tf.keras 2's `get_unscaled_gradients` and Keras 3's
    implicit unscaling in `apply`) go through this function, so they produce
    bit-identical updates.
    """
    out = []
    for g in grads:
        if g is None:
            out.append(None)
        elif isinstance(g, tf.IndexedSlices):
            out.append(tf.IndexedSlices(_divide(g.values, scale), g.indices, g.dense_shape))
        else:
            out.append(_divide(tf.convert_to_tensor(g), scale))
    return out


def _divide(x: tf.Tensor, scale: tf.Tensor) -> tf.Tensor:
    # A 16-bit gradient is divided in float32: a scale above 65504 (float16's
    # max) would otherwise turn into inf and every gradient into zero.
    if x.dtype in (tf.float16, tf.bfloat16):
        return tf.cast(tf.cast(x, tf.float32) / scale, x.dtype)
    return x / tf.cast(scale, x.dtype)


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


@keras.saving.register_keras_serializable(package="tfmp")
class LossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
    """A Keras 3 loss-scale optimizer that also speaks tf.keras 2.

    Wraps `inner_optimizer`. The loss is multiplied by the loss scale before
    differentiation so that small float16 gradients do not flush to zero; the
    gradients are divided by it again before the inner optimizer sees them.
    Whenever any gradient is non-finite the whole update is skipped: the
    variables and the inner optimizer's slots stay untouched, the skip is
    counted, and (with a dynamic scale) the scale may back off.

    Both custom-loop flows work and give identical updates:

    ```python
    # tf.keras 2 flow
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

    Gradients that went through `get_unscaled_gradients` are not unscaled a
    second time by `apply_gradients`, so a loop cannot unscale twice or never.
    (Handing `apply_gradients` the very tensors that went *into*
    `get_unscaled_gradients`, e.g. after unscaling a copy only to inspect it,
    still unscales them once.)
    A step applied without the loss having been scaled raises a
    `RuntimeWarning` (once per optimizer), because it would silently divide
    the update by the scale.

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
        max_scale: float, the highest scale growth may reach.
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
        max_scale: float = 2.0**24,
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
        self._flags = threading.local()
        self._warned_unscaled_loss = False
        self._create_state_variables()

    @keras.src.utils.tracking.no_automatic_dependency_tracking
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

        A float16 or bfloat16 loss is scaled in float32, so the scaled value
        itself cannot overflow.
        """
        self._flags.loss_scaled = True
        return _scale(tf.convert_to_tensor(loss), self.dynamic_scale)

    def get_scaled_loss(self, loss: Any) -> Any:
        """Scales `loss` by the loss scale (tf.keras 2 API).

        Args:
            loss: A loss tensor, or a zero-argument callable returning one.

        Returns:
            The scaled loss, or a callable returning it if `loss` was callable.
        """
        if callable(loss):
            return lambda: self.scale_loss(loss())
        return self.scale_loss(tf.convert_to_tensor(loss))

    def get_unscaled_gradients(self, grads: Sequence[Any]) -> list[Any]:
        """Divides gradients by the loss scale (tf.keras 2 API).

        `None` entries pass through and `tf.IndexedSlices` keep their indices.
        The next `apply_gradients` call knows these gradients are unscaled and
        does not divide them again.

        Args:
            grads: A list of gradients of the scaled loss.

        Returns:
            The list of unscaled gradients.
        """
        grads = list(grads)
        self._flags.grads_unscaled = True
        # Remembered so that apply() can tell these scaled inputs from the
        # unscaled outputs, should a caller unscale only to inspect.
        self._flags.scaled_inputs = [g for g in grads if g is not None]
        return _unscale(grads, self.dynamic_scale)

    # -- applying ---------------------------------------------------------

    def apply(self, grads: Sequence[Any], trainable_variables: Sequence[Any] | None = None) -> None:
        """Applies the gradients unless one is non-finite, then updates the scale."""
        grads = list(grads)
        if not self.built:
            with keras.name_scope(self.name, caller=self):
                self.build(trainable_variables)
            self.built = True
        scaled_inputs = getattr(self._flags, "scaled_inputs", [])
        already_unscaled = getattr(self._flags, "grads_unscaled", False) and not any(
            g is s for g in grads for s in scaled_inputs
        )
        loss_scaled = getattr(self._flags, "loss_scaled", False)
        self._flags.grads_unscaled = False
        self._flags.loss_scaled = False
        self._flags.scaled_inputs = []
        if not (already_unscaled or loss_scaled) and not self._warned_unscaled_loss:
            self._warned_unscaled_loss = True
            message = (
                f"LossScaleOptimizer '{self.name}' is applying gradients of a "
                "loss that was not scaled: no scale_loss()/get_scaled_loss() "
                "call preceded this apply. The update will be divided by the "
                "loss scale. Scale the loss before tape.gradient()."
            )
            warnings.warn(message, RuntimeWarning, stacklevel=2)
        self._tf_apply(grads, trainable_variables, already_unscaled=already_unscaled)

    def _tf_apply(self, grads, trainable_variables=None, already_unscaled=False):
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

        if tf.__internal__.distribute.strategy_supports_no_merge_call():
            tf.cond(
                finite,
                lambda: self._apply_inner(grads, trainable_variables, already_unscaled),
                lambda: tf.constant(False),
            )
            self._update_state(finite)
            return

        def cross_replica(distribution, finite, grads, trainable_variables):
            # Every replica holds the same value after the all-reduce above.
            finite = distribution.experimental_local_results(finite)[0]

            def apply_fn():
                distribution.extended.call_for_each_replica(
                    self._apply_inner, args=(grads, trainable_variables, already_unscaled)
                )
                return tf.constant(True)

            # The cond must be built in cross-replica context: a replica-context
            # cond whose branch calls merge_call (as the inner optimizer's
            # apply does) is not supported by tf.distribute.
            tf.cond(finite, apply_fn, lambda: tf.constant(False))
            self._update_state(finite)

        replica_context.merge_call(cross_replica, args=(finite, grads, trainable_variables))

    def _apply_inner(self, grads, trainable_variables, already_unscaled):
        if not already_unscaled:
            grads = _unscale(grads, self.dynamic_scale)
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


def parse_loss_scale(loss_scale: str | float | int | None) -> str | float:
    """Normalises a loss-scale setting to `"dynamic"`, `"none"` or a float.

    Args:
        loss_scale: `"dynamic"`, `"none"` (or `None`), a positive number, or a
            string holding one (as a command-line flag does, e.g. `"128"`).

    Returns:
        `"dynamic"`, `"none"`, or the fixed scale as a float.

    Raises:
        ValueError: for an unknown string or a non-positive number.
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
        return _check_positive_number("loss_scale", value)
    except ValueError:
        raise ValueError(
            "A fixed loss scale must be a finite positive number (or use "
            f"'dynamic' / 'none'). Received: loss_scale={loss_scale!r}"
        ) from None


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
    loss_scale = parse_loss_scale(loss_scale)
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        optimizer = optimizer.inner_optimizer
    if policy != "mixed_float16" or loss_scale == "none":
        return optimizer
    if loss_scale == "dynamic":
        return LossScaleOptimizer(optimizer, **loss_scale_kwargs)
    return LossScaleOptimizer(
        optimizer, dynamic=False, initial_scale=loss_scale, **loss_scale_kwargs
    )
