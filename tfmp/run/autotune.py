"""Precision `"auto"`: choose by measuring, once per device and model.

No rule from the hardware alone picks well. On CPUs with AVX512-BF16 or AMX,
bfloat16 matmuls run faster than float32, yet a model dominated by
depthwise convolutions or BatchNorm can run slower in bfloat16; on a recent
GPU a large GAN step gains from 16 bits while a small, launch-bound
MobileNetV2 step loses (the Performance report has the figures). The
compute-capability rule (`tfmp.precision.choose_precision`) would pick
bfloat16 for both. So `choose` has each candidate precision measured (for
a task: a few training steps of its model, `tfmp.run.trials.fastest`),
picks the fastest, reports every figure, and caches the answer in a small
JSON file keyed by the device (the CPU's model, class and kernel flags,
`machine_id`; each GPU's name and compute capability) and the model's
signature, so the measurement runs once per machine.

The candidates (`candidates`) follow the device:

* a GPU of compute capability 8.0 or newer: `float32` (with TF32 when the
  run allows it), `mixed_bfloat16`, `mixed_float16`;
* 7.x (Volta, Turing: float16 Tensor Cores only): `float32`, `mixed_float16`;
* older GPUs: `float32` only, nothing to measure;
* a CPU: `float32`, and each 16-bit type the CPU runs natively:
  `mixed_bfloat16` with bfloat16 instructions (AVX512-BF16, AMX, Arm BF16),
  `mixed_float16` with float16 arithmetic (AVX512-FP16, AMX-FP16, Arm's
  half-precision SIMD). An emulated type is never a candidate
  (`tfmp.cpu_kernels` has what each type costs on this CPU).

With several GPUs the oldest decides, since every replica runs one policy.
`detect_hardware` reads this machine; pass another `Hardware` to `choose`
to decide for it (the tests do).

The cache lives in `$TFMP_CACHE_DIR`, else `$XDG_CACHE_HOME/tfmp`, else
`~/.cache/tfmp`, as `auto_precision.json`. Delete it to measure again.

Measuring a task's model is `tfmp.run.trials`; this module knows nothing
of tasks.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import os
from collections.abc import Callable, Mapping

import tensorflow as tf

from tfmp import _cache
from tfmp import precision as precision_lib
from tfmp._cache import CACHE_ENV
from tfmp.cpu_kernels import cpu_has_bfloat16, cpu_has_float16, machine_id

__all__ = [
    "CACHE_ENV",
    "Choice",
    "GPU",
    "Hardware",
    "cache_file",
    "candidates",
    "choose",
    "cpu_has_bfloat16",
    "cpu_has_float16",
    "detect_hardware",
    "machine_id",
]

log = logging.getLogger(__name__)

_CACHE_NAME = "auto_precision.json"
# 2: the machine in the key names the CPU's class and kernel flags (`machine_id`); version 1's entries are
# dropped rather than kept beside keys they can no longer match.
_CACHE_VERSION = 2


def cache_file() -> str:
    """Where the measured choices are kept (see the module docstring)."""
    return os.path.join(_cache.cache_dir(), _CACHE_NAME)


@dataclasses.dataclass(frozen=True)
class GPU:
    """A visible NVIDIA GPU.

    Attributes:
        name: The device name, e.g. `"NVIDIA H100 80GB HBM3"`.
        compute_capability: `(major, minor)`, e.g. `(9, 0)`.
    """

    name: str
    compute_capability: tuple[int, int]


@dataclasses.dataclass(frozen=True)
class Hardware:
    """The device `auto` measures on.

    Attributes:
        gpus: The visible GPUs; empty on a machine without one.
        cpu_bfloat16: Whether the CPU has bfloat16 instructions (used
            without a GPU).
        cpu_float16: Whether the CPU has float16 arithmetic (used without
            a GPU).
        machine: The host and software (`machine_id`: the CPU's model,
            class and kernel flags, core count and versions; plus the CUDA
            and cuDNN versions with a GPU); part of the cache key.
    """

    gpus: tuple[GPU, ...] = ()
    cpu_bfloat16: bool = False
    machine: str = ""
    cpu_float16: bool = False

    @property
    def compute_capability(self) -> tuple[int, int] | None:
        """The oldest GPU's compute capability (it decides for all); None without a GPU."""
        return min((gpu.compute_capability for gpu in self.gpus), default=None)

    @property
    def description(self) -> str:
        """`this CPU`, or the GPUs' names and compute capability, for the printed line."""
        if not self.gpus:
            return "this CPU"
        names = sorted({gpu.name for gpu in self.gpus})
        count = f"{len(self.gpus)}x " if len(self.gpus) > 1 else ""
        major, minor = self.compute_capability
        return (
            f"{'these GPUs' if count else 'this GPU'} ({count}{' + '.join(names)}, compute capability {major}.{minor})"
        )

    @property
    def key(self) -> str:
        """What a measurement depends on: the machine and every GPU's name and compute capability."""
        gpus = "".join(f" | GPU {g.name} {g.compute_capability[0]}.{g.compute_capability[1]}" for g in self.gpus)
        return self.machine + gpus


def detect_hardware(cpuinfo: str = "/proc/cpuinfo") -> Hardware:
    """This machine's GPUs (with their compute capability), CPU bfloat16 and float16 support and software."""
    gpus = tuple(GPU(name, capability) for name, capability in precision_lib.visible_gpus())
    machine = machine_id(cpuinfo)
    if gpus:
        build = tf.sysconfig.get_build_info()
        machine += f" | cuda {build.get('cuda_version', '?')} | cudnn {build.get('cudnn_version', '?')}"
    return Hardware(gpus, cpu_has_bfloat16(cpuinfo), machine, cpu_has_float16(cpuinfo))


