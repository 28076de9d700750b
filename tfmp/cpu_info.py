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

__all__ = ["cpu_class", "cpu_has_bfloat16", "cpu_has_float16", "kernel_flags", "machine_id"]

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


def _flags(text: str) -> set[str]:
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
    return flags


def _cpu_flags(cpuinfo: str) -> set[str]:
    return _flags(_cpuinfo(cpuinfo))


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


def _class(flags: set[str]) -> str:
    return next((name for name, marks in _CLASSES if marks & flags), "Arm" if flags else "")


def cpu_class(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's class as tfmp's figures name it (`_CLASSES`; `"Arm"` for other flags, "" for none readable)."""
    return _class(_cpu_flags(cpuinfo))


# Besides every AVX-512 and AMX flag: the other instruction sets TensorFlow's CPU kernels (oneDNN, Eigen)
# choose their code by, on x86 and on Arm. Two CPUs of one model name can differ in them (a virtual
# machine's CPU shows what its host and hypervisor allow), and with them in what a 16-bit kernel costs.
_KERNEL_FLAGS = frozenset(
    {"avx2", "fma", "f16c", "avx_vnni", "asimdhp", "asimddp", "bf16", "i8mm", "sve", "sve2", "svebf16"}
)


def _kernel_flags(flags: set[str]) -> tuple[str, ...]:
    return tuple(sorted(f for f in flags if f in _KERNEL_FLAGS or f.startswith(("avx512", "amx"))))


def kernel_flags(cpuinfo: str = "/proc/cpuinfo") -> tuple[str, ...]:
    """The CPU's flags that its 16-bit kernels depend on, sorted (empty where none can be read).

    Every AVX-512 and AMX flag, and AVX2, FMA, F16C and AVX-VNNI on x86;
    half-precision, dot-product, BF16, I8MM and SVE on Arm. Other flags
    (a hypervisor's, a security mitigation's) do not change a kernel's cost.
    """
    return _kernel_flags(_cpu_flags(cpuinfo))


def machine_id(cpuinfo: str = "/proc/cpuinfo") -> str:
    """What a CPU measurement depends on, as one readable key.

    The CPU model, its class and the flags its kernels depend on (`cpu_class`,
    `kernel_flags`), the core count and the TensorFlow and Keras versions, e.g.
    `AMD EPYC | AVX2 only (avx2 f16c fma) | 2 cpus | tensorflow 2.21.0 | keras 3.15.1`.
    Two CPUs of one model name whose flags differ (virtual machines named
    after their host's model) have two keys, so a measurement cached for one
    is never read for the other. Where no flags can be read (no `cpuinfo`),
    the second field is `flags unknown`.
    """
    text = _cpuinfo(cpuinfo)
    model = next(
        (line.partition(":")[2].strip() for line in text.splitlines() if line.startswith("model name")),
        platform.processor() or platform.machine(),
    )
    flags = _flags(text)
    features = " ".join(_kernel_flags(flags))
    kind = _class(flags) or "flags unknown"
    isa = f"{kind} ({features})" if features else kind
    return f"{model} | {isa} | {os.cpu_count()} cpus | tensorflow {tf.__version__} | keras {keras.__version__}"
