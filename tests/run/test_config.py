"""Tests for tfmp/run/config.py: the settings, refused before anything runs, and a pure validate()."""

import ast
import dataclasses
import math
import os

import numpy as np
import pytest
from fresh_python import imports_in_order

from tfmp.run import config as config_lib
from tfmp.run import options

TINY_GAN = config_lib.GANConfig(dataset="digits", batch_size=32)
TINY_CLASSIFIER = config_lib.ClassifierConfig(dataset="digits", batch_size=16)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"precision": "float8"}, "precision='float8'"),
        ({"loss_scale": "-4"}, "loss_scale='-4'"),
        ({"loss_scale": "huge"}, "loss_scale='huge'"),
        ({"xla": "maybe"}, "xla='maybe'"),
        ({"batch_size": 0}, "batch_size=0"),
        ({"epochs": -1}, "epochs=-1"),
        ({"steps_per_epoch": 0}, "steps_per_epoch=0"),
        ({"dataset": "cifar10"}, "dataset='cifar10'"),
        ({"dataset": "imagenet"}, "dataset='imagenet'"),
        ({"generator_learning_rate": 0.0}, "generator_learning_rate=0.0"),
        ({"generator_widths": (8, 8)}, "generator_widths=(8, 8)"),
        ({"label_softening": 0.5}, "label_softening=0.5"),
    ],
)
def test_gan_config_refuses_bad_values_naming_them(change, message, tmp_path):
    config = dataclasses.replace(TINY_GAN, logdir=str(tmp_path), **change)
    with pytest.raises(config_lib.ConfigError) as error:
        config.validate()
    assert message in str(error.value)


def test_classifier_config_refuses_bad_values(tmp_path):
    for change, message in [
        ({"alpha": 0.0}, "alpha=0.0"),
        ({"dataset": "mnist"}, "dataset='mnist'"),
        ({"batch_norm_momentum": 1.0}, "batch_norm_momentum=1.0"),
        ({"lr_schedule": "linear"}, "lr_schedule='linear'"),
    ]:
        with pytest.raises(config_lib.ConfigError, match=message.replace("(", r"\(")):
            dataclasses.replace(TINY_CLASSIFIER, logdir=str(tmp_path), **change).validate()


def test_the_defaults_are_the_tutorials():
    config = config_lib.GANConfig()
    assert (config.batch_size, config.dataset, config.latent_dim) == (4096, "mnist", 100)
    assert (config.generator_learning_rate, config.discriminator_learning_rate) == (1e-3, 1e-4)
    assert (config.label_softening, config.label_swap_fraction) == (0.01, 0.1)
    assert config_lib.ClassifierConfig().dataset == "cifar10"


def test_validate_is_pure_it_creates_nothing(tmp_path):
    logdir, checkpoints = tmp_path / "logs" / "deep", tmp_path / "checkpoints"
    dataclasses.replace(TINY_GAN, logdir=str(logdir), checkpoint_dir=str(checkpoints), run_name="a/b").validate()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "config, change, message",
    [
        # str
        (TINY_GAN, {"run_name": None}, "run_name must be a string. Received: run_name=None"),
        # float: a number (an int is one), not a bool
        (
            TINY_GAN,
            {"generator_learning_rate": "x"},
            "generator_learning_rate must be a number. Received: generator_learning_rate='x'",
        ),
        (TINY_GAN, {"label_softening": True}, "label_softening must be a number. Received: label_softening=True"),
        # int: neither a bool nor a float
        (TINY_GAN, {"seed": "a"}, "seed must be an integer. Received: seed='a'"),
        (TINY_GAN, {"batch_size": True}, "batch_size must be an integer. Received: batch_size=True"),
        (TINY_GAN, {"epochs": 2.0}, "epochs must be an integer. Received: epochs=2.0"),
        # bool: not an int
        (TINY_GAN, {"resume": 1}, "resume must be a boolean. Received: resume=1"),
        (TINY_CLASSIFIER, {"from_logits": "yes"}, "from_logits must be a boolean. Received: from_logits='yes'"),
        # X | None
        (
            TINY_GAN,
            {"steps_per_epoch": "10"},
            "steps_per_epoch must be an integer or None. Received: steps_per_epoch='10'",
        ),
        (TINY_GAN, {"data_dir": 3}, "data_dir must be a string or None. Received: data_dir=3"),
        (TINY_GAN, {"loss_scale": [128]}, "loss_scale must be a string, a number or None. Received: loss_scale=[128]"),
        (TINY_GAN, {"xla": 1}, "xla must be a string or a boolean. Received: xla=1"),
        # tuples, of their length
        (
            TINY_GAN,
            {"profile_steps": (1, "2")},
            "profile_steps must be a tuple of 2 integers or None. Received: profile_steps=(1, '2')",
        ),
        (
            TINY_GAN,
            {"generator_widths": [8, 8, 8]},
            "generator_widths must be a tuple of 3 integers. Received: generator_widths=[8, 8, 8]",
        ),
        (
            TINY_GAN,
            {"discriminator_widths": (8, 8, 8, 8)},
            "discriminator_widths must be a tuple of 3 integers. Received: discriminator_widths=(8, 8, 8, 8)",
        ),
    ],
)
def test_a_setting_of_another_type_is_refused_naming_it(config, change, message):
    # These used to fail late, naming no setting (run_name=None: an AttributeError; 'x' < 0: a TypeError).
    with pytest.raises(config_lib.ConfigError) as error:
        dataclasses.replace(config, **change).validate()
    assert str(error.value) == message


