"""Tests for tfmp/run/parity/design.py: the arms, units and levers of an experiment, checked where they are set."""

import dataclasses

import numpy as np
import pytest
from tiny_parity import TINY, tiny_config

from tfmp.run import data, parity, training


def test_the_folds_of_a_seed_validate_every_image_once():
    x = np.arange(23, dtype=np.float32).reshape(23, 1, 1, 1)
    y = np.arange(23, dtype=np.int32)
    split = data.Split(x[:18], y[:18], x[18:], y[18:])
    folds = [parity.fold_split(split, 7, f, 5) for f in range(5)]
    assert sorted(len(f.y_val) for f in folds) == [4, 4, 5, 5, 5]
    assert sorted(np.concatenate([f.y_val for f in folds]).tolist()) == list(range(23))  # each image once
    for f in folds:
        assert sorted(f.y_train.tolist() + f.y_val.tolist()) == list(range(23))  # the rest trains
        np.testing.assert_array_equal(f.x_val[:, 0, 0, 0], f.y_val)  # images stay with their labels
    assert parity.fold_split(split, 8, 0, 5).y_val.tolist() != folds[0].y_val.tolist()  # the seed shuffles
    assert parity.fold_split(split, 7, 0, 1) is split
    with pytest.raises(ValueError, match="Received: fold=5"):
        parity.fold_split(split, 7, 5, 5)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"seeds": ()}, "seeds=()"),
        ({"seeds": (0, 0)}, "seeds=(0, 0)"),
        ({"seeds": (-1,)}, "seed=-1"),
        ({"precisions": ("mixed_float16", "mixed_bfloat16")}, "precisions=('mixed_float16', 'mixed_bfloat16')"),
        ({"precisions": ("float32",)}, "precisions=('float32',)"),
        ({"precisions": ("float32", "fp8")}, "unknown precision, 'fp8'"),
        ({"precisions": ("float32", "auto")}, "unknown precision, 'auto'"),
        ({"precisions": ("float32", "fp16", "mixed_float16")}, "given twice"),
        ({"folds": 0}, "folds=0"),
        ({"average_last": 3}, "average_last=3"),  # TINY has 2 epochs
        ({"average_last": 0}, "average_last=0"),
        ({"lr_warmup_steps": -1}, "lr_warmup_steps=-1"),
        ({"fp16_initial_scales": (0.5,)}, "initial scale 0.5"),
        ({"fp16_initial_scales": (256, 256)}, "fp16_initial_scales=(256, 256)"),
    ],
)
def test_config_refuses_bad_values_naming_them(change, message, tmp_path):
    config = dataclasses.replace(tiny_config(tmp_path), **change)
    with pytest.raises(training.ConfigError, match="Received") as error:
        config.validate()
    assert message in str(error.value)


def test_warmup_needs_the_cosine_schedule(tmp_path):
    config = parity.ParityConfig(classifier=dataclasses.replace(TINY, lr_schedule="constant"), lr_warmup_steps=3)
    with pytest.raises(training.ConfigError, match="lr_schedule='constant', lr_warmup_steps=3"):
        config.validate()
    parity.ParityConfig(classifier=config.classifier, lr_warmup_steps=0).validate()


@pytest.mark.parametrize(
    "lever, value",
    [("folds", 5), ("lr_warmup_steps", 45), ("control", True), ("fp16_initial_scales", (256,))],
)
def test_the_classifiers_design_levers_are_refused_for_a_task_naming_them(lever, value):
    import families

    config = parity.ParityConfig.for_task(families.GRU_TASK, **{lever: value})
    with pytest.raises(training.ConfigError, match=f"{lever} belongs to the MobileNetV2 classifier's design"):
        config.validate()
