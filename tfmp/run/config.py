"""Run configurations: what a training run is asked to do, as plain data checked in one place.

`TrainConfig` holds the settings every run shares, whatever its model and
data; `ImageConfig` adds the image datasets tfmp loads by name, and
`GANConfig` (the original tutorial's GAN, with its defaults) and
`ClassifierConfig` (MobileNetV2) add their models' own. Each field is made by
`tfmp.run.options.option`, which keeps its default, help, `--help` section, choices, bounds,
check and whether a resumed run may change it beside it; the scripts make one flag per field (`--run_name` for
`run_name`) and the docs one table row.

`validate()` is pure: it reads nothing from disk, creates nothing, and raises
`ConfigError` for the first impossible value, naming the field and the value
received. It checks each field against its declared type, its choices, its
bounds and its own check, then the settings that depend on each other. This
module imports no model and no trainer: what a config builds is
`tfmp.run.tasks`; how a run of it goes is `tfmp.run.runner`.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, ClassVar

from tfmp import float32_layers
from tfmp import optimizers as optimizers_lib
from tfmp import precision as precision_lib
from tfmp.run.options import HELP_GROUPS, ConfigError, check_fields, option, redefault, resumable_fields

__all__ = [
    "CLUSTERS",
    "CONSOLE_MODES",
    "ClassifierConfig",
    "ConfigError",
    "GANConfig",
    "HELP_GROUPS",
    "ImageConfig",
    "LR_SCHEDULES",
    "ON_NONFINITE",
    "RESUMABLE",
    "SLURM_PORT_BASE",
    "STRATEGIES",
    "TrainConfig",
    "XLA_SETTINGS",
    "option",
    "loss_scale_for",
    "requested_loss_scale",
]

ON_NONFINITE = ("skip", "stop")
# The choices of some settings, defined here, where they are checked, rather than in the modules that act on
# them (tfmp.run.distribute, tfmp.run.cluster, tfmp.run.callbacks): config is the lowest layer of the run framework.
STRATEGIES = ("default", "mirrored", "multi_worker")
CLUSTERS = ("tf_config", "slurm")
SLURM_PORT_BASE = 8888  # SlurmClusterResolver's own default
CONSOLE_MODES = ("auto", "progress", "lines")
XLA_SETTINGS = ("auto", "true", "false")  # also True and False (tfmp.precision.canonical_xla)
LR_SCHEDULES = ("cosine", "constant")

# What `log_every=0` means with a GPU: writing a step's TensorBoard scalars is host work (one `tf.summary.scalar`
# each), and on a GPU the host is what launches the next step.
GPU_LOG_EVERY = 100


def requested_loss_scale(loss_scale: str | float | None) -> str | float | None:
    """A config's `loss_scale`, parsed (`tfmp.optimizers.parse_loss_scale`); None when not set (`"auto"`).

    The config's `"auto"` is the only value that means "not set": it becomes
    `"dynamic"` under `mixed_float16` and `"none"` elsewhere once the
    precision is known (`tfmp.run.settled.resolve`).

    Raises:
        ValueError: for a value `parse_loss_scale` refuses, naming it.
    """
    if isinstance(loss_scale, str) and loss_scale.strip().lower() == "auto":
        return None
    return optimizers_lib.parse_loss_scale(loss_scale)


def loss_scale_for(requested: str | float | None, precision: str) -> str | float:
    """The loss scale a run of `precision` uses, from the scale its config requests.

    Only `mixed_float16` is loss-scaled: there a scale the config leaves
    `"auto"` is `"dynamic"`; every other precision gets `"none"`.

    Args:
        requested: The config's `loss_scale`, parsed once by
            `tfmp.run.config.requested_loss_scale` (None: `"auto"`).
        precision: The resolved precision.
    """
    if precision != "mixed_float16":
        return "none"
    return "dynamic" if requested is None else requested


def loss_scales(requested: str | float | None) -> dict[str, str | float]:
    """The loss scale each concrete precision would run with (`loss_scale_for` each), for `auto`'s candidates."""
    return {precision: loss_scale_for(requested, precision) for precision in precision_lib.CONCRETE_PRECISIONS}


def _seconds(value: float) -> None:
    if not 1 <= value < math.inf:
        raise ConfigError("must be a finite number of seconds >= 1.")


def _profile_steps(steps: tuple[int, int] | None) -> None:
    if steps is not None and not 1 <= steps[0] <= steps[1]:
        raise ConfigError(f"must be START,END with 1 <= START <= END (here start={steps[0]}, end={steps[1]}).")