def test_numpy_scalars_and_ints_for_numbers_are_of_the_declared_types():
    config_lib.GANConfig().validate()  # every field's declared type is one the check knows
    config_lib.ClassifierConfig().validate()
    dataclasses.replace(
        TINY_GAN,
        seed=np.int64(3),
        batch_size=np.int32(32),
        generator_learning_rate=1,
        label_softening=np.float32(0.1),
        deterministic=np.bool_(True),
        profile_steps=(2, 3),
        loss_scale=128,
        xla=False,
        data_dir=None,
    ).validate()


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
@pytest.mark.parametrize(
    "config, name",
    [
        (TINY_CLASSIFIER, "alpha"),
        (TINY_CLASSIFIER, "batch_norm_momentum"),
        (TINY_CLASSIFIER, "learning_rate"),
        (TINY_GAN, "generator_learning_rate"),
        (TINY_GAN, "label_softening"),
        (TINY_GAN, "label_swap_fraction"),
    ],
)
def test_non_finite_model_settings_are_refused_naming_them(config, name, value):
    # alpha=inf used to reach MobileNetV2, which failed turning alpha * 32 into a width (OverflowError).
    with pytest.raises(config_lib.ConfigError) as error:
        dataclasses.replace(config, **{name: value}).validate()
    assert str(error.value).startswith(f"{name} must be ") and str(error.value).endswith(f"Received: {name}={value!r}")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"cluster": "pbs"}, "cluster must be one of: tf_config, slurm. Received: cluster='pbs'"),
        (
            {"cluster": "slurm"},
            "cluster only says where strategy='multi_worker' finds its hosts: set strategy='multi_worker' or drop "
            "the cluster setting. Received: cluster='slurm', strategy='default'",
        ),
        (
            {"strategy": "multi_worker", "slurm_port_base": 0},
            "slurm_port_base must be an integer from 1 to 65535. Received: slurm_port_base=0",
        ),
        (
            {"strategy": "multi_worker", "cluster": "slurm", "slurm_port_base": 65536},
            "slurm_port_base must be an integer from 1 to 65535. Received: slurm_port_base=65536",
        ),
        (
            {"strategy": "multi_worker", "slurm_port_base": 9000},
            "slurm_port_base is read only under cluster='slurm'. Received: slurm_port_base=9000",
        ),
        ({"cluster": None}, "cluster must be a string. Received: cluster=None"),
    ],
)
def test_the_cluster_settings_are_refused_naming_them(change, message):
    with pytest.raises(config_lib.ConfigError) as error:
        dataclasses.replace(TINY_GAN, **change).validate()
    assert str(error.value) == message


