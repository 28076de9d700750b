"""16-bit types on a CPU: what their kernels cost, and float16 gradients in float32.

TensorFlow's CPU kernels for float16 and bfloat16 differ by CPU class far
more than the arithmetic does (docs/PERFORMANCE.md has each class's
figures, with the records they come from):

* AVX2 only: neither type is native; float16's convolution gradients are
  slower than float32's, bfloat16's many times slower.
* AVX512-BF16: bfloat16 matmuls and convolutions are native and faster than
  float32's; float16 is emulated.
* AVX512-FP16 without AMX: float16 matmuls are native, bfloat16 is slower
  than float32, and the float16 convolution filter gradients fall to a
  kernel hundreds of times slower than float32's.

float16 on a CPU serves one purpose: to check a model's float16 numerics
(overflow, underflow, the loss scale, the first non-finite layer) before a
GPU run. So where TensorFlow's float16 gradient kernel for an op is
pathological on this CPU, tfmp computes that op's gradients from the float16
values in float32 and rounds the results to float16 (`float32_gradients`).
On a GPU, cuDNN computes float16 convolution gradients with float32
accumulation, so this is at least as faithful to a GPU run as the CPU's
float16 kernel:

* forward values are untouched: the forward ops run in float16 as before;
* the product of two float16 values is exact in float32 (11 + 11
  significant bits < 24), so the routed gradient differs from an exact
  one only by float32 accumulation and one rounding to float16;
* a gradient beyond float16's range still becomes `inf` when rounded, so
  the loss scale and the skipped steps behave as float16's do.

Which ops are routed comes from a measurement (`measure_kernels`) of each
gradient kernel in float16 against float32, made once per CPU and software
and cached (`kernel_times`), like `auto` precision's. A GPU is never routed.
The trainers (`tfmp.Trainer`, `tfmp.GANTrainer`) route their gradients by
themselves; a custom loop puts `float32_gradients(float16_gradient_ops())`
around its `tape.gradient`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping

import numpy as np
import tensorflow as tf

from tfmp import _cache, _compat
from tfmp.cpu_info import cpu_class, cpu_has_bfloat16, cpu_has_float16, machine_id

__all__ = [
    "GRADIENT_FAMILIES",
    "KernelTimes",
    "cpu_class",
    "cpu_has_bfloat16",
    "cpu_has_float16",
    "describe",
    "float16_gradient_ops",
    "float32_gradients",
    "kernel_times",
    "machine_id",
    "measure_kernels",
]

_CACHE_NAME = "cpu_kernels.json"
# 2: keyed by the CPU's class and kernel flags too. A file of version 1, keyed by the model name, core count and
# versions alone, reads as empty: its entries may be another CPU's.
_CACHE_VERSION = 2
TYPES = ("float32", "bfloat16", "float16")

# A family of ops whose float16 gradients are routed together: the op types whose gradient functions are
# replaced, and the gradient kernels (names in `KERNELS`) whose measured cost decides. Conv2DBackpropInput
# is also the forward op of Conv2DTranspose; its gradients are a Conv2D and a filter gradient.
GRADIENT_FAMILIES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "conv2d": (("Conv2D", "Conv2DBackpropInput"), ("conv2d d/input", "conv2d d/filter")),
    "depthwise": (("DepthwiseConv2dNative",), ("depthwise d/input", "depthwise d/filter")),
}
# A family is routed when one of its float16 gradient kernels takes this many times float32's time or more.
# Low, because the two mistakes cost differently: routing a kernel that was fast costs a few casts, while
# leaving a slow one costs its whole slowdown (on an AVX2 CPU the ratios measured larger at the models' shapes
# than at the small ones here).
SLOW_RATIO = 1.25


# -- Measuring ------------------------------------------------------------------------------------

# Small shapes: a pathological kernel (hundreds of times float32's) still answers in a fraction of a second, and
# the ratios hold at the models' shapes (batch 16, 8x8, 32 -> 32 channels, 3x3 filters).
_N, _HW, _C, _K = 16, 8, 32, 3


def _kernels(dtype: tf.DType) -> dict[str, Callable[[], tf.Tensor]]:
    rng = np.random.default_rng(0)

    def tensor(shape: tuple[int, ...], scale: float = 1.0) -> tf.Tensor:
        return tf.cast(tf.constant(rng.standard_normal(shape, dtype=np.float32) * scale), dtype)

    x, dy = tensor((_N, _HW, _HW, _C)), tensor((_N, _HW, _HW, _C))
    w, wd = tensor((_K, _K, _C, _C), 0.1), tensor((_K, _K, _C, 1), 0.1)
    a = tensor((256, 256))
    s, sizes = [1, 1, 1, 1], [_N, _HW, _HW, _C]
    pooled = tf.nn.max_pool2d(x, 2, 2, "VALID")
    dpooled = tensor(tuple(pooled.shape))
    ones, zeros = tf.ones((_C,)), tf.zeros((_C,))
    return {
        "matmul": lambda: tf.linalg.matmul(a, a),
        "conv2d": lambda: tf.nn.conv2d(x, w, 1, "SAME"),
        "conv2d d/input": lambda: tf.raw_ops.Conv2DBackpropInput(
            input_sizes=sizes, filter=w, out_backprop=dy, strides=s, padding="SAME"
        ),
        "conv2d d/filter": lambda: tf.raw_ops.Conv2DBackpropFilter(
            input=x, filter_sizes=[_K, _K, _C, _C], out_backprop=dy, strides=s, padding="SAME"
        ),
        "depthwise": lambda: tf.nn.depthwise_conv2d(x, wd, s, "SAME"),
        "depthwise d/input": lambda: tf.raw_ops.DepthwiseConv2dNativeBackpropInput(
            input_sizes=sizes, filter=wd, out_backprop=dy, strides=s, padding="SAME"
        ),
        "depthwise d/filter": lambda: tf.raw_ops.DepthwiseConv2dNativeBackpropFilter(
            input=x, filter_sizes=[_K, _K, _C, 1], out_backprop=dy, strides=s, padding="SAME"
        ),
        # Not routed, surveyed: pooling, BatchNorm and the RNN cells' and attention's elementwise gradients.
        "maxpool d/input": lambda: tf.raw_ops.MaxPoolGrad(
            orig_input=x, orig_output=pooled, grad=dpooled, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID"
        ),
        "avgpool d/input": lambda: tf.raw_ops.AvgPoolGrad(
            orig_input_shape=sizes, grad=dpooled, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID"
        ),
        "batchnorm d/input": lambda: tf.raw_ops.FusedBatchNormGradV3(
            y_backprop=dy, x=x, scale=ones, reserve_space_1=zeros, reserve_space_2=ones, reserve_space_3=zeros
        )[0],
        "tanh d/input": lambda: tf.raw_ops.TanhGrad(y=x, dy=dy),
    }


# The kernels measured, in the order the table shows them.
KERNELS = (
    "matmul",
    "conv2d",
    "conv2d d/input",
    "conv2d d/filter",
    "depthwise",
    "depthwise d/input",
    "depthwise d/filter",
    "maxpool d/input",
    "avgpool d/input",
    "batchnorm d/input",
    "tanh d/input",
)


def _ms_per_call(fn: Callable[[], tf.Tensor], budget_s: float, most: int) -> float:
    """The fastest of a few timed calls, in ms: other work on the machine only ever adds time."""
    fn().numpy()  # traces and warms up
    times: list[float] = []
    start = time.perf_counter()
    while not times or (time.perf_counter() - start < budget_s and len(times) < most):
        began = time.perf_counter()
        fn().numpy()
        times.append(time.perf_counter() - began)
    return 1000 * min(times)


@dataclasses.dataclass(frozen=True)
class KernelTimes:
    """What each kernel costs on a CPU, per type.

    Attributes:
        machine: The CPU and software (`machine_id`).
        ms: Milliseconds per call, by kernel name (`KERNELS`) and type
            (`float32`, `bfloat16`, `float16`).
        bfloat16_native: Whether the CPU has bfloat16 instructions.
        float16_native: Whether the CPU has float16 arithmetic.
    """

    machine: str
    ms: Mapping[str, Mapping[str, float]]
    bfloat16_native: bool = False
    float16_native: bool = False

    def ratio(self, kernel: str, dtype: str) -> float | None:
        """`dtype`'s time over float32's for `kernel` (2.0: twice as slow); None if not measured."""
        times = self.ms.get(kernel, {})
        if dtype not in times or not times.get("float32"):
            return None
        return times[dtype] / times["float32"]

    def slow_families(self, dtype: str = "float16", slow_ratio: float = SLOW_RATIO) -> tuple[str, ...]:
        """The families of `GRADIENT_FAMILIES` with a `dtype` gradient kernel `slow_ratio`x float32's or slower."""
        slow = []
        for family, (_, kernels) in GRADIENT_FAMILIES.items():
            ratios = [self.ratio(kernel, dtype) for kernel in kernels]
            if any(r is not None and r >= slow_ratio for r in ratios):
                slow.append(family)
        return tuple(slow)

    def routed_ops(self) -> frozenset[str]:
        """The op types whose float16 gradients are computed in float32 on this CPU."""
        return frozenset(op for family in self.slow_families() for op in GRADIENT_FAMILIES[family][0])

    def worst(self, dtype: str) -> tuple[str, float] | None:
        """The kernel with the highest `dtype` / float32 time ratio, and the ratio."""
        ratios = [(kernel, self.ratio(kernel, dtype)) for kernel in self.ms]
        ratios = [(kernel, r) for kernel, r in ratios if r is not None]
        return max(ratios, key=lambda item: item[1], default=None)

    def table(self) -> str:
        """A markdown table: each kernel's ms per call per type, and its ratio to float32."""
        dtypes = [d for d in TYPES if any(d in times for times in self.ms.values())]
        head = (
            "| kernel | "
            + " | ".join(f"{d} ms" for d in dtypes)
            + " | "
            + " | ".join(f"{d} / float32" for d in dtypes if d != "float32")
        )
        lines = [head + " |", "|---" * (2 * len(dtypes)) + "|"]
        for kernel, times in self.ms.items():
            cells = [f"{times[d]:.2f}" if d in times else "-" for d in dtypes]
            ratios = []
            for d in dtypes[1:]:
                r = self.ratio(kernel, d)
                ratios.append("-" if r is None else f"**{r:.1f}x**" if r >= SLOW_RATIO else f"{r:.2f}x")
            lines.append(f"| {kernel} | " + " | ".join(cells + ratios) + " |")
        return "\n".join(lines)

    def report(self) -> str:
        """The table under a heading naming the CPU, and the note on each 16-bit type (`describe`)."""
        return (
            f"16-bit kernels on this CPU ({self.machine}): ms per call, and the ratio to float32 "
            f"(bold: {SLOW_RATIO:g}x or slower)\n\n{self.table()}\n\n"
            + "\n".join(describe(self, precision) for precision in ("mixed_bfloat16", "mixed_float16"))
        )

    def to_json(self) -> dict:
        """The record as a JSON-ready dict (`from_json` reads it back)."""
        return {
            "machine": self.machine,
            "ms": {kernel: dict(times) for kernel, times in self.ms.items()},
            "bfloat16_native": self.bfloat16_native,
            "float16_native": self.float16_native,
        }

    @classmethod
    def from_json(cls, record: object) -> KernelTimes | None:
        """A record written by `to_json`, or None if it is not one."""
        try:
            ms = {str(kernel): {str(d): float(v) for d, v in times.items()} for kernel, times in record["ms"].items()}
            times = cls(str(record["machine"]), ms, bool(record["bfloat16_native"]), bool(record["float16_native"]))
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
        values = [v for row in ms.values() for v in row.values()]
        return times if values and all(math.isfinite(v) and v > 0 for v in values) else None


