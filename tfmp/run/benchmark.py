"""Throughput benchmarks: tfmp's trainers per precision, against a hand-written step.

Two modes, each returning a list of dataclass records:

* `compare`: for every (model, precision, XLA, batch size), images per second
  of the tfmp trainer's step as `fit()` runs it, the same against float32
  (`ratio_to_float32`) and against a minimal hand-written
  `tf.function` step of the same model and precision
  (`ratio_to_hand_written`, the toolkit's overhead), plus peak host and GPU
  memory. See `Record`.
* `input_pipeline`: the trainer fed by the real `tf.data` pipeline training
  uses against the trainer fed by in-memory tensors of the same shape. See
  `PipelineRecord`.

`tfmp.run.reporting` presents the records (`markdown_table`, `write_json`,
`plot`).

Method
------

* One code path with training: each model is a `tfmp.run.tasks.Task` (by
  default the tasks of the default `GANConfig` and `ClassifierConfig`, and
  `tfmp.run.tasks.resnet50_task`), and a row's trainer is `task.build(...)`,
  the very call a training run makes, for the row's batch size and the
  benchmark's seed, `float32_layers` and `tf32`. So the networks (with
  `tfmp.layers.FusedBatchNormalization`), the optimizers and learning-rate
  schedule (the classifier's cosine decay runs over the row's steps as one
  epoch), the loss and metrics, non-finite step skipping under every
  precision, the loss scale (dynamic under `mixed_float16`, none
  otherwise) and the float32 layers (`"auto"`: the model's advice for
  bfloat16 without a GPU, which for MobileNetV2 keeps the depthwise
  convolutions in float32) are what training runs, not a copy kept in
  sync.
* Models are built under `tfmp.precision_scope(precision)` (the global
  dtype policy is restored afterwards, even on error) after
  `keras.utils.set_random_seed(seed)`, so every precision starts from the
  same weights. The whole row (building, tracing, timing) runs inside the
  scope, as a training run does.
* Data: one synthetic batch held in memory (uniform [0, 1] float32 images;
  int32 labels for classifiers), fed through
  `tf.data.Dataset.from_tensors(batch).repeat()`. The trainer and the
  hand-written step each get an iterator over that same dataset, and both
  fetch the batch inside a graph: `fit()`'s `train_function(iterator)` calls
  `get_next` in its outer `tf.function`, and the hand-written driver is a
  `tf.function` that calls `get_next` and then the step. The ratio between
  them is therefore the cost of what the trainer's step does beyond the
  bare math (Keras's `compute_loss`, metrics, loss-scale logs, the
  distribution wrapper), not a difference in how data arrives.
* Warm-up: the trainer's first step is one `fit(..., steps_per_epoch=1)`
  call, which builds what `fit()` builds (compiled loss and metrics, the
  optimizer) and traces the step; `make_train_function()` has then set
  `trainer.train_function`, and `warmup_steps - 1` more steps go through
  it. The hand-written step gets `warmup_steps` untimed steps (the first
  traces, and with XLA compiles, it).
* Timing: `repeats` rounds of `steps` steps each; each round times the
  trainer and the hand-written step one after the other, alternating which
  goes first, so machine noise hits both equally. A round's clock stops
  after the last step's outputs are fetched to the host. Reported:
  `images_per_sec`, the median over the rounds; `step_ms`, the step time at
  that median throughput. Images are counted as the seeds count them:
  `2 x batch` per GAN step (real and fake), `batch` per classifier step
  (`trainer.images_per_example`). Steps within a round run back to back
  with no host sync in between (as in `fit()`), so on a GPU the host and
  device overlap as they do in training. On a busy machine prefer many
  short rounds (e.g. `steps=2, repeats=15`) to a few long ones: each
  trainer round is then paired with a hand-written round seconds apart.
  Rows run one after the other, so `ratio_to_float32` (between rows) is
  noisier than `ratio_to_hand_written` (within a row).

The hand-written step
---------------------

The baseline deliberately shares no code with `tfmp.trainers`: it is what
a user writes by hand. For a classifier, inside `tf.function(jit_compile=xla)`:

```python
with tf.GradientTape() as tape:
    loss = loss_fn(y, network(x, training=True))       # SparseCategoricalCrossentropy
    target = optimizer.get_scaled_loss(loss)           # mixed_float16 only
grads = tape.gradient(target, network.trainable_variables)
grads = optimizer.get_unscaled_gradients(grads)        # mixed_float16 only
optimizer.apply_gradients(zip(grads, network.trainable_variables))
return loss
```

For the GAN, the same update twice, in the trainer's order: the generator
(fresh uniform noise -> generator -> discriminator -> binary cross-entropy
on float32 logits against the softened "real" label), then the
discriminator (real images and fakes from the updated generator, drawn
outside the tape; the mean of its real and fake losses with the seed's
softened and swapped labels, `tfmp.trainers.discriminator_labels`). Noise
comes from a `keras.random.SeedGenerator`, as in the trainer. No metrics,
no logs beyond the losses. The optimizers are fresh copies of the
task's (`task.optimizers`: the same kinds, rates and schedule). Under
`mixed_float16` each optimizer is a dynamic `tfmp.LossScaleOptimizer` and only `get_scaled_loss` /
`get_unscaled_gradients` / `apply_gradients` are used; otherwise the bare
Keras optimizer. The optimizers are built eagerly before tracing. The
hand-written step shares the network (its variables) with the trainer but
has its own optimizers, so each path keeps its own loss scale.

Memory
------

`peak_host_mb` and `peak_gpu_mb` are `tfmp.run.memory.HostPeakMemory` and
`tfmp.run.memory.GpuPeakMemory` over the row, from its start (before its models
are built) to its end; `tfmp.run.memory` says how each is read. The host figure
is the whole process: the Python interpreter and TensorFlow runtime, both
paths of the row (the trainer and the hand-written step share the network
but not their optimizer slots), and whatever earlier rows left resident
(memory freed by Python is not always returned to the system). Compare rows
within one run with that in mind; for an isolated figure run one
configuration per process. `peak_gpu_mb` is None without a GPU.
"""

