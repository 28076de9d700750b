"""Run configurations: what a training run is asked to do, checked before anything runs.

`TrainConfig` holds the settings every run shares, whatever its model and
data; `ImageConfig` adds the image datasets tfmp loads by name, and
`GANConfig` (the original tutorial's GAN, with its defaults) and
`ClassifierConfig` (MobileNetV2) add their models' own. `validate()` is pure: it reads nothing from disk and
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
from collections.abc import Sequence
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
    "ImageConfig",
    "LOSS_SCALE_AUTO",
    "LR_SCHEDULES",
    "ON_NONFINITE",
    "RESUMABLE",
    "SLURM_PORT_BASE",
    "STRATEGIES",
    "TrainConfig",
    "loss_scale_is_set",
    "resolved_loss_scale",
]


class ConfigError(ValueError):
    """An impossible run setting, found before any training."""


ON_NONFINITE = ("skip", "stop")
# The choices of some settings, defined here, where they are checked, rather than in the modules that act on
# them (tfmp.run.distribute, tfmp.run.cluster, tfmp.run.callbacks): config is the lowest layer of the run framework.
STRATEGIES = ("default", "mirrored", "multi_worker")
CLUSTERS = ("tf_config", "slurm")
SLURM_PORT_BASE = 8888  # SlurmClusterResolver's own default
CONSOLE_MODES = ("auto", "progress", "lines")

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

    Attributes:
        precision: `float32`, `mixed_float16`, `mixed_bfloat16`, `auto`, or an
            alias (`fp32`, `fp16`, `bf16`).
        loss_scale: `"auto"` (the default: not set), `"dynamic"`, `"none"`
            (or None) or a fixed positive scale; used only under
            `mixed_float16`, where `"auto"` means `"dynamic"`. A scale set
            explicitly (anything but `"auto"`, `"none"` or None) under another
            precision is ignored with a one-line note.
        xla: `"auto"` (on with a GPU, off on CPU), `"true"` or `"false"`.
        tf32: Allow TensorFloat-32 for float32 math on Ampere+ GPUs.
        epochs: Passes over the training data.
        batch_size: Examples per step.
        steps_per_epoch: Optional cap on the steps of an epoch (the steps of
            an epoch, when the task's training data does not know its length).
        logdir: Parent directory of the TensorBoard runs.
        run_name: The run's directory under `logdir`; by default a timestamp
            plus the precision and loss-scale settings.
        seed: Seed of weights, noise, shuffling and the data split.
        log_every: Print the step line every this many steps of an epoch,
            and write the per-step TensorBoard scalars (`batch_` tags) every
            this many global steps (`tfmp.run.callbacks.Summaries`).
        warmup_steps: Leading steps left out of the mean throughput.
        diagnose_every: Every this many steps, log the float16 underflow and
            overflow fractions of the gradients of a fixed probe batch to
            TensorBoard (`tfmp.run.callbacks.GradientDiagnostics`); 0 = never.
        profile_steps: `(start, end)`: capture a TensorFlow profiler trace of
            these training steps (counted from 1, inclusive) into the run's
            directory (`tfmp.run.callbacks.ProfileSteps`); None = no trace.
        float32_layers: A regular expression; layers whose path matches
            (`re.search`, see `tfmp.precision.keep_float32`) compute in
            float32 under a mixed policy. `"none"` (or empty) = none;
            `"auto"` = the model's `cpu_bfloat16_float32_layers` under
            mixed_bfloat16 without a GPU, none otherwise
            (`tfmp.precision.resolve_float32_layers`).
        strategy: One of `STRATEGIES` (`tfmp.run.distribute` makes them):
            `"default"` (one device), `"mirrored"` (every local GPU) or
            `"multi_worker"` (hosts named by `TF_CONFIG`). `batch_size` is
            then the global batch, split evenly across the replicas; only the
            chief writes the logs.
        cluster: Where `multi_worker` finds its hosts and this process's
            place among them (`tfmp.run.cluster`), one of `CLUSTERS`:
            `"tf_config"` (the `TF_CONFIG` environment variable, written per
            host) or `"slurm"` (the environment `srun` gives each task, read
            by `tf.distribute.cluster_resolver.SlurmClusterResolver`: worker
            index = `SLURM_PROCID`). Only with `strategy="multi_worker"`.
        slurm_port_base: Under `cluster="slurm"`, the port of a node's first
            task; its k-th task listens on `slurm_port_base + k`.
        worker_timeout: Under `multi_worker`, seconds without a heartbeat
            after which a worker counts as lost: the others then stop
            (`tfmp.run.preemption.WorkerLost`) instead of waiting for it. A
            finite number >= 1; the other strategies ignore it.
        checkpoint_dir: Where the run's checkpoints go; default
            `<logdir>/<run_name>/checkpoints` (`tfmp.run.checkpoint`).
        checkpoint_every: Also checkpoint every this many steps; 0 = only at
            the end of each epoch (and on SIGTERM/SIGINT).
        keep_checkpoints: Checkpoints kept (>= 1; with 2 or more, a corrupt
            newest one falls back to the one before).
        resume: Continue from the newest readable checkpoint in
            `checkpoint_dir`, exactly where it stopped (start from step 0 if
            there is none). Needs `run_name` or `checkpoint_dir`.
        on_nonfinite: A step with a NaN/Inf gradient is never applied; then
            `"skip"` counts it and goes on, `"stop"` raises
            `tfmp.run.callbacks.NonFiniteStepError` naming the epoch, the step and
            the first non-finite layer. Under dynamic loss scaling overflowing
            steps are expected and always skipped, so `"stop"` is refused.
        deterministic: Turn on TensorFlow's op determinism for the run
            (`tf.config.experimental.enable_op_determinism`, restored after),
            so that a resumed run repeats the uninterrupted one bit for bit.
        console: One of `CONSOLE_MODES` (`tfmp.run.callbacks` acts on them):
            `"progress"` shows a Keras progress bar per epoch (on
            `sys.stdout`), `"lines"` the seed's step line every `log_every`
            steps; `"auto"` is `"progress"` when `print_fn` is `print` and
            `sys.stdout` is a terminal, `"lines"` otherwise (pipes, files,
            captured output).
    """

    precision: str = "auto"
    loss_scale: str | float | None = "auto"
    xla: str | bool = "auto"
    tf32: bool = True
    epochs: int = 4
    batch_size: int = 128
    steps_per_epoch: int | None = None
    logdir: str = "logs"
    run_name: str = ""
    seed: int = 0
    log_every: int = 1
    warmup_steps: int = 3
    diagnose_every: int = 0
    profile_steps: tuple[int, int] | None = None
    float32_layers: str = precision_lib.FLOAT32_LAYERS_AUTO
    strategy: str = "default"
    cluster: str = "tf_config"
    slurm_port_base: int = SLURM_PORT_BASE
    worker_timeout: float = 30.0
    checkpoint_dir: str = ""
    checkpoint_every: int = 0
    keep_checkpoints: int = 3
    resume: bool = False
    on_nonfinite: str = "skip"
    deterministic: bool = False
    console: str = "auto"

    def validate(self) -> None:
        """Raises `ConfigError` naming the first impossible setting.

        Pure: the file system is not touched. Whether `logdir` and
        `checkpoint_dir` can be written is found when the run creates them
        (`tfmp.run.runner`), before any training.
        """
        _check_types(self)
        try:
            precision_lib.canonical_precision(self.precision)
            resolved_loss_scale(self.loss_scale)
            precision_lib.resolve_jit_compile(self.xla, has_gpu=False)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        for name in ("epochs", "batch_size", "log_every"):
            _check_int(name, getattr(self, name), minimum=1)
        _check_int("warmup_steps", self.warmup_steps, minimum=0)
        _check_int("diagnose_every", self.diagnose_every, minimum=0)
        _check_choice("strategy", self.strategy, STRATEGIES)
        self._check_cluster()
        if not 1 <= self.worker_timeout < math.inf:
            raise ConfigError(
                "worker_timeout must be a finite number of seconds >= 1. "
                f"Received: worker_timeout={self.worker_timeout!r}"
            )
        if self.profile_steps is not None:
            start, end = self.profile_steps
            _check_int("profile_steps start", start, minimum=1)
            _check_int("profile_steps end", end, minimum=start)
        if self.float32_layers:
            try:
                re.compile(self.float32_layers)
            except re.error as e:
                raise ConfigError(
                    f"float32_layers is not a valid regular expression ({e}). Received: {self.float32_layers!r}"
                ) from None
        if self.steps_per_epoch is not None:
            _check_int("steps_per_epoch", self.steps_per_epoch, minimum=1)
        for field in dataclasses.fields(self):
            # inf would turn the first applied update into NaN weights.
            if field.name.endswith("learning_rate"):
                _check_finite_positive(field.name, getattr(self, field.name))
        _check_int("checkpoint_every", self.checkpoint_every, minimum=0)
        _check_int("keep_checkpoints", self.keep_checkpoints, minimum=1)
        _check_choice("console", self.console, CONSOLE_MODES)
        _check_choice("on_nonfinite", self.on_nonfinite, ON_NONFINITE)
        if self.resume and not (self.run_name or self.checkpoint_dir):
            raise ConfigError(
                "resume needs the run to continue: give its run_name (or its checkpoint_dir). "
                f"Received: resume=True, run_name={self.run_name!r}, checkpoint_dir={self.checkpoint_dir!r}"
            )
        _check_run_name(self.run_name)

    def _check_cluster(self) -> None:
        _check_choice("cluster", self.cluster, CLUSTERS)
        # Settings that only multi_worker's Slurm launch reads are refused elsewhere rather than ignored.
        if self.cluster != "tf_config" and self.strategy != "multi_worker":
            raise ConfigError(
                "cluster only says where strategy='multi_worker' finds its hosts: add strategy='multi_worker' "
                f"or drop the cluster setting. Received: cluster={self.cluster!r}, strategy={self.strategy!r}"
            )
        _check_int("slurm_port_base", self.slurm_port_base, minimum=1)
        if self.slurm_port_base > 65535:
            raise ConfigError(
                "slurm_port_base must be a port number from 1 to 65535. "
                f"Received: slurm_port_base={self.slurm_port_base!r}"
            )
        if self.slurm_port_base != SLURM_PORT_BASE and self.cluster != "slurm":
            raise ConfigError(
                "slurm_port_base is read only under cluster='slurm'. "
                f"Received: slurm_port_base={self.slurm_port_base!r}, cluster={self.cluster!r}"
            )


