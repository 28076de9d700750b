"""Peak memory over a block of code (the host's resident set and GPU:0), and the resident set now.

```python
with HostPeakMemory() as host, GpuPeakMemory() as gpu:
    run()
host.peak_mb, gpu.peak_mb    # MiB; gpu.peak_mb is None without a GPU
resident_mb()                # MiB the process holds now; None without /proc
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

`GpuPeakMemory.peak_mb` is
`tf.config.experimental.get_memory_info("GPU:0")["peak"]` after
`reset_memory_stats("GPU:0")` on entry, or None without a GPU.
"""

from __future__ import annotations

import resource
import sys
import threading
from typing import Any

import tensorflow as tf

__all__ = ["GpuPeakMemory", "HostPeakMemory", "resident_mb"]

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
