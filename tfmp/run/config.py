"""Run configurations: what a training run is asked to do, checked before anything runs.

`TrainConfig` holds the settings every run shares, whatever its model and
data; `ImageConfig` adds the image datasets tfmp loads by name, and
`GANConfig` (the original tutorial's GAN, with its defaults) and
`ClassifierConfig` (MobileNetV2) add their models' own. Each field carries
its own help, its `--help` section and the bounds or choices of its value
(`option`): the scripts make their flags from the fields, so a setting is
described once. `validate()` is pure: it reads nothing from disk and
creates nothing, and raises `ConfigError` naming the first impossible value.
It first checks every setting against the type its field declares (an int
where `int`, not a bool; a number where `float`; `X | None`; tuples of the
declared length), then the values.
What a config builds is `tfmp.run.tasks`; how a run of it goes is `tfmp.run.runner`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from tfmp import optimizers as optimizers_lib
from tfmp import precision as precision_lib
from tfmp import trainers
from tfmp.models import gan as gan_model
from tfmp.run import data as data_lib

__all__ = [
    "CLUSTERS",
    "CONSOLE_MODES",
    "ClassifierConfig",
    "ConfigError",
    "GANConfig",
    "HELP_GROUPS",
    "ImageConfig",
    "LOSS_SCALE_AUTO",
    "LR_SCHEDULES",
    "ON_NONFINITE",
    "RESUMABLE",
    "SLURM_PORT_BASE",
    "STRATEGIES",
    "Terms",
    "TrainConfig",
    "XLA_SETTINGS",
    "loss_scale_is_set",
    "option",
    "resolved_loss_scale",
]


class Terms:
    """How messages and help name settings: as the configs' fields, `run_name` and `resume=True`.

    A front end that offers the settings under other names overrides `name`
    and `value`; the scripts name them as their flags (`--run_name`,
    `--resume`).
    """

    def name(self, field: str) -> str:
        """The setting `field`, named."""
        return field

    def value(self, field: str, value: Any) -> str:
        """The setting `field` with `value`: `run_name='x'`."""
        return f"{self.name(field)}={value!r}"

    def format(self, template: str) -> str:
        """`template` with each setting it names as `{field}` named by `name` (`str.format` syntax)."""
        return template.format_map(_Named(self))


class _Named(dict):
    """`str.format_map`'s mapping: every key is a setting, named by `terms`."""

    def __init__(self, terms: Terms):
        super().__init__()
        self.terms = terms

    def __missing__(self, field: str) -> str:
        return self.terms.name(field)


class ConfigError(ValueError):
    """An impossible run setting, found before any training.

    `str(error)` names settings as the configs do; `in_terms` names them as
    a front end does, e.g. `error.in_terms(flag_terms)` in a script:
    `--resume needs ... Received: --resume, --run_name=''`.

    Args:
        message: What is wrong. With `field` given, a template naming
            settings as `{field}` (`"{run_name} must be ..."`; other braces
            doubled); otherwise plain text.
        field: The setting the error is about.
        received: The values received, by setting; the message ends with
            them (`Received: resume=True, run_name=''`).

    Attributes:
        field: The setting the error is about, or None.
        received: The values received, by setting (may be empty).
    """

    def __init__(self, message: str, field: str | None = None, received: Mapping[str, Any] | None = None):
        self.template = message if field is not None else _literal(message)
        self.field = field
        self.received = dict(received or {})
        super().__init__(self.in_terms(Terms()))

    def in_terms(self, terms: Terms) -> str:
        """The message with its settings named by `terms`."""
        message = terms.format(self.template)
        if self.received:
            message += " Received: " + ", ".join(terms.value(name, value) for name, value in self.received.items())
        return message


def _literal(text: str) -> str:
    """`text` as a `ConfigError` template that names no setting: its braces doubled."""
    return text.replace("{", "{{").replace("}", "}}")


