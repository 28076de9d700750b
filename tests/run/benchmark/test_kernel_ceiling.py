"""Tests for tfmp/run/benchmark/kernel_ceiling.py: the ceiling mode's op times, ratios and slow-op list.

The parsing runs on a hand-built profile with exact durations; the mode runs
end to end on the tiny classifier (tests/run/benchmark/benchmark_tiny.py) under the real
TensorFlow profiler. No test asserts a speed.
"""

import keras
import pytest
from benchmark_tiny import tiny_config, tiny_specs

from tfmp.run import _private_apis, benchmark, reporting
from tfmp.run.benchmark import kernel_ceiling


def _space(events):
    """An XSpace whose host plane holds `events`: (line name, event name, duration in microseconds)."""
    space = _private_apis.xplane_pb2.XSpace()
    plane = space.planes.add(name="/host:CPU")
    ids = {}
    for line_name, event_name, micros in events:
        if event_name not in ids:
            ids[event_name] = len(ids) + 1
            plane.event_metadata[ids[event_name]].name = event_name
        line = next((x for x in plane.lines if x.name == line_name), None) or plane.lines.add(name=line_name)
        line.events.add(metadata_id=ids[event_name], duration_ps=int(micros * 1e6))
    space.planes.add(name="/device:GPU:0").lines.add(name="ignored")  # not a host plane
    return space


def test_op_times_sum_each_op_type_over_threads_and_skip_what_is_not_a_kernel():
    space = _space(
        [
            ("tf_Compute/1", "model/conv/Conv2D:_MklNativeConv2D", 1500),
            ("tf_Compute/2", "model/conv_1/Conv2D:_MklNativeConv2D", 500),
            ("tf_Compute/1", "model/act/Relu:Relu", 250),
            ("tf_Compute/1", "ExecutorState::Process", 9000),  # the executor, around the ops
            ("tf_Compute/2", "StatefulPartitionedCall:StatefulPartitionedCall", 9000),  # a call: its ops count
            ("python3", "Iterator::Root::Prefetch", 300),  # tf.data
            ("python3", "EagerExecute", 100),
        ]
    )
    assert kernel_ceiling.op_times_from_xspace(space) == {"_MklNativeConv2D": 2.0, "Relu": 0.25}


def test_slow_ops_are_those_under_the_threshold_or_16_bit_only_by_their_16_bit_time():
    float32 = {"Conv2D": 10.0, "Tanh": 2.0, "Relu": 1.0, "Tiny": 0.001}
    sixteen = {"Conv2D": 5.0, "Tanh": 2.5, "Relu": 0.95, "Cast": 1.5, "Tiny": 0.001}
    slow = kernel_ceiling._slow_ops(float32, sixteen)
    assert [op.op_type for op in slow] == ["Tanh", "Cast", "Relu"]  # Conv2D speeds up 2x; Tiny is under 1%
    assert slow[0].speedup == 0.8 and slow[1].speedup is None
    assert slow[1].describe() == "Cast 1.5 ms (16-bit only)"
    assert slow[0].describe() == "Tanh 2.0 -> 2.5 ms (0.80x)"


def test_a_ceiling_needs_a_16_bit_precision():
    with pytest.raises(ValueError, match=r"name mixed_bfloat16 or mixed_float16\. Received: precisions=\('fp32',\)"):
        kernel_ceiling.sixteen_bit_precisions(("fp32",))
    assert kernel_ceiling.sixteen_bit_precisions(("bf16", "float32", "fp16")) == ["mixed_bfloat16", "mixed_float16"]


def test_the_ceiling_of_the_tiny_classifier_is_its_float32_kernel_time_over_its_bfloat16_one():
    previous = keras.config.dtype_policy()
    (record,) = benchmark.ceiling(
        tiny_config(models=("tiny",), precisions=("float32", "bf16"), steps=2, repeats=2), tiny_specs()
    )
    assert keras.config.dtype_policy() == previous  # the policy is restored
    assert (record.model, record.precision, record.batch_size) == ("tiny", "mixed_bfloat16", 8)
    for value in (record.step_ms_float32, record.step_ms, record.kernel_ms_float32, record.kernel_ms):
        assert value > 0
    assert record.measured_ratio == record.step_ms_float32 / record.step_ms
    assert record.ceiling_ratio == record.kernel_ms_float32 / record.kernel_ms
    assert record.of_ceiling == pytest.approx(record.measured_ratio / record.ceiling_ratio, rel=1e-12)
    # bfloat16 casts the float32 inputs and weights: a cast is among the 16-bit-only ops unless it is under 1%.
    assert all(op.speedup is None or op.speedup < kernel_ceiling.SLOW_SPEEDUP for op in record.slow_ops)
    row = record.to_json()
    assert list(row)[-2:] == ["slow_ops", "ops"] and isinstance(row["slow_ops"], str)
    assert record.ops and all(op.float32_ms or op.ms for op in record.ops)


def test_the_table_prints_the_ceilings_ratios_with_three_decimals():
    record = kernel_ceiling.CeilingRecord(
        "gan", "mixed_bfloat16", 512, 1258.2, 834.0, 1258.2 / 834.0, 2121.1, 1391.8, 2121.1 / 1391.8, 0.99, []
    )
    row = reporting.markdown_table([record]).splitlines()[2]
    assert row == "| gan | mixed_bfloat16 | 512 | 1258.2 | 834.0 | 1.509 | 2121.1 | 1391.8 | 1.524 | 0.990 | none |"


def test_ops_list_every_op_type_over_1_percent_of_either_step_float32_first():
    float32 = {"Conv2D": 10.0, "Tanh": 2.0, "Tiny": 0.001}
    sixteen = {"Conv2D": 5.0, "Tanh": 2.5, "Cast": 1.5, "Tiny": 0.001}
    ops = kernel_ceiling._ops(float32, sixteen)
    assert [(op.op_type, op.float32_ms, op.ms) for op in ops] == [
        ("Conv2D", 10.0, 5.0),
        ("Tanh", 2.0, 2.5),
        ("Cast", 0.0, 1.5),
    ]
    record = kernel_ceiling.CeilingRecord("m", "mixed_bfloat16", 8, 2.0, 1.0, 2.0, 12.0, 9.0, 12.0 / 9.0, 1.5, [], ops)
    table = record.op_table().splitlines()
    assert table[4] == "| Conv2D | 10.0 | 5.0 | 2.00x | 55.6% |"
    assert table[6] == "| Cast | 0.0 | 1.5 | n/a | 16.7% |"
    assert record.to_json()["ops"][1] == {"op_type": "Tanh", "float32_ms": 2.0, "ms": 2.5, "speedup": 0.8}
    header = reporting.markdown_table([record]).splitlines()[0]
    assert header.strip("| ").split(" | ")[-1] == "slow_ops"  # the list of ops stays in the JSON
