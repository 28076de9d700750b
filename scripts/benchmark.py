r"""Benchmarks tfmp's trainers per precision, against float32 and a hand-written step.

    python3 scripts/benchmark.py --models=gan --json_out=/tmp/bench.json
    python3 scripts/benchmark.py --models=gan,mobilenet_v2,resnet50 \
        --precisions=float32,mixed_bfloat16 --xla=false --steps=10 --repeats=3 \
        --json_out=/tmp/bench.json --plot_out=/tmp/bench.png
    python3 scripts/benchmark.py --task=my_tasks:TASK --precisions=fp32,bf16 --xla=false
    python3 scripts/benchmark.py --mode=input_pipeline --precisions=bf16 --xla=false
    python3 scripts/benchmark.py --mode=ceiling --models=gan --precisions=fp32,bf16
    python3 scripts/benchmark.py --mode=resident --models=mobilenet_v2 --precisions=fp32,bf16 --xla=false --runs=2
    python3 scripts/benchmark.py --mode=max_batch --models=mobilenet_v2 --precisions=fp32,bf16 --xla=false \
        --memory_budget=2GiB

With no flags it measures the three models in the precisions a run's
`--precision=auto` would choose among on this machine, with XLA as
`--xla=auto` sets it, each row timed until its paired ratio is known to +-2%
or its time budget is spent; the first line says what was chosen and why.
Prints a markdown table (one row per model, precision, XLA setting and batch
size) to stdout and its progress to stderr: on a terminal one line per row
rewritten in place (phase, step, elapsed, ETA), piped plain lines
(`--console`), and after each row an estimate of the rest. The method is in
docs/guides/benchmark-methodology.md (the code in `tfmp/run/benchmark/`), the
table, JSON and PNG come from `tfmp/run/reporting.py`.
The flags are `benchmark.BenchmarkConfig`'s fields, with their help; the
comma-separated ones are parsed here (`parse_models`, ...) into the tuples
the config holds.
"""

import dataclasses
import functools
import json
import os
import sys
from collections.abc import Iterable
from typing import Any

from absl import app, flags

# common first: importing it imports TensorFlow quietly.
try:  # installed: the tfmp_scripts package; run from a checkout: this folder
    from tfmp_scripts import common
except ImportError:  # pragma: no cover
    import common

import tfmp
from tfmp import precision as precision_lib
from tfmp.run import benchmark, memory_meters, reporting, tasks
from tfmp.run import data as data_lib
from tfmp.run.benchmark import kernel_ceiling
from tfmp.run.callbacks import console

_DEFAULTS = benchmark.BenchmarkConfig()
_MODE = flags.DEFINE_enum(
    "mode",
    "compare",
    list(benchmark.MODES),
    "compare: the trainer per precision, against float32 and a hand-written step; "
    "input_pipeline: the trainer fed by the real tf.data pipeline against in-memory tensors; "
    "ceiling: each model's step profiled in float32 and 16 bits, the speed-up its kernels allow against the "
    "measured one, the same with bfloat16's slow ops in float32 (the routed ceiling), and the ops that do not "
    "speed up; "
    "resident: the compare rows one after another in this process, each row's peak RSS and the memory it "
    "leaves behind (what TensorFlow keeps of every model a process trains, the reason for --isolate); "
    "kernels: this CPU's float32, bfloat16 and float16 kernels (matmul, convolution and depthwise "
    "convolution, forward and gradients, the elementwise ops and random draw bfloat16 may compute in float32, "
    "and the casts) timed against each other, in seconds (also printed by ceiling); "
    "max_batch: per model and precision the largest batch whose training step fits --memory_budget, each "
    "trial in a fresh process with its allocator capped (a crash or out-of-memory error: does not fit).",
)
_MODELS = flags.DEFINE_list(
    "models",
    [],
    f"Models, from {', '.join(benchmark.MODELS)} and the --task names. Empty: the --task models if any, else "
    f"all three for compare and {', '.join(benchmark.PIPELINE_MODELS)} for the other modes.",
)
_TASKS = flags.DEFINE_multi_string(
    "task",
    [],
    "A model of your own, MODULE:NAME (a module on the Python path, or path/to/file.py:NAME) of a "
    "tfmp.run.tasks.Task; measured on the first batch of its own data. Repeat for several.",
)
_HELP = {field.name: field.metadata["help"] for field in dataclasses.fields(benchmark.BenchmarkConfig)}
_PRECISIONS = flags.DEFINE_list("precisions", list(_DEFAULTS.precisions), _HELP["precisions"])
_XLA = flags.DEFINE_list(
    "xla",
    [],
    "XLA settings to measure: false, true, auto (on with a GPU). Empty: as a run's --xla=auto sets it.",
)
_BATCH_SIZES = flags.DEFINE_list("batch_sizes", [], _HELP["batch_sizes"])
# The other settings: one flag per field, its help, bounds and choices the field's (as the training scripts').
_SETTINGS = common.define_flags(_DEFAULTS, exclude=("models", "precisions", "xla", "batch_sizes"))
flags.adopt_module_key_flags(common)  # --help lists the flags define_flags made there too
_MEMORY_BUDGET = flags.DEFINE_string(
    "memory_budget",
    None,
    "--mode=max_batch: the allocator's budget, a number and a unit (2GiB, 512MiB, 1.5GB). Required on a CPU "
    "(TF_CPU_BFC_MEM_LIMIT_IN_MB in each trial); on a GPU the device's memory when not given.",
)
_JSON_OUT = flags.DEFINE_string("json_out", None, "Write the records to this JSON file.")
_PLOT_OUT = flags.DEFINE_string(
    "plot_out",
    None,
    "Write a PNG bar chart here (--mode=compare; needs matplotlib: pip install -e '.[plot]' in the clone).",
)


