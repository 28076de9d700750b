"""Tests for docs/_ext/settings_table.py: the config page's tables, made from the fields' metadata."""

import dataclasses
import importlib.util
import os

import pytest

from tfmp.run import config as config_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _hook():
    path = os.path.join(ROOT, "docs", "_ext", "settings_table.py")
    spec = importlib.util.spec_from_file_location("settings_table", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_config_page_lists_every_field_of_every_config_with_its_flag():
    with open(os.path.join(ROOT, "docs", "api", "run", "config.md")) as page:
        rendered = _hook().expand(page.read())
    assert "<!-- settings-table" not in rendered
    rows = [line for line in rendered.splitlines() if line.startswith("| `")]
    named = {row.split("`")[1] for row in rows}
    for config in (config_lib.GANConfig, config_lib.ClassifierConfig):
        assert {field.name for field in dataclasses.fields(config)} <= named
    assert any(row.startswith("| `run_name` | `''` |") and "`--run_name`" in row for row in rows)
    assert any(row.startswith("| `generator_widths` ") and "(Python only)" in row for row in rows)
    # A flag named in a help is code, which never breaks after its `--` on a narrow screen.
    batch_sizes = [row for row in rows if row.startswith("| `batch_size` |")]
    assert batch_sizes and all("split evenly across the `--strategy`'s replicas" in row for row in batch_sizes)
    # A path placeholder in a help is shown, not read as an HTML tag.
    assert any("&lt;logdir&gt;/&lt;run_name&gt;/checkpoints" in row for row in rows)


@pytest.mark.parametrize("config", [config_lib.TrainConfig, config_lib.ClassifierConfig])
def test_a_row_shows_the_fields_default_choices_and_help(config):
    table = _hook().settings_table(config).splitlines()
    assert table[0] == "| Field | Default | Choices | Flag | Help |"
    rows = {row.split("`")[1]: row for row in table[2:]}
    strategy = rows.get("lr_schedule" if config is config_lib.ClassifierConfig else "strategy")
    field = {f.name: f for f in dataclasses.fields(config)}[strategy.split("`")[1]]
    for choice in field.metadata["choices"]:
        assert f"`{choice}`" in strategy
    assert " ".join(field.metadata["help"].split()).replace("--cluster", "`--cluster`") in strategy
    if config is config_lib.ClassifierConfig:  # re-defaulted there: its own default, a row of its own
        assert rows["epochs"].startswith("| `epochs` | `10` |") and "precision" not in rows
