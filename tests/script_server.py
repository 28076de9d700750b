"""Runs `python3 FILE.py FLAGS...` as `subprocess.run` would, without importing TensorFlow each time.

Most script tests start a script and wait for it: a usage error, `--help`, a
short run. A fresh `python3 scripts/X.py` spends about 7 of its seconds
importing TensorFlow, Keras and tfmp. `run` asks a server instead, one per
test process: it imported them once, and for each run it forks a child that
becomes the script's process. The child takes the run's arguments,
environment, working directory and `sys.path[0]` (the file's folder), points
stdout and stderr at files, runs the file as `__main__` (as `python3 FILE`
does), and exits with the code the process would have, after Python's exit
handlers. Each run is still a process of its own: nothing one run changes
reaches another or the server.

What differs from a fresh process: TensorFlow is already imported, so the
lines it logs while loading are not in the run's stderr, and the variables
read while it loads are the server's. `run(..., fresh=True)`, or an
environment that changes one of those variables, starts a fresh process. A
run whose working directory does not exist exits 1 with the error on its
stderr, where `subprocess.run` would raise it.
"""

from __future__ import annotations

import atexit
import json
import os
import pathlib
import runpy
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Read while TensorFlow or tfmp loads: a run that sets them otherwise gets a server of its own.
_READ_AT_IMPORT = ("TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS", "PYTHONPATH", "PYTHONWARNINGS", "PYTHONHASHSEED")

_servers: dict[tuple[tuple[str, str], ...], subprocess.Popen] = {}


def _server(env: dict[str, str]) -> subprocess.Popen:
    key = tuple(sorted((name, env[name]) for name in _READ_AT_IMPORT if name in env))
    server = _servers.get(key)
    if server is None or server.poll() is not None:
        server = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=ROOT,
        )
        _servers[key] = server
        ready = server.stdout.readline()
        if ready.strip() != "ready":
            raise RuntimeError(f"the script server did not start: {ready!r}")
    return server


@atexit.register
def _stop_servers() -> None:
    for server in _servers.values():
        if server.poll() is None:
            server.stdin.close()
            server.wait(timeout=30)


def run(
    argv: list[str], *, env: dict[str, str], cwd: str, timeout: float, fresh: bool = False
) -> subprocess.CompletedProcess:
    """`subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)`.

    `argv` is `[sys.executable, FILE.py, *flags]` or a console command of this
    Python's; any other command, or `fresh=True`, runs as a fresh process.
    """
    argv = [os.fspath(argument) for argument in argv]
    script = None if fresh else _python_file(argv)
    if script is None:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    server = _server(env)
    with tempfile.TemporaryDirectory(prefix="script-run-") as directory:
        out, err = os.path.join(directory, "stdout"), os.path.join(directory, "stderr")
        request = {"argv": script, "env": env, "cwd": os.fspath(cwd), "out": out, "err": err, "timeout": timeout}
        server.stdin.write(json.dumps(request) + "\n")
        server.stdin.flush()
        reply = json.loads(server.stdout.readline())
        stdout, stderr = (pathlib.Path(path).read_text(errors="replace") for path in (out, err))
    if reply["timed_out"]:
        raise subprocess.TimeoutExpired(argv, timeout, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(argv, reply["returncode"], stdout, stderr)


def _python_file(argv: list[str]) -> list[str] | None:
    """The file `argv` runs with this Python and its arguments, or None for any other command.

    `[sys.executable, FILE.py, *flags]`, or a console command installed for
    this Python (`tfmp-train-gan`: a file whose first line is `#!` and
    `sys.executable`).
    """
    if len(argv) >= 2 and argv[0] == sys.executable and argv[1].endswith(".py"):
        return argv[1:]
    try:
        with open(argv[0], "rb") as command:
            first = command.readline().strip()
    except OSError:
        return None
    return argv if first == b"#!" + os.fsencode(sys.executable) else None


def _preload() -> None:
    """Imports what every script imports first: TensorFlow (quietly, as the scripts do), Keras and tfmp."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    try:
        from tfmp_scripts import common  # noqa: F401  (as the scripts import it once installed)
    except ImportError:
        import common  # noqa: F401
    import tfmp.run.training  # noqa: F401

    sys.path.pop(0)


def _exit_code(code: object) -> int:
    """The exit code of `sys.exit(code)`; a message is printed to stderr, as Python does."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _child(request: dict) -> None:
    """In the forked child: becomes the script's process, runs the file as `__main__` and exits."""
    os.setpgid(0, 0)
    for fd, path in ((1, request["out"]), (2, request["err"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    script = os.path.abspath(request["argv"][0])
    sys.argv = list(request["argv"])
    sys.path[0] = os.path.dirname(script)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as e:
        code = _exit_code(e.code)
    except BaseException:
        traceback.print_exc()
        code = 1
    # Python's shutdown, less the teardown of every module (a second or two with TensorFlow loaded).
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


def _serve() -> None:
    _preload()
    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            try:
                _child(request)
            finally:  # only if the child failed before running the file (a bad cwd, say): never back in this loop
                with open(request["err"], "a") as err:
                    traceback.print_exc(file=err)
                os._exit(1)
        deadline = time.monotonic() + request["timeout"]
        timed_out = False
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                timed_out = True
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:  # it ended just now
                    pass
                _, status = os.waitpid(pid, 0)
                break
            time.sleep(0.01)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status), "timed_out": timed_out}), flush=True)


if __name__ == "__main__":
    _serve()
