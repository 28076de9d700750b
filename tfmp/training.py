"""Training runs: one config object in, a trained model and its logs out.

`train_gan(GANConfig(...))` trains the seed's GAN and
`train_classifier(ClassifierConfig(...))` the MobileNetV2 classifier. Both:

1. validate the config and refuse impossible settings before any training
   (`ConfigError`, naming the value);
2. resolve the precision, loss scale and XLA, and print a one-line note
   when a loss scale is given that the precision does not use;
3. load the data (`tfmp.data`), build the model under the precision's
   global policy (restored afterwards), and `fit()` a `tfmp.trainers`
   trainer with the callbacks of `tfmp.callbacks`: the seed's console line,
   per-epoch TensorBoard curves and the run's hyperparameters under
   `<logdir>/<run_name>/`.

Under mixed precision a run first prints the `tfmp.diagnostics` pitfalls it
finds (Tensor Core alignment, 16-bit outputs); `diagnose_every` logs the
gradients' float16 underflow and overflow fractions during training.

`compare_loss_scaling` runs the seed's three GAN configurations side by side.
The scripts in `scripts/` are thin absl front ends to these functions.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import json
import os
import re
import sys
import tempfile
from typing import Any, Callable, ClassVar, Iterator, Sequence

import keras
import numpy as np
import tensorflow as tf

from tfmp.models.gan import build_discriminator, build_generator
from tfmp.models.mobilenet_v2 import build_mobilenet_v2_classifier, cpu_bfloat16_float32_layers
from tfmp import autotune
from tfmp import callbacks as callbacks_lib
from tfmp import checkpoint as checkpoint_lib
from tfmp import data as data_lib
from tfmp import diagnostics
from tfmp import distribute
from tfmp import loss_scale as loss_scale_lib
from tfmp import precision as precision_lib
from tfmp import preemption
from tfmp import rundir
from tfmp import trainers

__all__ = [
    "ClassifierConfig",
    "ConfigError",
    "GANConfig",
    "Interrupted",
    "RunResult",
    "TrainConfig",
    "compare_loss_scaling",
    "comparison_table",
    "default_run_name",
    "train_classifier",
    "train_gan",
]


class ConfigError(ValueError):
    """An impossible run setting, found before any training."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) during a run's start-up, before its first step.

    Nothing was trained, and the run removed the lock and the empty
    directories it had made. (Once training runs, SIGINT instead finishes
    the step and checkpoints: `tfmp.preemption.Preempted`.)
    """


ON_NONFINITE = ("skip", "stop")

# Settings a resumed run may change; every other setting must match the checkpoint's.
_RESUMABLE = frozenset({
    "epochs", "steps_per_epoch", "data_dir", "logdir", "run_name", "log_every", "warmup_steps", "diagnose_every",
    "profile_steps", "strategy", "xla", "tf32", "checkpoint_dir", "checkpoint_every", "keep_checkpoints", "resume",
    "on_nonfinite", "deterministic", "num_samples", "validation_batch_size", "console",
    "precision", "loss_scale",  # compared once resolved
})


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
        steps_per_epoch: Optional cap on the steps of an epoch.
        dataset: One of the config's `datasets`.
        data_dir: Directory holding a downloaded dataset (see `tfmp.data`).
        logdir: Parent directory of the TensorBoard runs.
        run_name: The run's directory under `logdir`; by default a timestamp
            plus the precision and loss-scale settings.
        seed: Seed of weights, noise, shuffling and the data split.
        log_every: Print the step line every this many steps of an epoch,
            and write the per-step TensorBoard scalars (`batch_` tags) every
            this many global steps (`tfmp.callbacks.Summaries`).
        warmup_steps: Leading steps left out of the mean throughput.
        diagnose_every: Every this many steps, log the float16 underflow and
            overflow fractions of the gradients of a fixed probe batch to
            TensorBoard (`tfmp.callbacks.GradientDiagnostics`); 0 = never.
        profile_steps: `(start, end)`: capture a TensorFlow profiler trace of
            these training steps (counted from 1, inclusive) into the run's
            directory (`tfmp.callbacks.ProfileSteps`); None = no trace.
        float32_layers: A regular expression; layers whose path matches
            (`re.search`, see `tfmp.precision.keep_float32`) compute in
            float32 under a mixed policy. `"none"` (or empty) = none;
            `"auto"` = the model's `cpu_bfloat16_float32_layers` under
            mixed_bfloat16 without a GPU, none otherwise
            (`tfmp.precision.resolve_float32_layers`).
        strategy: `tfmp.distribute.STRATEGIES`: `"default"` (one device),
            `"mirrored"` (every local GPU) or `"multi_worker"` (hosts named
            by `TF_CONFIG`). `batch_size` is then the global batch, split
            evenly across the replicas; only the chief writes the logs.
        checkpoint_dir: Where the run's checkpoints go; default
            `<logdir>/<run_name>/checkpoints` (`tfmp.checkpoint`).
        checkpoint_every: Also checkpoint every this many steps; 0 = only at
            the end of each epoch (and on SIGTERM/SIGINT).
        keep_checkpoints: Checkpoints kept (>= 1; with 2 or more, a corrupt
            newest one falls back to the one before).
        resume: Continue from the newest readable checkpoint in
            `checkpoint_dir`, exactly where it stopped (start from step 0 if
            there is none). Needs `run_name` or `checkpoint_dir`.
        on_nonfinite: A step with a NaN/Inf gradient is never applied; then
            `"skip"` counts it and goes on, `"stop"` raises
            `tfmp.callbacks.NonFiniteStepError` naming the epoch, the step and
            the first non-finite layer. Under dynamic loss scaling overflowing
            steps are expected and always skipped, so `"stop"` is refused.
        deterministic: Turn on TensorFlow's op determinism for the run
            (`tf.config.experimental.enable_op_determinism`, restored after),
            so that a resumed run repeats the uninterrupted one bit for bit.
        console: `tfmp.callbacks.CONSOLE_MODES`: `"progress"` shows a Keras
            progress bar per epoch (on `sys.stdout`), `"lines"` the seed's
            step line every `log_every` steps; `"auto"` is `"progress"` when
            `print_fn` is `print` and `sys.stdout` is a terminal, `"lines"`
            otherwise (pipes, files, captured output).
    """

    datasets: ClassVar[tuple[str, ...]] = data_lib.DATASETS
    image_shape: ClassVar[tuple[int, int, int]] = (28, 28, 1)

    precision: str = "auto"
    loss_scale: str | float | None = "auto"
    xla: str | bool = "auto"
    tf32: bool = True
    epochs: int = 4
    batch_size: int = 128
    steps_per_epoch: int | None = None
    dataset: str = "digits"
    data_dir: str | None = None
    logdir: str = "logs"
    run_name: str = ""
    seed: int = 0
    log_every: int = 1
    warmup_steps: int = 3
    diagnose_every: int = 0
    profile_steps: tuple[int, int] | None = None
    float32_layers: str = precision_lib.FLOAT32_LAYERS_AUTO
    strategy: str = "default"
    checkpoint_dir: str = ""
    checkpoint_every: int = 0
    keep_checkpoints: int = 3
    resume: bool = False
    on_nonfinite: str = "skip"
    deterministic: bool = False
    console: str = "auto"

    def validate(self) -> None:
        """Raises `ConfigError` naming the first impossible setting.

        Also makes sure `logdir` can be created and written to.
        """
        try:
            precision_lib.canonical_precision(self.precision)
            _parse_loss_scale(self.loss_scale)
            precision_lib.resolve_jit_compile(self.xla, has_gpu=False)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        for name in ("epochs", "batch_size", "log_every"):
            _check_int(name, getattr(self, name), minimum=1)
        _check_int("warmup_steps", self.warmup_steps, minimum=0)
        _check_int("diagnose_every", self.diagnose_every, minimum=0)
        if self.strategy not in distribute.STRATEGIES:
            raise ConfigError(
                f"Unknown strategy. Valid: {', '.join(distribute.STRATEGIES)}. Received: strategy={self.strategy!r}"
            )
        if self.profile_steps is not None:
            if len(self.profile_steps) != 2:
                raise ConfigError(f"profile_steps must be (start, end). Received: profile_steps={self.profile_steps!r}")
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
        if self.dataset.lower() not in self.datasets:
            raise ConfigError(
                f"Unknown dataset for this model. Valid: {', '.join(self.datasets)}. "
                f"Received: dataset={self.dataset!r}"
            )
        for field in dataclasses.fields(self):
            # inf would turn the first applied update into NaN weights; NaN fails every comparison.
            if field.name.endswith("learning_rate") and not 0 < getattr(self, field.name) < float("inf"):
                raise ConfigError(
                    f"{field.name} must be a finite number > 0. Received: {field.name}={getattr(self, field.name)!r}"
                )
        _check_int("checkpoint_every", self.checkpoint_every, minimum=0)
        _check_int("keep_checkpoints", self.keep_checkpoints, minimum=1)
        if self.console not in callbacks_lib.CONSOLE_MODES:
            raise ConfigError(
                f"Unknown console. Valid: {', '.join(callbacks_lib.CONSOLE_MODES)}. Received: console={self.console!r}"
            )
        if self.on_nonfinite not in ON_NONFINITE:
            raise ConfigError(
                f"Unknown on_nonfinite. Valid: {', '.join(ON_NONFINITE)}. Received: on_nonfinite={self.on_nonfinite!r}"
            )
        if self.resume and not (self.run_name or self.checkpoint_dir):
            raise ConfigError(
                "resume needs the run to continue: give its run_name (or its checkpoint_dir). "
                f"Received: resume=True, run_name={self.run_name!r}, checkpoint_dir={self.checkpoint_dir!r}"
            )
        _check_run_name(self.run_name)
        _check_writable_dir("logdir", self.logdir)
        if self.checkpoint_dir:
            _check_writable_dir("checkpoint_dir", self.checkpoint_dir)

    @property
    def cpu_bfloat16_float32_layers(self) -> str:
        """The model's float32_layers advice for bfloat16 on a CPU (what `"auto"` applies); "" for none."""
        return ""


