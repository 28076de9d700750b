"""Tests for tfmp/run/shipped/classifier_task.py and the shipped tasks' `task_for`."""

import dataclasses

import pytest

import tfmp
from tfmp.run import config as config_lib
from tfmp.run import shipped, tasks

TINY_GAN = config_lib.GANConfig(
    dataset="digits", batch_size=32, latent_dim=8, generator_widths=(8, 8, 8), discriminator_widths=(8, 8, 8)
)
TINY_CLASSIFIER = config_lib.ClassifierConfig(dataset="digits", batch_size=16, alpha=0.35, epochs=3)


def test_classifier_summary_route_is_keras_layout():
    route = shipped.ClassifierTask(TINY_CLASSIFIER).summary_route
    assert route("loss") == ("train", "loss")
    assert route("val_accuracy") == ("validation", "accuracy")
    assert route("loss_scale") == ("train", "loss_scale")


def test_a_classifier_task_compiles_what_its_config_says():
    task = shipped.ClassifierTask(dataclasses.replace(TINY_CLASSIFIER, from_logits=True))
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
    task = shipped.ClassifierTask(dataclasses.replace(TINY_CLASSIFIER, float32_layers="/Conv1$"))
    with tfmp.precision_scope("mixed_bfloat16"):
        built = task.build("mixed_bfloat16", "none", False)
        (kept,) = built.float32_layers
        assert built.float32_pattern == "/Conv1$" and kept.endswith("/Conv1")
        dtypes = {path: layer.compute_dtype for path, layer in tfmp.float32_layers.layer_paths(built.trainer.network)}
        assert dtypes[kept] == "float32" and dtypes[kept.replace("/Conv1", "/bn_Conv1")] == "bfloat16"
        with pytest.raises(config_lib.ConfigError, match="no_such_layer"):
            task.with_config(float32_layers="no_such_layer").build("mixed_bfloat16", "none", False)
    # "auto": MobileNetV2's depthwise convolutions for bfloat16 on a CPU, nothing under float16.
    auto = shipped.ClassifierTask(TINY_CLASSIFIER)
    assert "block_1_depthwise" in tasks.float32_pattern(auto, "mixed_bfloat16")
    assert tasks.float32_pattern(auto, "mixed_float16") == ""
    assert shipped.resnet50_task(TINY_CLASSIFIER).auto_float32_layers == ""


def test_the_classifiers_epochs_keep_the_last_incomplete_batch():
    classifier = shipped.ClassifierTask(TINY_CLASSIFIER).with_config(batch_size=32)
    assert (classifier.steps_per_epoch(100), classifier.steps_per_epoch(31)) == (4, 1)


def test_task_for_names_a_config_it_has_no_model_for():
    assert isinstance(shipped.task_for(TINY_GAN), shipped.GANTask)
    assert isinstance(shipped.task_for(TINY_CLASSIFIER), shipped.ClassifierTask)
    with pytest.raises(config_lib.ConfigError, match="Received: TrainConfig"):
        shipped.task_for(config_lib.TrainConfig())


def test_the_01_keyword_for_the_float32_advice_warns_and_is_the_new_one():
    with pytest.warns(DeprecationWarning, match=r"`ClassifierTask\(cpu_bfloat16_float32_layers\)` is deprecated"):
        task = shipped.ClassifierTask(TINY_CLASSIFIER, cpu_bfloat16_float32_layers="conv1$")
    assert task.auto_float32_layers == "conv1$"
    with pytest.warns(DeprecationWarning, match=r"`Task.cpu_bfloat16_float32_layers` is deprecated; use `Task.auto_"):
        assert task.cpu_bfloat16_float32_layers == "conv1$"
    assert shipped.ClassifierTask(TINY_CLASSIFIER, auto_float32_layers="").auto_float32_layers == ""