def _split(values: str | Iterable[str]) -> list[str]:
    if isinstance(values, str):
        values = values.split(",")
    return [v.strip() for v in values if v.strip()]


def _dedupe(values: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(dict.fromkeys(values))


def parse_models(values: str | Iterable[str], valid: Iterable[str] = benchmark.MODELS) -> tuple[str, ...]:
    """Parses model names (a comma-separated string or a list) with `benchmark.canonical_models`.

    Raises:
        ValueError: for an empty list or an unknown name, naming it and the
            valid ones.
    """
    valid = tuple(valid)
    names = _split(values)
    if not names:
        raise ValueError(f"No model given. Valid: {', '.join(valid)}. Received: models={values!r}")
    return benchmark.canonical_models(names, valid)


def parse_precisions(values: str | Iterable[str]) -> tuple[str, ...]:
    """Parses precisions with `benchmark.canonical_precisions`, accepting the aliases `fp32`, `bf16`, `fp16`.

    `auto` is refused: a benchmark names what it measures. None given: `()`,
    which `benchmark.fit_to_machine` fills with what a run here would choose among.

    Raises:
        ValueError: for an unknown name, naming it.
    """
    names = _split(values)
    return benchmark.canonical_precisions(names) if names else ()


def parse_xla(values: str | Iterable[str | bool]) -> tuple[bool, ...]:
    """Parses XLA settings (`true`, `false`, `auto`: on with a GPU) into bools.

    None given: `()`, which `benchmark.fit_to_machine` fills as `auto` would.

    Raises:
        ValueError: for an unknown setting, naming it.
    """
    items = values.split(",") if isinstance(values, str) else list(values)
    items = [v.strip() if isinstance(v, str) else v for v in items]
    items = [v for v in items if v != ""]
    out = []
    for item in items:
        try:
            out.append(precision_lib.resolve_jit_compile(item))
        except ValueError:
            raise ValueError(f"Unknown XLA setting. Valid: false, true, auto. Received: xla={item!r}") from None
    return _dedupe(out)


def parse_batch_sizes(values: str | Iterable[str | int]) -> tuple[int, ...]:
    """Parses batch sizes; an empty list means each model's default.

    Raises:
        ValueError: for a value that is not an integer >= 1, naming it.
    """
    items = _split(values) if isinstance(values, str) else list(values)
    out = []
    for item in items:
        try:
            size = int(item) if not isinstance(item, bool) else None
        except (TypeError, ValueError):
            size = None
        if size is None or size < 1 or str(item).strip() not in (str(size), f"+{size}"):
            raise ValueError(f"Batch sizes must be integers >= 1. Received: batch_size={item!r}")
        out.append(size)
    return _dedupe(out)


def _specs() -> dict[str, tasks.Task]:
    """The benchmark's models by name: the shipped ones and the --task ones (a bad --task is a usage error)."""
    specs = dict(benchmark.default_specs(_SETTINGS["resnet_input_size"].value))
    for spec in _TASKS.value:
        task = common.load_task(spec, {})
        specs[task.name] = task
    return specs


def _config(specs: dict[str, tasks.Task]) -> benchmark.BenchmarkConfig:
    """The config from the flags; a bad value is a usage error naming it."""
    shipped = benchmark.MODELS if _MODE.value == "compare" else benchmark.PIPELINE_MODELS
    given = [name for name in specs if name not in benchmark.MODELS]
    models = _MODELS.value or given or list(shipped)
    try:
        config = benchmark.BenchmarkConfig(
            models=parse_models(models, specs),
            precisions=parse_precisions(_PRECISIONS.value),
            xla=parse_xla(_XLA.value),
            batch_sizes=parse_batch_sizes(_BATCH_SIZES.value),
            **{name: holder.value for name, holder in _SETTINGS.items()},
        )
        config.validate(specs)
        config, plan = benchmark.fit_to_machine(config)
        if _MODE.value == "ceiling":
            kernel_ceiling.sixteen_bit_precisions(config.precisions)
    except ValueError as e:
        raise app.UsageError(common.in_flag_terms(e)) from None
    print(f"benchmark: {plan}", file=sys.stderr, flush=True)
    return config


def _max_batch_settings() -> benchmark.MaxBatchSettings:
    """The largest-batch search's settings from the flags; a bad budget is a usage error naming it."""
    try:
        budget = None if _MEMORY_BUDGET.value is None else memory_meters.parse_memory_size(_MEMORY_BUDGET.value)
        settings = benchmark.MaxBatchSettings(budget_mb=budget)
        settings.validate(has_gpu=bool(precision_lib.visible_gpus()))
    except ValueError as e:
        raise app.UsageError(f"--memory_budget: {e}") from None
    return settings


def _check_output(flag: str, path: str | None) -> None:
    if path is None:
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory) or not os.access(directory, os.W_OK):
        raise app.UsageError(f"--{flag} must be in a writable directory. Received: --{flag}={path}")


