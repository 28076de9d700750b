"""16-bit types on a CPU: what their kernels cost, and the ops tfmp computes in float32 there.

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

bfloat16 is for training on a CPU with bfloat16 instructions, where its
matmuls and convolutions are faster than float32's but some of its other
kernels are not (elementwise ops and their gradients, random draws, a filter
gradient). There tfmp computes an op of the step in float32 where the table
says its bfloat16 kernel takes longer than float32's plus the casts to and
from float32 (`BFLOAT16_CANDIDATES`, `KernelTimes.faster_in_float32`): from
the bfloat16 values cast to float32 (exact), with the result rounded to
bfloat16, so nothing is less precise than bfloat16's own kernel. Forward ops
are replaced as the step is traced (`float32_forward`), gradients as they are
built (`float32_gradients`). Emulated bfloat16 (an AVX2 CPU) is left as it is.

Which ops are routed comes from a measurement (`measure_kernels`) of each
kernel in float32 and the 16-bit types, made once per CPU and software and
cached (`kernel_times`), like `auto` precision's; `routing` turns it into the
decision a trainer makes at `compile()`. A GPU is never routed. The trainers
(`tfmp.Trainer`, `tfmp.GANTrainer`) route by themselves; a custom loop takes
`r = routing(dtypes)` and puts `float32_forward(r.forward)` around its
forward pass and `float32_gradients(r.gradients)` around its `tape.gradient`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from tfmp import _cache, _compat
from tfmp.cpu_info import cpu_class, cpu_has_bfloat16, cpu_has_float16, machine_id

__all__ = [
    "BFLOAT16_CANDIDATES",
    "GRADIENT_FAMILIES",
    "Candidate",
    "GradientRoute",
    "KernelTimes",
    "Routing",
    "cpu_class",
    "cpu_has_bfloat16",
    "cpu_has_float16",
    "describe",
    "float16_gradient_ops",
    "float32_forward",
    "float32_gradients",
    "kernel_times",
    "machine_id",
    "measure_kernels",
    "routing",
]

_CACHE_NAME = "cpu_kernels.json"
# 2: keyed by the CPU's class and kernel flags too. A file of version 1, keyed by the model name, core count and
# versions alone, reads as empty: its entries may be another CPU's. 3: the elementwise kernels, the random draw
# and the casts that bfloat16's routing is decided from; a file of version 2 lacks them, and is measured again.
_CACHE_VERSION = 3
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
# The elementwise kernels, the random draw and the casts run on 2M elements: a few milliseconds, so that the call's
# own cost (a fraction of a millisecond) does not hide the kernel's, as it would at the convolutions' shapes.
_ELEMENTWISE = (32, 32, 32, 64)
_ACTIVATION_SIZE = _N * _HW * _HW * _C
_ELEMENTWISE_SIZE = math.prod(_ELEMENTWISE)


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
    e, de = tensor(_ELEMENTWISE), tensor(_ELEMENTWISE)
    key, counter = tf.constant([1], tf.uint64), tf.constant([0, 0], tf.uint64)  # Philox's (alg=1)
    kernels = {
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
        # Not routed, surveyed: pooling and BatchNorm.
        "maxpool d/input": lambda: tf.raw_ops.MaxPoolGrad(
            orig_input=x, orig_output=pooled, grad=dpooled, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID"
        ),
        "avgpool d/input": lambda: tf.raw_ops.AvgPoolGrad(
            orig_input_shape=sizes, grad=dpooled, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID"
        ),
        "batchnorm d/input": lambda: tf.raw_ops.FusedBatchNormGradV3(
            y_backprop=dy, x=x, scale=ones, reserve_space_1=zeros, reserve_space_2=ones, reserve_space_3=zeros
        )[0],
        # bfloat16's candidates for float32 (`BFLOAT16_CANDIDATES`), with the two filter gradients above.
        "tanh": lambda: tf.math.tanh(e),
        "tanh d/input": lambda: tf.raw_ops.TanhGrad(y=e, dy=de),
        "relu6": lambda: tf.nn.relu6(e),
        "relu6 d/input": lambda: tf.raw_ops.Relu6Grad(gradients=de, features=e),
        "sub": lambda: tf.math.subtract(e, de),
        "random uniform": lambda: tf.raw_ops.StatelessRandomUniformV2(
            shape=_ELEMENTWISE, key=key, counter=counter, alg=1, dtype=dtype
        ),
    }
    if dtype != tf.float32:  # what computing a 16-bit op in float32 adds: a 16-bit type has no float32 column here
        e32 = tf.cast(e, tf.float32)
        kernels["cast to float32"] = lambda: tf.cast(e, tf.float32)
        kernels["cast from float32"] = lambda: tf.cast(e32, dtype)
    return kernels


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
    "tanh",
    "tanh d/input",
    "relu6",
    "relu6 d/input",
    "sub",
    "random uniform",
    "cast to float32",
    "cast from float32",
)


class Candidate(NamedTuple):
    """An op of a bfloat16 step that may be computed in float32: the kernel whose times decide, and what it casts.

    Attributes:
        kernel: The row of `KERNELS` timed.
        op: The op type that kernel runs as (`TanhGrad`), as a profile names it.
        routes: The op type routed: `op` itself for a forward op, else the op whose gradient function runs it.
        inputs: None for a forward op; else the inputs of `routes` whose gradients `kernel` computes.
        to_float32: Elements cast to float32 per call of `kernel` (at its shapes here) when it runs in float32.
        from_float32: Elements of its result cast back.
    """

    kernel: str
    op: str
    routes: str
    inputs: tuple[int, ...] | None
    to_float32: int
    from_float32: int


_FILTER, _DEPTHWISE_FILTER, _E = _K * _K * _C * _C, _K * _K * _C, _ELEMENTWISE_SIZE
# What a bfloat16 step may compute in float32: the elementwise ops of the shipped models (the GAN's tanh
# convolutions, MobileNetV2's ReLU6) and their gradients, Sub, the random draw of Dropout's masks, and the
# filter gradients (Conv2DBackpropInput is also Conv2DTranspose's forward op: its filter is input 1 too).
BFLOAT16_CANDIDATES = (
    Candidate("tanh", "Tanh", "Tanh", None, _E, _E),
    Candidate("tanh d/input", "TanhGrad", "Tanh", (0,), 2 * _E, _E),
    Candidate("relu6", "Relu6", "Relu6", None, _E, _E),
    Candidate("relu6 d/input", "Relu6Grad", "Relu6", (0,), 2 * _E, _E),
    Candidate("sub", "Sub", "Sub", None, 2 * _E, _E),
    Candidate("random uniform", "StatelessRandomUniformV2", "StatelessRandomUniformV2", None, 0, _E),
    Candidate("conv2d d/filter", "Conv2DBackpropFilter", "Conv2D", (1,), 2 * _ACTIVATION_SIZE, _FILTER),
    Candidate("conv2d d/filter", "Conv2DBackpropFilter", "Conv2DBackpropInput", (1,), 2 * _ACTIVATION_SIZE, _FILTER),
    Candidate(
        "depthwise d/filter",
        "DepthwiseConv2dNativeBackpropFilter",
        "DepthwiseConv2dNative",
        (1,),
        2 * _ACTIVATION_SIZE,
        _DEPTHWISE_FILTER,
    ),
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

    def cast_ms(self, dtype: str, to_float32: int, from_float32: int) -> float | None:
        """The measured time to cast `to_float32` elements of `dtype` to float32 and `from_float32` back, or None."""
        up = self.ms.get("cast to float32", {}).get(dtype)
        down = self.ms.get("cast from float32", {}).get(dtype)
        if up is None or down is None:
            return None
        return (to_float32 * up + from_float32 * down) / _ELEMENTWISE_SIZE

    def in_float32_ms(self, candidate: Candidate, dtype: str = "bfloat16") -> float | None:
        """`candidate`'s kernel computed in float32 from `dtype` values: float32's time plus the casts'."""
        float32 = self.ms.get(candidate.kernel, {}).get("float32")
        casts = self.cast_ms(dtype, candidate.to_float32, candidate.from_float32)
        return None if float32 is None or casts is None else float32 + casts

    def faster_in_float32(self, dtype: str = "bfloat16") -> tuple[Candidate, ...]:
        """The candidates whose `dtype` kernel took longer than float32's plus the casts (`in_float32_ms`)."""
        faster = []
        for candidate in BFLOAT16_CANDIDATES:
            own, in_float32 = self.ms.get(candidate.kernel, {}).get(dtype), self.in_float32_ms(candidate, dtype)
            if own is not None and in_float32 is not None and own > in_float32:
                faster.append(candidate)
        return tuple(faster)

    def cast_shares(self, dtype: str = "bfloat16") -> dict[str, float]:
        """By op type as a profile names it (`Candidate.op`): the casts float32 would add, over float32's time."""
        shares = {}
        for candidate in BFLOAT16_CANDIDATES:
            in_float32, float32 = self.in_float32_ms(candidate, dtype), self.ms.get(candidate.kernel, {}).get("float32")
            if in_float32 is not None and float32:
                shares[candidate.op] = in_float32 / float32 - 1
        return shares

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
    return routing({"float16"}, has_gpu, times).float16_gradient_ops()


