"""Tests for tfmp/run/benchmark/pipeline_mode.py (input_pipeline): the real pipeline against synthetic tensors.

On the tiny classifier of benchmark_tiny.py beside this file. No test asserts a speed.
"""

from benchmark_tiny import tiny_config, tiny_specs

from tfmp.run import benchmark, reporting


def test_input_pipeline_mode_compares_the_real_pipeline_with_synthetic_tensors():
    rows = benchmark.input_pipeline(
        tiny_config(models=("tiny",), precisions=("bf16",), batch_sizes=(128,), steps=3), tiny_specs()
    )
    assert len(rows) == 1
    row = rows[0].to_json()
    assert list(row) == [
        "model",
        "dataset",
        "precision",
        "xla",
        "batch_size",
        "pipeline_images_per_sec",
        "synthetic_images_per_sec",
        "unit",
        "ratio",
    ]
    assert (row["model"], row["dataset"], row["precision"], row["batch_size"]) == (
        "tiny",
        "digits",
        "mixed_bfloat16",
        128,
    )
    assert row["ratio"] == row["pipeline_images_per_sec"] / row["synthetic_images_per_sec"]
    assert reporting.markdown_table(rows).count("\n") == 2