def _about(field: str, value: Any, error: ValueError) -> ConfigError:
    """A `ConfigError` about `field` from another module's ValueError, which ends `Received: field=value`."""
    message, received = str(error), f" Received: {field}={value!r}"
    if message.endswith(received):
        return ConfigError(_literal(message[: -len(received)]), field, {field: value})
    return ConfigError(_literal(message), field)


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
    flag: bool = True,
) -> Any:
    """A config field with its help: `epochs: int = option(4, "Passes over the training data.", "training")`.

    The scripts make a flag of each field (`scripts/common.py`), typed by its
    annotation; `validate` checks an int field's `lower_bound`.

    Args:
        default: The field's default.
        help: What the setting does; other settings named as `{field}`.
        group: The `HELP_GROUPS` section that lists its flag; None: the
            script's own section.
        choices: The valid values (the flag is an enum), or the name of a
            class attribute holding them (`"datasets"`).
        lower_bound: The smallest valid value.
        upper_bound: The largest valid value of the flag.
        flag: False: the scripts offer no flag unless they ask for it.

    Returns:
        A `dataclasses.field`, the rest in its `metadata`.
    """
    metadata = {"help": help, "group": group, "flag": flag}
    for key, value in (("choices", choices), ("lower_bound", lower_bound), ("upper_bound", upper_bound)):
        if value is not None:
            metadata[key] = value
    return dataclasses.field(default=default, metadata=metadata)


def _redefault(config: type, name: str, default: Any) -> Any:
    """`config`'s field `name` with another default; its help and the rest stay."""
    (field,) = [f for f in dataclasses.fields(config) if f.name == name]
    return dataclasses.field(default=default, metadata=field.metadata)


ON_NONFINITE = ("skip", "stop")
# The choices of some settings, defined here, where they are checked, rather than in the modules that act on
# them (tfmp.run.distribute, tfmp.run.cluster, tfmp.run.callbacks): config is the lowest layer of the run framework.
STRATEGIES = ("default", "mirrored", "multi_worker")
CLUSTERS = ("tf_config", "slurm")
SLURM_PORT_BASE = 8888  # SlurmClusterResolver's own default
CONSOLE_MODES = ("auto", "progress", "lines")
XLA_SETTINGS = ("auto", "true", "false")  # also True and False (tfmp.precision.resolve_jit_compile)
LOSS_SCALE_AUTO = "auto"

