"""Tests for tfmp/run/tasks.py: what one config builds, defined once."""

import dataclasses
import re

import keras
import numpy as np
import pytest

import tfmp
from tfmp import trainers
from tfmp.models import gan as gan_model
from tfmp.run import config as config_lib
from tfmp.run import tasks

TINY_GAN = config_lib.GANConfig(
    dataset="digits", batch_size=32, latent_dim=8, generator_widths=(8, 8, 8), discriminator_widths=(8, 8, 8)
)
TINY_CLASSIFIER = config_lib.ClassifierConfig(dataset="digits", batch_size=16, alpha=0.35, epochs=3)


def test_classifier_summary_route_is_keras_layout():
    task = tasks.ClassifierTask(TINY_CLASSIFIER)
    assert task.summary_route("loss") == ("train", "loss")
    assert task.summary_route("val_accuracy") == ("validation", "accuracy")
    assert task.summary_route("loss_scale") == ("train", "loss_scale")


def test_gan_summary_route_is_the_tutorials_layout():
    gan = tasks.GANTask(TINY_GAN)
    assert gan.summary_route("g_loss") == ("generator", "loss")
    assert gan.summary_route("d_loss") == ("discriminator", "loss")
    assert gan.summary_route("d_loss_scale") == ("discriminator", "loss_scale")
    assert gan.summary_route("images_per_sec") == ("", "images_per_sec")
    assert gan.summary_route("val_g_loss") == ("generator_validation", "loss")


def test_the_tutorial_gans_values_are_defined_once_and_everything_reads_them():
    # The tutorial: 100 noise values, widths (64, 32, 8) and (24, 64, 128), Adam(1e-3), RMSprop(1e-4), 0.01, 0.1.
    tutorial = trainers.TUTORIAL_GAN
    assert (tutorial.generator_learning_rate, tutorial.discriminator_learning_rate) == (1e-3, 1e-4)
    assert (tutorial.label_softening, tutorial.label_swap_fraction) == (0.01, 0.1)
    default = config_lib.GANConfig()
    assert (
        (default.latent_dim, default.generator_widths, default.discriminator_widths)
        == (gan_model.LATENT_DIM, gan_model.GENERATOR_WIDTHS, gan_model.DISCRIMINATOR_WIDTHS)
        == (100, (64, 32, 8), (24, 64, 128))
    )
    with tfmp.precision_scope("float32"):
        built = tasks.GANTask(
            dataclasses.replace(default, latent_dim=8, generator_widths=(8, 8, 8), discriminator_widths=(8, 8, 8))
        ).build("float32", "none", False)
        plain = trainers.GANTrainer(gan_model.build_generator(8, (8, 8, 8)), gan_model.build_discriminator((8, 8, 8)))
        plain.compile()
    for trainer in (built.trainer, plain):
        assert (trainer.label_softening, trainer.label_swap_fraction) == (0.01, 0.1)
        g, d = (
            opt.inner_optimizer if isinstance(opt, keras.optimizers.LossScaleOptimizer) else opt
            for opt in (trainer.generator_optimizer, trainer.discriminator_optimizer)
        )
        assert (type(g).__name__, type(d).__name__) == ("Adam", "RMSprop")
        assert (float(g.learning_rate), float(d.learning_rate)) == (np.float32(1e-3), np.float32(1e-4))


