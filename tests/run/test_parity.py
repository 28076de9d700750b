"""Tests for tfmp/run/parity.py and scripts/parity.py: paired runs of the classifier over seeds."""

import dataclasses
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from tfmp.run import parity, training

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Tiny but real: the embedded digits, a few steps of the narrowest MobileNetV2.
TINY = dataclasses.replace(parity.DEFAULT_CLASSIFIER, batch_size=8, epochs=2, steps_per_epoch=3)


def _script(*flags, timeout=600):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "parity.py"), *flags],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )


# --- the paired design --------------------------------------------------------------


def test_every_precision_starts_from_the_same_weights_and_batches(tmp_path):
    config = dataclasses.replace(TINY, seed=3, logdir=str(tmp_path))
    starts = {p: parity.paired_start(config, p) for p in ("float32", "mixed_float16", "mixed_bfloat16")}
    reference = starts["float32"]
    assert len(reference.batches) == 2 * 3  # epochs x steps, the whole run
    assert len(set(reference.batches[:3])) == 3 and reference.batches[:3] != reference.batches[3:]  # reshuffled
    for precision, start in starts.items():
        assert all(w.dtype == np.float32 for w in start.weights), precision
        assert len(start.weights) == len(reference.weights)
        for ours, theirs in zip(start.weights, reference.weights):
            np.testing.assert_array_equal(ours, theirs, err_msg=precision)
        assert start.batches == reference.batches, precision
        assert start.digest() == reference.digest()
    # The check has teeth: another seed starts elsewhere.
    other = parity.paired_start(dataclasses.replace(config, seed=4), "mixed_float16")
    assert other.digest() != reference.digest() and other.batches != reference.batches


# --- the summary -----------------------------------------------------------------------


def _record(precision, seed, accuracy, skipped=0, scale=None):
    return parity.ParityRecord(precision, seed, accuracy, 0.5, skipped, scale)


def test_paired_gaps_are_per_seed_differences_in_points():
    records = [
        _record("float32", 0, 0.875),
        _record("mixed_float16", 0, 0.8125, 7, 256.0),
        _record("float32", 1, 0.75),
        _record("mixed_float16", 1, 0.8125, 6, 512.0),
        _record("float32", 2, 0.5),
        _record("mixed_float16", 2, 0.5, 7, 256.0),
        _record("mixed_bfloat16", 0, 0.875),  # seed 0 only
    ]
    gaps = parity.paired_gaps(records)
    fp16 = gaps["mixed_float16"]
    assert fp16.seeds == (0, 1, 2) and fp16.differences == (-6.25, 6.25, 0.0)
    assert fp16.mean == 0.0 and fp16.std == 6.25 and fp16.stderr == pytest.approx(6.25 / math.sqrt(3))
    assert (fp16.min, fp16.max) == (-6.25, 6.25)
    bf16 = gaps["mixed_bfloat16"]
    assert bf16.differences == (0.0,) and math.isnan(bf16.std)
    table = parity.parity_table(records).splitlines()
    assert table[0] == "| seed | float32 | mixed_float16 | mixed_bfloat16 |"
    assert table[2] == "| 0 | 0.8750 | 0.8125 (7 skipped, scale 256) | 0.8750 |"
    assert table[4] == "| 2 | 0.5000 | 0.5000 (7 skipped, scale 256) | - |"
    assert "| mixed_float16 | 3 | +0.00 | 6.25 | 3.61 | -6.25..+6.25 |" in table
    assert "| mixed_bfloat16 | 1 | +0.00 | n/a | n/a | +0.00..+0.00 |" in table


@pytest.mark.parametrize(
    "change, message",
    [
        ({"seeds": ()}, "seeds=()"),
        ({"seeds": (0, 0)}, "seeds=(0, 0)"),
        ({"seeds": (-1,)}, "seed=-1"),
        ({"precisions": ("mixed_float16", "mixed_bfloat16")}, "precisions=('mixed_float16', 'mixed_bfloat16')"),
        ({"precisions": ("float32",)}, "precisions=('float32',)"),
        ({"precisions": ("float32", "fp8")}, "precision='fp8'"),
        ({"precisions": ("float32", "auto")}, "precision='auto'"),
        ({"precisions": ("float32", "fp16", "mixed_float16")}, "given twice"),
    ],
)
def test_config_refuses_bad_values_naming_them(change, message, tmp_path):
    config = dataclasses.replace(
        parity.ParityConfig(classifier=dataclasses.replace(TINY, logdir=str(tmp_path))), **change
    )
    with pytest.raises(training.ConfigError, match="Received") as error:
        config.validate()
    assert message in str(error.value)


# --- the script --------------------------------------------------------------------------


