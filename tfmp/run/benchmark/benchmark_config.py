"""What a benchmark measures: its models, precisions and settings, checked before any work.

`BenchmarkConfig` holds the settings; `canonical_models` and
`canonical_precisions` normalise the names it holds; `default_specs` are the
models the benchmark measures by default, the tasks training runs;
`fit_to_machine` fills in the precisions and XLA settings left unset with
what a run on this machine would choose among, and says why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tfmp import float32_layers
from tfmp import precision as precision_lib
from tfmp.models.resnet50 import MIN_INPUT_SIZE
from tfmp.run import autotune, shipped, tasks
from tfmp.run import config as config_lib
from tfmp.run import data as data_lib
from tfmp.run.options import ConfigError, check_fields, option

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
    "fit_to_machine",
]

PRECISIONS = precision_lib.CONCRETE_PRECISIONS  # a benchmark names what it measures: no `auto`
MODELS = ("gan", "mobilenet_v2", "resnet50")
PIPELINE_MODELS = ("gan", "mobilenet_v2")
MODES = ("compare", "input_pipeline", "ceiling", "resident", "kernels", "max_batch")
DEFAULT_RESNET_INPUT_SIZE = 64
# The fixed counts of the modes that do not time to an interval (input_pipeline, ceiling), when none is given.
FIXED_STEPS = 20
FIXED_REPEATS = 5


def dedupe(values: Iterable[Any]) -> tuple[Any, ...]:
    """`values` in order, each once."""
    return tuple(dict.fromkeys(values))


def _canonical_names(
    kind: str, values: Sequence[str], valid: str, canonical: Callable[[Any], str | None]
) -> tuple[str, ...]:
    """`values` through `canonical`, in order, each once; a `ConfigError` about `<kind>s` naming a bad one."""
    field = f"{kind}s"
    if isinstance(values, str):  # a config holds names, not the command line's comma-separated text
        raise ConfigError("must be a tuple of names, not one string.", field, values)
    if not values:
        raise ConfigError(f"must name at least one {kind}. Valid: {valid}.", field, values)
    names = []
    for value in values:
        name = canonical(value)
        if name is None:
            raise ConfigError(f"has an unknown {kind}, {value!r}. Valid: {valid}.", field, values)
        names.append(name)
    return dedupe(names)


def canonical_models(models: Sequence[str], valid: Iterable[str] = MODELS) -> tuple[str, ...]:
    """The model names in lower case, in order, each once.

    Args:
        models: Names from `valid`, in any case.
        valid: The known names (e.g. the keys of the specs).

    Raises:
        ConfigError: for a string, an empty tuple or an unknown name, naming
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
        ConfigError: for a string, an empty tuple or an unknown name, naming
            it and the valid ones.
    """

    def canonical(name: Any) -> str | None:
        try:
            name = precision_lib.canonical_precision(name)
        except (TypeError, ValueError):
            return None
        return name if name in PRECISIONS else None

    return _canonical_names("precision", precisions, f"{', '.join(PRECISIONS)} (or fp32, bf16, fp16)", canonical)


def _precisions_or_unset(precisions: tuple[str, ...]) -> tuple[str, ...]:
    """`canonical_precisions`, with the empty tuple (unset: `fit_to_machine` decides) allowed."""
    return precisions if precisions == () else canonical_precisions(precisions)


@dataclasses.dataclass(frozen=True)
class BenchmarkConfig:
    """What to measure, and how long.

    Each field's default, help, choices and check are in its metadata
    (`tfmp.run.options.option`, as `tfmp.run.config.TrainConfig`'s);
    `scripts/benchmark.py --help` prints them. The sequences are tuples of
    values, not comma-separated text (the script parses that). `validate`
    raises `ConfigError`, naming the field and the value received.
    """

    models: tuple[str, ...] = option(
        MODELS, "Models: keys of the specs (by default gan, mobilenet_v2, resnet50), in any case."
    )
    precisions: tuple[str, ...] = option(
        (),
        f"Precisions: {', '.join(PRECISIONS)} (or fp32, bf16, fp16). Empty: those a run's precision=auto "
        "measures on this machine (float32 and the 16-bit types it computes natively).",
        check=_precisions_or_unset,
    )
    xla: tuple[bool, ...] = option(
        (), "XLA (jit_compile) settings to measure. Empty: as a run's xla=auto: on with a GPU, off on a CPU."
    )
    batch_sizes: tuple[int, ...] = option(
        (), "Batch sizes for every model. Empty: gan 512, mobilenet_v2 128, resnet50 32.", lower_bound=1
    )
    resnet_input_size: int = option(
        DEFAULT_RESNET_INPUT_SIZE,
        f"Side of ResNet-50's square input (>= {MIN_INPUT_SIZE}; ImageNet: 224).",
        lower_bound=MIN_INPUT_SIZE,
    )
    warmup_steps: int = option(
        2,
        "Untimed steps per path before timing: the first traces (and with XLA compiles), the second runs warm and "
        "sets how many steps a round takes.",
        lower_bound=1,
    )
    steps: int | None = option(
        None,
        "Timed steps per path per round. Unset: as many as last about round_seconds (at least 1); "
        f"--mode=input_pipeline and ceiling: {FIXED_STEPS}.",
        lower_bound=1,
    )
    repeats: int | None = option(
        None,
        "Timed rounds per row and run, trainer and hand-written step back to back (in alternating order); "
        "each round's two throughputs make one paired ratio. Unset: rounds until the paired ratio's 95% "
        "interval is within +-interval, or the row's time_budget is spent (at least 3 rounds); "
        f"--mode=input_pipeline and ceiling: {FIXED_REPEATS}.",
        lower_bound=1,
    )
    interval: float = option(
        0.02,
        "Without --repeats: the relative half-width of a row's 95% interval at which its timing stops "
        "(0.02: the paired ratio known to +-2%).",
        lower_bound=0.001,
        upper_bound=1.0,
    )
    time_budget: float = option(
        60.0,
        "Without --repeats: seconds of timing a row may spend before it stops short of its interval "
        "(building, tracing and warm-up come on top).",
        lower_bound=1.0,
    )
    round_seconds: float = option(
        0.5, "Without --steps: about how long each path runs in one timed round.", lower_bound=0.01
    )
    # Every row is built and timed again in each run, so one noisy stretch of the machine cannot decide a figure.
    runs: int = option(
        1,
        "Measure the whole comparison this many times, run after run; ratios are the median over the runs with "
        "their min and max (use >= 3 for a figure you quote). --mode=resident: every row once per run, in one "
        "process.",
        lower_bound=1,
    )
    seed: int = option(0, "Seed of weights, synthetic data and noise.")
    dataset: str = option(
        "digits",
        f"Real data of --mode=input_pipeline: {', '.join(data_lib.DATASETS)} (digits is embedded).",
        choices=data_lib.DATASETS,
    )
    float32_layers: str = option(
        float32_layers.FLOAT32_LAYERS_AUTO,
        "Layers computing in float32, as in training: auto (each model's advice; MobileNetV2 under bfloat16 on "
        "CPU: its depthwise convolutions), none, or a regex searched in layer paths.",
        check=float32_layers.compile_pattern,
    )
    tf32: bool = option(
        True, "Allow TensorFloat-32 for float32 matmuls/convs (Ampere+ GPUs); --notf32 measures true float32."
    )
    # TensorFlow keeps memory from every model a process has trained (tensorflow/tensorflow#62854): in one process a
    # row's peak_host_mb includes what the rows before it left resident. Isolating needs the specs to pickle.
    isolate: bool = option(
        True,
        "--mode=compare: measure each row of each run in a fresh process, so its peak_host_mb is its own "
        "(TensorFlow keeps memory from every model a process trains) and runs are independent; --noisolate runs "
        "all rows in this process.",
    )
    cpu_bfc: bool = option(
        True,
        "--mode=compare with --isolate on a CPU: switch TensorFlow's BFC allocator on in each row's process "
        "(TF_CPU_ALLOCATOR_USE_BFC=true) so the allocator's peak and step memory are read; --nocpu_bfc keeps "
        "TensorFlow's default CPU allocator (no allocator figures on a CPU). No effect on a GPU.",
    )
    count_launches: bool | None = option(
        None,
        "--mode=compare: after timing, count each path's ops executed per step (kernels on a GPU) and host reads "
        "per step, what a step costs a GPU's host: a profiled pass and a fit() of a few more steps per path. "
        "Unset: on with a GPU; off on a CPU, where a GAN step takes seconds and the count would cost about as "
        "much as the timing.",
    )
    console: str = option(
        "auto",
        "Progress on stderr: progress (one line rewritten in place: phase, step, elapsed, ETA), lines (plain "
        "lines, for logs and pipes), or auto (progress on a terminal, lines otherwise).",
        choices=config_lib.CONSOLE_MODES,
    )

    def validate(self, valid_models: Iterable[str] = MODELS) -> None:
        """Raises `ConfigError` (a `ValueError`) naming the first impossible setting and its value.

        Args:
            valid_models: The model names `models` may hold (the keys of the specs).
        """
        check_fields(self)
        canonical_models(self.models, valid_models)

    def fixed_counts(self) -> tuple[int, int]:
        """`(steps, repeats)` for the modes that time a fixed count: the given ones, else 20 and 5."""
        return self.steps or FIXED_STEPS, self.repeats or FIXED_REPEATS


def fit_to_machine(config: BenchmarkConfig, hardware: autotune.Hardware | None = None) -> tuple[BenchmarkConfig, str]:
    """`config` with its unset precisions and XLA settings chosen as a run on `hardware` would choose, and why.

    The precisions left empty become those `precision="auto"` measures there
    (`tfmp.run.autotune.candidates`: float32, and each 16-bit type the
    GPU's Tensor Cores or the CPU compute natively); the XLA settings left
    empty become `xla="auto"`'s (on with a GPU, off on a CPU, where XLA
    bypasses oneDNN). What was given is kept.

    Args:
        config: The benchmark's settings.
        hardware: The device; default `tfmp.run.autotune.detect_hardware()`.

    Returns:
        The settled config and one line saying what it measures and why.
    """
    changes: dict[str, Any] = {}
    reasons = []
    if not (config.precisions and config.xla):
        hardware = hardware or autotune.detect_hardware()
    if not config.precisions:
        changes["precisions"] = autotune.candidates(hardware)
        reasons.append(f"the precisions auto measures on {hardware.description} ({_why_precisions(hardware)})")
    if not config.xla:
        changes["xla"] = (bool(hardware.gpus),)
        reasons.append("XLA as auto sets it (" + ("on with a GPU)" if hardware.gpus else "off on a CPU)"))
    settled = dataclasses.replace(config, **changes)
    what = f"{', '.join(settled.models)} x {', '.join(canonical_precisions(settled.precisions))} x XLA " + "/".join(
        "on" if xla else "off" for xla in dedupe(settled.xla)
    )
    why = f"; {' and '.join(reasons)}" if reasons else ""
    return settled, f"measuring {what}{why}"


def _why_precisions(hardware: autotune.Hardware) -> str:
    """Why `candidates(hardware)` holds what it holds, in a few words."""
    if hardware.gpus:
        capability = hardware.compute_capability
        return (
            "bfloat16 and float16 Tensor Cores"
            if capability >= (8, 0)
            else "float16 Tensor Cores"
            if capability >= (7, 0)
            else "no Tensor Cores: float32 only"
        )
    native = [name for name, has in (("bfloat16", hardware.cpu_bfloat16), ("float16", hardware.cpu_float16)) if has]
    missing = [name for name in ("bfloat16", "float16") if name not in native]
    if not native:
        return "no 16-bit arithmetic: float32 only"
    said = f"native {' and '.join(native)}"
    return said + (f"; {missing[0]} emulated, left out" if missing else "")


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
