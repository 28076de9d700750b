"""The shipped tasks: the original tutorial's GAN and the image classifiers, apart from the public task API.

* `gan_task.py`: `GANTask`, the tutorial's GAN (`tfmp.models.gan`);
* `classifier_task.py`: `ClassifierTask`, MobileNetV2 or another image network
  (`resnet50_task`);
* `image_task.py`: `ImageTask`, the base both share (a dataset by name,
  its epochs, its probe, a synthetic batch, `drop_remainder`).

`task_for(config)` is the shipped task a config describes. Each is a
`tfmp.run.tasks.Task` subclass, as a user's model would be.
"""

from __future__ import annotations

from tfmp.run.config import ClassifierConfig, ConfigError, GANConfig, TrainConfig
from tfmp.run.shipped.classifier_task import ClassifierTask, NetworkBuilder, resnet50_task
from tfmp.run.shipped.gan_task import GANTask
from tfmp.run.shipped.image_task import ImageTask
from tfmp.run.tasks import Task

__all__ = ["ClassifierTask", "GANTask", "ImageTask", "NetworkBuilder", "resnet50_task", "task_for"]


def task_for(config: TrainConfig) -> Task:
    """The shipped task a config describes: `GANTask` for a `GANConfig`, `ClassifierTask` for a `ClassifierConfig`.

    Raises:
        ConfigError: for another kind of config, naming it.
    """
    if isinstance(config, GANConfig):
        return GANTask(config)
    if isinstance(config, ClassifierConfig):
        return ClassifierTask(config)
    raise ConfigError(
        "No shipped model for this config; use GANConfig or ClassifierConfig, or give your model as a "
        f"tfmp.run.tasks.Task. Received: {type(config).__name__}"
    )