def _relative_path(run_name: str) -> None:
    """A run name is a relative path inside logdir: nested names (`sweep/lr-3`) are fine, `..` is not."""
    parts = run_name.replace("\\", "/").split("/")
    if run_name and (os.path.isabs(run_name) or ".." in parts or os.path.normpath(run_name) == "."):
        raise ConfigError(
            "must be a relative path that stays inside logdir, e.g. 'gan' or 'sweep/lr-1e-3' "
            "(no '..', not absolute, not '.'); to write elsewhere, set logdir."
        )


def _fraction_below_half(value: float) -> None:
    if not 0 <= value < 0.5:
        raise ConfigError("must be in [0, 0.5).")


def _finite_positive(value: float) -> None:
    if not 0 < value < math.inf:
        raise ConfigError("must be a finite number > 0.")


def _momentum(value: float) -> None:
    if not 0 <= value < 1:
        raise ConfigError("must be in [0, 1).")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Settings every training run shares.

    Each field's default, help, choices and check are in its metadata
    (`option`); `scripts/train.py --help` prints all of them and the API page
    tabulates them. In Python `loss_scale` also takes a number, or None for
    `"none"`; `xla` also takes True or False; `profile_steps` is a
    `(start, end)` tuple or None.
    """

    precision: str = option(
        "auto",
        "Compute precision. auto: the fastest for this model on this device, measured once and cached "
        "(GPU 8.0+: float32, bfloat16, float16; 7.x: float32, float16; CPU: float32 and each 16-bit type it runs "
        "natively, bfloat16 with AVX512-BF16, AMX or Arm BF16, float16 with AVX512-FP16, AMX-FP16 or Arm FP16); "
        "under multi_worker, where the workers must agree, as hardware. hardware: from the hardware alone, by "
        "GPU compute capability (8.0+: bfloat16; 7.x: float16; else float32).",
        "precision",
        choices=precision_lib.PRECISIONS + tuple(precision_lib.ALIASES),
        # Looked up when called (here and for loss_scale): validation is where a run parses them, once.
        check=lambda name: precision_lib.canonical_precision(name),
        resumable=True,
    )
    # Resumable: the checkpoint compares the loss scale the run resolved, not this setting.
    loss_scale: str | float | None = option(
        "auto",
        "dynamic, none, or a positive fixed scale. Only mixed_float16 uses it; auto (not set): dynamic there. "
        "A scale set under another precision is ignored with a note.",
        "precision",
        check=lambda loss_scale: requested_loss_scale(loss_scale),
        resumable=True,
    )
    xla: str | bool = option(
        "auto",
        "Compile the train step with XLA. auto: on with a GPU, off on CPU.",
        "precision",
        choices=XLA_SETTINGS,
        check=lambda xla: precision_lib.canonical_xla(xla),
        resumable=True,
    )
    tf32: bool = option(
        True, "Allow TensorFloat-32 for float32 matmuls/convs (Ampere+ GPUs).", "precision", resumable=True
    )
    epochs: int = option(4, "Passes over the training data.", "training", lower_bound=1, resumable=True)
    batch_size: int = option(
        128,
        "Examples per step: the global batch, split evenly across the --strategy's replicas.",
        "training",
        lower_bound=1,
    )
    steps_per_epoch: int | None = option(
        None,
        "Optional cap on the steps of an epoch (needed when the training data does not know its length).",
        "training",
        lower_bound=1,
        resumable=True,
    )
    logdir: str = option("logs", "Parent directory of the TensorBoard runs.", "logs and console", resumable=True)
    run_name: str = option(
        "",
        "Run directory under --logdir (a relative path inside it, e.g. sweep/lr-3); default: time, the task's "
        "name, precision and loss scale. One run at a time: a second run in the same directory is refused.",
        "logs and console",
        check=_relative_path,
        resumable=True,
    )
    seed: int = option(0, "Seed of weights, noise, shuffling and splits.", "training")
    log_every: int = option(
        0,
        "Print the step line every N steps of an epoch; write per-step TensorBoard scalars every N global steps. "
        f"0: every step on a CPU, every {GPU_LOG_EVERY} steps with a GPU, where a step takes milliseconds and "
        "writing its scalars would cost a large part of one.",
        "logs and console",
        lower_bound=0,
        resumable=True,
    )
    warmup_steps: int = option(
        3, "Leading steps left out of the mean throughput.", "logs and console", lower_bound=0, resumable=True
    )
    diagnose_every: int = option(
        0,
        "Every N steps, log the gradients' float16 underflow/overflow fractions to TensorBoard; 0: never.",
        "logs and console",
        lower_bound=0,
        resumable=True,
    )
    profile_steps: tuple[int, int] | None = option(
        None,
        "START,END: capture a TensorFlow profiler trace of these steps (from 1, inclusive) into the run "
        "directory, for TensorBoard's Profile tab. Start after the warm-up steps.",
        "logs and console",
        check=_profile_steps,
        resumable=True,
    )
    float32_layers: str = option(
        float32_layers.FLOAT32_LAYERS_AUTO,
        "Regex (re.search on layer paths such as model/block_1_expand_BN): those layers compute in float32 "
        "under a mixed policy. none: no layer; auto: the model's advice (MobileNetV2 under bfloat16 on CPU: "
        "the depthwise convolutions), none otherwise.",
        "precision",
        check=float32_layers.compile_pattern,
    )
    strategy: str = option(
        "default",
        "default: one device; mirrored: every local GPU; multi_worker: the hosts of --cluster (start the run on "
        "each; only the chief writes logs).",
        "training",
        choices=STRATEGIES,
        resumable=True,
    )
    cluster: str = option(  # resumable: a run may be restarted under another launcher
        "tf_config",
        "Where --strategy=multi_worker finds its hosts. tf_config: the TF_CONFIG variable of each host; slurm: "
        "the environment srun gives its tasks (launch with srun; worker index = SLURM_PROCID).",
        "training",
        choices=CLUSTERS,
        resumable=True,
    )
    slurm_port_base: int = option(
        SLURM_PORT_BASE,
        "With --cluster=slurm: the port of each node's first task; its k-th task listens on this + k.",
        "training",
        lower_bound=1,
        upper_bound=65535,
        resumable=True,
    )
    worker_timeout: float = option(
        30.0,
        "--strategy=multi_worker: seconds without a heartbeat after which a worker counts as lost and the "
        "others stop (exit 69); restart all with --resume.",
        "training",
        check=_seconds,
        resumable=True,
    )
    checkpoint_dir: str = option(
        "", "Where checkpoints go; default: <logdir>/<run_name>/checkpoints.", "checkpoints", resumable=True
    )
    checkpoint_every: int = option(
        0,
        "Also checkpoint every N steps; 0: at each epoch end only (and on SIGTERM/SIGINT).",
        "checkpoints",
        lower_bound=0,
        resumable=True,
    )
    keep_checkpoints: int = option(
        3,
        "Checkpoints kept; with 2 or more a corrupt newest one falls back to the previous.",
        "checkpoints",
        lower_bound=1,
        resumable=True,
    )
    resume: bool = option(
        False,
        "Continue the run named by --run_name (or --checkpoint_dir) exactly where its newest readable "
        "checkpoint stopped; start from step 0 if it has none.",
        "checkpoints",
        resumable=True,
    )
    on_nonfinite: str = option(
        "skip",
        "A step with a NaN/Inf gradient is never applied. skip: count it and go on; stop: stop with the "
        "epoch, step and first non-finite layer (not with dynamic loss scaling, which skips by design).",
        "training",
        choices=ON_NONFINITE,
        resumable=True,
    )
    deterministic: bool = option(
        False,
        "Turn on TensorFlow op determinism, so a resumed run repeats the uninterrupted one bit for bit.",
        "training",
        resumable=True,
    )
    console: str = option(
        "auto",
        "progress: a Keras progress bar per epoch; lines: the original tutorial's step line every --log_every "
        "steps; auto: progress on a terminal, lines otherwise (pipes, files).",
        "logs and console",
        choices=CONSOLE_MODES,
        resumable=True,
    )

    def validate(self) -> None:
        """Raises `ConfigError` naming the first impossible setting and its value.

        Pure: the file system is not touched. Whether `logdir` and
        `checkpoint_dir` can be written is found when the run creates them
        (`tfmp.run.runner`), before any training.
        """
        parsed = check_fields(self)
        self._check_together()
        # Kept for `parsed`: not a field, so `dataclasses.replace` makes a config without it, validated anew.
        self.__dict__["_parsed"] = parsed

    def parsed(self, name: str) -> Any:
        """Setting `name` as its check parsed it when the config was validated: each setting is parsed once.

        `precision` is its canonical name (`tfmp.precision.canonical_precision`),
        `loss_scale` what `requested_loss_scale` makes of it (None: `"auto"`),
        `xla` True, False or `"auto"` (`tfmp.precision.canonical_xla`).
        A config not yet validated is validated first.

        Raises:
            ConfigError: for an impossible setting, naming it.
        """
        if "_parsed" not in self.__dict__:
            TrainConfig.validate(self)
        return self.__dict__["_parsed"][name]

    def _check_together(self) -> None:
        """The settings that depend on each other; a subclass adds its own after these."""
        # Settings that only multi_worker's Slurm launch reads are refused elsewhere rather than ignored.
        if self.cluster != "tf_config" and self.strategy != "multi_worker":
            raise ConfigError(
                "only says where strategy='multi_worker' finds its hosts: set strategy='multi_worker' "
                "or drop the cluster setting.",
                "cluster",
                self.cluster,
                {"strategy": self.strategy},
            )
        if self.slurm_port_base != SLURM_PORT_BASE and self.cluster != "slurm":
            raise ConfigError("is read only under cluster='slurm'.", "slurm_port_base", self.slurm_port_base)
        if self.resume and not (self.run_name or self.checkpoint_dir):
            raise ConfigError(
                "needs the run to continue: give its run_name (or its checkpoint_dir).", "resume", self.resume
            )


@dataclasses.dataclass(frozen=True)
class ImageConfig(TrainConfig):
    """A run on one of the image datasets tfmp loads by name (`tfmp.run.data.load_images`).

    `dataset` is one of the config's `datasets`.
    """

    # The datasets `tfmp.run.data` reads (its DATASETS; a test keeps them equal), and the model's input.
    datasets: ClassVar[tuple[str, ...]] = ("digits", "mnist", "cifar10", "synthetic")
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
        resumable=True,
    )


@dataclasses.dataclass(frozen=True)
class GANConfig(ImageConfig):
    """The original tutorial's GAN run: its defaults are the tutorial's.

    Its own flags are listed under the script's name; the architecture and
    the label noise stay the tutorial's in the scripts (no flag). The
    defaults are written here as numbers, equal to `tfmp.models.gan`'s and
    `tfmp.trainers.TUTORIAL_GAN`'s (a test keeps them so), so that a config
    imports no model.
    """

    datasets: ClassVar[tuple[str, ...]] = ("mnist", "digits", "synthetic")
    image_shape: ClassVar[tuple[int, int, int]] = (28, 28, 1)

    batch_size: int = redefault(TrainConfig, "batch_size", 4096)
    dataset: str = redefault(ImageConfig, "dataset", "mnist")
    latent_dim: int = option(100, "Noise size.", lower_bound=1)
    generator_widths: tuple[int, int, int] = option(
        (64, 32, 8),
        "The generator's three conv widths (the GAN tutorial's bad sizes: 63,31,7).",
        lower_bound=1,
        flag=False,
    )
    discriminator_widths: tuple[int, int, int] = option(
        (24, 64, 128), "The discriminator's three conv widths.", lower_bound=1, flag=False
    )
    generator_learning_rate: float = option(1e-3, "Generator Adam learning rate.")
    discriminator_learning_rate: float = option(1e-4, "Discriminator RMSprop learning rate.")
    label_softening: float = option(
        0.01, "How far the discriminator's 0/1 labels move inward.", check=_fraction_below_half, flag=False
    )
    label_swap_fraction: float = option(
        0.1, "Share of the discriminator's labels swapped each step.", lower_bound=0, upper_bound=1, flag=False
    )
    num_samples: int = option(
        16,
        "Generator images in the per-epoch TensorBoard grid.",
        "logs and console",
        lower_bound=1,
        flag=False,
        resumable=True,
    )


@dataclasses.dataclass(frozen=True)
class ClassifierConfig(ImageConfig):
    """The MobileNetV2 classifier's run (the Keras tutorial's model)."""

    datasets: ClassVar[tuple[str, ...]] = ("cifar10", "digits", "synthetic")
    image_shape: ClassVar[tuple[int, int, int]] = (32, 32, 3)

    epochs: int = redefault(TrainConfig, "epochs", 10)
    batch_size: int = redefault(TrainConfig, "batch_size", 128)
    dataset: str = redefault(ImageConfig, "dataset", "cifar10")
    # inf: MobileNetV2 cannot turn alpha * 32 into a width.
    alpha: float = option(1.0, "MobileNetV2 width multiplier.", "model and optimizer", check=_finite_positive)
    learning_rate: float = option(1e-3, "Adam (peak, with --lr_schedule=cosine) learning rate.", "model and optimizer")
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
        check=_momentum,
    )
    validation_batch_size: int = option(
        256,
        "Batch size of the validation pass.",
        "training",
        lower_bound=1,
        flag=False,
        resumable=True,
    )


# The settings of the shipped configs a resumed run may change (`option(..., resumable=True)`); every other
# setting must match the checkpoint's. A config of one's own: `tfmp.run.options.resumable_fields(config)`.
RESUMABLE = resumable_fields(GANConfig, ClassifierConfig)
