"""Tests for tfmp/run/benchmark/modes.py (compare, input_pipeline) and the records they return.

The record, ratio and JSON logic runs on tiny models (a small CNN on 8x8
images and a GAN with widths of 2 to 8, tests/run/benchmark_tiny.py), so
nothing big is traced. The settings, the pipeline and the hand-written step
have their own files (tests/run/test_benchmark_*.py). The
script's flags and its end-to-end run are tested in
tests/scripts/test_benchmark_script.py, the table, JSON and plot in
tests/run/test_reporting.py, the memory figures in tests/run/test_memory.py.
No test asserts a speed: timings on a shared CPU are noise.
"""

import json

import keras
import pytest

import tfmp
from benchmark_tiny import BATCH, tiny_classifier, tiny_config, tiny_specs
from tfmp.models.mobilenet_v2 import cpu_bfloat16_float32_layers
from tfmp.run import benchmark
from tfmp.run import config as config_lib
from tfmp.run import reporting
from tfmp.run import tasks
from tfmp.run.benchmark import modes

KEYS = ["model", "precision", "xla", "batch_size", "images_per_sec", "images_per_sec_min", "images_per_sec_max",
        "step_ms", "ratio_to_float32", "ratio_to_hand_written", "peak_host_mb", "peak_gpu_mb"]


@pytest.fixture(scope="module")
def records():
    # The tiny classifier only: the GAN's tracing is slow, and its image
    # count is checked on the real GAN by the end-to-end script test.
    return benchmark.compare(tiny_config(models=("tiny",), repeats=3), tiny_specs())


def test_records_have_exactly_the_json_keys_and_types(records):
    assert [(r.model, r.precision) for r in records] == [("tiny", "float32"), ("tiny", "mixed_bfloat16")]
    for record in records:
        row = json.loads(json.dumps(record.to_json()))
        assert list(row) == KEYS
        assert isinstance(row["model"], str) and isinstance(row["precision"], str)
        assert row["xla"] is False and row["batch_size"] == BATCH
        for key in ("images_per_sec", "step_ms", "ratio_to_float32", "ratio_to_hand_written", "peak_host_mb",
                    "images_per_sec_min", "images_per_sec_max"):
            assert isinstance(row[key], float) and row[key] > 0, (key, row[key])
        assert row["peak_gpu_mb"] is None  # no GPU here


def test_the_spread_is_the_slowest_and_fastest_of_the_repeats_around_their_median(records):
    for record in records:
        # 3 repeats: the median is one of them, so it lies between the extremes, which differ on a real clock.
        assert record.images_per_sec_min <= record.images_per_sec <= record.images_per_sec_max
        assert record.images_per_sec_min < record.images_per_sec_max


def test_ratio_to_float32_is_the_division_of_the_measured_throughputs(records):
    float32, bf16 = records
    assert float32.ratio_to_float32 == 1.0
    assert bf16.ratio_to_float32 == bf16.images_per_sec / float32.images_per_sec


def test_a_classifier_step_counts_batch_images(records):
    for record in records:
        assert record.images_per_sec * record.step_ms / 1000 == pytest.approx(BATCH, rel=1e-9)


def test_ratio_to_float32_is_null_without_a_float32_row_and_the_policy_is_restored():
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        rows = benchmark.compare(
            tiny_config(models=("tiny",), precisions=("fp16",)), tiny_specs())
        assert [(r.precision, r.ratio_to_float32) for r in rows] == [("mixed_float16", None)]
        assert rows[0].to_json()["ratio_to_float32"] is None
        assert keras.config.dtype_policy().name == "mixed_bfloat16"
    finally:
        keras.config.set_dtype_policy(previous)


def test_the_policy_is_restored_when_a_row_fails():
    class Broken(tasks.ClassifierTask):
        def build(self, *args, **kwargs):
            assert keras.config.dtype_policy().name == "mixed_float16"
            raise RuntimeError("build failed")

    specs = {"broken": Broken(config_lib.ClassifierConfig(), "broken")}
    with pytest.raises(RuntimeError, match="build failed"):
        benchmark.compare(tiny_config(models=("broken",), precisions=("mixed_float16",)), specs)
    assert keras.config.dtype_policy().name == "float32"


