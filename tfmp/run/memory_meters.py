"""Peak memory over a block of code (the host's resident set, GPU:0, TensorFlow's allocator), and the resident set now.

```python
with HostPeakMemory() as host, GpuPeakMemory() as gpu:
    run()
host.peak_mb, gpu.peak_mb    # MiB; gpu.peak_mb is None without a GPU
resident_mb()                # MiB the process holds now; None without /proc

allocator = AllocatorMemory.of_this_process()   # None where it cannot be read
before = allocator.reset()   # MiB allocated now; the peak starts from it
run()
allocator.peak_mb()          # the allocator's peak since the reset
```

`tfmp.run.benchmark` records them per row as `peak_host_mb` and `peak_gpu_mb`;
its `resident` mode reads `resident_mb` after each row.

Memory
------

`HostPeakMemory.peak_mb` is the peak resident set size of this process
between entering and leaving the block, read from `/proc/self/status`
(`VmHWM`) after resetting the high-water mark through
`/proc/self/clear_refs` on entry (Linux >= 4.0). Where that reset is
refused, a thread samples `VmRSS` every 5 ms instead (it can miss peaks
shorter than that); without `/proc`, `resource.getrusage` gives the
process's lifetime peak. It is the whole process: the Python interpreter
and TensorFlow runtime, what the block allocates, and whatever earlier work
left resident (memory freed by Python is not always returned to the system).

`AllocatorMemory` reads TensorFlow's own allocator: what tensors take,
without the runtime, code and heap the resident set includes. On a GPU that
is always possible; on a CPU only with the BFC allocator, which TensorFlow
uses there only when `TF_CPU_ALLOCATOR_USE_BFC=true` is in the environment
before it starts (`CPU_BFC_ENV`; `cpu_bfc_environment()` gives it, with a
memory limit if wanted, for a process about to start).

`GpuPeakMemory.peak_mb` is
`tf.config.experimental.get_memory_info("GPU:0")["peak"]` after
`reset_memory_stats("GPU:0")` on entry, or None without a GPU.
"""

from __future__ import annotations

import re
import resource
import sys
import threading
from typing import Any

import tensorflow as tf

__all__ = [
    "CPU_BFC_ENV",
    "CPU_BFC_LIMIT_ENV",
    "AllocatorMemory",
    "GpuPeakMemory",
    "HostPeakMemory",
    "cpu_bfc_environment",
    "parse_memory_size",
    "resident_mb",
]

CPU_BFC_ENV = "TF_CPU_ALLOCATOR_USE_BFC"
"""Set to `true` before TensorFlow starts, it allocates CPU tensors with its BFC allocator, which can be read."""
CPU_BFC_LIMIT_ENV = "TF_CPU_BFC_MEM_LIMIT_IN_MB"
"""The CPU BFC allocator's budget in MiB, read when TensorFlow starts."""

_MB = 2.0**20