from __future__ import annotations

import dataclasses
import gc
import re
import statistics
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

import keras
import numpy as np
import tensorflow as tf

from tfmp.run import config as config_lib
from tfmp.run import data as data_lib
from tfmp import loss_scale as loss_scale_lib
from tfmp import precision as precision_lib
from tfmp.run import tasks
from tfmp import trainers
from tfmp.run.memory import GpuPeakMemory, HostPeakMemory
from tfmp.models.resnet50 import MIN_INPUT_SIZE

__all__ = [
    "BenchmarkConfig",
    "MODELS",
    "MODES",
    "PRECISIONS",
    "PipelineRecord",
    "Record",
    "Workload",
    "build_workload",
    "canonical_models",
    "canonical_precisions",
    "compare",
    "default_specs",
    "epoch_batch_sizes",
    "input_pipeline",
    "training_pipeline",
]

PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
MODELS = ("gan", "mobilenet_v2", "resnet50")
PIPELINE_MODELS = ("gan", "mobilenet_v2")
MODES = ("compare", "input_pipeline")
DEFAULT_RESNET_INPUT_SIZE = 64


# -- workloads: what one row times ------------------------------------------


@dataclasses.dataclass
class Workload:
    """A compiled trainer, the matching hand-written step, and their data.

    Attributes:
        trainer: The compiled `tfmp.trainers` model (not yet traced), built by
            the model's `tfmp.run.tasks.Task` exactly as training builds it.
        hand_written_step: `tf.function(jit_compile=xla)` taking one batch and
            running one update of the same network (see the module
            docstring); None when not built.
        hand_written_optimizers: The hand-written step's optimizers (one for a
            classifier, generator's then discriminator's for the GAN).
        batch: The synthetic batch both are fed: images, or
            `(images, labels)`.
        images_per_step: Images one step processes (`batch_size *
            trainer.images_per_example`).
        float32_layers: Paths of the layers kept in float32
            (`tfmp.precision.keep_float32`); empty for none.
    """

    trainer: trainers.MixedPrecisionTrainer
    hand_written_step: Callable[[Any], Any] | None
    hand_written_optimizers: tuple[keras.optimizers.Optimizer, ...]
    batch: Any
    images_per_step: int
    float32_layers: tuple[str, ...] = ()


@dataclasses.dataclass
class Pipeline:
    """A repeated training pipeline and the batch sizes of one of its epochs.

    Attributes:
        dataset: The `tf.data` pipeline training uses, with `.repeat()`.
        epoch_batch_sizes: Examples in each batch of one epoch, in order; the
            repeated pipeline cycles through them.
    """

    dataset: tf.data.Dataset
    epoch_batch_sizes: tuple[int, ...]


def epoch_batch_sizes(num_examples: int, batch_size: int, drop_remainder: bool) -> tuple[int, ...]:
    """The sizes of the batches one epoch of `num_examples` yields.

    Args:
        num_examples: Examples in the epoch.
        batch_size: Examples per batch.
        drop_remainder: Whether the last incomplete batch is dropped.

    Returns:
        e.g. `(128,) * 11 + (30,)` for 1,438 examples in batches of 128.

    Raises:
        ValueError: when no batch at all results, naming the values.
    """
    full, rest = divmod(num_examples, batch_size)
    sizes = (batch_size,) * full + ((rest,) if rest and not drop_remainder else ())
    if not sizes:
        raise ValueError(
            f"batch_size is larger than the {num_examples} training examples and incomplete batches "
            f"are dropped. Received: batch_size={batch_size!r}"
        )
    return sizes