LOSS_SCALE_AUTO = "auto"


def _loss_scale_is_set(loss_scale: str | float | None) -> bool:
    """Whether the user chose a loss scale (not `"auto"`)."""
    return not (isinstance(loss_scale, str) and loss_scale.strip().lower() == LOSS_SCALE_AUTO)


def _parse_loss_scale(loss_scale: str | float | None) -> str | float:
    """A config's loss scale normalised (`tfmp.loss_scale.parse_loss_scale`); `"auto"` (not set) is dynamic.

    `"auto"` rather than None marks "not set": `parse_loss_scale` reads None
    as `"none"`, and library users passing None keep that meaning.
    """
    return loss_scale_lib.parse_loss_scale(loss_scale) if _loss_scale_is_set(loss_scale) else "dynamic"


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}. Received: {name}={value!r}")


def _check_writable_dir(name: str, path: str) -> None:
    """Raises `ConfigError` unless `path` can be created and written to; leaves nothing behind."""
    created: list[str] = []
    try:
        created = rundir.make_dirs(path)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        raise ConfigError(
            f"{name} must be a directory tfmp can create and write to ({e.strerror or e}). "
            f"Received: {name}={path!r}"
        ) from None
    finally:
        rundir.remove_empty_dirs(created)


def _check_run_name(run_name: str) -> None:
    """A run name is a relative path inside logdir: nested names (`sweep/lr-3`) are fine, `..` is not."""
    parts = run_name.replace("\\", "/").split("/")
    if run_name and (os.path.isabs(run_name) or ".." in parts or os.path.normpath(run_name) == "."):
        raise ConfigError(
            "run_name must be a relative path that stays inside logdir, e.g. 'gan' or 'sweep/lr-1e-3' "
            f"(no '..', not absolute, not '.'); to write elsewhere, set logdir. Received: run_name={run_name!r}"
        )