def _status_kb(field: str) -> int | None:
    """A `kB` field of `/proc/self/status` (e.g. `VmRSS`); None without it or without `/proc`."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def resident_mb() -> float | None:
    """The resident set size of this process now (`VmRSS` of `/proc/self/status`), in MiB; None without `/proc`."""
    kb = _status_kb("VmRSS")
    return None if kb is None else kb / 1024


class HostPeakMemory:
    """Measures the peak resident memory of this process over a block.

    ```python
    with HostPeakMemory() as memory:
        run()
    memory.peak_mb
    ```

    Methods, in order of preference (`method` says which was used):
    `"VmHWM"`: the kernel's high-water mark, reset on entry through
    `/proc/self/clear_refs`; `"sampled VmRSS"`: a thread reading `VmRSS`
    every `interval` seconds; `"ru_maxrss"`: the lifetime peak from
    `resource.getrusage` (cannot be reset, so it may predate the block).

    Args:
        interval: Sampling period of the fallback thread, in seconds.
    """

    def __init__(self, interval: float = 0.005):
        self.interval = interval
        self.method = ""
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sampled_kb = 0

    def __enter__(self) -> HostPeakMemory:
        if _status_kb("VmHWM") is not None:
            try:
                with open("/proc/self/clear_refs", "w") as f:
                    f.write("5")  # resets VmHWM to the current RSS
                self.method = "VmHWM"
                return self
            except OSError:
                pass
            self.method = "sampled VmRSS"
            self._sampled_kb = _status_kb("VmRSS") or 0
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
            return self
        self.method = "ru_maxrss"
        return self

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self._sampled_kb = max(self._sampled_kb, _status_kb("VmRSS") or 0)

    def __exit__(self, *exc: Any) -> None:
        if self.method == "VmHWM":
            self.peak_mb = (_status_kb("VmHWM") or 0) / 1024
        elif self.method == "sampled VmRSS":
            self._stop.set()
            self._thread.join()
            self._sampled_kb = max(self._sampled_kb, _status_kb("VmRSS") or 0)
            self.peak_mb = self._sampled_kb / 1024
        else:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            self.peak_mb = peak / _MB if sys.platform == "darwin" else peak / 1024  # bytes on macOS


class GpuPeakMemory:
    """Measures the peak memory TensorFlow allocates on GPU:0 over a block.

    ```python
    with GpuPeakMemory() as memory:
        run()
    memory.peak_mb    # None without a GPU
    ```

    Attributes:
        has_gpu: Whether a logical GPU was visible on entry.
        peak_mb: The peak in MiB after the block (TensorFlow's statistics are
            reset on entry); None without a GPU, or before the block ends.
    """

    def __init__(self):
        self.has_gpu = False
        self.peak_mb: float | None = None

    def __enter__(self) -> GpuPeakMemory:
        self.has_gpu = bool(tf.config.list_logical_devices("GPU"))
        self.peak_mb = None
        if self.has_gpu:
            tf.config.experimental.reset_memory_stats("GPU:0")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.has_gpu:
            self.peak_mb = tf.config.experimental.get_memory_info("GPU:0")["peak"] / _MB


def cpu_bfc_environment(limit_mb: float | None = None) -> dict[str, str]:
    """The environment variables that switch TensorFlow's CPU BFC allocator on in a process about to start.

    Args:
        limit_mb: The allocator's budget in MiB (rounded down; at least 1);
            None leaves TensorFlow's default (the machine's memory).

    Returns:
        `{CPU_BFC_ENV: "true"}`, with `CPU_BFC_LIMIT_ENV` when `limit_mb` is given.
    """
    env = {CPU_BFC_ENV: "true"}
    if limit_mb is not None:
        env[CPU_BFC_LIMIT_ENV] = str(max(1, int(limit_mb)))
    return env


class AllocatorMemory:
    """TensorFlow's allocator on one device: what it holds now, and its peak since the last reset.

    ```python
    allocator = AllocatorMemory.of_this_process()
    before = allocator.reset()
    run()
    allocator.peak_mb() - before     # what `run` allocated on top of what was resident
    ```

    Args:
        device: A logical device whose allocator keeps statistics: `"GPU:0"`,
            or `"CPU:0"` with the BFC allocator on.

    Attributes:
        device: The device read.
        name: What is read, for reports: `"GPU:0"` or `"CPU:0 BFC"`.
    """

    def __init__(self, device: str):
        self.device = device
        self.name = f"{device} BFC" if device.upper().startswith("CPU") else device

    @classmethod
    def of_this_process(cls) -> AllocatorMemory | None:
        """GPU:0's allocator with a GPU; otherwise the CPU's if it keeps statistics (the BFC allocator); else None."""
        if tf.config.list_logical_devices("GPU"):
            return cls("GPU:0")
        try:
            tf.config.experimental.get_memory_info("CPU:0")
        except ValueError:  # "Allocator stats not available": the default CPU allocator
            return None
        return cls("CPU:0")

    def current_mb(self) -> float:
        """MiB the allocator holds now."""
        return tf.config.experimental.get_memory_info(self.device)["current"] / _MB

    def reset(self) -> float:
        """Resets the peak to what is allocated now, and returns that, in MiB."""
        tf.config.experimental.reset_memory_stats(self.device)
        return self.current_mb()

    def peak_mb(self) -> float:
        """The allocator's peak since the last `reset` (or since TensorFlow started), in MiB."""
        return tf.config.experimental.get_memory_info(self.device)["peak"] / _MB

    def __repr__(self) -> str:
        return f"AllocatorMemory({self.device!r})"


_UNITS = {
    "b": 1,
    "kb": 1e3,
    "mb": 1e6,
    "gb": 1e9,
    "tb": 1e12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def parse_memory_size(text: str) -> float:
    """A memory size with its unit (`2GiB`, `512 MiB`, `1.5GB`, `300000000B`), in MiB.

    Units, in any case: `B`; `KiB`, `MiB`, `GiB`, `TiB` (powers of 1024);
    `KB`, `MB`, `GB`, `TB` (powers of 1000).

    Raises:
        ValueError: for text without a number and a known unit, or a size
            below 1 MiB, naming the text received.
    """
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]+)\s*", text) if isinstance(text, str) else None
    unit = match and _UNITS.get(match.group(2).lower())
    if unit is None:
        raise ValueError(
            "A memory size is a number and a unit: B, KiB, MiB, GiB, TiB (1024s) or KB, MB, GB, TB (1000s), "
            f"e.g. 2GiB. Received: {text!r}"
        )
    mib = float(match.group(1)) * unit / _MB
    if mib < 1:
        raise ValueError(f"A memory budget must be at least 1 MiB. Received: {text!r}")
    return mib
