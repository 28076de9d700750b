"""The rows every benchmark mode runs: their order, their labels, their tasks and workloads, and their processes.

A mode measures one row per (model, batch size, XLA, precision), in that
nesting order (`plan`): `check_specs` validates the config and fits its
unset precisions and XLA settings to the machine, `build` makes a row's
workload as training builds it, and `in_fresh_process` runs a row in a
process of its own.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import multiprocessing
import os
import pickle
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from tfmp.run import task_loader, tasks
from tfmp.run.benchmark.benchmark_config import (
    BenchmarkConfig,
    canonical_models,
    canonical_precisions,
    dedupe,
    default_specs,
    fit_to_machine,
)
from tfmp.run.benchmark.progress import Progress
from tfmp.run.benchmark.workload import Workload, build_workload

__all__ = [
    "OPEN_EPOCH",
    "build",
    "check_picklable",
    "check_specs",
    "environment",
    "in_fresh_process",
    "label",
    "plan",
    "row_task",
    "unit",
]

_T = TypeVar("_T")


def check_specs(
    config: BenchmarkConfig, specs: Mapping[str, tasks.Task] | None, progress: Any = None
) -> tuple[BenchmarkConfig, Mapping[str, tasks.Task]]:
    """The config, validated, its unset precisions and XLA settings fitted to this machine (said to `progress`,
    a `Progress` or a callable taking a line), and the specs (`default_specs` when None)."""
    specs = default_specs(config.resnet_input_size) if specs is None else specs
    config.validate(valid_models=specs)
    if not (config.precisions and config.xla):
        config, plan = fit_to_machine(config)
        _say(progress, f"benchmark: {plan}")
    return config, specs


def _say(progress: Any, line: str) -> None:
    """`line` to `progress`: a `Progress`'s own line, or a call of a callable; nothing for None."""
    if isinstance(progress, Progress):
        progress.note(line)
    elif progress is not None:
        progress(line)


def plan(config: BenchmarkConfig, specs: Mapping[str, tasks.Task]) -> Iterator[tuple[tasks.Task, int, bool, str]]:
    """(spec, batch, xla, precision) in run order: precisions of a group adjacent."""
    for name in canonical_models(config.models, specs):
        spec = specs[name]
        for batch_size in dedupe(config.batch_sizes) or (spec.config.batch_size,):
            for xla in dedupe(config.xla):
                for precision in canonical_precisions(config.precisions):
                    yield spec, batch_size, xla, precision


def label(spec: tasks.Task, precision: str, xla: bool, batch_size: int) -> str:
    return f"{spec.name} {precision} xla={str(xla).lower()} batch={batch_size}"


def row_task(spec: tasks.Task, batch_size: int, config: BenchmarkConfig, **changes: Any) -> tasks.Task:
    """The model's task as one row runs it: the row's batch size and the benchmark's seed, float32 layers and TF32.

    One epoch as long as the row's steps, so that a learning-rate schedule
    runs over the measurement as it runs over a training run (a row timed to
    an interval does not know its steps ahead: its epoch is `OPEN_EPOCH` steps).
    """
    steps = config.warmup_steps + (config.steps * config.repeats if config.steps and config.repeats else OPEN_EPOCH)
    return spec.with_config(
        batch_size=batch_size,
        seed=config.seed,
        float32_layers=config.float32_layers,
        tf32=config.tf32,
        epochs=1,
        steps_per_epoch=steps,
        **changes,
    )


def build(
    spec: tasks.Task, precision: str, xla: bool, batch_size: int, config: BenchmarkConfig, hand_written: bool = True
) -> Workload:
    """The row's workload, built by the model's task as training builds it."""
    task = row_task(spec, batch_size, config)
    return build_workload(task, precision, xla, task.config.steps_per_epoch, hand_written=hand_written)


# The epoch of a row whose step count is decided while it is timed: longer than any such row runs.
OPEN_EPOCH = 10_000


def unit(spec: tasks.Task) -> str:
    """What the model's throughput counts, as printed: `img/s` or `ex/s`."""
    return f"{spec.example_unit}/s"


@contextlib.contextmanager
def environment(variables: Mapping[str, str]) -> Iterator[None]:
    """Sets environment variables for the processes started inside the block, then puts the old values back."""
    old = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in old.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def in_fresh_process(function: Callable[..., _T], *args: Any) -> _T:
    """`function(*args)` in a newly spawned Python process; its result, or its exception, comes back pickled.

    Spawned rather than forked: forking a process whose TensorFlow runtime has
    started its thread pools is unsafe. The process exits when it returns, and
    with it everything TensorFlow kept. It first imports the task files this
    process loaded by path (`tfmp.run.task_loader.imported_files`), so that a
    task defined in one unpickles there.
    """
    context = multiprocessing.get_context("spawn")
    files = task_loader.imported_files()
    with concurrent.futures.ProcessPoolExecutor(
        max_workers=1, mp_context=context, initializer=task_loader.import_files, initargs=(files,)
    ) as pool:
        return pool.submit(function, *args).result()


def check_picklable(specs: Mapping[str, tasks.Task], names: tuple[str, ...]) -> None:
    """Raises ValueError, naming the task, if a row's task cannot be sent to a fresh process."""
    for name in names:
        try:
            pickle.dumps(specs[name])
        except (pickle.PicklingError, AttributeError, TypeError) as e:
            raise ValueError(
                f"isolate=True measures each row in a fresh process, so the model's task must pickle, and "
                f"{name!r}'s does not ({e}). Build it from module-level functions instead of lambdas or "
                f"local functions, or pass isolate=False (--isolate=false). Received: {specs[name]!r}"
            ) from None
