"""Tests for tfmp/autotune.py: `auto` precision by measurement on CPUs."""

import json

import pytest

from tfmp import autotune

X86_BF16 = "processor\t: 0\nmodel name\t: AMD EPYC 9R14\nflags\t\t: fpu sse avx512f avx512_bf16 amx_tile\n"
X86_PLAIN = "processor\t: 0\nmodel name\t: Intel Xeon\nflags\t\t: fpu sse avx2 avx512f\n"
ARM_BF16 = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n"


@pytest.mark.parametrize("text, expected", [(X86_BF16, True), (X86_PLAIN, False), (ARM_BF16, True), ("", False)])
def test_cpu_bfloat16_detection(text, expected, tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    assert autotune.cpu_has_bfloat16(str(path)) == expected
    assert autotune.cpu_candidates(str(path)) == (("float32", "mixed_bfloat16") if expected else ("float32",))


def test_missing_cpuinfo_means_no_bfloat16(tmp_path):
    assert autotune.cpu_candidates(str(tmp_path / "absent")) == ("float32",)


class Probe:
    """A fake measurement that records what it was asked."""

    def __init__(self, figures):
        self.figures = figures
        self.calls = []

    def __call__(self, precision):
        self.calls.append(precision)
        return self.figures[precision]


CANDIDATES = ("float32", "mixed_bfloat16")


def test_measures_once_then_uses_the_cache(tmp_path):
    path = str(tmp_path / "cache" / "auto.json")
    probe = Probe({"float32": 850.0, "mixed_bfloat16": 381.0})
    first = autotune.choose("mobilenet_v2 b128", probe, CANDIDATES, path)
    assert (first.precision, first.cached, probe.calls) == ("float32", False, ["float32", "mixed_bfloat16"])
    assert "float32 850 img/s, mixed_bfloat16 381 img/s; measured now" in str(first)
    again = autotune.choose("mobilenet_v2 b128", probe, CANDIDATES, path)
    assert (again.precision, again.cached, again.images_per_sec) == ("float32", True, first.images_per_sec)
    assert len(probe.calls) == 2 and "cached in" in str(again)
    # Another model signature is measured separately.
    faster = Probe({"float32": 971.0, "mixed_bfloat16": 1365.0})
    assert autotune.choose("gan b512", faster, CANDIDATES, path).precision == "mixed_bfloat16"
    entries = json.load(open(path))["entries"]
    assert sorted(e["precision"] for e in entries.values()) == ["float32", "mixed_bfloat16"]


def test_ties_keep_float32_and_one_candidate_measures_nothing(tmp_path):
    path = str(tmp_path / "auto.json")
    assert autotune.choose("tie", Probe({"float32": 5.0, "mixed_bfloat16": 5.0}), CANDIDATES, path).precision == "float32"
    probe = Probe({})
    choice = autotune.choose("any", probe, ("float32",), path)
    assert (choice.precision, probe.calls) == ("float32", [])
    assert "no bfloat16 instructions" in str(choice)


def test_a_corrupt_or_unwritable_cache_only_costs_a_new_measurement(tmp_path):
    path = tmp_path / "auto.json"
    path.write_text("{not json")
    probe = Probe({"float32": 1.0, "mixed_bfloat16": 2.0})
    assert autotune.choose("sig", probe, CANDIDATES, str(path)).precision == "mixed_bfloat16"
    assert json.load(open(path))["version"] == 1  # rewritten whole
    blocker = tmp_path / "file"
    blocker.write_text("")
    choice = autotune.choose("sig", probe, CANDIDATES, str(blocker / "sub" / "auto.json"))
    assert choice.precision == "mixed_bfloat16" and not choice.cached


def test_cache_location_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(autotune.CACHE_ENV, str(tmp_path / "mine"))
    assert autotune.cache_file() == str(tmp_path / "mine" / "auto_precision.json")
    monkeypatch.delenv(autotune.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert autotune.cache_file() == str(tmp_path / "xdg" / "tfmp" / "auto_precision.json")
