"""Tests for tfmp/run/memory_meters.py: peak host, GPU and allocator memory over a block, and the resident set now."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tfmp.run import memory_meters


def test_host_peak_memory_sees_an_allocation_made_inside_the_block():
    with memory_meters.HostPeakMemory() as before:
        pass
    with memory_meters.HostPeakMemory() as peak:
        block = np.ones(256 * 2**20, np.uint8)  # touched, so resident
        del block
    assert peak.method == "VmHWM"  # Linux: the kernel's high-water mark, reset on entry
    assert peak.peak_mb - before.peak_mb > 200


def test_resident_mb_holds_what_is_resident_now_and_lets_go_of_what_is_freed():
    before = memory_meters.resident_mb()
    block = np.ones(256 * 2**20, np.uint8)  # touched, so resident
    held = memory_meters.resident_mb()
    del block  # malloc maps a block this large on its own, so freeing it unmaps it at once
    assert held - before > 200
    assert held - memory_meters.resident_mb() > 200


def test_gpu_peak_memory_is_none_without_a_gpu():
    with memory_meters.GpuPeakMemory() as gpu:
        with tf.device("/GPU:0"):  # soft placement puts it on the CPU when there is no GPU
            block = tf.ones((64 * 2**20,), tf.uint8)
    # Where the 64 MiB really went is the ground truth, not the device list GpuPeakMemory reads.
    if "GPU" in block.device:
        assert gpu.has_gpu and gpu.peak_mb >= 64
    else:
        assert not gpu.has_gpu and gpu.peak_mb is None


_ALLOCATOR_READOUT = """
import json
import tensorflow as tf
from tfmp.run import memory_meters
allocator = memory_meters.AllocatorMemory.of_this_process()
before = allocator.reset()
block = tf.ones((64 * 2**20,), tf.uint8)
held = allocator.current_mb()
del block
print(json.dumps([allocator.name, before, held, allocator.peak_mb(), allocator.current_mb()]))
"""


def test_the_cpu_bfc_allocator_is_read_in_a_fresh_process_that_switches_it_on():
    env = {**os.environ, **memory_meters.cpu_bfc_environment(limit_mb=512), "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(
        [sys.executable, "-c", _ALLOCATOR_READOUT], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    name, before, held, peak, after = json.loads(result.stdout.splitlines()[-1])
    assert name == "CPU:0 BFC"
    assert held - before >= 64 and peak >= held  # the 64 MiB block, seen by the allocator
    assert after < held - 60  # and given back when freed


def test_an_allocator_is_read_exactly_where_it_keeps_statistics():
    """None where the CPU allocator keeps no statistics; where it does, its count follows an allocation.

    Which CPU allocator a process gets is TensorFlow's decision: the default one
    keeps none, the BFC allocator (`TF_CPU_ALLOCATOR_USE_BFC=true`) does, and so
    does the default one where TensorFlow loaded its CUDA platform (a CUDA
    toolkit without a GPU). The test asks the allocator, as the code does.
    """
    allocator = memory_meters.AllocatorMemory.of_this_process()
    if tf.config.list_logical_devices("GPU"):
        assert allocator.device == "GPU:0"
        return
    try:
        tf.config.experimental.get_memory_info("CPU:0")
    except ValueError:
        assert allocator is None
        return
    assert allocator.device == "CPU:0"
    before = allocator.current_mb()
    held = tf.ones((2048, 2048)) @ tf.ones((2048, 2048))  # 16 MiB
    assert allocator.current_mb() - before >= 15.9
    del held


def test_cpu_bfc_environment_names_the_switch_and_the_budget_in_whole_mib():
    assert memory_meters.cpu_bfc_environment() == {"TF_CPU_ALLOCATOR_USE_BFC": "true"}
    assert memory_meters.cpu_bfc_environment(300.7) == {
        "TF_CPU_ALLOCATOR_USE_BFC": "true",
        "TF_CPU_BFC_MEM_LIMIT_IN_MB": "300",
    }


@pytest.mark.parametrize(
    "text, mib", [("2GiB", 2048.0), ("512 MiB", 512.0), ("1.5GB", 1.5e9 / 2**20), ("1048576b", 1.0), ("1tib", 2**20)]
)
def test_memory_sizes_parse_with_their_unit_into_mib(text, mib):
    assert memory_meters.parse_memory_size(text) == pytest.approx(mib)


@pytest.mark.parametrize("text", ["2", "2 GiBs", "GiB", "-1GiB", "512KiB", None])
def test_memory_sizes_without_a_known_unit_or_below_1_mib_are_refused_naming_the_text(text):
    with pytest.raises(ValueError, match=f"Received: {text!r}".replace("(", r"\(")):
        memory_meters.parse_memory_size(text)
