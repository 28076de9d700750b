"""Loss scaling for float16 training: `tfmp.LossScaleOptimizer`.

`LossScaleOptimizer` extends Keras 3's with the tf.keras 2 custom-loop API,
hysteresis, scale bounds, a skipped-step counter and a finite check all
replicas agree on. The arithmetic (`next_loss_scale`, `all_finite`) is
`tfmp.scaling`'s; whether a precision needs loss scaling, `tfmp.optimizers`'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import keras
import tensorflow as tf

from tfmp import _api_style, _arguments, _compat
from tfmp._arguments import DEFAULT_MAX_SCALE
from tfmp.scaling import LossScaleState, all_finite, map_gradients, next_loss_scale, scale_loss

__all__ = ["LossScaleOptimizer", "LossScaleState", "next_loss_scale"]

# tfmp's settings beyond Keras 3's `initial_scale` and `dynamic_growth_steps`.
_OWN_SETTINGS = ("dynamic", "growth_factor", "backoff_factor", "hysteresis", "min_scale", "max_scale")


@dataclasses.dataclass
class _Guarded:
    """What the next update of an optimizer must do besides its own writes (see `LossScaleOptimizer.guard`).

    Attributes:
        restore: `(variable, value)` pairs assigned back when the step is skipped.
        if_applied: Callables run only when the step is applied.
        written: The variables those callables write.
        taken: Whether an update has taken these into its one conditional (or selection).
    """

    restore: list[tuple[keras.Variable, tf.Tensor]] = dataclasses.field(default_factory=list)
    if_applied: list[Callable[[], Any]] = dataclasses.field(default_factory=list)
    written: list[keras.Variable] = dataclasses.field(default_factory=list)
    taken: bool = False


# The guards open in this thread (a tf.distribute replica traces in a thread of its own), by optimizer.
_OPEN_GUARDS = threading.local()


def _on_gpu() -> bool:
    return bool(tf.config.list_physical_devices("GPU"))


def _keep_new_if(condition: tf.Tensor, pairs: Iterable[tuple[keras.Variable, tf.Tensor]]) -> None:
    """Each `(variable, old value)`: the variable keeps what it holds now when `condition`, else `old` again."""
    for variable, old in pairs:
        variable.assign(tf.where(condition, tf.convert_to_tensor(variable), old))


def _check_jit_compile(jit_compile: Any) -> bool | str:
    if jit_compile is True or jit_compile is False or jit_compile == "auto":
        return jit_compile
    raise ValueError(f'jit_compile must be True, False or "auto". Received: jit_compile={jit_compile!r}')


@keras.saving.register_keras_serializable(package="tfmp")
class LossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
    """A Keras 3 loss-scale optimizer that also speaks tf.keras 2.

    Wraps `inner_optimizer`: the loss is multiplied by the loss scale so that
    small float16 gradients do not flush to zero, and the gradients are divided
    by it before the inner optimizer sees them. A step with a non-finite
    gradient on any replica is skipped whole, counted, and may lower the scale.
    Keras 3's `scale_loss` and tf.keras 2's `get_scaled_loss` /
    `get_unscaled_gradients` both work, each with its own semantics: see
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
        jit_compile: Whether the update (finite check, inner optimizer,
            loss-scale state) is compiled with XLA into a few kernels, as
            tf.keras 2 compiled its optimizers on a GPU. `"auto"` (the
            default) compiles on a GPU, where an uncompiled update is
            hundreds of small kernel launches, and not on a CPU, where the
            compiled update measured slower. A compiled update selects the
            new or the old values instead of branching, so it never waits
            on the host for the finite check. Inside a step that XLA
            compiles whole (`compile(jit_compile=True)`) the update is
            compiled with it whatever this says.
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
        jit_compile: bool | str = "auto",
        name: str | None = None,
        **kwargs: Any,
    ):
        checked = _arguments.checked(
            inner_optimizer,
            args,
            dynamic,
            initial_scale,
            dynamic_growth_steps,
            growth_factor,
            backoff_factor,
            hysteresis,
            min_scale,
            max_scale,
        )
        super().__init__(inner_optimizer, checked.initial_scale, checked.dynamic_growth_steps, name=name, **kwargs)
        for setting in _OWN_SETTINGS:
            setattr(self, setting, getattr(checked, setting))
        self.jit_compile = _check_jit_compile(jit_compile)
        self._api_style = _api_style.ApiStyle()
        self._create_state_variables()

    @_compat.no_automatic_dependency_tracking
    def _create_state_variables(self) -> None:
        # Created at construction, not in build(): scale_loss() may run (and be
        # traced into a tf.function) before the first apply() builds the
        # optimizer, and must read the variable rather than bake in a constant.
        def state(name, dtype, value):
            initializer = keras.initializers.Constant(value)
            return self.add_variable((), initializer, dtype, aggregation="only_first_replica", name=name)

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

    def scale_loss(self, loss: Any) -> tf.Tensor:
        """Returns `loss` times the loss scale (Keras 3 API); the next apply divides the gradients.

        A float16 or bfloat16 loss is scaled in float32, so the scaled value cannot overflow.
        """
        self._api_style.note(_api_style.SCALE_LOSS)
        return scale_loss(loss, self._scale_or_none)

    def get_scaled_loss(self, loss: Any) -> Any:
        """Scales `loss` by the loss scale (tf.keras 2 API).

        The next `apply_gradients` in the same context applies its gradients
        as given, as tf.keras 2 did. A 16-bit loss is scaled in float32 (the
        gradients are tf.keras 2's; only the returned value cannot overflow).

        Args:
            loss: A loss tensor, or a zero-argument callable returning one.

        Returns:
            The scaled loss, or a callable returning it if `loss` was callable.
        """
        self._api_style.note(_api_style.GET_SCALED_LOSS)
        if callable(loss):
            return lambda: self.get_scaled_loss(loss())  # called later, maybe in another context: noted there too
        return scale_loss(loss, self._scale_or_none)

    def get_unscaled_gradients(self, grads: Sequence[Any]) -> list[Any]:
        """Multiplies gradients by 1 / loss scale, as tf.keras 2 did (tf.keras 2 API).

        Multiplying by the float32 reciprocal rather than dividing gives
        tf.keras 2's bits for any scale (for a power of two both agree).

        Args:
            grads: A list of gradients of the scaled loss; `None` entries pass through.

        Returns:
            The list of unscaled gradients.
        """
        grads = list(grads)
        if self._scale_or_none is None:
            # Returned as given (the same tensors): nothing to tell apart.
            self._api_style.note(_api_style.GET_UNSCALED_GRADIENTS)
            return grads
        reciprocal = 1.0 / tf.convert_to_tensor(self.dynamic_scale)
        unscaled = map_gradients(grads, lambda x: x * tf.cast(reciprocal, x.dtype))
        self._api_style.note(_api_style.GET_UNSCALED_GRADIENTS, scaled=grads, unscaled=unscaled)
        return unscaled

    def apply(self, grads: Sequence[Any], trainable_variables: Sequence[Any] | None = None) -> None:
        """Divides the gradients by the loss scale and applies them, unless one is non-finite; updates the scale.

        Keras 3's contract: the gradients are those of a `scale_loss` result.
        With no scaling call in the step they are divided all the same, with a
        `RuntimeWarning`. Gradients returned by `get_unscaled_gradients` are not
        divided again, nor are those of variables with `overwrite_with_gradient`
        (Keras's float8 scaling factors): they carry the variable's new value.
        """
        self._apply(grads, trainable_variables, _api_style.APPLY)

    def apply_gradients(self, grads_and_vars: Iterable[tuple[Any, Any]]) -> keras.Variable:
        """Applies `(gradient, variable)` pairs, unless a gradient is non-finite; updates the scale.

        After `scale_loss` the gradients are divided by the loss scale, as in Keras 3; after
        `get_unscaled_gradients`, or with no scaling call in the step, applied as given, as in tf.keras 2.
        """
        # Not through apply(), as Keras's is: the two differ for a step with no scaling call, and an
        # argument needs no state kept per tf.function trace or replica thread.
        grads, trainable_variables = zip(*grads_and_vars)
        self._apply(grads, trainable_variables, _api_style.APPLY_GRADIENTS)
        return self._iterations  # what Keras's apply_gradients() returns

    def _apply(self, grads: Sequence[Any], trainable_variables: Sequence[Any] | None, entry: str) -> None:
        grads = list(grads)
        if trainable_variables is not None:
            trainable_variables = list(trainable_variables)
        if not self.built:
            with keras.name_scope(self.name, caller=self):
                self.build(trainable_variables)
            self.built = True
        variables = trainable_variables if trainable_variables is not None else _compat.optimizer_variables(self)
        overwrite = [bool(getattr(v, "overwrite_with_gradient", False)) for v in variables]
        step = self._api_style.end_step(grads, self.name, entry)
        if any(overwrite) and step.calls.unscaled:
            grads = step.calls.handed_back(grads, overwrite)
        self._apply_if_finite(grads, trainable_variables, unscale=step.unscale, keep=overwrite)

    @contextlib.contextmanager
    def guard(self) -> Iterator[_Guarded]:
        """The block of one training step: what it registers, the step's update does with its own writes.

        `tfmp.undo_if_skipped` registers the forward pass's writes to put
        back, and the trainers their metric updates to run only when the
        step is applied. The update inside the block (`apply` /
        `apply_gradients`) takes them into its one conditional, or, where
        the update selects (`jit_compile`, or a step compiled by XLA), into
        its selection of new or old values. Blocks nest: an inner block
        adds to the outer one. When no update took them (none ran in the
        block, or a strategy that updates through `merge_call`), `taken`
        stays False and the caller does the work itself.
        """
        guards = _OPEN_GUARDS.__dict__.setdefault("by_optimizer", {})
        outer = guards.get(id(self))
        if outer is not None:
            yield outer
            return
        guards[id(self)] = opened = _Guarded()
        try:
            yield opened
        finally:
            del guards[id(self)]

    def current_guard(self) -> _Guarded | None:
        """The `guard()` block open in this thread whose update has not run yet, or None."""
        guard = _OPEN_GUARDS.__dict__.get("by_optimizer", {}).get(id(self))
        return None if guard is None or guard.taken else guard

    def _take_guard(self) -> _Guarded:
        guard = self.current_guard()
        if guard is None:
            return _Guarded()
        guard.taken = True
        return guard

    def _compiles(self) -> bool:
        """Whether `jit_compile` asks for the update compiled with XLA on its own, here."""
        return self.jit_compile is True or (self.jit_compile == "auto" and _on_gpu())

    def _apply_if_finite(self, grads, trainable_variables=None, unscale=True, keep=()):
        if tf.distribute.in_cross_replica_context():
            raise ValueError("apply() must be called in a replica context.")
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        in_xla = _compat.tracing_for_xla()
        # One replica, compiled (the whole step by XLA, or the update on its own): select, do not branch.
        if _compat.strategy_supports_no_merge_call() and replicas == 1 and (in_xla or self._compiles()):
            guard = self._take_guard()
            if in_xla:
                self._select_update(grads, trainable_variables, unscale, keep, guard.restore)
            else:
                self._compiled_update(trainable_variables, unscale, keep, guard)(
                    grads, [value for _, value in guard.restore]
                )
            self._select_if_applied(guard)
            return

        finite = all_finite(grads)
        replica_context = tf.distribute.get_replica_context()
        if replicas > 1:
            # Keras 3 decides from replica 0's flag alone, so a non-finite
            # gradient on another replica is applied (weights become inf/nan
            # everywhere). Every replica must see the same decision.
            bad = replica_context.all_reduce(tf.distribute.ReduceOp.SUM, tf.cast(tf.logical_not(finite), tf.float32))
            finite = tf.equal(bad, 0.0)

        if _compat.strategy_supports_no_merge_call():
            guard = self._take_guard()

            def applied() -> tf.Tensor:
                self._apply_inner(grads, trainable_variables, unscale, keep)
                for update in guard.if_applied:
                    update()
                self.last_skipped_flag.assign(0)
                return tf.constant(True)

            def skipped() -> tf.Tensor:
                for variable, value in guard.restore:
                    variable.assign(value)
                self.skipped_counter.assign_add(1)
                self.last_skipped_flag.assign(1)
                return tf.constant(False)

            # The one conditional of the step: the update, what the step
            # registered to run when it is applied (metrics) or to put back
            # when it is skipped (BatchNorm's statistics), and the counters.
            tf.cond(finite, applied, skipped)
            self._update_scale(finite)
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

        # Through merge_call's arguments, each replica's gradients reach its own update.
        replica_context.merge_call(cross_replica, args=(finite, grads, trainable_variables))

    def _compiled_update(
        self, trainable_variables: Sequence[Any] | None, unscale: bool, keep: Sequence[bool], guard: _Guarded
    ) -> Callable[[list[Any], list[tf.Tensor]], tf.Tensor]:
        """`_select_update` as one XLA-compiled function of the gradients and the restore values, made once per use.

        The variables are captured, not passed: a Keras variable given as an
        argument would become a tensor. One function per set of variables, so
        eager steps do not trace it anew each time.
        """
        restored = [variable for variable, _ in guard.restore]
        key = (
            tuple(id(v) for v in trainable_variables or ()),
            unscale,
            tuple(keep),
            tuple(id(v) for v in restored),
        )
        cache = self.__dict__.setdefault("_compiled_updates", {})
        if key not in cache:

            def update(grads: list[Any], old: list[tf.Tensor]) -> tf.Tensor:
                return self._select_update(grads, trainable_variables, unscale, keep, list(zip(restored, old)))

            cache[key] = tf.function(update, jit_compile=True, autograph=False)
        return cache[key]

    def _select_update(self, grads, trainable_variables, unscale, keep, restore) -> tf.Tensor:
        """The update without a branch: applied always, then each written variable keeps its new or its old value.

        What the inner optimizer writes (the trainable variables, its slots
        and `iterations`) is read before and selected after, as are the
        variables in `restore` (against the values given). Compiled by XLA,
        the reads, the update and the selection fuse into a few kernels.
        """
        finite = all_finite(grads)
        variables = trainable_variables if trainable_variables is not None else _compat.optimizer_variables(self)
        written = list(variables) + list(self.inner_optimizer.variables)
        before = [tf.convert_to_tensor(variable) for variable in written]
        self._apply_inner(grads, trainable_variables, unscale, keep)
        _keep_new_if(finite, [*zip(written, before), *restore])
        self._update_state(finite)
        return finite

    def _select_if_applied(self, guard: _Guarded) -> None:
        """Runs the guard's `if_applied` updates and keeps their writes only if the step was applied."""
        if not guard.if_applied:
            return
        before = [tf.convert_to_tensor(variable) for variable in guard.written]
        for update in guard.if_applied:
            update()
        _keep_new_if(tf.logical_not(self.last_step_skipped), zip(guard.written, before))

    def _apply_inner(self, grads, trainable_variables, unscale, keep):
        if unscale and self._scale_or_none is not None:
            # Divided, as Keras 3's apply unscales.
            grads = map_gradients(grads, lambda x: x / tf.cast(self.dynamic_scale, x.dtype), keep)
        self.inner_optimizer.apply(grads, trainable_variables=trainable_variables)
        return tf.constant(True)

    def _update_scale(self, finite: tf.Tensor) -> None:
        """Moves a dynamic scale to its next state (`next_loss_scale`); a fixed scale never changes."""
        if not self.dynamic:
            return
        variables = (self.dynamic_scale, self.step_counter, self.hysteresis_counter)  # a LossScaleState
        state = LossScaleState(*map(tf.convert_to_tensor, variables))
        new = next_loss_scale(state, finite, growth_steps=self.dynamic_growth_steps, **self._own_settings())
        for variable, value in zip(variables, new):
            variable.assign(value)

    def _update_state(self, finite: tf.Tensor) -> None:
        self._update_scale(finite)
        skipped = tf.cast(tf.logical_not(finite), tf.int64)
        self.skipped_counter.assign_add(skipped)
        self.last_skipped_flag.assign(skipped)

    def _own_settings(self) -> dict[str, Any]:
        return {setting: getattr(self, setting) for setting in _OWN_SETTINGS}

    def check_finite(self, grads: Sequence[Any]) -> tf.Tensor:
        """Returns a bool scalar: whether every gradient is finite."""
        return all_finite(grads)

    def stateless_apply(self, optimizer_variables, grads, trainable_variables):
        raise NotImplementedError("tfmp.LossScaleOptimizer runs on the TensorFlow backend only: no stateless_apply.")

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), **self._own_settings(), "jit_compile": self.jit_compile}

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: Any = None) -> LossScaleOptimizer:
        """Rebuilds the optimizer from `get_config()`, also from a config of an earlier tfmp."""
        config = dict(config)
        # Earlier releases had an opt-in speculative update, with the same results as the gated one.
        if config.pop("speculative_update", False):
            warnings.warn(
                f"LossScaleOptimizer {config.get('name')!r}: speculative_update no longer exists; the gated update "
                "(waiting for the finite check, with the same results) is used. Received: speculative_update=True",
                stacklevel=2,
            )
        return super().from_config(config, custom_objects=custom_objects)