LOSS_SCALE_AUTO = "auto"


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
                f"{field.name} must be {_describe(declared[field.name])}. Received: {field.name}={value!r}"
            )


def _check_finite_positive(name: str, value: float) -> None:
    # NaN fails every comparison; inf overflows where a size or an update is computed from the value.
    if not 0 < value < math.inf:
        raise ConfigError(f"{name} must be a finite number > 0. Received: {name}={value!r}")


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}. Received: {name}={value!r}")


def _check_choice(name: str, value: Any, valid: Sequence[str]) -> None:
    if value not in valid:
        raise ConfigError(f"Unknown {name}. Valid: {', '.join(valid)}. Received: {name}={value!r}")


def _check_run_name(run_name: str) -> None:
    """A run name is a relative path inside logdir: nested names (`sweep/lr-3`) are fine, `..` is not."""
    parts = run_name.replace("\\", "/").split("/")
    if run_name and (os.path.isabs(run_name) or ".." in parts or os.path.normpath(run_name) == "."):
        raise ConfigError(
            "run_name must be a relative path that stays inside logdir, e.g. 'gan' or 'sweep/lr-1e-3' "
            f"(no '..', not absolute, not '.'); to write elsewhere, set logdir. Received: run_name={run_name!r}"
        )


@dataclasses.dataclass(frozen=True)
class ImageConfig(TrainConfig):
    """A run on one of the image datasets tfmp loads by name (`tfmp.run.data.load_images`).

    Attributes:
        dataset: One of the config's `datasets`.
        data_dir: Directory holding a downloaded dataset (see `tfmp.run.data`).
    """

    datasets: ClassVar[tuple[str, ...]] = data_lib.DATASETS
    image_shape: ClassVar[tuple[int, int, int]] = (28, 28, 1)

    dataset: str = "digits"
    data_dir: str | None = None

    def validate(self) -> None:
        super().validate()
        if self.dataset.lower() not in self.datasets:
            raise ConfigError(
                f"Unknown dataset for this model. Valid: {', '.join(self.datasets)}. Received: dataset={self.dataset!r}"
            )