def measure_kernels(
    dtypes: Iterable[str] = ("bfloat16", "float16"),
    cpuinfo: str = "/proc/cpuinfo",
    budget_s: float = 0.1,
    most: int = 20,
) -> KernelTimes:
    """Times each kernel of `KERNELS` on this CPU in float32 and in `dtypes`.

    The shapes are small, so that a pathological kernel costs a fraction of
    a second; a whole measurement takes a few seconds on 2 cores. Runs on
    the CPU whatever devices are visible.

    Args:
        dtypes: The 16-bit types to measure besides float32.
        cpuinfo: Where the CPU's flags are read (for the `*_native` fields).
        budget_s: About how long each kernel is timed, after its first call.
        most: At most this many timed calls per kernel; the fastest counts.

    Returns:
        The `KernelTimes`.
    """
    ms: dict[str, dict[str, float]] = {kernel: {} for kernel in KERNELS}
    # Eagerly, even when asked while a step is traced.
    with tf.init_scope(), tf.device("/CPU:0"):
        for dtype in ("float32", *dtypes):
            for kernel, fn in _kernels(tf.as_dtype(dtype)).items():
                ms[kernel][dtype] = _ms_per_call(tf.function(fn), budget_s, most)
    return KernelTimes(machine_id(cpuinfo), ms, cpu_has_bfloat16(cpuinfo), cpu_has_float16(cpuinfo))


