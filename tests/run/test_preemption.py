"""Tests for tfmp/run/preemption.py."""

import signal

import pytest

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
