"""Tests for tfmp/run/tasks.py: the public Task, as small as what a task is, its hooks' defaults, and SupervisedTask."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf
import tiny
from fresh_python import imports_in_order

import tfmp
from tfmp import trainers
from tfmp.models import gan as gan_model
from tfmp.run import config as config_lib
from tfmp.run import shipped, tasks


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
    assert len(hooks) == 10 and all(hasattr(tasks.Task, hook) for hook in hooks)
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


def test_each_method_hooks_default_is_its_own_body_never_a_none_filled_in_elsewhere():
    import inspect

    for hook in tasks.Task.hooks():
        method = getattr(tasks.Task, hook)
        if not callable(method):
            continue
        body = inspect.getsource(method).split('"""')[-1]
        assert body.strip() and "return None" not in body, hook


def test_tasks_imports_nothing_above_it_and_nothing_by_name():
    import ast

    tree = ast.parse(open(tasks.__file__).read())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "importlib" not in imported and not any(m.startswith("tfmp.run.shipped") for m in imported)
    assert not any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body)
    found, loaded = imports_in_order()["tfmp.run.tasks"]
    assert not found and not [m for m in loaded if m.startswith(("tfmp.run.shipped", "tfmp.run.task_loader"))]


def test_tfmp_01s_shipped_task_names_warn_and_are_the_shipped_tasks():
    import warnings

    from tfmp.run import shipped

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import tfmp.tasks as old

        found = (old.GANTask, old.ClassifierTask, old.resnet50_task, old.task_for)
    assert found == (shipped.GANTask, shipped.ClassifierTask, shipped.resnet50_task, shipped.task_for)
    messages = [str(w.message) for w in caught if w.category is DeprecationWarning]
    assert "`tfmp.tasks.GANTask` is deprecated; use `tfmp.run.shipped.GANTask`. It will be removed in tfmp 0.3." in (
        messages
    )
    assert not hasattr(tasks, "ImageTask") and not hasattr(tasks, "load")


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
    assert task.with_config(steps_per_epoch=None).steps_per_epoch(None) == 2
    with tfmp.precision_scope("mixed_float16"):
        built = task.build("mixed_float16", "dynamic", False, 1)
        history = built.trainer.fit(task.stream(None, 0), steps_per_epoch=1, epochs=1, verbose=0).history
    assert np.isfinite(history["g_loss"]).all() and np.isfinite(history["d_loss"]).all()
    assert task.probe(None).shape == (8, 28, 28, 1)


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
        assert task.steps_per_epoch(None) == 3, form  # 20 examples in batches of 8
        first = [b[1].numpy().tolist() for b in task.train_data(None)]
        again = [b[1].numpy().tolist() for b in task.train_data(None)]
        assert first == again and sorted(sum(first, [])) == sorted(y.tolist()), form  # one epoch, seeded order
        other_seed = [b[1].numpy().tolist() for b in task.with_config(seed=6).train_data(None)]
        assert other_seed != first, form
        stream = [b[1].numpy().tolist() for b in task.stream(None, 0).take(4)]
        assert stream[:3] == first and stream[3] != first[0], form  # the next epoch is reshuffled
    assert task.with_config(steps_per_epoch=2).steps_per_epoch(None) == 2


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
        built = task.build("mixed_bfloat16", "none", False, task.steps_per_epoch(None))
    history = built.trainer.fit(task.train_data(None), epochs=2, verbose=0).history
    assert len(history["loss"]) == 2 and np.isfinite(history["loss"]).all()
    assert set(task.probe(None)[0]) == {"a", "b"}
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
        endless.steps_per_epoch(None)
    assert endless.with_config(steps_per_epoch=4).steps_per_epoch(None) == 4
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


def test_run_dir_is_the_deprecated_name_of_the_callbacks_tensorboard_dir():
    import types

    plain = tasks.SupervisedTask(tiny.dense_model(), tiny.arrays(), loss="mse")
    gan = shipped.GANTask(config_lib.GANConfig(dataset="digits", num_samples=4))
    message = r"`Task\.callbacks\(run_dir\)` is deprecated; use `Task\.callbacks\(tensorboard_dir\)`"
    with pytest.warns(DeprecationWarning, match=message):
        assert plain.callbacks(None, run_dir="logs/run") == []
    with pytest.warns(DeprecationWarning, match=message):
        (samples,) = gan.callbacks(types.SimpleNamespace(generator=None), run_dir="logs/run")
    assert samples.summary_dir == os.path.join("logs/run", "generator")


# --- the hooks' defaults -----------------------------------------------------------------


def test_a_user_task_without_the_hooks_gets_its_epochs_stream_and_batches_from_its_pipeline():
    x, y = tiny.arrays()
    task = tasks.SupervisedTask(tiny.dense_model(), (x, y), loss="mse", config=config_lib.TrainConfig(batch_size=8))
    assert task.steps_per_epoch(None) == 3
    first = [b[1].numpy().tolist() for b in task.train_data(None)]
    resumed = [b[1].numpy().tolist() for b in task.stream(None, 2).take(2)]
    assert resumed[0] == first[2] and resumed[1] != first[0]  # step 3 is the next epoch's, reshuffled


