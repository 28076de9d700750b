"""The benchmark's `max_batch` mode: the largest batch whose training step fits a memory budget, per precision.

Each trial trains a few steps of the model's task at one batch size in a
fresh process whose allocator is capped at the budget: on a CPU TensorFlow's
BFC allocator with `TF_CPU_BFC_MEM_LIMIT_IN_MB`, on a GPU a logical device
memory limit. An out-of-memory error, a crash (TensorFlow's CPU allocator
can end the process with a segmentation fault, exit 139, instead of raising)
or a trial past its time limit counts as "does not fit"; the process is
killed and waited for, so none is left behind.

The search: two probe batches give a linear estimate of the peak against the
batch size (at most 8 times the larger probe: a line through two small
batches is no guide much further out), the estimate is tried, the batch then
doubles until a trial does not fit or halves until one does, and bisection
closes the gap until the batch that does not fit is within `MaxBatchSettings.resolution`
of the one that does. The answer holds by construction: `batch_size` fitted,
and `next_tried`, the smallest batch tried above it, did not.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import multiprocessing
import multiprocessing.connection
import signal
import threading
import time
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import keras
import tensorflow as tf

from tfmp import precision as precision_lib
from tfmp.run import tasks
from tfmp.run.benchmark import rows
from tfmp.run.benchmark.benchmark_config import BenchmarkConfig
from tfmp.run.benchmark.drivers import trainer_driver
from tfmp.run.memory_meters import AllocatorMemory, cpu_bfc_environment
from tfmp.run.options import ConfigError, check_fields, option

__all__ = ["MaxBatchRecord", "MaxBatchSettings", "Trial", "max_batch", "run_trial", "train_at_batch"]

_GROWTH = 2
_FURTHEST_ESTIMATE = 8  # times the larger probe


def _at_least_one_mib(budget_mb: float | None) -> None:
    if budget_mb is not None and not budget_mb >= 1:  # NaN too
        raise ConfigError("must be at least 1 MiB.")


def _a_fraction(resolution: float) -> None:
    if not 0 < resolution < 1:
        raise ConfigError("must be in (0, 1).")


def _positive_seconds(timeout: float) -> None:
    if not timeout > 0:
        raise ConfigError("must be positive seconds.")


@dataclasses.dataclass(frozen=True)
class MaxBatchSettings:
    """How the largest-batch search runs.

    Each field's default, help and check are in its metadata
    (`tfmp.run.options.option`, as `BenchmarkConfig`'s). `validate` raises
    `ConfigError`, naming the field and the value received.
    """

    budget_mb: float | None = option(
        None,
        "The allocator's budget in MiB (at least 1); None on a GPU: the device's memory (no logical limit is "
        "set). Required on a CPU.",
        check=_at_least_one_mib,
    )
    resolution: float = option(
        0.05,
        "The search stops once the smallest batch that did not fit is at most max(1, resolution * batch_size) "
        "above the largest that did (0.05: within 5%); in (0, 1).",
        check=_a_fraction,
    )
    warmup_steps: int = option(
        2,
        "Steps each trial trains before its measured steps (the first is a one-step fit(), which traces).",
        lower_bound=1,
    )
    steps: int = option(2, "Measured steps per trial, whose allocator peak is reported.", lower_bound=1)
    timeout: float = option(
        900.0, "Seconds a trial may take before it is killed and counted as not fitting.", check=_positive_seconds
    )
    max_trials: int = option(16, "Trials per precision at most, probes included.", lower_bound=3)

    def validate(self, has_gpu: bool) -> None:
        """Raises `ConfigError` (a `ValueError`) naming the first impossible setting and its value.

        Args:
            has_gpu: Whether a GPU is visible, whose memory is the default budget.
        """
        check_fields(self)
        if self.budget_mb is None and not has_gpu:
            raise ConfigError(
                "cannot be None on a CPU, which has no device memory to default to: give a memory budget, e.g. "
                "memory_budget='2GiB' (--memory_budget=2GiB).",
                "budget_mb",
                None,
            )


@dataclasses.dataclass
class Trial:
    """One trial's outcome.

    Attributes:
        batch_size: The batch tried.
        fits: Whether its training steps ran under the budget.
        peak_mb: The allocator's peak over the measured steps (MiB); None
            when it did not fit.
        step_mb: That peak minus what was allocated before the steps.
        why_not: Why it did not fit (`"out of memory"`, `"crashed (exit
            139)"`, `"timed out after 900 s"`); None when it fitted.
        allocator: The allocator read (`"CPU:0 BFC"`, `"GPU:0"`).
    """

    batch_size: int
    fits: bool
    peak_mb: float | None = None
    step_mb: float | None = None
    why_not: str | None = None
    allocator: str | None = None


@dataclasses.dataclass
class MaxBatchRecord:
    """One row of the `max_batch` mode: the largest batch that fits, for one model, precision and XLA setting.

    Attributes:
        model: The model's name.
        precision: The precision.
        xla: Whether the step was compiled with XLA.
        budget_mb: The allocator's budget (MiB); None: the GPU's memory.
        allocator: The allocator capped and read (`"CPU:0 BFC"`, `"GPU:0"`).
        batch_size: The largest batch whose trial fitted.
        peak_mb: That trial's allocator peak (MiB).
        step_mb: That peak minus what was allocated before the steps (MiB).
        next_tried: The smallest batch tried above `batch_size`, which did
            not fit; None when the search ran out of trials before one failed.
        why_not: Why `next_tried` did not fit.
        estimate: The linear estimate from the two probes (at most 8 times
            the larger), None when the peak did not grow between them.
        trials: How many trials the search ran.
        ratio_to_float32: `batch_size` over the float32 row's (same model
            and XLA setting); None without one.
    """

    model: str
    precision: str
    xla: bool
    budget_mb: float | None
    allocator: str | None
    batch_size: int
    peak_mb: float | None
    step_mb: float | None
    next_tried: int | None
    why_not: str | None
    estimate: int | None
    trials: int
    ratio_to_float32: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON-ready dict, one key per attribute."""
        return dataclasses.asdict(self)


