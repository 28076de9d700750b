"""What every script shares: flags made from the config fields, `--help`, and errors named by flag.

`define_flags` makes a script's flags from the fields of the `tfmp.run.config`
dataclasses (each carries its help: `tfmp.run.config.option`), one flag per
field under the field's name (`run_name` -> `--run_name`). `in_flag_terms`
says a `ConfigError` about a field with the flag's name (its `field` and
`value`); other messages are printed as the library wrote them. Importing
this module imports TensorFlow quietly, so a script imports it first.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import textwrap
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from absl import app, flags
from absl import logging as absl_logging

try:  # a package: tfmp_scripts once installed, scripts in the tests
    from . import quiet_start
except ImportError:  # run from a checkout: this folder is on sys.path
    import quiet_start

quiet_start.import_tensorflow_quietly()

import tensorflow as tf

from tfmp.run import callbacks, checkpoint, distribute, preemption, task_loader, tasks, training
from tfmp.run import config as config_lib
from tfmp.run.output import with_cpu_note

# The settings: the fields of the configs (those of TrainConfig and ImageConfig among them).
_FIELDS = {f.name: f for config in (training.GANConfig, training.ClassifierConfig) for f in dataclasses.fields(config)}


def _options(kind: Any) -> tuple[Any, ...]:
    """The types a field of type `kind` takes: `int | None` -> `(int, NoneType)`."""
    return typing.get_args(kind) if typing.get_origin(kind) in (typing.Union, types.UnionType) else (kind,)


def define_flags(
    defaults: Any, exclude: Iterable[str] = (), only: Iterable[str] | None = None
) -> dict[str, flags.FlagHolder]:
    """Defines a flag for each field of `defaults`' config; returns their holders by name.

    The flag's default is `defaults`' value, its type the field's (an enum
    where the field has `choices`; a tuple as text, `START,END`), its help
    and bounds the field's (`tfmp.run.config.option`).

    Args:
        defaults: The config whose values become the defaults.
        exclude: Fields a script sets itself and must not offer.
        only: Just these fields, also those the scripts do not offer by default (`flag=False`).
    """
    kinds = typing.get_type_hints(type(defaults))
    return {
        field.name: _define_flag(field, kinds[field.name], defaults)
        for field in dataclasses.fields(defaults)
        if field.name not in exclude and (field.metadata.get("flag") if only is None else field.name in only)
    }


def _define_flag(field: dataclasses.Field, kind: Any, defaults: Any) -> flags.FlagHolder:
    """The flag of `field`, of type `kind`, its default `defaults`' value."""
    name, meta, default = field.name, field.metadata, getattr(defaults, field.name)
    text = meta["help"]
    bounds = {key: meta[key] for key in ("lower_bound", "upper_bound") if key in meta}
    options = [option for option in _options(kind) if option is not type(None)]
    if "choices" in meta:
        choices = getattr(defaults, meta["choices"]) if isinstance(meta["choices"], str) else meta["choices"]
        return flags.DEFINE_enum(name, str(default), list(choices), text)
    if options in ([bool], [int], [float]):
        define = {bool: flags.DEFINE_bool, int: flags.DEFINE_integer, float: flags.DEFINE_float}[options[0]]
        return define(name, default, text, **bounds)
    if typing.get_origin(options[0]) is tuple:  # as text: "" is None where the field allows it, else a list flag
        define = flags.DEFINE_string if len(options) < len(_options(kind)) else flags.DEFINE_list
        return define(name, ",".join(map(str, default or ())), text)
    return flags.DEFINE_string(name, None if default is None else str(default), text)


def _field_value(kind: Any, name: str, value: Any) -> Any:
    """A flag's value as its field of type `kind` takes it: a tuple's text as ints, bad text a usage error."""
    tuples = [option for option in _options(kind) if typing.get_origin(option) is tuple]
    if not tuples or value is None or value == "":
        return None if tuples and value == "" else value
    length = len(typing.get_args(tuples[0]))
    try:
        numbers = tuple(int(item) for item in (value.split(",") if isinstance(value, str) else value))
    except ValueError:
        numbers = ()
    if len(numbers) != length:
        shown = repr(value) if isinstance(value, str) else ",".join(value)
        count = {2: "two", 3: "three"}.get(length, length)
        raise app.UsageError(f"--{name} must be {count} integers, comma-separated. Received: {shown}")
    return numbers


