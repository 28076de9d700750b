"""Tests for tfmp/benchmark.py and scripts/benchmark.py.

The record, ratio and JSON logic runs on tiny models (a small CNN on 8x8
images and a GAN with widths of 2 to 8), so nothing big is traced; one
subprocess runs the real script end to end on the seed GAN at batch 8.
No test asserts a speed: timings on a shared CPU are noise.
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfmp
from tfmp.models.mobilenet_v2 import cpu_bfloat16_float32_layers
from tfmp.models.small_cnn import build_small_cnn
from tfmp import benchmark
from tfmp import config as config_lib
from tfmp import tasks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEYS = ["model", "precision", "xla", "batch_size", "images_per_sec", "images_per_sec_min", "images_per_sec_max",
        "step_ms", "ratio_to_float32", "ratio_to_hand_written", "peak_host_mb", "peak_gpu_mb"]
BATCH = 8


def tiny_classifier(**kwargs):
    return tasks.ClassifierTask(
        config_lib.ClassifierConfig(batch_size=BATCH), "tiny",
        network=lambda shape, classes: build_small_cnn(shape, classes, width=4), image_shape=(8, 8, 3), **kwargs)


def tiny_specs():
    return {
        "tiny": tiny_classifier(),
        "tiny_gan": tasks.GANTask(config_lib.GANConfig(batch_size=BATCH, latent_dim=8, generator_widths=(8, 4, 2),
                                                       discriminator_widths=(2, 2, 2)), "tiny_gan"),
    }


def tiny_config(**changes):
    config = benchmark.BenchmarkConfig(
        models=("tiny", "tiny_gan"), precisions=("float32", "mixed_bfloat16"), xla=(False,),
        warmup_steps=1, steps=2, repeats=1)
    return benchmark.BenchmarkConfig(**{**config.__dict__, **changes})


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


def test_markdown_table_has_a_header_and_one_row_per_record(records):
    lines = benchmark.markdown_table(records).splitlines()
    assert [cell.strip() for cell in lines[0].strip("|").split("|")] == KEYS
    assert len(lines) == 2 + len(records)
    assert lines[3].startswith("| tiny | mixed_bfloat16 | false | 8 | ")
    assert lines[3].endswith(" | n/a |")


def test_json_file_holds_the_records(records, tmp_path):
    path = tmp_path / "bench.json"
    benchmark.write_json(records, str(path))
    assert json.loads(path.read_text()) == [r.to_json() for r in records]


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


@pytest.mark.parametrize(
    # The GAN only under float16 (two loss-scaled optimizers): its tracing is slow.
    "model, precision", [("tiny", "float32"), ("tiny", "mixed_float16"), ("tiny_gan", "mixed_float16")])
def test_hand_written_step_is_the_trainers_math(model, precision):
    # Two builds from the same seed: two trainer steps on one, two
    # hand-written steps on the other, give bit-identical weights.
    spec = tiny_specs()[model]
    weights = []
    for path in ("trainer", "hand_written"):
        with tfmp.precision_scope(precision):
            keras.utils.set_random_seed(0)
            workload = benchmark.build_workload(spec, precision, False)
            initial = [v.numpy() for v in workload.trainer.trainable_variables]
            if path == "trainer":
                data = tf.data.Dataset.from_tensors(workload.batch).repeat()
                workload.trainer.fit(data, epochs=1, steps_per_epoch=2, shuffle=False, verbose=0)
            else:
                for _ in range(2):
                    workload.hand_written_step(workload.batch)
        weights.append([v.numpy() for v in workload.trainer.trainable_variables])
    assert any(not np.array_equal(a, b) for a, b in zip(initial, weights[1]))
    for a, b in zip(*weights):
        np.testing.assert_array_equal(a, b)
    scaled = [isinstance(o, tfmp.LossScaleOptimizer) for o in workload.hand_written_optimizers]
    assert scaled == [precision == "mixed_float16"] * (2 if model == "tiny_gan" else 1)
    assert workload.images_per_step == (2 if model == "tiny_gan" else 1) * BATCH


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
    assert benchmark.markdown_table(rows).count("\n") == 2


def test_the_pipelines_are_the_training_pipelines():
    specs = benchmark.default_specs()
    gan = benchmark.training_pipeline(specs["gan"].replace(dataset="digits", batch_size=512, seed=0))
    assert gan.epoch_batch_sizes == (512, 512)  # 1,438 training digits, last batch dropped
    assert gan.dataset.element_spec.shape.as_list() == [512, 28, 28, 1]
    classifier = benchmark.training_pipeline(specs["mobilenet_v2"].replace(dataset="digits", batch_size=128, seed=0))
    assert classifier.epoch_batch_sizes == (128,) * 11 + (30,)
    images, labels = classifier.dataset.element_spec
    assert images.shape.as_list() == [None, 32, 32, 3] and labels.dtype == tf.int32


def test_epoch_batch_sizes():
    assert benchmark.epoch_batch_sizes(10, 4, drop_remainder=False) == (4, 4, 2)
    assert benchmark.epoch_batch_sizes(10, 4, drop_remainder=True) == (4, 4)
    assert benchmark.epoch_batch_sizes(8, 4, drop_remainder=False) == (4, 4)
    with pytest.raises(ValueError, match="batch_size=16"):
        benchmark.epoch_batch_sizes(10, 16, drop_remainder=True)


def test_host_peak_memory_sees_an_allocation_made_inside_the_block():
    with benchmark.HostPeakMemory() as before:
        pass
    with benchmark.HostPeakMemory() as memory:
        block = np.ones(256 * 2**20, np.uint8)  # touched, so resident
        del block
    assert memory.method == "VmHWM"  # Linux: the kernel's high-water mark, reset on entry
    assert memory.peak_mb - before.peak_mb > 200


@pytest.mark.parametrize(
    "parse, value, message",
    [
        (benchmark.parse_models, "gan,vgg", "model='vgg'"),
        (benchmark.parse_models, "", "models=''"),
        (benchmark.parse_precisions, "fp32,fp8", "precision='fp8'"),
        (benchmark.parse_precisions, "auto", "precision='auto'"),
        (benchmark.parse_xla, "false,maybe", "xla='maybe'"),
        (benchmark.parse_batch_sizes, "8,0", "batch_size='0'"),
        (benchmark.parse_batch_sizes, "8,1.5", "batch_size='1.5'"),
    ],
)
def test_bad_values_name_the_value(parse, value, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        parse(value)


def test_parsing_accepts_aliases_and_keeps_order():
    assert benchmark.parse_precisions("bf16, fp32,FP16,bf16") == ("mixed_bfloat16", "float32", "mixed_float16")
    assert benchmark.parse_xla("true,false,true") == (True, False)
    assert benchmark.parse_batch_sizes("32,8") == (32, 8) and benchmark.parse_batch_sizes("") == ()
    assert benchmark.parse_models("resnet50,GAN") == ("resnet50", "gan")


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


def _record(model, precision, images_per_sec):
    return benchmark.Record(model, precision, False, 8, images_per_sec, 8000 / images_per_sec,
                            None if precision != "float32" else 1.0, 0.97, 900.0, None)


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    records = [_record("gan", "float32", 970.0), _record("gan", "mixed_bfloat16", 1365.0),
               _record("resnet50", "float32", 90.0)]
    path = benchmark.plot(records, str(tmp_path / "bench.png"))
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(path) > 10_000


def test_plot_without_matplotlib_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
    with pytest.raises(ImportError, match=r'pip install "tfmp\[plot\]"'):
        benchmark.plot([_record("gan", "float32", 970.0)], str(tmp_path / "bench.png"))


def _script(*flags):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "benchmark.py"), *flags],
                          capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)


def test_script_end_to_end_writes_the_json_and_prints_the_table(tmp_path):
    out = tmp_path / "bench.json"
    proc = _script("--models=gan", "--precisions=fp32", "--xla=false", "--batch_sizes=8", "--warmup_steps=1",
                   "--steps=2", "--repeats=1", f"--json_out={out}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert len(rows) == 1 and list(rows[0]) == KEYS
    row = rows[0]
    assert (row["model"], row["precision"], row["xla"], row["batch_size"]) == ("gan", "float32", False, 8)
    assert row["ratio_to_float32"] == 1.0 and row["peak_gpu_mb"] is None
    assert row["images_per_sec"] * row["step_ms"] / 1000 == pytest.approx(16)  # 2 x batch
    table = [line for line in proc.stdout.splitlines() if line.startswith("|")]
    assert len(table) == 3 and table[2].startswith("| gan | float32 | false | 8 | ")


def test_a_bad_script_value_is_a_usage_error_before_any_work(tmp_path):
    # One subprocess (TensorFlow's import dominates); the parsers' messages
    # for every flag are tested in process above.
    out = tmp_path / "bench.json"
    proc = _script("--models=gan", "--precisions=fp32,fp8", f"--json_out={out}")
    assert proc.returncode != 0
    assert "Unknown precision. Valid: float32, mixed_bfloat16, mixed_float16" in proc.stderr
    assert "Received: precision='fp8'" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()


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


def test_plot_states_the_reference_device_method_and_hand_written_ratio(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    figures = []
    savefig = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (figures.append(self), savefig(self, *a, **k))[1])
    records = [_record("gan", "float32", 1000.0), _record("gan", "mixed_bfloat16", 290.0)]
    records[1].ratio_to_float32 = 0.29
    records[1].images_per_sec_min, records[1].images_per_sec_max = 251.0, 301.0
    config = benchmark.BenchmarkConfig(steps=7, repeats=3, warmup_steps=2)
    benchmark.plot(records, str(tmp_path / "bench.png"), config, device="CPU (test)")
    (figure,) = figures
    title = figure._suptitle.get_text()
    assert "CPU (test)" in title and "median of 3 repeats x 7 steps (2 warm-up)" in title
    footnote = figure._supxlabel.get_text()
    assert "float32's" in footnote and "hand-written" in footnote and "slowest to fastest round" in footnote
    labels = [t.get_text() for ax in figure.axes for t in ax.texts]
    assert labels == ["1000\n0.97x hand-written", "290\n0.29x float32\n0.97x hand-written\n(251-301)"]
    # The whisker: one error bar, on the record that has a spread, from its slowest to its fastest round.
    bars = [c for c in figure.axes[0].containers if getattr(c, "errorbar", None) is not None]
    (whisker,) = [c.errorbar for c in bars if c.errorbar.lines[2]]
    segments = whisker.lines[2][0].get_segments()
    assert [tuple(segment[:, 1]) for segment in segments] == [(251.0, 301.0)]
