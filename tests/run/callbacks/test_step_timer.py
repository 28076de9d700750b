"""Tests for tfmp/run/callbacks/step_timer.py."""

import pytest

from tfmp.run import callbacks


def test_step_timer_excludes_warmup_and_reports_epoch_throughput():
    timer = callbacks.StepTimer(images_per_step=100, warmup_steps=2)
    timer.on_train_begin()
    timer.on_epoch_begin(0)
    # Simulated step times: a slow first (tracing) step, then 0.5 s steps.
    timer.step_times.extend([5.0, 0.5, 0.5, 0.25])
    logs = {}
    timer.on_epoch_end(0, logs)
    # The epoch's throughput leaves the warm-up steps out too: 2 steps of 100 images in 0.75 s.
    assert logs["images_per_sec"] == pytest.approx(200 / 0.75)
    assert timer.measured_steps == 2
    assert timer.mean_images_per_sec == pytest.approx(200 / 0.75)


def test_step_timer_has_no_mean_when_every_step_is_warmup():
    timer = callbacks.StepTimer(images_per_step=10, warmup_steps=3)
    timer.step_times.extend([1.0, 1.0])
    assert timer.mean_images_per_sec is None


def test_step_timer_rejects_bad_arguments():
    with pytest.raises(ValueError, match="images_per_step=0"):
        callbacks.StepTimer(images_per_step=0)


def test_step_timer_leaves_an_all_warmup_epoch_without_throughput():
    timer = callbacks.StepTimer(images_per_step=10, warmup_steps=3)
    timer.on_train_begin()
    timer.on_epoch_begin(0)
    timer.step_times.extend([5.0, 0.5])
    logs = {}
    timer.on_epoch_end(0, logs)
    assert "images_per_sec" not in logs
    timer.on_epoch_begin(1)
    timer.step_times.extend([0.5, 0.25, 0.25])  # the third step of the run is still warm-up
    timer.on_epoch_end(1, logs)
    assert logs["images_per_sec"] == pytest.approx(20 / 0.5)


def test_a_timer_counting_examples_logs_examples_per_sec_and_refuses_other_units():
    timer = callbacks.StepTimer(images_per_step=10, warmup_steps=0, unit="ex")
    timer.on_train_begin()
    timer.on_epoch_begin(0)
    timer.step_times.extend([0.25, 0.25])
    logs = {}
    timer.on_epoch_end(0, logs)
    assert logs == {"examples_per_sec": 40.0} and timer.log_key == "examples_per_sec"
    with pytest.raises(ValueError, match="Received: unit='examples'"):
        callbacks.StepTimer(images_per_step=10, unit="examples")