def _values(config_cls: type, holders: dict[str, flags.FlagHolder]) -> dict[str, Any]:
    """The flags' values as the fields of `config_cls` take them."""
    kinds = typing.get_type_hints(config_cls)
    return {name: _field_value(kinds[name], name, holder.value) for name, holder in holders.items()}


def config_from_flags(config_cls: type, holders: dict[str, flags.FlagHolder], **extra: Any) -> Any:
    """Builds a `config_cls` from flag holders (named as its fields) plus extra values."""
    unknown = set(holders) - {field.name for field in dataclasses.fields(config_cls)}
    if unknown:
        raise ValueError(f"Flags without a config field: {sorted(unknown)}")
    return config_cls(**_values(config_cls, holders), **extra)


def load_task(spec: str, holders: dict[str, flags.FlagHolder]) -> tasks.Task:
    """The task `--task` names (`tfmp.run.task_loader.load`), with only the flags given on the command line over it.

    Raises:
        app.UsageError: for a bad `--task` (naming it) or a flag the task's config has no field for.
    """
    try:
        task = task_loader.load(spec)
    except training.ConfigError as e:  # about --task, a flag of the script rather than a config field
        raise app.UsageError(in_flag_terms(e)) from None
    given = {name: holder for name, holder in holders.items() if holder.present}
    unknown = sorted(set(given) - {field.name for field in dataclasses.fields(task.config)})
    if unknown:
        raise app.UsageError(
            f"--{unknown[0]} is not a setting of the task's config ({type(task.config).__name__}). "
            f"Received: --task={spec}"
        )
    return task.with_config(**_values(type(task.config), given))


def load_task_and_strategy(
    spec: str,
    holders: dict[str, flags.FlagHolder],
    make_strategy: Callable[..., tf.distribute.Strategy] = distribute.make_strategy,
) -> tuple[tasks.Task, tf.distribute.Strategy | None]:
    """`load_task`, and the strategy to hand to `tfmp.run.training.train` (None: the run makes it).

    A task module may run TensorFlow operations when imported, and
    `MultiWorkerMirroredStrategy` must come before any
    (`tfmp.run.distribute.FIRST`). So `--strategy=multi_worker` on the
    command line is made first, from the command line's
    `tfmp.run.distribute.STRATEGY_SETTINGS` (given, or their defaults), and
    the task's config must agree with them; named only by the task's
    config, it is made right after the import, and if the module ran
    TensorFlow operations the usage error says to pass `--strategy`.
    `make_strategy` is `tfmp.run.distribute.make_strategy` (a test's stand-in).

    Raises:
        app.UsageError: as `load_task`; for a strategy that cannot be made
            (a bad `TF_CONFIG`, naming it), or a task config that disagrees
            with the strategy made before it.
    """
    named, first, strategy = holders.get("strategy"), None, None
    if named is not None and named.present and named.value in distribute.FIRST:
        first = {name: holders[name].value for name in distribute.STRATEGY_SETTINGS}
        strategy = _make_strategy_first(make_strategy, first)
    task = load_task(spec, holders)
    wanted = {name: getattr(task.config, name) for name in distribute.STRATEGY_SETTINGS}
    differing = [name for name in distribute.STRATEGY_SETTINGS if first and wanted[name] != first[name]]
    if differing:
        settings = " ".join(f"--{name}={wanted[name]}" for name in differing)
        made = ", ".join(f"--{name}={first[name]}" for name in differing)
        raise app.UsageError(
            f"--strategy={first['strategy']} is made before the task's module is imported, from the command "
            f"line ({made}), but the task's config says otherwise: pass {settings} too. Received: --task={spec}"
        )
    if first is None and wanted["strategy"] in distribute.FIRST:
        try:
            strategy = _make_strategy_first(make_strategy, wanted)
        except RuntimeError:
            raise app.UsageError(
                f"--task: the task's config sets strategy={wanted['strategy']!r}, which TensorFlow lets a process "
                "start only before any other TensorFlow operation, and loading the task already ran some (its "
                "module builds its optimizer, or another TensorFlow object, when imported): pass "
                f"--strategy={wanted['strategy']} on the command line, so that the strategy is made before the "
                f"module is imported. Received: --task={spec!r}"
            ) from None
    return task, strategy