def test_input_pipeline_mode_compares_the_real_pipeline_with_synthetic_tensors():
    rows = benchmark.input_pipeline(
        tiny_config(models=("tiny",), precisions=("bf16",), batch_sizes=(128,), steps=3), tiny_specs())
    assert len(rows) == 1
    row = rows[0].to_json()
    assert list(row) == ["model", "dataset", "precision", "xla", "batch_size", "pipeline_images_per_sec",
                         "synthetic_images_per_sec", "ratio"]
    assert (row["model"], row["dataset"], row["precision"], row["batch_size"]) == (
        "tiny", "digits", "mixed_bfloat16", 128)
    assert row["ratio"] == row["pipeline_images_per_sec"] / row["synthetic_images_per_sec"]
    assert reporting.markdown_table(rows).count("\n") == 2


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"steps": 0}, "steps=0"),
        ({"warmup_steps": 0}, "warmup_steps=0"),
        ({"repeats": 0}, "repeats=0"),
        ({"resnet_input_size": 16}, "resnet_input_size=16"),
        ({"dataset": "imagenet"}, "dataset='imagenet'"),
        ({"models": ("tiny", "huge")}, "model='huge'"),
    ],
)
def test_config_errors_name_the_value_before_any_work(changes, message):
    with pytest.raises(ValueError, match=message):
        benchmark.compare(tiny_config(**changes), tiny_specs())


def test_rows_apply_the_per_layer_precision_training_applies():
    # The tiny CNN advises conv2 in float32 for bfloat16 on a CPU, as MobileNetV2 advises its depthwise convs.
    spec = tiny_classifier(cpu_bfloat16_float32_layers="conv2$")
    lines = []
    benchmark.compare(tiny_config(models=("tiny",)), {"tiny": spec}, progress=lines.append)
    benchmark.compare(tiny_config(models=("tiny",), precisions=("bf16",), float32_layers="none"), {"tiny": spec},
                      progress=lines.append)
    expected = ["tiny float32 xla=false batch=8:", "tiny mixed_bfloat16 xla=false batch=8, 1 float32 layers:",
                "tiny mixed_bfloat16 xla=false batch=8:"]
    assert [line.split(" img/s")[0].rsplit(" ", 1)[0] for line in lines] == expected
    with tfmp.precision_scope("bf16"):
        workload = benchmark.build_workload(spec, "mixed_bfloat16", False, hand_written=False)
    assert workload.float32_layers == ("small_cnn/conv2",)
    assert workload.trainer.network.get_layer("conv2").compute_dtype == "float32"
    advice = benchmark.default_specs()["mobilenet_v2"].cpu_bfloat16_float32_layers
    assert advice == cpu_bfloat16_float32_layers((32, 32, 3)) and "block_1_depthwise" in advice
    with pytest.raises(ValueError, match=r"Received: '\('"):
        tiny_config(models=("tiny",), float32_layers="(").validate(valid_models=("tiny",))


def test_a_row_times_the_trainer_its_task_builds_for_training(monkeypatch):
    # One code path: each row's trainer is Task.build's, with the row's precision, the config's loss scale
    # (dynamic under float16) and the row's batch size, seed and schedule length.
    built = []
    build = tasks.ClassifierTask.build

    def recording_build(self, precision, loss_scale, jit_compile, steps_per_epoch=1, split=None):
        result = build(self, precision, loss_scale, jit_compile, steps_per_epoch, split)
        built.append((self.name, self.config.batch_size, self.config.seed, precision, loss_scale, steps_per_epoch,
                      result.trainer))
        return result

    monkeypatch.setattr(tasks.ClassifierTask, "build", recording_build)
    timed = []
    monkeypatch.setattr(modes, "trainer_driver",
                        lambda workload, *args, **kwargs: timed.append(workload.trainer) or _FakeDriver())
    monkeypatch.setattr(modes, "hand_written_driver", lambda *args, **kwargs: _FakeDriver())
    monkeypatch.setattr(modes, "interleave", lambda drivers, steps, repeats: None)
    benchmark.compare(tiny_config(models=("tiny",), precisions=("fp16",), seed=3), tiny_specs())
    steps = 1 + 2 * 1  # warm-up + steps x repeats of tiny_config
    assert [row[:-1] for row in built] == [("tiny", BATCH, 3, "mixed_float16", "dynamic", steps)]
    assert timed == [built[0][-1]]


class _FakeDriver:
    images_per_sec = [1.0]
    median_images_per_sec = 1.0
