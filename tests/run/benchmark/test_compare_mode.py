"""Tests for tfmp/run/benchmark/compare_mode.py (compare) and the records it returns.

The record, ratio and JSON logic runs on tiny models (a small CNN on 8x8
images and a GAN with widths of 2 to 8, benchmark_tiny.py beside this file), so
nothing big is traced. The settings, the pipeline and the hand-written step
have their own files (tests/run/benchmark/test_*.py). The
script's flags and its end-to-end run are tested in
tests/scripts/test_benchmark_script.py, the table, JSON and plot in
tests/run/test_reporting.py, the memory figures in tests/run/test_memory_meters.py.
No test asserts a speed: timings on a shared CPU are noise.
"""

import dataclasses
import json
import sys
import time

import keras
import numpy as np
import pytest
from benchmark_tiny import (
    BATCH,
    LEAK_MB,
    RESIDENT,
    dying_network,
    leaky_classifier,
    small_classifier,
    tiny_classifier,
    tiny_config,
    tiny_specs,
)
from record_keys import COMPARE_KEYS

import tfmp
from tfmp.models.mobilenet_v2 import cpu_bfloat16_float32_layers
from tfmp.models.small_cnn import build_small_cnn
from tfmp.run import baseline, benchmark, memory_meters, reporting, shipped, tasks
from tfmp.run import config as config_lib
from tfmp.run.benchmark import compare_mode


@pytest.fixture(scope="module")
def records():
    # The tiny classifier only: the GAN's tracing is slow, and its image
    # count is checked on the real GAN by the end-to-end script test.
    return benchmark.compare(tiny_config(models=("tiny",), repeats=3), tiny_specs())


def test_records_have_exactly_the_json_keys_and_types(records):
    assert [(r.model, r.precision) for r in records] == [("tiny", "float32"), ("tiny", "mixed_bfloat16")]
    for record in records:
        row = json.loads(json.dumps(record.to_json()))
        assert list(row) == COMPARE_KEYS
        assert isinstance(row["model"], str) and isinstance(row["precision"], str)
        assert row["xla"] is False and row["batch_size"] == BATCH
        for key in (
            "images_per_sec",
            "step_ms",
            "ratio_to_float32",
            "ratio_to_hand_written",
            "peak_host_mb",
            "images_per_sec_min",
            "images_per_sec_max",
        ):
            assert isinstance(row[key], float) and row[key] > 0, (key, row[key])
        assert row["peak_gpu_mb"] is None  # no GPU here
        assert row["unit"] == "img/s"  # an image classifier
        # Three rounds of the two steps asked for, each row saying how well its figures are known.
        assert (row["steps_per_round"], row["rounds"]) == (2, 3)
        for key in ("images_per_sec_interval", "ratio_to_hand_written_interval"):
            assert isinstance(row[key], float) and row[key] > 0, (key, row[key])
        assert (row["ratio_to_float32_interval"] is None) == (record.precision == "float32")
        # Every path's launches: the trainer's exact skip costs ops beyond plain fit()'s, and no more host reads.
        assert isinstance(row["ratio_to_plain_fit"], float) and row["ratio_to_plain_fit"] > 0
        for path in ("", "hand_written_", "plain_fit_"):
            assert row[f"{path}ops_per_step"] > 10 and row[f"{path}host_reads_per_step"] > 0, path
        assert row["ops_per_step"] > row["hand_written_ops_per_step"]  # the finite check, the counters, the logs
        assert row["host_reads_per_step"] <= row["plain_fit_host_reads_per_step"]


def _dense():
    inputs = keras.Input((4,))
    return keras.Model(inputs, keras.layers.Dense(2, activation="softmax", dtype="float32")(inputs))


