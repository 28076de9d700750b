"""Tests for tfmp/run/benchmark/largest_batch.py: the largest batch whose training step fits a memory budget."""

import multiprocessing
import os
import signal
import threading

import pytest
from benchmark_tiny import CRASH_FROM, crashing_trial, sleeping_trial, small_classifier, tiny_config

from tfmp.run import benchmark
from tfmp.run.benchmark import largest_batch
from tfmp.run.memory_meters import cpu_bfc_environment
from tfmp.run.options import ConfigError


def _arithmetic_trials(fits_up_to, crash_from=None):
    """A fake `try_batch`: peak = 10 + 2 * batch MiB, fitting up to `fits_up_to`, crashing from `crash_from`."""
    tried = []

    def try_batch(batch):
        tried.append(batch)
        if crash_from is not None and batch >= crash_from:
            return largest_batch.Trial(batch, False, why_not="crashed (exit 139)")
        if batch > fits_up_to:
            return largest_batch.Trial(batch, False, why_not="out of memory")
        return largest_batch.Trial(batch, True, 10.0 + 2 * batch, 2.0 * batch, allocator="CPU:0 BFC")

    return try_batch, tried


def test_the_search_starts_from_the_linear_estimate_and_bisects_to_the_resolution():
    # peak(b) = 10 + 2b, budget 100: the probes 4 and 8 predict 45, which fits; 90 (doubled) does not.
    try_batch, tried = _arithmetic_trials(fits_up_to=45)
    settings = largest_batch.MaxBatchSettings(budget_mb=100.0, resolution=0.05)
    fit, fail, estimate, count = largest_batch._search(try_batch, (4, 8), 100.0, settings)
    assert estimate == 45 and tried[:4] == [4, 8, 45, 90]
    assert fit.batch_size == 45 and fit.peak_mb == 100.0
    assert fail.batch_size - 45 <= max(1, 0.05 * 45) and not fail.fits and count == len(tried)


def test_a_crashing_trial_counts_as_not_fitting_and_the_answer_holds():
    # Memory would allow 45, but every trial from 30 up crashes.
    try_batch, tried = _arithmetic_trials(fits_up_to=45, crash_from=30)
    settings = largest_batch.MaxBatchSettings(budget_mb=100.0, resolution=0.05)
    fit, fail, _, _ = largest_batch._search(try_batch, (4, 8), 100.0, settings)
    assert fit.batch_size == 29 and fail.batch_size == 30 and fail.why_not == "crashed (exit 139)"
    assert all(b <= 29 for b in tried if b < 30)  # every batch below 30 tried fitted


def test_when_even_the_probe_does_not_fit_the_search_halves():
    try_batch, tried = _arithmetic_trials(fits_up_to=3)
    settings = largest_batch.MaxBatchSettings(budget_mb=16.0, resolution=0.05)
    fit, fail, estimate, _ = largest_batch._search(try_batch, (16, 32), 16.0, settings)
    assert tried[:3] == [16, 8, 4] and estimate is None
    assert (fit.batch_size, fail.batch_size) == (3, 4)


def test_a_trial_whose_process_exits_139_does_not_fit_and_leaves_no_process():
    spec, config = small_classifier(), tiny_config(models=("small",))
    settings = largest_batch.MaxBatchSettings(budget_mb=64.0)
    args = (spec, "float32", False, CRASH_FROM, config, settings)
    trial = largest_batch.run_trial(crashing_trial, args, CRASH_FROM, cpu_bfc_environment(64), timeout=300)
    assert not trial.fits and trial.why_not == "crashed (exit 139)" and trial.batch_size == CRASH_FROM
    assert not multiprocessing.active_children()


def test_a_trial_past_its_time_limit_is_killed_and_does_not_fit():
    trial = largest_batch.run_trial(sleeping_trial, (), 64, {}, timeout=2)
    assert not trial.fits and trial.why_not == "timed out after 2 s"
    assert not multiprocessing.active_children()


def test_a_sigterm_during_a_trial_ends_its_process_too():
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are installed from the main thread only")
    timer = threading.Timer(3.0, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as stopped:
        largest_batch.run_trial(sleeping_trial, (), 64, {}, timeout=300)
    timer.join()
    assert stopped.value.code == 128 + signal.SIGTERM
    assert not multiprocessing.active_children()  # killed, not left to finish its trial
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.parametrize(
    "changes, has_gpu, message",
    [
        ({}, False, "budget_mb cannot be None on a CPU.*give a memory budget.*budget_mb=None"),
        ({"budget_mb": 0.5}, False, "budget_mb must be at least 1 MiB.*budget_mb=0.5"),
        ({"budget_mb": True}, False, "budget_mb must be a number or None.*budget_mb=True"),
        ({"budget_mb": 64.0, "resolution": 1.5}, False, "resolution=1.5"),
        ({"budget_mb": 64.0, "max_trials": 2}, False, "max_trials=2"),
        ({"budget_mb": 64.0, "timeout": 0}, False, "timeout=0"),
    ],
)
def test_settings_errors_name_the_value(changes, has_gpu, message):
    with pytest.raises(ConfigError, match=message):
        largest_batch.MaxBatchSettings(**changes).validate(has_gpu)
    largest_batch.MaxBatchSettings().validate(has_gpu=True)  # a GPU's memory is the default budget


@pytest.mark.slow
def test_the_largest_batch_of_a_tiny_model_fits_its_budget_and_the_next_one_tried_does_not():
    # Trials from CRASH_FROM up die as a segmentation fault would; the search must count them as not fitting.
    spec, config = small_classifier(), tiny_config(models=("small",), precisions=("fp32",), batch_sizes=(64,))
    settings = largest_batch.MaxBatchSettings(budget_mb=128.0, resolution=0.5)
    lines = []
    (record,) = benchmark.max_batch(config, {"small": spec}, lines.append, settings=settings, trial=crashing_trial)
    assert record.model == "small" and record.allocator == "CPU:0 BFC" and record.budget_mb == 128.0
    assert record.batch_size < CRASH_FROM <= record.next_tried and record.why_not == "crashed (exit 139)"
    assert record.next_tried - record.batch_size <= 0.5 * record.batch_size
    assert record.peak_mb <= 128.0 and record.ratio_to_float32 == 1.0 and record.trials == len(lines)
    assert f"small float32 xla=false batch={record.batch_size}: fits" in "\n".join(lines)
    assert not multiprocessing.active_children()