@dataclasses.dataclass(frozen=True)
class GANConfig(ImageConfig):
    """The seed GAN's run: its defaults are the seed's.

    Attributes:
        latent_dim: Noise size (100).
        generator_widths: Generator conv widths (64, 32, 8).
        discriminator_widths: Discriminator conv widths (24, 64, 128).
        generator_learning_rate: Adam's rate (1e-3).
        discriminator_learning_rate: RMSprop's rate (1e-4).
        label_softening: Label softening (0.01).
        label_swap_fraction: Share of discriminator labels swapped (0.1).
        num_samples: Generator images in the per-epoch TensorBoard grid.
    """

    datasets: ClassVar[tuple[str, ...]] = ("mnist", "digits", "synthetic")
    image_shape: ClassVar[tuple[int, int, int]] = gan_model.IMAGE_SHAPE

    batch_size: int = 4096
    dataset: str = "mnist"
    # The seed's values, defined once: the architecture in tfmp.models.gan, the training in tfmp.trainers.
    latent_dim: int = gan_model.LATENT_DIM
    generator_widths: tuple[int, int, int] = gan_model.GENERATOR_WIDTHS
    discriminator_widths: tuple[int, int, int] = gan_model.DISCRIMINATOR_WIDTHS
    generator_learning_rate: float = trainers.SEED_GAN.generator_learning_rate
    discriminator_learning_rate: float = trainers.SEED_GAN.discriminator_learning_rate
    label_softening: float = trainers.SEED_GAN.label_softening
    label_swap_fraction: float = trainers.SEED_GAN.label_swap_fraction
    num_samples: int = 16

    def validate(self) -> None:
        super().validate()
        _check_int("latent_dim", self.latent_dim, minimum=1)
        _check_int("num_samples", self.num_samples, minimum=1)
        for name in ("generator_widths", "discriminator_widths"):
            for width in getattr(self, name):
                _check_int(name, width, minimum=1)
        if not 0 <= self.label_softening < 0.5:
            raise ConfigError(
                f"label_softening must be in [0, 0.5). Received: label_softening={self.label_softening!r}"
            )
        if not 0 <= self.label_swap_fraction <= 1:
            raise ConfigError(
                f"label_swap_fraction must be in [0, 1]. Received: label_swap_fraction={self.label_swap_fraction!r}"
            )


