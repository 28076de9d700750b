"""What the trainers share: `MixedPrecisionTrainer`, `Objective` and `prepare_optimizer`.

`MixedPrecisionTrainer.optimize` is the one place where a step is
precision-specific (see `tfmp.trainers`); `prepare_optimizer` picks the
optimizer `compile()` trains with.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import keras
import tensorflow as tf

from tfmp import _compat, _deprecated, cpu_kernels, transaction
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
    skip_nonfinite: bool = True,
) -> keras.optimizers.Optimizer:
    """Returns the optimizer a model should train with: `wrap_optimizer` for the precision `model` computes in.

    * A `tfmp.LossScaleOptimizer` is used as given (`loss_scale` is ignored).
    * Otherwise `tfmp.wrap_optimizer` decides, with `mixed_float16` when any
      layer of `model` computes in float16 and `float32` otherwise: a
      loss-scaled optimizer for float16 according to `loss_scale`
      (`"dynamic"`, a fixed positive number, or `"none"`), and in every other
      case, unless `skip_nonfinite` is False, one at the fixed scale 1, which
      skips and counts a step with a non-finite gradient (a NaN batch, say)
      instead of writing NaN into the weights; multiplying and dividing by 1
      is exact, so the updates are unchanged. A Keras `LossScaleOptimizer`,
      or tf.keras 2's (`tfmp.mixed_precision`), is replaced by tfmp's with
      its settings: the trainers' step is Keras 3's (`scale_loss`, then an
      update that divides).

    Args:
        optimizer: A Keras optimizer or its name.
        model: The model whose variables the optimizer updates.
        loss_scale: The loss-scale setting for a float16 model.
        skip_nonfinite: Whether an optimizer that is not loss-scaled still skips non-finite steps.

    Returns:
        A Keras optimizer.
    """
    optimizer = keras.optimizers.get(optimizer)
    if type(optimizer) is loss_scale_lib.LossScaleOptimizer:
        return optimizer
    precision = "mixed_float16" if computes_in_float16(model) else "float32"
    return optimizers_lib.wrap_optimizer(optimizer, precision, loss_scale, skip_nonfinite)


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
        forward: Callable[[transaction.Step], tuple[tf.Tensor, Any]],
    ) -> tuple[tf.Tensor, Any]:
        """Runs `forward(step)` under a tape and applies the gradient of its loss: Keras 3's flow.

        `scale_loss` -> `tape.gradient` -> `apply` (which divides the
        gradients by the loss scale, skips the update if any is non-finite
        and adjusts the scale). With an optimizer that is not loss-scaled,
        `scale_loss` returns the loss as it is. `forward` runs in
        `forward_scope` and `tape.gradient` in `gradient_scope` (`routing`).

        The update is a transaction, its `tfmp.transaction.Step` made here and
        handed to `forward` and then to the update. When the optimizer skips
        the step (a NaN batch, a float16 overflow), what `forward` wrote into
        the networks is undone too, so BatchNorm's moving statistics get
        their values from before `forward` back; and the metric updates
        `forward` hands to `step.unless_skipped` do not run. Seed-generator
        states (noise, Dropout masks) keep advancing, so the next step draws
        fresh numbers and a resumed run repeats the same stream. A forward
        pass that belongs to this update (the GAN's fakes for its
        discriminator step) goes inside `forward`. The step waits for the
        finite check at most once per optimizer (one `tf.cond`), and never
        under XLA or where the update is compiled (a selection of new or old
        values instead).

        Args:
            optimizer: The optimizer of `variables`.
            variables: The variables to differentiate and update.
            forward: Takes the `Step` and computes `(loss, aux)`; `loss` is a
                float32 scalar. tfmp 0.1's `forward()` without the step
                still works, with a `DeprecationWarning`.

        Returns:
            `(loss, aux)` as `forward` returned them (the loss unscaled).
        """
        step = transaction.Step(optimizer)
        step.keep(self.step_state_variables())
        takes_step = bool(inspect.signature(forward).parameters)
        if not takes_step:
            _deprecated.warn("MixedPrecisionTrainer.optimize(forward())")
        with tf.GradientTape() as tape, self.forward_scope():
            loss, aux = forward(step) if takes_step else forward()
            scaled_loss = optimizer.scale_loss(loss)  # inside the tape: the gradient flows through the scale
        with self.gradient_scope():
            grads = tape.gradient(scaled_loss, variables)
        optimizer.apply(grads, variables, **({"step": step} if step.skips else {}))
        return loss, aux

    @property
    def routing(self) -> cpu_kernels.Routing:
        """What this trainer's step computes in float32 from 16-bit values (`tfmp.cpu_kernels.routing`).

        Nothing on a GPU or for float32 networks; on a CPU, float16's slow
        gradients, and where bfloat16 is native, the bfloat16 ops measured
        slower than float32's with the casts. Decided by `compile()`.
        """
        if getattr(self, "_routing", None) is None:
            self.decide_routing()
        return self._routing

    @property
    def float16_gradient_ops(self) -> frozenset[str]:
        """The op types whose float16 gradients this trainer computes in float32 (`routing`)."""
        return self.routing.float16_gradient_ops()

    def decide_routing(self, routing: cpu_kernels.Routing | None = None) -> None:
        """Sets `routing`: `routing` if given, else this machine's for the networks' types; `compile()` calls it.

        On a CPU this reads the kernel measurement (`tfmp.cpu_kernels.kernel_times`),
        making it now if no cache has it, rather than while a step is traced.
        `tfmp.cpu_kernels.Routing()` routes nothing: TensorFlow's own kernels.
        """
        if routing is None:
            routing = cpu_kernels.routing({layer.compute_dtype for layer in _compat.all_layers(self)})
        self._routing = routing

    def forward_scope(self) -> contextlib.AbstractContextManager[frozenset[tuple[str, str]]]:
        """The block a step's forward pass is traced in: `routing.forward` computed in float32."""
        return cpu_kernels.float32_forward(self.routing.forward)

    def gradient_scope(self) -> contextlib.AbstractContextManager[frozenset[cpu_kernels.GradientRoute]]:
        """The block `tape.gradient` runs in: `routing.gradients` computed in float32."""
        return cpu_kernels.float32_gradients(self.routing.gradients)

    def compile_from_config(self, config: dict[str, Any]) -> None:
        """Compiles as `get_compile_config()` recorded (when a `.keras` file is loaded).

        Keras skips this for any model whose `compile()` is overridden, as
        the trainers' is; their `compile()` takes its own config back, and
        builds the optimizers, so that their saved state (loss scale,
        skipped-step count, slots) is loaded into them.
        """
        if config:
            self.compile(**keras.saving.deserialize_keras_object(config))

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