@dataclasses.dataclass(frozen=True)
class GANConfig(TrainConfig):
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
    image_shape: ClassVar[tuple[int, int, int]] = (28, 28, 1)

    batch_size: int = 4096
    dataset: str = "mnist"
    latent_dim: int = 100
    generator_widths: tuple[int, int, int] = (64, 32, 8)
    discriminator_widths: tuple[int, int, int] = (24, 64, 128)
    generator_learning_rate: float = 1e-3
    discriminator_learning_rate: float = 1e-4
    label_softening: float = 0.01
    label_swap_fraction: float = 0.1
    num_samples: int = 16

    def validate(self) -> None:
        super().validate()
        _check_int("latent_dim", self.latent_dim, minimum=1)
        _check_int("num_samples", self.num_samples, minimum=1)
        for name in ("generator_widths", "discriminator_widths"):
            widths = getattr(self, name)
            if len(widths) != 3:
                raise ConfigError(f"{name} must be three integers. Received: {name}={widths!r}")
            for width in widths:
                _check_int(name, width, minimum=1)
        if not 0 <= self.label_softening < 0.5:
            raise ConfigError(f"label_softening must be in [0, 0.5). Received: label_softening={self.label_softening!r}")
        if not 0 <= self.label_swap_fraction <= 1:
            raise ConfigError(
                f"label_swap_fraction must be in [0, 1]. Received: label_swap_fraction={self.label_swap_fraction!r}"
            )


LR_SCHEDULES = ("cosine", "constant")


@dataclasses.dataclass(frozen=True)
class ClassifierConfig(TrainConfig):
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
        if not self.alpha > 0:
            raise ConfigError(f"alpha must be > 0. Received: alpha={self.alpha!r}")
        if not 0 <= self.batch_norm_momentum < 1:
            raise ConfigError(
                f"batch_norm_momentum must be in [0, 1). Received: batch_norm_momentum={self.batch_norm_momentum!r}"
            )
        _check_int("validation_batch_size", self.validation_batch_size, minimum=1)
        if self.lr_schedule not in LR_SCHEDULES:
            raise ConfigError(
                f"Unknown lr_schedule. Valid: {', '.join(LR_SCHEDULES)}. Received: lr_schedule={self.lr_schedule!r}"
            )

    @property
    def cpu_bfloat16_float32_layers(self) -> str:
        return cpu_bfloat16_float32_layers(self.image_shape)


@dataclasses.dataclass
class RunResult:
    """What a training run returns.

    Attributes:
        logs: The last epoch's logs (losses, metrics, loss scales, skipped
            steps, `images_per_sec`).
        images_per_sec: Mean throughput after the warm-up steps (None if
            every step was warm-up).
        steps: Training steps run.
        warmup_steps: Steps left out of `images_per_sec`.
        logdir: The run's TensorBoard directory.
        precision: The precision used (`auto` resolved).
        loss_scale: `"dynamic"`, `"none"` or the fixed scale in force
            (`"none"` unless the precision is `mixed_float16`).
        jit_compile: Whether the step was XLA-compiled.
        trainer: The trained `tfmp.trainers` model.
    """

    logs: dict[str, Any]
    images_per_sec: float | None
    steps: int
    warmup_steps: int
    logdir: str
    precision: str
    loss_scale: str | float
    jit_compile: bool
    trainer: trainers.MixedPrecisionTrainer

    @property
    def skipped_steps(self) -> int:
        """Skipped steps summed over the run's loss-scaled optimizers."""
        return int(sum(v for k, v in self.logs.items() if k.endswith("skipped_steps") and not k.startswith("val_")))