def test_a_slurm_cluster_with_the_multi_worker_strategy_is_valid_and_may_change_on_resume():
    dataclasses.replace(TINY_GAN, strategy="multi_worker", cluster="slurm", slurm_port_base=20000).validate()
    assert {"cluster", "slurm_port_base"} <= config_lib.RESUMABLE


def test_whether_a_resumed_run_may_change_a_setting_is_said_by_its_option():
    @dataclasses.dataclass(frozen=True)
    class Mine(config_lib.TrainConfig):
        width: int = config_lib.option(8, "Width.")
        report_every: int = config_lib.option(1, "Report every N steps.", resumable=True)

    assert options.resumable_fields(Mine) == options.resumable_fields(config_lib.TrainConfig) | {"report_every"}
    assert "width" not in options.resumable_fields(Mine(width=4))
    assert config_lib.RESUMABLE == options.resumable_fields(config_lib.GANConfig, config_lib.ClassifierConfig)
    assert {"precision", "loss_scale", "epochs", "data_dir", "num_samples"} <= config_lib.RESUMABLE
    assert not {"seed", "batch_size", "dataset", "float32_layers", "learning_rate"} & config_lib.RESUMABLE


@pytest.mark.parametrize("value", [0.5, 0, -1.0, math.inf, math.nan])
def test_worker_timeout_must_be_a_finite_number_of_seconds_of_at_least_one(value):
    with pytest.raises(config_lib.ConfigError) as error:
        dataclasses.replace(TINY_GAN, worker_timeout=value).validate()
    assert str(error.value) == (
        f"worker_timeout must be a finite number of seconds >= 1. Received: worker_timeout={value!r}"
    )
    dataclasses.replace(TINY_GAN, worker_timeout=1).validate()  # an int is a number of seconds too
    assert "worker_timeout" in config_lib.RESUMABLE  # a resumed run may wait longer or shorter


# --- each field's help, and errors that name their setting ---------------------------------------------------

CONFIGS = (config_lib.TrainConfig, config_lib.ImageConfig, config_lib.GANConfig, config_lib.ClassifierConfig)


@pytest.mark.parametrize("config", CONFIGS)
def test_every_field_carries_its_help_and_a_help_section(config):
    for field in dataclasses.fields(config):
        assert field.metadata["help"].strip(), field.name
        assert field.metadata["group"] in (None, *config_lib.HELP_GROUPS), field.name
        assert "{" not in field.metadata["help"], field.name  # plain text: no template


def test_a_subclass_changing_a_default_keeps_the_fields_help():
    train = {field.name: field for field in dataclasses.fields(config_lib.TrainConfig)}
    gan = {field.name: field for field in dataclasses.fields(config_lib.GANConfig)}
    assert gan["batch_size"].default == 4096 and train["batch_size"].default == 128
    assert gan["batch_size"].metadata == train["batch_size"].metadata
    classifier = {field.name: field for field in dataclasses.fields(config_lib.ClassifierConfig)}
    assert classifier["dataset"].metadata["choices"] == "datasets"  # each config's own `datasets`
    assert classifier["epochs"].default == 10 and classifier["epochs"].metadata["lower_bound"] == 1


@pytest.mark.parametrize(
    "config, change, message",
    [
        # The lower bound the field declares (its flag's too) is the one validate checks.
        (TINY_GAN, {"latent_dim": 0}, "latent_dim must be an integer >= 1. Received: latent_dim=0"),
        (TINY_GAN, {"num_samples": 0}, "num_samples must be an integer >= 1. Received: num_samples=0"),
        (TINY_GAN, {"warmup_steps": -1}, "warmup_steps must be an integer >= 0. Received: warmup_steps=-1"),
        (
            TINY_CLASSIFIER,
            {"validation_batch_size": 0},
            "validation_batch_size must be an integer >= 1. Received: validation_batch_size=0",
        ),
    ],
)
def test_the_declared_lower_bounds_are_checked(config, change, message):
    with pytest.raises(config_lib.ConfigError) as error:
        dataclasses.replace(config, **change).validate()
    assert str(error.value) == message


