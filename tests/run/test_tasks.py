"""Tests for tfmp/run/tasks.py: the public Task, as small as what a task is, and SupervisedTask."""

import keras
import numpy as np
import pytest
import tensorflow as tf
import tiny

import tfmp
from tfmp import trainers
from tfmp.models import gan as gan_model
from tfmp.run import config as config_lib
from tfmp.run import diagnostics, epochs, tasks


def test_a_tasks_public_surface_is_what_a_task_is():
    public = {name for name in dir(tasks.Task) if not name.startswith("_")}
    written = {"name", "with_config", "replace", "load_data", "train_data", "validation_data", "optimizers"}
    written |= {"build_trainer", "build", "hparams", "callbacks", "loss", "metrics", "hooks"}
    assert public == written | set(tasks.Task.hooks())
    assert "replace" in written  # deprecated: with_config
    assert tasks.Task.__abstractmethods__ == {"train_data", "build_trainer"}
    added = {name for name in dir(tasks.SupervisedTask) if not name.startswith("_")} - public
    assert added == {"build_model"}


def test_every_hook_the_framework_calls_is_declared_and_documented_on_task_and_looked_up_nowhere():
    import pathlib
    import re

    hooks = tasks.Task.hooks()
    assert len(hooks) == 11 and all(hasattr(tasks.Task, hook) for hook in hooks)
    documented = tasks.Task.__doc__.split("Optional hooks", 1)[1]
    assert set(re.findall(r"`(\w+)`", documented)) - {"hooks"} == set(hooks)
    package = pathlib.Path(tasks.__file__).parents[1]
    lookups = [
        f"{path}:{number}"
        for path in sorted(package.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"(hasattr|getattr)\((task|self\.task|spec)\b", line)
    ]
    assert lookups == []


def test_the_old_names_are_the_shipped_tasks_and_the_loader():
    from tfmp.run import shipped, task_loader

    assert (tasks.GANTask, tasks.ClassifierTask, tasks.resnet50_task, tasks.task_for) == (
        shipped.GANTask,
        shipped.ClassifierTask,
        shipped.resnet50_task,
        shipped.task_for,
    )
    assert tasks.load is task_loader.load
    assert not hasattr(tasks, "ImageTask")


class _TwoNetworks(tasks.Task):
    """A GAN-like task written from the documented methods only: data, optimizers and the trainer."""

    name = "two_networks"

    def train_data(self, data):
        images = np.random.default_rng(0).uniform(0, 1, (16, 28, 28, 1)).astype(np.float32)
        return tf.data.Dataset.from_tensor_slices(images).batch(self.config.batch_size)

    def optimizers(self, steps_per_epoch):
        return keras.optimizers.Adam(1e-3), keras.optimizers.RMSprop(1e-4)

    def build_trainer(self, loss_scale, jit_compile, steps_per_epoch, data):
        trainer = trainers.GANTrainer(
            gan_model.build_generator(8, (8, 8, 8)),
            gan_model.build_discriminator((8, 8, 8)),
        )
        trainer.compile(*self.optimizers(steps_per_epoch), loss_scale=loss_scale, skip_nonfinite=True)
        return trainer


def test_a_new_kind_of_task_overriding_only_the_documented_methods_trains_a_step():
    task = _TwoNetworks(config_lib.TrainConfig(batch_size=8, steps_per_epoch=1, epochs=1))
    assert epochs.steps_per_epoch(task.with_config(steps_per_epoch=None), None) == 2
    with tfmp.precision_scope("mixed_float16"):
        built = task.build("mixed_float16", "dynamic", False, 1)
        history = built.trainer.fit(epochs.stream(task, None), steps_per_epoch=1, epochs=1, verbose=0).history
    assert np.isfinite(history["g_loss"]).all() and np.isfinite(history["d_loss"]).all()
    assert diagnostics.probe(task, None).shape == (8, 28, 28, 1)


# --- a model of your own -----------------------------------------------------------------