def test_a_classifier_task_compiles_what_its_config_says():
    task = tasks.ClassifierTask(dataclasses.replace(TINY_CLASSIFIER, from_logits=True))
    split = task.load_data()
    steps = task.steps_per_epoch(len(split.x_train))
    with tfmp.precision_scope("mixed_float16"):
        built = task.build("mixed_float16", "dynamic", False, steps, split)
    trainer = built.trainer
    (optimizer,) = trainer.optimizers.values()
    assert isinstance(optimizer, tfmp.LossScaleOptimizer) and optimizer.dynamic
    schedule = optimizer.inner_optimizer.learning_rate
    # The cosine schedule decays over the whole run: epochs x steps per epoch.
    assert task.config.epochs * steps == 3 * -(-len(split.x_train) // 16)
    schedule_config = optimizer.inner_optimizer.get_config()["learning_rate"]
    assert schedule_config["class_name"] == "CosineDecay" and schedule_config["config"]["decay_steps"] == 3 * steps
    assert float(schedule) == pytest.approx(1e-3)
    assert trainer.network.output_shape == (None, 10) and trainer.network.layers[-1].dtype_policy.name == "float32"
    assert built.float32_layers == () and built.float32_pattern == ""
    assert task.loss().get_config()["from_logits"] is True
    assert task.hparams()["from_logits"] is True


def test_the_float32_layers_are_applied_by_build_and_a_pattern_matching_none_is_refused():
    task = tasks.ClassifierTask(dataclasses.replace(TINY_CLASSIFIER, float32_layers="/Conv1$"))
    with tfmp.precision_scope("mixed_bfloat16"):
        built = task.build("mixed_bfloat16", "none", False)
        (kept,) = built.float32_layers
        assert built.float32_pattern == "/Conv1$" and kept.endswith("/Conv1")
        dtypes = {path: layer.compute_dtype for path, layer in tfmp.precision.layer_paths(built.trainer.network)}
        assert dtypes[kept] == "float32" and dtypes[kept.replace("/Conv1", "/bn_Conv1")] == "bfloat16"
        with pytest.raises(config_lib.ConfigError, match="no_such_layer"):
            task.replace(float32_layers="no_such_layer").build("mixed_bfloat16", "none", False)
    # "auto": MobileNetV2's depthwise convolutions for bfloat16 on a CPU, nothing under float16.
    auto = tasks.ClassifierTask(TINY_CLASSIFIER)
    assert "block_1_depthwise" in auto.float32_pattern("mixed_bfloat16")
    assert auto.float32_pattern("mixed_float16") == ""
    assert tasks.resnet50_task(TINY_CLASSIFIER).cpu_bfloat16_float32_layers == ""


def test_steps_per_epoch_drops_the_gans_last_batch_keeps_the_classifiers_and_refuses_none():
    gan, classifier = tasks.GANTask(TINY_GAN), tasks.ClassifierTask(TINY_CLASSIFIER)
    assert (gan.steps_per_epoch(100), classifier.replace(batch_size=32).steps_per_epoch(100)) == (3, 4)
    assert gan.replace(steps_per_epoch=2).steps_per_epoch(100) == 2
    with pytest.raises(config_lib.ConfigError, match="batch_size=32"):
        gan.steps_per_epoch(31)
    assert classifier.replace(batch_size=32).steps_per_epoch(31) == 1


def test_batch_at_is_the_streams_batch_of_that_step_across_epochs():
    task = tasks.ClassifierTask(dataclasses.replace(TINY_CLASSIFIER, batch_size=512))
    split = task.load_data()
    steps = task.steps_per_epoch(len(split.x_train))
    stream = [x.numpy() for x, _ in task.stream(split).take(2 * steps + 1)]
    for index in (0, steps - 1, steps, 2 * steps):
        np.testing.assert_array_equal(task.batch_at(split, index)[0].numpy(), stream[index])
    # A new epoch is reshuffled: its first batch is not the first epoch's.
    assert not np.array_equal(stream[0], stream[steps])


def test_task_for_names_a_config_it_has_no_model_for():
    assert isinstance(tasks.task_for(TINY_GAN), tasks.GANTask)
    assert isinstance(tasks.task_for(TINY_CLASSIFIER), tasks.ClassifierTask)
    with pytest.raises(config_lib.ConfigError, match="Received: TrainConfig"):
        tasks.task_for(config_lib.TrainConfig())


# --- a model of your own -----------------------------------------------------------------


def _dense_model(inputs=4, outputs=3, activation="softmax"):
    def build():
        x = keras.Input((inputs,), name="features")
        y = keras.layers.Dense(outputs, kernel_initializer=keras.initializers.GlorotUniform(0))(x)
        return keras.Model(x, keras.layers.Activation(activation, dtype="float32")(y))

    return build


def _arrays(n=20, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 4)).astype(np.float32), rng.integers(0, 3, n).astype(np.int32)