def default_run_name(precision: str, loss_scale: str | float) -> str:
    """A timestamp plus the precision and loss-scale settings."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{stamp}_{precision}_ls-{loss_scale}"


@dataclasses.dataclass
class _Job:
    """A model-specific piece of a run, built under the precision policy."""

    trainer: trainers.MixedPrecisionTrainer
    train_data: Callable[[], tf.data.Dataset]  # a fresh pipeline: one epoch, in the seeded order
    validation_data: Any
    callbacks: list[keras.callbacks.Callback]
    hparams: dict[str, Any]
    probe: Any  # one training batch, for diagnostics


def _probe_batch(x: np.ndarray, y: np.ndarray | None, batch_size: int) -> Any:
    """The first `batch_size` training examples, through the training pipeline."""
    n = min(batch_size, len(x))
    (batch,) = list(data_lib.make_dataset(x[:n], None if y is None else y[:n], batch_size=n, shuffle=False))
    return batch


def _batches(num_examples: int, batch_size: int, drop_remainder: bool) -> int:
    return num_examples // batch_size if drop_remainder else -(-num_examples // batch_size)


def _gan_job(
    config: GANConfig, split: data_lib.Split, loss_scale: str | float, jit_compile: bool, run_dir: str, steps: int
) -> _Job:
    generator = build_generator(config.latent_dim, config.generator_widths)
    discriminator = build_discriminator(config.discriminator_widths)
    trainer = trainers.GANTrainer(
        generator, discriminator, config.label_softening, config.label_swap_fraction, seed=config.seed
    )
    trainer.compile(
        keras.optimizers.Adam(config.generator_learning_rate),
        keras.optimizers.RMSprop(config.discriminator_learning_rate),
        loss_scale=loss_scale,
        skip_nonfinite=True,  # NaN/Inf steps are skipped (and counted), never applied
        jit_compile=jit_compile,
    )
    # As the seed: incomplete batches are dropped.
    def train() -> tf.data.Dataset:
        return data_lib.make_dataset(split.x_train, batch_size=config.batch_size, drop_remainder=True, seed=config.seed)
    noise = np.random.default_rng(config.seed).uniform(-1, 1, (config.num_samples, config.latent_dim))
    samples = callbacks_lib.GeneratorSamples(os.path.join(run_dir, "generator"), generator, noise)
    hparams = {"latent_dim": config.latent_dim, "generator_learning_rate": config.generator_learning_rate,
               "discriminator_learning_rate": config.discriminator_learning_rate}
    return _Job(trainer, train, None, [samples], hparams, _probe_batch(split.x_train, None, config.batch_size))


def _classifier_job(
    config: ClassifierConfig, split: data_lib.Split, loss_scale: str | float, jit_compile: bool, run_dir: str, steps: int
) -> _Job:
    num_classes = int(max(split.y_train.max(), split.y_val.max())) + 1
    network = build_mobilenet_v2_classifier(
        config.image_shape, num_classes=num_classes, alpha=config.alpha, from_logits=config.from_logits,
        batch_norm_momentum=config.batch_norm_momentum,
    )
    trainer = trainers.ClassifierTrainer(network)
    learning_rate = config.learning_rate
    if config.lr_schedule == "cosine":
        learning_rate = keras.optimizers.schedules.CosineDecay(learning_rate, decay_steps=config.epochs * steps)
    trainer.compile(
        keras.optimizers.Adam(learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=config.from_logits),
        metrics=["accuracy"],
        loss_scale=loss_scale,
        skip_nonfinite=True,  # NaN/Inf steps are skipped (and counted), never applied
        jit_compile=jit_compile,
    )
    def train() -> tf.data.Dataset:
        return data_lib.make_dataset(split.x_train, split.y_train, batch_size=config.batch_size, seed=config.seed)
    validation = data_lib.make_dataset(
        split.x_val, split.y_val, batch_size=config.validation_batch_size, shuffle=False
    )
    hparams = {"alpha": config.alpha, "learning_rate": config.learning_rate, "lr_schedule": config.lr_schedule,
               "from_logits": config.from_logits, "batch_norm_momentum": config.batch_norm_momentum}
    probe = _probe_batch(split.x_train, split.y_train, config.batch_size)
    return _Job(trainer, train, validation, [], hparams, probe)


def _float32_layers(config: TrainConfig, precision: str) -> str:
    """The float32_layers pattern a run at `precision` applies ("" = none)."""
    return precision_lib.resolve_float32_layers(
        config.float32_layers, precision, config.cpu_bfloat16_float32_layers)


def _keep_float32(
    config: TrainConfig, trainer: trainers.MixedPrecisionTrainer, print_fn: Callable[[str], None], precision: str
) -> None:
    """Applies `config.float32_layers` to the trainer's networks and says what it matched."""
    pattern = _float32_layers(config, precision)
    if not pattern:
        return
    try:
        kept = precision_lib.keep_float32(list(trainer.networks.values()), pattern)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    shown = ", ".join(kept[:3]) + (", ..." if len(kept) > 3 else "")
    if pattern == config.float32_layers:
        print_fn(f"float32 layers: {len(kept)} matching {pattern!r} ({shown})")
    else:
        print_fn(f"float32 layers: {len(kept)}, the model's default for {precision} on CPU "
                 f"(float32_layers=none turns it off): {shown}")


@dataclasses.dataclass
class _Setting:
    """What a config resolves to before any model is built."""

    precision: str
    loss_scale: str | float
    jit_compile: bool
    split: data_lib.Split
    run_dir: str


