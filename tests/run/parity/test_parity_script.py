"""Tests for scripts/parity.py: the table, the records, and refused flags."""

import json
import math
import os
import sys

import pytest
import script_server

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
FAMILIES = os.path.join(ROOT, "tests", "families.py")


def _script(*flags, timeout=600):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    return script_server.run(
        [sys.executable, os.path.join(ROOT, "scripts", "parity.py"), *flags],
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )


def _check_the_table_and_records(proc, out, logdir):
    """What a parity run of seed 5, float32 against float16 over two epochs (`--average_last=2`), prints and writes.

    Returns the records.
    """
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert any(line.startswith("seed 5: every arm starts from the same weights and batch order (") for line in lines)
    records = json.loads(out.read_text())
    assert [(r["arm"], r["seed"]) for r in records] == [("float32", 5), ("mixed_float16", 5)]
    for r in records:
        assert set(r) == {
            "arm",
            "precision",
            "seed",
            "fold",
            "val_accuracy",
            "val_loss",
            "skipped_steps",
            "final_loss_scale",
            "accuracy_by_epoch",
            "loss_by_epoch",
            "seconds",
        }
        assert 0 <= r["val_accuracy"] <= 1 and math.isfinite(r["val_loss"]) and r["seconds"] > 0
        assert len(r["accuracy_by_epoch"]) == len(r["loss_by_epoch"]) == 2
        assert r["val_accuracy"] == pytest.approx(sum(r["accuracy_by_epoch"]) / 2)  # --average_last=2
        assert r["val_loss"] == pytest.approx(sum(r["loss_by_epoch"]) / 2)
    assert records[0]["final_loss_scale"] is None and records[0]["skipped_steps"] == 0
    assert records[1]["final_loss_scale"] * 2 ** records[1]["skipped_steps"] == 2**15  # one halving per skip
    assert lines.index("| seed | fold | float32 | mixed_float16 |") > 0
    gap = 100 * (records[1]["val_accuracy"] - records[0]["val_accuracy"])
    assert any(line.startswith(f"| mixed_float16 | 1 | {gap:+.2f} | n/a |") for line in lines), lines
    assert sorted(os.listdir(logdir / "sweep")) == ["float32_seed5", "mixed_float16_seed5"]
    return records


_FLAGS = ("--seeds=5", "--precisions=fp16,float32", "--epochs=2", "--average_last=2", "--steps_per_epoch=1")


# Before a release (`-m sweep`): MobileNetV2 traced twice, 1.5-2 minutes; the fast twin below takes a task of its own.
@pytest.mark.sweep
def test_script_prints_the_table_and_writes_the_records(tmp_path):
    out = tmp_path / "parity.json"
    proc = _script(
        *_FLAGS,
        "--folds=1",
        "--lr_warmup_steps=1",
        "--batch_size=8",
        f"--logdir={tmp_path}",
        "--run_name=sweep",
        f"--json_out={out}",
    )
    records = _check_the_table_and_records(proc, out, tmp_path)
    assert [r["fold"] for r in records] == [0, 0]


def test_script_with_a_task_prints_the_table_and_writes_the_records(tmp_path):
    out = tmp_path / "parity.json"
    proc = _script(
        f"--task={FAMILIES}:CNN_TASK",
        *_FLAGS,
        "--batch_size=8",
        f"--logdir={tmp_path}",
        "--run_name=sweep",
        f"--json_out={out}",
    )
    _check_the_table_and_records(proc, out, tmp_path)


@pytest.mark.parametrize(
    "flag, expected",
    [
        ("--seeds=0,one", "Received: 'one'"),
        ("--precisions=float32,fp8", "unknown precision, 'fp8'"),
        ("--fp16_initial_scales=256,big", "Received: 'big'"),
        ("--folds=0", "folds=0"),
    ],
)
def test_script_refuses_bad_flags_naming_the_value(flag, expected, tmp_path):
    proc = _script(flag, f"--logdir={tmp_path}", "--epochs=1", "--steps_per_epoch=1")
    assert proc.returncode != 0
    assert expected in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and not os.listdir(tmp_path)