def _hand_written_optimizer(
    optimizer: keras.optimizers.Optimizer, precision: str, variables: Sequence[keras.Variable]
) -> keras.optimizers.Optimizer:
    """The bare optimizer, or a dynamic `tfmp.LossScaleOptimizer` under float16; built."""
    if precision == "mixed_float16":
        optimizer = loss_scale_lib.LossScaleOptimizer(optimizer)
    # Built eagerly: slot variables must exist before an XLA trace.
    optimizer.build(variables)
    return optimizer


def _hand_written_update(
    optimizer: keras.optimizers.Optimizer, variables: Sequence[keras.Variable], loss_fn: Callable[[], tf.Tensor]
) -> tf.Tensor:
    # Written out rather than shared with tfmp.trainers: this is the baseline
    # the trainer is measured against, so it must not run the trainer's code.
    scaled = isinstance(optimizer, loss_scale_lib.LossScaleOptimizer)
    with tf.GradientTape() as tape:
        loss = loss_fn()
        target = optimizer.get_scaled_loss(loss) if scaled else loss
    grads = tape.gradient(target, variables)
    if scaled:
        grads = optimizer.get_unscaled_gradients(grads)
    optimizer.apply_gradients(zip(grads, variables))
    return loss


def _hand_written_classifier(task: tasks.ClassifierTask, network: keras.Model, precision: str, jit_compile: bool,
                             steps: int):
    variables = network.trainable_variables
    (optimizer,) = task.optimizers(steps)  # the run's optimizer and schedule, a fresh copy
    optimizer = _hand_written_optimizer(optimizer, precision, variables)
    loss_fn = task.loss()

    @tf.function(jit_compile=jit_compile)
    def step(batch):
        x, y = batch
        return _hand_written_update(optimizer, variables, lambda: loss_fn(y, network(x, training=True)))

    return step, (optimizer,)


def _hand_written_gan(task: tasks.GANTask, trainer: trainers.GANTrainer, precision: str, jit_compile: bool,
                      steps: int):
    generator, discriminator = trainer.generator, trainer.discriminator
    g_vars, d_vars = generator.trainable_variables, discriminator.trainable_variables
    g_opt, d_opt = task.optimizers(steps)
    g_opt = _hand_written_optimizer(g_opt, precision, g_vars)
    d_opt = _hand_written_optimizer(d_opt, precision, d_vars)
    bce = keras.losses.BinaryCrossentropy(from_logits=True)
    noise_seed = keras.random.SeedGenerator(task.config.seed)
    latent_dim = int(generator.input_shape[-1])
    softening, swap = task.config.label_softening, task.config.label_swap_fraction

    def noise(batch_size):
        return keras.random.uniform((batch_size, latent_dim), minval=-1.0, maxval=1.0, seed=noise_seed)

    def logits(images):
        return tf.cast(discriminator(images, training=True), tf.float32)

    @tf.function(jit_compile=jit_compile)
    def step(real):
        batch_size = tf.shape(real)[0]
        real_target = tf.fill((batch_size, 1), tf.constant(softening, tf.float32))
        g_loss = _hand_written_update(
            g_opt, g_vars, lambda: bce(real_target, logits(generator(noise(batch_size), training=True)))
        )
        fake = generator(noise(batch_size), training=True)
        real_labels, fake_labels = trainers.discriminator_labels(batch_size, softening, swap)
        d_loss = _hand_written_update(
            d_opt, d_vars, lambda: 0.5 * (bce(real_labels, logits(real)) + bce(fake_labels, logits(fake)))
        )
        return g_loss, d_loss

    return step, (g_opt, d_opt)