LR_SCHEDULES = ("cosine", "constant")


@dataclasses.dataclass(frozen=True)
class ClassifierConfig(ImageConfig):
    """The MobileNetV2 classifier's run (seed 002).

    Attributes:
        alpha: MobileNetV2's width multiplier.
        learning_rate: Adam's (peak) learning rate.
        lr_schedule: `"cosine"` decays the rate to zero over the run
            (`keras.optimizers.schedules.CosineDecay`), which makes the final
            accuracy of a short run far less noisy; `"constant"` keeps it.
        from_logits: Output float32 logits and use a from-logits loss,
            instead of a float32 softmax.
        batch_norm_momentum: Momentum of the backbone's BatchNorm moving
            statistics. Keras's MobileNetV2 uses 0.999, which on small data
            leaves inference-mode accuracy near chance for thousands of steps
            (measured on the embedded digits); 0.9 tracks within an epoch.
        validation_batch_size: Batch size of the validation pass.
    """

    datasets: ClassVar[tuple[str, ...]] = ("cifar10", "digits", "synthetic")
    image_shape: ClassVar[tuple[int, int, int]] = (32, 32, 3)

    epochs: int = 10
    batch_size: int = 128
    dataset: str = "cifar10"
    alpha: float = 1.0
    learning_rate: float = 1e-3
    lr_schedule: str = "cosine"
    from_logits: bool = False
    batch_norm_momentum: float = 0.9
    validation_batch_size: int = 256

    def validate(self) -> None:
        super().validate()
        _check_finite_positive("alpha", self.alpha)  # inf: MobileNetV2 cannot turn alpha * 32 into a width
        if not 0 <= self.batch_norm_momentum < 1:
            raise ConfigError(
                f"batch_norm_momentum must be in [0, 1). Received: batch_norm_momentum={self.batch_norm_momentum!r}"
            )
        _check_int("validation_batch_size", self.validation_batch_size, minimum=1)
        _check_choice("lr_schedule", self.lr_schedule, LR_SCHEDULES)
