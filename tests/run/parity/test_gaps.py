"""Tests for tfmp/run/parity/gaps.py and table.py: paired differences to float32, and their table."""

import math

import pytest

from tfmp.run import parity


def _record(arm, seed, accuracy, loss=0.5, skipped=0, scale=None, fold=0):
    precision = "float32" if arm.startswith("float32") else arm
    return parity.ParityRecord(arm, precision, seed, fold, accuracy, loss, skipped, scale)


def test_paired_gaps_are_per_unit_differences_in_points_and_nats():
    records = [
        _record("float32", 0, 0.875, 0.25),
        _record("mixed_float16", 0, 0.8125, 0.5, 7, 256.0),
        _record("float32", 1, 0.75, 0.5),
        _record("mixed_float16", 1, 0.8125, 0.25, 6, 512.0),
        _record("float32", 1, 0.5, 0.5, fold=1),
        _record("mixed_float16", 1, 0.5, 0.5, 7, 256.0, fold=1),
        _record("mixed_bfloat16", 0, 0.875),  # one unit only
    ]
    gaps = parity.paired_gaps(records)
    fp16 = gaps["mixed_float16"]
    assert fp16.units == ((0, 0), (1, 0), (1, 1)) and fp16.accuracy.differences == (-6.25, 6.25, 0.0)
    assert fp16.accuracy.mean == 0.0 and fp16.accuracy.std == 6.25
    assert fp16.accuracy.stderr == pytest.approx(6.25 / math.sqrt(3))
    assert fp16.accuracy.interval == pytest.approx(
        (-4.303 * 6.25 / math.sqrt(3), 4.303 * 6.25 / math.sqrt(3)), rel=1e-3
    )
    assert fp16.loss.differences == (0.25, -0.25, 0.0)
    bf16 = gaps["mixed_bfloat16"]
    assert bf16.accuracy.differences == (0.0,) and math.isnan(bf16.accuracy.std)
    table = parity.parity_table(records).splitlines()
    assert table[0] == "| seed | fold | float32 | mixed_float16 | mixed_bfloat16 |"
    assert table[2] == "| 0 | 0 | 0.8750 | 0.8125 (7 skipped, scale 256) | 0.8750 |"
    assert table[4] == "| 1 | 1 | 0.5000 | 0.5000 (7 skipped, scale 256) | - |"
    assert "| mixed_float16 | 3 | +0.00 | 3.61 | -15.53..+15.53 | +0.0000 | 0.1443 | -0.6210..+0.6210 |" in table
    assert "| mixed_bfloat16 | 1 | +0.00 | n/a | n/a..n/a | +0.2500 | n/a | n/a..n/a |" in table