def _prepare(
    config: TrainConfig, build_job: Callable[..., _Job], print_fn: Callable[[str], None],
    drop_remainder: bool | None = None,
) -> _Setting:
    """Validates `config`, loads the data and resolves precision, loss scale and XLA.

    `auto` precision is measured on this device (`_measured_precision`),
    except under `multi_worker`, where the compute-capability rule decides
    (`tfmp.precision.choose_precision`). With `drop_remainder` given, a
    batch size that leaves no training step is refused first.
    """
    config.validate()
    split = data_lib.load_images(config.dataset, config.image_shape, data_dir=config.data_dir, seed=config.seed)
    if drop_remainder is not None and _batches(len(split.x_train), config.batch_size, drop_remainder) == 0:
        raise ConfigError(
            f"batch_size is larger than the {len(split.x_train)} training images of dataset "
            f"{config.dataset!r}, and incomplete batches are dropped; use a batch size <= "
            f"{len(split.x_train)}. Received: batch_size={config.batch_size}"
        )
    jit_compile = precision_lib.resolve_jit_compile(config.xla)
    precision = precision_lib.canonical_precision(config.precision)
    loss_scale = _parse_loss_scale(config.loss_scale)
    # Not across hosts: their measurements could differ, and every worker must run one policy.
    if precision == "auto" and config.strategy != "multi_worker":
        precision = _measured_precision(
            config, build_job, split, jit_compile, loss_scale, print_fn, autotune.detect_hardware(), _time_steps)
    precision = precision_lib.resolve_precision(precision)
    if precision != "mixed_float16":
        # Only a scale the user set: the default ("auto") says nothing to ignore.
        if (loss_scale != "none" and _loss_scale_is_set(config.loss_scale)
                and precision_lib.canonical_precision(config.precision) != "auto"):
            print_fn(f"note: loss_scale={loss_scale} is ignored under {precision}; only float16 needs loss scaling.")
        loss_scale = "none"
    if config.on_nonfinite == "stop" and loss_scale == "dynamic":
        raise ConfigError(
            "on_nonfinite='stop' cannot be used with mixed_float16 and dynamic loss scaling: there, overflowing "
            "steps are expected and skipped while the scale adapts. Use on_nonfinite=skip, or a fixed loss_scale. "
            f"Received: on_nonfinite='stop', precision={precision!r}, loss_scale='dynamic'"
        )
    run_dir = os.path.join(config.logdir, config.run_name or default_run_name(precision, loss_scale))
    return _Setting(precision, loss_scale, jit_compile, split, run_dir)


_PROBE_WARMUP_STEPS = 2
_PROBE_STEPS = 6


def _time_steps(trainer: trainers.MixedPrecisionTrainer, probe: Any) -> float:
    """Images per second of a few `fit()` steps on one batch, warm-up (tracing, compiling) excluded."""
    batch_size = int(tf.nest.flatten(probe)[0].shape[0])
    timer = callbacks_lib.StepTimer(batch_size * trainer.images_per_example, _PROBE_WARMUP_STEPS)
    trainer.fit(tf.data.Dataset.from_tensors(probe).repeat(), epochs=1,
                steps_per_epoch=_PROBE_WARMUP_STEPS + _PROBE_STEPS, callbacks=[timer], shuffle=False, verbose=0)
    return timer.mean_images_per_sec


def _measured_precision(
    config: TrainConfig, build_job: Callable[..., _Job], split: data_lib.Split, jit_compile: bool,
    loss_scale: str | float, print_fn: Callable[[str], None], hardware: autotune.Hardware,
    time_steps: Callable[[trainers.MixedPrecisionTrainer, Any], float],
) -> str:
    """`auto`: the fastest candidate precision for this model on `hardware`, measured once.

    The candidates come from the device (`tfmp.autotune.candidates`). Each
    trains a fresh copy of the model as the run will train it (the run's
    float32 layers, XLA and TF32 settings; float16 with the run's loss
    scale, dynamic by default) for a few steps on its first batch, timed by
    `time_steps`. The answer is cached per device and model.
    """
    candidates = autotune.candidates(hardware)
    jobs: dict[str, _Job] = {}

    def job(precision: str) -> _Job:
        if precision not in jobs:
            scale = loss_scale if precision == "mixed_float16" else "none"  # float16 is timed with its loss scaling
            with precision_lib.precision_scope(precision):
                jobs[precision] = build_job(config, split, scale, jit_compile, os.devnull, 1)
            _keep_float32(config, jobs[precision].trainer, lambda line: None, precision)  # measured as it will run
        return jobs[precision]

    def measure(precision: str) -> float:
        with precision_lib.tf32_scope(config.tf32):
            measured = time_steps(job(precision).trainer, job(precision).probe)
        del jobs[precision]  # one candidate's model and optimizer state in memory at a time
        return measured

    signature = ""  # a single candidate measures nothing and needs no model
    if len(candidates) > 1:
        described = {
            "trainer": type(job("float32").trainer).__name__,
            "networks": {name: net.get_config() for name, net in job("float32").trainer.networks.items()},
            "batch_size": config.batch_size, "xla": jit_compile,
            "float32_layers": _float32_layers(config, "mixed_bfloat16"),
        }
        # Only where they change a measurement, so that CPU entries stay valid across loss-scale settings.
        if "mixed_float16" in candidates:
            described["loss_scale"] = str(loss_scale)
        if hardware.gpus:
            described["tf32"] = bool(config.tf32)
        signature = json.dumps(described, sort_keys=True, default=str)
    capability = hardware.compute_capability
    tf32 = config.tf32 and capability is not None and capability >= (8, 0)
    choice = autotune.choose(signature, measure, hardware, labels={"float32": "float32 with TF32"} if tf32 else None)
    print_fn(str(choice))
    return choice.precision


def _make_strategy(config: TrainConfig) -> tf.distribute.Strategy:
    """The run's `tf.distribute` strategy, with the global batch checked against its replicas."""
    try:
        strategy = distribute.make_strategy(config.strategy)
        distribute.per_replica_batch(config.batch_size, strategy)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return strategy


@dataclasses.dataclass
class _Directories:
    """Where a run writes; held by this run while it lasts (`_hold_directories`)."""

    run_dir: str  # this process's TensorBoard directory: the run's own on the chief, a private one elsewhere
    run_checkpoints: str  # the run's checkpoints, which every worker resumes from
    checkpoint_dir: str  # where this process writes its checkpoints
    training_started: bool = False  # set once the first step is under way