# Settings a resumed run may change; every other setting must match the checkpoint's.
RESUMABLE = frozenset(
    {
        "epochs",
        "steps_per_epoch",
        "data_dir",
        "logdir",
        "run_name",
        "log_every",
        "warmup_steps",
        "diagnose_every",
        "profile_steps",
        "strategy",
        "cluster",  # a run may be restarted under another launcher
        "slurm_port_base",
        "worker_timeout",
        "xla",
        "tf32",
        "checkpoint_dir",
        "checkpoint_every",
        "keep_checkpoints",
        "resume",
        "on_nonfinite",
        "deterministic",
        "num_samples",
        "validation_batch_size",
        "console",
        "precision",
        "loss_scale",  # compared once resolved
    }
)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Settings every training run shares.

    Each field's help is in its metadata (`option`), named settings in
    `{braces}`; `scripts/train.py --help` prints all of them. In Python
    `loss_scale` also takes a number, or None for `"none"`; `xla` also
    takes True or False; `profile_steps` is a `(start, end)` tuple or None.
    """

    precision: str = option(
        "auto",
        "Compute precision. auto: the fastest for this model on this device, measured once and cached "
        "(GPU 8.0+: float32, bfloat16, float16; 7.x: float32, float16; CPU with bfloat16: float32, bfloat16); "
        "multi_worker: by GPU compute capability.",
        "precision",
        choices=precision_lib.PRECISIONS + tuple(precision_lib.ALIASES),
    )
    loss_scale: str | float | None = option(
        LOSS_SCALE_AUTO,
        "dynamic, none, or a positive fixed scale. Only mixed_float16 uses it; auto (not set): dynamic there. "
        "A scale set under another precision is ignored with a note.",
        "precision",
    )
    xla: str | bool = option(
        "auto", "Compile the train step with XLA. auto: on with a GPU, off on CPU.", "precision", choices=XLA_SETTINGS
    )
    tf32: bool = option(True, "Allow TensorFloat-32 for float32 matmuls/convs (Ampere+ GPUs).", "precision")
    epochs: int = option(4, "Passes over the training data.", "training", lower_bound=1)
    batch_size: int = option(
        128,
        "Examples per step: the global batch, split evenly across the {strategy}'s replicas.",
        "training",
        lower_bound=1,
    )
    steps_per_epoch: int | None = option(
        None,
        "Optional cap on the steps of an epoch (needed when the training data does not know its length).",
        "training",
        lower_bound=1,
    )
    logdir: str = option("logs", "Parent directory of the TensorBoard runs.", "logs and console")
    run_name: str = option(
        "",
        "Run directory under {logdir} (a relative path inside it, e.g. sweep/lr-3); default: time, the task's "
        "name, precision and loss scale. One run at a time: a second run in the same directory is refused.",
        "logs and console",
    )
    seed: int = option(0, "Seed of weights, noise, shuffling and splits.", "training")
    log_every: int = option(
        1,
        "Print the step line every N steps of an epoch; write per-step TensorBoard scalars every N global steps.",
        "logs and console",
        lower_bound=1,
    )
    warmup_steps: int = option(3, "Leading steps left out of the mean throughput.", "logs and console", lower_bound=0)
    diagnose_every: int = option(
        0,
        "Every N steps, log the gradients' float16 underflow/overflow fractions to TensorBoard; 0: never.",
        "logs and console",
        lower_bound=0,
    )
    profile_steps: tuple[int, int] | None = option(
        None,
        "START,END: capture a TensorFlow profiler trace of these steps (from 1, inclusive) into the run's "
        "logdir, for TensorBoard's Profile tab. Start after the warm-up steps.",
        "logs and console",
    )
    float32_layers: str = option(
        precision_lib.FLOAT32_LAYERS_AUTO,
        "Regex (re.search on layer paths such as model/block_1_expand_BN): those layers compute in float32 "
        "under a mixed policy. none: no layer; auto: the model's advice (MobileNetV2 under bfloat16 on CPU: "
        "the depthwise convolutions), none otherwise.",
        "precision",
    )
    strategy: str = option(
        "default",
        "default: one device; mirrored: every local GPU; multi_worker: the hosts of {cluster} (start the run on "
        "each; only the chief writes logs).",
        "training",
        choices=STRATEGIES,
    )
    cluster: str = option(
        "tf_config",
        "Where {strategy}=multi_worker finds its hosts. tf_config: the TF_CONFIG variable of each host; slurm: "
        "the environment srun gives its tasks (launch with srun; worker index = SLURM_PROCID).",
        "training",
        choices=CLUSTERS,
    )
    slurm_port_base: int = option(
        SLURM_PORT_BASE,
        "With {cluster}=slurm: the port of each node's first task; its k-th task listens on this + k.",
        "training",
        lower_bound=1,
        upper_bound=65535,
    )
    worker_timeout: float = option(
        30.0,
        "{strategy}=multi_worker: seconds without a heartbeat after which a worker counts as lost and the "
        "others stop (exit 69); restart all with {resume}.",
        "training",
        lower_bound=1,
    )
    checkpoint_dir: str = option("", "Where checkpoints go; default: <logdir>/<run_name>/checkpoints.", "checkpoints")
    checkpoint_every: int = option(
        0,
        "Also checkpoint every N steps; 0: at each epoch end only (and on SIGTERM/SIGINT).",
        "checkpoints",
        lower_bound=0,
    )
    keep_checkpoints: int = option(
        3,
        "Checkpoints kept; with 2 or more a corrupt newest one falls back to the previous.",
        "checkpoints",
        lower_bound=1,
    )
    resume: bool = option(
        False,
        "Continue the run named by {run_name} (or {checkpoint_dir}) exactly where its newest readable "
        "checkpoint stopped; start from step 0 if it has none.",
        "checkpoints",
    )
    on_nonfinite: str = option(
        "skip",
        "A step with a NaN/Inf gradient is never applied. skip: count it and go on; stop: stop with the "
        "epoch, step and first non-finite layer (not with dynamic loss scaling, which skips by design).",
        "training",
        choices=ON_NONFINITE,
    )
    deterministic: bool = option(
        False,
        "Turn on TensorFlow op determinism, so a resumed run repeats the uninterrupted one bit for bit.",
        "training",
    )
    console: str = option(
        "auto",
        "progress: a Keras progress bar per epoch; lines: the original tutorial's step line every {log_every} "
        "steps; auto: progress on a terminal, lines otherwise (pipes, files).",
        "logs and console",
        choices=CONSOLE_MODES,
    )

    def validate(self) -> None:
        """Raises `ConfigError` naming the first impossible setting.

        Pure: the file system is not touched. Whether `logdir` and
        `checkpoint_dir` can be written is found when the run creates them
        (`tfmp.run.runner`), before any training.
        """
        _check_types(self)
        for name, check in (
            ("precision", precision_lib.canonical_precision),
            ("loss_scale", resolved_loss_scale),
            ("xla", lambda xla: precision_lib.resolve_jit_compile(xla, has_gpu=False)),
        ):
            try:
                check(getattr(self, name))
            except ValueError as e:
                raise _about(name, getattr(self, name), e) from None
        declared = typing.get_type_hints(type(self))
        for field in dataclasses.fields(self):
            # The lower bound of every int setting (its flag's too); None, where allowed, means "not set".
            value = getattr(self, field.name)
            if "lower_bound" in field.metadata and declared[field.name] in (int, int | None) and value is not None:
                _check_int(field.name, value, minimum=field.metadata["lower_bound"])
        _check_choice("strategy", self.strategy, STRATEGIES)
        self._check_cluster()
        if not 1 <= self.worker_timeout < math.inf:
            raise ConfigError(
                "{worker_timeout} must be a finite number of seconds >= 1.",
                "worker_timeout",
                {"worker_timeout": self.worker_timeout},
            )
        if self.profile_steps is not None:
            start, end = self.profile_steps
            for part, value, minimum in (("start", start, 1), ("end", end, start)):
                if value < minimum:
                    raise ConfigError(
                        f"{{profile_steps}} {part} must be an integer >= {minimum}. "
                        f"Received: {{profile_steps}} {part}={value!r}",
                        "profile_steps",
                    )
        if self.float32_layers:
            try:
                re.compile(self.float32_layers)
            except re.error as e:
                raise ConfigError(
                    "{float32_layers} is not a valid regular expression ("
                    + _literal(f"{e}). Received: {self.float32_layers!r}"),
                    "float32_layers",
                ) from None
        for field in dataclasses.fields(self):
            # inf would turn the first applied update into NaN weights.
            if field.name.endswith("learning_rate"):
                _check_finite_positive(field.name, getattr(self, field.name))
        _check_choice("console", self.console, CONSOLE_MODES)
        _check_choice("on_nonfinite", self.on_nonfinite, ON_NONFINITE)
        if self.resume and not (self.run_name or self.checkpoint_dir):
            raise ConfigError(
                "resume needs the run to continue: give its {run_name} (or its {checkpoint_dir}).",
                "resume",
                {"resume": True, "run_name": self.run_name, "checkpoint_dir": self.checkpoint_dir},
            )
        _check_run_name(self.run_name)

    def _check_cluster(self) -> None:
        _check_choice("cluster", self.cluster, CLUSTERS)
        # Settings that only multi_worker's Slurm launch reads are refused elsewhere rather than ignored.
        if self.cluster != "tf_config" and self.strategy != "multi_worker":
            raise ConfigError(
                "cluster only says where {strategy}='multi_worker' finds its hosts: add {strategy}='multi_worker' "
                "or drop the cluster setting.",
                "cluster",
                {"cluster": self.cluster, "strategy": self.strategy},
            )
        if self.slurm_port_base > 65535:
            raise ConfigError(
                "{slurm_port_base} must be a port number from 1 to 65535.",
                "slurm_port_base",
                {"slurm_port_base": self.slurm_port_base},
            )
        if self.slurm_port_base != SLURM_PORT_BASE and self.cluster != "slurm":
            raise ConfigError(
                "{slurm_port_base} is read only under {cluster}='slurm'.",
                "slurm_port_base",
                {"slurm_port_base": self.slurm_port_base, "cluster": self.cluster},
            )


def loss_scale_is_set(loss_scale: str | float | None) -> bool:
    """Whether the user chose a loss scale (not `"auto"`)."""
    return not (isinstance(loss_scale, str) and loss_scale.strip().lower() == LOSS_SCALE_AUTO)


def resolved_loss_scale(loss_scale: str | float | None) -> str | float:
    """A config's loss scale normalised (`tfmp.optimizers.parse_loss_scale`); `"auto"` (not set) is dynamic.

    `"auto"` rather than None marks "not set": `parse_loss_scale` reads None
    as `"none"`, and library users passing None keep that meaning.
    """
    return optimizers_lib.parse_loss_scale(loss_scale) if loss_scale_is_set(loss_scale) else "dynamic"


# What a value of each declared field type may be: numpy scalars count; a bool is not an int, and is not a number.
_INSTANCE_OF = {
    bool: (bool, np.bool_),
    int: (int, np.integer),
    float: (int, float, np.integer, np.floating),
    str: (str,),
    type(None): (type(None),),
}
# Each type in words, one and several.
_KIND_NAMES = {
    bool: ("a boolean", "booleans"),
    int: ("an integer", "integers"),
    float: ("a number", "numbers"),
    str: ("a string", "strings"),
    type(None): ("None", "None values"),
}


def _is_a(value: Any, kind: Any) -> bool:
    """Whether `value` is of the declared type `kind`: a class, `X | Y`, or `tuple[X, Y, ...]` (that length)."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return any(_is_a(value, option) for option in typing.get_args(kind))
    if typing.get_origin(kind) is tuple:
        items = typing.get_args(kind)
        return isinstance(value, tuple) and len(value) == len(items) and all(map(_is_a, value, items))
    if isinstance(value, bool) and kind is not bool:  # a bool is a Python int, but True is no batch size
        return False
    return isinstance(value, _INSTANCE_OF[kind])