def test_a_supervised_task_takes_arrays_a_dataset_of_examples_or_a_batches_function():
    import tensorflow as tf

    x, y = tiny.arrays()
    small = config_lib.TrainConfig(batch_size=8, seed=5)

    def batches(batch_size, seed):
        return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(20, seed=seed).batch(batch_size)

    forms = {"arrays": (x, y), "examples": tf.data.Dataset.from_tensor_slices((x, y)), "function": batches}
    for form, data in forms.items():
        task = tasks.SupervisedTask(tiny.dense_model(), data, loss="sparse_categorical_crossentropy", config=small)
        assert epochs.steps_per_epoch(task, None) == 3, form  # 20 examples in batches of 8
        first = [b[1].numpy().tolist() for b in task.train_data(None)]
        again = [b[1].numpy().tolist() for b in task.train_data(None)]
        assert first == again and sorted(sum(first, [])) == sorted(y.tolist()), form  # one epoch, seeded order
        other_seed = [b[1].numpy().tolist() for b in task.with_config(seed=6).train_data(None)]
        assert other_seed != first, form
        stream = [b[1].numpy().tolist() for b in epochs.stream(task, None).take(4)]
        assert stream[:3] == first and stream[3] != first[0], form  # the next epoch is reshuffled
    assert epochs.steps_per_epoch(task.with_config(steps_per_epoch=2), None) == 2


def test_a_supervised_task_builds_dict_inputs_and_regression_targets():
    rng = np.random.default_rng(0)
    features = {"a": rng.normal(size=(12, 2)).astype(np.float32), "b": rng.normal(size=(12, 3)).astype(np.float32)}
    targets = rng.normal(size=(12, 1)).astype(np.float32)

    def model():
        a, b = keras.Input((2,), name="a"), keras.Input((3,), name="b")
        joined = keras.layers.Concatenate()([a, b])
        return keras.Model({"a": a, "b": b}, keras.layers.Dense(1, dtype="float32")(joined))

    task = tasks.SupervisedTask(
        model,
        (features, targets),
        loss="mse",
        optimizer=keras.optimizers.SGD(0.01),
        config=config_lib.TrainConfig(batch_size=4),
    )
    with tfmp.precision_scope("mixed_bfloat16"):
        built = task.build("mixed_bfloat16", "none", False, epochs.steps_per_epoch(task, None))
    history = built.trainer.fit(task.train_data(None), epochs=2, verbose=0).history
    assert len(history["loss"]) == 2 and np.isfinite(history["loss"]).all()
    assert set(diagnostics.probe(task, None)[0]) == {"a", "b"}
    # Each build gets a fresh optimizer: the task's is copied from its config, never shared.
    with tfmp.precision_scope("float32"):
        again = task.build("float32", "none", False)
    assert again.trainer.optimizer.inner_optimizer is not built.trainer.optimizer.inner_optimizer


def test_a_supervised_task_refuses_a_model_instead_of_a_function_and_an_unknown_length():
    import tensorflow as tf

    with pytest.raises(TypeError, match="function that builds the model"):
        tasks.SupervisedTask(tiny.dense_model()(), tiny.arrays(), loss="mse")
    endless = tasks.SupervisedTask(
        tiny.dense_model(), tf.data.Dataset.from_tensor_slices(tiny.arrays()).repeat(), loss="mse"
    )
    with pytest.raises(config_lib.ConfigError, match="steps_per_epoch=None"):
        epochs.steps_per_epoch(endless, None)
    assert epochs.steps_per_epoch(endless.with_config(steps_per_epoch=4), None) == 4
    with pytest.raises(TypeError, match="Received: 'not data'"):
        tasks.SupervisedTask(tiny.dense_model(), "not data", loss="mse").train_data(None)


def test_with_config_copies_the_task_with_new_settings_and_replace_still_does_with_a_warning():
    task = tiny.tiny("logs")
    other = task.with_config(seed=7)
    assert (other.config.seed, task.config.seed, type(other)) == (7, tiny.TINY_GAN.seed, type(task))
    with pytest.warns(
        DeprecationWarning,
        match=r"`Task\.replace` is deprecated; use `Task\.with_config`\. It will be removed in tfmp 0\.3",
    ):
        old = task.replace(seed=7)
    assert old.config == other.config