def build_workload(
    task: tasks.Task, precision: str, jit_compile: bool, steps: int = 1, hand_written: bool = True,
) -> Workload:
    """Builds one row's workload from `task`, under the current dtype policy (which must be `precision`'s).

    The trainer is `task.build(...)`: the networks, optimizers, learning-rate
    schedule (over `steps`), loss, metrics, non-finite skipping and float32
    layers exactly as a training run of `task.config` has them; the loss
    scale is the config's (dynamic under `mixed_float16` by default, none
    otherwise). The hand-written step (`hand_written`) updates the same
    networks with fresh copies of the task's optimizers. The batch is
    synthetic: uniform [0, 1] images of `task.image_shape`, int32 labels
    for a classifier, seeded by `task.config.seed`.

    Raises:
        TypeError: for a task that is neither a GAN nor a classifier task.
    """
    if not isinstance(task, (tasks.GANTask, tasks.ClassifierTask)):
        raise TypeError(f"No hand-written step for this task; use a GANTask or a ClassifierTask. Received: {task!r}")
    loss_scale = config_lib.resolved_loss_scale(task.config.loss_scale) if precision == "mixed_float16" else "none"
    built = task.build(precision, loss_scale, jit_compile, steps)
    trainer, batch_size = built.trainer, task.config.batch_size
    rng = np.random.default_rng(task.config.seed)
    images = tf.constant(rng.uniform(0.0, 1.0, (batch_size, *task.image_shape)).astype(np.float32))
    step, optimizers = None, ()
    if isinstance(task, tasks.GANTask):
        batch = images
        if hand_written:
            step, optimizers = _hand_written_gan(task, trainer, precision, jit_compile, steps)
    else:
        batch = (images, tf.constant(rng.integers(0, task.num_classes, batch_size).astype(np.int32)))
        if hand_written:
            (network,) = trainer.networks.values()
            step, optimizers = _hand_written_classifier(task, network, precision, jit_compile, steps)
    return Workload(trainer, step, optimizers, batch, batch_size * trainer.images_per_example, built.float32_layers)


def training_pipeline(task: tasks.Task) -> Pipeline:
    """The task's training pipeline on its config's dataset, exactly as a training run builds it, repeated."""
    split = task.load_data()
    return Pipeline(task.train_data(split).repeat(),
                    epoch_batch_sizes(len(split.x_train), task.config.batch_size, task.drop_remainder))


def default_specs(resnet_input_size: int = DEFAULT_RESNET_INPUT_SIZE) -> dict[str, tasks.Task]:
    """The benchmark's models, by name: the tasks training runs, at the benchmark's default batch sizes.

    * `gan`: the seed GAN (`tfmp.run.tasks.GANTask` of the default
      `GANConfig`), batch 512 by default;
    * `mobilenet_v2`: the default `ClassifierConfig`'s MobileNetV2 at
      32x32x3, 10 classes, alpha 1.0, BatchNorm momentum 0.9, cosine
      learning rate, batch 128; under bfloat16 on a CPU the depthwise
      convolutions of `tfmp.models.mobilenet_v2.cpu_bfloat16_float32_layers`
      in float32 (as training);
    * `resnet50`: `tfmp.run.tasks.resnet50_task` at `resnet_input_size`
      squared, 10 classes, batch 32.
    """
    classifier = config_lib.ClassifierConfig()
    return {
        "gan": tasks.GANTask(config_lib.GANConfig(batch_size=512)),
        "mobilenet_v2": tasks.ClassifierTask(dataclasses.replace(classifier, batch_size=128)),
        "resnet50": tasks.resnet50_task(dataclasses.replace(classifier, batch_size=32), resnet_input_size),
    }


# -- settings ----------------------------------------------------------------