def test_a_task_of_your_own_is_measured_in_examples_per_second_and_named_by_the_task():
    rng = np.random.default_rng(0)
    data = (rng.normal(size=(32, 4)).astype(np.float32), rng.integers(0, 2, 32).astype(np.int32))
    config = config_lib.TrainConfig(batch_size=BATCH)
    spec = tasks.SupervisedTask(_dense, data, loss="sparse_categorical_crossentropy", config=config, name="dense")
    lines = []
    (record,) = benchmark.compare(tiny_config(models=("dense",), precisions=("fp32",)), {"dense": spec}, lines.append)
    assert record.model == "dense" and record.unit == "ex/s"
    row = reporting.markdown_table([record]).splitlines()[2]
    assert row.startswith("| dense | float32 | false | 8 | ") and " | ex/s | " in row
    assert f"{record.images_per_sec:.1f} ex/s (hand-written " in lines[0] and "img/s" not in lines[0]


class _Clock:
    """A fake `time.perf_counter` for the benchmark: each reading advances it 1 s, and each trainer step of a
    `_ClockedTask` by its scripted duration, so throughputs are exact numbers known in advance."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        self.now += 1.0
        return self.now

    def __getattr__(self, name):  # the rest of `time`, real
        return getattr(time, name)


class _ClockedTask(shipped.ClassifierTask):
    """The tiny classifier, whose trainer steps take `durations[precision]` seconds of `clock` each, in order."""

    def __init__(self, clock, durations):
        super().__init__(
            config_lib.ClassifierConfig(batch_size=BATCH),
            "tiny",
            network=lambda shape, classes: build_small_cnn(shape, classes, width=4),
            image_shape=(8, 8, 3),
        )
        self.clock, self.durations = clock, durations

    def build(self, precision, *args, **kwargs):
        built = super().build(precision, *args, **kwargs)
        trainer, durations, make = built.trainer, self.durations[precision], built.trainer.make_train_function

        def make_train_function(force=False):
            make(force)
            step = trainer.train_function
            if not hasattr(step, "durations"):

                def clocked(iterator):
                    outputs = step(iterator)
                    self.clock.now += durations.pop(0)
                    return outputs

                clocked.durations = durations
                trainer.train_function = clocked
            return trainer.train_function

        trainer.make_train_function = make_train_function
        return built


@pytest.fixture(scope="module")
def clocked_records():
    """float32 and bfloat16 rows timed by `_Clock`.

    With `steps=2` (16 images a round) and 1 s per clock reading, a round takes 1 s plus its steps' durations:
    float32's rounds 2, 4 and 1 s (8, 4 and 16 img/s), bfloat16's 1 s each (16 img/s). The first duration
    is the warm-up `fit()` step's.
    """
    durations = {"float32": [0.0, 0.5, 0.5, 1.5, 1.5, 0.0, 0.0], "mixed_bfloat16": [0.0] * 7}
    return _clocked_compare(durations, repeats=3)


def _clocked_compare(durations, **changes):
    """`benchmark.compare` of the tiny classifier, float32 and bfloat16, timed by `_Clock` and `durations`."""
    clock = _Clock()
    with pytest.MonkeyPatch.context() as patch:
        # Wherever the benchmark's modules read the clock (`tfmp.run.benchmark` and any submodule).
        timing = [
            module
            for name, module in list(sys.modules.items())
            if name.split(".")[:3] == benchmark.__name__.split(".") and getattr(module, "time", None) is time
        ]
        assert timing, "no benchmark module reads time.perf_counter: update _Clock"
        for module in timing:
            patch.setattr(module, "time", clock)
        # No plain fit() path: these tests script the trainer's and the hand-written step's rounds only, and
        # the plain fit() path is measured by test_records_have_exactly_the_json_keys_and_types.
        patch.setattr(baseline, "plain_fit_model", lambda *args: None)
        # The launches are counted by running more steps than the scripted ones: not here.
        records = benchmark.compare(
            tiny_config(models=("tiny",), steps=2, count_launches=False, **changes),
            {"tiny": _ClockedTask(clock, durations)},
        )
    assert durations == {"float32": [], "mixed_bfloat16": []}  # every scripted step ran
    return records


def test_runs_give_each_ratio_as_the_median_over_the_runs_with_their_spread():
    # runs=2, one round each. The hand-written step's rounds take 1 s (16 img/s); the trainer's 1 s plus its
    # two steps (after the warm-up fit() step): float32 2 s then 1 s (8, 16 img/s), bfloat16 1 s then 4 s
    # (16, 4 img/s). Paired ratios to the hand-written step: float32 0.5 then 1.0, bfloat16 1.0 then 0.25;
    # bfloat16 over the same run's float32: 2.0 then 0.25.
    durations = {"float32": [0.0, 0.5, 0.5, 0.0, 0.0, 0.0], "mixed_bfloat16": [0.0, 0.0, 0.0, 0.0, 1.5, 1.5]}
    float32, bf16 = _clocked_compare(durations, repeats=1, runs=2)
    assert (float32.runs, bf16.runs) == (2, 2)
    assert (float32.ratio_to_hand_written, float32.ratio_to_hand_written_min, float32.ratio_to_hand_written_max) == (
        0.75,
        0.5,
        1.0,
    )
    assert (bf16.ratio_to_hand_written_min, bf16.ratio_to_hand_written_max) == (0.25, 1.0)
    assert (bf16.ratio_to_float32, bf16.ratio_to_float32_min, bf16.ratio_to_float32_max) == (1.125, 0.25, 2.0)
    assert (float32.ratio_to_float32, float32.ratio_to_float32_min, float32.ratio_to_float32_max) == (1.0, 1.0, 1.0)
    # The throughput's median and spread pool every run's rounds.
    assert (bf16.images_per_sec, bf16.images_per_sec_min, bf16.images_per_sec_max) == (10.0, 4.0, 16.0)


def test_the_hand_written_ratio_pairs_each_round_with_its_neighbour():
    # Rounds of 8, 4 and 16 img/s against the hand-written step's 16, 16, 16: paired 0.5, 0.25, 1.0 (median
    # 0.5), the same as median over median here; one run, so the spread is the ratio itself.
    (float32,) = _clocked_compare(
        {"float32": [0.0, 0.5, 0.5, 1.5, 1.5, 0.0, 0.0], "mixed_bfloat16": []}, repeats=3, precisions=("float32",)
    )
    assert (float32.ratio_to_hand_written, float32.ratio_to_hand_written_min) == (0.5, 0.5)
    assert float32.runs == 1


def test_the_spread_is_the_slowest_and_fastest_of_the_repeats_around_their_median(clocked_records):
    float32, _ = clocked_records
    # Rounds of 8, 4 and 16 img/s: the median is the first round, the extremes the other two.
    assert (float32.images_per_sec_min, float32.images_per_sec, float32.images_per_sec_max) == (4.0, 8.0, 16.0)


def test_ratio_to_float32_is_the_division_of_the_measured_throughputs(clocked_records):
    float32, bf16 = clocked_records
    assert (float32.images_per_sec, bf16.images_per_sec) == (8.0, 16.0)
    assert float32.ratio_to_float32 == 1.0
    assert bf16.ratio_to_float32 == 2.0


def test_a_classifier_step_counts_batch_images(records):
    for record in records:
        assert record.images_per_sec * record.step_ms / 1000 == pytest.approx(BATCH, rel=1e-9)


def test_ratio_to_float32_is_null_without_a_float32_row_and_the_policy_is_restored():
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        rows = benchmark.compare(tiny_config(models=("tiny",), precisions=("fp16",)), tiny_specs())
        assert [(r.precision, r.ratio_to_float32) for r in rows] == [("mixed_float16", None)]
        assert rows[0].to_json()["ratio_to_float32"] is None
        assert keras.config.dtype_policy().name == "mixed_bfloat16"
    finally:
        keras.config.set_dtype_policy(previous)


def test_the_policy_is_restored_when_a_row_fails():
    class Broken(shipped.ClassifierTask):
        def build(self, *args, **kwargs):
            assert keras.config.dtype_policy().name == "mixed_float16"
            raise RuntimeError("build failed")

    specs = {"broken": Broken(config_lib.ClassifierConfig(), "broken")}
    with pytest.raises(RuntimeError, match="build failed"):
        benchmark.compare(tiny_config(models=("broken",), precisions=("mixed_float16",)), specs)
    assert keras.config.dtype_policy().name == "float32"


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"steps": 0}, "steps=0"),
        ({"warmup_steps": 0}, "warmup_steps=0"),
        ({"repeats": 0}, "repeats=0"),
        ({"resnet_input_size": 16}, "resnet_input_size=16"),
        ({"dataset": "imagenet"}, "dataset='imagenet'"),
        ({"models": ("tiny", "huge")}, "unknown model, 'huge'"),
        ({"isolate": "yes"}, "isolate='yes'"),
        ({"isolate": True}, "'tiny'.*isolate=False"),  # its network is a lambda: it cannot go to a process
    ],
)
def test_config_errors_name_the_value_before_any_work(changes, message):
    with pytest.raises(ValueError, match=message):
        benchmark.compare(tiny_config(**changes), tiny_specs())


# Isolated rows start a fresh process each. The fast twins: a row whose process dies (below) and
# tests/run/test_memory_meters.py's fresh process reading the CPU allocator.
@pytest.mark.slow
def test_isolated_rows_measure_their_own_memory_not_what_earlier_rows_left():
    # Two identical rows whose network leaves LEAK_MB resident, as TensorFlow
    # leaves memory of every model a process trains.
    specs = {name: leaky_classifier(name) for name in ("leaky_a", "leaky_b")}
    config = tiny_config(models=tuple(specs), precisions=("float32",))
    try:
        shared = benchmark.compare(config, specs)
    finally:
        RESIDENT.clear()
    isolated = benchmark.compare(dataclasses.replace(config, isolate=True), specs)
    # In one process the second row's peak holds the first row's leftovers ...
    assert shared[1].peak_host_mb - shared[0].peak_host_mb > 0.75 * LEAK_MB
    # ... each in a process of its own, the same row measures the same.
    assert abs(isolated[1].peak_host_mb - isolated[0].peak_host_mb) < 0.25 * LEAK_MB
    assert isolated[0].peak_host_mb > LEAK_MB and not RESIDENT  # built and measured elsewhere
    assert [r.model for r in isolated] == ["leaky_a", "leaky_b"] and all(r.images_per_sec > 0 for r in isolated)


@pytest.mark.slow  # the fast twins: as the test above
def test_isolated_rows_read_the_cpu_bfc_allocator_in_their_own_process_unless_told_not_to():
    specs = {"small": small_classifier()}
    config = tiny_config(models=("small",), isolate=True)
    float32, bfloat16 = benchmark.compare(config, specs)
    for record in (float32, bfloat16):
        assert record.allocator == "CPU:0 BFC"
        assert 0 < record.step_mb <= record.peak_mb
    assert float32.peak_ratio_to_float32 == 1.0 and float32.step_ratio_to_float32 == 1.0
    assert bfloat16.step_ratio_to_float32 == pytest.approx(bfloat16.step_mb / float32.step_mb)
    row = reporting.markdown_table([float32]).splitlines()[2]
    assert f" | CPU:0 BFC | {float32.peak_mb:.1f} | {float32.step_mb:.1f} | 1.000 | 1.000 | " in row
    (plain,) = benchmark.compare(dataclasses.replace(config, precisions=("fp32",), cpu_bfc=False), specs)
    # TensorFlow's default CPU allocator keeps no statistics, unless TensorFlow loaded its CUDA platform
    # (a CUDA toolkit without a GPU): asked of this process's allocator, as the row's process asks its own.
    if memory_meters.AllocatorMemory.of_this_process() is None:
        assert plain.allocator is None and plain.peak_mb is None and plain.step_ratio_to_float32 is None
    else:
        assert plain.allocator == "CPU:0 BFC" and plain.peak_mb >= 0  # its figures are what that allocator counts


def test_a_row_whose_process_dies_is_an_error_naming_the_row():
    spec = shipped.ClassifierTask(
        config_lib.ClassifierConfig(batch_size=BATCH), "dying", network=dying_network, image_shape=(8, 8, 3)
    )
    config = tiny_config(models=("dying",), precisions=("bf16",), isolate=True)
    with pytest.raises(RuntimeError, match="measuring dying mixed_bfloat16 xla=false batch=8 died"):
        benchmark.compare(config, {"dying": spec})


def test_rows_apply_the_per_layer_precision_training_applies(monkeypatch):
    # The tiny CNN advises conv2 in float32 for bfloat16 on a CPU, as MobileNetV2 advises its depthwise convs.
    # The rows' trainers are checked, not their plain fit() path (test_records_have_exactly_the_json_keys_and_types).
    monkeypatch.setattr(baseline, "plain_fit_model", lambda *args: None)
    spec = tiny_classifier(auto_float32_layers="conv2$")
    lines = []
    benchmark.compare(tiny_config(models=("tiny",)), {"tiny": spec}, progress=lines.append)
    benchmark.compare(
        tiny_config(models=("tiny",), precisions=("bf16",), float32_layers="none"),
        {"tiny": spec},
        progress=lines.append,
    )
    expected = [
        "tiny float32 xla=false batch=8:",
        "tiny mixed_bfloat16 xla=false batch=8, 1 float32 layers:",
        "tiny mixed_bfloat16 xla=false batch=8:",
    ]
    assert [line.split(" img/s")[0].rsplit(" ", 1)[0] for line in lines] == expected
    with tfmp.precision_scope("bf16"):
        workload = benchmark.build_workload(spec, "mixed_bfloat16", False, hand_written=False)
    assert workload.float32_layers == ("small_cnn/conv2",)
    assert workload.trainer.network.get_layer("conv2").compute_dtype == "float32"
    advice = benchmark.default_specs()["mobilenet_v2"].auto_float32_layers
    assert advice == cpu_bfloat16_float32_layers((32, 32, 3)) and "block_1_depthwise" in advice
    with pytest.raises(ValueError, match=r"not a valid regular expression .*Received: float32_layers='\('"):
        tiny_config(models=("tiny",), float32_layers="(").validate(valid_models=("tiny",))


def test_a_row_times_the_trainer_its_task_builds_for_training(monkeypatch):
    # One code path: each row's trainer is Task.build's, with the row's precision, the config's loss scale
    # (dynamic under float16) and the row's batch size, seed and schedule length.
    built = []
    build = shipped.ClassifierTask.build

    def recording_build(self, precision, loss_scale, jit_compile, steps_per_epoch=1, split=None):
        result = build(self, precision, loss_scale, jit_compile, steps_per_epoch, split)
        built.append(
            (
                self.name,
                self.config.batch_size,
                self.config.seed,
                precision,
                loss_scale,
                steps_per_epoch,
                result.trainer,
            )
        )
        return result

    monkeypatch.setattr(shipped.ClassifierTask, "build", recording_build)
    timed = []
    monkeypatch.setattr(
        compare_mode,
        "trainer_driver",
        lambda workload, *args, **kwargs: timed.append(workload.trainer) or _FakeDriver(),
    )
    monkeypatch.setattr(compare_mode, "hand_written_driver", lambda *args, **kwargs: _FakeDriver())
    monkeypatch.setattr(compare_mode, "fit_driver", lambda *args, **kwargs: _FakeDriver())
    monkeypatch.setattr(compare_mode, "time_rounds", lambda drivers, steps, rule, on_round=None: 1)
    benchmark.compare(tiny_config(models=("tiny",), precisions=("fp16",), seed=3, count_launches=False), tiny_specs())
    steps = 1 + 2 * 1  # warm-up + steps x repeats of tiny_config
    assert [row[:-1] for row in built] == [("tiny", BATCH, 3, "mixed_float16", "dynamic", steps)]
    assert timed == [built[0][-1]]


class _FakeDriver:
    images_per_sec = [1.0]
    median_images_per_sec = 1.0
    peak_mb = None
    step_mb = None
