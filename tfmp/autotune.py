"""`--precision=auto` on a CPU: choose by measuring, once per machine and model.

On a GPU, `auto` follows the hardware rule of `tfmp.precision.choose_precision`
(bfloat16 on Ampere+, float16 on Volta/Turing). On a CPU no rule is safe:
bfloat16 matmuls run about 2x float32 on CPUs with AVX512-BF16 or AMX, yet a
whole model can be slower in bfloat16 (MobileNetV2 measured 0.45x). So
`choose` times a few training steps of the actual model per candidate
(`float32`, and `mixed_bfloat16` if the CPU has bfloat16 instructions),
picks the fastest, says why, and caches the answer in a small JSON file
keyed by the machine and the model's signature, so the probe runs once.
float16 (emulated on CPUs) and XLA are never candidates here.

The cache lives in `$TFMP_CACHE_DIR`, else `$XDG_CACHE_HOME/tfmp`, else
`~/.cache/tfmp`, as `auto_precision.json`. Delete it to measure again.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import platform
import tempfile
from typing import Callable, Sequence

import keras
import tensorflow as tf

__all__ = ["CACHE_ENV", "Choice", "cache_file", "choose", "cpu_candidates", "cpu_has_bfloat16", "machine_id"]

CACHE_ENV = "TFMP_CACHE_DIR"
_CACHE_NAME = "auto_precision.json"
_CACHE_VERSION = 1
_BF16_FLAGS = {"avx512_bf16", "amx_bf16", "bf16"}  # x86 AVX512-BF16 / AMX; Arm (Features: bf16)


def cache_file() -> str:
    """Where the measured choices are kept (see the module docstring)."""
    root = os.environ.get(CACHE_ENV)
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(xdg, "tfmp")
    return os.path.join(root, _CACHE_NAME)


def _cpuinfo(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def cpu_has_bfloat16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether the CPU has bfloat16 instructions (AVX512-BF16, AMX-BF16, Arm BF16).

    Reads the `flags` (x86) or `Features` (Arm) lines of Linux's
    `/proc/cpuinfo`; elsewhere the answer is False and `auto` stays float32.
    """
    for line in _cpuinfo(cpuinfo).splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features") and _BF16_FLAGS & set(value.split()):
            return True
    return False


def cpu_candidates(cpuinfo: str = "/proc/cpuinfo") -> tuple[str, ...]:
    """The precisions `auto` measures on this CPU."""
    return ("float32", "mixed_bfloat16") if cpu_has_bfloat16(cpuinfo) else ("float32",)


def machine_id(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU model, core count and software versions: what a measurement depends on."""
    model = next(
        (line.partition(":")[2].strip() for line in _cpuinfo(cpuinfo).splitlines() if line.startswith("model name")),
        platform.processor() or platform.machine(),
    )
    return f"{model} | {os.cpu_count()} cpus | tensorflow {tf.__version__} | keras {keras.__version__}"


@dataclasses.dataclass
class Choice:
    """The outcome of `choose`.

    Attributes:
        precision: The chosen precision.
        images_per_sec: What each candidate measured.
        cached: Whether the figures come from the cache (no probe ran).
        path: The cache file.
    """

    precision: str
    images_per_sec: dict[str, float]
    cached: bool
    path: str

    def __str__(self) -> str:
        figures = ", ".join(f"{p} {v:.0f} img/s" for p, v in self.images_per_sec.items())
        source = f"cached in {self.path}" if self.cached else f"measured now, cached in {self.path}"
        if len(self.images_per_sec) == 1:
            return f"auto precision: {self.precision} (this CPU has no bfloat16 instructions; nothing to measure)"
        return f"auto precision: {self.precision}, the fastest on this CPU for this model ({figures}; {source})"


def _load(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            cache = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(cache, dict) or cache.get("version") != _CACHE_VERSION:
        return {}
    return cache.get("entries", {}) if isinstance(cache.get("entries"), dict) else {}


def _store(path: str, entries: dict) -> None:
    """Writes the cache atomically; a cache that cannot be written is only a lost shortcut."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".auto_precision.")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"version": _CACHE_VERSION, "entries": entries}, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        pass


def choose(
    signature: str,
    measure: Callable[[str], float],
    candidates: Sequence[str] | None = None,
    path: str | None = None,
) -> Choice:
    """Picks the fastest candidate precision, measuring only on a cache miss.

    Args:
        signature: What identifies the workload: the model's architecture,
            batch size and anything else that changes its speed.
        measure: Returns the images per second of a few training steps in
            the given precision.
        candidates: Default: `cpu_candidates()`.
        path: The cache file; default `cache_file()`.

    Returns:
        The `Choice`; ties go to the first candidate (float32).
    """
    candidates = tuple(candidates or cpu_candidates())
    path = path or cache_file()
    if len(candidates) == 1:
        return Choice(candidates[0], {candidates[0]: float("nan")}, False, path)
    key = hashlib.sha256(f"{machine_id()}\n{signature}".encode()).hexdigest()[:20]
    entries = _load(path)
    entry = entries.get(key)
    if isinstance(entry, dict) and tuple(entry.get("images_per_sec", {})) == candidates:
        figures = {k: float(v) for k, v in entry["images_per_sec"].items()}
        return Choice(max(candidates, key=figures.__getitem__), figures, True, path)
    figures = {precision: float(measure(precision)) for precision in candidates}
    best = max(candidates, key=figures.__getitem__)
    entries[key] = {
        "images_per_sec": figures,
        "precision": best,
        "machine": machine_id(),
        "measured": datetime.datetime.now().isoformat(timespec="seconds"),
    }
    _store(path, entries)
    return Choice(best, figures, False, path)