def test_script_prints_the_table_and_writes_the_records(tmp_path):
    out = tmp_path / "parity.json"
    proc = _script(
        "--seeds=5",
        "--precisions=fp16,float32",
        "--epochs=1",
        "--steps_per_epoch=1",
        "--batch_size=8",
        f"--logdir={tmp_path}",
        "--run_name=sweep",
        f"--json_out={out}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert any(
        line.startswith("seed 5: every precision starts from the same weights and batch order (") for line in lines
    )
    records = json.loads(out.read_text())
    assert [(r["precision"], r["seed"]) for r in records] == [("float32", 5), ("mixed_float16", 5)]  # float32 first
    for r in records:
        assert set(r) == {"precision", "seed", "val_accuracy", "val_loss", "skipped_steps", "final_loss_scale"}
        assert 0 <= r["val_accuracy"] <= 1 and math.isfinite(r["val_loss"])
    assert records[0]["final_loss_scale"] is None and records[0]["skipped_steps"] == 0
    assert records[1]["final_loss_scale"] * 2 ** records[1]["skipped_steps"] == 2**15  # one halving per skip
    assert lines.index("| seed | float32 | mixed_float16 |") > 0
    gap = 100 * (records[1]["val_accuracy"] - records[0]["val_accuracy"])
    assert any(line.startswith(f"| mixed_float16 | 1 | {gap:+.2f} | n/a | n/a |") for line in lines), lines
    assert sorted(os.listdir(tmp_path / "sweep")) == ["float32_seed5", "mixed_float16_seed5"]


@pytest.mark.parametrize(
    "flag, expected",
    [
        ("--seeds=0,one", "Received: 'one'"),
        ("--precisions=float32,fp8", "precision='fp8'"),
    ],
)
def test_script_refuses_bad_flags_naming_the_value(flag, expected, tmp_path):
    proc = _script(flag, f"--logdir={tmp_path}", "--epochs=1", "--steps_per_epoch=1")
    assert proc.returncode != 0
    assert expected in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and not os.listdir(tmp_path)


# --- the benchmark itself (slow) ----------------------------------------------------------

# Spread (sample standard deviation, accuracy points) of the paired difference between two float32 runs
# that differ only in rounding: fused against Keras's BatchNormalization, same seed, weights and batches,
# seeds 0-9 (docs/NUMERICS.md: 3.23). A rounding-level change of the arithmetic moves this training's final
# accuracy by this much, so it is the noise any precision's paired difference carries.
ROUNDING_SPREAD = 3.2
TARGET_GAP = 1.0  # points: the parity target over the benchmark's 5 seeds (docs/NUMERICS.md)
SLOW_SEEDS = (0, 1, 2)


@pytest.mark.slow
def test_mixed_precision_keeps_float32_accuracy_in_paired_runs(tmp_path):
    """MobileNetV2 on the embedded digits, 8 epochs, seeds 0-2: float16 and bfloat16 against float32.

    The benchmark's default run (`tfmp-parity`) at 3 of its 5 seeds (about
    9 minutes on an idle 2-core CPU). The bound is reasoned, not fitted:
    with no real gap, each seed's paired difference is noise of spread
    `ROUNDING_SPREAD` (two float32 runs that differ only in rounding
    disagree that much), so the mean over n seeds has standard error
    `ROUNDING_SPREAD / sqrt(n)`. The test fails when the mean gap is more
    than 3 such standard errors below the 1-point target: a false alarm
    has probability about 0.1% if the true gap is within the target, while
    a real loss of about 6.5 points or more (for instance float16 normalising
    in half, or a scale that stays stuck) fails. Smaller gaps are the
    5-seed benchmark's to resolve (docs/NUMERICS.md). float32 must first
    reach a meaningful accuracy (chance: 10%).
    """
    config = parity.ParityConfig(
        classifier=dataclasses.replace(parity.DEFAULT_CLASSIFIER, logdir=str(tmp_path)), seeds=SLOW_SEEDS
    )
    lines = []
    records = parity.run_parity(config, print_fn=lines.append)
    table = parity.parity_table(records)
    print("\n".join(lines) + "\n" + table)
    assert len(records) == 3 * len(SLOW_SEEDS)
    float32 = [r.val_accuracy for r in records if r.precision == "float32"]
    assert sum(float32) / len(float32) >= 0.85, table
    fp16 = [r for r in records if r.precision == "mixed_float16"]
    assert all(r.final_loss_scale >= 1 and r.skipped_steps <= 15 for r in fp16), table  # 2**15 -> 1 is 15 halvings
    bound = TARGET_GAP + 3 * ROUNDING_SPREAD / math.sqrt(len(SLOW_SEEDS))
    for precision, gap in parity.paired_gaps(records).items():
        assert gap.mean >= -bound, f"{precision}: mean paired gap {gap.mean:+.2f} points < -{bound:.2f}\n{table}"
