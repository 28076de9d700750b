"""Tests for tfmp/run/callbacks/peak_memory.py: the allocator's peak of each epoch, to TensorBoard and the console."""

import json
import os
import subprocess
import sys

import tensorflow as tf

from tfmp.run import callbacks, output
from tfmp.run.memory_meters import AllocatorMemory, cpu_bfc_environment


class _Allocator:
    """A fake allocator whose peaks are scripted, one per epoch."""

    name = "CPU:0 BFC"

    def __init__(self, peaks):
        self.peaks = list(peaks)
        self.resets = 0

    def reset(self):
        self.resets += 1
        return 0.0

    def peak_mb(self):
        return self.peaks[self.resets - 1]


def _scalars(directory):
    values = {}
    for name in sorted(os.listdir(directory)):
        if name.startswith("events"):
            for event in tf.compat.v1.train.summary_iterator(os.path.join(directory, name)):
                for value in event.summary.value:
                    values.setdefault(value.tag, []).append((event.step, float(tf.make_ndarray(value.tensor))))
    return values


def _run(callback, epochs):
    callback.on_train_begin()
    for epoch in range(epochs):
        callback.on_epoch_begin(epoch)
        callback.on_epoch_end(epoch, {})
    callback.on_train_end()


def test_each_epochs_peak_goes_to_tensorboard_and_the_highest_to_the_console(tmp_path):
    lines = []
    with output.lines_to(lines.append):
        allocator = _Allocator([120.0, 180.5, 150.0])
        callback = callbacks.PeakMemory(tensorboard_dir=str(tmp_path), allocator=allocator)
        _run(callback, 3)
        assert allocator.resets == 3 and callback.peaks_mb == [120.0, 180.5, 150.0]
        assert _scalars(tmp_path)["memory/peak_mb"] == [(0, 120.0), (1, 180.5), (2, 150.0)]
        assert lines == ["  memory: peak 180.5 MiB (CPU:0 BFC allocator, the highest epoch of 3)"]


def test_without_a_readable_allocator_nothing_is_written_or_printed(tmp_path, monkeypatch):
    # Whether this machine's CPU allocator keeps statistics is TensorFlow's decision (a CUDA platform loaded
    # without a GPU switches them on): the process is made one whose allocator keeps none.
    monkeypatch.setattr(AllocatorMemory, "of_this_process", classmethod(lambda cls: None))
    lines = []
    with output.lines_to(lines.append):
        _run(callbacks.PeakMemory(str(tmp_path)), 2)
    assert lines == [] and os.listdir(tmp_path) == []


_FIT = """
import json, sys
import numpy as np
import keras
from tfmp.run import callbacks, output
model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(1024), keras.layers.Dense(1)])
model.compile("adam", "mse")
lines = []
callback = callbacks.PeakMemory(sys.argv[1])
x = np.zeros((512, 256), np.float32)
with output.lines_to(lines.append):
    model.fit(x, x[:, :1], batch_size=256, epochs=2, verbose=0, callbacks=[callback])
print(json.dumps([callback.peaks_mb, lines]))
"""


def test_a_fit_on_a_cpu_with_the_bfc_allocator_switched_on_logs_its_peak(tmp_path):
    env = {**os.environ, **cpu_bfc_environment(), "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(
        [sys.executable, "-c", _FIT, str(tmp_path)], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    peaks, lines = json.loads(result.stdout.splitlines()[-1])
    # At least the weights and Adam's two slots of the 256x1024 kernel: 3 x 1 MiB.
    assert len(peaks) == 2 and all(peak > 3 for peak in peaks)
    assert lines == [f"  memory: peak {max(peaks):.1f} MiB (CPU:0 BFC allocator, the highest epoch of 2)"]
    assert [step for step, _ in _scalars(tmp_path)["memory/peak_mb"]] == [0, 1]
