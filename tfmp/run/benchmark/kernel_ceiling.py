"""The benchmark's `ceiling` mode: the whole-step speed-up a 16-bit precision's kernels allow, and what holds it back.

For each model, the trainer's step is profiled with the TensorFlow profiler
in float32 and in each 16-bit precision: every op's time is summed by op type
(`op_times`). The kernel ceiling is the float32 step's kernel time over the
16-bit step's, the speed-up the step would reach if it were nothing but its
kernels, each running at its own measured 16-bit speed; the measured ratio
(wall-clock steps, timed without the profiler) is set against it. The op
types that do not speed up, and those only the 16-bit step runs (casts), are
listed by the time they cost. docs/guides/benchmark-methodology.md,
"Kernel ceiling", says how to read it.
"""

from __future__ import annotations

import collections
import dataclasses
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

import keras
import tensorflow as tf

from tfmp import precision as precision_lib
from tfmp.run import _private_apis, tasks
from tfmp.run.benchmark import launches, rows
from tfmp.run.benchmark.benchmark_config import BenchmarkConfig, canonical_models, canonical_precisions, dedupe
from tfmp.run.benchmark.drivers import trainer_driver

__all__ = ["CeilingRecord", "OpTime", "ceiling", "op_times", "op_times_from_xspace", "sixteen_bit_precisions"]

# An op type is "not speeding up" below this float32 / 16-bit time ratio.
SLOW_SPEEDUP = 1.1
# Op types under this share of the 16-bit kernel time are left out of the list.
_MIN_SHARE = 0.01


@dataclasses.dataclass(frozen=True)
class OpTime:
    """One op type's kernel time per step in float32 and in the 16-bit precision (ms; 0 where it does not run)."""

    op_type: str
    float32_ms: float
    ms: float

    @property
    def speedup(self) -> float | None:
        """float32 time over 16-bit time; None for an op only one of them runs."""
        return self.float32_ms / self.ms if self.ms and self.float32_ms else None

    def describe(self) -> str:
        if not self.float32_ms:
            return f"{self.op_type} {self.ms:.1f} ms (16-bit only)"
        return f"{self.op_type} {self.float32_ms:.1f} -> {self.ms:.1f} ms ({self.speedup:.2f}x)"


@dataclasses.dataclass
class CeilingRecord:
    """One row of the `ceiling` mode: a model's 16-bit step against its float32 step.

    Attributes:
        model: The model's name.
        precision: The 16-bit precision (`mixed_bfloat16` or `mixed_float16`).
        batch_size: Examples per batch.
        step_ms_float32: The float32 step's wall-clock time (median over
            rounds, without the profiler).
        step_ms: The 16-bit step's wall-clock time.
        measured_ratio: `step_ms_float32 / step_ms`: the speed-up measured.
        kernel_ms_float32: The float32 step's summed op time (profiled).
        kernel_ms: The 16-bit step's summed op time, casts included.
        ceiling_ratio: `kernel_ms_float32 / kernel_ms`: the speed-up if the
            step were its kernels at their measured speeds.
        of_ceiling: `measured_ratio / ceiling_ratio`.
        slow_ops: The op types that do not speed up (below `SLOW_SPEEDUP`) or
            run only in 16-bit, by the 16-bit time they take, each at least
            1% of `kernel_ms`.
        ops: Every op type taking at least 1% of either step's kernel time,
            by float32 time (16-bit-only ones last, by their time).
    """

    model: str
    precision: str
    batch_size: int
    step_ms_float32: float
    step_ms: float
    measured_ratio: float
    kernel_ms_float32: float
    kernel_ms: float
    ceiling_ratio: float
    of_ceiling: float
    slow_ops: list[OpTime]
    ops: list[OpTime] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON-ready dict: `slow_ops` as one readable string, `ops` as a list of dicts."""
        row = dataclasses.asdict(self)
        row["slow_ops"] = "; ".join(op.describe() for op in self.slow_ops) or "none"
        row["ops"] = [{**dataclasses.asdict(op), "speedup": op.speedup} for op in self.ops]
        return row

    def op_table(self) -> str:
        """`ops` as a markdown table: op type, ms per step in float32 and 16 bits, speed-up, share of 16-bit time."""
        lines = [
            f"{self.model} {self.precision} batch={self.batch_size}: kernel time per step by op type",
            "",
            f"| op type | float32 ms | {self.precision} ms | speed-up | share of {self.precision} |",
            "|---|---|---|---|---|",
        ]
        for op in self.ops:
            speedup = "n/a" if op.speedup is None else f"{op.speedup:.2f}x"
            lines.append(
                f"| {op.op_type} | {op.float32_ms:.1f} | {op.ms:.1f} | {speedup} | {op.ms / self.kernel_ms:.1%} |"
            )
        return "\n".join(lines)


def op_times_from_xspace(space: _private_apis.xplane_pb2.XSpace) -> dict[str, float]:
    """Total milliseconds per op type in a profile: a GPU's device plane if it has one, else the host plane."""
    totals: dict[str, float] = collections.defaultdict(float)
    for op, ms in launches.op_events(space):
        totals[op] += ms
    return dict(totals)