def _claim_new_dir(path: str, created: list[str]) -> str:
    """Creates `path`, or `path-2`, `path-3`... if taken (two runs started in the same second)."""
    created += rundir.make_dirs(os.path.dirname(path) or os.curdir)
    candidate, n = path, 1
    while True:
        try:
            os.mkdir(candidate)
        except FileExistsError:
            n += 1
            candidate = f"{path}-{n}"
            continue
        created.append(os.path.abspath(candidate))
        return candidate


@contextlib.contextmanager
def _hold_directories(
    config: TrainConfig, setting: _Setting, strategy: tf.distribute.Strategy, print_fn: Callable[[str], None],
) -> Iterator[tuple[_Setting, _Directories]]:
    """Creates the run's directories and holds them for this run while the block runs.

    On the chief (the process that writes the run's files) the run directory
    and the checkpoint directory each get a `tfmp.rundir.RunDirLock`, so a
    second run there is refused (`tfmp.rundir.RunDirInUseError`); a default
    run name another run took in the same second gets a `-2` suffix. When
    the block fails, or Ctrl-C interrupts it, the locks are released and the
    directories created here removed again if still empty.

    Yields:
        The setting (with the run directory claimed) and the directories.
    """
    chief = distribute.is_chief(strategy)
    created: list[str] = []
    try:
        with contextlib.ExitStack() as locks:
            if chief and not config.run_name:
                setting = dataclasses.replace(setting, run_dir=_claim_new_dir(setting.run_dir, created))
            run_dir = distribute.writable_dir(setting.run_dir, strategy)
            _check_writable_dir("logdir", run_dir)
            created += rundir.make_dirs(run_dir)
            run_checkpoints = config.checkpoint_dir or os.path.join(setting.run_dir, "checkpoints")
            checkpoint_dir = distribute.writable_dir(run_checkpoints, strategy)
            _check_writable_dir("checkpoint_dir", checkpoint_dir)
            created += rundir.make_dirs(checkpoint_dir)
            if chief:
                # Both: another run may name this run's checkpoint directory as its own checkpoint_dir.
                for directory in dict.fromkeys(os.path.abspath(d) for d in (run_dir, checkpoint_dir)):
                    locks.enter_context(rundir.RunDirLock(directory, print_fn))
            yield setting, _Directories(run_dir, run_checkpoints, checkpoint_dir)
    except BaseException:
        rundir.remove_empty_dirs(created)
        raise


def _run(
    config: TrainConfig,
    build_job: Callable[..., _Job],
    drop_remainder: bool,
    print_fn: Callable[[str], None],
) -> RunResult:
    dirs = None
    try:
        config.validate()
        strategy = _make_strategy(config)  # first: MultiWorkerMirroredStrategy must precede other TF ops
        setting = _prepare(config, build_job, print_fn, drop_remainder)
        with _hold_directories(config, setting, strategy, print_fn) as (setting, dirs):
            return _train(config, build_job, drop_remainder, strategy, setting, dirs, print_fn)
    except KeyboardInterrupt:
        if dirs is not None and dirs.training_started:
            raise  # a second Ctrl-C while the first one's checkpoint was being written
        raise Interrupted(
            "interrupted by SIGINT (Ctrl-C) during start-up, before the first training step: nothing was "
            "trained or written. Run the same command again to start."
        ) from None


def _train(
    config: TrainConfig,
    build_job: Callable[..., _Job],
    drop_remainder: bool,
    strategy: tf.distribute.Strategy,
    setting: _Setting,
    dirs: _Directories,
    print_fn: Callable[[str], None],
) -> RunResult:
    """The run itself, once its directories are held."""
    precision, loss_scale, jit_compile, split = (
        setting.precision, setting.loss_scale, setting.jit_compile, setting.split)
    run_dir, run_checkpoints, checkpoint_dir = dirs.run_dir, dirs.run_checkpoints, dirs.checkpoint_dir
    steps = _batches(len(split.x_train), config.batch_size, drop_remainder)
    steps = min(steps, config.steps_per_epoch or steps)

    keras.utils.set_random_seed(config.seed)
    with (precision_lib.precision_scope(precision), precision_lib.tf32_scope(config.tf32),
          checkpoint_lib.op_determinism(config.deterministic)):
        with strategy.scope():  # models, optimizers (and their loss scales), metrics: one copy per replica
            job = build_job(config, split, loss_scale, jit_compile, run_dir, steps)
        trainer = job.trainer
        _keep_float32(config, trainer, print_fn, precision)
        checkpoint = checkpoint_lib.RunCheckpoint(
            checkpoint_dir, trainer, _signature(config, setting, trainer), config.keep_checkpoints, run_checkpoints,
            print_fn=print_fn)
        timer = callbacks_lib.StepTimer(config.batch_size * trainer.images_per_example, config.warmup_steps)
        console = callbacks_lib.ConsoleLogger(
            timer, trainer.console_fields, trainer.loss_scale_prefixes, config.log_every, setting.run_dir, print_fn,
            # A bar bypasses print_fn (it writes to sys.stdout), so auto only picks it for print on a terminal.
            progress=callbacks_lib.console_mode(config.console, sys.stdout if print_fn is print else None) == "progress",
        )
        hparams = {
            "precision": precision,
            "loss_scale": str(loss_scale),
            "xla": jit_compile,
            "tf32": config.tf32,
            "batch_size": config.batch_size,
            "dataset": config.dataset,
            "epochs": config.epochs,
            "seed": config.seed,
            "strategy": config.strategy,
            "replicas": strategy.num_replicas_in_sync,
            **job.hparams,
        }
        # First of the callbacks that read the weights: every replica then holds the same BatchNorm statistics.
        extra = [distribute.AverageReplicaStatistics(), *job.callbacks]
        if config.diagnose_every:
            extra.append(callbacks_lib.GradientDiagnostics(job.probe, config.diagnose_every, run_dir))
        if config.profile_steps:
            extra.append(callbacks_lib.ProfileSteps(*config.profile_steps, run_dir, print_fn))
        print_fn(
            f"training {trainer.name}: precision={precision} loss_scale={loss_scale} xla={jit_compile} "
            f"tf32={config.tf32} dataset={config.dataset} batch_size={config.batch_size} "
            f"strategy={config.strategy} replicas={strategy.num_replicas_in_sync} "
            f"steps/epoch={steps} logdir={run_dir}"
        )
        if precision != "float32":
            warnings = diagnostics.startup_warnings(trainer, config.batch_size)
            if warnings:
                print_fn(warnings)
        position = _restore(config, setting, trainer, checkpoint, print_fn)
        # At the global step, so that a resumed run continues its per-step curves.
        summaries = callbacks_lib.Summaries(run_dir, trainer.summary_route, hparams, config.log_every, position, timer)
        nonfinite = []
        if config.on_nonfinite == "stop":
            nonfinite.append(callbacks_lib.NonFiniteStop(lambda index: _batch_at(job, index), position))
        dirs.training_started = True  # from here on SIGINT/SIGTERM finish the step and checkpoint
        with preemption.PreemptionGuard() as guard:
            saver = callbacks_lib.Checkpointing(checkpoint, position, config.checkpoint_every, guard, print_fn)
            _fit(trainer, job, config, steps, position, [timer, console, summaries, *extra, *nonfinite, saver])
    return RunResult(
        logs=console.final_logs,
        images_per_sec=timer.mean_images_per_sec,
        steps=len(timer.step_times),
        warmup_steps=config.warmup_steps,
        logdir=run_dir,
        precision=precision,
        loss_scale=loss_scale,
        jit_compile=jit_compile,
        trainer=trainer,
    )