_lock = threading.Lock()
_memo: dict[tuple[str, str], KernelTimes] = {}


def kernel_times(
    cpuinfo: str = "/proc/cpuinfo",
    path: str | None = None,
    measure: Callable[[], KernelTimes] | None = None,
) -> KernelTimes:
    """This CPU's `KernelTimes`: from the cache, else measured now and cached.

    The cache is `cpu_kernels.json` in `$TFMP_CACHE_DIR` (default `~/.cache/tfmp`), keyed by
    `machine_id`: the CPU's model, class and kernel flags, its core count and
    the versions, so an entry another CPU made is never read, even under one
    model name. Delete it to measure again. Within a process the answer is
    also kept in memory.

    Args:
        cpuinfo: Where the CPU is described.
        path: The cache file; default `cpu_kernels.json` in the cache directory.
        measure: Measures on a cache miss; default `measure_kernels`.
    """
    path = path or os.path.join(_cache.cache_dir(), _CACHE_NAME)
    machine = machine_id(cpuinfo)
    with _lock:
        if (path, machine) in _memo:
            return _memo[(path, machine)]
        measure = measure or (lambda: measure_kernels(cpuinfo=cpuinfo))
        times, _, _ = _cache.remembered(
            path, _CACHE_VERSION, machine, KernelTimes.from_json, measure, KernelTimes.to_json
        )
        _memo[(path, machine)] = times
        return times


