"""Tests for tfmp/run/callbacks/profiling.py."""

import os

import numpy as np
import pytest

from tfmp.run import callbacks, output


def _fit_tiny(callback, steps):
    import keras

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x, y = np.ones((steps * 2, 2), "float32"), np.zeros((steps * 2, 1), "float32")
    model.fit(x, y, batch_size=4, epochs=2, callbacks=[callback], verbose=0)  # steps/2 per epoch


def _traces(directory):
    return [f for d, _, files in os.walk(directory) for f in files if f.endswith(".xplane.pb")]


def test_profile_steps_traces_the_window_across_epochs(tmp_path):
    lines = []
    with output.lines_to(lines.append):
        profiler = callbacks.ProfileSteps(2, 3, tensorboard_dir=str(tmp_path))
        _fit_tiny(profiler, steps=4)  # two epochs of two steps: step 3 is the next epoch's first
        assert profiler.profiled_steps == [2, 3]
        assert len(_traces(tmp_path / "plugins" / "profile")) == 1
        assert lines == [f"profiled steps 2-3: tensorboard --logdir {tmp_path} (Profile tab)"]


def test_profile_steps_past_the_end_stops_with_the_run(tmp_path):
    profiler = callbacks.ProfileSteps(3, 99, str(tmp_path))
    _fit_tiny(profiler, steps=4)
    assert profiler.profiled_steps == [3, 4]
    assert _traces(tmp_path)


@pytest.mark.parametrize("start, end", [(0, 3), (4, 3)])
def test_profile_steps_rejects_bad_windows(start, end, tmp_path):
    with pytest.raises(ValueError, match=f"start={start}, end={end}"):
        callbacks.ProfileSteps(start, end, str(tmp_path))


def test_profile_steps_logdir_is_the_deprecated_name_of_tensorboard_dir(tmp_path):
    with pytest.warns(
        DeprecationWarning, match=r"`ProfileSteps\(logdir\)` is deprecated; use `ProfileSteps\(tensorboard_dir\)`"
    ):
        profiler = callbacks.ProfileSteps(2, 3, logdir=str(tmp_path))
    assert profiler.tensorboard_dir == str(tmp_path)
