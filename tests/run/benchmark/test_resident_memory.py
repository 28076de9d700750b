"""Tests for tfmp/run/benchmark/resident_memory.py: the resident mode, the memory rows leave in one process.

A row of the tiny classifier built by `leaky_network` (benchmark_tiny.py)
leaves `LEAK_MB` resident, as TensorFlow leaves memory of every model a
process trains; the mode must see it after that row and not after the
others. The script's `--mode=resident` is run in
tests/scripts/test_benchmark_script.py.
"""

import keras
import pytest
from benchmark_tiny import BATCH, LEAK_MB, RESIDENT, leaky_classifier, tiny_config, tiny_specs

from tfmp.run import benchmark, reporting
from tfmp.run.benchmark import resident_memory

KEYS = [
    "model",
    "precision",
    "xla",
    "batch_size",
    "run",
    "peak_host_mb",
    "resident_mb",
    "retained_mb",
    "left_behind_mb",
]


@pytest.fixture(scope="module")
def records_and_progress():
    """The leaky row, then the tiny one, in one process, under a global bfloat16 policy the mode must keep."""
    specs = {"leaky": leaky_classifier("leaky"), "tiny": tiny_specs()["tiny"]}
    lines = []
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        records = benchmark.resident(tiny_config(models=("leaky", "tiny"), precisions=("fp32",)), specs, lines.append)
        policy = keras.config.dtype_policy().name
    finally:
        keras.config.set_dtype_policy(previous)
        RESIDENT.clear()
    return records, lines, policy


def test_rows_are_measured_in_order_with_exactly_the_json_keys(records_and_progress):
    records, lines, _ = records_and_progress
    assert [(r.model, r.precision, r.xla, r.batch_size, r.run) for r in records] == [
        ("leaky", "float32", False, BATCH, 1),
        ("tiny", "float32", False, BATCH, 1),
    ]
    for record in records:
        assert list(record.to_json()) == KEYS
    labels = [line.split(":")[0] for line in lines]
    assert labels == ["leaky float32 xla=false batch=8", "tiny float32 xla=false batch=8"]
    table = reporting.markdown_table(records).splitlines()
    assert len(table) == 4 and table[0] == "| " + " | ".join(KEYS) + " |"


def test_the_memory_a_row_leaves_behind_shows_after_that_row_only(records_and_progress):
    (leaky, tiny), _, _ = records_and_progress
    # The leaky row leaves its LEAK_MB (and what TensorFlow sets up once per process) ...
    assert leaky.left_behind_mb > 0.75 * LEAK_MB
    assert leaky.peak_host_mb > LEAK_MB and leaky.resident_mb >= leaky.retained_mb
    # ... and the tiny row after it starts from there: its peak holds the leak, but it adds little.
    assert tiny.peak_host_mb > leaky.retained_mb
    assert tiny.left_behind_mb < 0.25 * LEAK_MB
    assert tiny.left_behind_mb == tiny.retained_mb - leaky.retained_mb


def test_clearing_keras_between_rows_keeps_the_callers_dtype_policy(records_and_progress):
    _, _, policy = records_and_progress
    assert policy == "mixed_bfloat16"


def test_runs_measure_every_row_again_in_the_same_process():
    records = benchmark.resident(tiny_config(models=("tiny",), precisions=("fp32",), runs=2), tiny_specs())
    assert [(r.model, r.run) for r in records] == [("tiny", 1), ("tiny", 2)]
    assert records[1].left_behind_mb == records[1].retained_mb - records[0].retained_mb


@pytest.mark.parametrize(
    "changes, message",
    [({"steps": 0}, "steps=0"), ({"models": ("tiny", "huge")}, "unknown model, 'huge'"), ({"runs": 0}, "runs=0")],
)
def test_config_errors_name_the_value_before_any_work(changes, message, monkeypatch):
    monkeypatch.setattr(resident_memory, "measure_row", _no_row)
    with pytest.raises(ValueError, match=message):
        benchmark.resident(tiny_config(**changes), tiny_specs())


def test_without_proc_it_is_an_error_before_any_work(monkeypatch):
    monkeypatch.setattr(resident_memory, "resident_mb", lambda: None)
    monkeypatch.setattr(resident_memory, "measure_row", _no_row)
    with pytest.raises(RuntimeError, match="/proc/self/status"):
        benchmark.resident(tiny_config(models=("tiny",)), tiny_specs())


def _no_row(*args, **kwargs):
    raise AssertionError("a row was measured")