def _describe(kind: Any) -> str:
    """`kind` in words: `a string`, `a tuple of 2 integers or None`."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        options = [_describe(option) for option in typing.get_args(kind)]
        return ", ".join(options[:-1]) + " or " + options[-1]
    if typing.get_origin(kind) is tuple:
        items = typing.get_args(kind)
        return f"a tuple of {len(items)} {_KIND_NAMES[items[0]][1]}"  # the configs' tuples hold one type
    return _KIND_NAMES[kind][0]


def _check_types(config: TrainConfig) -> None:
    """Raises `ConfigError` naming the first field whose value is not of the type the field declares."""
    declared = typing.get_type_hints(type(config))
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if not _is_a(value, declared[field.name]):
            raise ConfigError(
                f"{{{field.name}}} must be {_describe(declared[field.name])}.", field.name, {field.name: value}
            )


def _check_finite_positive(name: str, value: float) -> None:
    # NaN fails every comparison; inf overflows where a size or an update is computed from the value.
    if not 0 < value < math.inf:
        raise ConfigError(f"{{{name}}} must be a finite number > 0.", name, {name: value})


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ConfigError(f"{{{name}}} must be an integer >= {minimum}.", name, {name: value})


def _check_choice(name: str, value: Any, valid: Sequence[str]) -> None:
    if value not in valid:
        raise ConfigError(f"Unknown {{{name}}}. Valid: {', '.join(valid)}.", name, {name: value})


def _check_run_name(run_name: str) -> None:
    """A run name is a relative path inside logdir: nested names (`sweep/lr-3`) are fine, `..` is not."""
    parts = run_name.replace("\\", "/").split("/")
    if run_name and (os.path.isabs(run_name) or ".." in parts or os.path.normpath(run_name) == "."):
        raise ConfigError(
            "{run_name} must be a relative path that stays inside {logdir}, e.g. 'gan' or 'sweep/lr-1e-3' "
            "(no '..', not absolute, not '.'); to write elsewhere, set {logdir}.",
            "run_name",
            {"run_name": run_name},
        )


@dataclasses.dataclass(frozen=True)
class ImageConfig(TrainConfig):
    """A run on one of the image datasets tfmp loads by name (`tfmp.run.data.load_images`).

    `dataset` is one of the config's `datasets`.
    """

    datasets: ClassVar[tuple[str, ...]] = data_lib.DATASETS
    image_shape: ClassVar[tuple[int, int, int]] = (28, 28, 1)

    dataset: str = option(
        "digits",
        "Training data. digits is embedded (no download); synthetic is random data for benchmarks.",
        "data",
        choices="datasets",
    )
    data_dir: str | None = option(
        None,
        "Directory holding the downloaded dataset; default: keras.datasets' cache (~/.keras/datasets).",
        "data",
    )

    def validate(self) -> None:
        super().validate()
        if self.dataset.lower() not in self.datasets:
            raise ConfigError(
                f"Unknown dataset for this model. Valid: {', '.join(self.datasets)}.",
                "dataset",
                {"dataset": self.dataset},
            )


@dataclasses.dataclass(frozen=True)
class GANConfig(ImageConfig):
    """The original tutorial's GAN run: its defaults are the tutorial's.

    Its own flags are listed under the script's name; the architecture and
    the label noise stay the tutorial's in the scripts (no flag).
    """

    datasets: ClassVar[tuple[str, ...]] = ("mnist", "digits", "synthetic")
    image_shape: ClassVar[tuple[int, int, int]] = gan_model.IMAGE_SHAPE

    batch_size: int = _redefault(TrainConfig, "batch_size", 4096)
    dataset: str = _redefault(ImageConfig, "dataset", "mnist")
    # The tutorial's values, defined once: the architecture in tfmp.models.gan, the training in tfmp.trainers.
    latent_dim: int = option(gan_model.LATENT_DIM, "Noise size.", lower_bound=1)
    generator_widths: tuple[int, int, int] = option(
        gan_model.GENERATOR_WIDTHS,
        "The generator's three conv widths (the GAN tutorial's bad sizes: 63,31,7).",
        flag=False,
    )
    discriminator_widths: tuple[int, int, int] = option(
        gan_model.DISCRIMINATOR_WIDTHS, "The discriminator's three conv widths.", flag=False
    )
    generator_learning_rate: float = option(
        trainers.TUTORIAL_GAN.generator_learning_rate, "Generator Adam learning rate."
    )
    discriminator_learning_rate: float = option(
        trainers.TUTORIAL_GAN.discriminator_learning_rate, "Discriminator RMSprop learning rate."
    )
    label_softening: float = option(
        trainers.TUTORIAL_GAN.label_softening, "How far the discriminator's 0/1 labels move inward.", flag=False
    )
    label_swap_fraction: float = option(
        trainers.TUTORIAL_GAN.label_swap_fraction, "Share of the discriminator's labels swapped each step.", flag=False
    )
    num_samples: int = option(
        16, "Generator images in the per-epoch TensorBoard grid.", "logs and console", lower_bound=1, flag=False
    )

    def validate(self) -> None:
        super().validate()
        for name in ("generator_widths", "discriminator_widths"):
            for width in getattr(self, name):
                _check_int(name, width, minimum=1)
        if not 0 <= self.label_softening < 0.5:
            raise ConfigError(
                "{label_softening} must be in [0, 0.5).", "label_softening", {"label_softening": self.label_softening}
            )
        if not 0 <= self.label_swap_fraction <= 1:
            raise ConfigError(
                "{label_swap_fraction} must be in [0, 1].",
                "label_swap_fraction",
                {"label_swap_fraction": self.label_swap_fraction},
            )


LR_SCHEDULES = ("cosine", "constant")


@dataclasses.dataclass(frozen=True)
class ClassifierConfig(ImageConfig):
    """The MobileNetV2 classifier's run (the Keras tutorial's model)."""

    datasets: ClassVar[tuple[str, ...]] = ("cifar10", "digits", "synthetic")
    image_shape: ClassVar[tuple[int, int, int]] = (32, 32, 3)

    epochs: int = _redefault(TrainConfig, "epochs", 10)
    batch_size: int = _redefault(TrainConfig, "batch_size", 128)
    dataset: str = _redefault(ImageConfig, "dataset", "cifar10")
    alpha: float = option(1.0, "MobileNetV2 width multiplier.", "model and optimizer")
    learning_rate: float = option(1e-3, "Adam (peak, with {lr_schedule}=cosine) learning rate.", "model and optimizer")
    lr_schedule: str = option(
        "cosine",
        "cosine: decay the learning rate to zero over the run (a short run's final accuracy is then far less "
        "noisy); constant: keep it.",
        "model and optimizer",
        choices=LR_SCHEDULES,
    )
    from_logits: bool = option(
        False, "Output float32 logits with a from-logits loss instead of a softmax.", "model and optimizer"
    )
    # 0.999 left inference-mode accuracy near chance for thousands of steps on the embedded digits; 0.9 tracks
    # within an epoch.
    batch_norm_momentum: float = option(
        0.9,
        "BatchNorm moving-statistics momentum (Keras's MobileNetV2: 0.999, too slow for small data).",
        "model and optimizer",
    )
    validation_batch_size: int = option(
        256, "Batch size of the validation pass.", "training", lower_bound=1, flag=False
    )

    def validate(self) -> None:
        super().validate()
        _check_finite_positive("alpha", self.alpha)  # inf: MobileNetV2 cannot turn alpha * 32 into a width
        if not 0 <= self.batch_norm_momentum < 1:
            raise ConfigError(
                "{batch_norm_momentum} must be in [0, 1).",
                "batch_norm_momentum",
                {"batch_norm_momentum": self.batch_norm_momentum},
            )
        _check_choice("lr_schedule", self.lr_schedule, LR_SCHEDULES)
