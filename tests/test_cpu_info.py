"""Tests for tfmp/cpu_info.py: the CPU's native 16-bit types and class, from /proc/cpuinfo files the tests write."""

import os

import keras
import pytest
import tensorflow as tf

from tfmp import cpu_info, cpu_kernels


@pytest.mark.parametrize(
    "flags, bfloat16, float16, cpu_class",
    [
        ("fpu sse avx2 f16c fma", False, False, "AVX2 only"),  # F16C converts, it does not compute
        ("avx2 avx512f avx512_bf16", True, False, "AVX512-BF16"),
        ("avx2 avx512f avx512_bf16 avx512_fp16", True, True, "AVX512-FP16"),
        ("avx2 avx512f avx512_bf16 avx512_fp16 amx_bf16", True, True, "AMX"),
        ("avx2 avx512f", False, False, "AVX-512"),
    ],
)
def test_the_flags_line_decides_the_native_types_and_the_class(tmp_path, flags, bfloat16, float16, cpu_class):
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: {flags}\n")
    assert cpu_info.cpu_has_bfloat16(str(path)) is bfloat16
    assert cpu_info.cpu_has_float16(str(path)) is float16
    assert cpu_info.cpu_class(str(path)) == cpu_class
    assert cpu_info.machine_id(str(path)).startswith(f"Some CPU | {cpu_class} (")


def test_arm_features_and_an_unreadable_file(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text("processor\t: 0\nFeatures\t: fp asimd asimdhp bf16\n")
    assert cpu_info.cpu_has_bfloat16(str(path)) and cpu_info.cpu_has_float16(str(path))
    assert cpu_info.cpu_class(str(path)) == "Arm BF16"
    missing = str(tmp_path / "absent")
    assert (cpu_info.cpu_has_bfloat16(missing), cpu_info.cpu_class(missing)) == (False, "")


def test_the_machine_id_names_the_class_and_the_kernel_flags_and_no_other_flag(tmp_path):
    avx2, patched, bf16 = tmp_path / "avx2", tmp_path / "patched", tmp_path / "bf16"
    avx2.write_text("model name\t: AMD EPYC\nflags\t\t: fpu sse avx2 fma f16c hypervisor\n")
    patched.write_text("model name\t: AMD EPYC\nflags\t\t: fpu sse avx2 fma f16c ibrs ssbd\n")  # no new instructions
    bf16.write_text("model name\t: AMD EPYC\nflags\t\t: fpu sse avx2 fma f16c avx512f avx512bw avx512_bf16\n")
    versions = f"{os.cpu_count()} cpus | tensorflow {tf.__version__} | keras {keras.__version__}"
    assert cpu_info.machine_id(str(avx2)) == cpu_info.machine_id(str(patched))
    assert cpu_info.machine_id(str(avx2)) == f"AMD EPYC | AVX2 only (avx2 f16c fma) | {versions}"
    assert cpu_info.machine_id(str(bf16)) == (
        f"AMD EPYC | AVX512-BF16 (avx2 avx512_bf16 avx512bw avx512f f16c fma) | {versions}"
    )
    assert cpu_info.kernel_flags(str(bf16)) == ("avx2", "avx512_bf16", "avx512bw", "avx512f", "f16c", "fma")
    assert cpu_info.machine_id(str(tmp_path / "absent")).split(" | ")[1:] == ["flags unknown", *versions.split(" | ")]


def test_cpu_kernels_still_exports_them():
    assert cpu_kernels.cpu_class is cpu_info.cpu_class and cpu_kernels.machine_id is cpu_info.machine_id
