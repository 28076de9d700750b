"""Tests for tfmp/run/tasks.py: what one config builds, defined once."""

import dataclasses

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


def test_gan_summary_route_is_the_seed_layout():
    gan = tasks.GANTask(TINY_GAN)
    assert gan.summary_route("g_loss") == ("generator", "loss")
    assert gan.summary_route("d_loss") == ("discriminator", "loss")
    assert gan.summary_route("d_loss_scale") == ("discriminator", "loss_scale")
    assert gan.summary_route("images_per_sec") == ("", "images_per_sec")
    assert gan.summary_route("val_g_loss") == ("generator_validation", "loss")


def test_the_seed_gans_values_are_defined_once_and_everything_reads_them():
    # The seed: 100 noise values, widths (64, 32, 8) and (24, 64, 128), Adam(1e-3), RMSprop(1e-4), 0.01, 0.1.
    seed = trainers.SEED_GAN
    assert (seed.generator_learning_rate, seed.discriminator_learning_rate) == (1e-3, 1e-4)
    assert (seed.label_softening, seed.label_swap_fraction) == (0.01, 0.1)
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