class GradientRoute(NamedTuple):
    """The gradients of one op type computed in float32 from `dtype` values (`float32_gradients`).

    Attributes:
        op_type: The op type whose gradient function is routed, e.g. `"Conv2D"`.
        dtype: The 16-bit type routed.
        inputs: The op's inputs whose gradients are routed; None for all of them.
    """

    op_type: str
    dtype: str = "float16"
    inputs: tuple[int, ...] | None = None


@dataclasses.dataclass(frozen=True)
class Routing:
    """What a step computes in float32 from 16-bit values on this machine: one decision, made once (`routing`).

    Attributes:
        gradients: The gradients computed in float32 (`float32_gradients`).
        forward: The forward ops computed in float32, as `(op type, dtype)` (`float32_forward`).
    """

    gradients: frozenset[GradientRoute] = frozenset()
    forward: frozenset[tuple[str, str]] = frozenset()

    def __bool__(self) -> bool:
        """Whether anything is routed."""
        return bool(self.gradients or self.forward)

    def float16_gradient_ops(self) -> frozenset[str]:
        """The op types whose float16 gradients are routed."""
        return frozenset(route.op_type for route in self.gradients if route.dtype == "float16")


def routing(
    dtypes: Iterable[str],
    has_gpu: bool | None = None,
    times: KernelTimes | None = None,
    cpuinfo: str = "/proc/cpuinfo",
) -> Routing:
    """What a step computing in `dtypes` computes in float32 on this machine.

    Nothing with a GPU. On a CPU, from the kernel measurement:

    * float16: every gradient of the families whose float16 gradient kernel
      takes `SLOW_RATIO` times float32's time or more (`KernelTimes.routed_ops`);
    * bfloat16, where the CPU has bfloat16 instructions: each of
      `BFLOAT16_CANDIDATES` whose bfloat16 kernel took longer than float32's
      plus the casts (`KernelTimes.faster_in_float32`), its forward op or its
      gradients. Emulated bfloat16 is left as it is, and measures nothing.

    Args:
        dtypes: The types the step's layers compute in (others are ignored).
        has_gpu: Whether a GPU is visible; detected when None.
        times: The measurement to decide from; default `kernel_times(cpuinfo)`.
        cpuinfo: Where the CPU is described.

    Returns:
        The `Routing`; empty when nothing is routed.
    """
    dtypes = set(dtypes) & {"float16", "bfloat16"}
    if times is None and "bfloat16" in dtypes and not cpu_has_bfloat16(cpuinfo):
        dtypes.discard("bfloat16")  # emulated: nothing to route, nothing to measure
    if not dtypes:
        return Routing()
    if has_gpu is None:
        has_gpu = bool(tf.config.list_physical_devices("GPU"))
    if has_gpu:
        return Routing()
    times = times or kernel_times(cpuinfo)
    gradients = {GradientRoute(op) for op in times.routed_ops()} if "float16" in dtypes else set()
    forward = set()
    if "bfloat16" in dtypes and times.bfloat16_native:
        for candidate in times.faster_in_float32("bfloat16"):
            if candidate.inputs is None:
                forward.add((candidate.routes, "bfloat16"))
            else:
                gradients.add(GradientRoute(candidate.routes, "bfloat16", candidate.inputs))
    return Routing(frozenset(gradients), frozenset(forward))


