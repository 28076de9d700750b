"""Tests for tfmp/run/preemption.py."""

import os
import re
import signal
import time

import numpy as np
import pytest
import workers

from tfmp.run import preemption


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_becomes_a_request_and_the_handler_comes_back(signum):
    before = signal.getsignal(signum)
    with preemption.PreemptionGuard() as guard:
        assert guard.active and not guard.requested
        signal.raise_signal(signum)  # would kill the test process (or raise KeyboardInterrupt) unguarded
        assert guard.requested and guard.signum == signum
    assert signal.getsignal(signum) is before


def test_a_second_signal_goes_to_the_previous_handler():
    received = []
    before = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    try:
        with preemption.PreemptionGuard() as guard:
            signal.raise_signal(signal.SIGTERM)
            assert received == []
            signal.raise_signal(signal.SIGTERM)
            assert received == [signal.SIGTERM] and guard.signum == signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, before)


def test_preempted_says_where_the_checkpoint_is_and_how_to_resume():
    error = preemption.Preempted(signal.SIGTERM, 12, "/runs/a/checkpoints/ckpt-12")
    assert error.exit_code == 143 and error.step == 12
    message = str(error)
    assert "SIGTERM" in message and "step 12" in message and "/runs/a/checkpoints/ckpt-12" in message
    # In the library's terms (the settings); the scripts translate them into their flags.
    assert "resume=True" in message and "the same run_name" in message
    assert "--" not in message and "scripts/" not in message


# --- several workers: fast twins of the two-process tests below --------------------------------------------------

TWO = {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]}
# What TensorFlow 2.21 raised on the survivor, measured with two local workers: worker 1 SIGKILLed (the
# coordination service's heartbeat report), and the chief SIGKILLed (worker 1's next remote call).
UNHEALTHY = """Graph execution error:

Detected at node CollectiveReduceV2 defined at (most recent call last):
Collective ops is aborted by: Error reported from /job:worker/task:1: The following tasks are unhealthy (stopped \
sending heartbeats):
/job:worker/replica:0/task:1
The tasks have crashed. Check the task logs for an earlier error, or scheduler events (e.g. preemption, eviction) to \
debug further.
The error could be from a previous operation. Restart your program to reset.
  [[{{node CollectiveReduceV2}}]] [Op:__inference_agree_33]"""
SOCKET_CLOSED = """Graph execution error:

Collective ops is aborted by: Socket closed
Additional GRPC error information from remote target /job:worker/replica:0/task:0 while calling \
/tensorflow.WorkerService/RecvBuf:
:UNKNOWN:Error received from peer  {grpc_status:14, grpc_message:"Socket closed"}"""


def test_workers_are_named_with_their_address_the_chief_first():
    assert preemption.worker_names(TWO) == ["worker 0 (10.0.0.1:2222)", "worker 1 (10.0.0.2:2222)"]
    assert preemption.worker_names({"worker": ["b:1"], "chief": ["a:1"]}) == ["chief 0 (a:1)", "worker 0 (b:1)"]


@pytest.mark.parametrize(
    "text, own, missing",
    [
        (UNHEALTHY, ("worker", 0), ["worker 1 (10.0.0.2:2222)"]),  # the unhealthy list, not "reported from"
        (SOCKET_CLOSED, ("worker", 1), ["worker 0 (10.0.0.1:2222)"]),
        ("Collective ops is aborted by: Deadline Exceeded", ("worker", 0), []),
    ],
)
def test_a_lost_worker_is_named_with_its_address_and_the_message_says_how_to_resume(text, own, missing):
    import tensorflow as tf

    lost = preemption.worker_lost(tf.errors.UnavailableError(None, None, text), TWO, own, 7, "/r/ckpt-6", 30.0)
    assert lost.missing == missing and lost.step == 7 and lost.exit_code == preemption.WORKER_LOST_EXIT_CODE == 69
    message = str(lost)
    who = missing[0] if missing else "another worker (TensorFlow's error names none)"
    assert message.startswith(f"lost {who}: it stopped answering (no heartbeat for up to worker_timeout=30 seconds")
    assert f"so {own[0]} {own[1]} stopped after step 7. The run's newest checkpoint, /r/ckpt-6, is intact." in message
    assert "start every worker again with resume=True (and the same run_name)" in message
    assert message.endswith(next(line for line in text.splitlines() if "aborted by" in line))
    none_yet = preemption.worker_lost(tf.errors.UnavailableError(None, None, text), TWO, own, 1, None, 5)
    assert "No checkpoint had been written yet, so the run starts again from step 0." in str(none_yet)


def test_a_stop_in_a_cluster_names_the_signalled_worker_and_exits_75_on_every_worker():
    error = preemption.Preempted(
        signal.SIGTERM, 9, "/runs/a/checkpoints/ckpt-9", {"worker 1 (10.0.0.2:2222)": signal.SIGTERM}
    )
    assert error.exit_code == preemption.CLUSTER_EXIT_CODE == 75 and error.step == 9
    assert str(error) == (
        "training stopped after step 9: worker 1 (10.0.0.2:2222) received SIGTERM, so every worker saved its state "
        "at step 9 and stopped; the run's checkpoint is /runs/a/checkpoints/ckpt-9. To resume, start every worker "
        "again with resume=True (and the same run_name)."
    )


def test_cluster_stop_gathers_every_replicas_signal_in_one_collective():
    # MirroredStrategy over conftest's two logical CPUs: one worker with two replicas, so the all-gather runs
    # for real; which worker was signalled is the two-process test's to show.
    from tfmp.run import distribute

    mirrored = distribute.make_strategy("mirrored")
    stop = preemption.ClusterStop(mirrored, ["worker 0 (10.0.0.1:2222)"])
    assert stop(None) == {}
    assert stop(signal.SIGTERM) == {"worker 0 (10.0.0.1:2222)": signal.SIGTERM}
    with pytest.raises(ValueError, match=r"one name per worker of the strategy \(2 replicas, 2 per worker\)"):
        preemption.ClusterStop(mirrored, preemption.worker_names(TWO))