def _kernels() -> None:
    """`--mode=kernels`: this CPU's 16-bit kernels against float32's, measured now."""
    times = tfmp.cpu_kernels.measure_kernels()
    print(times.report())
    if _JSON_OUT.value:
        with open(_JSON_OUT.value, "w", encoding="utf-8") as f:
            json.dump(times.to_json(), f, indent=1)
        print(f"wrote {_JSON_OUT.value}", file=sys.stderr, flush=True)


def main(argv):
    common.check_no_arguments(argv)
    if _MODE.value == "kernels":
        _check_output("json_out", _JSON_OUT.value)
        _kernels()
        return
    specs = _specs()
    config = _config(specs)
    _check_output("json_out", _JSON_OUT.value)
    _check_output("plot_out", _PLOT_OUT.value)
    settings = _max_batch_settings() if _MODE.value == "max_batch" else None
    if _MODE.value != "max_batch" and _MEMORY_BUDGET.value is not None:
        raise app.UsageError(f"--memory_budget is only for --mode=max_batch. Received: --mode={_MODE.value}")
    if _PLOT_OUT.value is not None:
        if _MODE.value != "compare":
            raise app.UsageError(f"--plot_out is only for --mode=compare. Received: --mode={_MODE.value}")
        try:  # checked now, not after the measurements
            reporting.require_matplotlib()
        except ImportError as e:
            sys.exit(f"error: {e}")

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    live = benchmark.Progress(console.console_mode(config.console, sys.stderr))

    measure = {
        "compare": functools.partial(benchmark.compare, progress=live),
        "input_pipeline": functools.partial(benchmark.input_pipeline, progress=progress),
        "ceiling": functools.partial(benchmark.ceiling, progress=progress),
        "resident": functools.partial(benchmark.resident, progress=progress),
        "max_batch": functools.partial(benchmark.max_batch, settings=settings, progress=progress),
    }[_MODE.value]
    try:
        records = measure(config, specs)
    except data_lib.DatasetNotFoundError as e:
        sys.exit(f"error: {common.in_flag_terms(e)}")
    print(reporting.markdown_table(records))
    for record in records:
        if isinstance(record, benchmark.CeilingRecord):
            print("\n" + record.op_table())
    if _MODE.value == "ceiling" and not precision_lib.visible_gpus():
        print("\n" + tfmp.cpu_kernels.measure_kernels().report())
    if _JSON_OUT.value:
        reporting.write_json(records, _JSON_OUT.value)
        progress(f"wrote {_JSON_OUT.value}")
    if _PLOT_OUT.value:
        reporting.plot(records, _PLOT_OUT.value, config)
        progress(f"wrote {_PLOT_OUT.value}")


run = common.entry_point(main, __name__)  # the console command `tfmp-benchmark`


if __name__ == "__main__":
    run()
