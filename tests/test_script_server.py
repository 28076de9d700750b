"""Tests for tests/script_server.py: a served run behaves as `subprocess.run` of a fresh process."""

import os
import subprocess
import sys

import pytest
import script_server

SCRIPT = """
import os, sys
import tensorflow as tf  # already imported by the server
print("argv", sys.argv[1:], "cwd", os.getcwd(), "var", os.environ.get("SERVED_VAR"), "path0", sys.path[0])
print("to stderr", file=sys.stderr)
if "--leave-a-mark" in sys.argv:
    tf.marked = True
    os.environ["LEFT_BEHIND"] = "1"
print("marked", getattr(tf, "marked", False), "left", os.environ.get("LEFT_BEHIND"))
if "--sleep" in sys.argv:
    import time
    time.sleep(60)
sys.exit(sys.argv[-1] if sys.argv[-1].startswith("error") else int(sys.argv[-1]))
"""


def _env(**extra):
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", **extra)


def test_a_served_run_has_its_arguments_environment_directory_streams_and_exit_code(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    work = tmp_path / "work"
    work.mkdir()
    argv = [sys.executable, str(script), "--leave-a-mark", "3"]
    served = script_server.run(argv, env=_env(SERVED_VAR="x"), cwd=work, timeout=120)
    fresh = script_server.run(argv, env=_env(SERVED_VAR="x"), cwd=work, timeout=120, fresh=True)
    expected = f"argv ['--leave-a-mark', '3'] cwd {work} var x path0 {tmp_path}\nmarked True left 1\n"
    assert (served.returncode, served.stdout) == (fresh.returncode, fresh.stdout) == (3, expected)
    assert "to stderr\n" in served.stderr and "to stderr\n" in fresh.stderr
    # What one run changed (a module's state, the environment) does not reach the next.
    again = script_server.run([sys.executable, str(script), "0"], env=_env(), cwd=work, timeout=120)
    assert again.returncode == 0 and again.stdout.endswith("marked False left None\n")
    # sys.exit("message"): the message on stderr and exit code 1, as Python does.
    message = script_server.run([sys.executable, str(script), "error: bad"], env=_env(), cwd=work, timeout=120)
    assert message.returncode == 1 and message.stderr.endswith("error: bad\n")


def test_a_served_run_past_its_timeout_is_killed_and_raises_as_subprocess_run_does(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    with pytest.raises(subprocess.TimeoutExpired):
        script_server.run([sys.executable, str(script), "--sleep", "0"], env=_env(), cwd=tmp_path, timeout=2)
    # The server carries on.
    after = script_server.run([sys.executable, str(script), "0"], env=_env(), cwd=tmp_path, timeout=120)
    assert after.returncode == 0


def test_a_child_that_cannot_start_the_file_exits_1_naming_why_and_the_server_carries_on(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    missing = tmp_path / "no_such_directory"
    failed = script_server.run([sys.executable, str(script), "0"], env=_env(), cwd=missing, timeout=120)
    assert failed.returncode == 1 and "FileNotFoundError" in failed.stderr and str(missing) in failed.stderr
    after = script_server.run([sys.executable, str(script), "0"], env=_env(), cwd=tmp_path, timeout=120)
    assert after.returncode == 0 and after.stdout.startswith("argv ['0']")