# --- several workers: two local processes of scripts/train_classifier.py ----------------------------------------
# workers.py starts them; the fast twins of these tests are below them.


def _classifier_flags(logdir, run_name, *extra):
    return [
        "--strategy=multi_worker",
        "--dataset=digits",
        "--alpha=0.35",
        "--batch_size=16",
        "--epochs=2",
        "--steps_per_epoch=4",
        "--warmup_steps=0",
        "--precision=float32",
        "--deterministic",
        "--console=lines",
        f"--logdir={logdir}",
        f"--run_name={run_name}",
        *extra,
    ]


def _step_line(epoch, batch):
    return lambda line: line.startswith(f"({epoch}, {batch}),")


def _states(tmp_path, logdir, run_name, step=8):
    """Checkpoint `step` of the chief and of worker 1 (its private copy), without TensorFlow's save counter."""
    run = logdir / run_name / "checkpoints"
    worker_1 = tmp_path / "tmp1" / "tfmp_workertemp_worker_1" / str(run).lstrip(os.sep)
    return [
        {k: v for k, v in workers.read_checkpoint(str(d / f"ckpt-{step}")).items() if not k.startswith("save_counter")}
        for d in (run, worker_1)
    ]


@pytest.mark.slow
def test_a_sigterm_to_worker_1_stops_both_at_one_step_and_the_resumed_epoch_ends_bit_identical(tmp_path):
    logdir = tmp_path / "logs"
    full = workers.Workers(tmp_path / "full", _classifier_flags(logdir, "full"))
    for code, out in full.wait():
        assert code == 0, out[-3000:]
    expected = {step: _states(tmp_path / "full", logdir, "full", step) for step in (4, 8)}

    cut = workers.Workers(tmp_path / "cut", _classifier_flags(logdir, "cut"))
    cut.wait_for_line(1, _step_line(0, 0))  # worker 1 has done step 1; the signal lands in step 1 or 2
    cut.processes[1].send_signal(signal.SIGTERM)
    stopped = cut.wait()
    steps = set()
    for code, out in stopped:
        assert code == preemption.CLUSTER_EXIT_CODE == 75, out[-3000:]
        match = re.search(r"training stopped after step (\d+): worker 1 \(127\.0\.0\.1:\d+\) received SIGTERM", out)
        assert match, out[-3000:]
        steps.add(int(match.group(1)))
        assert "start every worker again with --resume" in out
    (step,) = steps  # both workers stopped after the same step
    assert 1 <= step < 4  # inside the first epoch: worker 1's own BatchNorm statistics matter
    run_checkpoints = logdir / "cut" / "checkpoints"
    assert f"the run's checkpoint is {run_checkpoints / f'ckpt-{step}'}" in stopped[1][1]
    assert workers.read_checkpoint(str(run_checkpoints / f"ckpt-{step}"))  # written by the chief, readable

    resumed = workers.Workers(tmp_path / "cut", _classifier_flags(logdir, "cut", "--resume"))
    for code, out in resumed.wait():
        assert code == 0, out[-3000:]
        assert f"resumed from {run_checkpoints / f'ckpt-{step}'} at step {step}" in out
    # Every tensor of both workers' checkpoints: weights, optimizer slots, the step, and each worker's own
    # BatchNorm statistics (`workers/<i>`), at the end of the epoch the resume finished.
    for final, uninterrupted in zip(_states(tmp_path / "cut", logdir, "cut", 4), expected[4]):
        assert final.keys() == uninterrupted.keys()
        for key, value in uninterrupted.items():
            np.testing.assert_array_equal(final[key], value, err_msg=f"ckpt-4: {key}")
    # And the next epoch, which the resumed process trains with its second fit().
    for final, uninterrupted in zip(_states(tmp_path / "cut", logdir, "cut", 8), expected[8]):
        for key, value in uninterrupted.items():
            np.testing.assert_array_equal(final[key], value, err_msg=f"ckpt-8: {key}")


@pytest.mark.slow
def test_a_sigkilled_worker_stops_the_other_within_the_timeout_naming_it_and_a_restart_resumes(tmp_path):
    logdir = tmp_path / "logs"
    flags = _classifier_flags(logdir, "kill", "--checkpoint_every=2", "--worker_timeout=5")
    run = workers.Workers(tmp_path, flags)
    run.wait_for_line(1, _step_line(0, 2))  # after step 3: ckpt-2 is written
    run.processes[1].kill()
    killed_at = time.monotonic()
    run.processes[0].wait(timeout=120)
    waited = time.monotonic() - killed_at
    (code, out), _ = run.wait()
    assert code == preemption.WORKER_LOST_EXIT_CODE == 69, out[-3000:]
    assert waited < 5 + 15, waited  # the heartbeat timeout, plus the time to notice and exit
    address = run.cluster["worker"][1]
    assert f"lost worker 1 ({address})" in out and "--worker_timeout=5" in out
    assert "start every worker again with --resume" in out
    newest = re.search(r"The run's newest checkpoint, (\S+), is intact", out).group(1)
    step = int(newest.rsplit("-", 1)[1])
    assert step >= 2

    restarted = workers.Workers(tmp_path, [*flags, "--resume"])
    for code, out in restarted.wait():
        assert code == 0, out[-3000:]
        assert f"resumed from {newest} at step {step}" in out