# -- Routing ----------------------------------------------------------------------------------------

# The gradients routed in this thread while `float32_gradients` is entered: by op type, the routed dtypes and the
# inputs whose gradients are routed (None: all).
_routing = threading.local()
_installed: dict[str, Callable] = {}


def _routed() -> Mapping[str, Mapping[tf.DType, frozenset[int] | None]]:
    return getattr(_routing, "gradients", {})


def _float32(x: tf.Tensor | None, dtype: tf.DType) -> tf.Tensor | None:
    return x if x is None or x.dtype != dtype else tf.cast(x, tf.float32)


class _Float32Values:
    """An op as its gradient function sees it: its `dtype` inputs and outputs in float32, all else its own."""

    def __init__(self, op: object, dtype: tf.DType):
        self._op, self._dtype = op, dtype
        # The tape keeps None for what a gradient function does not read (a Tanh's inputs).
        self.inputs = None if op.inputs is None else [_float32(x, dtype) for x in op.inputs]

    @property
    def outputs(self) -> list[tf.Tensor] | None:  # cast when asked: most gradient functions read the inputs only
        return None if self._op.outputs is None else [_float32(y, self._dtype) for y in self._op.outputs]

    def __getattr__(self, name: str) -> object:
        return getattr(self._op, name)


def _as_list(results: object) -> list:
    return list(results) if isinstance(results, (list, tuple)) else [results]


