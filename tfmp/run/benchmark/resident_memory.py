"""The benchmark's `resident` mode: the memory each row leaves behind in a process that measures rows one after another.

TensorFlow keeps memory of every model a process has trained, even after
`keras.backend.clear_session()`, `gc.collect()` and `malloc_trim`
(tensorflow/tensorflow#62854). That is why `compare` measures each row in a
process of its own (`BenchmarkConfig.isolate`). This mode measures the leak
instead of avoiding it: it runs the `compare` rows in this process, in
order, and after each one reads what the process still holds, so a new
TensorFlow release can be checked for it (and `isolate` reconsidered) with
one command.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import time
from collections.abc import Callable, Mapping

import keras

from tfmp.run import tasks
from tfmp.run.benchmark import rows
from tfmp.run.benchmark.benchmark_config import BenchmarkConfig
from tfmp.run.benchmark.compare_mode import measure_row
from tfmp.run.benchmark.records import ResidentRecord
from tfmp.run.memory_meters import resident_mb

__all__ = ["resident"]


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, which returns the heap's free pages to the system; None without glibc."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


def _release() -> float:
    """Gives back all the process can, then reads its RSS (MiB).

    Python's garbage, Keras's global state (`clear_session` resets the dtype
    policy too, so the caller's is put back), and glibc's free heap pages.
    """
    policy = keras.config.dtype_policy()
    keras.backend.clear_session(free_memory=True)
    keras.config.set_dtype_policy(policy)
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
    return resident_mb()


def resident(
    config: BenchmarkConfig,
    specs: Mapping[str, tasks.Task] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[ResidentRecord]:
    """Measures the `compare` rows one after another in this process, and the memory each leaves behind.

    Each row is built, warmed up and timed exactly as a `compare` row with
    `isolate=False`, in the same order (model, batch size, XLA, precision),
    and with `config.runs` > 1 all rows again in each run. After each row
    the process's RSS is read twice: once Python has collected the row's
    objects (`resident_mb`), and once Keras's global state and glibc's free
    heap pages are released too (`retained_mb`), the first such reading
    taken before the first row. `config.isolate` does not apply: the point
    is one process.

    It calls `keras.backend.clear_session()` between rows, which resets
    Keras's global state (layer-name counters, the global seed; the dtype
    policy is kept): run it in a process of its own, as `tfmp-benchmark`
    does.

    Args:
        config: What to measure; validated first.
        specs: The models' `tfmp.run.tasks.Task`s by name;
            `default_specs(config.resnet_input_size)` when None.
        progress: Called with one line per measured row and run; silent
            when None.

    Returns:
        One `ResidentRecord` per row and run, in the order measured.

    Raises:
        ValueError: for an invalid config, before any work, naming the value.
        RuntimeError: without `/proc/self/status` (Linux), where the RSS is
            read, before any work.
    """
    config, specs = rows.check_specs(config, specs, progress)
    if resident_mb() is None:
        raise RuntimeError("The resident mode reads the RSS from /proc/self/status, which this system does not have.")
    plan = list(rows.plan(config, specs))
    records = []
    retained = _release()
    for run in range(1, config.runs + 1):
        for spec, batch_size, xla, precision in plan:
            start = time.perf_counter()
            row = measure_row(spec, precision, xla, batch_size, config)
            gc.collect()
            after_row = resident_mb()
            before, retained = retained, _release()
            record = ResidentRecord(
                model=spec.name,
                precision=precision,
                xla=xla,
                batch_size=batch_size,
                run=run,
                peak_host_mb=row.peak_host_mb,
                resident_mb=after_row,
                retained_mb=retained,
                left_behind_mb=retained - before,
            )
            records.append(record)
            if progress is not None:
                of = f" (run {run}/{config.runs})" if config.runs > 1 else ""
                progress(
                    f"{rows.label(spec, precision, xla, batch_size)}{of}: peak RSS {record.peak_host_mb:.0f} MB, "
                    f"{record.resident_mb:.0f} MB resident after it, {record.retained_mb:.0f} MB retained "
                    f"({record.left_behind_mb:+.0f} MB), {time.perf_counter() - start:.0f} s"
                )
    return records
