"""What the trainers share: `MixedPrecisionTrainer`, `Objective` and `prepare_optimizer`.

`MixedPrecisionTrainer.optimize` is the one place where a step is
precision-specific (see `tfmp.trainers`); `prepare_optimizer` picks the
optimizer `compile()` trains with.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import keras
import tensorflow as tf

from tfmp import _compat, cpu_kernels, transaction
from tfmp import loss_scale as loss_scale_lib
from tfmp import optimizers as optimizers_lib

__all__ = ["MixedPrecisionTrainer", "Objective", "computes_in_float16", "prepare_optimizer"]

_GUIDE = "docs/guides/own-model.md, 'A trainer of your own'"  # where the contract is explained


def computes_in_float16(model: keras.layers.Layer) -> bool:
    """Whether any layer of `model` computes in float16 (and so needs loss scaling)."""
    return any(layer.compute_dtype == "float16" for layer in _compat.all_layers(model))


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
    loss_scale = optimizers_lib.parse_loss_scale(loss_scale)
    kwargs = {}
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer) and loss_scale == "dynamic":
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

    A subclass's contract (docs/guides/own-model.md, "A trainer of your own"). For `fit()` it defines:

    * `train_step`, model math calling `optimize` once per optimizer, returning the logs (a run's console
      shows each key ending in `loss`);
    * `networks`, the trained models by name (`optimize` puts their state back when it skips a step);
    * `compile()`, holding each optimizer in an attribute (`keras.Model.compile` holds its `optimizer`,
      an RMSprop by default: pass `optimizer=None` to it when the trainer holds its own);
    * optionally `loss_scale_prefixes` (`("",)`), each optimizer's log-key prefix in `loss_scale_logs`
      and `learning_rate_logs` (`"g_"`: `g_loss_scale`, ...), which the console reads; and
      `images_per_example` (1), images processed per example of a batch (the GAN counts 2).

    A run (`tfmp-train --task`; `tfmp.run.tasks.Task.build` checks it) also needs:

    * each optimizer built by `compile()`, on the variables it updates (a checkpoint holds its state);
    * optionally `optimizers` (every attribute holding an optimizer, by its name) and `loss_networks`,
      those whose outputs a loss reads (`networks`);
    * for the diagnosis, `diagnose_every` and `on_nonfinite="stop"`: `objectives` and `float32_copy`.
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

        The update is a transaction: a `tfmp.transaction.Step` made here,
        handed to `apply_gradients`, carries the step's other writes into
        the optimizer's one rule. When the optimizer skips the step (a NaN
        batch, a float16 overflow), what `forward` wrote into the networks is
        undone too, so BatchNorm's moving statistics get their values from
        before `forward` back. Seed-generator states (noise, Dropout masks)
        keep advancing, so the next step draws fresh numbers and a resumed
        run repeats the same stream. A forward pass that belongs to this
        update (the GAN's fakes for its discriminator step) goes inside
        `forward`, and so do the metric updates of the step
        (`unless_skipped`). The step waits for the finite check at most once
        per optimizer (one `tf.cond`), and never under XLA or where the
        update is compiled (a selection of new or old values instead).

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
        step = transaction.Step(optimizer) if scaled else None
        if step is not None:
            step.keep(self.step_state_variables())
        # Held while `forward` runs, past Keras's attribute tracking: its `unless_skipped` calls join `step`.
        # A strategy's replica threads take turns at merge_call, which `forward` makes none of.
        outer, self.__dict__["_open_step"] = self.__dict__.get("_open_step"), step
        try:
            with tf.GradientTape() as tape:
                loss, aux = forward()
                # Scaled inside the tape, so the gradient flows through the scale.
                target = optimizer.get_scaled_loss(loss) if scaled else loss
        finally:
            self.__dict__["_open_step"] = outer
        with self.gradient_scope():
            grads = tape.gradient(target, variables)
        if scaled:
            optimizer.apply_gradients(zip(optimizer.get_unscaled_gradients(grads), variables), step=step)
        else:
            optimizer.apply_gradients(zip(grads, variables))
        return loss, aux

    @property
    def float16_gradient_ops(self) -> frozenset[str]:
        """The op types whose float16 gradients this trainer computes in float32 (`tfmp.cpu_kernels`).

        Empty on a GPU and for networks without float16 layers; on a CPU,
        the op types whose float16 gradient kernels measured pathological
        here (`tfmp.cpu_kernels.float16_gradient_ops`). Decided by
        `compile()`.
        """
        if getattr(self, "_float16_gradient_ops", None) is None:
            self.decide_gradient_routing()
        return self._float16_gradient_ops

    def decide_gradient_routing(self) -> None:
        """Sets `float16_gradient_ops` for this machine; `compile()` calls it.

        On a CPU this reads the kernel measurement (`tfmp.cpu_kernels.kernel_times`),
        making it now if no cache has it, rather than while a step is traced.
        """
        routed = cpu_kernels.float16_gradient_ops() if computes_in_float16(self) else frozenset()
        self._float16_gradient_ops = routed

    def gradient_scope(self) -> contextlib.AbstractContextManager[frozenset[str]]:
        """The block `tape.gradient` runs in: `float16_gradient_ops` computed in float32."""
        return cpu_kernels.float32_gradients(self.float16_gradient_ops)

    def compile_from_config(self, config: dict[str, Any]) -> None:
        """Compiles as `get_compile_config()` recorded (when a `.keras` file is loaded).

        Keras skips this for any model whose `compile()` is overridden, as
        the trainers' is; their `compile()` takes its own config back, and
        builds the optimizers, so that their saved state (loss scale,
        skipped-step count, slots) is loaded into them.
        """
        if config:
            self.compile(**keras.saving.deserialize_keras_object(config))

    def unless_skipped(
        self, optimizer: keras.optimizers.Optimizer, update: Callable[[], None], written: Sequence[keras.Variable] = ()
    ) -> None:
        """Runs `update` (metric updates, say); what it writes is kept only if `optimizer` applies the step.

        A skipped step's loss and predictions are non-finite; averaged into
        the epoch's loss and metrics they would turn the whole epoch's curve
        into NaN although no weight changed. The skipped-step count says how
        many steps were left out. With an optimizer that never skips,
        `update` simply runs.

        Called inside `optimize`'s `forward`, `update` joins the step
        (`tfmp.transaction.Step.unless_skipped`): it runs at once without
        writing, and what it would write is written by the step's update,
        only if the step is applied, on every path (branching, compiled, under
        XLA, across replicas). Called after the step, its writes follow
        `optimizer.last_step_skipped`.

        Args:
            optimizer: The optimizer whose step decides.
            update: Writes the metrics.
            written: Ignored; what `update` writes is found by running it.
        """
        if not isinstance(optimizer, loss_scale_lib.LossScaleOptimizer):
            update()
            return
        step = self.__dict__.get("_open_step")
        if step is None or step.optimizer is not optimizer:
            step = transaction.current_step(optimizer) or transaction.Step(optimizer, done=True)
        step.unless_skipped(update)

    @staticmethod
    def undefined_until_counted(
        optimizer: keras.optimizers.Optimizer, counted: keras.metrics.Mean, logs: dict[str, Any]
    ) -> dict[str, Any]:
        """`logs` with every float scalar NaN while `counted` has counted no step of the epoch yet.

        When a skip-capable optimizer skipped every step so far (often the
        first step of a float16 run, whose initial scale overflows), the
        epoch's means are of nothing: undefined, not 0 as an empty Keras
        `Mean` reports.
        """
        if not isinstance(optimizer, loss_scale_lib.LossScaleOptimizer):
            return logs
        empty = tf.equal(counted.count, 0)

        def undefined(value: Any) -> Any:
            if tf.is_tensor(value) and value.dtype.is_floating and value.shape.rank == 0:
                return tf.where(empty, tf.constant(float("nan"), value.dtype), value)
            return value

        return {key: tf.nest.map_structure(undefined, value) for key, value in logs.items()}

    def step_state_variables(self) -> list[keras.Variable]:
        """The networks' variables a training-mode forward pass may write (`tfmp.transaction.state_variables`).

        BatchNorm's moving mean and variance, and any state a custom layer
        keeps in weights; `optimize` puts them back when a step is skipped.
        """
        return transaction.state_variables(list(self.networks.values()))

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

    @staticmethod
    def learning_rate_logs(optimizer: keras.optimizers.Optimizer, prefix: str = "") -> dict[str, tf.Tensor]:
        """`<prefix>learning_rate`: the learning rate `optimizer` applies at its next step, as float32.

        Read from the optimizer's `learning_rate` (for a `LossScaleOptimizer`,
        the inner optimizer's), which Keras evaluates at the optimizer's
        `iterations` when it is a `LearningRateSchedule`. Read after the
        update, it is the value Keras's `TensorBoard` logs as
        `epoch_learning_rate`; a skipped step does not advance a schedule.
        """
        if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
            optimizer = optimizer.inner_optimizer
        return {f"{prefix}learning_rate": keras.ops.cast(optimizer.learning_rate, "float32")}

    @property
    def networks(self) -> dict[str, keras.Model]:
        """The trained models by name."""
        raise NotImplementedError(f"{type(self).__name__} does not define networks, its models by name; see {_GUIDE}.")

    @property
    def optimizers(self) -> dict[str, keras.optimizers.Optimizer]:
        """The optimizers by name (after `compile`); by default every attribute holding one, by its name."""
        return {name: value for name, value in vars(self).items() if isinstance(value, keras.optimizers.Optimizer)}

    @property
    def loss_networks(self) -> dict[str, keras.Model]:
        """The networks whose outputs a loss is computed from; by default `networks`."""
        return self.networks

    def objectives(self, data: Any) -> list[Objective]:
        """The losses `train_step` minimises on `data`, without updating anything.

        For diagnostics (`tfmp.run.diagnostics`): each objective's loss can be
        differentiated with respect to its variables as the step would.
        """
        raise NotImplementedError(f"{type(self).__name__} does not define objectives(data); see {_GUIDE}.")

    def float32_copy(self) -> MixedPrecisionTrainer:
        """The same kind of trainer on float32 copies of the networks, plain optimizers: the diagnosis's reference."""
        raise NotImplementedError(f"{type(self).__name__} does not define float32_copy(); see {_GUIDE}.")
