"""A mkdocs hook for the docs build: the table of a config's fields, made from their metadata.

A page line `<!-- settings-table: tfmp.run.config.TrainConfig -->` becomes a
table of the fields that class defines or gives another default: name,
default, choices, flag and help, each read from the field's `option`
metadata (`tfmp.run.config.option`), so the table cannot drift from the code.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from typing import Any

# The tables import tfmp, and with it TensorFlow, whose start-up lines (oneDNN, CUDA, CPU features) would fill
# the build's log: imported here as the scripts import it, keeping only what TF_CPP_MIN_LOG_LEVEL allows.
from tfmp_scripts.quiet_start import import_tensorflow_quietly  # noqa: E402

import_tensorflow_quietly()

MARKER = re.compile(r"^<!-- settings-table: ([\w.]+) -->$", re.M)


def _cell(text: str) -> str:
    """`text` safe in a table cell: on one line, pipes escaped, `<path>` shown rather than read as HTML."""
    return " ".join(str(text).split()).replace("|", r"\|").replace("<", "&lt;").replace(">", "&gt;")


# A flag named in a help's prose (`--strategy's replicas`): set as code, so that it never breaks after `--`.
_FLAG_IN_PROSE = re.compile(r"(?<![\w`-])(--[a-z][a-z0-9_]*)")


def _help(text: str) -> str:
    """A field's help for its cell: each flag it names set as code."""
    return _FLAG_IN_PROSE.sub(r"`\1`", text)


def _choices(config: type, metadata: Any) -> str:
    choices = metadata.get("choices")
    if isinstance(choices, str):  # the name of a class attribute holding them (`datasets`)
        choices = getattr(config, choices)
    if choices:
        return ", ".join(f"`{choice}`" for choice in choices)
    bounds = [metadata.get("lower_bound"), metadata.get("upper_bound")]
    if bounds == [None, None]:
        return ""
    if bounds[1] is None:
        return f">= {bounds[0]}"
    return f"{bounds[0]} to {bounds[1]}"


def settings_table(config: type) -> str:
    """The Markdown table of the fields `config` defines or re-defaults (its bases' others are theirs).

    Args:
        config: A config dataclass whose fields are made by `tfmp.run.config.option`.
    """
    inherited = {
        field.name: field.default
        for base in config.__mro__[1:]
        if dataclasses.is_dataclass(base)
        for field in dataclasses.fields(base)
    }
    rows = ["| Field | Default | Choices | Flag | Help |", "| --- | --- | --- | --- | --- |"]
    for field in dataclasses.fields(config):
        if field.name in inherited and inherited[field.name] == field.default:
            continue
        flag = f"`--{field.name}`" if field.metadata["flag"] else "(Python only)"
        cells = [
            f"`{field.name}`",
            f"`{field.default!r}`",
            _choices(config, field.metadata),
            flag,
            _help(field.metadata["help"]),
        ]
        rows.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return "\n".join(rows)


def expand(markdown: str) -> str:
    """`markdown` with each settings-table marker replaced by its table."""

    def table(match: re.Match[str]) -> str:
        module, _, name = match.group(1).rpartition(".")
        return settings_table(getattr(importlib.import_module(module), name))

    return MARKER.sub(table, markdown)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """mkdocs' hook: expands the page's settings-table markers."""
    return expand(markdown)