def _is_out_of_memory(error: BaseException) -> bool:
    text = str(error).lower()
    return isinstance(error, tf.errors.ResourceExhaustedError) or "out of memory" in text or "oom " in text


def train_at_batch(
    spec: tasks.Task,
    precision: str,
    xla: bool,
    batch_size: int,
    config: BenchmarkConfig,
    settings: MaxBatchSettings,
) -> Trial:
    """Trains `spec` a few steps at `batch_size` in this process; its allocator's peak over the measured steps.

    Meant for a fresh process whose allocator is capped at the budget (as
    `max_batch` runs it): on a GPU it sets the logical device memory limit
    to `settings.budget_mb` first, so it must run before any TensorFlow op.

    Returns:
        A `Trial` that fits, or one that does not with `why_not="out of
        memory"` when TensorFlow raised an out-of-memory error.

    Raises:
        RuntimeError: where no allocator can be read (a CPU without the BFC
            allocator), or the task's batch is smaller than `batch_size`.
    """
    gpus = tf.config.list_physical_devices("GPU")
    if gpus and settings.budget_mb is not None:
        tf.config.set_logical_device_configuration(
            gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=int(settings.budget_mb))]
        )
    allocator = AllocatorMemory.of_this_process()
    if allocator is None:
        raise RuntimeError(
            "No allocator to read: on a CPU the trial needs TF_CPU_ALLOCATOR_USE_BFC=true before TensorFlow "
            "starts (max_batch sets it in each trial's process)."
        )
    try:
        with precision_lib.precision_scope(precision), precision_lib.tf32_scope(config.tf32):
            keras.utils.set_random_seed(config.seed)
            workload = rows.build(spec, precision, xla, batch_size, config, hand_written=False)
            got = int(tf.nest.flatten(workload.batch)[0].shape[0])
            if got != batch_size:
                raise RuntimeError(
                    f"{spec.name}'s batch holds {got} examples, not {batch_size}: its data is too small to try "
                    f"that batch size. Received: batch_size={batch_size}"
                )
            dataset = tf.data.Dataset.from_tensors(workload.batch).repeat()
            driver = trainer_driver(
                workload, dataset, (batch_size,), settings.warmup_steps, first_fit=True, allocator=allocator
            )
            driver.timed(settings.steps)
    except Exception as e:  # an out-of-memory error can surface wrapped in another type
        if _is_out_of_memory(e):
            return Trial(batch_size, False, why_not="out of memory", allocator=allocator.name)
        raise
    return Trial(batch_size, True, driver.peak_mb, driver.step_mb, allocator=allocator.name)


