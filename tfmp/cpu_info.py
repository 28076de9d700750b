"""What this CPU is: the 16-bit arithmetic it runs natively, its class, and what a CPU measurement depends on.

Read from Linux's `/proc/cpuinfo` (`flags` on x86, `Features` on Arm);
elsewhere every answer is the "nothing known" one. `tfmp.cpu_kernels`
measures what the 16-bit kernels cost on such a CPU; `auto` precision
(`tfmp.run.autotune`) takes a natively supported type as a candidate.
"""

from __future__ import annotations

import os
import platform

import keras
import tensorflow as tf

__all__ = ["cpu_class", "cpu_has_bfloat16", "cpu_has_float16", "machine_id"]

# x86 AVX512-BF16 / AMX-BF16; Arm's `Features: bf16`.
_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})
# x86 AVX512-FP16 / AMX-FP16; Arm's half-precision vector arithmetic.
_FP16_FLAGS = frozenset({"avx512_fp16", "amx_fp16", "asimdhp"})


def _cpuinfo(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _cpu_flags(cpuinfo: str) -> set[str]:
    flags: set[str] = set()
    for line in _cpuinfo(cpuinfo).splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
    return flags


def cpu_has_bfloat16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether the CPU has bfloat16 instructions (AVX512-BF16, AMX-BF16, Arm BF16).

    Reads the `flags` (x86) or `Features` (Arm) lines of Linux's
    `/proc/cpuinfo`; elsewhere the answer is False.
    """
    return bool(_BF16_FLAGS & _cpu_flags(cpuinfo))


def cpu_has_float16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether the CPU has float16 arithmetic (AVX512-FP16, AMX-FP16, Arm's half-precision SIMD).

    F16C, which AVX2 CPUs have, only converts between float16 and float32:
    the arithmetic is float32's, so it does not count.
    """
    return bool(_FP16_FLAGS & _cpu_flags(cpuinfo))


# The CPU classes tfmp's figures are named by, each by the flag that marks it, the first that matches.
_CLASSES = (
    ("AMX", {"amx_bf16", "amx_fp16"}),
    ("AVX512-FP16", {"avx512_fp16"}),
    ("AVX512-BF16", {"avx512_bf16"}),
    ("AVX-512", {"avx512f"}),
    ("AVX2 only", {"avx2"}),
    ("Arm BF16", {"bf16"}),
)


def cpu_class(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's class as tfmp's figures name it (`_CLASSES`; `"Arm"` for other flags, "" for none readable)."""
    flags = _cpu_flags(cpuinfo)
    return next((name for name, marks in _CLASSES if marks & flags), "Arm" if flags else "")


def machine_id(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU model, core count and software versions: what a CPU measurement depends on."""
    model = next(
        (line.partition(":")[2].strip() for line in _cpuinfo(cpuinfo).splitlines() if line.startswith("model name")),
        platform.processor() or platform.machine(),
    )
    return f"{model} | {os.cpu_count()} cpus | tensorflow {tf.__version__} | keras {keras.__version__}"
