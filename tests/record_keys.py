"""The JSON keys of a benchmark `compare` record, in order.

One list, checked by the tests of the records, of the markdown table and of the benchmark script.
"""

COMPARE_KEYS = [
    "model",
    "precision",
    "xla",
    "batch_size",
    "images_per_sec",
    "images_per_sec_min",
    "images_per_sec_max",
    "unit",
    "step_ms",
    "ratio_to_float32",
    "ratio_to_float32_min",
    "ratio_to_float32_max",
    "ratio_to_hand_written",
    "ratio_to_hand_written_min",
    "ratio_to_hand_written_max",
    "peak_host_mb",
    "peak_gpu_mb",
    "allocator",
    "peak_mb",
    "step_mb",
    "peak_ratio_to_float32",
    "step_ratio_to_float32",
    "runs",
    "ratio_to_plain_fit",
    "ops_per_step",
    "hand_written_ops_per_step",
    "plain_fit_ops_per_step",
    "host_reads_per_step",
    "hand_written_host_reads_per_step",
    "plain_fit_host_reads_per_step",
]
