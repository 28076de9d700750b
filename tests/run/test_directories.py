"""Tests for tfmp/run/directories.py: a run's default name, one run per directory, stale locks, a failed start."""

import json
import os
import re
import socket
import subprocess
import sys

import pytest

from tfmp.run import directories, output


def _write_lock(directory, **record):
    path = os.path.join(directory, directories.LOCK_FILE)
    with open(path, "w") as f:
        json.dump({"host": socket.gethostname(), **record}, f)
    return path


def _dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_lock_file_names_this_process_and_goes_on_release(tmp_path):
    with directories.RunDirLock(str(tmp_path)) as lock:
        assert lock.held
        holder = directories.holder(str(tmp_path))
        assert (holder.pid, holder.host) == (os.getpid(), socket.gethostname())
    assert not lock.held and os.listdir(tmp_path) == []
    lock.release()  # twice is harmless


def test_a_second_run_is_refused_naming_the_directory_and_the_holder(tmp_path):
    with directories.RunDirLock(str(tmp_path)):
        with pytest.raises(directories.RunDirInUseError) as error:
            directories.RunDirLock(str(tmp_path)).acquire()
        assert os.path.exists(tmp_path / directories.LOCK_FILE)  # the refused one leaves the holder's file alone
    message = str(error.value)
    assert str(tmp_path) in message and f"pid {os.getpid()} on host {socket.gethostname()}" in message


def test_a_holder_in_another_process_is_refused_until_it_ends(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from tfmp.run import directories\n"
            f"lock = directories.RunDirLock({str(tmp_path)!r}).acquire()\n"
            "print('held', flush=True)\n"
            "sys.stdin.read()\n"
            "lock.release()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
    )
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(directories.RunDirInUseError, match=f"pid {holder.pid} on host"):
            directories.RunDirLock(str(tmp_path)).acquire()
    finally:
        holder.communicate("")
    assert holder.returncode == 0 and not os.path.exists(tmp_path / directories.LOCK_FILE)
    directories.RunDirLock(str(tmp_path)).acquire().release()


def test_a_lock_left_by_a_killed_process_is_taken_over_saying_so(tmp_path):
    dead = _dead_pid()
    _write_lock(str(tmp_path), pid=dead, started="2024-01-01T00:00:00+00:00")
    notes = []
    with output.lines_to(notes.append), directories.RunDirLock(str(tmp_path)):
        assert directories.holder(str(tmp_path)).pid == os.getpid()
    assert len(notes) == 1 and f"pid {dead}" in notes[0] and "no longer running" in notes[0]


def test_a_reused_pid_is_not_the_holder(tmp_path):
    other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        start_time = directories._start_time(other.pid)
        if start_time is None:
            pytest.skip("no /proc here: a live pid cannot be told from a reused one")
        # The same pid, alive, but a process started at another time: the holder is gone.
        _write_lock(str(tmp_path), pid=other.pid, start_time=start_time - 1)
        notes = []
        with output.lines_to(notes.append):
            directories.RunDirLock(str(tmp_path)).acquire().release()
        assert len(notes) == 1 and "no longer running" in notes[0]
        # With its real start time it is the holder.
        _write_lock(str(tmp_path), pid=other.pid, start_time=start_time)
        with pytest.raises(directories.RunDirInUseError, match=f"pid {other.pid} "):
            directories.RunDirLock(str(tmp_path)).acquire()
    finally:
        other.communicate(b"")


def test_a_killed_holder_not_yet_reaped_is_gone(tmp_path):
    import signal
    import time

    other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    start_time = directories._start_time(other.pid)
    if start_time is None:
        pytest.skip("no /proc here")
    _write_lock(str(tmp_path), pid=other.pid, start_time=start_time)
    os.kill(other.pid, signal.SIGKILL)
    try:
        while directories._stat(other.pid)[:1] != ["Z"]:  # a zombie until its parent (this test) waits for it
            time.sleep(0.01)
        notes = []
        with output.lines_to(notes.append):
            directories.RunDirLock(str(tmp_path)).acquire().release()
        assert len(notes) == 1 and f"pid {other.pid}" in notes[0]
    finally:
        other.wait()


def test_a_lock_from_another_host_is_not_guessed_at(tmp_path):
    path = _write_lock(str(tmp_path), pid=1234, host="elsewhere.example.com")
    with pytest.raises(directories.RunDirInUseError) as error:
        directories.RunDirLock(str(tmp_path)).acquire()
    message = str(error.value)
    assert "pid 1234 on host elsewhere.example.com" in message and f"delete the lock file {path}" in message
    assert directories.holder(str(tmp_path)).host == "elsewhere.example.com"  # left as it was


def test_make_dirs_reports_what_it_created_and_cleanup_removes_only_empty_ones(tmp_path):
    (tmp_path / "logs").mkdir()
    created = directories.make_dirs(str(tmp_path / "logs" / "run" / "checkpoints"))
    assert created == [str(tmp_path / "logs" / "run"), str(tmp_path / "logs" / "run" / "checkpoints")]
    assert directories.make_dirs(str(tmp_path / "logs" / "run")) == []
    directories.remove_empty_dirs(created)
    assert os.listdir(tmp_path) == ["logs"] and os.listdir(tmp_path / "logs") == []
    created = directories.make_dirs(str(tmp_path / "logs" / "run" / "checkpoints"))
    (tmp_path / "logs" / "run" / "events").write_text("")
    directories.remove_empty_dirs(created)
    assert os.listdir(tmp_path / "logs" / "run") == ["events"]


@pytest.mark.parametrize(
    "name, expected",
    [
        ("text_classifier", "text_classifier_float32_ls-none"),
        ("my model/v2", "my_model_v2_float32_ls-none"),  # one path component, whatever the name holds
        ("..", "float32_ls-none"),
        ("", "float32_ls-none"),
    ],
)
def test_the_default_run_name_carries_the_tasks_name_safely(name, expected):
    run_name = directories.default_run_name("float32", "none", name=name)
    assert re.fullmatch(r"\d{8}-\d{6}_" + re.escape(expected), run_name), run_name


def test_the_tensorboard_dir_is_also_the_deprecated_writes_with_one_warning(tmp_path):
    dirs = directories.Directories(str(tmp_path), str(tmp_path / "tb"), str(tmp_path / "c"), str(tmp_path / "c"))
    with pytest.warns(DeprecationWarning) as caught:
        assert dirs.writes == dirs.tensorboard_dir == str(tmp_path / "tb")
    assert [str(w.message) for w in caught] == [
        "`Directories.writes` is deprecated; use `Directories.tensorboard_dir`. It will be removed in tfmp 0.3."
    ]
