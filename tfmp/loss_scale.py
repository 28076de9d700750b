"""Loss scaling for float16 training: `tfmp.LossScaleOptimizer`, Keras 3's with more.

`LossScaleOptimizer` does what Keras 3's does (`apply` divides the gradients
of a `scale_loss` result by the scale), with hysteresis, scale bounds, a
skipped-step counter, a finite check all replicas agree on, and a `Step`
that carries a step's other writes into its one rule. tf.keras 2's class is
`tfmp.mixed_precision.LossScaleOptimizer` (`tfmp.tf_keras2`). The arithmetic
(`next_loss_scale`, `all_finite`) is `tfmp.scaling`'s; whether a precision
needs loss scaling, `tfmp.optimizers`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import keras
import tensorflow as tf

from tfmp import _arguments, _compat, _deprecated
from tfmp.scaling import LossScaleState, agreed_finite, all_finite, map_gradients, next_loss_scale, scale_loss
from tfmp.transaction import Step, choose, recorded

__all__ = ["LossScaleOptimizer", "LossScaleState", "Step", "next_loss_scale"]


@keras.saving.register_keras_serializable(package="tfmp")
class LossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
    """Keras 3's loss-scale optimizer, with hysteresis, bounds and an exact skip.

    Wraps `inner_optimizer`: `scale_loss` multiplies the loss by the loss
    scale so that small float16 gradients do not flush to zero, and `apply`
    / `apply_gradients` divide the gradients by it before the inner
    optimizer sees them, wherever `scale_loss` ran, as Keras 3's do. A step
    with a non-finite gradient on any replica is skipped whole, counted, and
    may lower the scale. tf.keras 2's flow (`get_scaled_loss`,
    `get_unscaled_gradients`, gradients applied as given) is
    `tfmp.mixed_precision.LossScaleOptimizer`'s: see
    [Loss scaling](../guides/loss-scaling.md).

    Args:
        inner_optimizer: The `keras.optimizers.Optimizer` to wrap.
        *args: Positional `dynamic, initial_scale, dynamic_growth_steps`
            (tf.keras 2, when the first is a bool) or `initial_scale,
            dynamic_growth_steps` (Keras 3).
        dynamic: bool, tf.keras 2's switch. `False` fixes the scale at
            `initial_scale` (non-finite steps are still skipped). None (not
            given) means True.
        initial_scale: float, the starting scale. None (not given) starts a
            dynamic scale at 2**15; a fixed scale (`dynamic=False`) needs it.
        dynamic_growth_steps: int, finite steps between two growths of a
            dynamic scale. None (not given) means 2000.
        growth_factor: float > 1, the multiplier on growth.
        backoff_factor: float in (0, 1), the multiplier on backoff.
        hysteresis: int >= 1. After the scale last grew, the first
            `hysteresis - 1` overflows only skip their step; from the
            `hysteresis`-th on, each overflow also lowers the scale.
        min_scale: float, the lowest scale backoff may reach.
        max_scale: float, the highest scale growth may reach, and the
            highest fixed scale accepted.
        xla_update: Whether the update (finite check, inner optimizer,
            loss-scale state) is compiled with XLA into a few kernels, as
            tf.keras 2 compiled its optimizers on a GPU. `"auto"` (the
            default) compiles on a GPU, where an uncompiled update is
            hundreds of small kernel launches, and not on a CPU, where
            compiling it made the step no faster beyond noise and changes
            Adam's last bits. A compiled update selects the
            new or the old values instead of branching, so it never waits
            on the host for the finite check. Inside a step that XLA
            compiles whole (`compile(jit_compile=True)`) the update is
            compiled with it whatever this says. tfmp 0.1 called it
            `jit_compile`, a name that still works until tfmp 0.3, with a
            `DeprecationWarning`.
        name: Optional name of the optimizer.
        **kwargs: Passed to `keras.optimizers.LossScaleOptimizer`.

    Example:
        ```python
        opt = tfmp.LossScaleOptimizer(keras.optimizers.SGD(0.1), hysteresis=2)
        with tf.GradientTape() as tape:
            scaled_loss = opt.scale_loss(loss_fn(y, model(x, training=True)))
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        opt.apply(grads, model.trainable_variables)  # divided by the scale
        ```
    """

    _DIVIDES = True  # apply() divides the gradients by the scale (tf.keras 2's class: applies them as given)

    @_deprecated.renamed_argument("LossScaleOptimizer(jit_compile)")
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
        max_scale: float = _arguments.DEFAULT_MAX_SCALE,
        xla_update: bool | str = "auto",
        name: str | None = None,
        **kwargs: Any,
    ):
        own = (dynamic_growth_steps, growth_factor, backoff_factor, hysteresis, min_scale, max_scale, xla_update)
        checked = _arguments.checked(inner_optimizer, args, dynamic, initial_scale, *own)
        super().__init__(inner_optimizer, checked.initial_scale, checked.dynamic_growth_steps, name=name, **kwargs)
        for setting in (*_arguments.OWN_SETTINGS, "xla_update"):
            setattr(self, setting, getattr(checked, setting))
        self._create_state_variables()

    @_compat.no_automatic_dependency_tracking
    def _create_state_variables(self) -> None:
        # Created at construction, not in build(): scale_loss() may run (and be
        # traced into a tf.function) before the first apply() builds the
        # optimizer, and must read the variable rather than bake in a constant.
        def state(name, dtype, value):
            return self.add_variable((), keras.initializers.Constant(value), dtype, "only_first_replica", name=name)

        self.dynamic_scale = state("dynamic_scale", "float32", self.initial_scale)
        self.step_counter = state("step_counter", "int64", 0)
        self.hysteresis_counter = state("hysteresis_counter", "int64", self.hysteresis)
        self.skipped_counter = state("skipped_steps", "int64", 0)
        self.last_skipped_flag = state("last_step_skipped", "int64", 0)

    def build(self, var_list: Sequence[keras.Variable]) -> None:
        """Builds the inner optimizer; the loss-scale state already exists."""
        self.inner_optimizer.build(var_list)
        keras.optimizers.Optimizer.build(self, var_list)

    @property
    def _scale_or_none(self) -> keras.Variable | None:
        """The loss-scale variable, or None for the fixed scale 1.

        Multiplying by 1 is exact: a skip-only optimizer (`skip_nonfinite`) pays nothing per gradient.
        """
        return None if not self.dynamic and self.initial_scale == 1 else self.dynamic_scale

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

    jit_compile = _deprecated.renamed_attribute("LossScaleOptimizer.jit_compile")

    def scale_loss(self, loss: Any) -> tf.Tensor:
        """Returns `loss` times the loss scale (Keras 3 API); `apply` divides the gradients by it.

        A float16 or bfloat16 loss is scaled in float32, so the scaled value cannot overflow.
        """
        return scale_loss(loss, self._scale_or_none)

    def get_scaled_loss(self, loss: Any) -> Any:
        """Deprecated here: `scale_loss`. tf.keras 2's flow is `tfmp.mixed_precision.LossScaleOptimizer`'s."""
        _deprecated.warn("LossScaleOptimizer.get_scaled_loss")
        return (lambda: self.scale_loss(loss())) if callable(loss) else self.scale_loss(loss)

    def get_unscaled_gradients(self, grads: Sequence[Any]) -> list[Any]:
        """Deprecated here: returns `grads` as given, since this class's `apply` divides them by the scale."""
        _deprecated.warn("LossScaleOptimizer.get_unscaled_gradients")
        return list(grads)

    def apply(
        self, grads: Sequence[Any], trainable_variables: Sequence[Any] | None = None, step: Step | None = None
    ) -> None:
        """Divides the gradients by the loss scale and applies them, unless one is non-finite; updates the scale.

        Keras 3's contract: the gradients are those of a `scale_loss` result,
        wherever `scale_loss` ran. Those of variables with
        `overwrite_with_gradient` (Keras's float8 scaling factors) are not
        divided: they carry the variable's new value. `step`, a
        `tfmp.transaction.Step`, carries the step's other writes into the
        update's one rule.
        """
        grads = list(grads)
        variables = _compat.optimizer_variables(self) if trainable_variables is None else list(trainable_variables)
        if not self.built:
            with keras.name_scope(self.name, caller=self):
                self.build(variables)
            self.built = True
        keep = [bool(getattr(v, "overwrite_with_gradient", False)) for v in variables]
        if any(keep) and not self._DIVIDES:  # get_unscaled_gradients() divided the new value such a variable gets
            paths = [v.path for v, kept in zip(variables, keep) if kept]
            raise ValueError(
                "tf.keras 2's LossScaleOptimizer cannot update `overwrite_with_gradient` variables (Keras's float8 "
                f"scaling factors): use tfmp.LossScaleOptimizer. Received: {paths}"
            )
        step = step or Step(self)
        if (context := tf.distribute.get_replica_context()) is None:  # in a cross-replica context
            raise ValueError("apply() must be called in a replica context.")
        inner = (grads, variables, keep)
        merge = not _compat.strategy_supports_no_merge_call()
        # `xla_update`: compiled on a GPU ("auto") or when asked (True); always under XLA.
        gpu = bool(tf.config.list_physical_devices("GPU"))
        compiles = self.xla_update is True or (self.xla_update == "auto" and gpu)
        if merge or context.num_replicas_in_sync > 1 or not (_compat.tracing_for_xla() or compiles):
            # Branching, except where the inner update goes through merge_call and branches there.
            finite = agreed_finite(grads, context)
            apply = lambda: context.merge_call(self._apply_if, args=(finite, *inner))  # noqa: E731
            self._decide(finite, apply if merge else lambda: self._apply_inner(*inner), *step.decide(finite), merge)
        else:
            # One replica, selecting: under XLA, or in an update compiled here. A choice's None (the variable's
            # value then) is read here: the inner update does not write it. The held updates run after it.
            chosen = [variable for variable, _, _ in step.choices]
            values = [[tf.convert_to_tensor(v) if x is None else x for x in pair] for v, *pair in step.choices]
            finite = self._selecting_update(variables, keep, chosen)(grads, values)
            choose(finite, recorded(step.decide(finite)[1]))

    def apply_gradients(self, grads_and_vars: Iterable[tuple[Any, Any]], step: Step | None = None) -> keras.Variable:
        """`apply` for `(gradient, variable)` pairs."""
        grads, trainable_variables = zip(*grads_and_vars)
        self.apply(grads, trainable_variables, step)
        return self._iterations  # what Keras's apply_gradients() returns

    def _decide(self, finite: tf.Tensor, apply: Callable, choices: list, updates: list, select: bool) -> tf.Tensor:
        """The one rule of a step, on every path: applied whole when `finite`, else nothing written, the skip counted.

        `apply` runs the inner optimizer's update (the weights, its slots and `iterations`); `choices` and
        `updates` are the step's other writes (`tfmp.transaction.Step`: the forward pass's, the metrics'), made
        after it. Branching: one `tf.cond`, the update, the `updates` and each choice's applied value on one
        side, each choice's skipped value on the other. Selecting (under XLA, in the compiled update, and around
        a `merge_call` update, which branches on its own): `apply` always runs, the `updates` run without writing
        (`recorded`), then every choice gets its applied or its skipped value by `tf.where`, so XLA sees no
        conditional and the step never waits on the host. The skipped-step count and the last-step flag are
        written with the rest; the scale moves without a branch (`next_loss_scale`). Returns `finite`.
        """
        if select:
            apply()
            choose(finite, [*choices, *recorded(updates)])
            skipped = tf.cast(tf.logical_not(finite), tf.int64)
            self.skipped_counter.assign_add(skipped)
            self.last_skipped_flag.assign(skipped)
        else:

            def branch(applied: bool) -> None:
                for run in [apply, *updates] if applied else ():
                    run()
                for variable, *values in choices:
                    if (value := values[0 if applied else 1]) is not None:
                        variable.assign(value)
                if not applied:  # an applied step adds nothing to the count
                    self.skipped_counter.assign_add(1)
                self.last_skipped_flag.assign(0 if applied else 1)

            tf.cond(finite, lambda: branch(True), lambda: branch(False))
        self._update_scale(finite)
        return finite

    def _apply_if(self, distribution: tf.distribute.Strategy, finite: Any, *inner: Any) -> None:
        """merge_call's cross-replica part: the inner update on every replica, when `finite` (the same on each).

        The cond is built here: a replica-context cond whose branch calls merge_call (as the inner
        optimizer's apply does) is not supported by tf.distribute.
        """

        apply = lambda: distribution.extended.call_for_each_replica(self._apply_inner, args=inner)  # noqa: E731
        tf.cond(distribution.experimental_local_results(finite)[0], apply, lambda: None)

    def _selecting_update(self, variables, keep, chosen) -> Callable[[list, list], tf.Tensor]:
        """The step without a branch, for one replica: `_decide` selecting, as a function of the gradients and of
        the values of the choices of the variables `chosen`, returning whether the step was applied; compiled by
        XLA unless it is traced for XLA already.

        What the inner optimizer writes (`variables`, its slots and `iterations`) is read before and joins the
        choices. Compiled by XLA, the reads, the update and the selection fuse into a few kernels. The variables
        are captured, not passed: a Keras variable given as an argument would become a tensor. A cache of one
        compiled function per set of variables spares an eager step tracing it anew; it decides nothing.
        """

        def update(grads: list[Any], values: list[list[tf.Tensor]]) -> tf.Tensor:
            written = [(v, None, tf.convert_to_tensor(v)) for v in [*variables, *self.inner_optimizer.variables]]
            choices = [(variable, *pair) for variable, pair in zip(chosen, values)] + written
            return self._decide(all_finite(grads), lambda: self._apply_inner(grads, variables, keep), choices, [], True)

        if _compat.tracing_for_xla():
            return update
        key = (tuple(map(id, variables)), tuple(keep), tuple(map(id, chosen)))
        compiled = self.__dict__.setdefault("_compiled_updates", {})
        return compiled.get(key) or compiled.setdefault(key, tf.function(update, jit_compile=True, autograph=False))

    def _apply_inner(self, grads, trainable_variables, keep) -> None:
        if self._DIVIDES and self._scale_or_none is not None:
            scale = tf.convert_to_tensor(self.dynamic_scale)  # read once, not once per gradient
            grads = map_gradients(grads, lambda x: x / tf.cast(scale, x.dtype), keep)
        self.inner_optimizer.apply(grads, trainable_variables=trainable_variables)

    def _update_scale(self, finite: tf.Tensor) -> None:
        """Moves a dynamic scale to its next state (`next_loss_scale`); a fixed scale never changes."""
        if not self.dynamic:
            return
        variables = (self.dynamic_scale, self.step_counter, self.hysteresis_counter)  # a LossScaleState
        state = LossScaleState(*map(tf.convert_to_tensor, variables))
        new = next_loss_scale(state, finite, growth_steps=self.dynamic_growth_steps, **self._own_settings())
        for variable, value in zip(variables, new):
            variable.assign(value)

    def _own_settings(self) -> dict[str, Any]:
        return {setting: getattr(self, setting) for setting in _arguments.OWN_SETTINGS}

    def stateless_apply(self, optimizer_variables, grads, trainable_variables):
        raise NotImplementedError("tfmp.LossScaleOptimizer runs on the TensorFlow backend only: no stateless_apply.")

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), **self._own_settings(), "xla_update": self.xla_update}

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: Any = None) -> LossScaleOptimizer:
        """Rebuilds the optimizer from `get_config()`, also from a config of an earlier tfmp (`tfmp._deprecated`)."""
        return super().from_config(_deprecated.without_removed_keys("LossScaleOptimizer", config), custom_objects)
