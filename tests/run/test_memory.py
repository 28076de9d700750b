"""Tests for tfmp/run/memory.py: peak host and GPU memory over a block, and the resident set now."""

import numpy as np
import tensorflow as tf

from tfmp.run import memory


def test_host_peak_memory_sees_an_allocation_made_inside_the_block():
    with memory.HostPeakMemory() as before:
        pass
    with memory.HostPeakMemory() as peak:
        block = np.ones(256 * 2**20, np.uint8)  # touched, so resident
        del block
    assert peak.method == "VmHWM"  # Linux: the kernel's high-water mark, reset on entry
    assert peak.peak_mb - before.peak_mb > 200


def test_resident_mb_holds_what_is_resident_now_and_lets_go_of_what_is_freed():
    before = memory.resident_mb()
    block = np.ones(256 * 2**20, np.uint8)  # touched, so resident
    held = memory.resident_mb()
    del block  # malloc maps a block this large on its own, so freeing it unmaps it at once
    assert held - before > 200
    assert held - memory.resident_mb() > 200


def test_gpu_peak_memory_is_none_without_a_gpu():
    with memory.GpuPeakMemory() as gpu:
        with tf.device("/GPU:0"):  # soft placement puts it on the CPU when there is no GPU
            block = tf.ones((64 * 2**20,), tf.uint8)
    # Where the 64 MiB really went is the ground truth, not the device list GpuPeakMemory reads.
    if "GPU" in block.device:
        assert gpu.has_gpu and gpu.peak_mb >= 64
    else:
        assert not gpu.has_gpu and gpu.peak_mb is None
