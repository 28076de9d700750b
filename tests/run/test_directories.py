"""Tests for tfmp/run/directories.py: the default name of a run's directory."""

import re

import pytest

from tfmp.run import directories


@pytest.mark.parametrize(
    "name, expected",
    [
        ("text_classifier", "text_classifier_float32_ls-none"),
        ("my model/v2", "my_model_v2_float32_ls-none"),  # one path component, whatever the name holds
        ("..", "float32_ls-none"),
        ("", "float32_ls-none"),
    ],
)
def test_the_default_run_name_carries_the_tasks_name_safely(name, expected):
    run_name = directories.default_run_name("float32", "none", name=name)
    assert re.fullmatch(r"\d{8}-\d{6}_" + re.escape(expected), run_name), run_name