def _network_signature(network: keras.Model) -> dict[str, Any]:
    """A network's architecture and per-layer dtype policies, independent of auto-generated layer names."""
    layers = [(type(layer).__name__, layer.dtype_policy.name, [list(w.shape) for w in layer.weights])
              for _, layer in precision_lib.layer_paths(network)]
    policies: dict[str, int] = {}
    for _, policy, _ in layers:
        policies[policy] = policies.get(policy, 0) + 1
    return {
        "layers": len(layers),
        "parameters": int(sum(np.prod(w.shape) for w in network.weights)),
        "dtype_policies": policies,
        "structure": hashlib.sha256(json.dumps(layers).encode()).hexdigest()[:16],
    }


def _signature(config: TrainConfig, setting: _Setting, trainer: trainers.MixedPrecisionTrainer) -> dict[str, Any]:
    """What a resumed run must share with the run that wrote its checkpoint."""
    return {
        "trainer": type(trainer).__name__,
        "config": {k: v for k, v in dataclasses.asdict(config).items() if k not in _RESUMABLE},
        "precision": setting.precision,
        "loss_scale": str(setting.loss_scale),
        "networks": {name: _network_signature(network) for name, network in trainer.networks.items()},
        "optimizers": {name: type(opt.inner_optimizer if isinstance(opt, keras.optimizers.LossScaleOptimizer)
                                  else opt).__name__ for name, opt in trainer.optimizers.items()},
    }


def _restore(
    config: TrainConfig, setting: _Setting, trainer: trainers.MixedPrecisionTrainer,
    checkpoint: checkpoint_lib.RunCheckpoint, print_fn: Callable[[str], None],
) -> int:
    """Restores the newest readable checkpoint when resuming; returns the steps already done.

    Without `resume`, a checkpoint directory that already holds checkpoints
    is refused rather than overwritten.
    """
    if not config.resume:
        # Listed in the state file or not: a lost state file must not let a new run overwrite them.
        if checkpoint.checkpoints:
            raise ConfigError(
                f"{checkpoint.read_directory} already holds checkpoints of a run (newest: "
                f"{checkpoint.checkpoints[-1]}). Pass resume to continue it, or choose another run_name or "
                "checkpoint_dir."
            )
        return 0
    found = checkpoint.latest(print_fn)
    if found is None:
        print_fn(f"resume: no checkpoint in {checkpoint.directory} yet; starting from step 0")
        return 0
    step = checkpoint.restore(found)
    print_fn(f"resumed from {found.path} at step {step}")
    return step


def _stream(job: _Job, position: int) -> tf.data.Dataset:
    """The run's training batches from global step `position` on.

    Epoch after epoch in the seeded shuffle order; a fresh pipeline replays
    the same order, so skipping `position` batches lands where a stopped run
    left off.
    """
    return job.train_data().repeat().skip(position)


def _batch_at(job: _Job, index: int) -> Any:
    """The training batch of 0-based global step `index`."""
    return next(iter(_stream(job, index).take(1)))