def op_times(run_steps: Callable[[int], Any], steps: int) -> dict[str, float]:
    """Milliseconds per op type per step, from profiling `run_steps(steps)` with the TensorFlow profiler.

    Args:
        run_steps: Runs the given number of (warmed-up) steps and waits for them.
        steps: Steps to profile.
    """
    space = launches.profile(run_steps, steps)
    return {op: ms / steps for op, ms in op_times_from_xspace(space).items()}


def _profile_step(
    spec: tasks.Task, precision: str, batch_size: int, config: BenchmarkConfig
) -> tuple[float, dict[str, float]]:
    """(wall-clock ms per step, op ms per step by type) of the row's trainer, built as `compare` builds it."""
    with precision_lib.precision_scope(precision), precision_lib.tf32_scope(config.tf32):
        keras.utils.set_random_seed(config.seed)
        workload = rows.build(spec, precision, False, batch_size, config, hand_written=False)
        dataset = tf.data.Dataset.from_tensors(workload.batch).repeat()
        driver = trainer_driver(workload, dataset, (batch_size,), config.warmup_steps, first_fit=True)
        steps, repeats = config.fixed_counts()
        rounds = [driver.run(steps)[0] / steps for _ in range(repeats)]
        ops = op_times(driver.run, steps)
    return 1000.0 * statistics.median(rounds), ops


def _ops(float32: Mapping[str, float], sixteen: Mapping[str, float]) -> list[OpTime]:
    """The op types taking at least 1% of either kernel total, by float32 time, then 16-bit-only ones by time."""
    totals = sum(float32.values()), sum(sixteen.values())
    ops = [
        OpTime(op, float32.get(op, 0.0), sixteen.get(op, 0.0))
        for op in set(float32) | set(sixteen)
        if float32.get(op, 0.0) >= _MIN_SHARE * totals[0] or sixteen.get(op, 0.0) >= _MIN_SHARE * totals[1]
    ]
    return sorted(ops, key=lambda op: (not op.float32_ms, -(op.float32_ms or op.ms)))


def _slow_ops(float32: Mapping[str, float], sixteen: Mapping[str, float]) -> list[OpTime]:
    total = sum(sixteen.values())
    ops = [OpTime(op, float32.get(op, 0.0), ms) for op, ms in sixteen.items() if ms >= _MIN_SHARE * total]
    slow = [op for op in ops if op.speedup is None or op.speedup < SLOW_SPEEDUP]
    return sorted(slow, key=lambda op: -op.ms)


def sixteen_bit_precisions(precisions: tuple[str, ...]) -> list[str]:
    """The 16-bit precisions among `precisions` (canonical names), which the ceiling compares with float32.

    Raises:
        ValueError: when there is none, naming what was received.
    """
    sixteen = [p for p in canonical_precisions(precisions) if p != "float32"]
    if not sixteen:
        raise ValueError(
            "The ceiling mode compares a 16-bit precision with float32: name mixed_bfloat16 or mixed_float16. "
            f"Received: precisions={precisions!r}"
        )
    return sixteen


def ceiling(
    config: BenchmarkConfig,
    specs: Mapping[str, tasks.Task] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[CeilingRecord]:
    """Profiles each model's step in float32 and in each 16-bit precision of `config`; one record per 16-bit row.

    Without XLA (the profile names TensorFlow's own kernels). Each row's
    trainer is built as `compare` builds it, warmed up, timed over
    `config.repeats` rounds of `config.steps` steps (5 and 20 when unset:
    `BenchmarkConfig.fixed_counts`), then profiled over that many steps more.

    Args:
        config: What to measure; its `xla` and `runs` are not used.
        specs: The models' tasks by name; the benchmark's defaults when None.
        progress: Called with one line per profiled precision; silent when None.

    Raises:
        ValueError: for an invalid config, or one without a 16-bit precision, naming it.
    """
    config, specs = rows.check_specs(config, specs)
    sixteen = sixteen_bit_precisions(config.precisions)
    records = []
    for name in canonical_models(config.models, specs):
        spec = specs[name]
        for batch_size in dedupe(config.batch_sizes) or (spec.config.batch_size,):
            profiles = {}
            for precision in ("float32", *sixteen):
                start = time.perf_counter()
                profiles[precision] = _profile_step(spec, precision, batch_size, config)
                if progress is not None:
                    step_ms, ops = profiles[precision]
                    progress(
                        f"{name} {precision} batch={batch_size}: {step_ms:.1f} ms per step, "
                        f"{sum(ops.values()):.1f} ms of kernels, {time.perf_counter() - start:.0f} s"
                    )
            step_float32, ops_float32 = profiles["float32"]
            for precision in sixteen:
                step_ms, ops = profiles[precision]
                measured = step_float32 / step_ms
                ceiling_ratio = sum(ops_float32.values()) / sum(ops.values())
                records.append(
                    CeilingRecord(
                        model=name,
                        precision=precision,
                        batch_size=batch_size,
                        step_ms_float32=step_float32,
                        step_ms=step_ms,
                        measured_ratio=measured,
                        kernel_ms_float32=sum(ops_float32.values()),
                        kernel_ms=sum(ops.values()),
                        ceiling_ratio=ceiling_ratio,
                        of_ceiling=measured / ceiling_ratio,
                        slow_ops=_slow_ops(ops_float32, ops),
                        ops=_ops(ops_float32, ops),
                    )
                )
    return records
