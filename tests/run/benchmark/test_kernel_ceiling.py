"""Tests for tfmp/run/benchmark/kernel_ceiling.py: the ceiling mode's op times, ratios and slow-op list.

The parsing runs on a hand-built profile with exact durations; the mode runs
end to end on the tiny classifier (tests/run/benchmark/benchmark_tiny.py) under the real
TensorFlow profiler. No test asserts a speed.
"""

import keras
import pytest
from benchmark_tiny import tiny_config, tiny_specs

from tfmp import cpu_kernels
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


# A kernel table whose casts add a fifth of the float32 time of the elementwise kernels (each cast, either way,
# takes a tenth of float32's 1 ms per call); bfloat16's own kernels take 2 ms.
TABLE = cpu_kernels.KernelTimes(
    "a test CPU",
    {
        **{kernel: {"float32": 1.0, "bfloat16": 2.0} for kernel in cpu_kernels.KERNELS},
        "cast to float32": {"bfloat16": 0.1},
        "cast from float32": {"bfloat16": 0.1},
    },
    bfloat16_native=True,
)


def test_the_ceiling_of_the_tiny_classifier_is_its_float32_kernel_time_over_its_bfloat16_one():
    previous = keras.config.dtype_policy()
    (record,) = benchmark.ceiling(
        tiny_config(models=("tiny",), precisions=("float32", "bf16"), steps=2, repeats=2), tiny_specs(), times=TABLE
    )
    assert keras.config.dtype_policy() == previous  # the policy is restored
    assert (record.model, record.precision, record.batch_size) == ("tiny", "mixed_bfloat16", 8)
    for value in (record.step_ms_float32, record.step_ms, record.kernel_ms_float32, record.kernel_ms):
        assert value > 0
    assert record.measured_ratio == record.step_ms_float32 / record.step_ms
    assert record.ceiling_ratio == record.kernel_ms_float32 / record.kernel_ms
    assert record.of_ceiling == pytest.approx(record.measured_ratio / record.ceiling_ratio, rel=1e-12)
    if not cpu_kernels.cpu_has_bfloat16():  # emulated bfloat16 routes nothing: the step is timed once
        assert (record.routed_step_ms, record.routed_ratio) == (record.step_ms, record.measured_ratio)
        assert record.routed_ops == []
    # The routed ceiling: each op at the faster of its bfloat16 time and its float32 time plus casts.
    assert all(op.routed_ms <= op.ms for op in record.ops) and record.routed_kernel_ms <= record.kernel_ms
    assert record.routed_ceiling_ratio == record.kernel_ms_float32 / record.routed_kernel_ms
    assert record.of_routed_ceiling == pytest.approx(record.routed_ratio / record.routed_ceiling_ratio, rel=1e-12)
    # bfloat16 casts the float32 inputs and weights: a cast is among the 16-bit-only ops unless it is under 1%.
    assert all(op.speedup is None or op.speedup < kernel_ceiling.SLOW_SPEEDUP for op in record.slow_ops)
    row = record.to_json()
    assert list(row)[-2:] == ["slow_ops", "ops"] and isinstance(row["slow_ops"], str)
    assert record.ops and all(op.float32_ms or op.ms for op in record.ops)


def test_the_table_prints_the_ceilings_ratios_with_three_decimals():
    record = kernel_ceiling.CeilingRecord(
        *("gan", "mixed_bfloat16", 512, 1258.2, 834.0, 1258.2 / 834.0, 2121.1, 1391.8, 2121.1 / 1391.8, 0.99),
        *(800.0, 1258.2 / 800.0, 1300.0, 2121.1 / 1300.0, 0.96, ["Tanh"], []),
    )
    row = reporting.markdown_table([record]).splitlines()[2]
    assert row == (
        "| gan | mixed_bfloat16 | 512 | 1258.2 | 834.0 | 1.509 | 2121.1 | 1391.8 | 1.524 | 0.990 "
        "| 800.0 | 1.573 | 1300.0 | 1.632 | 0.960 | none |"
    )


def test_ops_list_every_op_type_over_1_percent_of_either_step_float32_first():
    float32 = {"Conv2D": 10.0, "Tanh": 2.0, "Tiny": 0.001}
    sixteen = {"Conv2D": 5.0, "Tanh": 2.5, "Cast": 1.5, "Tiny": 0.001}
    ops = kernel_ceiling._ops(float32, sixteen)
    assert [(op.op_type, op.float32_ms, op.ms) for op in ops] == [
        ("Conv2D", 10.0, 5.0),
        ("Tanh", 2.0, 2.5),
        ("Cast", 0.0, 1.5),
    ]
    record = kernel_ceiling.CeilingRecord(
        *("m", "mixed_bfloat16", 8, 2.0, 1.0, 2.0, 12.0, 9.0, 12.0 / 9.0, 1.5),
        *(1.0, 2.0, 9.0, 12.0 / 9.0, 1.5, [], []),
        ops,
    )
    table = record.op_table().splitlines()
    assert table[4] == "| Conv2D | 10.0 | 5.0 | 5.0 | 2.00x | 55.6% |"
    assert table[6] == "| Cast | 0.0 | 1.5 | 1.5 | n/a | 16.7% |"
    assert record.to_json()["ops"][1] == {
        "op_type": "Tanh",
        "float32_ms": 2.0,
        "ms": 2.5,
        "cast_ms": None,
        "routed_ms": 2.5,
        "speedup": 0.8,
    }
    header = reporting.markdown_table([record]).splitlines()[0]
    assert header.strip("| ").split(" | ")[-1] == "slow_ops"  # the list of ops stays in the JSON


