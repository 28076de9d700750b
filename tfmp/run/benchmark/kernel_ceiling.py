"""The benchmark's `ceiling` mode: the whole-step speed-up a 16-bit precision's kernels allow, and what holds it back.

For each model, the trainer's step is profiled with the TensorFlow profiler
in float32 and in each 16-bit precision: every op's time is summed by op type
(`op_times`). The kernel ceiling is the float32 step's kernel time over the
16-bit step's, the speed-up the step would reach if it were nothing but its
kernels, each running at its own measured 16-bit speed; the measured ratio
(wall-clock steps, timed without the profiler) is set against it. The op
types that do not speed up, and those only the 16-bit step runs (casts), are
listed by the time they cost.

The bfloat16 step is profiled with TensorFlow's own kernels (its routing
off), and a routed ceiling is set beside that ceiling: each op at the faster
of its bfloat16 time and its float32 time plus the casts computing it in
float32 would add (the op types `tfmp.cpu_kernels.BFLOAT16_CANDIDATES`
routes, their casts scaled from this CPU's kernel table), against the step
as tfmp trains it, routed where this CPU's table says.
docs/guides/benchmark-methodology.md, "Kernel ceiling", says how to read it.
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

from tfmp import cpu_kernels
from tfmp import precision as precision_lib
from tfmp.run import _private_apis, tasks
from tfmp.run.benchmark import launches, rows
from tfmp.run.benchmark.benchmark_config import BenchmarkConfig, canonical_models, canonical_precisions, dedupe
from tfmp.run.benchmark.drivers import trainer_driver

__all__ = [
    "CeilingRecord",
    "OpTime",
    "ceiling",
    "op_times",
    "op_times_from_xspace",
    "routed_kernel_ms",
    "sixteen_bit_precisions",
]

# An op type is "not speeding up" below this float32 / 16-bit time ratio.
SLOW_SPEEDUP = 1.1
# Op types under this share of the 16-bit kernel time are left out of the list.
_MIN_SHARE = 0.01


@dataclasses.dataclass(frozen=True)
class OpTime:
    """One op type's kernel time per step in float32 and in the 16-bit precision (ms; 0 where it does not run).

    Attributes:
        op_type: The op type, as the profile names it.
        float32_ms: Its time in the float32 step.
        ms: Its time in the 16-bit step.
        cast_ms: What casting its inputs to float32 and its result back
            would add to `float32_ms`; None for an op type not routed.
    """

    op_type: str
    float32_ms: float
    ms: float
    cast_ms: float | None = None

    @property
    def routed_ms(self) -> float:
        """The faster of its 16-bit time and its float32 time plus the casts (its 16-bit time if not routed)."""
        if self.cast_ms is None or not self.float32_ms:
            return self.ms
        return min(self.ms, self.float32_ms + self.cast_ms)

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
        routed_step_ms: The 16-bit step's wall-clock time as tfmp trains it,
            with the ops this CPU's kernel table routes computed in float32;
            `step_ms` where it routes nothing.
        routed_ratio: `step_ms_float32 / routed_step_ms`.
        routed_kernel_ms: `kernel_ms` with each op at its `OpTime.routed_ms`:
            the faster of its 16-bit time and its float32 time plus casts.
        routed_ceiling_ratio: `kernel_ms_float32 / routed_kernel_ms`.
        of_routed_ceiling: `routed_ratio / routed_ceiling_ratio`: how close
            the routed step is to the routed ceiling.
        routed_ops: What the routed step computes in float32 (forward op
            types, and `<op type> gradient` for gradients).
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
    routed_step_ms: float
    routed_ratio: float
    routed_kernel_ms: float
    routed_ceiling_ratio: float
    of_routed_ceiling: float
    routed_ops: list[str]
    slow_ops: list[OpTime]
    ops: list[OpTime] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON-ready dict: `slow_ops` as one readable string, `ops` as a list of dicts."""
        row = dataclasses.asdict(self)
        row["slow_ops"] = "; ".join(op.describe() for op in self.slow_ops) or "none"
        row["ops"] = [{**dataclasses.asdict(op), "routed_ms": op.routed_ms, "speedup": op.speedup} for op in self.ops]
        return row

    def op_table(self) -> str:
        """`ops` as a markdown table: op type, ms per step in float32, 16 bits and routed, speed-up, 16-bit share."""
        lines = [
            f"{self.model} {self.precision} batch={self.batch_size}: kernel time per step by op type",
            "",
            f"| op type | float32 ms | {self.precision} ms | routed ms | speed-up | share of {self.precision} |",
            "|---|---|---|---|---|---|",
        ]
        for op in self.ops:
            speedup = "n/a" if op.speedup is None else f"{op.speedup:.2f}x"
            lines.append(
                f"| {op.op_type} | {op.float32_ms:.1f} | {op.ms:.1f} | {op.routed_ms:.1f} | {speedup} "
                f"| {op.ms / self.kernel_ms:.1%} |"
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
    spec: tasks.Task, precision: str, batch_size: int, config: BenchmarkConfig, own_kernels: bool, profile: bool
) -> tuple[float, dict[str, float], cpu_kernels.Routing]:
    """(wall-clock ms per step, op ms per step by type, the routing compile() decided) of the row's trainer.

    Built as `compare` builds it. With `own_kernels`, the step runs TensorFlow's own bfloat16 kernels (nothing of
    bfloat16 routed); without `profile`, only its wall-clock time is measured.
    """
    with precision_lib.precision_scope(precision), precision_lib.tf32_scope(config.tf32):
        keras.utils.set_random_seed(config.seed)
        workload = rows.build(spec, precision, False, batch_size, config, hand_written=False)
        routing = workload.trainer.routing
        if own_kernels:
            workload.trainer.decide_routing(cpu_kernels.Routing())
        dataset = tf.data.Dataset.from_tensors(workload.batch).repeat()
        driver = trainer_driver(workload, dataset, (batch_size,), config.warmup_steps, first_fit=True)
        steps, repeats = config.fixed_counts()
        rounds = [driver.run(steps)[0] / steps for _ in range(repeats)]
        ops = op_times(driver.run, steps) if profile else {}
    return 1000.0 * statistics.median(rounds), ops, routing


