"""Tests for tfmp/run/autotune.py: `auto` precision by measurement, on CPUs and (injected) GPUs."""

import json

import pytest

from tfmp.run import autotune

X86_BF16 = "processor\t: 0\nmodel name\t: AMD EPYC 9R14\nflags\t\t: fpu sse avx512f avx512_bf16 amx_tile\n"
X86_PLAIN = "processor\t: 0\nmodel name\t: Intel Xeon\nflags\t\t: fpu sse avx2 avx512f\n"
ARM_BF16 = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n"

H100 = autotune.GPU("NVIDIA H100 80GB HBM3", (9, 0))
A100 = autotune.GPU("NVIDIA A100-SXM4-40GB", (8, 0))
T4 = autotune.GPU("Tesla T4", (7, 5))
P100 = autotune.GPU("Tesla P100-PCIE-16GB", (6, 0))
ALL = ("float32", "mixed_bfloat16", "mixed_float16")


def _gpus(*gpus):
    return autotune.Hardware(gpus=gpus, machine="host | tensorflow x")


CPU = autotune.Hardware(cpu_bfloat16=True, machine="host | tensorflow x")


@pytest.mark.parametrize("text, expected", [(X86_BF16, True), (X86_PLAIN, False), (ARM_BF16, True), ("", False)])
def test_cpu_bfloat16_detection(text, expected, tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    assert autotune.cpu_has_bfloat16(str(path)) == expected
    assert autotune.detect_hardware(str(path)).cpu_bfloat16 == expected
    cpu = autotune.Hardware(cpu_bfloat16=expected)
    assert autotune.candidates(cpu) == (("float32", "mixed_bfloat16") if expected else ("float32",))


X86_FP16 = "processor\t: 0\nmodel name\t: Intel Xeon\nflags\t\t: fpu avx2 f16c avx512f avx512_bf16 avx512_fp16\n"
X86_AVX2 = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 fma f16c\n"


@pytest.mark.parametrize(
    "text, expected",
    [
        (X86_FP16, ("float32", "mixed_bfloat16", "mixed_float16")),  # AVX512-FP16: both types are native
        (X86_AVX2, ("float32",)),  # F16C converts only; nothing native to measure
        (X86_BF16, ("float32", "mixed_bfloat16")),
    ],
)
def test_auto_on_a_cpu_measures_every_16_bit_type_it_runs_natively(text, expected, tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    assert autotune.candidates(autotune.detect_hardware(str(path))) == expected


def test_missing_cpuinfo_means_no_bfloat16(tmp_path):
    assert not autotune.detect_hardware(str(tmp_path / "absent")).cpu_bfloat16


@pytest.mark.parametrize(
    "gpus, expected",
    [
        ((H100,), ALL),
        ((A100,), ALL),
        ((autotune.GPU("NVIDIA GeForce RTX 3090", (8, 6)),), ALL),
        ((T4,), ("float32", "mixed_float16")),
        ((autotune.GPU("Tesla V100-SXM2-16GB", (7, 0)),), ("float32", "mixed_float16")),
        ((P100,), ("float32",)),
        ((A100, T4), ("float32", "mixed_float16")),  # the oldest GPU decides: one policy for every replica
    ],
)
def test_gpu_candidates_follow_the_compute_capability(gpus, expected):
    # A CPU with bfloat16 does not matter once there is a GPU.
    assert autotune.candidates(autotune.Hardware(gpus=gpus, cpu_bfloat16=True)) == expected


class Probe:
    """A fake measurement that records what it was asked."""

    def __init__(self, figures):
        self.figures = figures
        self.calls = []

    def __call__(self, precision):
        self.calls.append(precision)
        return self.figures[precision]


def never(precision):
    raise AssertionError(f"measured {precision} although the answer was cached or there was nothing to measure")


# The quoted H100 figures (PyTorch AMP, img/s): the tutorial's GAN at batch 4096 (float32 with TF32 x1.37,
# bfloat16 x1.47, float16 x1.57 over true float32) and MobileNetV2 on 32x32 at batch 128 (x0.91, x0.82, x0.69).
GAN_H100 = {"float32": 108093.0, "mixed_bfloat16": 115983.0, "mixed_float16": 123873.0}
MOBILENET_H100 = {"float32": 5733.0, "mixed_bfloat16": 5166.0, "mixed_float16": 4347.0}


def test_on_an_h100_every_candidate_is_measured_and_printed(tmp_path):
    path = str(tmp_path / "auto.json")
    probe = Probe(GAN_H100)
    tf32 = {"float32": "float32 with TF32"}
    choice = autotune.choose("gan b4096", probe, _gpus(H100), path, labels=tf32)
    assert (choice.precision, choice.cached, probe.calls) == ("mixed_float16", False, list(ALL))
    assert str(choice) == (
        "auto precision: mixed_float16, the fastest on this GPU (NVIDIA H100 80GB HBM3, compute capability 9.0) "
        "for this model (float32 with TF32 108093 img/s, mixed_bfloat16 115983 img/s (1.07x), "
        f"mixed_float16 123873 img/s (1.15x); measured now, cached in {path})"
    )
    # The model decides, not the GPU: MobileNetV2 at 32x32 is fastest in float32 on the same H100.
    mobilenet = autotune.choose("mobilenet_v2 b128", Probe(MOBILENET_H100), _gpus(H100), path, labels=tf32)
    assert mobilenet.precision == "float32"
    assert "mixed_bfloat16 5166 img/s (0.90x), mixed_float16 4347 img/s (0.76x)" in str(mobilenet)
    (entry,) = [e for e in json.load(open(path))["entries"].values() if e["precision"] == "mixed_float16"]
    assert entry["images_per_sec"] == GAN_H100
    assert entry["machine"] == "host | tensorflow x | GPU NVIDIA H100 80GB HBM3 9.0"
    assert entry["device"] == "this GPU (NVIDIA H100 80GB HBM3, compute capability 9.0)"


def test_a_model_that_counts_examples_is_printed_in_examples_per_second(tmp_path):
    path = str(tmp_path / "auto.json")
    choice = autotune.choose("text b64", Probe(MOBILENET_H100), _gpus(H100), path, unit="ex/s")
    assert "(float32 5733 ex/s, mixed_bfloat16 5166 ex/s (0.90x), mixed_float16 4347 ex/s (0.76x);" in str(choice)
    assert "img/s" not in str(choice)
    cached = autotune.choose("text b64", never, _gpus(H100), path, unit="ex/s")
    assert cached.cached and "5733 ex/s" in str(cached)  # the cache keeps its images_per_sec key


def test_the_cache_is_per_device_and_reused_without_measuring(tmp_path):
    path = str(tmp_path / "auto.json")
    autotune.choose("gan b4096", Probe(GAN_H100), _gpus(H100), path)
    again = autotune.choose("gan b4096", never, _gpus(H100), path)
    assert (again.precision, again.cached, again.images_per_sec) == ("mixed_float16", True, GAN_H100)
    assert "cached in" in str(again) and "measured now" not in str(again)
    # The same model on an A100 of the same host is measured again, and kept apart.
    a100 = Probe({"float32": 90.0, "mixed_bfloat16": 150.0, "mixed_float16": 140.0})
    assert autotune.choose("gan b4096", a100, _gpus(A100), path).precision == "mixed_bfloat16"
    assert a100.calls == list(ALL)
    entries = json.load(open(path))["entries"].values()
    assert sorted(e["device"] for e in entries) == [
        "this GPU (NVIDIA A100-SXM4-40GB, compute capability 8.0)",
        "this GPU (NVIDIA H100 80GB HBM3, compute capability 9.0)",
    ]
    assert autotune.choose("gan b4096", never, _gpus(H100), path).precision == "mixed_float16"
    # Two GPUs are their own device.
    two = Probe(GAN_H100)
    choice = autotune.choose("gan b4096", two, _gpus(H100, H100), path)
    assert two.calls == list(ALL) and "these GPUs (2x NVIDIA H100 80GB HBM3, compute capability 9.0)" in str(choice)


def test_volta_and_turing_measure_float32_and_float16_only(tmp_path):
    probe = Probe({"float32": 100.0, "mixed_float16": 250.0})
    choice = autotune.choose("gan b4096", probe, _gpus(T4), str(tmp_path / "auto.json"))
    assert (choice.precision, probe.calls) == ("mixed_float16", ["float32", "mixed_float16"])
    assert "float32 100 img/s, mixed_float16 250 img/s (2.50x)" in str(choice)
    assert "compute capability 7.5" in str(choice)


def test_gpus_without_tensor_cores_measure_nothing(tmp_path):
    choice = autotune.choose("gan b4096", never, _gpus(P100), str(tmp_path / "auto.json"))
    assert (choice.precision, choice.images_per_sec) == ("float32", {})
    assert str(choice) == (
        "auto precision: float32 (GPU compute capability 6.0 < 7.0 has no Tensor Cores; nothing to measure)"
    )
    assert not (tmp_path / "auto.json").exists()


CPU_FIGURES = {"float32": 850.0, "mixed_bfloat16": 381.0}


def test_a_cpu_measures_once_then_uses_the_cache(tmp_path):
    path = str(tmp_path / "cache" / "auto.json")
    probe = Probe(CPU_FIGURES)
    first = autotune.choose("mobilenet_v2 b128", probe, CPU, path)
    assert (first.precision, first.cached, probe.calls) == ("float32", False, ["float32", "mixed_bfloat16"])
    assert str(first) == (
        "auto precision: float32, the fastest on this CPU for this model (float32 850 img/s, "
        f"mixed_bfloat16 381 img/s (0.45x); measured now, cached in {path})"
    )
    again = autotune.choose("mobilenet_v2 b128", never, CPU, path)
    assert (again.precision, again.cached, again.images_per_sec) == ("float32", True, first.images_per_sec)
    # Another model signature is measured separately.
    faster = Probe({"float32": 971.0, "mixed_bfloat16": 1365.0})
    assert autotune.choose("gan b512", faster, CPU, path).precision == "mixed_bfloat16"
    entries = json.load(open(path))["entries"]
    assert sorted(e["precision"] for e in entries.values()) == ["float32", "mixed_bfloat16"]
    assert {e["machine"] for e in entries.values()} == {"host | tensorflow x"}


ZEN4 = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 fma f16c avx512f avx512_bf16\n"
ZEN5 = ZEN4.replace("avx512_bf16", "avx512_bf16 avx512_vp2intersect avx_vnni")


def test_two_cpus_of_one_model_name_keep_their_own_choice(tmp_path):
    # Two virtual machines named "AMD EPYC" sharing a home directory: both AVX512-BF16, one with more flags.
    zen4, zen5 = tmp_path / "zen4", tmp_path / "zen5"
    zen4.write_text(ZEN4)
    zen5.write_text(ZEN5)
    hardware = {cpu: autotune.detect_hardware(str(cpu)) for cpu in (zen4, zen5)}
    assert autotune.candidates(hardware[zen4]) == autotune.candidates(hardware[zen5]) == ("float32", "mixed_bfloat16")
    path = str(tmp_path / "auto.json")
    first = autotune.choose("gan b512", Probe({"float32": 971.0, "mixed_bfloat16": 1365.0}), hardware[zen4], path)
    probe = Probe({"float32": 1200.0, "mixed_bfloat16": 1100.0})
    second = autotune.choose("gan b512", probe, hardware[zen5], path)
    assert (first.precision, second.precision, second.cached) == ("mixed_bfloat16", "float32", False)
    assert probe.calls == ["float32", "mixed_bfloat16"]  # measured, not read from the first CPU's entry
    machines = sorted(e["machine"].split(" | ")[1] for e in json.load(open(path))["entries"].values())
    assert machines == [
        "AVX512-BF16 (avx2 avx512_bf16 avx512_vp2intersect avx512f avx_vnni f16c fma)",
        "AVX512-BF16 (avx2 avx512_bf16 avx512f f16c fma)",
    ]
    assert autotune.choose("gan b512", never, hardware[zen4], path).precision == "mixed_bfloat16"
    assert autotune.choose("gan b512", never, hardware[zen5], path).precision == "float32"


def test_ties_keep_the_earlier_candidate_and_a_cpu_without_bfloat16_measures_nothing(tmp_path):
    path = str(tmp_path / "auto.json")
    assert autotune.choose("tie", Probe({"float32": 5.0, "mixed_bfloat16": 5.0}), CPU, path).precision == "float32"
    tie = Probe({"float32": 4.0, "mixed_bfloat16": 5.0, "mixed_float16": 5.0})
    assert autotune.choose("tie", tie, _gpus(H100), path).precision == "mixed_bfloat16"  # no loss scaling needed
    choice = autotune.choose("any", never, autotune.Hardware(), path)
    assert choice.precision == "float32"
    assert str(choice) == "auto precision: float32 (this CPU has no bfloat16 or float16 arithmetic; nothing to measure)"


def test_a_corrupt_or_unwritable_cache_only_costs_a_new_measurement(tmp_path):
    path = tmp_path / "auto.json"
    path.write_text("{not json")
    probe = Probe({"float32": 1.0, "mixed_bfloat16": 2.0})
    assert autotune.choose("sig", probe, CPU, str(path)).precision == "mixed_bfloat16"
    assert json.load(open(path))["version"] == 2  # rewritten whole
    # An entry with other candidates or a bad figure is measured again.
    cache = json.load(open(path))
    (entry,) = cache["entries"].values()
    entry["images_per_sec"]["float32"] = "fast"
    path.write_text(json.dumps(cache))
    assert autotune.choose("sig", probe, CPU, str(path)).cached is False and len(probe.calls) == 4
    blocker = tmp_path / "file"
    blocker.write_text("")
    choice = autotune.choose("sig", probe, CPU, str(blocker / "sub" / "auto.json"))
    assert choice.precision == "mixed_bfloat16" and not choice.cached


def test_cache_location_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(autotune.CACHE_ENV, str(tmp_path / "mine"))
    assert autotune.cache_file() == str(tmp_path / "mine" / "auto_precision.json")
    monkeypatch.delenv(autotune.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert autotune.cache_file() == str(tmp_path / "xdg" / "tfmp" / "auto_precision.json")


def test_a_cache_that_cannot_be_written_says_so_instead_of_cached(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")  # a file where the cache directory should be
    path = str(blocker / "sub" / "auto.json")
    choice = autotune.choose("sig", Probe(CPU_FIGURES), CPU, path)
    assert (choice.precision, choice.cached) == ("float32", False)
    assert str(choice).endswith(
        f"(float32 850 img/s, mixed_bfloat16 381 img/s (0.45x); measured now, not cached: {blocker / 'sub'} is not "
        f"writable (Not a directory); set {autotune.CACHE_ENV} to a writable directory)"
    )
    assert "cached in" not in str(choice)
