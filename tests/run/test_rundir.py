"""Tests for tfmp/run/rundir.py: one run per directory, stale locks, and cleaning up a failed start."""

import json
import os
import socket
import subprocess
import sys

import pytest

from tfmp.run import output, rundir

RUNDIR_PY = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tfmp", "run", "rundir.py"
)


def _write_lock(directory, **record):
    path = os.path.join(directory, rundir.LOCK_FILE)
    with open(path, "w") as f:
        json.dump({"host": socket.gethostname(), **record}, f)
    return path


def _dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_lock_file_names_this_process_and_goes_on_release(tmp_path):
    with rundir.RunDirLock(str(tmp_path)) as lock:
        assert lock.held
        holder = rundir.holder(str(tmp_path))
        assert (holder.pid, holder.host) == (os.getpid(), socket.gethostname())
    assert not lock.held and os.listdir(tmp_path) == []
    lock.release()  # twice is harmless


def test_a_second_run_is_refused_naming_the_directory_and_the_holder(tmp_path):
    with rundir.RunDirLock(str(tmp_path)):
        with pytest.raises(rundir.RunDirInUseError) as error:
            rundir.RunDirLock(str(tmp_path)).acquire()
        assert os.path.exists(tmp_path / rundir.LOCK_FILE)  # the refused one leaves the holder's file alone
    message = str(error.value)
    assert str(tmp_path) in message and f"pid {os.getpid()} on host {socket.gethostname()}" in message


def test_a_holder_in_another_process_is_refused_until_it_ends(tmp_path):
    # The holder imports only rundir.py (not TensorFlow): quick to start.
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('rundir', {RUNDIR_PY!r})\n"
            "rundir = sys.modules['rundir'] = importlib.util.module_from_spec(spec)\n"
            "spec.loader.exec_module(rundir)\n"
            f"lock = rundir.RunDirLock({str(tmp_path)!r}).acquire()\n"
            "print('held', flush=True)\n"
            "sys.stdin.read()\n"
            "lock.release()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(rundir.RunDirInUseError, match=f"pid {holder.pid} on host"):
            rundir.RunDirLock(str(tmp_path)).acquire()
    finally:
        holder.communicate("")
    assert holder.returncode == 0 and not os.path.exists(tmp_path / rundir.LOCK_FILE)
    rundir.RunDirLock(str(tmp_path)).acquire().release()


def test_a_lock_left_by_a_killed_process_is_taken_over_saying_so(tmp_path):
    dead = _dead_pid()
    _write_lock(str(tmp_path), pid=dead, started="2024-01-01T00:00:00+00:00")
    notes = []
    with output.lines_to(notes.append), rundir.RunDirLock(str(tmp_path)):
        assert rundir.holder(str(tmp_path)).pid == os.getpid()
    assert len(notes) == 1 and f"pid {dead}" in notes[0] and "no longer running" in notes[0]


def test_a_reused_pid_is_not_the_holder(tmp_path):
    other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        start_time = rundir._start_time(other.pid)
        if start_time is None:
            pytest.skip("no /proc here: a live pid cannot be told from a reused one")
        # The same pid, alive, but a process started at another time: the holder is gone.
        _write_lock(str(tmp_path), pid=other.pid, start_time=start_time - 1)
        notes = []
        with output.lines_to(notes.append):
            rundir.RunDirLock(str(tmp_path)).acquire().release()
        assert len(notes) == 1 and "no longer running" in notes[0]
        # With its real start time it is the holder.
        _write_lock(str(tmp_path), pid=other.pid, start_time=start_time)
        with pytest.raises(rundir.RunDirInUseError, match=f"pid {other.pid} "):
            rundir.RunDirLock(str(tmp_path)).acquire()
    finally:
        other.communicate(b"")


def test_a_killed_holder_not_yet_reaped_is_gone(tmp_path):
    import signal
    import time

    other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    start_time = rundir._start_time(other.pid)
    if start_time is None:
        pytest.skip("no /proc here")
    _write_lock(str(tmp_path), pid=other.pid, start_time=start_time)
    os.kill(other.pid, signal.SIGKILL)
    try:
        while rundir._stat(other.pid)[:1] != ["Z"]:  # a zombie until its parent (this test) waits for it
            time.sleep(0.01)
        notes = []
        with output.lines_to(notes.append):
            rundir.RunDirLock(str(tmp_path)).acquire().release()
        assert len(notes) == 1 and f"pid {other.pid}" in notes[0]
    finally:
        other.wait()


def test_a_lock_from_another_host_is_not_guessed_at(tmp_path):
    path = _write_lock(str(tmp_path), pid=1234, host="elsewhere.example.com")
    with pytest.raises(rundir.RunDirInUseError) as error:
        rundir.RunDirLock(str(tmp_path)).acquire()
    message = str(error.value)
    assert "pid 1234 on host elsewhere.example.com" in message and f"delete the lock file {path}" in message
    assert rundir.holder(str(tmp_path)).host == "elsewhere.example.com"  # left as it was


def test_make_dirs_reports_what_it_created_and_cleanup_removes_only_empty_ones(tmp_path):
    (tmp_path / "logs").mkdir()
    created = rundir.make_dirs(str(tmp_path / "logs" / "run" / "checkpoints"))
    assert created == [str(tmp_path / "logs" / "run"), str(tmp_path / "logs" / "run" / "checkpoints")]
    assert rundir.make_dirs(str(tmp_path / "logs" / "run")) == []
    rundir.remove_empty_dirs(created)
    assert os.listdir(tmp_path) == ["logs"] and os.listdir(tmp_path / "logs") == []
    created = rundir.make_dirs(str(tmp_path / "logs" / "run" / "checkpoints"))
    (tmp_path / "logs" / "run" / "events").write_text("")
    rundir.remove_empty_dirs(created)
    assert os.listdir(tmp_path / "logs" / "run") == ["events"]
