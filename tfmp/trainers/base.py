"""What the trainers share: `MixedPrecisionTrainer`, `Objective` and `prepare_optimizer`.

`MixedPrecisionTrainer.optimize` is the one place where a step is
precision-specific (see `tfmp.trainers`); `prepare_optimizer` picks the
optimizer `compile()` trains with.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import keras
import tensorflow as tf

from tfmp import _compat
from tfmp import loss_scale as loss_scale_lib
from tfmp import optimizers as optimizers_lib

__all__ = ["MixedPrecisionTrainer", "Objective", "computes_in_float16", "prepare_optimizer"]


def _all_layers(model: keras.layers.Layer) -> list[keras.layers.Layer]:
    """The model and every layer nested in it, depth first."""
    layers = [model]
    for layer in getattr(model, "layers", ()):
        layers.extend(_all_layers(layer))
    return layers


def computes_in_float16(model: keras.layers.Layer) -> bool:
    """Whether any layer of `model` computes in float16 (and so needs loss scaling)."""
    return any(layer.compute_dtype == "float16" for layer in _all_layers(model))


def prepare_optimizer(
    optimizer: str | keras.optimizers.Optimizer,
    model: keras.layers.Layer,
    loss_scale: str | float | None = "dynamic",
    skip_nonfinite: bool = False,
) -> keras.optimizers.Optimizer:
    """Returns the optimizer a model should train with.

    * A `tfmp.LossScaleOptimizer` is used as given (`loss_scale` is ignored).
    * Otherwise, when `model` computes in float16, the optimizer is wrapped in
      a `tfmp.LossScaleOptimizer` according to `loss_scale` (`"dynamic"`, a
      fixed positive number, or `"none"` for no scaling). A stock Keras
      `LossScaleOptimizer` is replaced by tfmp's with the same settings.
    * A model that computes in float32 or bfloat16 gets the bare optimizer,
      unless `skip_nonfinite`: then, as any unscaled optimizer, it is wrapped
      in a `tfmp.LossScaleOptimizer` with the fixed scale 1. Multiplying and
      dividing by 1 is exact, so the updates are unchanged, but a step with a
      non-finite gradient (a NaN batch, say) is skipped and counted instead
      of writing NaN into the weights.

    Args:
        optimizer: A Keras optimizer or its name.
        model: The model whose variables the optimizer updates.
        loss_scale: The loss-scale setting for a float16 model.
        skip_nonfinite: Make an optimizer that would not be loss-scaled skip
            non-finite steps too (see above).

    Returns:
        A Keras optimizer.
    """
    optimizer = keras.optimizers.get(optimizer)
    if isinstance(optimizer, loss_scale_lib.LossScaleOptimizer):
        return optimizer
    kwargs = {}
    if (
        isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
        and optimizers_lib.parse_loss_scale(loss_scale) == "dynamic"
    ):
        # Keep the stock optimizer's dynamic settings.
        kwargs = {
            "initial_scale": optimizer.initial_scale,
            "dynamic_growth_steps": optimizer.dynamic_growth_steps,
        }
    precision = "mixed_float16" if computes_in_float16(model) else "float32"
    optimizer = optimizers_lib.wrap_optimizer(optimizer, precision, loss_scale, **kwargs)
    if skip_nonfinite and not isinstance(optimizer, loss_scale_lib.LossScaleOptimizer):
        optimizer = loss_scale_lib.LossScaleOptimizer(optimizer, dynamic=False, initial_scale=1.0)
    return optimizer


@dataclasses.dataclass(frozen=True)
class Objective:
    """One loss a trainer minimises, with what minimises it.

    Attributes:
        name: Which part of the trainer this is (e.g. `"generator"`).
        optimizer: The optimizer of `variables`.
        variables: The variables differentiated and updated.
        loss_fn: Computes the loss (a float32 scalar) on the batch the
            objective was made from, in a training-mode forward pass.
    """

    name: str
    optimizer: keras.optimizers.Optimizer | None
    variables: Sequence[keras.Variable]
    loss_fn: Callable[[], tf.Tensor]


class MixedPrecisionTrainer(_compat.ModelWorkarounds, keras.Model):
    """The logic the trainers share: the loss-scaled update and its logs.

    Subclasses write `train_step` as model math and call `optimize` once per
    optimizer. Class attributes describe the logs it returns (how a run
    presents them is `tfmp.run.tasks`'s business):

    Attributes:
        loss_scale_prefixes: One log-key prefix per optimizer; the logs hold
            `<prefix>loss_scale` and `<prefix>skipped_steps` for each
            loss-scaled optimizer.
        images_per_example: Images processed per example of a batch (the GAN
            counts real and fake images, as its seed does).
    """

    loss_scale_prefixes: tuple[str, ...] = ("",)
    images_per_example: int = 1

    def optimize(
        self,
        optimizer: keras.optimizers.Optimizer,
        variables: Sequence[keras.Variable],
        forward: Callable[[], tuple[tf.Tensor, Any]],
    ) -> tuple[tf.Tensor, Any]:
        """Runs `forward` under a tape and applies the gradient of its loss.

        Under a `tfmp.LossScaleOptimizer` this is the tf.keras 2 flow:
        `get_scaled_loss` -> `tape.gradient` -> `get_unscaled_gradients` ->
        `apply_gradients` (which skips the update if any gradient is
        non-finite and adjusts the scale). Otherwise the plain gradient step.

        The update is a transaction. When the optimizer skips it (a NaN batch,
        a float16 overflow), what `forward` wrote into the networks is undone
        too: `step_state_variables` (BatchNorm moving statistics) get their
        values from before `forward` back, so a non-finite batch cannot leak
        into them. Seed-generator states (noise, Dropout masks) keep
        advancing, so the next step draws fresh numbers and a resumed run
        repeats the same stream. A forward pass that belongs to this update
        (the GAN's fakes for its discriminator step) goes inside `forward`.

        Args:
            optimizer: The optimizer of `variables`.
            variables: The variables to differentiate and update.
            forward: Computes `(loss, aux)`; `loss` is a float32 scalar.

        Returns:
            `(loss, aux)` as `forward` returned them (the loss unscaled).
        """
        scaled = isinstance(optimizer, loss_scale_lib.LossScaleOptimizer)
        if not scaled and isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
            raise TypeError(
                "A stock keras.optimizers.LossScaleOptimizer has no get_scaled_loss; "
                "compile() the trainer so it uses tfmp.LossScaleOptimizer. "
                f"Received: optimizer={optimizer!r}"
            )
        # Only a tfmp.LossScaleOptimizer can skip a step, so only its steps
        # need the state put back; a plain optimizer's steps pay nothing.
        state = self.step_state_variables() if scaled else []
        snapshot = [tf.identity(v) for v in state]
        with tf.GradientTape() as tape:
            loss, aux = forward()
            # Scaled inside the tape, so the gradient flows through the scale.
            target = optimizer.get_scaled_loss(loss) if scaled else loss
        grads = tape.gradient(target, variables)
        if scaled:
            grads = optimizer.get_unscaled_gradients(grads)
        optimizer.apply_gradients(zip(grads, variables))
        if state:
            loss_scale_lib.restore_if(optimizer.last_step_skipped, state, snapshot)
        return loss, aux

    def make_train_function(self, force: bool = False) -> Callable[[Any], Any]:
        """Builds `train_function`, the callable `fit()` runs once per step.

        On one device (no `tf.distribute` strategy), in graph mode without
        XLA and with `steps_per_execution=1`, the step is one `tf.function`
        that draws the batch and runs `train_step`, as a hand-written
        training loop does. Keras's own function wraps the same step in a
        second, nested `tf.function`, returns its logs in a
        `tf.experimental.Optional` and opens it on the host every step; in
        200 paired one-step rounds on a 2-core CPU that driver cost
        MobileNetV2 0.6% (docs/PERFORMANCE.md, issue 23). The step's ops and their results
        are the same; an exhausted iterator raises `tf.errors.OutOfRangeError`
        from `get_next()`, as Keras's function does with
        `steps_per_execution=1`, and `fit()` ends the epoch on it.

        Under a strategy, with XLA (Keras compiles the step alone, outside
        the iterator), eagerly or with several steps per execution, Keras's
        function is used unchanged.

        Args:
            force: Rebuild even if `train_function` exists.

        Returns:
            `train_function`.
        """
        if self.train_function is not None and not force:
            return self.train_function
        if (
            self.run_eagerly
            or self.jit_compile
            or self.steps_per_execution != 1
            or _compat.model_strategy(self) is not None
            or tf.distribute.has_strategy()
        ):
            super().make_train_function(force=force)
            return self.train_function

        def step(data: Any) -> Any:
            # As Keras's step: an empty tf.experimental.Optional in the data
            # (an absent sample weight, say) reaches train_step as None.
            return self.train_step(
                tf.nest.map_structure(lambda x: None if isinstance(x, tf.experimental.Optional) else x, data)
            )

        step_on_iterator = tf.function(lambda iterator: step(iterator.get_next()), reduce_retracing=True)
        step_on_data = tf.function(step, reduce_retracing=True)

        def train_function(iterator: Any) -> Any:
            if isinstance(iterator, (tf.data.Iterator, tf.distribute.DistributedIterator)):
                return step_on_iterator(iterator)
            # Any other iterable of batches (train_on_batch passes one): its first batch.
            outputs = None
            for data in itertools.islice(iterator, 1):
                outputs = step_on_data(data)
            return outputs

        self.train_function = train_function
        return self.train_function

    def step_state_variables(self) -> list[keras.Variable]:
        """The networks' non-trainable variables a training-mode forward pass may write.

        The non-trainable weights of the networks' trainable layers:
        BatchNorm's moving mean and variance (Keras's layer and
        `tfmp.layers.FusedBatchNormalization`), and any state a custom layer
        keeps in weights. Not the seed-generator states (noise, Dropout),
        which are not weights, and not the weights of frozen layers, which a
        forward pass does not write. `optimize` puts these variables back
        when a step is skipped.
        """
        seen, state = set(), []
        for network in self.networks.values():
            for layer in _all_layers(network):
                if not layer.trainable:
                    seen.update(id(w) for w in layer.weights)
            for weight in network.non_trainable_weights:
                if id(weight) not in seen:
                    seen.add(id(weight))
                    state.append(weight)
        return state

    @staticmethod
    def _unscale_for_distribution(loss: tf.Tensor) -> tf.Tensor:
        """Undoes Keras's 1/num_replicas loss scaling, for the loss metrics."""
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        return loss * replicas if replicas > 1 else loss

    @staticmethod
    def loss_scale_logs(optimizer: keras.optimizers.Optimizer, prefix: str = "") -> dict[str, tf.Tensor]:
        """The current loss scale and skipped-step count, if `optimizer` is a tfmp one.

        An optimizer that only skips non-finite steps (fixed scale 1, see
        `prepare_optimizer`) logs its skipped steps but no loss scale.
        """
        if not isinstance(optimizer, loss_scale_lib.LossScaleOptimizer):
            return {}
        logs = {f"{prefix}skipped_steps": optimizer.skipped_steps}
        if optimizer.dynamic or optimizer.initial_scale != 1:
            logs[f"{prefix}loss_scale"] = optimizer.loss_scale
        return logs

    @property
    def networks(self) -> dict[str, keras.Model]:
        """The trained models by name."""
        raise NotImplementedError

    @property
    def optimizers(self) -> dict[str, keras.optimizers.Optimizer]:
        """The optimizers by the name of what they train (after `compile`)."""
        raise NotImplementedError

    @property
    def loss_networks(self) -> dict[str, keras.Model]:
        """The networks whose outputs a loss is computed from."""
        raise NotImplementedError

    def objectives(self, data: Any) -> list[Objective]:
        """The losses `train_step` minimises on `data`, without updating anything.

        For diagnostics (`tfmp.run.diagnostics`): each objective's loss can be
        differentiated with respect to its variables as the step would.
        """
        raise NotImplementedError

    def float32_copy(self) -> MixedPrecisionTrainer:
        """A trainer of the same kind whose networks compute in float32.

        The networks are copies (`tfmp.precision.float32_copy`) holding the
        same weights; the copy is compiled with the same losses but plain
        optimizers. Used to compute float32 reference gradients.
        """
        raise NotImplementedError
