"""Tests for scripts/benchmark.py: its flag parsers in process, the script in a subprocess.

Subprocesses run the real script end to end on the tutorial's GAN at batch 8, one per mode but input_pipeline
(tested in process, tests/run/benchmark/test_compare_mode.py).
"""

import dataclasses
import importlib.util
import json
import os
import sys

import pytest
import script_server
from record_keys import COMPARE_KEYS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "benchmark.py")


def _load_script():
    # Loaded by path, so this checkout's script is tested whichever checkout is installed as tfmp_scripts.
    # Importing it defines its absl flags (not parsed): no other test imports a script in process.
    spec = importlib.util.spec_from_file_location("benchmark_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


script = _load_script()


@pytest.mark.parametrize(
    "parse, value, message",
    [
        (script.parse_models, "gan,vgg", "unknown model, 'vgg'"),
        (script.parse_models, "", "models=''"),
        (script.parse_precisions, "fp32,fp8", "unknown precision, 'fp8'"),
        (script.parse_precisions, "auto", "unknown precision, 'auto'"),
        (script.parse_xla, "false,maybe", "xla='maybe'"),
        (script.parse_batch_sizes, "8,0", "batch_size='0'"),
        (script.parse_batch_sizes, "8,1.5", "batch_size='1.5'"),
    ],
)
def test_bad_values_name_the_value(parse, value, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        parse(value)


def test_parsing_accepts_aliases_and_keeps_order():
    assert script.parse_precisions("bf16, fp32,FP16,bf16") == ("mixed_bfloat16", "float32", "mixed_float16")
    assert script.parse_xla("true,false,true") == (True, False)
    assert script.parse_batch_sizes("32,8") == (32, 8) and script.parse_batch_sizes("") == ()
    assert script.parse_models("resnet50,GAN") == ("resnet50", "gan")


def _script(*flags):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    return script_server.run([sys.executable, SCRIPT, *flags], timeout=600, env=env, cwd=ROOT)


# One tiny row (the GAN in float32 at batch 8, two short runs), as the end-to-end tests measure it.
TINY_ROW = (
    "--models=gan",
    "--precisions=fp32",
    "--xla=false",
    "--batch_sizes=8",
    "--warmup_steps=1",
    "--steps=2",
    "--repeats=1",
    "--runs=2",
)


# Two fresh processes, one per run. The fast twins: the kernels mode below (the script's JSON and table),
# tests/run/benchmark (rows, runs, records) and tests/run/test_reporting.py (the chart).
@pytest.mark.slow
def test_script_end_to_end_writes_the_json_and_prints_the_table(tmp_path):
    out, chart = tmp_path / "bench.json", tmp_path / "bench.png"
    proc = _script(*TINY_ROW, f"--json_out={out}", f"--plot_out={chart}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert len(rows) == 1 and list(rows[0]) == COMPARE_KEYS
    if importlib.util.find_spec("matplotlib") is not None:  # the chart, its memory panel drawn from the same rows
        assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    row = rows[0]
    assert (row["model"], row["precision"], row["xla"], row["batch_size"]) == ("gan", "float32", False, 8)
    assert row["ratio_to_float32"] == 1.0 and row["peak_gpu_mb"] is None
    assert row["runs"] == 2 and row["ratio_to_hand_written_min"] <= row["ratio_to_hand_written_max"]
    # Piped: plain lines, no line rewritten in place; the plan first, each row's phases, its end and the estimate.
    lines = [line for line in proc.stderr.splitlines() if line.startswith(("benchmark:", "gan "))]
    assert "\r" not in proc.stderr and lines[0] == "benchmark: measuring gan x float32 x XLA off"
    ends = [line for line in lines if "rounds x 2 steps" in line]
    assert (
        len(ends) == 2 and ends[0].startswith("gan float32 xla=false batch=8 (run 1/2): ") and "row(s) left" in ends[0]
    )
    assert any(line.startswith("gan float32 xla=false batch=8 (run 2/2): timing, round 1/1") for line in lines)
    assert row["images_per_sec"] * row["step_ms"] / 1000 == pytest.approx(16)  # 2 x batch
    table = [line for line in proc.stdout.splitlines() if line.startswith("|")]
    assert len(table) == 3 and table[2].startswith("| gan | float32 | false | 8 | ")


def test_a_bad_script_value_is_a_usage_error_before_any_work(tmp_path):
    # One subprocess (TensorFlow's import dominates); the parsers' messages
    # for every flag are tested in process above.
    out = tmp_path / "bench.json"
    proc = _script("--models=gan", "--precisions=fp32,fp8", f"--json_out={out}")
    assert proc.returncode != 0
    assert "--precisions has an unknown precision, 'fp8'. Valid: float32, mixed_bfloat16, mixed_float16" in proc.stderr
    assert "Received: --precisions=['fp32', 'fp8']" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()


@pytest.mark.slow  # the fast twin: tests/run/benchmark/test_kernel_ceiling.py, in process
def test_ceiling_mode_end_to_end_reports_the_gans_kernel_ceiling(tmp_path):
    out = tmp_path / "ceiling.json"
    proc = _script(
        "--mode=ceiling",
        "--models=gan",
        "--precisions=fp32,bf16",
        "--batch_sizes=8",
        "--warmup_steps=1",
        "--steps=2",
        "--repeats=1",
        f"--json_out={out}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = json.loads(out.read_text())
    assert (row["model"], row["precision"], row["batch_size"]) == ("gan", "mixed_bfloat16", 8)
    assert row["ceiling_ratio"] == pytest.approx(row["kernel_ms_float32"] / row["kernel_ms"])
    assert row["of_ceiling"] == pytest.approx(row["measured_ratio"] / row["ceiling_ratio"])
    assert "gan float32 batch=8:" in proc.stderr and "gan mixed_bfloat16 batch=8:" in proc.stderr
    table = [line for line in proc.stdout.splitlines() if line.startswith("|")]
    assert table[1].startswith("|---") and table[2].startswith("| gan | mixed_bfloat16 | 8 | ")
    assert table[3].startswith("| op type | float32 ms | mixed_bfloat16 ms |")
    assert "gan mixed_bfloat16 batch=8: kernel time per step by op type" in proc.stdout and row["ops"]
    # This CPU's kernels, each 16-bit type against float32, after the models' tables.
    assert "| kernel | float32 ms | bfloat16 ms | float16 ms | bfloat16 / float32 | float16 / float32 |" in proc.stdout


def test_kernels_mode_times_this_cpus_16_bit_kernels_and_prints_the_notes(tmp_path):
    out = tmp_path / "kernels.json"
    proc = _script("--mode=kernels", f"--json_out={out}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(out.read_text())
    assert set(record["ms"]) == {
        "matmul",
        "conv2d",
        "conv2d d/input",
        "conv2d d/filter",
        "depthwise",
        "depthwise d/input",
        "depthwise d/filter",
        "maxpool d/input",
        "avgpool d/input",
        "batchnorm d/input",
        "tanh",
        "tanh d/input",
        "relu6",
        "relu6 d/input",
        "sub",
        "random uniform",
        "cast to float32",
        "cast from float32",
    }
    casts = {"cast to float32", "cast from float32"}  # of a 16-bit type: no float32 column
    assert all(set(row) == {"float32", "bfloat16", "float16"} for k, row in record["ms"].items() if k not in casts)
    assert all(set(record["ms"][k]) == {"bfloat16", "float16"} for k in casts)
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + 18 and rows[1].startswith("| matmul | ")
    notes = [line for line in proc.stdout.splitlines() if line.startswith("note: ")]
    assert [note.split()[1] for note in notes] == ["bfloat16", "float16"]


def test_ceiling_mode_without_a_16_bit_precision_is_a_usage_error():
    proc = _script("--mode=ceiling", "--models=gan", "--precisions=fp32")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "The ceiling mode compares a 16-bit precision with float32" in proc.stderr
    assert "Received: --precisions=('float32',)" in proc.stderr or "Received: precisions=('float32',)" in proc.stderr


@pytest.mark.slow  # the fast twin: tests/run/benchmark/test_resident_memory.py
def test_resident_mode_end_to_end_measures_each_row_in_one_process(tmp_path):
    out = tmp_path / "resident.json"
    proc = _script("--mode=resident", *TINY_ROW, f"--json_out={out}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert [(r["model"], r["precision"], r["xla"], r["batch_size"], r["run"]) for r in rows] == [
        ("gan", "float32", False, 8, 1),
        ("gan", "float32", False, 8, 2),
    ]
    from tfmp.run import benchmark

    assert list(rows[0]) == [
        field.name for field in dataclasses.fields(benchmark.ResidentRecord)
    ]  # exact: see its tests
    # The second run's row starts where the first left off, in the same process.
    assert rows[1]["left_behind_mb"] == pytest.approx(rows[1]["retained_mb"] - rows[0]["retained_mb"])
    assert rows[1]["peak_host_mb"] > rows[0]["retained_mb"]
    assert proc.stderr.count("gan float32 xla=false batch=8 (run 1/2): peak RSS") == 1
    table = [line for line in proc.stdout.splitlines() if line.startswith("|")]
    assert len(table) == 4 and table[2].startswith("| gan | float32 | false | 8 | 1 | ")


def test_a_memory_budget_without_a_known_unit_is_a_usage_error_naming_it(tmp_path):
    proc = _script("--mode=max_batch", "--models=gan", "--precisions=fp32", "--xla=false", "--memory_budget=2 gigs")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "--memory_budget: A memory size is a number and a unit" in proc.stderr
    assert "Received: '2 gigs'" in proc.stderr


# Before a release (`-m sweep`): nine trial processes, 2.5 minutes. The twins: the slow
# tests/run/benchmark/test_largest_batch.py (real trials of a tiny model) and the usage error above.
@pytest.mark.sweep
def test_max_batch_mode_end_to_end_finds_a_batch_that_fits_and_one_above_that_does_not(tmp_path):
    out = tmp_path / "max_batch.json"
    flags = ("--models=gan", "--precisions=fp32", "--xla=false", "--batch_sizes=8", "--memory_budget=64MiB")
    proc = _script("--mode=max_batch", *flags, f"--json_out={out}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = json.loads(out.read_text())
    assert (row["model"], row["precision"], row["budget_mb"], row["allocator"]) == ("gan", "float32", 64.0, "CPU:0 BFC")
    assert row["peak_mb"] <= 64.0 and row["ratio_to_float32"] == 1.0
    assert f"gan float32 xla=false batch={row['batch_size']}: fits" in proc.stderr
    if row["next_tried"] is not None:  # the search may end on its trial limit before a batch fails
        assert row["next_tried"] > row["batch_size"]
        assert f"gan float32 xla=false batch={row['next_tried']}: does not fit" in proc.stderr
    table = [line for line in proc.stdout.splitlines() if line.startswith("|")]
    assert len(table) == 3 and table[2].startswith("| gan | float32 | false | 64.0 | CPU:0 BFC | ")