def _make_strategy_first(
    make_strategy: Callable[..., tf.distribute.Strategy], settings: dict[str, Any]
) -> tf.distribute.Strategy:
    """The strategy of `settings`, checked first: a bad setting or cluster is a usage error, Ctrl-C a clean exit."""
    try:  # only the strategy's settings: the run validates the whole config once
        training.TrainConfig(**settings).validate()
        return distribute.make_strategy_for(settings, make_strategy)
    except ValueError as e:  # a ConfigError too
        raise app.UsageError(in_flag_terms(e)) from None
    except KeyboardInterrupt:
        print(
            "interrupted by SIGINT (Ctrl-C) while starting the strategy, before the task was loaded: nothing was "
            "trained or written. Run the same command again to start.",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(128 + signal.SIGINT)


def check_no_arguments(argv: list[str]) -> None:
    """The start of every script's `main`: positional arguments are a usage error (absl's convention).

    Python logs stay at WARNING unless `--verbosity` is given (absl's INFO shows TensorFlow's at every checkpoint).
    """
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected positional arguments: {argv[1:]!r}")
    if not flags.FLAGS["verbosity"].present:
        absl_logging.set_verbosity(absl_logging.WARNING)


def make_main(
    config_cls: type, train_fn: Callable[[Any], Any], holders: dict[str, flags.FlagHolder]
) -> Callable[[list[str]], None]:
    """The `main(argv)` of a training script: flags -> config -> `train_fn`."""

    def main(argv: list[str]) -> None:
        check_no_arguments(argv)
        run(train_fn, config_from_flags(config_cls, holders))

    return main


def grouped_help(
    module: types.ModuleType, program: str, flag_values: flags.FlagValues = flags.FLAGS, note: str = ""
) -> str:
    """A script's `--help`: its docstring, then every flag it accepts by section, with defaults.

    The key flags of the script's module (its own and those it adopts from this module; TensorFlow's and
    absl's stay under `--helpfull`): a config field's under its group (`tfmp.run.config.HELP_GROUPS`), the
    others first. `note` (plain text, wrapped) opens the flags, e.g. where their defaults come from.
    """
    key_flags = {flag.name: flag for flag in flag_values.get_key_flags_for_module(module.__name__)}
    parts = [(module.__doc__ or f"USAGE: {program} [flags]").rstrip() + "\n\nflags:"]  # absl's layout
    if note:
        parts.append(textwrap.fill(" ".join(note.split()), width=80))
    for title, group in [(program, None)] + [(group, group) for group in config_lib.HELP_GROUPS]:
        section = flags.FlagValues()
        for name in sorted(key_flags):
            if (_FIELDS[name].metadata["group"] if name in _FIELDS else None) == group:
                flags.DEFINE_flag(key_flags[name], flag_values=section, module_name=title)
        if section.get_key_flags_for_module(title):
            parts.append(section.module_help(title))
    parts.append("\nTry --helpfull to get a list of all flags, absl's and TensorFlow's included.")
    return "\n".join(parts) + "\n"


class LeaveAtOnce(SystemExit):
    """An exit with nothing left to settle: the console command leaves without Python's shutdown.

    A run that lost a worker has written and released everything; TensorFlow's
    shutdown would wait about 10 s more on the lost worker (the coordination
    service's barrier). Inside a process that calls `run` itself, an ordinary `SystemExit`.
    """


def entry_point(main: Callable[[list[str]], None], module_name: str, help_note: str = "") -> Callable[[], None]:
    """A script's console entry point (`tfmp-train-gan = tfmp_scripts.train_gan:run`): `main` run by absl.

    `--help` (`-?`, `--helpshort`) prints `grouped_help` of `module_name`
    (absl's lists `__main__`'s flags: under a console command, pip's wrapper's),
    opening the flags with `help_note`; a usage error prints its message and a pointer to `--help`.
    """

    def parse(argv: list[str]) -> list[str]:
        arguments = argv[1 : argv.index("--")] if "--" in argv else argv[1:]
        if any(argument in ("--help", "-help", "--helpshort", "-helpshort", "-?") for argument in arguments):
            program = os.path.basename(argv[0])
            sys.stdout.write(grouped_help(sys.modules[module_name], program, note=help_note))
            sys.exit(0)
        return app.parse_flags_with_usage(argv)

    def main_with_short_usage(argv: list[str]) -> None:
        try:
            main(argv)
        except app.UsageError as e:
            sys.stderr.write(f"error: {e}\nPass --help to see the flags.\n")
            sys.exit(e.exitcode)

    def run() -> None:
        try:
            app.run(main_with_short_usage, flags_parser=parse)
        except LeaveAtOnce as e:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(e.code)

    run.__doc__ = f"Runs {module_name} as a console command."
    return run


def in_flag_terms(error: BaseException) -> str:
    """An error's message for the command line: settings named as flags.

    `ConfigError("must be an integer >= 1.", "epochs", 0)` reads `--epochs must be an integer >= 1.
    Received: --epochs=0`; a `checkpoint.SettingsDiffer` `--batch_size=32 in the checkpoint,
    --batch_size=16 in this run`; any other error reads as its message.
    """
    if isinstance(error, config_lib.ConfigError) and error.field is not None:
        return error.render(f"--{error.field}")
    if isinstance(error, checkpoint.SettingsDiffer):
        return error.render(lambda setting: f"--{setting}")
    return str(error)


def _as_flag(setting: str, value: Any = None) -> str:
    """A setting as the command line names it: `--resume`, `--worker_timeout=5`, `--run_name`."""
    return f"--{setting}" if value is None or value is True else f"--{setting}={value}"


def print_line(line: str) -> None:
    """Prints a line of a run, flushed (a pipe would otherwise hold it back)."""
    print(line, flush=True)


def run(train_fn: Callable[..., Any], config: Any, precisions: Sequence[str] | None = None) -> Any:
    """Runs `train_fn(config, print_fn=print_line)`, turning the expected failures into clean exits.

    `config` may be a `tfmp.run.tasks.Task`; `precisions` (default the config's) decide the note on 16-bit
    types on a CPU (`tfmp.run.output.with_cpu_note`). Bad settings are usage errors naming their flag; the
    run's other errors (`tfmp.run.training.RUN_ERRORS`) exit 1; a preemption 128 + the signal, as a killed process
    would (Ctrl-C during start-up: 130), or under multi_worker 75 (`preemption.CLUSTER_EXIT_CODE`); a lost worker 69.
    """
    try:
        task = isinstance(config, tasks.Task)
        settings = config.config if task else config
        if getattr(settings, "console", None) == "auto":
            # What the library decides for print (a progress bar on a terminal); it cannot tell for print_line.
            changes = {"console": callbacks.console_mode("auto", sys.stdout)}
            config = config.with_config(**changes) if task else dataclasses.replace(config, **changes)
        if precisions is None:
            precisions = getattr(settings, "precisions", None) or (getattr(settings, "precision", ""),)
        return train_fn(config, print_fn=with_cpu_note(print_line, precisions))
    except training.ConfigError as e:
        raise app.UsageError(in_flag_terms(e)) from None
    except training.RUN_ERRORS as e:
        sys.exit(f"error: {in_flag_terms(e)}")
    except (preemption.Preempted, preemption.WorkerLost) as e:
        print(e.render(_as_flag), file=sys.stderr, flush=True)  # `--resume (and the same --run_name)`
        raise (LeaveAtOnce if isinstance(e, preemption.WorkerLost) else SystemExit)(e.exit_code) from None
    except KeyboardInterrupt as e:
        print(in_flag_terms(e) or "interrupted by SIGINT (Ctrl-C)", file=sys.stderr, flush=True)
        sys.exit(128 + signal.SIGINT)
