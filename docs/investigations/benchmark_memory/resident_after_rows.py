"""How much memory one benchmark row leaves resident in its process, and whether anything gives it back.

Builds and measures the same `compare` row (float32, then mixed_bfloat16)
four times in one process, with `tfmp.run.benchmark.modes._measure_compare_row`,
and prints after each row: its peak RSS, the RSS left, the RSS after
`keras.backend.clear_session(free_memory=True)` + `gc.collect()`, and after
glibc's `malloc_trim(0)` (each only when its word is in MODE). The count of
functions in the eager context is printed too.

    python3 docs/investigations/benchmark_memory/resident_after_rows.py none [model] [batch]
    python3 docs/investigations/benchmark_memory/resident_after_rows.py clear+trim mobilenet_v2 32

Behind docs/PERFORMANCE.md, "Each row in a process of its own": about 220 MB
per MobileNetV2 row at batch 8 and at batch 32, not given back by either.
"""

import ctypes
import gc
import sys

import keras
from tensorflow.python.eager import context

from tfmp.run.benchmark import modes
from tfmp.run.benchmark.settings import BenchmarkConfig, default_specs
from tfmp.run.memory import _status_kb


def rss_mb() -> float:
    return (_status_kb("VmRSS") or 0) / 1024


def main(mode: str, model: str = "mobilenet_v2", batch: int = 32) -> None:
    config = BenchmarkConfig(
        models=(model,), precisions=("float32",), xla=(False,), warmup_steps=2, steps=2, repeats=2, isolate=False
    )
    spec = default_specs(config.resnet_input_size)[model]
    libc = ctypes.CDLL("libc.so.6")
    print(f"after imports: {rss_mb():.0f} MB")
    for i in range(4):
        for precision in ("float32", "mixed_bfloat16"):
            row = modes._measure_compare_row(spec, precision, False, batch, config)
            left = rss_mb()
            if "clear" in mode:
                keras.backend.clear_session(free_memory=True)
            gc.collect()
            collected = rss_mb()
            if "trim" in mode:
                libc.malloc_trim(0)
            functions = len(context.context().list_function_names())
            print(
                f"{i} {precision}: peak {row.peak_host_mb:.0f} MB, left {left:.0f}, after clear/gc {collected:.0f}, "
                f"after trim {rss_mb():.0f}; {functions} functions in the eager context",
                flush=True,
            )


if __name__ == "__main__":
    main(sys.argv[1], *(sys.argv[2:3]), *(int(b) for b in sys.argv[3:4]))
