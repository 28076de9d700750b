"""A training step as a transaction: what a skipped step must leave as it was.

`tfmp.LossScaleOptimizer` skips a step whose gradients are not all finite:
the weights and the optimizer's slots keep their values. But the step's
forward pass already wrote state of its own before the gradients existed:
BatchNormalization's moving mean and variance, or any weight a custom layer
updates in `call`. A NaN batch leaves those non-finite, and `evaluate()` then
returns `nan` although every weight is fine. `undo_if_skipped` puts them back.

* `state_variables(models)`: the variables a training-mode forward pass of
  `models` may write.
* `undo_if_skipped(models, optimizer)`: a context manager around one step
  that restores them when `optimizer` skipped it. `tfmp.Trainer` and
  `tfmp.GANTrainer` run every step in it; a custom loop adds one line.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import keras

from tfmp import loss_scale as loss_scale_lib

__all__ = ["all_layers", "is_guarded", "state_variables", "undo_if_skipped"]


def all_layers(layer: keras.layers.Layer) -> list[keras.layers.Layer]:
    """`layer` and every layer nested in it, depth first."""
    layers = [layer]
    for inner in getattr(layer, "layers", ()):
        layers.extend(all_layers(inner))
    return layers


def state_variables(models: keras.layers.Layer | Sequence[keras.layers.Layer]) -> list[keras.Variable]:
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
    if isinstance(models, keras.layers.Layer):
        models = [models]
    seen: set[int] = set()
    state = []
    for model in models:
        for layer in all_layers(model):
            if not layer.trainable:
                seen.update(id(w) for w in layer.weights)
        for weight in model.non_trainable_weights:
            if id(weight) not in seen:
                seen.add(id(weight))
                state.append(weight)
    return state


def is_guarded(optimizer: keras.optimizers.Optimizer) -> bool:
    """Whether a step of `optimizer` ran inside `undo_if_skipped` (so a skip undoes the forward pass's writes)."""
    return bool(getattr(optimizer, "undoes_forward_writes", False))


@contextlib.contextmanager
def undo_if_skipped(
    models: keras.layers.Layer | Sequence[keras.layers.Layer], optimizer: keras.optimizers.Optimizer
) -> Iterator[None]:
    """Runs one training step as a transaction: if `optimizer` skips it, the forward pass's writes are undone.

    Enter it before the forward pass and leave it after `optimizer`'s
    `apply` / `apply_gradients`. On entry it reads `state_variables(models)`;
    on exit, when `optimizer.last_step_skipped`, it assigns those values back,
    so a non-finite batch leaves BatchNormalization's statistics exactly as
    they were, as it leaves the weights. A step that is applied keeps its
    writes and pays only for holding the values read (TensorFlow's
    copy-on-write keeps them). The block opens a `tfmp.loss_scale.Step`
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

    With an optimizer that never skips (not a `tfmp.LossScaleOptimizer`)
    nothing is read or restored.

    Args:
        models: The model(s) whose forward pass the step runs.
        optimizer: The optimizer whose `last_step_skipped` decides.
    """
    if not isinstance(optimizer, loss_scale_lib.LossScaleOptimizer):
        yield
        return
    optimizer.undoes_forward_writes = True
    with loss_scale_lib.open_step(optimizer) as step:
        step.keep(state_variables(models))
        yield
        step.close()