def test_a_supervised_task_takes_arrays_a_dataset_of_examples_or_a_batches_function():
    import tensorflow as tf

    x, y = _arrays()
    small = config_lib.TrainConfig(batch_size=8, seed=5)

    def batches(batch_size, seed):
        return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(20, seed=seed).batch(batch_size)

    forms = {"arrays": (x, y), "examples": tf.data.Dataset.from_tensor_slices((x, y)), "function": batches}
    for form, data in forms.items():
        task = tasks.SupervisedTask(_dense_model(), data, loss="sparse_categorical_crossentropy", config=small)
        assert task.steps_per_epoch(None) == 3, form  # 20 examples in batches of 8
        first = [b[1].numpy().tolist() for b in task.train_data(None)]
        again = [b[1].numpy().tolist() for b in task.train_data(None)]
        assert first == again and sorted(sum(first, [])) == sorted(y.tolist()), form  # one epoch, seeded order
        other_seed = [b[1].numpy().tolist() for b in task.replace(seed=6).train_data(None)]
        assert other_seed != first, form
        stream = [b[1].numpy().tolist() for b in task.stream(None).take(4)]
        assert stream[:3] == first and stream[3] != first[0], form  # the next epoch is reshuffled
    assert task.replace(steps_per_epoch=2).steps_per_epoch(None) == 2


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
        tasks.SupervisedTask(_dense_model()(), _arrays(), loss="mse")
    endless = tasks.SupervisedTask(_dense_model(), tf.data.Dataset.from_tensor_slices(_arrays()).repeat(), loss="mse")
    with pytest.raises(config_lib.ConfigError, match="steps_per_epoch=None"):
        endless.steps_per_epoch(None)
    assert endless.replace(steps_per_epoch=4).steps_per_epoch(None) == 4
    with pytest.raises(TypeError, match="Received: 'not data'"):
        tasks.SupervisedTask(_dense_model(), "not data", loss="mse").train_data(None)


def test_a_pipeline_that_repeats_forever_is_told_to_set_steps_per_epoch_and_an_unknown_length_its_cardinality():
    import tensorflow as tf

    def forever(batch_size, seed):
        return tf.data.Dataset.from_tensor_slices(_arrays()).batch(batch_size).repeat()

    def unknown(batch_size, seed):
        return tf.data.Dataset.from_tensor_slices(_arrays()).filter(lambda x, y: y >= 0).batch(batch_size)

    endless = tasks.SupervisedTask(_dense_model(), forever, loss="mse", name="endless")
    with pytest.raises(config_lib.ConfigError) as raised:
        endless.steps_per_epoch(None)
    assert raised.value.render("--steps_per_epoch") == (
        "--steps_per_epoch must be set: the training pipeline of 'endless' repeats forever, so an epoch has no end. "
        "Set it to the steps of an epoch, or make the pipeline give one epoch (no repeat()). "
        "Received: --steps_per_epoch=None"
    )
    assert "cardinality" not in str(raised.value) and "assert_cardinality" not in str(raised.value)
    unsized = tasks.SupervisedTask(_dense_model(), unknown, loss="mse", name="unsized")
    with pytest.raises(config_lib.ConfigError, match=r"'unsized'.*not known \(tf.data cardinality -2\)") as raised:
        unsized.steps_per_epoch(None)
    assert "assert_cardinality" in str(raised.value)
    assert (
        endless.replace(steps_per_epoch=4).steps_per_epoch(None),
        unsized.replace(steps_per_epoch=2).steps_per_epoch(None),
    ) == (4, 2)


MODULE = """
import keras
from tfmp.run import tasks

def build():
    x = keras.Input((4,))
    return keras.Model(x, keras.layers.Dense(3, activation="softmax", dtype="float32")(x))

TASK = tasks.SupervisedTask(build, (None, None), loss="mse", name="listed")
NOT_A_TASK = 42
TEXT = "TASK"
MODEL = build()

class NotATask:
    pass

def make_task():
    return TASK

def needs_an_argument(config):
    return TASK

class MyTask(tasks.SupervisedTask):
    def __init__(self):
        super().__init__(build, (None, None), loss="mse", name="subclassed")
"""