def _child(connection: multiprocessing.connection.Connection, function: Callable[..., Any], args: tuple) -> None:
    """Runs `function(*args)` and sends back `("ok", result)` or `("error", text)`."""
    try:
        connection.send(("ok", function(*args)))
    except BaseException as e:  # noqa: BLE001 - anything raised is reported to the parent
        connection.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        connection.close()


def run_trial(
    function: Callable[..., Trial], args: tuple, batch_size: int, environment: Mapping[str, str], timeout: float
) -> Trial:
    """`function(*args)` in a fresh spawned process with `environment` added; a crash or timeout does not fit.

    The process is killed on timeout and always waited for. A SIGTERM to
    this process (from the main thread's point of view) or a Ctrl-C kills
    the trial's process too before it ends this one: no trial outlives its
    search.

    Args:
        function: A module-level function returning a `Trial`.
        args: Its arguments (they must pickle).
        batch_size: The batch tried, for the `Trial` of a process that died.
        environment: Variables set in the process before it starts (e.g.
            `cpu_bfc_environment(budget)`).
        timeout: Seconds before the process is killed.

    Returns:
        The function's `Trial`; or one that does not fit, `why_not` saying
        `crashed (exit N)` or `timed out after T s`.

    Raises:
        RuntimeError: when the function raised, with its error's text.
    """
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(sender, function, args), daemon=True)
    with rows.environment(environment):
        process.start()
    sender.close()
    try:
        with _sigterm_raises():
            return _result(process, receiver, batch_size, timeout)
    except BaseException:  # SIGTERM, Ctrl-C: the trial goes with this process
        process.kill()
        raise
    finally:
        receiver.close()
        process.join(60)  # it exits once it has sent its result
        if process.is_alive():
            process.kill()
            process.join()


