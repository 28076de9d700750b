"""A training step as a transaction: what a skipped step must leave as it was.

`tfmp.LossScaleOptimizer` skips a step whose gradients are not all finite:
the weights and the optimizer's slots keep their values. But the step's
forward pass already wrote state of its own before the gradients existed:
BatchNormalization's moving mean and variance, or any weight a custom layer
updates in `call`. A NaN batch leaves those non-finite, and `evaluate()` then
returns `nan` although every weight is fine. `undo_if_skipped` puts them back.

* `Step`: what one step writes besides the optimizer's update (the forward
  pass's writes, the metrics'), as choices between a value if the step is
  applied and one if it is skipped; `LossScaleOptimizer`'s one rule decides
  them with its update (`choose` is that rule without a branch).
* `state_variables(models)`: the variables a training-mode forward pass of
  `models` may write.
* `undo_if_skipped(models, optimizer)`: a context manager around one step of
  a custom loop that restores them when `optimizer` skipped it. The trainers
  hold a `Step` of their own and pass it to `apply_gradients`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import keras
import tensorflow as tf

from tfmp import _compat

__all__ = ["Step", "is_guarded", "state_variables", "undo_if_skipped"]

Models = keras.layers.Layer | Sequence[keras.layers.Layer]  # a Keras model or layer, or several


def state_variables(models: Models) -> list[keras.Variable]:
    """The variables a training-mode forward pass of `models` may write.

    The non-trainable weights of their trainable layers: BatchNormalization's
    moving mean and variance (Keras's layer and
    `tfmp.layers.FusedBatchNormalization`), and any state a custom layer
    keeps in weights. Not the weights of frozen layers (`trainable=False`),
    which a forward pass does not write, and not seed-generator states (noise,
    Dropout masks), which are not weights: those keep advancing, so the next
    step draws fresh numbers.

    Args:
        models: A Keras model or layer, or several.

    Returns:
        The variables, each once, in the models' order.
    """
    models = [models] if isinstance(models, keras.layers.Layer) else models
    frozen = {id(w) for layer in _compat.all_layers(*models) if not layer.trainable for w in layer.weights}
    state = {id(w): w for model in models for w in model.non_trainable_weights if id(w) not in frozen}
    return list(state.values())


class _Recording(keras.StatelessScope):
    """A `keras.StatelessScope` that also remembers which variables were assigned in it."""

    def __init__(self) -> None:
        super().__init__()
        self.written: dict[int, keras.Variable] = {}

    def add_update(self, update: tuple[keras.Variable, Any]) -> None:
        super().add_update(update)
        self.written[id(update[0])] = update[0]


class Step:
    """What one training step writes besides the optimizer's update, for the step's one rule to decide.

    The rule (`LossScaleOptimizer`'s update): a step whose gradients are all
    finite, on every replica, is applied whole; any other step writes
    nothing and is counted as skipped. A `Step` carries the writes the
    update cannot see itself:

    * `keep(variables)` reads them now, to put back if the step is skipped
      (the forward pass's writes: BatchNorm's moving statistics), each as a
      *choice* `(variable, value if applied, value if skipped)`, None
      meaning "as it is then";
    * `unless_skipped(update)` holds `update` (metric updates), to run only
      if the step is applied: in the update's applied branch, or, where the
      update selects, run without writing (`recorded`) and its writes
      selected. No list of the variables `update` writes is needed.

    The trainers hold one per `optimize` call and hand it to
    `apply_gradients(..., step=step)`; a custom loop opens one with
    `tfmp.undo_if_skipped`. After its update a step's choices are spent
    (`done`): `unless_skipped` then writes only if that update was applied.

    Args:
        optimizer: The `LossScaleOptimizer` whose update decides.
        done: Whether the step's update already ran.
    """

    def __init__(self, optimizer: keras.optimizers.Optimizer, done: bool = False):
        self.optimizer, self.done = optimizer, done
        self.choices: list[tuple[keras.Variable, tf.Tensor | None, tf.Tensor | None]] = []
        self.updates: list[Callable[[], Any]] = []

    def keep(self, variables: Iterable[keras.Variable]) -> None:
        """Reads `variables` now; a skipped step puts these values back."""
        self.choices += [(variable, None, tf.convert_to_tensor(variable)) for variable in variables]

    def unless_skipped(self, update: Callable[[], Any]) -> None:
        """Runs `update` only if the step is applied (after its update: if that update was applied)."""
        if self.done:
            choose(tf.logical_not(self.optimizer.last_step_skipped), recorded([update]))
        else:
            self.updates.append(update)

    def close(self) -> None:
        """Settles a step that no update took: its writes follow the optimizer's last step."""
        if not self.done:
            self.done = True
            choose(tf.logical_not(self.optimizer.last_step_skipped), [*self.choices, *recorded(self.updates)])


def recorded(updates: Iterable[Callable[[], Any]]) -> list[tuple[keras.Variable, tf.Tensor, None]]:
    """Runs `updates` without writing a variable; returns what they would write as choices `(variable, value, None)`."""
    with _Recording() as scope:
        for update in updates:
            update()
    return [(variable, scope.get_current_value(variable), None) for variable in scope.written.values()]


def choose(finite: tf.Tensor, choices: Iterable[tuple[keras.Variable, Any, Any]]) -> None:
    """Assigns each choice's value if applied when `finite`, else its value if skipped, without a branch."""
    for variable, applied, skipped in choices:
        now = tf.convert_to_tensor(variable)
        variable.assign(tf.where(finite, now if applied is None else applied, now if skipped is None else skipped))


# The one per-thread record of the loss-scaling modules: the `Step` of each `undo_if_skipped` block open in this
# thread, by optimizer. A custom loop's `apply()` cannot be handed the block's step; a tf.distribute replica
# traces in a thread of its own. The trainers pass their steps instead.
_OPEN_STEPS = threading.local()


def current_step(optimizer: keras.optimizers.Optimizer) -> Step | None:
    """The `Step` of the `undo_if_skipped` block of `optimizer` open in this thread, or None."""
    return _OPEN_STEPS.__dict__.get("by_optimizer", {}).get(id(optimizer))


def is_guarded(optimizer: keras.optimizers.Optimizer) -> bool:
    """Whether a step of `optimizer` ran inside `undo_if_skipped` (so a skip undoes the forward pass's writes)."""
    return bool(getattr(optimizer, "undoes_forward_writes", False))


@contextlib.contextmanager
def undo_if_skipped(models: Models, optimizer: keras.optimizers.Optimizer) -> Iterator[None]:
    """Runs one training step as a transaction: if `optimizer` skips it, the forward pass's writes are undone.

    Enter it before the forward pass and leave it after `optimizer`'s
    `apply` / `apply_gradients`. On entry it reads `state_variables(models)`;
    on exit, when `optimizer.last_step_skipped`, it assigns those values back,
    so a non-finite batch leaves BatchNormalization's statistics exactly as
    they were, as it leaves the weights. A step that is applied keeps its
    writes and pays only for holding the values read (TensorFlow's
    copy-on-write keeps them). The block opens a `Step`
    that the optimizer's update in it takes into its one rule (its one
    conditional, or its selection of new or old values where the update is
    compiled), so the step still branches at most once. It works eagerly, in a
    `tf.function`, under XLA and in a `tf.distribute` replica context (each
    replica puts back its own copy).

    ```python
    @tf.function
    def train_step(x, y):
        with tfmp.undo_if_skipped(model, optimizer):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
                scaled_loss = optimizer.scale_loss(loss)
            grads = tape.gradient(scaled_loss, model.trainable_variables)
            optimizer.apply(grads, model.trainable_variables)
        return loss
    ```

    With an optimizer that never skips (one without `last_step_skipped`, not
    a `tfmp.LossScaleOptimizer`) nothing is read or restored.

    Args:
        models: The model(s) whose forward pass the step runs.
        optimizer: The optimizer whose `last_step_skipped` decides.
    """
    # An optimizer that skips steps says whether it skipped the last one (read on the class: no op is made).
    if not hasattr(type(optimizer), "last_step_skipped"):
        yield
        return
    optimizer.undoes_forward_writes = True
    steps = _OPEN_STEPS.__dict__.setdefault("by_optimizer", {})
    outer = steps.get(id(optimizer))  # an enclosing block's: the blocks nest into one step
    steps[id(optimizer)] = step = outer or Step(optimizer)
    try:
        step.keep(state_variables(models))
        yield
        step.close()
    finally:
        if outer is None:
            del steps[id(optimizer)]
