"""`ClassifierTrainer`: a classifier trained with the loss-scaled custom step."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tfmp import precision as precision_lib
from tfmp.trainers.base import MixedPrecisionTrainer, Objective, prepare_optimizer

__all__ = ["ClassifierTrainer"]


class ClassifierTrainer(MixedPrecisionTrainer):
    """Trains a classifier with the loss-scaled custom step.

    Wraps any Keras model (its output should be float32: a float32 softmax,
    or float32 logits with a `from_logits=True` loss). Use it like a Keras
    model; `compile()` takes the usual `loss` and `metrics`:

    ```python
    with tfmp.precision_scope("mixed_float16"):
        trainer = tfmp.trainers.ClassifierTrainer(build_model())
        trainer.compile(keras.optimizers.Adam(1e-3),
                        loss="sparse_categorical_crossentropy",
                        metrics=["accuracy"], loss_scale="dynamic")
    trainer.fit(train_ds, validation_data=val_ds, epochs=3)
    ```

    Args:
        network: The classifier to train.
        **kwargs: Passed to `keras.Model` (e.g. `name`).
    """

    def __init__(self, network: keras.Model, **kwargs: Any):
        kwargs.setdefault("name", f"{network.name}_trainer")
        super().__init__(**kwargs)
        self.network = network
        self.built = network.built

    def call(self, inputs: Any, training: bool = False) -> Any:
        return self.network(inputs, training=training)

    def compile(
        self,
        optimizer: str | keras.optimizers.Optimizer = "adam",
        loss: Any = None,
        metrics: Any = None,
        loss_scale: str | float | None = "dynamic",
        skip_nonfinite: bool = False,
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
                even without loss scaling; see `prepare_optimizer`.
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

    @property
    def networks(self) -> dict[str, keras.Model]:
        return {self.network.name: self.network}

    @property
    def loss_networks(self) -> dict[str, keras.Model]:
        return self.networks

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

    def float32_copy(self) -> ClassifierTrainer:
        copy = ClassifierTrainer(precision_lib.float32_copy(self.network))
        copy.compile(keras.optimizers.SGD(), loss=self.loss, loss_scale="none")
        return copy

    def train_step(self, data: Any) -> dict[str, Any]:
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        loss, y_pred = self.optimize(
            self.optimizer, self.trainable_variables, lambda: self._forward(x, y, sample_weight)
        )
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(self._unscale_for_distribution(loss), sample_weight=tf.shape(y)[0])
        logs = self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)
        logs.update(self.loss_scale_logs(self.optimizer))
        return logs