def _tensorflow_op_type(op_type: str) -> str:
    """The op type TensorFlow's graph names, for one a profile names after the oneDNN kernel that ran it.

    oneDNN's `_MklNativeConv2DBackpropFilterWithBias` is the filter gradient with the bias gradient fused in.
    """
    for prefix in ("_MklNative", "_Mkl"):
        if op_type.startswith(prefix):
            return op_type[len(prefix) :].removesuffix("WithBias")
    return op_type


def _op_time(
    op_type: str, float32: Mapping[str, float], sixteen: Mapping[str, float], shares: Mapping[str, float]
) -> OpTime:
    """`op_type`'s times, with the casts computing it in float32 would add where `shares` has a share for it."""
    float32_ms = float32.get(op_type, 0.0)
    share = shares.get(_tensorflow_op_type(op_type))
    return OpTime(op_type, float32_ms, sixteen.get(op_type, 0.0), None if share is None else share * float32_ms)


def routed_kernel_ms(
    float32: Mapping[str, float], sixteen: Mapping[str, float], cast_shares: Mapping[str, float]
) -> float:
    """The 16-bit step's kernel time with each op at the faster of its 16-bit time and its float32 time plus casts.

    Args:
        float32: ms per step by op type in the float32 step.
        sixteen: ms per step by op type in the 16-bit step.
        cast_shares: For each op type that can be computed in float32, what
            the casts add, as a share of its float32 time
            (`tfmp.cpu_kernels.KernelTimes.cast_shares`); an op type not
            listed keeps its 16-bit time.
    """
    return sum(_op_time(op, float32, sixteen, cast_shares).routed_ms for op in sixteen)


def _ops(
    float32: Mapping[str, float], sixteen: Mapping[str, float], shares: Mapping[str, float] | None = None
) -> list[OpTime]:
    """The op types taking at least 1% of either kernel total, by float32 time, then 16-bit-only ones by time."""
    totals = sum(float32.values()), sum(sixteen.values())
    ops = [
        _op_time(op, float32, sixteen, shares or {})
        for op in set(float32) | set(sixteen)
        if float32.get(op, 0.0) >= _MIN_SHARE * totals[0] or sixteen.get(op, 0.0) >= _MIN_SHARE * totals[1]
    ]
    return sorted(ops, key=lambda op: (not op.float32_ms, -(op.float32_ms or op.ms)))


def _slow_ops(float32: Mapping[str, float], sixteen: Mapping[str, float]) -> list[OpTime]:
    total = sum(sixteen.values())
    ops = [OpTime(op, float32.get(op, 0.0), ms) for op, ms in sixteen.items() if ms >= _MIN_SHARE * total]
    slow = [op for op in ops if op.speedup is None or op.speedup < SLOW_SPEEDUP]
    return sorted(slow, key=lambda op: -op.ms)


