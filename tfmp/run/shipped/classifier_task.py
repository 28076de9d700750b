"""Image classifiers as tasks: MobileNetV2 by default, or another network (`resnet50_task`), by `tfmp.Trainer`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

from tfmp import _deprecated
from tfmp.models.mobilenet_v2 import build_mobilenet_v2_classifier, cpu_bfloat16_float32_layers
from tfmp.models.resnet50 import build_resnet50_classifier
from tfmp.run import data as data_lib
from tfmp.run.config import ClassifierConfig
from tfmp.run.shipped.image_task import ImageTask, synthetic_batch
from tfmp.run.tasks import SupervisedTask

__all__ = ["ClassifierTask", "NetworkBuilder", "resnet50_task"]

NetworkBuilder = Callable[[tuple[int, int, int], int], keras.Model]


class ClassifierTask(ImageTask, SupervisedTask):
    """An image classifier on a dataset loaded by name (`tfmp.Trainer`): labelled, shuffled, last batch kept.

    By default MobileNetV2 (`tfmp.models.mobilenet_v2`) as the config sets
    it up; another network with `network` (e.g. `resnet50_task`). The
    benchmark's batch is synthetic, so no dataset is loaded for it.

    Args:
        config: The run's settings; default `ClassifierConfig()`.
        name: The model's name.
        network: `(image_shape, num_classes) -> keras.Model`, built under the
            current dtype policy; its output must be float32 (probabilities,
            or logits with `config.from_logits`). None: MobileNetV2 with the
            config's `alpha`, `from_logits` and `batch_norm_momentum`.
        image_shape: The network's input; None: the config's.
        auto_float32_layers: The network's float32 advice for bfloat16 on a
            CPU (what `float32_layers="auto"` keeps); None: MobileNetV2's for
            the default network, none otherwise.
        num_classes: Classes when built without data (a synthetic workload);
            with data, the labels decide.
        cpu_bfloat16_float32_layers: Deprecated name of `auto_float32_layers`.
    """

    config: ClassifierConfig

    def __init__(
        self,
        config: ClassifierConfig | None = None,
        name: str = "mobilenet_v2",
        network: NetworkBuilder | None = None,
        image_shape: tuple[int, int, int] | None = None,
        auto_float32_layers: str | None = None,
        num_classes: int = 10,
        cpu_bfloat16_float32_layers: str | None = None,
    ):
        if cpu_bfloat16_float32_layers is not None:
            _deprecated.warn(
                "ClassifierTask(cpu_bfloat16_float32_layers)",
                received=f"cpu_bfloat16_float32_layers={cpu_bfloat16_float32_layers!r}",
            )
            auto_float32_layers = cpu_bfloat16_float32_layers if auto_float32_layers is None else auto_float32_layers
        super().__init__(
            metrics=["accuracy"],
            config=ClassifierConfig() if config is None else config,
            name=name,
            auto_float32_layers=auto_float32_layers,
        )
        self._network = network
        self._image_shape = image_shape
        self.num_classes = num_classes

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """`(height, width, channels)` of the network's images."""
        return self._image_shape or self.config.image_shape

    @property
    def auto_float32_layers(self) -> str:
        """The network's float32 advice for bfloat16 on a CPU (`tfmp.run.tasks.float32_pattern`)."""
        if self._auto_float32_layers is not None:
            return self._auto_float32_layers
        return cpu_bfloat16_float32_layers(self.image_shape) if self._network is None else ""

    def train_data(self, data: data_lib.Split) -> tf.data.Dataset:
        c = self.config
        return data_lib.make_dataset(data.x_train, data.y_train, batch_size=c.batch_size, seed=c.seed)

    def validation_data(self, data: data_lib.Split) -> tf.data.Dataset:
        return data_lib.make_dataset(
            data.x_val, data.y_val, batch_size=self.config.validation_batch_size, shuffle=False
        )

    def optimizers(self, steps_per_epoch: int) -> tuple[keras.optimizers.Optimizer, ...]:
        c = self.config
        learning_rate = c.learning_rate
        if c.lr_schedule == "cosine":
            learning_rate = keras.optimizers.schedules.CosineDecay(
                learning_rate, decay_steps=c.epochs * steps_per_epoch
            )
        return (keras.optimizers.Adam(learning_rate),)

    def loss(self) -> keras.losses.Loss:
        """The training loss (sparse categorical cross-entropy, from logits if the config says so)."""
        return keras.losses.SparseCategoricalCrossentropy(from_logits=self.config.from_logits)

    def build_model(self, data: data_lib.Split | None) -> keras.Model:
        c = self.config
        num_classes = self.num_classes if data is None else int(max(data.y_train.max(), data.y_val.max())) + 1
        if self._network is not None:
            return self._network(self.image_shape, num_classes)
        return build_mobilenet_v2_classifier(
            self.image_shape,
            num_classes=num_classes,
            alpha=c.alpha,
            from_logits=c.from_logits,
            batch_norm_momentum=c.batch_norm_momentum,
        )

    def hparams(self) -> dict[str, Any]:
        c = self.config
        return {
            "dataset": c.dataset,
            "alpha": c.alpha,
            "learning_rate": c.learning_rate,
            "lr_schedule": c.lr_schedule,
            "from_logits": c.from_logits,
            "batch_norm_momentum": c.batch_norm_momentum,
        }

    def benchmark_batch(self) -> Any:
        """Synthetic uniform [0, 1] images and int32 labels below `num_classes`, seeded by `config.seed`."""
        return synthetic_batch(self.config, self.image_shape, self.num_classes)


def resnet50_task(config: ClassifierConfig | None = None, input_size: int = 64) -> ClassifierTask:
    """ResNet-50 (`tfmp.models.resnet50`) as a classifier variant, at `input_size` squared RGB."""
    return ClassifierTask(
        config,
        "resnet50",
        network=build_resnet50_classifier,  # (image_shape, num_classes); a function, so the task pickles
        image_shape=(input_size, input_size, 3),
    )