def _dedupe(values: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(dict.fromkeys(values))


def _canonical_names(
    kind: str, values: Sequence[str], valid: str, canonical: Callable[[Any], str | None]
) -> tuple[str, ...]:
    """`values` through `canonical`, in order, each once; ValueError naming a bad value and `valid`."""
    if isinstance(values, str):  # a config holds names, not the command line's comma-separated text
        raise ValueError(f"{kind}s must be a tuple of names, not one string. Received: {kind}s={values!r}")
    if not values:
        raise ValueError(f"No {kind} given. Valid: {valid}. Received: {kind}s={values!r}")
    names = []
    for value in values:
        name = canonical(value)
        if name is None:
            raise ValueError(f"Unknown {kind}. Valid: {valid}. Received: {kind}={value!r}")
        names.append(name)
    return _dedupe(names)


def canonical_models(models: Sequence[str], valid: Iterable[str] = MODELS) -> tuple[str, ...]:
    """The model names in lower case, in order, each once.

    Args:
        models: Names from `valid`, in any case.
        valid: The known names (e.g. the keys of the specs).

    Raises:
        ValueError: for a string, an empty tuple or an unknown name, naming
            it and the valid ones.
    """
    valid = tuple(valid)

    def canonical(name: Any) -> str | None:
        return name.lower() if isinstance(name, str) and name.lower() in valid else None

    return _canonical_names("model", models, ", ".join(valid), canonical)


def canonical_precisions(precisions: Sequence[str]) -> tuple[str, ...]:
    """The precisions' names from `PRECISIONS`, in order, each once; aliases (`fp32`, `bf16`, `fp16`) accepted.

    `auto` is refused: a benchmark names what it measures.

    Raises:
        ValueError: for a string, an empty tuple or an unknown name, naming
            it and the valid ones.
    """

    def canonical(name: Any) -> str | None:
        try:
            name = precision_lib.canonical_precision(name)
        except (TypeError, ValueError):
            return None
        return name if name in PRECISIONS else None

    return _canonical_names("precision", precisions, f"{', '.join(PRECISIONS)} (or fp32, bf16, fp16)", canonical)


def _check_integer(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}. Received: {name}={value!r}")


@dataclasses.dataclass(frozen=True)
class BenchmarkConfig:
    """What to measure, and how long.

    The sequences are tuples of values, not comma-separated text (the
    script parses that).

    Attributes:
        models: Model names (keys of the specs; by default `MODELS`), in any
            case.
        precisions: Precisions, from `PRECISIONS` or their aliases (`fp32`,
            `bf16`, `fp16`).
        xla: `jit_compile` values to measure.
        batch_sizes: Batch sizes for every model; empty: each model's default
            (`gan` 512, `mobilenet_v2` 128, `resnet50` 32).
        resnet_input_size: Side of ResNet-50's square input (>= 32).
        warmup_steps: Untimed steps per path before timing (>= 1; the first
            traces and compiles).
        steps: Timed steps per path per repeat.
        repeats: Timed rounds; medians are taken over them.
        seed: Seed of the weights, the synthetic data and the noise.
        dataset: The real dataset of the `input_pipeline` mode (one of
            `tfmp.run.data.DATASETS`; `digits` needs no download).
        float32_layers: Layers computing in float32, as training's setting:
            `"auto"` (each model's advice for bfloat16 on a CPU), `"none"`,
            or a regex searched in layer paths
            (`tfmp.precision.resolve_float32_layers`).
        tf32: Allow TensorFloat-32 for float32 math on Ampere+ GPUs while
            measuring (TensorFlow's default is on; no effect on CPU).
    """

    models: tuple[str, ...] = MODELS
    precisions: tuple[str, ...] = PRECISIONS
    xla: tuple[bool, ...] = (False, True)
    batch_sizes: tuple[int, ...] = ()
    resnet_input_size: int = DEFAULT_RESNET_INPUT_SIZE
    warmup_steps: int = 3
    steps: int = 20
    repeats: int = 5
    seed: int = 0
    dataset: str = "digits"
    float32_layers: str = precision_lib.FLOAT32_LAYERS_AUTO
    tf32: bool = True

    def validate(self, valid_models: Iterable[str] = MODELS) -> None:
        """Raises ValueError, naming the value, for an impossible setting."""
        canonical_models(self.models, valid_models)
        canonical_precisions(self.precisions)
        if not self.xla or not all(isinstance(x, bool) for x in self.xla):
            raise ValueError(f"xla must be a non-empty tuple of bools. Received: xla={self.xla!r}")
        for batch_size in self.batch_sizes:
            _check_integer("batch_size", batch_size, 1)
        _check_integer("resnet_input_size", self.resnet_input_size, MIN_INPUT_SIZE)
        for name in ("warmup_steps", "steps", "repeats"):
            _check_integer(name, getattr(self, name), 1)
        if not isinstance(self.dataset, str) or self.dataset.lower() not in data_lib.DATASETS:
            raise ValueError(
                f"Unknown dataset. Valid: {', '.join(data_lib.DATASETS)}. Received: dataset={self.dataset!r}"
            )
        try:
            re.compile(self.float32_layers)
        except (re.error, TypeError) as e:
            raise ValueError(
                f"float32_layers is not a valid regular expression ({e}). Received: {self.float32_layers!r}"
            ) from None


# -- records -----------------------------------------------------------------


@dataclasses.dataclass
class Record:
    """One row of the `compare` mode.

    Attributes:
        model: The model's name.
        precision: `float32`, `mixed_bfloat16` or `mixed_float16`.
        xla: Whether the step was compiled with XLA (`jit_compile`).
        batch_size: Examples per batch.
        images_per_sec: The tfmp trainer's throughput, median over repeats.
        images_per_sec_min: The slowest repeat's throughput (the spread's
            low end).
        images_per_sec_max: The fastest repeat's throughput.
        step_ms: Milliseconds per step at that throughput.
        ratio_to_float32: `images_per_sec` over that of the float32 row of the
            same model, XLA setting and batch size in the same run; None
            without such a row.
        ratio_to_hand_written: `images_per_sec` over the hand-written step's
            median throughput.
        peak_host_mb: Peak resident memory of the process during the row
            (MiB; see the module docstring for what it includes).
        peak_gpu_mb: Peak GPU memory during the row (MiB), None without a GPU.
    """

    model: str
    precision: str
    xla: bool
    batch_size: int
    images_per_sec: float
    step_ms: float
    ratio_to_float32: float | None
    ratio_to_hand_written: float
    peak_host_mb: float
    peak_gpu_mb: float | None
    images_per_sec_min: float | None = None
    images_per_sec_max: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON-ready dict, one key per attribute (the spread after the median)."""
        row = dataclasses.asdict(self)
        keys = [k for k in row if not k.startswith("images_per_sec_")]
        at = keys.index("images_per_sec") + 1
        keys[at:at] = ["images_per_sec_min", "images_per_sec_max"]
        return {k: row[k] for k in keys}


@dataclasses.dataclass
class PipelineRecord:
    """One row of the `input_pipeline` mode.

    Attributes:
        model: The model's name.
        dataset: The real dataset fed through `tfmp.run.data.make_dataset`.
        precision: The precision.
        xla: Whether the step was compiled with XLA.
        batch_size: Examples per batch.
        pipeline_images_per_sec: The trainer's throughput fed by the real
            pipeline (median over repeats; partial batches count their real
            size).
        synthetic_images_per_sec: The same trainer fed by in-memory tensors of
            the same shape.
        ratio: `pipeline_images_per_sec / synthetic_images_per_sec`; 1.0 means
            the pipeline costs nothing (the target is >= 0.95).
    """

    model: str
    dataset: str
    precision: str
    xla: bool
    batch_size: int
    pipeline_images_per_sec: float
    synthetic_images_per_sec: float
    ratio: float

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON-ready dict, one key per attribute."""
        return dataclasses.asdict(self)


# -- timing --------------------------------------------------------------------


def _block(outputs: Any) -> None:
    """Waits for a step to finish by fetching one of its outputs to the host."""
    flat = tf.nest.flatten(outputs)
    if flat:
        np.asarray(flat[0])


class _Driver:
    """Runs one path (trainer or hand-written) step by step, counting images.

    Args:
        call: Runs one step and returns its outputs.
        batch_sizes: Examples of the successive batches, cycled.
        images_per_example: Images per example (2 for the GAN).
    """

    def __init__(self, call: Callable[[], Any], batch_sizes: Sequence[int], images_per_example: int):
        self.call = call
        self.batch_sizes = tuple(batch_sizes)
        self.images_per_example = images_per_example
        self.position = 0
        self.images_per_sec: list[float] = []

    def run(self, steps: int) -> tuple[float, int]:
        """Runs `steps` steps; returns `(seconds, images)`."""
        images = sum(self.batch_sizes[(self.position + i) % len(self.batch_sizes)] for i in range(steps))
        self.position += steps
        start = time.perf_counter()
        outputs = None
        for _ in range(steps):
            outputs = self.call()
        _block(outputs)
        return time.perf_counter() - start, images * self.images_per_example

    def timed(self, steps: int) -> None:
        seconds, images = self.run(steps)
        self.images_per_sec.append(images / seconds)

    @property
    def median_images_per_sec(self) -> float:
        return statistics.median(self.images_per_sec)


def _interleave(drivers: Sequence[_Driver], steps: int, repeats: int) -> None:
    """Times every driver `repeats` times, rotating which one goes first."""
    for r in range(repeats):
        for i in range(len(drivers)):
            drivers[(r + i) % len(drivers)].timed(steps)


def _trainer_driver(
    workload: Workload, dataset: tf.data.Dataset, batch_sizes: Sequence[int], warmup_steps: int, first_fit: bool
) -> _Driver:
    """The trainer's step as `fit()` runs it, warmed up.

    With `first_fit`, the first warm-up step is a one-step `fit()` on
    `dataset` (which builds what fit builds and sets `train_function`).
    """
    trainer = workload.trainer
    if first_fit:
        trainer.fit(dataset, epochs=1, steps_per_epoch=1, shuffle=False, verbose=0)
        warmup_steps -= 1
    trainer.make_train_function()  # a no-op after fit(); as fit() calls it
    # The iterator fit() would make: the strategy's distributed dataset.
    iterator = iter(trainer.distribute_strategy.experimental_distribute_dataset(dataset))
    driver = _Driver(lambda: trainer.train_function(iterator), batch_sizes, trainer.images_per_example)
    if first_fit:
        driver.position = 1
    if warmup_steps > 0:
        driver.run(warmup_steps)
    return driver


def _hand_written_driver(workload: Workload, dataset: tf.data.Dataset, warmup_steps: int) -> _Driver:
    """The hand-written step, fetching its batch inside a graph as fit() does."""
    step = workload.hand_written_step
    iterator = iter(dataset)

    @tf.function
    def next_step(iterator):
        return step(next(iterator))

    batch_size = int(tf.nest.flatten(workload.batch)[0].shape[0])
    driver = _Driver(lambda: next_step(iterator), (batch_size,), workload.images_per_step // batch_size)
    driver.run(warmup_steps)
    return driver


def _check_specs(config: BenchmarkConfig, specs: Mapping[str, tasks.Task] | None) -> Mapping[str, tasks.Task]:
    specs = default_specs(config.resnet_input_size) if specs is None else specs
    config.validate(valid_models=specs)
    return specs


def _rows(config: BenchmarkConfig, specs: Mapping[str, tasks.Task]):
    """(spec, batch, xla, precision) in run order: precisions of a group adjacent."""
    for name in canonical_models(config.models, specs):
        spec = specs[name]
        for batch_size in _dedupe(config.batch_sizes) or (spec.config.batch_size,):
            for xla in _dedupe(config.xla):
                for precision in canonical_precisions(config.precisions):
                    yield spec, batch_size, xla, precision


def _label(spec: tasks.Task, precision: str, xla: bool, batch_size: int) -> str:
    return f"{spec.name} {precision} xla={str(xla).lower()} batch={batch_size}"


def _row_task(spec: tasks.Task, batch_size: int, config: BenchmarkConfig, **changes: Any) -> tasks.Task:
    """The model's task as one row runs it: the row's batch size and the benchmark's seed, float32 layers and TF32.

    One epoch as long as the row's steps, so that a learning-rate schedule
    runs over the measurement as it runs over a training run.
    """
    steps = config.warmup_steps + config.steps * config.repeats
    return spec.replace(batch_size=batch_size, seed=config.seed, float32_layers=config.float32_layers,
                        tf32=config.tf32, epochs=1, steps_per_epoch=steps, **changes)


def _build(spec: tasks.Task, precision: str, xla: bool, batch_size: int, config: BenchmarkConfig,
           hand_written: bool = True) -> Workload:
    """The row's workload, built by the model's task as training builds it."""
    task = _row_task(spec, batch_size, config)
    return build_workload(task, precision, xla, task.config.steps_per_epoch, hand_written=hand_written)


def _kept(float32_layers: int) -> str:
    return f", {float32_layers} float32 layers" if float32_layers else ""


def _measure_compare_row(
    spec: tasks.Task, precision: str, xla: bool, batch_size: int, config: BenchmarkConfig
) -> tuple[list[float], float, int, int]:
    """Times one row.

    Returns:
        (trainer img/s per repeat, hand-written img/s (median), images per
        step, layers kept in float32).

    Everything the row builds is local, so it can be freed once this returns.
    """
    with precision_lib.precision_scope(precision), precision_lib.tf32_scope(config.tf32):
        keras.utils.set_random_seed(config.seed)
        workload = _build(spec, precision, xla, batch_size, config)
        dataset = tf.data.Dataset.from_tensors(workload.batch).repeat()
        trainer = _trainer_driver(workload, dataset, (batch_size,), config.warmup_steps, first_fit=True)
        hand = _hand_written_driver(workload, dataset, config.warmup_steps)
        _interleave([trainer, hand], config.steps, config.repeats)
    return (trainer.images_per_sec, hand.median_images_per_sec, workload.images_per_step,
            len(workload.float32_layers))


def compare(
    config: BenchmarkConfig,
    specs: Mapping[str, tasks.Task] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Record]:
    """Measures the tfmp trainer against float32 and a hand-written step.

    One row per (model, batch size, XLA, precision), in that nesting order;
    see the module docstring for the method.

    Args:
        config: What to measure; validated first.
        specs: The models' `tfmp.run.tasks.Task`s by name; `default_specs(config.resnet_input_size)`
            when None.
        progress: Called with one line per finished row (e.g. print to
            stderr); silent when None.

    Returns:
        One `Record` per row.

    Raises:
        ValueError: for an invalid config, before any work, naming the value.
    """
    specs = _check_specs(config, specs)
    rows = []
    for spec, batch_size, xla, precision in _rows(config, specs):
        start = time.perf_counter()
        gc.collect()  # free the previous row before measuring this one's memory
        with HostPeakMemory() as host, GpuPeakMemory() as gpu:
            repeats, hand_images_per_sec, images_per_step, kept = _measure_compare_row(
                spec, precision, xla, batch_size, config
            )
        images_per_sec = statistics.median(repeats)
        rows.append(Record(
            model=spec.name,
            precision=precision,
            xla=xla,
            batch_size=batch_size,
            images_per_sec=images_per_sec,
            step_ms=1000.0 * images_per_step / images_per_sec,
            ratio_to_float32=None,
            ratio_to_hand_written=images_per_sec / hand_images_per_sec,
            peak_host_mb=host.peak_mb,
            peak_gpu_mb=gpu.peak_mb,
            images_per_sec_min=min(repeats),
            images_per_sec_max=max(repeats),
        ))
        if progress is not None:
            progress(
                f"{_label(spec, precision, xla, batch_size)}{_kept(kept)}: {images_per_sec:.1f} img/s "
                f"(hand-written {hand_images_per_sec:.1f}), peak RSS {host.peak_mb:.0f} MB, "
                f"{time.perf_counter() - start:.0f} s"
            )
    float32 = {(r.model, r.xla, r.batch_size): r.images_per_sec for r in rows if r.precision == "float32"}
    for r in rows:
        reference = float32.get((r.model, r.xla, r.batch_size))
        r.ratio_to_float32 = None if reference is None else r.images_per_sec / reference
    return rows


def _measure_pipeline_row(
    spec: tasks.Task, precision: str, xla: bool, batch_size: int, pipeline: Pipeline, config: BenchmarkConfig
) -> tuple[float, float]:
    """Times one row; returns (pipeline img/s, synthetic img/s)."""
    with precision_lib.precision_scope(precision), precision_lib.tf32_scope(config.tf32):
        keras.utils.set_random_seed(config.seed)
        workload = _build(spec, precision, xla, batch_size, config, hand_written=False)
        synthetic_data = tf.data.Dataset.from_tensors(workload.batch).repeat()
        synthetic = _trainer_driver(workload, synthetic_data, (batch_size,), config.warmup_steps, first_fit=True)
        # At least one epoch of warm-up: a partial last batch has its own shape.
        warmup = max(config.warmup_steps, len(pipeline.epoch_batch_sizes))
        real = _trainer_driver(workload, pipeline.dataset, pipeline.epoch_batch_sizes, warmup, first_fit=False)
        _interleave([real, synthetic], config.steps, config.repeats)
    return real.median_images_per_sec, synthetic.median_images_per_sec


def input_pipeline(
    config: BenchmarkConfig,
    specs: Mapping[str, tasks.Task] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[PipelineRecord]:
    """Measures the trainer fed by the real pipeline against in-memory tensors.

    For each (model, batch size, XLA, precision): one trainer, compiled as in
    `compare`, is fed alternately by `training_pipeline` on `config.dataset`
    (`tfmp.run.data.load_images` + `tfmp.run.data.make_dataset`, exactly the
    pipeline a training run's task builds, with `.repeat()`) and by
    `tf.data.Dataset.from_tensors(batch).repeat()` of the same shape and
    dtypes, through the same `train_function`, interleaved over `repeats`.
    The pipeline's warm-up covers at least one epoch, so a partial last batch
    (the classifier keeps it) is traced, and with XLA compiled, before
    timing; its images count at their real number.

    Args:
        config: What to measure; `config.dataset` is the real data.
        specs: The models' `tfmp.run.tasks.Task`s by name; `default_specs(...)` when None.
        progress: Called with one line per finished row; silent when None.

    Returns:
        One `PipelineRecord` per row.

    Raises:
        ValueError: for an invalid config, naming the value.
        tfmp.run.data.DatasetNotFoundError: when the dataset needs a download
            that is not available.
    """
    specs = _check_specs(config, specs)
    records = []
    pipelines: dict[tuple[str, int], Pipeline] = {}
    dataset = config.dataset.lower()
    for spec, batch_size, xla, precision in _rows(config, specs):
        start = time.perf_counter()
        key = (spec.name, batch_size)
        if key not in pipelines:
            pipelines[key] = training_pipeline(_row_task(spec, batch_size, config, dataset=dataset))
        gc.collect()
        real, synthetic = _measure_pipeline_row(spec, precision, xla, batch_size, pipelines[key], config)
        record = PipelineRecord(
            model=spec.name,
            dataset=dataset,
            precision=precision,
            xla=xla,
            batch_size=batch_size,
            pipeline_images_per_sec=real,
            synthetic_images_per_sec=synthetic,
            ratio=real / synthetic,
        )
        records.append(record)
        if progress is not None:
            progress(
                f"{_label(spec, precision, xla, batch_size)} on {dataset}: pipeline {real:.1f} img/s, "
                f"synthetic {synthetic:.1f} img/s, ratio {record.ratio:.3f}, {time.perf_counter() - start:.0f} s"
            )
    return records
