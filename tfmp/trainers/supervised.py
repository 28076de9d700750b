"""`Trainer`: any supervised Keras model trained with the loss-scaled custom step."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tfmp import float32_layers
from tfmp.trainers.base import MixedPrecisionTrainer, Objective, prepare_optimizer
from tfmp.transaction import Step

__all__ = ["Trainer"]


@keras.saving.register_keras_serializable(package="tfmp")
class Trainer(MixedPrecisionTrainer):
    """Trains any supervised Keras model with the loss-scaled custom step.

    Wraps the model; use the trainer as the model: `compile()` takes the
    usual `loss` and `metrics`, and `fit()`, `evaluate()`, `predict()`,
    callbacks and `.keras` saving work as in Keras. What it adds to
    `model.fit()`:

    * under float16, the optimizer is a `tfmp.LossScaleOptimizer` (as
      Keras 3's `compile()` would wrap it), and in every precision one that
      skips non-finite steps;
    * a step with a non-finite gradient is skipped whole: the weights, the
      optimizer's slots *and* what the forward pass wrote (BatchNorm's moving
      statistics) keep their values (`tfmp.undo_if_skipped`);
    * its loss and metrics stay out of the epoch's means, and the logs hold
      `loss_scale`, `skipped_steps` and `learning_rate`, so Keras's
      `TensorBoard`, `CSVLogger`, `History` and progress bar show them.

    The model's inputs and targets may be anything Keras takes (arrays,
    dicts of inputs, integer tokens, regression targets). Its output should
    be float32 (a float32 softmax or float32 logits with a `from_logits`
    loss), as for any mixed-precision Keras model.

    ```python
    tfmp.set_precision("mixed_float16")
    trainer = tfmp.Trainer(build_model())
    trainer.compile(keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy",
                    metrics=["accuracy"])
    trainer.fit(train_ds, validation_data=val_ds, epochs=3)
    ```

    Args:
        network: The model to train.
        **kwargs: Passed to `keras.Model` (e.g. `name`).
    """

    def __init__(self, network: keras.Model, **kwargs: Any):
        kwargs.setdefault("name", f"{network.name}_trainer")
        super().__init__(**kwargs)
        self.network = network
        self.built = network.built

    def get_config(self) -> dict[str, Any]:
        return {"name": self.name, "network": keras.saving.serialize_keras_object(self.network)}

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: dict[str, Any] | None = None) -> Trainer:
        config = dict(config)
        network = keras.saving.deserialize_keras_object(config.pop("network"), custom_objects=custom_objects)
        return cls(network, **config)

    def call(self, inputs: Any, training: bool = False) -> Any:
        return self.network(inputs, training=training)

    def compile(
        self,
        optimizer: str | keras.optimizers.Optimizer = "adam",
        loss: Any = None,
        metrics: Any = None,
        loss_scale: str | float | None = "dynamic",
        skip_nonfinite: bool = True,
        **kwargs: Any,
    ) -> None:
        """Configures training; see `keras.Model.compile`.

        Args:
            optimizer: The optimizer; wrapped for loss scaling by
                `prepare_optimizer` when the network computes in float16.
            loss: The loss, as for `keras.Model.compile`.
            metrics: The metrics, as for `keras.Model.compile`.
            loss_scale: `"dynamic"`, `"none"` or a fixed scale (float16 only).
            skip_nonfinite: Skip (and count) steps with a non-finite gradient
                under every precision (see `prepare_optimizer`); False gives
                float32 and bfloat16 the bare optimizer, which writes a NaN
                batch into the weights.
            **kwargs: Other `keras.Model.compile` arguments, e.g. `jit_compile`.
        """
        kwargs["auto_scale_loss"] = False  # prepare_optimizer decided already
        super().compile(
            optimizer=prepare_optimizer(optimizer, self.network, loss_scale, skip_nonfinite),
            loss=loss,
            metrics=metrics,
            **kwargs,
        )
        # Built now rather than at the first step, so its state can be restored first.
        self.optimizer.build(self.trainable_variables)
        self.decide_routing()

    @property
    def networks(self) -> dict[str, keras.Model]:
        return {self.network.name: self.network}

    @property
    def optimizers(self) -> dict[str, keras.optimizers.Optimizer]:
        return {self.network.name: self.optimizer}

    def _forward(self, x: Any, y: Any, sample_weight: Any) -> tuple[tf.Tensor, Any]:
        y_pred = self(x, training=True)
        loss = self.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True)
        return loss, y_pred

    def objectives(self, data: Any) -> list[Objective]:
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        return [
            Objective(
                self.network.name,
                self.optimizer,
                self.trainable_variables,
                lambda: self._forward(x, y, sample_weight)[0],
            )
        ]

    def float32_copy(self) -> Trainer:
        copy = Trainer(float32_layers.float32_copy(self.network))
        copy.compile(keras.optimizers.SGD(), loss=self.loss, loss_scale="none")
        return copy

    def train_step(self, data: Any) -> dict[str, Any]:
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        loss_tracker = next(metric for metric in self.metrics if metric.name == "loss")  # Keras's, once compiled

        def forward(step: Step) -> tuple[tf.Tensor, Any]:
            loss, y_pred = self._forward(x, y, sample_weight)

            def update_metrics() -> None:
                batch_size = tf.shape(tf.nest.flatten(x)[0])[0]
                loss_tracker.update_state(self._unscale_for_distribution(loss), sample_weight=batch_size)
                self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

            step.unless_skipped(update_metrics)
            return loss, y_pred

        self.optimize(self.optimizer, self.trainable_variables, forward)
        logs = self.undefined_until_counted(self.optimizer, loss_tracker, self.get_metrics_result())
        logs.update(self.loss_scale_logs(self.optimizer))
        logs.update(self.learning_rate_logs(self.optimizer))
        return logs
