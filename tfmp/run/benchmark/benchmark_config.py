"""What a benchmark measures: its models, precisions and settings, checked before any work.

`BenchmarkConfig` holds the settings; `canonical_models` and
`canonical_precisions` normalise the names it holds; `default_specs` are the
models the benchmark measures by default, the tasks training runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tfmp import float32_layers
from tfmp import precision as precision_lib
from tfmp.models.resnet50 import MIN_INPUT_SIZE
from tfmp.run import config as config_lib
from tfmp.run import data as data_lib
from tfmp.run import shipped, tasks

__all__ = [
    "BenchmarkConfig",
    "DEFAULT_RESNET_INPUT_SIZE",
    "MODELS",
    "MODES",
    "PIPELINE_MODELS",
    "PRECISIONS",
    "canonical_models",
    "canonical_precisions",
    "dedupe",
    "default_specs",
]

PRECISIONS = precision_lib.CONCRETE_PRECISIONS  # a benchmark names what it measures: no `auto`
MODELS = ("gan", "mobilenet_v2", "resnet50")
PIPELINE_MODELS = ("gan", "mobilenet_v2")
MODES = ("compare", "input_pipeline", "ceiling", "resident", "kernels", "max_batch")
DEFAULT_RESNET_INPUT_SIZE = 64


def dedupe(values: Iterable[Any]) -> tuple[Any, ...]:
    """`values` in order, each once."""
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
    return dedupe(names)


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
        repeats: Timed rounds per row and run; in each round the trainer
            and the hand-written step run back to back (in alternating
            order), and their throughputs make one paired ratio.
        runs: How many times the whole comparison is measured, run after
            run: every row is built and timed again in each run, so one
            noisy stretch of the machine cannot decide a figure. The ratios
            are reported as the median over the runs with their min and
            max (`compare` mode; the `resident` mode measures every row
            once per run, all in one process).
        seed: Seed of the weights, the synthetic data and the noise.
        dataset: The real dataset of the `input_pipeline` mode (one of
            `tfmp.run.data.DATASETS`; `digits` needs no download).
        float32_layers: Layers computing in float32, as training's setting:
            `"auto"` (each model's advice for bfloat16 on a CPU), `"none"`,
            or a regex searched in layer paths
            (`tfmp.float32_layers.resolve_float32_layers`).
        tf32: Allow TensorFloat-32 for float32 math on Ampere+ GPUs while
            measuring (TensorFlow's default is on; no effect on CPU).
        isolate: Measure each row of each run in a fresh process (`compare`
            mode only). TensorFlow keeps memory from every model a process
            has trained (tensorflow/tensorflow#62854), so in one process a
            row's `peak_host_mb` includes what the rows before it left
            resident, and the runs share one process's layout and thread
            placement. Isolated, each row's memory is its own and the runs
            are independent samples. It needs the specs to pickle (no
            lambdas); False measures every row in this process, which
            starts faster.
        cpu_bfc: Switch TensorFlow's BFC allocator on for the CPU in each
            isolated row's process (`TF_CPU_ALLOCATOR_USE_BFC=true`, set
            before TensorFlow starts there), so that the row's allocator
            peak and step memory can be read on a CPU too. False keeps
            TensorFlow's default CPU allocator. Not isolated, a row reads
            the allocator only where this process's environment switched it
            on. No effect on a GPU, whose allocator is always read.
        count_launches: After the timed rounds, count what each path
            executes per step: ops (kernels on a GPU, from the profiler)
            and host reads (`tfmp.run.benchmark.launches`); the records'
            `*ops_per_step` and `*host_reads_per_step`. False leaves them
            None and saves a profiled pass and a few `fit()`s per row.
    """

    models: tuple[str, ...] = MODELS
    precisions: tuple[str, ...] = PRECISIONS
    xla: tuple[bool, ...] = (False, True)
    batch_sizes: tuple[int, ...] = ()
    resnet_input_size: int = DEFAULT_RESNET_INPUT_SIZE
    warmup_steps: int = 3
    steps: int = 20
    repeats: int = 5
    runs: int = 1
    seed: int = 0
    dataset: str = "digits"
    float32_layers: str = float32_layers.FLOAT32_LAYERS_AUTO
    tf32: bool = True
    isolate: bool = True
    cpu_bfc: bool = True
    count_launches: bool = True

    def validate(self, valid_models: Iterable[str] = MODELS) -> None:
        """Raises ValueError, naming the value, for an impossible setting."""
        canonical_models(self.models, valid_models)
        canonical_precisions(self.precisions)
        if not self.xla or not all(isinstance(x, bool) for x in self.xla):
            raise ValueError(f"xla must be a non-empty tuple of bools. Received: xla={self.xla!r}")
        for batch_size in self.batch_sizes:
            _check_integer("batch_size", batch_size, 1)
        _check_integer("resnet_input_size", self.resnet_input_size, MIN_INPUT_SIZE)
        for name in ("warmup_steps", "steps", "repeats", "runs"):
            _check_integer(name, getattr(self, name), 1)
        for name in ("tf32", "isolate", "cpu_bfc", "count_launches"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool. Received: {name}={getattr(self, name)!r}")
        if not isinstance(self.dataset, str) or self.dataset.lower() not in data_lib.DATASETS:
            raise ValueError(
                f"Unknown dataset. Valid: {', '.join(data_lib.DATASETS)}. Received: dataset={self.dataset!r}"
            )
        float32_layers.compile_pattern(self.float32_layers)


def default_specs(resnet_input_size: int = DEFAULT_RESNET_INPUT_SIZE) -> dict[str, tasks.Task]:
    """The benchmark's models, by name: the tasks training runs, at the benchmark's default batch sizes.

    * `gan`: the original tutorial's GAN (`tfmp.run.shipped.GANTask` of the default
      `GANConfig`), batch 512 by default;
    * `mobilenet_v2`: the default `ClassifierConfig`'s MobileNetV2 at
      32x32x3, 10 classes, alpha 1.0, BatchNorm momentum 0.9, cosine
      learning rate, batch 128; under bfloat16 on a CPU the depthwise
      convolutions of `tfmp.models.mobilenet_v2.cpu_bfloat16_float32_layers`
      in float32 (as training);
    * `resnet50`: `tfmp.run.shipped.resnet50_task` at `resnet_input_size`
      squared, 10 classes, batch 32.
    """
    classifier = config_lib.ClassifierConfig()
    return {
        "gan": shipped.GANTask(config_lib.GANConfig(batch_size=512)),
        "mobilenet_v2": shipped.ClassifierTask(dataclasses.replace(classifier, batch_size=128)),
        "resnet50": shipped.resnet50_task(dataclasses.replace(classifier, batch_size=32), resnet_input_size),
    }