def float16_gradient_ops(has_gpu: bool | None = None, times: KernelTimes | None = None) -> frozenset[str]:
    """The op types whose float16 gradients this machine computes in float32.

    Empty with a GPU (cuDNN's float16 kernels are used as they are);
    otherwise `KernelTimes.routed_ops` of this CPU's `kernel_times()`.

    Args:
        has_gpu: Whether a GPU is visible; detected when None.
        times: The measurement to decide from; default `kernel_times()`.
    """
    if has_gpu is None:
        has_gpu = bool(tf.config.list_physical_devices("GPU"))
    if has_gpu:
        return frozenset()
    return (times or kernel_times()).routed_ops()


# -- Routing ----------------------------------------------------------------------------------------

_routing = threading.local()  # the op types routed in this thread, while `float32_gradients` is entered
_installed: dict[str, Callable] = {}


def _routed() -> frozenset[str]:
    return getattr(_routing, "ops", frozenset())


class _Float32Inputs:
    """An op seen by its gradient function with its float16 inputs in float32 (every other attribute its own)."""

    def __init__(self, op: object):
        self._op = op
        self.inputs = [x if x is None or x.dtype != tf.float16 else tf.cast(x, tf.float32) for x in op.inputs]

    def __getattr__(self, name: str) -> object:
        return getattr(self._op, name)


