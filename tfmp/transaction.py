"""A training step as a transaction: what a skipped step must leave as it was.

`tfmp.LossScaleOptimizer` skips a step whose gradients are not all finite:
the weights and the optimizer's slots keep their values. But the step wrote
more than its update. Its forward pass wrote state before the gradients
existed (BatchNormalization's moving mean and variance, any weight a custom
layer updates in `call`), and its metrics take its loss. A NaN batch leaves
those non-finite, and `evaluate()` or the epoch's loss is then `nan` although
every weight is fine.

* `Step`: one step's writes besides the update, decided with it. You get one
  from `undo_if_skipped` (`with tfmp.undo_if_skipped(model, optimizer) as
  step:`), or a trainer's `optimize` hands one to its `forward`.
* `state_variables(models)`: the variables a forward pass of `models` may
  write.
* `recorded(updates)` and `choose(applied, choices)`: the two halves of a
  write decided without a branch.

Nothing here is kept between calls: a step is an object its caller holds.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import keras
import tensorflow as tf

from tfmp import _compat

__all__ = ["Step", "choose", "recorded", "state_variables", "undo_if_skipped"]

Models = keras.layers.Layer | Sequence[keras.layers.Layer]  # a Keras model or layer, or several
Choice = tuple[keras.Variable, Any, Any]  # (variable, value if applied, value if skipped); None: as it is then


def state_variables(models: Models) -> list[keras.Variable]:
    """The variables a forward pass of `models` may write: the weights their layers made non-trainable.

    BatchNormalization's moving mean and variance (Keras's layer and
    `tfmp.layers.FusedBatchNormalization`), and any state a custom layer
    keeps in weights, in frozen layers too (a custom layer may write in
    `call` whatever its `trainable`); not a frozen layer's kernels, which
    nothing writes. Not seed-generator states (noise, Dropout masks), which
    are not weights: those keep advancing, so the next step draws fresh
    numbers.

    Args:
        models: A Keras model or layer, or several.

    Returns:
        The variables, each once, in the models' order.
    """
    models = [models] if isinstance(models, keras.layers.Layer) else models
    return list({id(w): w for w in _compat.state_weights(*models)}.values())


class _Recording(keras.StatelessScope):
    """A `keras.StatelessScope` that also remembers which variables were assigned in it."""

    def __init__(self) -> None:
        super().__init__()
        self.written: dict[int, keras.Variable] = {}

    def add_update(self, update: tuple[keras.Variable, Any]) -> None:
        super().add_update(update)
        self.written[id(update[0])] = update[0]


def recorded(updates: Iterable[Callable[[], Any]]) -> list[Choice]:
    """Runs `updates` without writing a variable; returns what they would write as choices `(variable, value, None)`."""
    with _Recording() as scope:
        for update in updates:
            update()
    return [(variable, scope.get_current_value(variable), None) for variable in scope.written.values()]


def choose(applied: tf.Tensor, choices: Iterable[Choice]) -> None:
    """Assigns each choice's value if applied when `applied`, else its value if skipped, without a branch."""
    for variable, if_applied, if_skipped in choices:
        now = tf.convert_to_tensor(variable)
        new = tf.where(applied, now if if_applied is None else if_applied, now if if_skipped is None else if_skipped)
        variable.assign(new)