def candidates(hardware: Hardware) -> tuple[str, ...]:
    """The precisions `auto` measures on `hardware`, float32 first (it wins ties).

    See the module docstring for the rule.
    """
    capability = hardware.compute_capability
    if capability is None:
        native = (("mixed_bfloat16",) if hardware.cpu_bfloat16 else ()) + (
            ("mixed_float16",) if hardware.cpu_float16 else ()
        )
        return ("float32", *native)
    if capability >= (8, 0):
        return ("float32", "mixed_bfloat16", "mixed_float16")
    if capability >= (7, 0):
        return ("float32", "mixed_float16")
    return ("float32",)


def _nothing_to_measure(hardware: Hardware) -> str:
    """Why `hardware` has a single candidate."""
    if hardware.compute_capability is None:
        return "this CPU has no bfloat16 or float16 arithmetic"
    major, minor = hardware.compute_capability
    return f"GPU compute capability {major}.{minor} < 7.0 has no Tensor Cores"


@dataclasses.dataclass
class Choice:
    """The outcome of `choose`.

    Attributes:
        precision: The chosen precision.
        images_per_sec: What each candidate measured (empty when there was
            a single candidate, so nothing to measure).
        cached: Whether the figures come from the cache (no probe ran).
        path: The cache file.
        device: Where it was measured: `this CPU`, or the GPU's name and
            compute capability.
        reason: Why nothing was measured, when nothing was.
        labels: Display names of candidates (e.g. `float32 with TF32`).
        not_cached: Why a measurement could not be cached (the cache
            directory is not writable); empty when it was, or nothing was
            measured.
        unit: What the figures count, as printed: `img/s`, or `ex/s` for
            a model that does not take images (the cache keeps them under
            `images_per_sec` either way).
    """

    precision: str
    images_per_sec: dict[str, float]
    cached: bool
    path: str
    device: str = "this CPU"
    reason: str = ""
    labels: dict[str, str] = dataclasses.field(default_factory=dict)
    not_cached: str = ""
    unit: str = "img/s"

    def __str__(self) -> str:
        if not self.images_per_sec:
            return f"auto precision: {self.precision} ({self.reason}; nothing to measure)"
        base = self.images_per_sec.get("float32", 0.0)
        figures = []
        for precision, value in self.images_per_sec.items():
            ratio = f" ({value / base:.2f}x)" if precision != "float32" and base > 0 else ""
            figures.append(f"{self.labels.get(precision, precision)} {value:.0f} {self.unit}{ratio}")
        if self.cached:
            source = f"cached in {self.path}"
        elif self.not_cached:
            source = f"measured now, not cached: {self.not_cached}"
        else:
            source = f"measured now, cached in {self.path}"
        return (
            f"auto precision: {self.precision}, the fastest on {self.device} for this model "
            f"({', '.join(figures)}; {source})"
        )


def _cached_figures(entry: object, wanted: tuple[str, ...]) -> dict[str, float] | None:
    """An entry's figures in candidate order, or None if it does not hold exactly `wanted`."""
    figures = entry.get("images_per_sec") if isinstance(entry, dict) else None
    if not isinstance(figures, dict) or set(figures) != set(wanted):
        return None
    try:
        values = {precision: float(figures[precision]) for precision in wanted}
    except (TypeError, ValueError):
        return None
    return values if all(math.isfinite(v) for v in values.values()) else None


def choose(
    signature: str,
    measure: Callable[[str], float],
    hardware: Hardware | None = None,
    path: str | None = None,
    labels: Mapping[str, str] | None = None,
    unit: str = "img/s",
) -> Choice:
    """Picks the fastest candidate precision, measuring only on a cache miss.

    Args:
        signature: What identifies the workload: the model's architecture,
            batch size and anything else that changes its speed (loss
            scaling, XLA, TF32).
        measure: Returns the images (or examples) per second of a few training steps in
            the given precision, trained as the run will train.
        hardware: The device; default `detect_hardware()`. It sets the
            candidates (`candidates`) and, with the signature, the cache key.
        path: The cache file; default `cache_file()`.
        labels: Display names for candidates in the printed line.
        unit: What `measure` counts, for the printed line (`Choice.unit`).

    Returns:
        The `Choice`; ties go to the earlier candidate (float32 first, then
        bfloat16, which needs no loss scaling).
    """
    hardware = detect_hardware() if hardware is None else hardware
    wanted = candidates(hardware)
    path = path or cache_file()
    labels = dict(labels or {})
    if len(wanted) == 1:
        return Choice(
            wanted[0], {}, False, path, hardware.description, _nothing_to_measure(hardware), labels, unit=unit
        )
    key = hashlib.sha256(f"{hardware.key}\n{signature}".encode()).hexdigest()[:20]

    def best(figures: dict[str, float]) -> str:
        return max(wanted, key=figures.__getitem__)

    figures, cached, not_cached = _cache.remembered(
        path,
        _CACHE_VERSION,
        key,
        read=lambda entry: _cached_figures(entry, wanted),
        measure=lambda: {precision: float(measure(precision)) for precision in wanted},
        entry=lambda figures: {
            "images_per_sec": figures,
            "precision": best(figures),
            "machine": hardware.key,
            "device": hardware.description,
        },
    )
    return Choice(best(figures), figures, cached, path, hardware.description, "", labels, not_cached, unit)
