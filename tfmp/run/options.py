"""A config field and its one check: `option(...)` describes a field, `check_field` checks a value of it.

`option` keeps a field's default, help, `--help` section, choices, bounds
and check together in its `dataclasses.field` metadata; `check_field` checks
a value against all of them and raises `ConfigError`, the one error type of
a bad setting, naming the field and the value received. The configs
(`tfmp.run.config`) are built from them.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["ConfigError", "HELP_GROUPS", "check_field", "check_fields", "option", "redefault", "resumable_fields"]

_NOTHING = object()


class ConfigError(ValueError):
    """An impossible run setting, found before any training: the one error type of bad settings.

    With a field, the message names it and ends with the value received:
    `ConfigError("must be an integer >= 1.", "epochs", 0)` reads
    `epochs must be an integer >= 1. Received: epochs=0`. A front end that
    names settings otherwise builds its own line from `field`, `problem` and
    `value` (the scripts: `--epochs must be ... Received: --epochs=0`).

    Args:
        problem: What is wrong. With `field`, it continues the field's name
            (`"must be ..."`, `"needs ..."`, or `": ..."` after a colon);
            without, the whole message.
        field: The setting the error is about, or None.
        value: The value `field` received (default: the error names none).
        others: The other settings in play and their values, named after
            `field`'s in `Received:` (`cluster` is refused because of
            `strategy`, say).

    Attributes:
        problem: What is wrong, as given.
        field: The setting the error is about, or None.
        value: The value received (None when the error names none).
        others: The other settings in play, `{setting: value}`.
    """

    def __init__(
        self, problem: str, field: str | None = None, value: Any = _NOTHING, others: Mapping[str, Any] | None = None
    ):
        self.problem = problem
        self.field = field
        self.value = None if value is _NOTHING else value
        self.has_value = value is not _NOTHING
        self.others = dict(others or {})
        super().__init__(self.render(field) if field is not None else problem)

    def render(self, name: str) -> str:
        """The message with the field called `name` (a script passes `--epochs`, and its other settings alike)."""
        prefix = name[: -len(self.field)] if self.field and name.endswith(self.field) else ""
        values = [f"{name}={self.value!r}"] + [f"{prefix}{other}={value!r}" for other, value in self.others.items()]
        received = f" Received: {', '.join(values)}" if self.has_value else ""
        space = "" if self.problem.startswith(":") else " "  # `task: no such file ...`
        return f"{name}{space}{self.problem}{received}"


def _not_valid(field: str, value: Any, error: ValueError) -> ConfigError:
    """A `ConfigError` about `field` from another module's `ValueError`, which ends `Received: ...`.

    A message that starts with the field's name continues it (`float32_layers is not a valid ...`).
    """
    message = str(error).split(" Received: ")[0]
    if message.startswith(f"{field} "):
        return ConfigError(message[len(field) + 1 :], field, value)
    return ConfigError(f"is not valid: {message}", field, value)


# The sections of the scripts' --help after a script's own flags, in order; a field's `group` is one of them.
HELP_GROUPS = ("precision", "model and optimizer", "training", "data", "logs and console", "checkpoints")


def option(
    default: Any,
    help: str,
    group: str | None = None,
    *,
    choices: Sequence[str] | str | None = None,
    lower_bound: float | None = None,
    upper_bound: float | None = None,
    check: Callable[[Any], Any] | None = None,
    flag: bool = True,
    resumable: bool = False,
) -> Any:
    """A config field with all that describes it: `epochs: int = option(4, "Passes over the data.", "training")`.

    `TrainConfig.validate` checks every field the same way: its declared
    type, then `check` (or else `choices`), then the bounds. The scripts make
    a flag of it (`--epochs`), the docs a row of the config's table.

    Args:
        default: The field's default.
        help: What the setting does, as `--help` and the docs show it.
        group: The `HELP_GROUPS` section that lists its flag; None: the
            script's own section.
        choices: The valid values (the flag is an enum), or the name of a
            class attribute holding them (`"datasets"`).
        lower_bound: The smallest valid value (an int field's, or a number's).
        upper_bound: The largest valid value.
        check: Called with the value; raises `ConfigError("must be ...")`
            (or another module's `ValueError`) for an invalid one. Replaces
            the `choices` check.
        flag: False: the scripts offer no flag unless they ask for it.
        resumable: True: a resumed run may change the setting; False: it
            must match the checkpoint's (`resumable_fields`).

    Returns:
        A `dataclasses.field`, the rest in its `metadata`.
    """
    metadata = {"help": help, "group": group, "flag": flag, "resumable": resumable}
    for key, value in (
        ("choices", choices),
        ("lower_bound", lower_bound),
        ("upper_bound", upper_bound),
        ("check", check),
    ):
        if value is not None:
            metadata[key] = value
    return dataclasses.field(default=default, metadata=metadata)


def redefault(config: type, name: str, default: Any) -> Any:
    """`config`'s field `name` with another default; its help and the rest stay."""
    (field,) = [f for f in dataclasses.fields(config) if f.name == name]
    return dataclasses.field(default=default, metadata=field.metadata)


def resumable_fields(*configs: Any) -> frozenset[str]:
    """The fields of `configs` (classes or instances) a resumed run may change: those made with `resumable=True`."""
    return frozenset(
        field.name for config in configs for field in dataclasses.fields(config) if field.metadata.get("resumable")
    )


# What a value of each declared field type may be: numpy scalars count; a bool is not an int, and is not a number.
_KINDS = {
    bool: ((bool, np.bool_), "a boolean", "booleans"),
    int: ((int, np.integer), "an integer", "integers"),
    float: ((int, float, np.integer, np.floating), "a number", "numbers"),
    str: ((str,), "a string", "strings"),
    type(None): ((type(None),), "None", "None values"),
}


def _is_a(value: Any, kind: Any) -> bool:
    """Whether `value` is of type `kind`: a class, `X | Y`, `tuple[X, Y]` (that length) or `tuple[X, ...]`."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return any(_is_a(value, option) for option in typing.get_args(kind))
    if typing.get_origin(kind) is tuple:
        items = typing.get_args(kind)
        if items[-1:] == (Ellipsis,):  # tuple[X, ...]: any length
            return isinstance(value, tuple) and all(_is_a(item, items[0]) for item in value)
        return isinstance(value, tuple) and len(value) == len(items) and all(map(_is_a, value, items))
    if isinstance(value, bool) and kind is not bool:  # a bool is a Python int, but True is no batch size
        return False
    return isinstance(value, _KINDS[kind][0])


def _describe(kind: Any) -> str:
    """`kind` in words: `a string`, `a tuple of 2 integers or None`."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        options = [_describe(option) for option in typing.get_args(kind)]
        return ", ".join(options[:-1]) + " or " + options[-1]
    if typing.get_origin(kind) is tuple:
        items = typing.get_args(kind)
        if items[-1:] == (Ellipsis,):
            return f"a tuple of {_KINDS[items[0]][2]}"
        return f"a tuple of {len(items)} {_KINDS[items[0]][2]}"  # the configs' tuples hold one type
    return _KINDS[kind][1]


def _number_word(kind: Any) -> str:
    """`an integer` for an int field (or a tuple or optional of ints), `a number` otherwise."""
    options = [option for option in typing.get_args(kind) or (kind,) if option is not type(None)]
    if typing.get_origin(options[0]) is tuple:
        options = list(typing.get_args(options[0]))
    return "an integer" if options[0] is int else "a number"


def check_field(field: dataclasses.Field, kind: Any, value: Any, config: Any) -> Any:
    """Checks one field's value as its `option` describes it: type, then check or choices, then bounds.

    Args:
        field: The field, made by `option`.
        kind: Its declared type (`typing.get_type_hints`).
        value: The value to check.
        config: The config holding it (where `choices` names a class attribute).

    Returns:
        What the field's `check` returned (a check that parses returns the
        parsed value: `canonical_precision` the canonical name), or None.

    Raises:
        ConfigError: naming the field and the value.
    """
    name, meta = field.name, field.metadata
    parsed = None
    if not _is_a(value, kind):
        raise ConfigError(f"must be {_describe(kind)}.", name, value)
    if "check" in meta:
        try:
            parsed = meta["check"](value)
        except ConfigError as e:  # a check of this module: its problem continues the field's name
            raise ConfigError(e.problem, name, value) from None
        except ValueError as e:
            raise _not_valid(name, value, e) from None
    elif "choices" in meta:
        valid = getattr(config, meta["choices"]) if isinstance(meta["choices"], str) else meta["choices"]
        if value not in valid and not (isinstance(value, str) and value.lower() in valid):
            raise ConfigError(f"must be one of: {', '.join(map(str, valid))}.", name, value)
    lower, upper = meta.get("lower_bound", -math.inf), meta.get("upper_bound", math.inf)
    numbers = value if isinstance(value, tuple) else (value,)
    for number in numbers if "lower_bound" in meta or "upper_bound" in meta else ():
        if number is not None and not lower <= number <= upper:
            within = f"from {lower} to {upper}" if upper < math.inf else f">= {lower}"
            word = _number_word(kind)
            what = f"hold {word.split()[1]}s" if isinstance(value, tuple) else f"be {word}"  # tuples hold integers
            raise ConfigError(f"must {what} {within}.", name, value)
    # NaN fails every comparison; inf overflows where an update is computed from a rate.
    if name.endswith("learning_rate") and not 0 < value < math.inf:
        raise ConfigError("must be a finite number > 0.", name, value)
    return parsed


def check_fields(config: Any) -> dict[str, Any]:
    """Checks every field of the dataclass `config` in order (`check_field`); returns what each check parsed.

    Raises:
        ConfigError: for the first impossible value, naming its field and the value.
    """
    declared = typing.get_type_hints(type(config))
    return {
        field.name: check_field(field, declared[field.name], getattr(config, field.name), config)
        for field in dataclasses.fields(config)
    }