def _result(
    process: multiprocessing.process.BaseProcess,
    receiver: multiprocessing.connection.Connection,
    batch_size: int,
    timeout: float,
) -> Trial:
    """The `Trial` a started trial's process sends, or the one of a process that timed out or died."""
    ready = multiprocessing.connection.wait([receiver, process.sentinel], timeout)
    if not ready:
        process.kill()
        return Trial(batch_size, False, why_not=f"timed out after {timeout:.0f} s")
    try:
        kind, value = receiver.recv()
    except EOFError:  # it died without a word
        process.join()
        code = process.exitcode
        code = 128 - code if code is not None and code < 0 else code  # signal N as the shell says it
        return Trial(batch_size, False, why_not=f"crashed (exit {code})")
    if kind == "error":
        raise RuntimeError(f"The trial at batch {batch_size} failed: {value}")
    return value


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """SIGTERM raises `SystemExit(143)` in the main thread while inside, so `finally` blocks run."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: types.FrameType | None) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _search(
    try_batch: Callable[[int], Trial], probes: tuple[int, int], budget_mb: float | None, settings: MaxBatchSettings
) -> tuple[Trial | None, Trial | None, int | None, int]:
    """(largest fitting trial, smallest non-fitting trial above it, linear estimate, trials run)."""
    trials: dict[int, Trial] = {}

    def attempt(batch: int) -> Trial:
        if batch not in trials:
            trials[batch] = try_batch(batch)
        return trials[batch]

    def best() -> tuple[Trial | None, Trial | None]:
        fit = max((t for t in trials.values() if t.fits), key=lambda t: t.batch_size, default=None)
        above = [t for t in trials.values() if not t.fits and (fit is None or t.batch_size > fit.batch_size)]
        return fit, min(above, key=lambda t: t.batch_size, default=None)

    estimate = None
    first, second = attempt(probes[0]), None
    if first.fits:
        second = attempt(probes[1])
    if first.fits and second.fits and budget_mb is not None:
        slope = (second.peak_mb - first.peak_mb) / (probes[1] - probes[0])
        if slope > 0:
            estimate = int((budget_mb - (first.peak_mb - slope * probes[0])) / slope)
            estimate = min(estimate, _FURTHEST_ESTIMATE * probes[1])
            if estimate > probes[1]:
                attempt(estimate)
    while len(trials) < settings.max_trials:
        fit, fail = best()
        if fit is None:  # nothing fits yet: halve below the smallest failure
            if fail.batch_size == 1:
                break
            attempt(max(1, fail.batch_size // 2))
        elif fail is None:  # nothing failed above: grow
            attempt(max(fit.batch_size + 1, math.ceil(fit.batch_size * _GROWTH)))
        elif fail.batch_size - fit.batch_size <= max(1, settings.resolution * fit.batch_size):
            break
        else:
            attempt((fit.batch_size + fail.batch_size) // 2)
    fit, fail = best()
    return fit, fail, estimate, len(trials)


def max_batch(
    config: BenchmarkConfig,
    specs: Mapping[str, tasks.Task] | None = None,
    progress: Callable[[str], None] | None = None,
    settings: MaxBatchSettings | None = None,
    trial: Callable[..., Trial] = train_at_batch,
) -> list[MaxBatchRecord]:
    """Finds, per model, XLA setting and precision, the largest batch whose training step fits the budget.

    Each trial is `trial(spec, precision, xla, batch_size, config,
    settings)` in a fresh process (`run_trial`): on a CPU with the BFC
    allocator capped at `settings.budget_mb` (`TF_CPU_BFC_MEM_LIMIT_IN_MB`),
    on a GPU with a logical device memory limit. The probes are a quarter
    and half of the model's default batch size (`config.batch_sizes[0]`
    when given, for every model). The module's docstring describes the
    search.

    Args:
        config: The models, precisions, XLA settings, seed and float32
            layers; validated first.
        specs: The models' tasks by name (they must pickle);
            `default_specs(config.resnet_input_size)` when None.
        progress: Called with one line per trial; silent when None.
        settings: The budget and how finely to search; validated first.
            None: `MaxBatchSettings()`, the GPU's memory (a CPU needs a
            budget).
        trial: The function each trial's process runs; `train_at_batch`.

    Returns:
        One `MaxBatchRecord` per (model, XLA, precision), in run order.

    Raises:
        ValueError: for an invalid config or settings, naming the value
            (`ConfigError` for the settings).
        RuntimeError: when nothing fits, not even batch 1, naming the row;
            or when a trial fails for another reason than memory.
    """
    settings = MaxBatchSettings() if settings is None else settings
    has_gpu = bool(tf.config.list_physical_devices("GPU"))
    settings.validate(has_gpu)
    config, specs = rows.check_specs(config, specs)
    environment = {} if has_gpu else cpu_bfc_environment(settings.budget_mb)
    records = []
    for spec, batch_size, xla, precision in rows.plan(
        dataclasses.replace(config, batch_sizes=config.batch_sizes[:1]), specs
    ):
        probe = max(1, batch_size // 4)

        def try_batch(batch: int, spec=spec, xla=xla, precision=precision) -> Trial:
            start = time.perf_counter()
            result = run_trial(
                trial, (spec, precision, xla, batch, config, settings), batch, environment, settings.timeout
            )
            if progress is not None:
                outcome = (
                    f"fits, peak {result.peak_mb:.0f} MiB, step {result.step_mb:.0f} MiB"
                    if result.fits
                    else f"does not fit: {result.why_not}"
                )
                progress(f"{rows.label(spec, precision, xla, batch)}: {outcome}, {time.perf_counter() - start:.0f} s")
            return result

        fit, fail, estimate, count = _search(try_batch, (probe, 2 * probe), settings.budget_mb, settings)
        if fit is None:
            raise RuntimeError(
                f"Nothing fits the budget of {settings.budget_mb} MiB for {spec.name} {precision} xla={xla}, "
                f"not even batch {fail.batch_size} ({fail.why_not}): give a larger --memory_budget."
            )
        records.append(
            MaxBatchRecord(
                model=spec.name,
                precision=precision,
                xla=xla,
                budget_mb=settings.budget_mb,
                allocator=fit.allocator,
                batch_size=fit.batch_size,
                peak_mb=fit.peak_mb,
                step_mb=fit.step_mb,
                next_tried=None if fail is None else fail.batch_size,
                why_not=None if fail is None else fail.why_not,
                estimate=estimate,
                trials=count,
            )
        )
    float32 = {(r.model, r.xla): r.batch_size for r in records if r.precision == "float32"}
    for record in records:
        if (record.model, record.xla) in float32:
            record.ratio_to_float32 = record.batch_size / float32[(record.model, record.xla)]
    return records