def _fit(
    trainer: trainers.MixedPrecisionTrainer, job: _Job, config: TrainConfig, steps: int, position: int,
    callbacks: list[keras.callbacks.Callback],
) -> None:
    """Trains from global step `position` to the end of the last epoch.

    A run resumed inside an epoch first finishes that epoch with its own
    `fit()`; `tfmp.callbacks.RunSegment` shows the callbacks one run.
    """
    epoch, offset = divmod(position, steps)
    segments = []
    if offset:
        segments.append((epoch, epoch + 1, steps - offset, offset))
        epoch += 1
    if epoch < config.epochs:
        segments.append((epoch, config.epochs, steps, 0))
    for i, (first_epoch, end_epoch, segment_steps, offset) in enumerate(segments):
        trainer.fit(
            _stream(job, position),
            validation_data=job.validation_data,
            initial_epoch=first_epoch,
            epochs=end_epoch,
            steps_per_epoch=segment_steps,
            callbacks=[callbacks_lib.RunSegment(callback, i == 0, i == len(segments) - 1, offset,
                                                {"steps": steps, "epochs": config.epochs})
                       for callback in callbacks],
            shuffle=False,  # the pipeline shuffles
            verbose=0,
        )
        position += (end_epoch - first_epoch) * segment_steps


def train_gan(config: GANConfig, print_fn: Callable[[str], None] = print) -> RunResult:
    """Trains the seed's GAN as `config` says; see the module docstring.

    Raises:
        ConfigError: for an impossible setting, before training.
        tfmp.data.DatasetNotFoundError: when the dataset is not available.
    """
    return _run(config, _gan_job, drop_remainder=True, print_fn=print_fn)


def train_classifier(config: ClassifierConfig, print_fn: Callable[[str], None] = print) -> RunResult:
    """Trains the MobileNetV2 classifier as `config` says; see the module docstring.

    Raises:
        ConfigError: for an impossible setting, before training.
        tfmp.data.DatasetNotFoundError: when the dataset is not available.
    """
    return _run(config, _classifier_job, drop_remainder=False, print_fn=print_fn)


_JOBS: dict[type, Callable[..., _Job]] = {GANConfig: _gan_job, ClassifierConfig: _classifier_job}


def diagnose_run(config: TrainConfig, print_fn: Callable[[str], None] | None = print) -> diagnostics.Diagnosis:
    """Builds the run `config` describes and diagnoses it on its first batch.

    Nothing is trained. The trainer is built and compiled exactly as
    `train_gan` / `train_classifier` would, under the config's precision and
    loss scale, on one device (`config.strategy` is not used: the reports
    concern one batch's numerics); `tfmp.diagnostics.diagnose` then runs the four reports on the
    first `batch_size` training examples (fewer if the dataset is smaller;
    the alignment report checks `batch_size` itself). With `config.run_name`
    set, the gradient histograms are also written to `<logdir>/<run_name>`.

    Raises:
        ConfigError: for an impossible setting.
        tfmp.data.DatasetNotFoundError: when the dataset is not available.
    """
    build_job = _JOBS.get(type(config))
    if build_job is None:
        raise ConfigError(f"No model for this config; use GANConfig or ClassifierConfig. Received: {type(config).__name__}")
    print_fn = print_fn or (lambda line: None)
    setting = _prepare(config, build_job, print_fn)
    if config.run_name:
        _check_writable_dir("logdir", setting.run_dir)
    keras.utils.set_random_seed(config.seed)
    with precision_lib.precision_scope(setting.precision):
        job = build_job(config, setting.split, setting.loss_scale, False, setting.run_dir, 1)
        _keep_float32(config, job.trainer, print_fn, setting.precision)
        print_fn(f"diagnosing {job.trainer.name}: precision={setting.precision} loss_scale={setting.loss_scale} "
                 f"batch_size={config.batch_size} dataset={config.dataset}\n")
        diagnosis = diagnostics.diagnose(job.trainer, job.probe, batch_size=config.batch_size, print_fn=print_fn)
    if config.run_name:
        diagnostics.write_gradient_summaries(diagnosis.gradients, setting.run_dir, step=0)
        print_fn(f"\nlog2|g| histograms: tensorboard --logdir {setting.run_dir}")
    return diagnosis


COMPARISON = (
    ("float32", "float32", "none"),
    ("mixed_float16_no_loss_scale", "mixed_float16", "none"),
    ("mixed_float16_dynamic_loss_scale", "mixed_float16", "dynamic"),
)


def compare_loss_scaling(
    config: GANConfig, print_fn: Callable[[str], None] = print
) -> list[tuple[str, RunResult]]:
    """Runs the seed's three GAN configurations under one parent directory.

    float32; mixed_float16 without loss scaling; mixed_float16 with dynamic
    loss scaling. Everything else comes from `config`; the runs are written
    to `<config.logdir>/<name>` so TensorBoard overlays them.

    Returns:
        `(name, RunResult)` per configuration, in the order above.
    """
    results = []
    for name, precision, loss_scale in COMPARISON:
        print_fn(f"== {name} ==")
        variant = dataclasses.replace(config, precision=precision, loss_scale=loss_scale, run_name=name)
        results.append((name, train_gan(variant, print_fn=print_fn)))
    return results


def comparison_table(results: Sequence[tuple[str, RunResult]]) -> str:
    """A markdown table of final G/D loss, skipped steps and throughput."""
    lines = [
        "| run | final G loss | final D loss | skipped steps (G/D) | img/s |",
        "|---|---|---|---|---|",
    ]
    for name, result in results:
        logs = result.logs
        skipped = "/".join(str(int(logs[k])) for k in ("g_skipped_steps", "d_skipped_steps") if k in logs) or "-"
        ips = f"{result.images_per_sec:.0f}" if result.images_per_sec is not None else "n/a"
        lines.append(f"| {name} | {logs['g_loss']:.4f} | {logs['d_loss']:.4f} | {skipped} | {ips} |")
    return "\n".join(lines)