def _dispatcher(op_type: str, original: Callable) -> Callable:
    def gradient(op: object, *grads: tf.Tensor) -> object:
        # The tape passes None for inputs whose gradient it does not need.
        if op_type not in _routed() or not any(x is not None and x.dtype == tf.float16 for x in op.inputs):
            return original(op, *grads)
        grads32 = [g if g is None or g.dtype != tf.float16 else tf.cast(g, tf.float32) for g in grads]
        results = original(_Float32Inputs(op), *grads32)
        return [
            r if r is None or x is None or x.dtype != tf.float16 else tf.cast(r, tf.float16)
            for r, x in zip(results, op.inputs, strict=True)
        ]

    gradient.__name__ = f"float32_gradient_of_{op_type}"
    return gradient


def _install(op_types: Iterable[str]) -> None:
    """Puts a dispatcher in front of each op type's gradient function, once per process.

    Outside `float32_gradients` (and in other threads) the dispatcher calls
    the original function unchanged.
    """
    with _lock:
        for op_type in op_types:
            if op_type not in _installed:
                original = _compat.gradient_function(op_type)
                _installed[op_type] = original
                _compat.replace_gradient_function(op_type, _dispatcher(op_type, original))


@contextlib.contextmanager
def float32_gradients(op_types: Iterable[str]) -> Iterator[frozenset[str]]:
    """Within the block, this thread computes the float16 gradients of `op_types` in float32.

    For each op of those types whose inputs are float16, the gradient is
    computed by TensorFlow's own gradient function from the inputs and the
    incoming gradient cast to float32, and each result is rounded to
    float16 (see the module docstring for the numerics). Other ops, and ops
    of other types, are differentiated as usual. Gradients are built when
    `tape.gradient` runs, so the block goes around that call (inside a
    `tf.function`, around it as it is traced).

    ```python
    with tfmp.cpu_kernels.float32_gradients(tfmp.cpu_kernels.float16_gradient_ops()):
        grads = tape.gradient(scaled_loss, model.trainable_variables)
    ```

    Args:
        op_types: TensorFlow op types, e.g. `{"Conv2D"}`; usually
            `float16_gradient_ops()`.

    Yields:
        The op types routed in the block.
    """
    ops = frozenset(op_types)
    _install(ops)
    previous = _routed()
    _routing.ops = previous | ops
    try:
        yield ops
    finally:
        _routing.ops = previous


# -- Words ------------------------------------------------------------------------------------------


def describe(times: KernelTimes, precision: str = "mixed_float16") -> str:
    """One note on what this CPU does with `precision`'s 16-bit type, from the measurement.

    Names whether the type is native here, its slowest kernel's ratio to
    float32, and, for float16, which gradients tfmp computes in float32.
    """
    dtype = "bfloat16" if "bfloat16" in precision else "float16"
    native = times.float16_native if dtype == "float16" else times.bfloat16_native
    parts = [f"{dtype} is {'native' if native else 'emulated (no ' + dtype + ' arithmetic)'} on this CPU"]
    matmul = times.ratio("matmul", dtype)
    if matmul is not None:
        parts.append(f"its matmul runs at {1 / matmul:.2f}x float32's speed")
    worst = times.worst(dtype)
    if worst is not None and worst[1] >= SLOW_RATIO:
        parts.append(f"its slowest kernel, {worst[0]}, takes {worst[1]:.1f}x float32's time")
    note = "note: " + "; ".join(parts)
    if dtype == "float16":
        families = times.slow_families()
        if families:
            note += (
                f". tfmp computes the {' and '.join(families)} gradients from the float16 values in float32 "
                "and rounds them to float16, as a GPU accumulates them"
            )
        note += ". float16 on a CPU is for checking numerics before a GPU run"
    return note + " (figures: python3 scripts/benchmark.py --mode=kernels)."