def _routed_names(routing: cpu_kernels.Routing, dtype: str) -> list[str]:
    """What `routing` computes in float32 for `dtype`: forward op types, then `<op type> gradient`s."""
    forward = sorted(op for op, routed in routing.forward if routed == dtype)
    return forward + sorted(f"{route.op_type} gradient" for route in routing.gradients if route.dtype == dtype)


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
    times: cpu_kernels.KernelTimes | None = None,
) -> list[CeilingRecord]:
    """Profiles each model's step in float32 and in each 16-bit precision of `config`; one record per 16-bit row.

    Without XLA (the profile names TensorFlow's own kernels). Each row's
    trainer is built as `compare` builds it, warmed up, timed over
    `config.repeats` rounds of `config.steps` steps (5 and 20 when unset:
    `BenchmarkConfig.fixed_counts`), then profiled over that many steps more.
    The bfloat16 row is profiled with TensorFlow's own kernels; where this
    CPU routes some of its ops to float32, the routed step is built and
    timed too (`CeilingRecord.routed_step_ms`).

    Args:
        config: What to measure; its `xla` and `runs` are not used.
        specs: The models' tasks by name; the benchmark's defaults when None.
        progress: Called with one line per profiled precision; silent when None.
        times: The kernel table the routed ceiling's casts are scaled from;
            default this CPU's `tfmp.cpu_kernels.kernel_times()` (not read on a GPU).

    Raises:
        ValueError: for an invalid config, or one without a 16-bit precision, naming it.
    """
    config, specs = rows.check_specs(config, specs)
    sixteen = sixteen_bit_precisions(config.precisions)
    # What computing a bfloat16 op in float32 costs in casts, from this CPU's kernel table; a GPU routes nothing.
    shares = {}
    if "mixed_bfloat16" in sixteen and not precision_lib.visible_gpus():
        shares = (times or cpu_kernels.kernel_times()).cast_shares("bfloat16")
    records = []
    for name in canonical_models(config.models, specs):
        spec = specs[name]
        for batch_size in dedupe(config.batch_sizes) or (spec.config.batch_size,):
            profiles = {}
            for precision in ("float32", *sixteen):
                start = time.perf_counter()
                bfloat16 = precision == "mixed_bfloat16"
                profiles[precision] = _profile_step(spec, precision, batch_size, config, bfloat16, True)
                step_ms, ops, routing = profiles[precision]
                routed_ms = step_ms
                if bfloat16 and _routed_names(routing, "bfloat16"):  # the step as tfmp trains it here
                    routed_ms = _profile_step(spec, precision, batch_size, config, False, False)[0]
                profiles[precision] = step_ms, ops, routing, routed_ms
                if progress is not None:
                    progress(
                        f"{name} {precision} batch={batch_size}: {step_ms:.1f} ms per step"
                        + (f" ({routed_ms:.1f} routed)" if routed_ms != step_ms else "")
                        + f", {sum(ops.values()):.1f} ms of kernels, {time.perf_counter() - start:.0f} s"
                    )
            step_float32, ops_float32, _, _ = profiles["float32"]
            for precision in sixteen:
                step_ms, ops, routing, routed_ms = profiles[precision]
                bfloat16 = precision == "mixed_bfloat16"
                measured, routed = step_float32 / step_ms, step_float32 / routed_ms
                kernel_float32, kernel_ms = sum(ops_float32.values()), sum(ops.values())
                ceiling_ratio = kernel_float32 / kernel_ms
                routed_kernel = routed_kernel_ms(ops_float32, ops, shares) if bfloat16 else kernel_ms
                records.append(
                    CeilingRecord(
                        model=name,
                        precision=precision,
                        batch_size=batch_size,
                        step_ms_float32=step_float32,
                        step_ms=step_ms,
                        measured_ratio=measured,
                        kernel_ms_float32=kernel_float32,
                        kernel_ms=kernel_ms,
                        ceiling_ratio=ceiling_ratio,
                        of_ceiling=measured / ceiling_ratio,
                        routed_step_ms=routed_ms,
                        routed_ratio=routed,
                        routed_kernel_ms=routed_kernel,
                        routed_ceiling_ratio=kernel_float32 / routed_kernel,
                        of_routed_ceiling=routed / (kernel_float32 / routed_kernel),
                        routed_ops=_routed_names(routing, "bfloat16" if bfloat16 else "float16"),
                        slow_ops=_slow_ops(ops_float32, ops),
                        ops=_ops(ops_float32, ops, shares if bfloat16 else {}),
                    )
                )
    return records