def _dispatcher(op_type: str, original: Callable) -> Callable:
    def gradient(op: object, *grads: tf.Tensor) -> object:
        routed = _routed().get(op_type, {})
        values = [x for x in (*(op.inputs or ()), *(op.outputs or ())) if x is not None]
        dtype = next((d for d in routed if any(x.dtype == d for x in values)), None)
        if dtype is None:
            return original(op, *grads)
        inputs = routed[dtype]
        results = original(_Float32Values(op, dtype), *[_float32(g, dtype) for g in grads])
        single = not isinstance(results, (list, tuple))
        results = _as_list(results)
        # Some inputs' gradients only (a filter gradient): the others are TensorFlow's own, from the 16-bit
        # values. In a traced step, what each call computes for the other inputs is pruned.
        partial = inputs is not None and any(i not in inputs for i in range(len(results)))
        own = _as_list(original(op, *grads)) if partial else None
        # The tape passes None for inputs whose gradient it does not need, and keeps no inputs at all for ops
        # whose gradient reads the outputs only: their inputs have the outputs' type.
        if op.inputs is None:
            input_dtypes = [dtype] * len(results)
        else:
            input_dtypes = [None if x is None else x.dtype for x in op.inputs]
        rounded = []
        for i, (result, input_dtype) in enumerate(zip(results, input_dtypes, strict=True)):
            if partial and i not in inputs:
                rounded.append(own[i])
            elif result is None or input_dtype != dtype:
                rounded.append(result)
            else:
                rounded.append(tf.cast(result, dtype))
        return rounded[0] if single else rounded

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
def float32_gradients(routes: Iterable[str | GradientRoute]) -> Iterator[frozenset[GradientRoute]]:
    """Within the block, this thread computes the gradients `routes` names in float32.

    For each op of a routed type with inputs of the routed dtype, the
    gradient is computed by TensorFlow's own gradient function from the
    inputs, the outputs and the incoming gradient cast to float32, and each
    routed result is rounded to the 16-bit type (see the module docstring
    for the numerics). Other ops, and ops of other types, are differentiated
    as usual. Gradients are built when `tape.gradient` runs, so the block
    goes around that call (inside a `tf.function`, around it as it is traced).

    ```python
    with tfmp.cpu_kernels.float32_gradients(tfmp.cpu_kernels.float16_gradient_ops()):
        grads = tape.gradient(scaled_loss, model.trainable_variables)
    ```

    Args:
        routes: `GradientRoute`s (usually `routing(...).gradients`), or op
            types, e.g. `{"Conv2D"}` (every float16 gradient of the op, as
            `float16_gradient_ops()` lists them).

    Yields:
        The routes in force in the block, as `GradientRoute`s.
    """
    routes = frozenset(GradientRoute(route) if isinstance(route, str) else GradientRoute(*route) for route in routes)
    _install({route.op_type for route in routes})
    previous = _routed()
    merged = {op_type: dict(by_dtype) for op_type, by_dtype in previous.items()}
    for route in routes:
        by_dtype = merged.setdefault(route.op_type, {})
        dtype = tf.as_dtype(route.dtype)
        if route.inputs is None or (dtype in by_dtype and by_dtype[dtype] is None):
            by_dtype[dtype] = None  # every input
        else:
            by_dtype[dtype] = by_dtype.get(dtype, frozenset()) | frozenset(route.inputs)
    _routing.gradients = merged
    try:
        yield routes
    finally:
        _routing.gradients = previous


