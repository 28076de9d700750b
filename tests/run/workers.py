"""Two local worker processes of `scripts/train_classifier.py --strategy=multi_worker`, for the slow tests.

Each worker gets its own `TMPDIR` (where a non-chief worker writes its
private copies) and a `TF_CONFIG` naming both on 127.0.0.1. Their output is
read line by line on threads, so a test can wait for a step line and then
signal a worker.
"""

import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time

import tensorflow as tf

__all__ = ["Workers", "free_ports", "latest_checkpoint", "read_checkpoint"]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def read_checkpoint(path):
    """Every tensor of the checkpoint `path` (a prefix), by key."""
    reader = tf.train.load_checkpoint(path)
    return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()}


def latest_checkpoint(directory):
    """Every tensor of the newest checkpoint in `directory`, by key."""
    path = tf.train.latest_checkpoint(directory)
    assert path, f"no checkpoint in {directory}"
    return read_checkpoint(path)


class Workers:
    """Starts `count` workers of one run; `wait()` returns each one's (exit code, output).

    Args:
        tmp_path: The test's directory: `tmp<i>` there is worker i's TMPDIR.
        flags: The script's flags, the same for every worker.
        script: The script under `scripts/`.
        count: How many workers.
        environment: Worker i's own variables, `environment(i)`; default: a `TF_CONFIG` naming every
            worker on 127.0.0.1 (`cluster`).
        base: The environment they are added to; default `os.environ`.
    """

    def __init__(self, tmp_path, flags, script="train_classifier.py", count=2, environment=None, base=None):
        self.cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(count)]}
        if environment is None:

            def environment(index):
                return {"TF_CONFIG": json.dumps({"cluster": self.cluster, "task": {"type": "worker", "index": index}})}

        self.lines = [[] for _ in range(count)]
        self._queues = [queue.Queue() for _ in range(count)]
        self.processes = []
        self._readers = []
        for index in range(count):
            (tmp_path / f"tmp{index}").mkdir(parents=True, exist_ok=True)
            env = dict(
                os.environ if base is None else base,
                TF_CPP_MIN_LOG_LEVEL="2",
                CUDA_VISIBLE_DEVICES="",
                TMPDIR=str(tmp_path / f"tmp{index}"),
                **environment(index),
            )
            process = subprocess.Popen(
                [sys.executable, os.path.join(ROOT, "scripts", script), *flags],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
                cwd=ROOT,
            )
            self.processes.append(process)
            reader = threading.Thread(target=self._read, args=(index,), daemon=True)
            reader.start()
            self._readers.append(reader)

    def _read(self, index):
        for line in self.processes[index].stdout:
            self.lines[index].append(line.rstrip("\n"))
            self._queues[index].put(line)
        self._queues[index].put(None)

    def wait_for_line(self, index, predicate, timeout=300):
        """Blocks until worker `index` prints a line `predicate` accepts; returns it."""
        deadline = time.monotonic() + timeout
        while True:
            line = self._queues[index].get(timeout=max(0.0, deadline - time.monotonic()))
            if line is None:
                raise AssertionError(f"worker {index} ended without the line:\n" + "\n".join(self.lines[index][-40:]))
            if predicate(line.rstrip("\n")):
                return line.rstrip("\n")

    def wait(self, timeout=600):
        """Waits for every worker (killing all on timeout); returns [(exit code, output)]."""
        try:
            for process in self.processes:
                process.wait(timeout=timeout)
        finally:
            for process in self.processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        for reader in self._readers:
            reader.join(timeout=30)  # the rest of the output
        return [(process.returncode, "\n".join(lines)) for process, lines in zip(self.processes, self.lines)]