@pytest.mark.parametrize(
    "config, field, value",
    [
        (TINY_GAN, "precision", "fp8"),
        (TINY_GAN, "loss_scale", "huge"),
        (TINY_GAN, "batch_size", 0),
        (TINY_GAN, "run_name", "../elsewhere"),
        (TINY_GAN, "strategy", "tpu"),
        (TINY_GAN, "profile_steps", (3, 1)),
        (TINY_GAN, "float32_layers", "("),
        (TINY_GAN, "resume", True),
        (TINY_GAN, "label_swap_fraction", 2.0),
        (TINY_CLASSIFIER, "lr_schedule", "linear"),
        (TINY_CLASSIFIER, "alpha", math.inf),
    ],
)
def test_a_bad_setting_raises_the_one_error_type_with_its_field_and_value(config, field, value):
    with pytest.raises(config_lib.ConfigError) as error:
        dataclasses.replace(config, **{field: value}).validate()
    e = error.value
    assert isinstance(e, ValueError)
    assert (e.field, e.value) == (field, value)
    assert str(e).startswith(f"{field} ") and str(e).endswith(f"Received: {field}={value!r}")
    # A front end names the field its own way, with the value and the same problem.
    assert e.render(f"--{field}") == f"--{field} {e.problem} Received: --{field}={value!r}"


def test_another_modules_value_error_becomes_a_config_error_about_the_setting():
    with pytest.raises(config_lib.ConfigError) as error:
        dataclasses.replace(TINY_GAN, precision="fp8").validate()
    assert (error.value.field, error.value.value) == ("precision", "fp8")
    assert str(error.value).startswith("precision is not valid: Unknown precision. Valid names: ")
    assert str(error.value).count("Received:") == 1


def test_the_regular_expression_check_is_the_one_keep_float32_applies():
    with pytest.raises(config_lib.ConfigError) as error:
        dataclasses.replace(TINY_GAN, float32_layers="(").validate()
    assert str(error.value).startswith("float32_layers is not a valid regular expression (")
    assert str(error.value).endswith("Received: float32_layers='('")


def test_a_plain_config_error_is_its_message_braces_and_all():
    error = config_lib.ConfigError("TF_CONFIG is {'cluster': {}}; no worker")
    assert (str(error), error.field, error.value) == ("TF_CONFIG is {'cluster': {}}; no worker", None, None)
    about = config_lib.ConfigError("is odd.", "run_name", "{x}")
    assert str(about) == "run_name is odd. Received: run_name='{x}'"


def test_the_config_module_imports_no_model_and_no_trainer():
    source = open(config_lib.__file__).read()
    imported = [
        alias.name if isinstance(node, ast.Import) else f"{node.module}.{alias.name}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    ]
    assert not [name for name in imported if "models" in name or "trainers" in name], imported
    assert [m for m in imports_in_order()["tfmp.run.config"] if m.startswith("tfmp.models")] == []


def test_the_literal_defaults_agree_with_the_model_and_the_trainer_and_the_data():
    from tfmp import trainers
    from tfmp.models import gan as gan_model
    from tfmp.run import data as data_lib

    config = config_lib.GANConfig()
    assert config.latent_dim == gan_model.LATENT_DIM
    assert config.generator_widths == gan_model.GENERATOR_WIDTHS
    assert config.discriminator_widths == gan_model.DISCRIMINATOR_WIDTHS
    assert config_lib.GANConfig.image_shape == gan_model.IMAGE_SHAPE
    tutorial = trainers.TUTORIAL_GAN
    assert (config.generator_learning_rate, config.discriminator_learning_rate) == (
        tutorial.generator_learning_rate,
        tutorial.discriminator_learning_rate,
    )
    assert (config.label_softening, config.label_swap_fraction) == (
        tutorial.label_softening,
        tutorial.label_swap_fraction,
    )
    assert config_lib.ImageConfig.datasets == data_lib.DATASETS


@pytest.mark.parametrize(
    "given, parsed",
    [("auto", None), (" AUTO ", None), ("dynamic", "dynamic"), ("none", "none"), (None, "none"), ("128", 128.0)],
)
def test_the_loss_scale_setting_has_one_parser(given, parsed):
    assert config_lib.requested_loss_scale(given) == parsed
    for gone in ("LOSS_SCALE_AUTO", "loss_scale_is_set", "resolved_loss_scale"):
        assert not hasattr(config_lib, gone)