def test_a_shipped_tasks_stream_from_a_step_is_that_steps_batch_across_epochs():
    task = shipped.ClassifierTask(config_lib.ClassifierConfig(dataset="digits", batch_size=512, alpha=0.35, epochs=3))
    split = task.load_data()
    steps = task.steps_per_epoch(len(split.x_train))
    stream = [x.numpy() for x, _ in task.stream(split, 0).take(2 * steps + 1)]
    for index in (0, steps - 1, steps, 2 * steps):
        np.testing.assert_array_equal(next(iter(task.stream(split, index)))[0].numpy(), stream[index])
    # A new epoch is reshuffled: its first batch is not the first epoch's.
    assert not np.array_equal(stream[0], stream[steps])


def test_a_pipeline_that_repeats_forever_is_told_to_set_steps_per_epoch_and_an_unknown_length_its_cardinality():
    def forever(batch_size, seed):
        return tf.data.Dataset.from_tensor_slices(tiny.arrays()).batch(batch_size).repeat()

    def unknown(batch_size, seed):
        return tf.data.Dataset.from_tensor_slices(tiny.arrays()).filter(lambda x, y: y >= 0).batch(batch_size)

    endless = tasks.SupervisedTask(tiny.dense_model(), forever, loss="mse", name="endless")
    with pytest.raises(config_lib.ConfigError) as raised:
        endless.steps_per_epoch(None)
    assert raised.value.render("--steps_per_epoch") == (
        "--steps_per_epoch must be set: the training pipeline of 'endless' repeats forever, so an epoch has no end. "
        "Set it to the steps of an epoch, or make the pipeline give one epoch (no repeat()). "
        "Received: --steps_per_epoch=None"
    )
    assert "cardinality" not in str(raised.value) and "assert_cardinality" not in str(raised.value)
    unsized = tasks.SupervisedTask(tiny.dense_model(), unknown, loss="mse", name="unsized")
    with pytest.raises(config_lib.ConfigError, match=r"'unsized'.*not known \(tf.data cardinality -2\)") as raised:
        unsized.steps_per_epoch(None)
    assert "assert_cardinality" in str(raised.value)
    assert (
        endless.with_config(steps_per_epoch=4).steps_per_epoch(None),
        unsized.with_config(steps_per_epoch=2).steps_per_epoch(None),
    ) == (4, 2)


def _softmax_model():
    x = keras.Input((4,))
    return keras.Model(x, keras.layers.Dense(3, activation="softmax", dtype="float32")(x))


def test_a_user_task_without_a_probe_gets_its_first_training_batch():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(20, 4)).astype(np.float32), rng.integers(0, 3, 20)
    task = tasks.SupervisedTask(_softmax_model, (x, y), loss="mse", config=config_lib.TrainConfig(batch_size=8))
    features, labels = task.probe(None)
    first_features, first_labels = next(iter(task.train_data(None)))
    np.testing.assert_array_equal(features.numpy(), first_features.numpy())
    assert labels.numpy().tolist() == first_labels.numpy().tolist() and features.shape == (8, 4)


def test_a_shipped_image_task_probes_its_first_images_in_the_splits_order():
    task = shipped.ClassifierTask(config_lib.ClassifierConfig(dataset="digits", batch_size=4))
    split = task.load_data()
    images, labels = task.probe(split)
    np.testing.assert_array_equal(images.numpy(), split.x_train[:4])
    assert labels.numpy().tolist() == split.y_train[:4].tolist()


def test_an_empty_pipeline_is_named():
    x = np.zeros((0, 4), np.float32)
    task = tasks.SupervisedTask(_softmax_model, (x, np.zeros(0)), loss="mse", name="empty")
    with pytest.raises(config_lib.ConfigError, match="training data of 'empty' is empty"):
        task.probe(None)


def _linear_model():
    x = keras.Input((4,))
    return keras.Model(x, keras.layers.Dense(3, dtype="float32")(x))


def test_a_user_task_gets_keras_layout_examples_its_loss_and_first_metric():
    task = tasks.SupervisedTask(_linear_model, loss="mse", metrics=[keras.metrics.MeanAbsoluteError(), "mse"])
    assert task.console_fields() == (("Loss", "loss"), ("Mean Absolute Error", "mean_absolute_error"))
    route = task.summary_route
    assert (route("loss"), route("val_mean_absolute_error"), route("loss_scale")) == (
        ("train", "loss"),
        ("validation", "mean_absolute_error"),
        ("train", "loss_scale"),
    )
    assert (task.example_unit, task.describe_data()) == ("ex", "")
    assert tasks.SupervisedTask(_linear_model, loss="mse").console_fields() == (("Loss", "loss"),)


def test_a_task_that_defines_them_is_shown_its_own_way():
    gan = shipped.GANTask(config_lib.GANConfig(dataset="digits"))
    assert gan.console_fields() == (("G Loss", "g_loss"), ("D Loss", "d_loss"))
    assert gan.summary_route("d_loss_scale") == ("discriminator", "loss_scale")
    assert (gan.example_unit, gan.describe_data()) == ("img", "dataset=digits")
