"""Flags shared by the training scripts, with defaults taken from the configs.

The defaults live once, in the `tfmp.run.training` config dataclasses; this module
only turns them into absl flags and back, and the library's messages, which
name settings as the configs do (`run_name`, `resume=True`), into flag names
(`--run_name`, `--resume`): see `to_flags`. It also gives every script its
console behaviour: a quiet TensorFlow start-up (importing this module imports
TensorFlow, so a script imports it first), `--help` listing all of the
script's flags by group (`run_app`), and a note when float16 runs emulated on a
CPU.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import sys
import tempfile
import types
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from absl import app, flags
from absl import logging as absl_logging

# What TF_CPP_MIN_LOG_LEVEL hides: 3 hides INFO, WARNING and ERROR lines, keeping FATAL.
_CPP_SEVERITIES = {"I": 0, "W": 1, "E": 2}
# A line of TensorFlow's C++ (absl) log: `E0000 00:00:1795536065.870533   27039 port.cc:153] ...` (before
# absl's logging is initialised the time reads 00:00 and the seconds since the epoch).
_CPP_LOG_LINE = re.compile(r"^([IWE])\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^\s\]]+:\d+\] ")
_ABSL_PRE_INIT_NOTICE = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"


def _kept(line: str, min_level: int) -> bool:
    """Whether TF_CPP_MIN_LOG_LEVEL=`min_level` lets a line written while TensorFlow loads through."""
    if line.rstrip("\n") == _ABSL_PRE_INIT_NOTICE:
        return min_level < 1  # absl's notice of the lines below: warning level
    match = _CPP_LOG_LINE.match(line)
    return match is None or _CPP_SEVERITIES[match.group(1)] >= min_level


def import_tensorflow_quietly() -> None:
    """Imports TensorFlow without its C++ start-up chatter, unless the user set TF_CPP_MIN_LOG_LEVEL.

    A fresh import prints, twice, the oneDNN notice and "Could not find cuda
    drivers", then the CPU feature guard and "failed call to cuInit" on a
    machine without a GPU, and "oneDNN supports DT_HALF only on platforms
    with AVX-512" in a float16 run on such a CPU. The level defaults to 3 here,
    which hides C++ INFO, WARNING and ERROR lines (the cuInit failure is an
    ERROR) and keeps FATAL ones; tfmp's own warnings and errors are Python
    prints and exceptions, which no level touches. TensorFlow ignores the level
    for the lines logged while its libraries load (absl writes everything to
    stderr until `absl::InitializeLog`), so during the import stderr goes to a
    file and only the lines the level allows are written back. A level the
    user set is applied to those lines in the same way.
    """
    min_level = os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if "tensorflow" in sys.modules:
        return
    try:
        min_level = int(min_level)
    except ValueError:  # TensorFlow reads an unparsable level as 0
        min_level = 0
    sys.stderr.flush()
    saved_stderr = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow  # noqa: F401
        finally:
            sys.stderr.flush()
            os.dup2(saved_stderr, 2)
            os.close(saved_stderr)
            captured.seek(0)
            lines = captured.read().decode(errors="replace").splitlines(keepends=True)
            sys.stderr.write("".join(line for line in lines if _kept(line, min_level)))
            sys.stderr.flush()


import_tensorflow_quietly()

import tensorflow as tf

import tfmp
from tfmp.run import callbacks, checkpoint, distribute, preemption, rundir, tasks, training
from tfmp.run import data as data_lib


def define_classifier_flags(
    defaults: training.ClassifierConfig, exclude: tuple[str, ...] = ()
) -> dict[str, flags.FlagHolder]:
    """The training flags plus the classifier's own (MobileNetV2 and its optimizer); returns their holders.

    Args:
        defaults: The classifier config whose values become the defaults.
        exclude: Training flags a script sets itself and must not offer.
    """
    return {
        **define_training_flags(defaults, exclude=exclude),
        "alpha": flags.DEFINE_float("alpha", defaults.alpha, "MobileNetV2 width multiplier."),
        "learning_rate": flags.DEFINE_float(
            "learning_rate", defaults.learning_rate, "Adam (peak, with --lr_schedule=cosine) learning rate."
        ),
        "lr_schedule": flags.DEFINE_enum(
            "lr_schedule",
            defaults.lr_schedule,
            list(training.LR_SCHEDULES),
            "cosine: decay the learning rate to zero over the run; constant: keep it.",
        ),
        "from_logits": flags.DEFINE_bool(
            "from_logits", defaults.from_logits, "Output float32 logits with a from-logits loss instead of a softmax."
        ),
        "batch_norm_momentum": flags.DEFINE_float(
            "batch_norm_momentum",
            defaults.batch_norm_momentum,
            "BatchNorm moving-statistics momentum (Keras's MobileNetV2: 0.999, too slow for small data).",
        ),
    }


def define_training_flags(defaults: training.TrainConfig, exclude: tuple[str, ...] = ()) -> dict[str, flags.FlagHolder]:
    """Defines the flags every training script has; returns their holders.

    Args:
        defaults: The config whose values become the flags' defaults.
        exclude: Flags a script sets itself and must not offer.
    """
    definitions = {
        "precision": lambda: flags.DEFINE_enum(
            "precision",
            defaults.precision,
            list(tfmp.PRECISIONS) + ["fp32", "fp16", "bf16"],
            "Compute precision. auto: the fastest for this model on this device, measured once and cached "
            "(GPU 8.0+: float32, bfloat16, float16; 7.x: float32, float16; CPU with bfloat16: float32, bfloat16); "
            "multi_worker: by GPU compute capability.",
        ),
        "loss_scale": lambda: flags.DEFINE_string(
            "loss_scale",
            str(defaults.loss_scale),
            "dynamic, none, or a positive fixed scale. Only mixed_float16 uses it; auto (not set): dynamic there. "
            "A scale set under another precision is ignored with a note.",
        ),
        "xla": lambda: flags.DEFINE_enum(
            "xla",
            str(defaults.xla),
            ["auto", "true", "false"],
            "Compile the train step with XLA. auto: on with a GPU, off on CPU.",
        ),
        "tf32": lambda: flags.DEFINE_bool(
            "tf32", defaults.tf32, "Allow TensorFloat-32 for float32 matmuls/convs (Ampere+ GPUs)."
        ),
        "epochs": lambda: flags.DEFINE_integer(
            "epochs", defaults.epochs, "Passes over the training data.", lower_bound=1
        ),
        "batch_size": lambda: flags.DEFINE_integer(
            "batch_size",
            defaults.batch_size,
            "Examples per step: the global batch, split evenly across the --strategy's replicas.",
            lower_bound=1,
        ),
        "strategy": lambda: flags.DEFINE_enum(
            "strategy",
            defaults.strategy,
            list(distribute.STRATEGIES),
            "default: one device; mirrored: every local GPU; multi_worker: the hosts of --cluster "
            "(start this script on each; only the chief writes logs).",
        ),
        "cluster": lambda: flags.DEFINE_enum(
            "cluster",
            defaults.cluster,
            list(distribute.CLUSTERS),
            "Where --strategy=multi_worker finds its hosts. tf_config: the TF_CONFIG variable of each host; "
            "slurm: the environment srun gives its tasks (launch with srun; worker index = SLURM_PROCID).",
        ),
        "slurm_port_base": lambda: flags.DEFINE_integer(
            "slurm_port_base",
            defaults.slurm_port_base,
            "With --cluster=slurm: the port of each node's first task; its k-th task listens on this + k.",
            lower_bound=1,
            upper_bound=65535,
        ),
        "worker_timeout": lambda: flags.DEFINE_float(
            "worker_timeout",
            defaults.worker_timeout,
            "--strategy=multi_worker: seconds without a heartbeat after which a worker counts as lost and the "
            "others stop (exit 69); restart all with --resume.",
            lower_bound=1,
        ),
        "steps_per_epoch": lambda: flags.DEFINE_integer(
            "steps_per_epoch", defaults.steps_per_epoch, "Optional cap on the steps of an epoch.", lower_bound=1
        ),
        "logdir": lambda: flags.DEFINE_string("logdir", defaults.logdir, "Parent directory of the TensorBoard runs."),
        "run_name": lambda: flags.DEFINE_string(
            "run_name",
            defaults.run_name,
            "Run directory under --logdir (a relative path inside it, e.g. sweep/lr-3); default: time, precision "
            "and loss scale. One run at a time: a second run in the same directory is refused.",
        ),
        "seed": lambda: flags.DEFINE_integer("seed", defaults.seed, "Seed of weights, noise, shuffling and splits."),
        "log_every": lambda: flags.DEFINE_integer(
            "log_every",
            defaults.log_every,
            "Print the step line every N steps of an epoch; write per-step TensorBoard scalars every N global steps.",
            lower_bound=1,
        ),
        "console": lambda: flags.DEFINE_enum(
            "console",
            defaults.console,
            list(callbacks.CONSOLE_MODES),
            "progress: a Keras progress bar per epoch; lines: the original tutorial's step line every "
            "--log_every steps; auto: progress on a terminal, lines otherwise (pipes, files).",
        ),
        "warmup_steps": lambda: flags.DEFINE_integer(
            "warmup_steps", defaults.warmup_steps, "Leading steps left out of the mean throughput.", lower_bound=0
        ),
        "diagnose_every": lambda: flags.DEFINE_integer(
            "diagnose_every",
            defaults.diagnose_every,
            "Every N steps, log the gradients' float16 underflow/overflow fractions to TensorBoard; 0: never.",
            lower_bound=0,
        ),
        "profile_steps": lambda: flags.DEFINE_string(
            "profile_steps",
            "",
            "START,END: capture a TensorFlow profiler trace of these steps (from 1, inclusive) into the "
            "run's logdir, for TensorBoard's Profile tab. Start after the warm-up steps.",
        ),
        "float32_layers": lambda: flags.DEFINE_string(
            "float32_layers",
            defaults.float32_layers,
            "Regex (re.search on layer paths such as model/block_1_expand_BN): those layers compute in "
            "float32 under a mixed policy. none: no layer; auto: the model's advice (MobileNetV2 under "
            "bfloat16 on CPU: the depthwise convolutions), none otherwise.",
        ),
        "checkpoint_dir": lambda: flags.DEFINE_string(
            "checkpoint_dir", defaults.checkpoint_dir, "Where checkpoints go; default: <logdir>/<run_name>/checkpoints."
        ),
        "checkpoint_every": lambda: flags.DEFINE_integer(
            "checkpoint_every",
            defaults.checkpoint_every,
            "Also checkpoint every N steps; 0: at each epoch end only (and on SIGTERM/SIGINT).",
            lower_bound=0,
        ),
        "keep_checkpoints": lambda: flags.DEFINE_integer(
            "keep_checkpoints",
            defaults.keep_checkpoints,
            "Checkpoints kept; with 2 or more a corrupt newest one falls back to the previous.",
            lower_bound=1,
        ),
        "resume": lambda: flags.DEFINE_bool(
            "resume",
            defaults.resume,
            "Continue the run named by --run_name (or --checkpoint_dir) exactly where its newest readable "
            "checkpoint stopped; start from step 0 if it has none.",
        ),
        "on_nonfinite": lambda: flags.DEFINE_enum(
            "on_nonfinite",
            defaults.on_nonfinite,
            list(training.ON_NONFINITE),
            "A step with a NaN/Inf gradient is never applied. skip: count it and go on; stop: stop with the "
            "epoch, step and first non-finite layer (not with dynamic loss scaling, which skips by design).",
        ),
        "deterministic": lambda: flags.DEFINE_bool(
            "deterministic",
            defaults.deterministic,
            "Turn on TensorFlow op determinism, so a resumed run repeats the uninterrupted one bit for bit.",
        ),
    }
    if isinstance(defaults, training.ImageConfig):
        definitions["dataset"] = lambda: flags.DEFINE_enum(
            "dataset",
            defaults.dataset,
            list(defaults.datasets),
            "Training data. digits is embedded (no download); synthetic is random data for benchmarks.",
        )
        definitions["data_dir"] = lambda: flags.DEFINE_string(
            "data_dir",
            defaults.data_dir,
            "Directory holding the downloaded dataset; default: keras.datasets' cache (~/.keras/datasets).",
        )
    return {name: define() for name, define in definitions.items() if name not in exclude}


def load_task(spec: str, holders: dict[str, flags.FlagHolder]) -> tasks.Task:
    """The task `--task` names (`tfmp.run.tasks.load`), its config overridden by the flags given on the command line.

    Flags not given leave the task's own config as it is, so a task keeps
    its defaults (its epochs, batch size, ...) unless the command says
    otherwise.

    Raises:
        app.UsageError: for a bad `--task` (naming it) or a flag the task's
            config has no field for.
    """
    try:
        task = tasks.load(spec)
    except training.ConfigError as e:
        raise app.UsageError(to_flags(str(e))) from None
    given = {name: _PARSERS.get(name, lambda v: v)(holder.value) for name, holder in holders.items() if holder.present}
    fields = {field.name for field in dataclasses.fields(task.config)}
    unknown = sorted(set(given) - fields)
    if unknown:
        raise app.UsageError(
            f"--{unknown[0]} is not a setting of the task's config ({type(task.config).__name__}). "
            f"Received: --task={spec}"
        )
    return task.replace(**given)


def parse_step_range(value: str) -> tuple[int, int] | None:
    """`"START,END"` -> `(START, END)`; `""` -> None. Bad text is a usage error naming it."""
    if not value:
        return None
    try:
        start, end = (int(part) for part in value.split(","))
    except ValueError:
        raise app.UsageError(f"--profile_steps must be START,END (two integers). Received: {value!r}") from None
    return start, end


_PARSERS = {"profile_steps": parse_step_range}


def config_from_flags(config_cls: type, holders: dict[str, flags.FlagHolder], **extra: Any) -> Any:
    """Builds a `config_cls` from flag holders (named as its fields) plus extra values."""
    values = {name: _PARSERS.get(name, lambda v: v)(holder.value) for name, holder in holders.items()}
    fields = {f.name for f in dataclasses.fields(config_cls)}
    unknown = set(values) - fields
    if unknown:
        raise ValueError(f"Flags without a config field: {sorted(unknown)}")
    return config_cls(**values, **extra)


def quiet_logging() -> None:
    """Shows TensorFlow's and absl's Python logs from WARNING up, unless `--verbosity` was given.

    absl turns an unset `--verbosity` into INFO once flags are parsed, which
    prints TensorFlow's INFO lines (`Sharding callback duration` at every
    checkpoint) between the run's own lines. The scripts, not the library,
    decide this: it is process-wide.
    """
    if not flags.FLAGS["verbosity"].present:
        absl_logging.set_verbosity(absl_logging.WARNING)


def check_no_arguments(argv: list[str]) -> None:
    """The start of every script's `main`: positional arguments are a usage error (absl's convention).

    Also quiets INFO logs unless asked for (`quiet_logging`).
    """
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected positional arguments: {argv[1:]!r}")
    quiet_logging()


def make_main(
    config_cls: type, train_fn: Callable[[Any], Any], holders: dict[str, flags.FlagHolder]
) -> Callable[[list[str]], None]:
    """The `main(argv)` of a training script: flags -> config -> `train_fn`."""

    def main(argv: list[str]) -> None:
        check_no_arguments(argv)
        run(train_fn, config_from_flags(config_cls, holders))

    return main


# `--help`'s sections after the script's own flags; a script shows those of its flags listed here.
HELP_GROUPS = (
    ("precision", ("precision", "loss_scale", "xla", "tf32", "float32_layers")),
    ("model and optimizer", ("alpha", "learning_rate", "lr_schedule", "from_logits", "batch_norm_momentum")),
    (
        "training",
        (
            "epochs",
            "batch_size",
            "steps_per_epoch",
            "strategy",
            "cluster",
            "slurm_port_base",
            "worker_timeout",
            "seed",
            "on_nonfinite",
            "deterministic",
        ),
    ),
    ("data", ("dataset", "data_dir")),
    (
        "logs and console",
        ("logdir", "run_name", "log_every", "console", "warmup_steps", "diagnose_every", "profile_steps"),
    ),
    ("checkpoints", ("checkpoint_dir", "checkpoint_every", "keep_checkpoints", "resume")),
)
_HELP_ARGS = ("--help", "-help", "--helpshort", "-helpshort", "-?")


def grouped_help(module: types.ModuleType, program: str, flag_values: flags.FlagValues = flags.FLAGS) -> str:
    """A script's `--help`: its docstring, then every flag it accepts, by `HELP_GROUPS`, with defaults.

    The flags are the key flags of the script's module: those it defines and
    those it adopts from this module (`flags.adopt_module_key_flags(common)`),
    so TensorFlow's and absl's own flags stay under `--helpfull`. The script's
    own flags come first, under its name; each group is rendered by absl.

    Args:
        module: The script's module.
        program: The command's name, heading the script's own flags.
        flag_values: Where the flags are defined; default absl's global `FLAGS`.

    Returns:
        The help text.
    """
    key_flags = {flag.name: flag for flag in flag_values.get_key_flags_for_module(module.__name__)}
    grouped = {name for _, names in HELP_GROUPS for name in names}
    sections = [(program, sorted(set(key_flags) - grouped))] + list(HELP_GROUPS)
    parts = [(module.__doc__ or f"USAGE: {program} [flags]").rstrip() + "\n\nflags:"]  # absl's layout
    for title, names in sections:
        section = flags.FlagValues()
        for name in names:
            if name in key_flags:
                flags.DEFINE_flag(key_flags[name], flag_values=section, module_name=title)
        if names and section.get_key_flags_for_module(title):
            parts.append(section.module_help(title))
    parts.append("\nTry --helpfull to get a list of all flags, absl's and TensorFlow's included.")
    return "\n".join(parts) + "\n"


def entry_point(main: Callable[[list[str]], None], module_name: str) -> Callable[[], None]:
    """A script's console entry point (`tfmp-train-gan = tfmp_scripts.train_gan:run`): `run_app` on its `main`.

    Args:
        main: The script's `main(argv)`.
        module_name: The script's `__name__`; its module is looked up when the
            entry point runs, so the script's flags are all defined by then.
    """

    def run() -> None:
        run_app(main, sys.modules[module_name])

    run.__doc__ = f"Runs {module_name} as a console command."
    return run


def run_app(main: Callable[[list[str]], None], module: types.ModuleType) -> None:
    """Runs a script's `main` with absl (`app.run`), its `--help` from `grouped_help`.

    absl's own `--help` lists the key flags of the module named `sys.argv[0]`
    under `__main__`'s docstring: under a console command (`tfmp-train-gan`)
    that is pip's wrapper, with neither. `--help` (`-?`, `--helpshort`)
    therefore prints `grouped_help` and exits 0; `--helpfull` stays absl's.
    A usage error raised by `main` prints its message and a pointer to
    `--help` rather than the flag list above the message.

    Args:
        main: The script's `main(argv)`.
        module: The script's module (its docstring and flags).
    """

    def parse(argv: list[str]) -> list[str]:
        arguments = argv[1 : argv.index("--")] if "--" in argv else argv[1:]
        if any(argument in _HELP_ARGS for argument in arguments):
            sys.stdout.write(grouped_help(module, os.path.basename(argv[0])))
            sys.exit(0)
        return app.parse_flags_with_usage(argv)

    def main_with_short_usage(argv: list[str]) -> None:
        try:
            main(argv)
        except app.UsageError as e:
            sys.stderr.write(f"error: {e}\nPass --help to see the flags.\n")
            sys.exit(e.exitcode)

    app.run(main_with_short_usage, flags_parser=parse)


# The library's names for what the scripts offer another way.
_LIBRARY_TO_SCRIPTS = {"tfmp.run.training.diagnose_run": "scripts/diagnose.py (tfmp-diagnose)"}
_TRAINING_CONFIGS = (training.ClassifierConfig, training.GANConfig)


def to_flags(message: str, flag_values: flags.FlagValues = flags.FLAGS) -> str:
    """A library message in this script's terms: setting names become flag names.

    tfmp's messages name a setting as its config field, in one of two forms,
    and only those are rewritten:

    * `name=value`: `Received: run_name='x'` -> `Received: --run_name='x'`,
      `dataset='digits'` -> `--dataset='digits'`; a boolean flag's
      `resume=True` -> `--resume` (`=False` -> `--noresume`);
    * a bare name with an underscore, which no English word has:
      `another run_name or checkpoint_dir` -> `another --run_name or
      --checkpoint_dir`; or any name that opens the message as the subject
      of a rule: `alpha must be ...` -> `--alpha must be ...`.

    A one-word name without `=` is prose and stays ("the dataset", "resume
    needs", "epochs"), as do names inside paths and dotted names
    (`config.batch_size`). Only the fields of the `tfmp.run.training` configs that
    are flags of this script (defined in `flag_values`) count: a setting the
    script does not offer as a flag keeps the library's name. Library names
    of what the scripts offer as their own commands (`tfmp.run.training.diagnose_run`)
    become those commands.

    Args:
        message: A library message (an error, a warning line).
        flag_values: The flags defined; default absl's global `FLAGS`.

    Returns:
        The message with flag names.
    """
    for library, script in _LIBRARY_TO_SCRIPTS.items():
        message = message.replace(library, script)
    fields = {field.name for config in _TRAINING_CONFIGS for field in dataclasses.fields(config)}
    names = sorted((name for name in fields if name in flag_values), key=len, reverse=True)
    if not names:
        return message
    # Not inside a word, a path, a dotted name or a flag already; then `=value`, if any.
    pattern = re.compile(
        r"(?<![\w./-])(" + "|".join(map(re.escape, names)) + r")(?![\w/-]|\.\w)(=(?:(True|False)(?!\w))?)?"
    )

    def flag(match: re.Match) -> str:
        name, equals, boolean = match.groups()
        subject = match.start() == 0 and match.string.startswith(" must ", match.end())
        if equals is None and "_" not in name and not subject:
            return match.group(0)  # a one-word name in prose: an English word
        if boolean is not None and flag_values[name].boolean:
            return f"--{name}" if boolean == "True" else f"--no{name}"
        return f"--{name}{equals or ''}"

    return pattern.sub(flag, message)


def print_line(line: str) -> None:
    """Prints a line a run writes to the console; its warnings in flag terms (`to_flags`).

    Only warnings: the run's description, step lines and notes are records
    of the run (`precision=float32 ...`), printed as the library words them.
    """
    print(to_flags(line) if line.startswith("warning:") else line, flush=True)


FLOAT16_ON_CPU_NOTE = (
    "note: float16 is emulated on a CPU (no native float16 arithmetic): slower than float32, useful to check "
    "numerics before a GPU run; bfloat16 is the CPU's 16-bit type."
)


def _emulates_float16(precisions: Iterable[str]) -> bool:
    """Whether one of `precisions` is float16 and no GPU is visible: a float16 run on the CPU."""
    for precision in precisions:
        try:
            if tfmp.canonical_precision(precision) == "mixed_float16":
                return not tf.config.list_physical_devices("GPU")
        except ValueError:
            continue  # the run refuses it, naming it
    return False


def with_float16_note(print_fn: Callable[[str], None], precisions: Iterable[str]) -> Callable[[str], None]:
    """`print_fn`, adding `FLOAT16_ON_CPU_NOTE` after the run's first line when it runs float16 on a CPU.

    The note stands for TensorFlow's "oneDNN supports DT_HALF only on
    platforms with AVX-512" line, which the scripts' quiet start-up hides
    (`import_tensorflow_quietly`). It follows the run's first line, so a run
    its settings stop before it starts prints none.

    Args:
        print_fn: Where the run's lines go.
        precisions: The precisions the run trains in (names or aliases).

    Returns:
        `print_fn` itself when no float16 runs on a CPU, otherwise a wrapper.
    """
    if not _emulates_float16(precisions):
        return print_fn
    pending = [FLOAT16_ON_CPU_NOTE]

    def print_and_note(line: str) -> None:
        print_fn(line)
        while pending:
            print_fn(pending.pop())

    return print_and_note


def run(train_fn: Callable[..., Any], config: Any, precisions: Sequence[str] | None = None) -> Any:
    """Runs `train_fn(config, print_fn=print_line)`, turning the expected failures into clean exits.

    `config` may also be a `tfmp.run.tasks.Task`: its config's settings are
    read and the task is passed on.

    With float16 on a CPU among `precisions` (default: the config's
    `precisions`, or else its `precision`), the run's first line is followed
    by `FLOAT16_ON_CPU_NOTE` (`with_float16_note`).

    Bad settings become usage errors; missing or corrupt data, an unusable
    checkpoint or a failed checkpoint write, a run directory another run
    holds, or a stop on a non-finite step exit with status 1 and the message;
    a preemption (SIGTERM/SIGINT, checkpoint written) exits with 128 + the
    signal number, as a process killed by it would, and so does Ctrl-C
    during start-up (130, one line). Under `--strategy=multi_worker` a
    preemption of any worker stops every worker with
    `preemption.CLUSTER_EXIT_CODE` (75), and a lost worker stops the others
    with `preemption.WORKER_LOST_EXIT_CODE` (69). Every message names the flags where
    the library names settings (`to_flags`).
    """
    try:
        settings = config.config if isinstance(config, tasks.Task) else config
        if getattr(settings, "console", None) == "auto":
            # What the library decides for print (a progress bar on a terminal); it cannot tell for print_line.
            console = callbacks.console_mode("auto", sys.stdout)
            config = (
                config.replace(console=console)
                if isinstance(config, tasks.Task)
                else dataclasses.replace(config, console=console)
            )
        if precisions is None:
            precisions = getattr(settings, "precisions", None) or (getattr(settings, "precision", ""),)
        return train_fn(config, print_fn=with_float16_note(print_line, precisions))
    except training.ConfigError as e:
        raise app.UsageError(to_flags(str(e))) from None
    except (
        data_lib.DatasetNotFoundError,
        data_lib.CorruptDatasetError,
        checkpoint.CheckpointError,
        rundir.RunDirInUseError,
        callbacks.NonFiniteStepError,
    ) as e:
        sys.exit(f"error: {to_flags(str(e))}")
    except (preemption.Preempted, preemption.WorkerLost) as e:
        print(to_flags(str(e)), file=sys.stderr, flush=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt as e:
        print(to_flags(str(e)) or "interrupted by SIGINT (Ctrl-C)", file=sys.stderr, flush=True)
        sys.exit(128 + signal.SIGINT)