@pytest.mark.parametrize(
    "name, error",
    [
        ("no_colon", "task: must be MODULE:NAME"),
        ("no_such_module_xyz:TASK", "no module 'no_such_module_xyz' on the Python path"),
        ("{file}:MISSING", "has no attribute 'MISSING'. It defines these tasks: TASK"),
        ("{file}:NOT_A_TASK", "NOT_A_TASK is an int (42), not a Task; NAME must be a tfmp.run.tasks.Task"),
        ("{file}:TEXT", "TEXT is a str ('TASK'), not a Task; NAME must be"),
        ("{file}:MODEL", "MODEL is a Functional model (a keras.Model), not a Task; give the function that builds"),
        (
            "{file}:build",
            "build is a function that returned a Functional model (a keras.Model), not a Task; give the function "
            "that builds the model to tfmp.run.tasks.SupervisedTask(model=",
        ),
        ("{file}:NotATask", "NotATask is a class (NotATask) that is not a Task subclass; NAME must be"),
        ("tfmp.run.tasks:Task", "Task is an abstract Task subclass (it lacks build_trainer, train_data)"),
        ("{file}:needs_an_argument", "is a function that takes arguments"),
        ("/no/such/file.py:TASK", "no such file '/no/such/file.py'"),
    ],
)
def test_load_names_the_value_and_what_name_must_be(name, error, tmp_path):
    path = tmp_path / "user_tasks_errors.py"
    path.write_text(MODULE)
    spec = name.format(file=path)
    with pytest.raises(config_lib.ConfigError, match=re.escape(error)) as raised:
        tasks.load(spec)
    assert str(raised.value).startswith("task: ") and str(raised.value).endswith(f" Received: task={spec!r}")
    assert "\n" not in str(raised.value) and " is a int" not in str(raised.value)


def test_load_names_what_a_function_returned_in_full(tmp_path):
    path = tmp_path / "user_tasks_returned.py"
    path.write_text(MODULE)
    with pytest.raises(config_lib.ConfigError) as raised:
        tasks.load(f"{path}:build")
    assert str(raised.value) == (
        "task: build is a function that returned a Functional model (a keras.Model), not a Task; give the function "
        "that builds the model to tfmp.run.tasks.SupervisedTask(model=..., train_data=..., loss=...) and name that "
        f"task. Received: task='{path}:build'"
    )


@pytest.mark.parametrize(
    "source, error",
    [
        ("x = 1\ny = 2\ndef broken(:\n", "line 3: SyntaxError: invalid syntax."),
        ("if True:\nx = 1\n", "line 2: IndentationError: expected an indented block after 'if' statement on line 1."),
        (
            "import os\nimport no_such_module_for_tfmp_tests\n",
            "line 2: ModuleNotFoundError: No module named 'no_such_module_for_tfmp_tests'; install "
            "'no_such_module_for_tfmp_tests' or fix the import.",
        ),
        ("\n\nfrom os import no_such_name\n", "line 3: ImportError: cannot import name 'no_such_name' from 'os'"),
    ],
    ids=["syntax", "indentation", "missing-module", "missing-name"],
)
def test_a_task_file_that_does_not_import_is_one_line_naming_the_file_the_line_and_the_error(
    source, error, tmp_path, monkeypatch
):
    name = f"user_tasks_broken_{abs(hash(source))}"
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / f"{name}.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    spec = f"examples/{name}.py:TASK"
    with pytest.raises(config_lib.ConfigError) as raised:
        tasks.load(spec)
    message = str(raised.value)
    assert message.startswith(f"task: examples/{name}.py {error}") and message.endswith(f" Received: task={spec!r}")
    assert "\n" not in message
    # By module name too (the folder on the path): the same file and line.
    monkeypatch.syspath_prepend(str(tmp_path / "examples"))
    with pytest.raises(config_lib.ConfigError) as raised:
        tasks.load(f"{name}:TASK")
    assert str(raised.value).startswith(f"task: examples/{name}.py {error}")


def test_load_takes_a_task_a_subclass_or_a_function_from_a_module_or_a_file(tmp_path, monkeypatch):
    path = tmp_path / "user_tasks_ok.py"
    path.write_text(MODULE)
    assert tasks.load(f"{path}:TASK").name == "listed"
    monkeypatch.syspath_prepend(str(tmp_path))
    assert tasks.load("user_tasks_ok:make_task").name == "listed"
    assert tasks.load("user_tasks_ok:MyTask").name == "subclassed"
    assert isinstance(tasks.load("tfmp.run.tasks:GANTask"), tasks.GANTask)