# How each forward op `float32_forward` may route is computed in float32, from its inputs (those of the routed
# type cast to float32).
_FLOAT32_FORWARD: dict[str, Callable[..., tf.Tensor]] = {
    "Tanh": tf.math.tanh,
    "Relu6": tf.nn.relu6,
    "Sub": tf.math.subtract,
    "StatelessRandomUniformV2": lambda shape, key, counter, alg: tf.raw_ops.StatelessRandomUniformV2(
        shape=shape, key=key, counter=counter, alg=alg, dtype=tf.float32
    ),
}


@contextlib.contextmanager
def float32_forward(ops: Iterable[tuple[str, str]]) -> Iterator[frozenset[tuple[str, str]]]:
    """While a step is traced within the block, this thread computes the forward ops `ops` names in float32.

    Each op of a listed type whose result has the listed type, created in
    a graph (a `tf.function` being traced) within the block, is computed by
    TensorFlow's float32 kernel from its inputs cast to float32 (exact), and
    the result is rounded to the listed type; everything downstream, the
    tape's record of the op included, reads the rounded result, so the op's
    gradient is its gradient at that value. Ops executed eagerly are left
    as they are: TensorFlow cannot replace an eager op's results. The op
    TensorFlow created first stays in the graph, unused, and is pruned.

    ```python
    routed = tfmp.cpu_kernels.routing({"bfloat16"})

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            with tfmp.cpu_kernels.float32_forward(routed.forward):
                loss = loss_fn(y, model(x, training=True))
        with tfmp.cpu_kernels.float32_gradients(routed.gradients):
            grads = tape.gradient(loss, model.trainable_variables)
        ...
    ```

    Args:
        ops: `(op type, dtype)` pairs, usually `routing(...).forward`; the op
            types routable are `Tanh`, `Relu6`, `Sub` and
            `StatelessRandomUniformV2` (random uniform draws, Dropout's masks).

    Yields:
        The pairs routed in the block.

    Raises:
        ValueError: for an op type it cannot route, naming it.
    """
    ops = frozenset((op_type, tf.as_dtype(dtype).name) for op_type, dtype in ops)
    unknown = sorted({op_type for op_type, _ in ops} - set(_FLOAT32_FORWARD))
    if unknown:
        raise ValueError(f"float32_forward routes {sorted(_FLOAT32_FORWARD)}. Received: {unknown}")
    if not ops:
        yield ops
        return

    def in_float32(
        op_type: str, inputs: tuple, attrs: object, outputs: tuple, op_name: str | None = None, graph: object = None
    ) -> list[tf.Tensor] | None:
        if graph is None or len(outputs) != 1 or (op_type, outputs[0].dtype.name) not in ops:
            return None
        dtype = outputs[0].dtype
        return [tf.cast(_FLOAT32_FORWARD[op_type](*[_float32(x, dtype) for x in inputs]), dtype)]

    _compat.add_op_callback(in_float32)
    try:
        yield ops
    finally:
        _compat.remove_op_callback(in_float32)


# -- Words ------------------------------------------------------------------------------------------


def describe(times: KernelTimes, precision: str = "mixed_float16") -> str:
    """One note on what this CPU does with `precision`'s 16-bit type, from the measurement.

    Names whether the type is native here, its slowest kernel's ratio to
    float32, and which of the type's ops tfmp computes in float32 (`routing`):
    float16's slow gradients, and where bfloat16 is native, its kernels
    slower than float32's with the casts.
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
    elif native:
        kernels = list(dict.fromkeys(candidate.kernel for candidate in times.faster_in_float32(dtype)))
        if kernels:
            note += (
                f". tfmp computes {', '.join(kernels)} in float32 from the bfloat16 values and rounds the results "
                "to bfloat16: their bfloat16 kernels took longer here than float32's with the casts"
            )
    return note + " (figures: python3 scripts/benchmark.py --mode=kernels)."