# A profile's op times (ms per step) and what computing each routable op in float32 adds in casts, as a share of its
# float32 time: Tanh and Relu6 stay in bfloat16 (2.1 < 2 + 0.5, 0.9 < 1 + 0.25), TanhGrad and the filter gradient
# (named as oneDNN's kernel, fused with the bias gradient) do not (5 > 2 + 1, 6 > 4 + 1); Conv2D and the casts
# cannot.
FILTER_GRADIENT = "_MklNativeConv2DBackpropFilterWithBias"
FLOAT32 = {"Conv2D": 10.0, "Tanh": 2.0, "TanhGrad": 2.0, "Relu6": 1.0, FILTER_GRADIENT: 4.0}
BFLOAT16 = {"Conv2D": 5.0, "Tanh": 2.1, "TanhGrad": 5.0, "Relu6": 0.9, FILTER_GRADIENT: 6.0}
BFLOAT16["Cast"] = 1.5
SHARES = {"Tanh": 0.25, "TanhGrad": 0.5, "Relu6": 0.25, "Conv2DBackpropFilter": 0.25}


def test_the_routed_ceiling_puts_each_op_at_the_faster_of_its_16_bit_time_and_float32_plus_casts():
    assert sum(BFLOAT16.values()) == 20.5
    assert kernel_ceiling.routed_kernel_ms(FLOAT32, BFLOAT16, SHARES) == 5.0 + 2.1 + 3.0 + 0.9 + 5.0 + 1.5  # 17.5
    assert kernel_ceiling.routed_kernel_ms(FLOAT32, BFLOAT16, {}) == 20.5  # nothing routable: the ceiling's
    ops = {op.op_type: op for op in kernel_ceiling._ops(FLOAT32, BFLOAT16, SHARES)}
    assert (ops["TanhGrad"].cast_ms, ops["TanhGrad"].routed_ms) == (1.0, 3.0)
    assert (ops["Tanh"].routed_ms, ops["Conv2D"].cast_ms, ops["Cast"].routed_ms) == (2.1, None, 1.5)


def test_the_bfloat16_row_profiles_tensorflow_s_own_kernels_and_times_the_routed_step_beside_them(monkeypatch):
    routed = cpu_kernels.Routing(forward=frozenset({("Relu6", "bfloat16")}))
    calls = []

    def profile_step(spec, precision, batch_size, config, own_kernels, profile):
        calls.append((precision, own_kernels, profile))
        if precision == "float32":
            return 100.0, FLOAT32, cpu_kernels.Routing()
        return (80.0, BFLOAT16, routed) if own_kernels else (50.0, {}, routed)

    monkeypatch.setattr(kernel_ceiling, "_profile_step", profile_step)
    monkeypatch.setattr(kernel_ceiling.precision_lib, "visible_gpus", lambda: [])
    # The casts' shares from a kernel table: a tenth of float32's time per cast, each way (TanhGrad casts two in).
    shares = TABLE.cast_shares()
    assert shares["Tanh"] == pytest.approx(0.2) and shares["TanhGrad"] == pytest.approx(0.3)
    (record,) = benchmark.ceiling(tiny_config(models=("tiny",), precisions=("fp32", "bf16")), tiny_specs(), times=TABLE)
    assert calls == [("float32", False, True), ("mixed_bfloat16", True, True), ("mixed_bfloat16", False, False)]
    assert (record.measured_ratio, record.kernel_ms_float32, record.kernel_ms) == (1.25, 19.0, 20.5)
    assert (record.routed_step_ms, record.routed_ratio, record.routed_ops) == (50.0, 2.0, ["Relu6"])
    # TanhGrad at 2 + 0.6, the filter gradient at 4 plus its small casts; the rest at their bfloat16 times.
    filter_gradient = 4.0 * (1 + shares["Conv2DBackpropFilter"])
    assert record.routed_kernel_ms == pytest.approx(5.0 + 2.1 + 2.6 + 0.9 + filter_gradient + 1.5, rel=1e-12)
    assert record.of_routed_ceiling == pytest.approx(2.0 / (19.0 / record.routed_kernel_ms), rel=1e-12)