class Step:
    """One training step's writes besides its optimizer's update, decided by the update's one rule.

    The rule (`LossScaleOptimizer`'s update): a step whose gradients are all
    finite, on every replica, is applied whole; any other step writes
    nothing and is counted as skipped. A `Step` carries what the update
    cannot see itself:

    * `keep(variables)` reads them now, to put back if the step is skipped
      (the forward pass's writes: BatchNorm's moving statistics), each as a
      *choice* `(variable, value if applied, value if skipped)`, None
      meaning "as it is then";
    * `unless_skipped(update)` holds `update` (metric updates) to run only if
      the step is applied. No list of the variables it writes is needed.

    Hand it to the update (`optimizer.apply(grads, variables, step=step)` or
    `apply_gradients(..., step=step)`) and it is decided inside the update's
    one conditional, or its one selection where the update is compiled or
    traced for XLA. A step no update took is decided when it `close`s, from
    the optimizer's `last_step_skipped`. Either way the writes come in one
    order on every path: the update, then the held updates, which read the
    weights it wrote. Once decided, `applied` holds the decision, and a later
    `unless_skipped` writes at once, only if the step was applied.

    With an optimizer that never skips (one without `last_step_skipped`,
    not a `tfmp.LossScaleOptimizer`) nothing is read, and `unless_skipped`
    simply runs its update.

    Args:
        optimizer: The optimizer whose update decides.

    Attributes:
        applied: bool scalar tensor once decided (None before): whether the
            step was applied.
    """

    def __init__(self, optimizer: keras.optimizers.Optimizer):
        self.optimizer = optimizer
        self.skips = hasattr(type(optimizer), "last_step_skipped")  # read on the class: no op is made
        self.choices: list[Choice] = []
        self.updates: list[Callable[[], Any]] = []
        self.applied: tf.Tensor | None = None

    def keep(self, variables: Iterable[keras.Variable]) -> None:
        """Reads `variables` now; a skipped step puts these values back."""
        if self.skips:
            self.choices += [(variable, None, tf.convert_to_tensor(variable)) for variable in variables]

    def unless_skipped(self, update: Callable[[], Any]) -> None:
        """Runs `update` (metric updates, say) only if the step is applied.

        A skipped step's loss and predictions are non-finite; averaged into
        the epoch's loss and metrics they would turn the whole epoch's curve
        into NaN although no weight changed. What `update` writes is found by
        running it, without writing, where the update selects.
        """
        if not self.skips:
            update()
        elif self.applied is None:
            self.updates.append(update)
        else:
            choose(self.applied, recorded([update]))

    def decide(self, applied: tf.Tensor) -> tuple[list[Choice], list[Callable[[], Any]]]:
        """Marks the step decided (`applied`); returns its choices and held updates, for the update to make."""
        if self.applied is not None:
            raise ValueError(
                f"A Step is decided by one update: open a new one. Received: step of {self.optimizer.name!r}"
            )
        self.applied = applied
        return self.choices, self.updates

    def close(self) -> None:
        """Decides a step that no update took: its writes follow the optimizer's last step."""
        if self.skips and self.applied is None:
            applied = tf.logical_not(self.optimizer.last_step_skipped)
            choices, updates = self.decide(applied)
            choose(applied, [*choices, *recorded(updates)])


@contextlib.contextmanager
def undo_if_skipped(models: Models, optimizer: keras.optimizers.Optimizer) -> Iterator[Step]:
    """Runs one training step as a transaction; yields its `Step`.

    Enter it before the forward pass and leave it after `optimizer`'s update.
    On entry it reads `state_variables(models)`; if `optimizer` skips the
    step, they get those values back, so a non-finite batch leaves
    BatchNormalization's statistics exactly as they were, as it leaves the
    weights. An applied step keeps its writes and pays only for holding the
    values read (TensorFlow's copy-on-write keeps them). Hand the step to
    the update (`step=step`) and it is decided inside the update's one
    conditional, or its one selection where the update is compiled; else it
    is decided on exit, from `optimizer.last_step_skipped`. Metric updates
    go through `step.unless_skipped`, inside the block or after it. It
    works eagerly, in a `tf.function`, under XLA and in a `tf.distribute`
    replica context (each replica puts back its own copy).

    ```python
    def train_step(self, data):
        x, y = data
        with tfmp.undo_if_skipped(self, self.optimizer) as step:
            with tf.GradientTape() as tape:
                loss = self.compute_loss(x=x, y=y, y_pred=self(x, training=True))
                scaled_loss = self.optimizer.scale_loss(loss)
            grads = tape.gradient(scaled_loss, self.trainable_variables)
            self.optimizer.apply(grads, self.trainable_variables, step=step)
        step.unless_skipped(lambda: self.loss_tracker.update_state(loss))
        return {"loss": self.loss_tracker.result()}
    ```

    Args:
        models: The model(s) whose forward pass the step runs.
        optimizer: The optimizer whose update decides.

    Yields:
        The step's `Step`.
    """
    step = Step(optimizer)
    step.keep(state_variables(models))
    yield step
    step.close()
